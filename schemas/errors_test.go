package schemas

import (
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strconv"
	"strings"
	"testing"

	json "github.com/go-json-experiment/json/v1"
)

// declaredCodes reads the Code* constants of errors.go.
func declaredCodes(t *testing.T) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "errors.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	codes := map[string]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok {
			return true
		}
		for i, name := range vs.Names {
			if strings.HasPrefix(name.Name, "Code") && i < len(vs.Values) {
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok {
					v, _ := strconv.Unquote(lit.Value)
					codes[name.Name] = v
				}
			}
		}
		return true
	})
	return codes
}

func TestEveryErrorCodeHasItsStatusInTheCatalogue(t *testing.T) {
	declared := declaredCodes(t)
	if len(declared) == 0 {
		t.Fatal("no Code constants found in errors.go")
	}
	for name, code := range declared {
		if _, ok := errorStatus[code]; !ok {
			t.Errorf("%s (%s) has no status in the catalogue", name, code)
		}
	}
	for _, code := range ErrorCodes() {
		s := ErrorStatus(code)
		if s < 400 || s > 599 {
			t.Errorf("%s maps to %d, not an error status", code, s)
		}
		found := false
		for _, v := range declared {
			found = found || v == code
		}
		if !found {
			t.Errorf("the catalogue has %s, which no Code constant declares", code)
		}
	}
}

// The OpenAPI document's ErrorCode table is what clients read: it must
// give every code the catalogue's status, and no other code.
func TestOpenAPIErrorCodeTableIsTheCatalogue(t *testing.T) {
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Description string   `json:"description"`
				Enum        []string `json:"enum"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	desc := doc.Components.Schemas["ErrorCode"].Description
	documented := map[string]int{}
	for _, line := range strings.Split(desc, "\n") {
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) < 3 {
			continue
		}
		code, status := strings.TrimSpace(cells[0]), strings.TrimSpace(cells[1])
		if n, err := strconv.Atoi(status); err == nil {
			documented[code] = n
		}
	}
	codes := ErrorCodes()
	slices.Sort(codes)
	for _, code := range codes {
		got, ok := documented[code]
		switch {
		case !ok:
			t.Errorf("the OpenAPI ErrorCode table lacks %s", code)
		case got != ErrorStatus(code):
			t.Errorf("the OpenAPI ErrorCode table gives %s status %d, the catalogue %d", code, got, ErrorStatus(code))
		}
	}
	for code := range documented {
		if _, ok := errorStatus[code]; !ok {
			t.Errorf("the OpenAPI ErrorCode table documents %s, which the catalogue does not have", code)
		}
	}
}

func TestAnUnknownCodeIsAnInternalError(t *testing.T) {
	if s := ErrorStatus("NO_SUCH_CODE"); s != 500 {
		t.Fatalf("ErrorStatus(unknown) = %d, want 500", s)
	}
}
