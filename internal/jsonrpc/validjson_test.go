package jsonrpc

import (
	"encoding/json"
	"strings"
	"testing"
)

// validJSON must answer as json.Valid does, for every input.
func checkValidJSON(t *testing.T, b []byte) {
	t.Helper()
	if got, want := validJSON(b), json.Valid(b); got != want {
		t.Errorf("validJSON(%q) = %v, json.Valid says %v", b, got, want)
	}
}

var validJSONCases = []string{
	// valid
	`0`, `-0`, `1`, `-12.5e+3`, `1E9`, `0.0`, `"a"`, `""`, `true`, `false`, `null`,
	`{}`, `[]`, ` { } `, "\t[\n]\r", `{"a":1}`, `{"a":[1,{"b":null}],"c":"\u00e9\"\\\/\b\f\n\r\t"}`,
	`[1,2,3]`, `[[[]]]`, `{"":{}}`, "\"\xff\xfe\"", // bytes that are not UTF-8: json.Valid allows them
	// invalid
	``, ` `, `01`, `-`, `1.`, `.5`, `1e`, `1e+`, `+1`, `0x1`, `tru`, `truex`, `nul`, `nulll`,
	`"a`, `"\x"`, `"\u12"`, `"\u12g4"`, "\"a\x01\"", `{`, `}`, `[`, `]`, `[1,]`, `[,1]`, `{,}`,
	`{"a"}`, `{"a":}`, `{"a":1,}`, `{1:2}`, `{"a" 1}`, `[1 2]`, `{"a":1]`, `[1}`, `1 2`,
	`{}{}`, `[]x`, `"\`, `"\u`, `{"a":1`, `[1,`,
}

func TestValidJSON(t *testing.T) {
	for _, s := range validJSONCases {
		checkValidJSON(t, []byte(s))
	}
	// encoding/json's limit of nesting, empty containers included.
	for _, depth := range []int{maxJSONDepth, maxJSONDepth + 1} {
		checkValidJSON(t, []byte(strings.Repeat("[", depth)+strings.Repeat("]", depth)))
		checkValidJSON(t, []byte(strings.Repeat(`{"a":`, depth-1)+"{}"+strings.Repeat("}", depth-1)))
	}
}

func FuzzValidJSON(f *testing.F) {
	for _, s := range validJSONCases {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkValidJSON(t, b)
	})
}

func BenchmarkValidJSON(b *testing.B) {
	msg := []byte(`{"jsonrpc":"2.0","method":"notification.message","params":{"message_id":"msg_01JB2Z3Q4R5S6T7U8V9W0XYZAB","thread_id":"thr_01JB2Z3Q4R5S6T7U8V9W0XYZAB","author":{"agent_id":"alice","role":"implementer","module":"m"},"preview":"fan-out 1234 with some words and \"quotes\" and \\u00e9","scopes":[{"type":"module","value":"m"}],"matched_subscription":{"subscription_id":12,"match_type":"all"},"timestamp":"2026-11-24T08:30:01.123456789Z"}}`)
	b.Run("validJSON", func(b *testing.B) {
		b.SetBytes(int64(len(msg)))
		for range b.N {
			if !validJSON(msg) {
				b.Fatal("invalid")
			}
		}
	})
	b.Run("json.Valid", func(b *testing.B) {
		b.SetBytes(int64(len(msg)))
		for range b.N {
			if !json.Valid(msg) {
				b.Fatal("invalid")
			}
		}
	})
}
