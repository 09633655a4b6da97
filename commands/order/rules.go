package order

import (
	"github.com/printpod/pod/commands/catalog"
	"slices"

	"github.com/shopspring/decimal"
)

// SideCodes are the keys allowed in a line's sides. mockup_url is a reference
// image, not a print side.
var SideCodes = []string{"front_side", "front_large", "back", "pocket_chest_left", "pocket_chest_right",
	"left_sleeve", "right_sleeve", "special_location", "mockup_url"}

// MockupSide is the side code of the product mockup image.
const MockupSide = "mockup_url"

// Line-level add-ons and their fee per item.
var LineAddonFees = map[string]decimal.Decimal{
	"fabric_applique":   decimal.RequireFromString("1.50"),
	"lace_applique_emb": decimal.RequireFromString("2.00"),
}

// Order-level add-ons.
var OrderAddons = []string{"carton_box", "scan_label"}

// Techniques and embroidery values.
var (
	PrintingTechniques = []string{"DTG", "DTF"}
	EmbFiles           = []string{"Available", "No EMB file"}
	DesignEmbTypes     = []string{"text only", "vector / cartoon artwork", "Photo to Embroidery"}
	ShippingServices   = []string{"eco", "premium"}
)

const (
	embNoFile       = "No EMB file"
	photoEmbroidery = "Photo to Embroidery"
	maxQuantity     = 1000
	maxLines        = 100
	maxURLLength    = 2048
	maxReferenceID  = 100
	maxNote         = 5000
	maxTags         = 1000
	// maxPartyField bounds each of the customer's and the address's
	// fields, as store platforms do theirs.
	maxPartyField     = 255
	maxPets, maxPets2 = 4, 2
)

// addonAvailable reports whether line add-ons can be used for a variant.
func addonAvailable(category string, requiresYarn []string) bool {
	if category == "tote" || catalog.IsCapOrHat(category) {
		return false
	}
	return len(requiresYarn) == 0
}

func oneOf(v string, set []string) bool { return slices.Contains(set, v) }
