package identity

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

func TestResolve(t *testing.T) {
	alice := File{Name: "alice", Role: "reviewer", Module: "core", Token: "t1"}
	bob := File{Name: "bob", Role: "reviewer", Module: "ui", Token: "t2"}
	carol := File{Name: "carol", Role: "planner", Module: "core", Token: "t3"}
	unnamedID := AgentID("repo", "tester", "core", "")
	unnamed := File{AgentID: unnamedID, Role: "tester", Module: "core", RepoID: "repo", Token: "t4"}
	legacyID := "reviewer_abc123"
	legacy := File{AgentID: legacyID, Role: "reviewer", Module: "legacy", Token: "t5"}
	// A file with an agent ID and no token, as anyone could commit.
	planted := File{Name: "dave", Role: "reviewer", Module: "core"}

	tests := []struct {
		name       string
		noDir      bool
		files      []File
		raw        map[string]string // extra files written as is
		sel        Selector
		wantID     string
		wantSource Source
		wantNoID   bool     // errors.Is(err, ErrNoIdentity)
		wantAmbig  bool     // errors.Is(err, ErrAmbiguous)
		wantErr    []string // substrings of the error
	}{
		// By name.
		{name: "name from flag", files: []File{alice, bob}, sel: Selector{Name: "alice"},
			wantID: "alice", wantSource: SourceFlags},
		{name: "name from env", files: []File{alice, bob}, sel: Selector{Name: "bob", NameFromEnv: true},
			wantID: "bob", wantSource: SourceEnvironment},
		{name: "name with @", files: []File{alice, bob}, sel: Selector{Name: "@alice"},
			wantID: "alice", wantSource: SourceFlags},
		{name: "legacy agent id", files: []File{alice, legacy}, sel: Selector{Name: "agent:reviewer:ABC123"},
			wantID: legacyID, wantSource: SourceFlags},
		{name: "unnamed agent by its id", files: []File{alice, unnamed}, sel: Selector{Name: unnamedID, NameFromEnv: true},
			wantID: unnamedID, wantSource: SourceEnvironment},
		{name: "name wins over role", files: []File{alice, carol}, sel: Selector{Name: "alice", Role: "planner", RoleFromEnv: true},
			wantID: "alice", wantSource: SourceFlags},
		{name: "name wins over a corrupt neighbour", files: []File{alice}, raw: map[string]string{"broken.json": "{"}, sel: Selector{Name: "alice"},
			wantID: "alice", wantSource: SourceFlags},
		{name: "name missing", files: []File{alice}, sel: Selector{Name: "dave"},
			wantNoID: true, wantErr: []string{`no identity file for "dave"`}},
		{name: "name missing, no dir", noDir: true, sel: Selector{Name: "dave"},
			wantNoID: true, wantErr: []string{`"dave"`}},
		{name: "name invalid", files: []File{alice}, sel: Selector{Name: "Alice"},
			wantErr: []string{`agent name "Alice" is invalid`}},
		{name: "name traversal", files: []File{alice}, sel: Selector{Name: "../alice"},
			wantErr: []string{"is invalid"}},
		{name: "name's file corrupt", files: []File{alice}, raw: map[string]string{"dave.json": `{"name":"dave"}`}, sel: Selector{Name: "dave"},
			wantErr: []string{"dave.json", "role is required"}},

		// By role.
		{name: "role one match from flag", files: []File{alice, carol}, sel: Selector{Role: "planner"},
			wantID: "carol", wantSource: SourceFlags},
		{name: "role one match from env", files: []File{alice, carol}, sel: Selector{Role: "reviewer", RoleFromEnv: true},
			wantID: "alice", wantSource: SourceEnvironment},
		{name: "role and module pick one of several", files: []File{alice, bob, carol}, sel: Selector{Role: "reviewer", Module: "ui"},
			wantID: "bob", wantSource: SourceFlags},
		{name: "role matches unnamed", files: []File{alice, unnamed}, sel: Selector{Role: "tester"},
			wantID: unnamedID, wantSource: SourceFlags},
		{name: "role none", files: []File{alice, carol}, sel: Selector{Role: "builder"},
			wantNoID: true, wantErr: []string{`no identity with role "builder"`}},
		{name: "role and module none", files: []File{alice, bob}, sel: Selector{Role: "reviewer", Module: "docs"},
			wantNoID: true, wantErr: []string{`role "reviewer"`}},
		{name: "role several", files: []File{alice, bob, carol}, sel: Selector{Role: "reviewer"},
			wantNoID: true, wantAmbig: true, wantErr: []string{"2 identities", "alice, bob"}},
		{name: "role with corrupt file", files: []File{alice}, raw: map[string]string{"broken.json": "not json"}, sel: Selector{Role: "reviewer"},
			wantErr: []string{"broken.json", "not valid JSON"}},
		{name: "role, no dir", noDir: true, sel: Selector{Role: "reviewer"},
			wantNoID: true, wantErr: []string{`role "reviewer"`}},

		// No selector.
		{name: "single file auto-selected", files: []File{carol}, wantID: "carol", wantSource: SourceIdentityFile},
		{name: "single unnamed file auto-selected", files: []File{unnamed}, wantID: unnamedID, wantSource: SourceIdentityFile},
		{name: "single file among ignored ones", files: []File{carol}, raw: map[string]string{".carol.1.tmp": "x", "README": "x"},
			wantID: "carol", wantSource: SourceIdentityFile},
		{name: "module alone does not select", files: []File{alice, bob}, sel: Selector{Module: "ui"},
			wantNoID: true, wantAmbig: true, wantErr: []string{"2 identities"}},
		{name: "zero files", files: nil,
			wantNoID: true, wantErr: []string{"no identity file with a token in"}},

		// A file without a token binds nothing.
		{name: "named file without a token", files: []File{alice, planted}, sel: Selector{Name: "dave"},
			wantNoID: true, wantErr: []string{"dave.json has no token", "binds nothing"}},
		{name: "single file without a token", files: []File{planted},
			wantNoID: true, wantErr: []string{"no identity file with a token in"}},
		{name: "file without a token beside one with", files: []File{carol, planted},
			wantID: "carol", wantSource: SourceIdentityFile},
		{name: "role matched only by a file without a token", files: []File{carol, planted}, sel: Selector{Role: "reviewer"},
			wantNoID: true, wantErr: []string{`no identity with role "reviewer"`}},
		{name: "no dir", noDir: true,
			wantNoID: true, wantErr: []string{"no identity file"}},
		{name: "several files", files: []File{alice, bob, carol},
			wantNoID: true, wantAmbig: true, wantErr: []string{"3 identities", "alice, bob, carol"}},
		{name: "corrupt file", files: []File{alice}, raw: map[string]string{"zz.json": `{"version":9,"role":"r","module":"m"}`},
			wantErr: []string{"zz.json", "upgrade thrum"}},
		{name: "only a corrupt file", raw: map[string]string{"alice.json": ""},
			wantErr: []string{"alice.json"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "identities")
			if !tt.noDir {
				for _, f := range tt.files {
					save(t, dir, &f)
				}
				for name, content := range tt.raw {
					writeRaw(t, filepath.Join(dir, name), content)
				}
			}
			f, src, err := Resolve(dir, tt.sel)
			if tt.wantErr != nil || tt.wantNoID {
				if err == nil {
					t.Fatalf("Resolve = %+v, %q; want an error", f, src)
				}
				if f != nil || src != "" {
					t.Fatalf("Resolve returned %+v, %q with its error", f, src)
				}
				if got := errors.Is(err, ErrNoIdentity); got != tt.wantNoID {
					t.Fatalf("errors.Is(%v, ErrNoIdentity) = %v, want %v", err, got, tt.wantNoID)
				}
				if got := errors.Is(err, ErrAmbiguous); got != tt.wantAmbig {
					t.Fatalf("errors.Is(%v, ErrAmbiguous) = %v, want %v", err, got, tt.wantAmbig)
				}
				// The hint (which command, which flag) is the CLI's to give.
				for _, cli := range []string{"thrum quickstart", "THRUM_", "--agent-id"} {
					if strings.Contains(err.Error(), cli) {
						t.Errorf("error %q names the CLI (%q)", err, cli)
					}
				}
				for _, s := range tt.wantErr {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not contain %q", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("Resolve: %v", err)
			}
			if f.AgentID != tt.wantID || src != tt.wantSource {
				t.Fatalf("Resolve = %q from %q, want %q from %q", f.AgentID, src, tt.wantID, tt.wantSource)
			}
		})
	}
}
