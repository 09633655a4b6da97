package schemas_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"

	json "github.com/go-json-experiment/json/v1"
	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"
	podcatalog "github.com/printpod/pod/commands/catalog"
	"github.com/printpod/pod/commands/order"
	"github.com/printpod/pod/schemas"
)

// openAPIModel parses the embedded document and builds its 3.1 model,
// failing on any build or reference error.
func openAPIModel(t *testing.T) (libopenapi.Document, *v3.Document) {
	t.Helper()
	doc, err := libopenapi.NewDocument(schemas.OpenAPI)
	if err != nil {
		t.Fatalf("openapi.json does not parse: %v", err)
	}
	if v := doc.GetVersion(); v != "3.1.0" {
		t.Fatalf("openapi.json is OpenAPI %q, want 3.1.0", v)
	}
	m, err := doc.BuildV3Model()
	if err != nil {
		t.Fatalf("openapi.json does not build as an OpenAPI 3.1 model: %v", err)
	}
	for _, err := range m.Index.GetReferenceIndexErrors() {
		t.Errorf("reference error: %v", err)
	}
	if r := m.Index.GetResolver(); r != nil {
		for _, err := range r.GetResolvingErrors() {
			t.Errorf("resolving error: %v", err)
		}
	}
	return doc, &m.Model
}

// TestOpenAPIDocumentIsValid checks that the document builds with no error
// and validates against the OpenAPI 3.1 schema.
func TestOpenAPIDocumentIsValid(t *testing.T) {
	doc, _ := openAPIModel(t)
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		t.Fatalf("validator: %v", errs)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		for _, e := range verrs {
			t.Errorf("%s: %s", e.Message, e.Reason)
			for _, f := range e.SchemaValidationErrors {
				t.Errorf("  at %s (%s): %s", f.FieldPath, f.KeywordLocation, f.Reason)
			}
		}
	}
}

// TestOpenAPIRefsResolve follows every $ref of the raw document: each is a
// local JSON pointer that names an existing value.
func TestOpenAPIRefsResolve(t *testing.T) {
	var root any
	if err := json.Unmarshal(schemas.OpenAPI, &root); err != nil {
		t.Fatal(err)
	}
	n := 0
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch x := v.(type) {
		case map[string]any:
			if ref, ok := x["$ref"].(string); ok {
				n++
				if _, err := resolvePointer(root, ref); err != "" {
					t.Errorf("%s: $ref %q: %s", path, ref, err)
				}
			}
			for _, k := range slices.Sorted(maps.Keys(x)) {
				walk(path+"/"+k, x[k])
			}
		case []any:
			for i, e := range x {
				walk(path+"/"+strconv.Itoa(i), e)
			}
		}
	}
	walk("#", root)
	if n < 50 {
		t.Errorf("only %d $refs found; the walk is broken", n)
	}
}

func resolvePointer(root any, ref string) (any, string) {
	if !strings.HasPrefix(ref, "#/") {
		return nil, "not a local reference"
	}
	cur := root
	for _, tok := range strings.Split(ref[2:], "/") {
		tok, err := url.PathUnescape(tok)
		if err != nil {
			return nil, err.Error()
		}
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, "passes through a non-object"
		}
		if cur, ok = m[tok]; !ok {
			return nil, "names nothing (" + tok + ")"
		}
	}
	return cur, ""
}

var openAPITags = []string{"Stores & catalog", "Config", "Orders", "Batches", "Webhooks", "Operations"}

// TestOpenAPIOperationsAreDescribed checks that every operation (paths and
// webhooks) has a unique operationId, a summary, a description, one known
// tag and at least one response.
func TestOpenAPIOperationsAreDescribed(t *testing.T) {
	_, m := openAPIModel(t)
	for _, tag := range m.Tags {
		if !slices.Contains(openAPITags, tag.Name) || tag.Description == "" {
			t.Errorf("tag %q: unknown or without description", tag.Name)
		}
	}
	ids := map[string]string{}
	check := func(where string, op *v3.Operation) {
		if op.OperationId == "" || op.Summary == "" || op.Description == "" {
			t.Errorf("%s: operationId, summary and description are required", where)
		}
		if prev, dup := ids[op.OperationId]; dup {
			t.Errorf("%s: operationId %s is also used by %s", where, op.OperationId, prev)
		}
		ids[op.OperationId] = where
		if len(op.Tags) != 1 || !slices.Contains(openAPITags, op.Tags[0]) {
			t.Errorf("%s: tags %v, want one of %v", where, op.Tags, openAPITags)
		}
		if op.Responses == nil || (op.Responses.Codes.Len() == 0 && op.Responses.Default == nil) {
			t.Errorf("%s: no responses", where)
		}
	}
	for path, item := range m.Paths.PathItems.FromOldest() {
		for method, op := range item.GetOperations().FromOldest() {
			check(strings.ToUpper(method)+" "+path, op)
		}
	}
	for name, item := range m.Webhooks.FromOldest() {
		if item.Post == nil {
			t.Errorf("webhook %s has no post operation", name)
			continue
		}
		check("webhook "+name, item.Post)
	}
	if len(ids) < 35 {
		t.Errorf("only %d operations", len(ids))
	}
}

// schemaEnum is the enum of a component schema, as strings.
func schemaEnum(t *testing.T, m *v3.Document, name string) []string {
	t.Helper()
	proxy, ok := m.Components.Schemas.Get(name)
	if !ok {
		t.Fatalf("no component schema %s", name)
	}
	var out []string
	for _, n := range proxy.Schema().Enum {
		out = append(out, n.Value)
	}
	return out
}

// TestOpenAPIEnumsMatchTheCode keeps the document's enums in step with the
// code that decides them: the API error codes (every Code* constant of
// errors.go), the webhook topics, and the order and catalog vocabularies.
func TestOpenAPIEnumsMatchTheCode(t *testing.T) {
	_, m := openAPIModel(t)

	f, err := parser.ParseFile(token.NewFileSet(), "errors.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var codes []string
	ast.Inspect(f, func(n ast.Node) bool {
		if vs, ok := n.(*ast.ValueSpec); ok && strings.HasPrefix(vs.Names[0].Name, "Code") {
			for _, v := range vs.Values {
				if lit, ok := v.(*ast.BasicLit); ok {
					s, _ := strconv.Unquote(lit.Value)
					codes = append(codes, s)
				}
			}
		}
		return true
	})
	same := func(what string, got, want []string) {
		t.Helper()
		g, w := slices.Clone(got), slices.Clone(want)
		slices.Sort(g)
		slices.Sort(w)
		if !slices.Equal(g, w) {
			t.Errorf("%s: document has %v, code has %v", what, got, want)
		}
	}
	same("ErrorCode", schemaEnum(t, m, "ErrorCode"), codes)

	var topics []string
	for _, wt := range schemas.WebhookTopics {
		topics = append(topics, wt.Topic)
	}
	same("WebhookTopic", schemaEnum(t, m, "WebhookTopic"), topics)
	same("DeliveryTopic", schemaEnum(t, m, "DeliveryTopic"), append(slices.Clone(topics), schemas.TypeWebhookTest))
	var hooks []string
	for name := range m.Webhooks.KeysFromOldest() {
		hooks = append(hooks, name)
	}
	same("webhooks", hooks, append(slices.Clone(topics), schemas.TypeWebhookTest))

	same("OrderStatus", schemaEnum(t, m, "OrderStatus"), []string{schemas.StatusPending, schemas.StatusProcessing,
		schemas.StatusSuccess, schemas.StatusSynced, schemas.StatusFulfilled, schemas.StatusFailed, schemas.StatusCancelled})
	same("DeliveryStatus", schemaEnum(t, m, "DeliveryStatus"), []string{schemas.DeliveryPending, schemas.DeliverySuccess,
		schemas.DeliveryFailed, schemas.DeliveryCancelled})
	same("SideCode", schemaEnum(t, m, "SideCode"), order.SideCodes)
	same("OrderAddon", schemaEnum(t, m, "OrderAddon"), order.OrderAddons)
	same("LineAddon", schemaEnum(t, m, "LineAddon"), slices.Collect(maps.Keys(order.LineAddonFees)))
	same("PrintingTechnique", schemaEnum(t, m, "PrintingTechnique"), order.PrintingTechniques)
	same("EmbFile", schemaEnum(t, m, "EmbFile"), order.EmbFiles)
	same("DesignEmbType", schemaEnum(t, m, "DesignEmbType"), order.DesignEmbTypes)
	same("ShippingService", schemaEnum(t, m, "ShippingService"), order.ShippingServices)
	same("Category", schemaEnum(t, m, "Category"), podcatalog.Categories)
	same("StoreStatus", schemaEnum(t, m, "StoreStatus"), podcatalog.StoreStatuses)
	same("ProductStatus", schemaEnum(t, m, "ProductStatus"), podcatalog.ProductStatuses)
	var yarns []string
	for _, ys := range podcatalog.YarnTypes {
		for _, y := range ys {
			if !slices.Contains(yarns, y) {
				yarns = append(yarns, y)
			}
		}
	}
	same("YarnType", schemaEnum(t, m, "YarnType"), yarns)
}
