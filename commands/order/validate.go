package order

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"github.com/printpod/pod/commands/catalog"
	"net/mail"
	"net/url"
	"slices"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/printpod/pod/internal/uri"
	"github.com/printpod/pod/schemas"
	"github.com/shopspring/decimal"
	"golang.org/x/text/unicode/norm"
)

// Variant is what validation and pricing need to know of a catalog variant.
// Lookups are scoped to the caller's account: another account's variant is
// simply absent.
type Variant struct {
	VariantID        uuid.UUID
	ProductID        uuid.UUID
	StoreID          uuid.UUID
	StoreStatus      string
	ProductStatus    string
	Category         string
	RequiresYarnType []string
	Price            decimal.Decimal
	SKU              string
	Title            string
	ImageURL         string // the variant's image, else the product's, else ""
}

// Draft is a validated, priced order ready to become a create command.
type Draft struct {
	StoreID         uuid.UUID
	ReferenceID     string
	Customer        Customer
	ShippingAddress *Address
	LabelLink       string
	TrackingNumber  string
	ShippingService string
	AddonService    []string
	Note            string
	Tags            string
	Force           bool
	Lines           []Line
	Pricing         Pricing
	// ContentHash identifies the order's content for the soft duplicate
	// check: store, recipient address or label tracking number, and the
	// multiset of variant, quantity and sides.
	ContentHash string
}

// Line is a validated, priced order line.
type Line struct {
	LineItemID uuid.UUID `json:"line_item_id"`
	LineSpec
	SKU                string        `json:"sku"`
	Title              string        `json:"title"`
	ImageURL           string        `json:"image_url,omitempty"`
	Category           string        `json:"category"`
	UnitPrice          schemas.Money `json:"unit_price"`
	LineTotal          schemas.Money `json:"line_total"`
	LineAddonSurcharge schemas.Money `json:"line_addon_surcharge"`
}

// VariantIDs lists the distinct variant ids a request names, for the lookup.
// A request with more lines than Validate takes names none: it is refused
// before its lines are read, and tens of thousands of them (a 1 MiB body)
// would otherwise cost a lookup, and quadratic work here, first.
func (r CreateRequest) VariantIDs() []uuid.UUID {
	if len(r.LineItems) > maxLines {
		return nil
	}
	var out []uuid.UUID
	for _, l := range r.LineItems {
		if l.hasVariant && !slices.Contains(out, l.VariantID) {
			out = append(out, l.VariantID)
		}
	}
	return out
}

// Validate checks every rule of a create-order request against the caller's
// catalog and the configuration, and prices it. The first problem found is
// returned as a *FieldError; checks run in a fixed order, so the same input
// always gets the same answer.
func Validate(r CreateRequest, variants map[uuid.UUID]Variant, rates Rates) (Draft, error) {
	d := Draft{ReferenceID: norm.NFC.String(strings.TrimSpace(r.ReferenceID)), Note: r.Note, Tags: r.Tags, Force: r.Force,
		LabelLink: strings.TrimSpace(r.LabelLink), TrackingNumber: strings.TrimSpace(r.TrackingNumber)}

	// Characters (code points, as the OpenAPI maxLength counts them) of the
	// reference as stored, not bytes: 40 CJK characters are a reference.
	if utf8.RuneCountInString(d.ReferenceID) > maxReferenceID {
		return Draft{}, fieldErr("reference_id", "reference_id must be at most %d characters", maxReferenceID)
	}
	// The reference as sent, not as trimmed: TrimSpace takes control
	// characters (\t, \n, U+0085) off the ends, and "R-1\n" would be stored
	// as "R-1". Surrounding spaces are trimmed; control characters anywhere
	// are refused.
	if strings.IndexFunc(r.ReferenceID, Invisible) >= 0 {
		return Draft{}, fieldErr("reference_id", "reference_id must not contain control or format characters (such as bidi overrides or zero-width spaces)")
	}
	if utf8.RuneCountInString(d.Note) > maxNote {
		return Draft{}, fieldErr("note", "note must be at most %d characters", maxNote)
	}
	if utf8.RuneCountInString(d.Tags) > maxTags {
		return Draft{}, fieldErr("tags", "tags must be at most %d characters", maxTags)
	}
	if err := validateCustomer(r.Customer); err != nil {
		return Draft{}, err
	}
	d.Customer = *r.Customer
	d.Customer.Email = strings.TrimSpace(d.Customer.Email) // checked trimmed, kept so

	hasLabel := d.LabelLink != "" || d.TrackingNumber != ""
	switch {
	case r.ShippingAddress == nil && !hasLabel:
		return Draft{}, fieldErr("shipping_address", "shipping_address is required for standard orders; label orders send label_link and tracking_number instead")
	case r.ShippingAddress != nil && hasLabel:
		return Draft{}, fieldErr("shipping_address", "shipping_address must not be provided for label orders")
	case hasLabel && (d.LabelLink == "" || d.TrackingNumber == ""):
		field := "label_link"
		if d.TrackingNumber == "" {
			field = "tracking_number"
		}
		return Draft{}, fieldErr(field, "label_link and tracking_number must both be provided")
	}
	if hasLabel {
		// The platform gets it, and fulfillment reports it back: held to
		// the rules a reported tracking number keeps.
		if utf8.RuneCountInString(d.TrackingNumber) > maxTrackingField {
			return Draft{}, fieldErr("tracking_number", "tracking_number must be at most %d characters", maxTrackingField)
		}
		if strings.IndexFunc(r.TrackingNumber, Invisible) >= 0 {
			return Draft{}, fieldErr("tracking_number", "tracking_number must not contain control or format characters (such as bidi overrides or zero-width spaces)")
		}
		if !isHTTPURL(d.LabelLink) {
			return Draft{}, fieldErr("label_link", "label_link must be an http(s) URL of the label file")
		}
		if err := uri.Valid(d.LabelLink); err != nil {
			return Draft{}, fieldErr("label_link", "label_link %v", err)
		}
	} else {
		if err := validateAddress(r.ShippingAddress, rates.Countries); err != nil {
			return Draft{}, err
		}
		a := *r.ShippingAddress
		a.CountryCode = strings.ToUpper(strings.TrimSpace(a.CountryCode))
		d.ShippingAddress = &a
	}

	d.ShippingService = r.ShippingService
	if d.ShippingService == "" {
		d.ShippingService = "eco"
	}
	if !oneOf(d.ShippingService, ShippingServices) {
		return Draft{}, fieldErr("shipping_service", "shipping_service must be eco or premium")
	}
	d.AddonService = []string{}
	for i, a := range r.AddonService {
		if !oneOf(a, OrderAddons) {
			return Draft{}, fieldErr(fmt.Sprintf("addon_service[%d]", i), "addon_service values must be carton_box or scan_label")
		}
		if !slices.Contains(d.AddonService, a) {
			d.AddonService = append(d.AddonService, a)
		}
	}

	if len(r.LineItems) == 0 {
		return Draft{}, fieldErr("line_items", "line_items must contain at least one line item")
	}
	if len(r.LineItems) > maxLines {
		return Draft{}, fieldErr("line_items", "line_items may contain at most %d line items", maxLines)
	}
	priced := make([]pricedLine, 0, len(r.LineItems))
	for i, l := range r.LineItems {
		p := fmt.Sprintf("line_items[%d]", i)
		line, pl, err := validateLine(p, l, variants, rates)
		if err != nil {
			return Draft{}, err
		}
		v := variants[l.VariantID]
		if i == 0 {
			d.StoreID = v.StoreID
		} else if v.StoreID != d.StoreID {
			return Draft{}, fieldErr(p+".variant_id", "line items must belong to one store")
		}
		d.Lines = append(d.Lines, line)
		priced = append(priced, pl)
	}
	for i := range priced {
		priceLine(&priced[i], rates)
		d.Lines[i].UnitPrice = schemas.NewMoney(priced[i].unit)
		d.Lines[i].LineTotal = schemas.NewMoney(priced[i].lineTotal)
		d.Lines[i].LineAddonSurcharge = schemas.NewMoney(priced[i].addonSum)
	}
	d.Pricing = priceOrder(priced, d.ShippingService, hasLabel, d.AddonService, rates)
	d.ContentHash = contentHash(d)
	return d, nil
}

func validateCustomer(c *Customer) error {
	if c == nil {
		return fieldErr("customer", "customer is required")
	}
	if err := maxLengths("customer", []namedText{{"email", c.Email}, {"first_name", c.FirstName},
		{"last_name", c.LastName}, {"phone", c.Phone}}); err != nil {
		return err
	}
	if strings.TrimSpace(c.Email) == "" {
		return fieldErr("customer.email", "customer.email is required")
	}
	if a, err := mail.ParseAddress(c.Email); err != nil || a.Address != strings.TrimSpace(c.Email) {
		return fieldErr("customer.email", "customer.email is not a valid email address")
	}
	if strings.TrimSpace(c.FirstName) == "" {
		return fieldErr("customer.first_name", "customer.first_name is required")
	}
	if strings.TrimSpace(c.LastName) == "" {
		return fieldErr("customer.last_name", "customer.last_name is required")
	}
	return nil
}

// namedText is a text field of an object, by name.
type namedText struct{ name, value string }

// maxLengths refuses the first of fields (of object) longer than
// maxPartyField characters.
func maxLengths(object string, fields []namedText) error {
	for _, f := range fields {
		if utf8.RuneCountInString(f.value) > maxPartyField {
			return fieldErr(object+"."+f.name, "%s.%s must be at most %d characters", object, f.name, maxPartyField)
		}
	}
	return nil
}

func validateAddress(a *Address, countries map[string]bool) error {
	if err := maxLengths("shipping_address", []namedText{{"address1", a.Address1}, {"address2", a.Address2},
		{"city", a.City}, {"province", a.Province}, {"zip", a.Zip}}); err != nil {
		return err
	}
	required := []namedText{
		{"address1", a.Address1}, {"city", a.City}, {"province", a.Province}, {"country_code", a.CountryCode}, {"zip", a.Zip},
	}
	for _, f := range required {
		if strings.TrimSpace(f.value) == "" {
			return fieldErr("shipping_address."+f.name, "shipping_address.%s is required", f.name)
		}
	}
	cc := strings.ToUpper(strings.TrimSpace(a.CountryCode))
	if len(cc) != 2 || !countries[cc] {
		return fieldErr("shipping_address.country_code", "shipping_address.country_code %q is not a valid country code", a.CountryCode)
	}
	return nil
}

func validateLine(p string, l LineRequest, variants map[uuid.UUID]Variant, rates Rates) (Line, pricedLine, error) {
	fail := func(field, format string, args ...any) (Line, pricedLine, error) {
		return Line{}, pricedLine{}, fieldErr(p+field, format, args...)
	}
	if !l.hasVariant {
		return fail(".variant_id", "%s.variant_id is required", p)
	}
	if l.Quantity < 1 || l.Quantity > maxQuantity {
		return fail(".quantity", "%s.quantity must be from 1 to %d", p, maxQuantity)
	}
	if len(l.Sides) == 0 {
		return fail(".sides", "At least one side design is required")
	}
	keys := make([]string, 0, len(l.Sides))
	for k := range l.Sides {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var printSides []string
	for _, k := range keys {
		if !oneOf(k, SideCodes) {
			return fail(".sides."+k, "Invalid side code")
		}
		u := l.Sides[k]
		if len(u) > maxURLLength || !isHTTPURL(u) {
			return fail(".sides."+k, "%s.sides.%s must be an image URL starting with http:// or https:// (at most %d characters)", p, k, maxURLLength)
		}
		if err := uri.Valid(u); err != nil {
			return fail(".sides."+k, "%s.sides.%s %v", p, k, err)
		}
		if k != MockupSide {
			printSides = append(printSides, k)
		}
	}
	if len(printSides) == 0 {
		return fail(".sides", "At least one side design is required")
	}

	if l.PrintingTechnique != "" && l.EmbFile != "" {
		return fail(".emb_file", "a line uses printing_technique or emb_file, never both")
	}
	if l.PrintingTechnique != "" && !oneOf(l.PrintingTechnique, PrintingTechniques) {
		return fail(".printing_technique", "%s.printing_technique must be DTG or DTF", p)
	}
	technique := l.PrintingTechnique
	if technique == "" && l.EmbFile == "" {
		technique = "DTG" // neither given: the line is printed DTG
	}
	if l.EmbFile != "" && !oneOf(l.EmbFile, EmbFiles) {
		return fail(".emb_file", "%s.emb_file must be 'Available' or 'No EMB file'", p)
	}
	if l.EmbFile == "" && (l.DesignEmbType != "" || l.NumberOfPets != nil) {
		return fail(".design_emb_type", "design_emb_type and number_of_pets apply only to embroidery lines (emb_file 'No EMB file')")
	}
	if l.EmbFile == "Available" && (l.DesignEmbType != "" || l.NumberOfPets != nil) {
		return fail(".design_emb_type", "emb_file 'Available' needs no other embroidery field")
	}
	if l.EmbFile == embNoFile {
		if l.DesignEmbType == "" {
			return fail(".design_emb_type", "%s.design_emb_type is required when emb_file is 'No EMB file'", p)
		}
		if !oneOf(l.DesignEmbType, DesignEmbTypes) {
			return fail(".design_emb_type", "%s.design_emb_type must be 'text only', 'vector / cartoon artwork' or 'Photo to Embroidery'", p)
		}
		if l.DesignEmbType == photoEmbroidery && l.NumberOfPets == nil {
			return fail(".number_of_pets", "%s.number_of_pets is required when design_emb_type is 'Photo to Embroidery'", p)
		}
		if l.DesignEmbType != photoEmbroidery && l.NumberOfPets != nil {
			return fail(".number_of_pets", "number_of_pets applies only to 'Photo to Embroidery'")
		}
	}
	if l.AddonService != "" {
		if _, ok := LineAddonFees[l.AddonService]; !ok {
			return fail(".addon_service", "%s.addon_service must be fabric_applique or lace_applique_emb", p)
		}
	}

	v, ok := variants[l.VariantID]
	if !ok {
		return fail(".variant_id", "variant_id not found")
	}
	if v.ProductStatus != "ACTIVE" || v.StoreStatus == "INACTIVE" {
		return fail(".variant_id", "variant is not available")
	}
	if len(v.RequiresYarnType) == 0 && l.YarnType != "" {
		return fail(".yarn_type", "yarn_type is not allowed for this product")
	}
	if len(v.RequiresYarnType) > 0 {
		if l.YarnType == "" {
			return fail(".yarn_type", "yarn_type is required for this product")
		}
		if !slices.Contains(v.RequiresYarnType, l.YarnType) {
			return fail(".yarn_type", "yarn_type %q not allowed for %s", l.YarnType, v.Category)
		}
	}
	if l.NumberOfPets != nil {
		limit := maxPets
		if catalog.IsCapOrHat(v.Category) {
			limit = maxPets2
		}
		if *l.NumberOfPets < 1 || *l.NumberOfPets > limit {
			return fail(".number_of_pets", "%s.number_of_pets must be from 1 to %d for %s", p, limit, v.Category)
		}
	}
	if l.AddonService != "" && !addonAvailable(v.Category, v.RequiresYarnType) {
		return fail(".addon_service", "addon_service %s is not available for this product (%s)", l.AddonService, v.Category)
	}

	sides := make(map[string]string, len(l.Sides))
	for k, u := range l.Sides {
		sides[k] = u
	}
	spec := l.LineSpec
	spec.Sides, spec.PrintingTechnique = sides, technique
	line := Line{LineSpec: spec, SKU: v.SKU, Title: v.Title, ImageURL: v.ImageURL, Category: v.Category}
	pl := pricedLine{category: v.Category, price: v.Price, sides: printSides, yarn: l.YarnType, addon: l.AddonService, quantity: int64(l.Quantity)}
	return line, pl, nil
}

// Invisible reports control and format characters (Unicode Cc and Cf): a
// reference holding one can look like another reference and is refused,
// and no text the service keeps from outside (a tracking number, a
// platform's order id) may hold one.
func Invisible(r rune) bool { return unicode.In(r, unicode.Cc, unicode.Cf) }

func isHTTPURL(s string) bool {
	if !strings.HasPrefix(s, "http://") && !strings.HasPrefix(s, "https://") {
		return false
	}
	u, err := url.Parse(s)
	return err == nil && u.Host != ""
}

// contentHash is the soft-duplicate key: store, recipient (address) or label
// tracking number, and the sorted multiset of variant, quantity and sides.
func contentHash(d Draft) string {
	var parts []string
	for _, l := range d.Lines {
		keys := make([]string, 0, len(l.Sides))
		for k := range l.Sides {
			keys = append(keys, k+"="+l.Sides[k])
		}
		sort.Strings(keys)
		parts = append(parts, fmt.Sprintf("%s|%d|%s", l.VariantID, l.Quantity, strings.Join(keys, ",")))
	}
	sort.Strings(parts)
	recipient := "label:" + d.TrackingNumber
	if a := d.ShippingAddress; a != nil {
		norm := func(s string) string { return strings.ToLower(strings.Join(strings.Fields(s), " ")) }
		recipient = "addr:" + strings.Join([]string{norm(a.Address1), norm(a.Address2), norm(a.City), norm(a.Province), a.CountryCode, norm(a.Zip)}, "|")
	}
	h := sha256.Sum256([]byte(d.StoreID.String() + "\n" + recipient + "\n" + strings.Join(parts, "\n")))
	return hex.EncodeToString(h[:])
}
