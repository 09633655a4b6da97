package e2e

import (
	"testing"
)

func TestConfigEndpoints(t *testing.T) {
	d := startDemo(t)
	get := func(path string, v any) {
		t.Helper()
		r := d.client.Get(path)
		if r.Status != 200 {
			t.Fatalf("%s: %d %s", path, r.Status, r.Body)
		}
		r.JSON(t, v)
	}
	categories := []string{"hoodie", "sweatshirt", "tshirt", "tote", "cap", "hat"}

	var raw struct {
		Data []map[string]any `json:"data"`
	}
	get("/v1/config/shipping-rates", &raw)
	seen := map[string]bool{}
	for _, row := range raw.Data {
		base, ok1 := row["base_rate"].(float64)
		add, ok2 := row["additional_rate"].(float64)
		if !ok1 || !ok2 || base <= 0 || add <= 0 || add >= base {
			t.Errorf("implausible shipping row %v", row)
		}
		seen[row["category"].(string)+"/"+row["service_type"].(string)] = true
	}
	for _, c := range categories {
		for _, s := range []string{"eco", "premium"} {
			if !seen[c+"/"+s] {
				t.Errorf("no shipping rate for %s %s", c, s)
			}
		}
	}

	get("/v1/config/pricing-sides", &raw)
	sides := []string{"front_side", "front_large", "back", "pocket_chest_left", "pocket_chest_right", "left_sleeve", "right_sleeve", "special_location"}
	seen = map[string]bool{}
	for _, row := range raw.Data {
		if _, ok := row["surcharge"].(float64); !ok {
			t.Errorf("surcharge is not a number: %v", row)
		}
		seen[row["category"].(string)+"/"+row["side_code"].(string)] = true
	}
	for _, c := range categories {
		for _, s := range sides {
			if !seen[c+"/"+s] {
				t.Errorf("no side surcharge for %s %s", c, s)
			}
		}
	}

	get("/v1/config/yarn-types", &raw)
	seen = map[string]bool{}
	for _, row := range raw.Data {
		seen[row["category"].(string)+"/"+row["type_code"].(string)] = true
		if _, ok := row["extra_cost"].(float64); !ok {
			t.Errorf("extra_cost is not a number: %v", row)
		}
	}
	for _, want := range []string{"hoodie/yarn_6_7mm", "hoodie/yarn_8_10mm", "hoodie/yarn_20mm", "sweatshirt/yarn_20mm", "cap/plat_emb", "cap/emb_3d_puff"} {
		if !seen[want] {
			t.Errorf("yarn type %s missing", want)
		}
	}

	var countries struct {
		Data []struct {
			Code string `json:"code"`
			Name string `json:"name"`
		} `json:"data"`
	}
	get("/v1/config/country-codes", &countries)
	if len(countries.Data) != 249 {
		t.Fatalf("%d country codes, want the 249 of ISO 3166-1", len(countries.Data))
	}
	names := map[string]string{}
	for _, c := range countries.Data {
		names[c.Code] = c.Name
	}
	for code, name := range map[string]string{"US": "United States", "DE": "Germany", "FR": "France", "GB": "United Kingdom"} {
		if names[code] != name {
			t.Errorf("%s = %q, want %q", code, names[code], name)
		}
	}
}
