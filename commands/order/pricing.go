package order

import (
	"github.com/printpod/pod/schemas"
	"github.com/shopspring/decimal"
)

// Rates are the configuration tables pricing reads.
type Rates struct {
	// Shipping[category][service] holds base and additional rates.
	Shipping map[string]map[string]ShippingRate
	// Sides[category][side] is the surcharge of printing a side; missing = 0.
	Sides map[string]map[string]decimal.Decimal
	// Yarn[category][type] is the extra cost of a yarn type; missing = 0.
	Yarn map[string]map[string]decimal.Decimal
	// Countries is the set of valid country codes.
	Countries map[string]bool
	// OrderAddonFees are the fees of order-level add-ons; missing = 0.
	OrderAddonFees map[string]decimal.Decimal
}

// ShippingRate is one row of the shipping rates table.
type ShippingRate struct{ Base, Additional decimal.Decimal }

// Pricing is the order's price breakdown.
type Pricing struct {
	Subtotal       schemas.Money `json:"subtotal"`
	ShippingTotal  schemas.Money `json:"shipping_total"`
	DiscountAmount schemas.Money `json:"discount_amount"`
	GrandTotal     schemas.Money `json:"grand_total"`
}

// pricedLine is what pricing needs of a validated line.
type pricedLine struct {
	category  string
	price     decimal.Decimal // variant price
	sides     []string        // print sides sent (mockup excluded)
	yarn      string
	addon     string
	quantity  int64
	unit      decimal.Decimal
	lineTotal decimal.Decimal
	addonSum  decimal.Decimal
}

// priceLine computes the unit price, line total and add-on surcharge:
// unit = variant price + each print side's surcharge + yarn extra cost + add-on fee.
func priceLine(l *pricedLine, r Rates) {
	unit := l.price
	for _, s := range l.sides {
		unit = unit.Add(r.Sides[l.category][s])
	}
	if l.yarn != "" {
		unit = unit.Add(r.Yarn[l.category][l.yarn])
	}
	fee := decimal.Zero
	if l.addon != "" {
		fee = LineAddonFees[l.addon]
	}
	unit = unit.Add(fee)
	q := decimal.NewFromInt(l.quantity)
	l.unit = unit.Round(2)
	l.lineTotal = unit.Mul(q).Round(2)
	l.addonSum = fee.Mul(q).Round(2)
}

// priceOrder sums lines and computes shipping: on a standard order the one
// unit with the highest base rate (for its category and the service) pays the
// base rate and every other unit its category's additional rate; a label
// order ships for 0.
func priceOrder(lines []pricedLine, service string, labelOrder bool, addons []string, r Rates) Pricing {
	subtotal := decimal.Zero
	for _, l := range lines {
		subtotal = subtotal.Add(l.lineTotal)
	}
	for _, a := range addons {
		subtotal = subtotal.Add(r.OrderAddonFees[a])
	}
	shipping := decimal.Zero
	if !labelOrder {
		top := -1
		for i, l := range lines {
			if top < 0 || r.Shipping[l.category][service].Base.GreaterThan(r.Shipping[lines[top].category][service].Base) {
				top = i
			}
		}
		for i, l := range lines {
			rate := r.Shipping[l.category][service]
			n := l.quantity
			if i == top {
				shipping = shipping.Add(rate.Base)
				n--
			}
			shipping = shipping.Add(rate.Additional.Mul(decimal.NewFromInt(n)))
		}
	}
	discount := decimal.Zero
	grand := subtotal.Add(shipping).Sub(discount)
	return Pricing{
		Subtotal: schemas.NewMoney(subtotal), ShippingTotal: schemas.NewMoney(shipping),
		DiscountAmount: schemas.NewMoney(discount), GrandTotal: schemas.NewMoney(grand),
	}
}
