package mcpserver

import (
	"fmt"

	"github.com/google/jsonschema-go/jsonschema"
)

// Schemas are inferred from the tool types and then sharpened here with
// what Go types cannot say: enums, bounds, defaults, and which arrays are
// never null (the inferred schema allows null for every slice; the tools
// always return []).

// Enumerations of the tools' string fields.
var (
	priorityEnum       = []any{"critical", "high", "normal", "low"}
	priorityFilterEnum = []any{"all", "critical", "high_and_above", "normal_and_above"}
	memberTypeEnum     = []any{"agent", "role"}
	agentStatusEnum    = []any{"active", "offline"}
	addressKindEnum    = []any{"agent", "role", "group", "everyone"}
)

// schemaFor infers T's schema and applies edits to its properties: each
// key is a property path ("filter.status", "messages[].priority").
func schemaFor[T any](edits map[string]func(*jsonschema.Schema)) *jsonschema.Schema {
	s, err := jsonschema.For[T](nil)
	if err != nil {
		panic(fmt.Sprintf("mcpserver: schema of %T: %v", *new(T), err))
	}
	notNullArrays(s)
	for path, edit := range edits {
		edit(property(s, path))
	}
	return s
}

// property finds a nested property: "a.b" walks properties, "a[]" an
// array's items.
func property(s *jsonschema.Schema, path string) *jsonschema.Schema {
	cur := s
	name := ""
	step := func() {
		if name == "" {
			return
		}
		next := cur.Properties[name]
		if next == nil {
			panic("mcpserver: no schema property " + path)
		}
		cur, name = next, ""
	}
	for i := 0; i < len(path); i++ {
		switch c := path[i]; {
		case c == '.':
			step()
		case c == '[' && i+1 < len(path) && path[i+1] == ']':
			step()
			cur = cur.Items
			i++
		default:
			name += string(c)
		}
	}
	step()
	return cur
}

// outputSchemaFor is schemaFor for a tool's output, made compact: tools/list
// stays small (under 3,000 tokens for all tools) when output schemas keep
// their top-level descriptions only and do not repeat additionalProperties.
func outputSchemaFor[T any](edits map[string]func(*jsonschema.Schema)) *jsonschema.Schema {
	s := schemaFor[T](edits)
	compact(s, 0)
	return s
}

func compact(s *jsonschema.Schema, depth int) {
	if s == nil {
		return
	}
	s.AdditionalProperties = nil
	if depth > 1 || (depth == 1 && !keepDescription[s.Description]) {
		s.Description = ""
	}
	s.Required = nil
	for _, p := range s.Properties {
		compact(p, depth+1)
	}
	compact(s.Items, depth+1)
}

// notNullArrays makes every array non-nullable, recursively, and every
// optional scalar input (a pointer, to tell absent from zero) plain.
func notNullArrays(s *jsonschema.Schema) {
	if s == nil {
		return
	}
	if len(s.Types) == 2 && s.Types[0] == "null" && (s.Types[1] == "array" || s.Types[1] == "integer" || s.Types[1] == "boolean") {
		s.Type, s.Types = s.Types[1], nil
	}
	for _, p := range s.Properties {
		notNullArrays(p)
	}
	notNullArrays(s.Items)
}

// enum sets the values a string may take. Defaults are said in the
// field's description, not with the "default" keyword: the SDK's
// defaulting panics on absent arguments.
func enum(values []any) func(*jsonschema.Schema) {
	return func(s *jsonschema.Schema) { s.Enum = values }
}

// bounds sets an integer's minimum and maximum (its default is in the
// description, as for enum).
func bounds(lo, hi int) func(*jsonschema.Schema) {
	return func(s *jsonschema.Schema) {
		s.Minimum, s.Maximum = ptr(float64(lo)), ptr(float64(hi))
	}
}

// messageInfoEdits sharpens a message at prefix. Its priority has no
// enum: one synced from elsewhere may be any string (escaped), and a
// result that broke its schema would be refused whole.
func messageInfoEdits(prefix string, edits map[string]func(*jsonschema.Schema)) map[string]func(*jsonschema.Schema) {
	edits[prefix+"addressed_as.kind"] = enum(addressKindEnum)
	return edits
}

func constant(v string) func(*jsonschema.Schema) {
	return func(s *jsonschema.Schema) { s.Enum = []any{v} }
}

// keepDescription lists the output descriptions worth their tokens: what
// a value means beyond its name. The others are dropped by compact.
var keepDescription = map[string]bool{
	recipientStatusDoc: true, queueOverflowDoc: true, receiptsDoc: true,
}
