package identity

import (
	"encoding/json"
	"testing"
)

// FuzzDecode feeds arbitrary bytes to Decode: identity files sit in the
// working tree, where anything may write them.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"version":1,"name":"alice","role":"reviewer","module":"core"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		file, err := Decode(b)
		if err != nil {
			if file != nil {
				t.Fatalf("Decode returned a file with error %v", err)
			}
			return
		}
		if err := ValidateRole("role", file.Role); err != nil {
			t.Fatalf("Decode accepted an invalid role: %v", err)
		}
		if err := ValidateRole("module", file.Module); err != nil {
			t.Fatalf("Decode accepted an invalid module: %v", err)
		}
		if file.Name != "" && !IsValidName(file.Name) {
			t.Fatalf("Decode accepted an invalid name %q", file.Name)
		}
		if file.AgentID == "" {
			t.Fatal("Decode left AgentID empty")
		}
		if file.Version > FileVersion {
			t.Fatalf("Decode accepted version %d", file.Version)
		}
		if len(b) > maxFileBytes {
			t.Fatalf("Decode accepted %d bytes", len(b))
		}
		// What Decode accepts survives being written back (unless escaping
		// grew it past the size limit).
		out, err := json.Marshal(file)
		if err != nil {
			t.Fatal(err)
		}
		if len(out) > maxFileBytes {
			return
		}
		again, err := Decode(out)
		if err != nil {
			t.Fatalf("Decode of re-encoded %s: %v", out, err)
		}
		if *again != *file {
			t.Fatalf("re-encoded file decodes to %+v, want %+v", again, file)
		}
	})
}
