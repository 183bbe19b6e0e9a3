package eventlog

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzDecodeLine feeds arbitrary bytes to DecodeLine, which reads lines of
// shard files that may have been damaged or written by anything.
func FuzzDecodeLine(f *testing.F) {
	f.Add([]byte(`{"event_id":"01JAAAAAAAAAAAAAAAAAAAAAAA","type":"message.create","timestamp":"2025-01-02T03:04:05.000000006Z","content":"x"}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		in := bytes.Clone(line)
		ev, err := DecodeLine(line)
		if !bytes.Equal(line, in) {
			t.Fatalf("DecodeLine modified its input")
		}
		if err != nil {
			if ev != nil {
				t.Fatalf("DecodeLine returned an event with error %v", err)
			}
			return
		}
		if ev.ID == "" || ev.Type == "" {
			t.Fatalf("DecodeLine(%q) succeeded with ID %q, Type %q", line, ev.ID, ev.Type)
		}
		if !json.Valid(line) || line[0] != '{' {
			t.Fatalf("DecodeLine(%q) accepted a line that is not a JSON object", line)
		}
		if !bytes.Equal(ev.Raw, line) {
			t.Fatalf("Raw = %q, want the line", ev.Raw)
		}
	})
}
