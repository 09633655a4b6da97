package schemas

import (
	"bytes"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// eventSchemaFiles are the JSON Schemas (draft 2020-12) of the events on
// TopicOrderEvents: one <type>.schema.json per event type, each validating the
// whole envelope, plus common.schema.json with the shared definitions. Every
// file names itself by an absolute $id, and files refer to each other by it.
//
//go:embed events/*.json
var eventSchemaFiles embed.FS

const (
	eventSchemaDir    = "events"
	eventSchemaSuffix = ".schema.json"
	commonSchemaFile  = "common" + eventSchemaSuffix
)

var eventSchemas struct {
	once   sync.Once
	byType map[string]*jsonschema.Schema
	types  []string
	err    error
}

// loadEventSchemas compiles the embedded schemas once.
func loadEventSchemas() (map[string]*jsonschema.Schema, error) {
	s := &eventSchemas
	s.once.Do(func() { s.byType, s.types, s.err = compileEventSchemas(eventSchemaFiles) })
	return s.byType, s.err
}

func compileEventSchemas(fsys fs.FS) (map[string]*jsonschema.Schema, []string, error) {
	names, err := fs.Glob(fsys, eventSchemaDir+"/*"+eventSchemaSuffix)
	if err != nil {
		return nil, nil, err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	ids := map[string]string{} // event type -> $id
	var types []string
	for _, name := range names {
		raw, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, nil, err
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
		if err != nil {
			return nil, nil, fmt.Errorf("event schema %s: %w", name, err)
		}
		obj, _ := doc.(map[string]any)
		id, _ := obj["$id"].(string)
		if id == "" {
			return nil, nil, fmt.Errorf("event schema %s: no $id", name)
		}
		if err := c.AddResource(id, doc); err != nil {
			return nil, nil, fmt.Errorf("event schema %s: %w", name, err)
		}
		base := path.Base(name)
		if base == commonSchemaFile {
			continue
		}
		typ := strings.TrimSuffix(base, eventSchemaSuffix)
		ids[typ] = id
		types = append(types, typ)
	}
	sort.Strings(types)
	byType := make(map[string]*jsonschema.Schema, len(ids))
	for _, typ := range types {
		sch, err := c.Compile(ids[typ])
		if err != nil {
			return nil, nil, fmt.Errorf("event schema %s: %w", typ, err)
		}
		byType[typ] = sch
	}
	return byType, types, nil
}

// EventSchemaTypes lists, sorted, the event types that have a JSON Schema
// (order.created, tracking.updated, ...).
func EventSchemaTypes() []string {
	_, _ = loadEventSchemas()
	return append([]string(nil), eventSchemas.types...)
}

// ValidateEvent validates a record value of TopicOrderEvents, the whole
// envelope, against the JSON Schema of the event type its "topic" names. An
// undecodable value, a missing topic or a type without a schema is an error.
// Formats (uuid, date-time) are asserted.
func ValidateEvent(value []byte) error {
	byType, err := loadEventSchemas()
	if err != nil {
		return fmt.Errorf("compile event schemas: %w", err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(value))
	if err != nil {
		return fmt.Errorf("validate event: not JSON: %w", err)
	}
	obj, ok := inst.(map[string]any)
	if !ok {
		return fmt.Errorf("validate event: the value is not a JSON object")
	}
	typ, ok := obj["topic"].(string)
	if !ok {
		return fmt.Errorf("validate event: no string topic in the envelope")
	}
	sch, ok := byType[typ]
	if !ok {
		return fmt.Errorf("validate event: no schema for event type %q", typ)
	}
	if err := sch.Validate(inst); err != nil {
		return fmt.Errorf("validate event %s: %w", typ, err)
	}
	return nil
}
