package catalog

import "slices"

// Categories of variants; "cap/hat" rules cover both cap and hat.
var Categories = []string{"hoodie", "sweatshirt", "tshirt", "tote", "cap", "hat"}

// YarnTypes are the yarn_type values a category's variants may require.
var YarnTypes = map[string][]string{
	"hoodie":     {"yarn_6_7mm", "yarn_8_10mm", "yarn_20mm"},
	"sweatshirt": {"yarn_6_7mm", "yarn_8_10mm", "yarn_20mm"},
	"cap":        {"plat_emb", "emb_3d_puff"},
	"hat":        {"plat_emb", "emb_3d_puff"},
	"tshirt":     {},
	"tote":       {},
}

// Store and product statuses.
var (
	StoreStatuses   = []string{"ACTIVE", "INACTIVE", "CREDENTIAL_ERROR"}
	ProductStatuses = []string{"ACTIVE", "ARCHIVED", "DRAFT"}
)

// IsCapOrHat reports whether the "cap/hat" rules apply to category.
func IsCapOrHat(category string) bool { return category == "cap" || category == "hat" }

// KnownCategory reports whether category is one of Categories.
func KnownCategory(category string) bool { return slices.Contains(Categories, category) }
