package schemas

import (
	"fmt"

	"github.com/shopspring/decimal"
)

// Money is an amount with two decimals, written in JSON as a number
// (29.90, not "29.90"). Arithmetic is decimal, never binary floating point.
type Money struct{ decimal.Decimal }

// NewMoney rounds d half-up to two decimals.
func NewMoney(d decimal.Decimal) Money { return Money{d.Round(2)} }

// MarshalJSON writes the amount as a JSON number with exactly two decimals.
func (m Money) MarshalJSON() ([]byte, error) { return []byte(m.StringFixed(2)), nil }

// UnmarshalJSON reads a JSON number or a decimal string.
func (m *Money) UnmarshalJSON(b []byte) error {
	s := string(b)
	if len(s) >= 2 && s[0] == '"' {
		s = s[1 : len(s)-1]
	}
	d, err := decimal.NewFromString(s)
	if err != nil {
		return fmt.Errorf("money: %q is not a decimal amount", string(b))
	}
	*m = NewMoney(d)
	return nil
}
