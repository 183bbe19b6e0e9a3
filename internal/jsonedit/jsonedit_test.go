package jsonedit

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestSetKeepsLayout adds and replaces members in documents written in
// several styles and checks the exact text: only the new member appears,
// laid out as its neighbours are.
func TestSetKeepsLayout(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, src string
		jsonc     bool
		path      []any
		v         any
		want      string
	}{
		{"new file", "", false, []any{"a", "b"}, 1, "{\n  \"a\": {\n    \"b\": 1\n  }\n}\n"},
		{"empty object", "{}", false, []any{"a"}, 1, "{\n  \"a\": 1\n}"},
		{"after the last member", "{\n  \"z\": 1,\n  \"b\": true\n}\n", false, []any{"a"}, []string{"x"},
			"{\n  \"z\": 1,\n  \"b\": true,\n  \"a\": [\n    \"x\"\n  ]\n}\n"},
		{"four spaces", "{\n    \"z\": {\n        \"y\": 1\n    }\n}", false, []any{"z", "x"}, 2,
			"{\n    \"z\": {\n        \"y\": 1,\n        \"x\": 2\n    }\n}"},
		{"tabs", "{\n\t\"z\": {}\n}", false, []any{"z", "x"}, 2, "{\n\t\"z\": {\n\t\t\"x\": 2\n\t}\n}"},
		{"crlf", "{\r\n  \"z\": 1\r\n}\r\n", false, []any{"a"}, map[string]int{"q": 1},
			"{\r\n  \"z\": 1,\r\n  \"a\": {\r\n    \"q\": 1\r\n  }\r\n}\r\n"},
		{"one line", `{"z": 1, "y": 2}`, false, []any{"a"}, map[string]int{"q": 1}, `{"z": 1, "y": 2, "a": { "q": 1 }}`},
		{"replace on one line", "{\n  \"a\": [1, 2],\n  \"z\": 0\n}", false, []any{"a"}, []int{3, 4},
			"{\n  \"a\": [ 3, 4 ],\n  \"z\": 0\n}"},
		{"replace over lines", "{\n  \"a\": [\n    1\n  ]\n}", false, []any{"a"}, map[string]int{"b": 2},
			"{\n  \"a\": {\n    \"b\": 2\n  }\n}"},
		{"in an array element", `{"a": [{"c": "x"}, {"c": "y"}]}`, false, []any{"a", 1, "c"}, "z", `{"a": [{"c": "x"}, {"c": "z"}]}`},
		{"one-line array", "{\n  \"l\": [{\"c\": 1}]\n}", false, []any{"l", 0, "d"}, []int{1, 2}, "{\n  \"l\": [{\"c\": 1, \"d\": [ 1, 2 ]}]\n}"},
		{"last duplicate key wins", "{\n  \"a\": 1,\n  \"a\": 2\n}", false, []any{"a"}, 3, "{\n  \"a\": 1,\n  \"a\": 3\n}"},
		{"comment after the last member", "{\n  \"z\": 1 // keep\n}\n", true, []any{"a"}, 2,
			"{\n  \"z\": 1, // keep\n  \"a\": 2\n}\n"},
		{"trailing comma", "{\n  \"z\": 1,\n}\n", true, []any{"a"}, 2, "{\n  \"z\": 1,\n  \"a\": 2\n}\n"},
		{"crlf comment after the last member", "{\r\n  \"z\": 1 // keep\r\n}\r\n", true, []any{"a"}, 2,
			"{\r\n  \"z\": 1, // keep\r\n  \"a\": 2\r\n}\r\n"},
		{"crlf comment after a trailing comma", "{\r\n  \"z\": 1, // keep\r\n}\r\n", true, []any{"a"}, 2,
			"{\r\n  \"z\": 1, // keep\r\n  \"a\": 2\r\n}\r\n"},
		{"comments everywhere", "// head\n{\n  /* a */ \"z\": \"//not a comment\", /* b */\n  \"y\": {}, // c\n}\n", true, []any{"y", "x"}, 1,
			"// head\n{\n  /* a */ \"z\": \"//not a comment\", /* b */\n  \"y\": {\n    \"x\": 1\n  }, // c\n}\n"},
		{"comment in an empty object", "{ // nothing yet\n}", true, []any{"a"}, 1, "{\n  \"a\": 1 // nothing yet\n}"},
		{"html characters stay", "{}", false, []any{"a"}, "<&>", "{\n  \"a\": \"<&>\"\n}"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d, err := Parse([]byte(tc.src), tc.jsonc)
			if err != nil {
				t.Fatal(err)
			}
			changed, err := d.Set(tc.v, tc.path...)
			if err != nil || !changed {
				t.Fatalf("Set = %v, %v", changed, err)
			}
			if got := string(d.Bytes()); got != tc.want {
				t.Errorf("got:\n%s\nwant:\n%s", got, tc.want)
			}
			got, ok := d.Get(tc.path...)
			if _, want, _ := encode(tc.v); !ok || !reflect.DeepEqual(got, want) {
				t.Errorf("Get = %v, %v; want %v", got, ok, want)
			}
			// The same value again changes nothing.
			before := string(d.Bytes())
			if changed, err := d.Set(tc.v, tc.path...); changed || err != nil || string(d.Bytes()) != before {
				t.Errorf("second Set = %v, %v, text changed: %v", changed, err, string(d.Bytes()) != before)
			}
		})
	}
}

func TestAppend(t *testing.T) {
	t.Parallel()
	d, err := Parse([]byte("{\n  \"h\": {\n    \"Stop\": [\n      {\"x\": 1}\n    ]\n  }\n}\n"), false)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Append(map[string]int{"y": 2}, "h", "Stop"); err != nil {
		t.Fatal(err)
	}
	if err := d.Append("s", "h", "Start"); err != nil {
		t.Fatal(err)
	}
	want := "{\n  \"h\": {\n    \"Stop\": [\n      {\"x\": 1},\n      {\n        \"y\": 2\n      }\n    ],\n    \"Start\": [\n      \"s\"\n    ]\n  }\n}\n"
	if got := string(d.Bytes()); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
	if err := d.Append(1, "h", "Stop", 0, "x"); err == nil {
		t.Error("Append to a number: no error")
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, src string
		jsonc     bool
		line, col int
	}{
		{"missing comma", "{\n  \"a\": 1\n  \"b\": 2\n}", false, 3, 3},
		{"comment in plain JSON", "{\n  // no\n}", false, 2, 3},
		{"trailing comma in plain JSON", "{\"a\": 1,}", false, 1, 9},
		{"unclosed comment", "{\n /* open\n}", true, 2, 2},
		{"truncated", "{\"a\": [1,", true, 1, 10},
		{"two values", "{} {}", false, 1, 4},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse([]byte(tc.src), tc.jsonc)
			var se *SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("err = %v, want a *SyntaxError", err)
			}
			if se.Line != tc.line || se.Column != tc.col {
				t.Errorf("%v: want line %d, column %d", se, tc.line, tc.col)
			}
		})
	}
}

func TestSetWhereNoObjectIs(t *testing.T) {
	t.Parallel()
	d, err := Parse([]byte(`{"a": 1, "l": [1]}`), false)
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range [][]any{{"a", "b"}, {"l", "x"}, {"l", 5}, {"l", 0, "x"}} {
		if _, err := d.Set(1, path...); err == nil {
			t.Errorf("Set at %v: no error", path)
		}
	}
	if string(d.Bytes()) != `{"a": 1, "l": [1]}` {
		t.Errorf("a failed Set changed the document: %s", d.Bytes())
	}
}

// FuzzSet adds a member to whatever object a fuzzer finds, in both
// dialects, and checks the result: it parses, holds the value, and is
// otherwise the same document.
func FuzzSet(f *testing.F) {
	for _, s := range []string{
		"", "{}", "{\n  \"a\": 1\n}", `{"a":{"b":[1,{"c":null}]}}`, "{\n\t\"x\": \"//\", /* c */\n}",
		"{\r\n  \"k\": {} // c\r\n}", "[1]", "{\"a\":\"\\\"}\"}", "{ /* */ }", "{\"\":{\"\":{}}}",
		`{"a\u0062": {"c": 1}, "\u0061": {"\\": 2}}`,
	} {
		f.Add([]byte(s), "a", "thrum", true)
		f.Add([]byte(s), "", "x", false)
	}
	f.Fuzz(func(t *testing.T, src []byte, k1, k2 string, jsonc bool) {
		if !utf8.ValidString(k1) || !utf8.ValidString(k2) {
			return // JSON text is UTF-8: such a key cannot be written as given
		}
		d, err := Parse(src, jsonc)
		if err != nil {
			var se *SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("Parse error is not a *SyntaxError: %v", err)
			}
			return
		}
		before, _ := d.Get()
		v := map[string]any{"command": "thrum", "args": []string{k2}}
		if _, err := d.Set(v, k1, k2); err != nil {
			if _, isObj := before.(map[string]any); isObj {
				if x, ok := d.Get(k1); !ok || reflect.TypeOf(x) == reflect.TypeOf(map[string]any{}) {
					t.Fatalf("Set under an object failed: %v", err)
				}
			}
			return
		}
		again, err := Parse(d.Bytes(), jsonc)
		if err != nil {
			t.Fatalf("the edited document does not parse: %v\n%s", err, d.Bytes())
		}
		got, ok := again.Get(k1, k2)
		if _, want, _ := encode(v); !ok || !reflect.DeepEqual(got, want) {
			t.Fatalf("after Set, Get = %v, %v\n%s", got, ok, d.Bytes())
		}
		// Everything else is as it was: remove what was set and compare.
		after, _ := again.Get()
		inner := after.(map[string]any)[k1].(map[string]any)
		delete(inner, k2)
		if b, ok := before.(map[string]any); ok {
			if old, had := b[k1]; !had {
				if len(inner) != 0 {
					t.Fatalf("new object %q has more than the member set: %v", k1, inner)
				}
				delete(after.(map[string]any), k1)
			} else if om, isMap := old.(map[string]any); isMap {
				delete(om, k2)
			}
		}
		if !reflect.DeepEqual(before, after) {
			bb, _ := json.Marshal(before)
			ab, _ := json.Marshal(after)
			t.Fatalf("Set changed other values:\nbefore %s\nafter  %s", bb, ab)
		}
		if !jsonc && bytes.Contains(d.Bytes(), []byte("//")) && !bytes.Contains(src, []byte("//")) && !strings.Contains(k1+k2, "//") {
			t.Fatalf("an edit of plain JSON added a comment:\n%s", d.Bytes())
		}
	})
}
