package identity

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func save(t *testing.T, dir string, f *File) {
	t.Helper()
	if err := Save(dir, f); err != nil {
		t.Fatalf("Save(%+v): %v", f, err)
	}
}

func writeRaw(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

func TestSaveLoadRoundTrip(t *testing.T) {
	tests := []struct {
		name     string
		file     File
		wantPath string // relative to dir
		wantID   string
	}{
		{"named, all fields", File{Name: "alice", AgentID: "alice", Role: "reviewer", Module: "core", Display: "Alice R.",
			RepoID: "r1", Token: NewToken(), SessionID: "ses_1", UpdatedAt: "2025-01-02T03:04:05.000000000Z"}, "alice.json", "alice"},
		{"named, agent_id left empty", File{Name: "bob", Role: "planner", Module: "ui"}, "bob.json", "bob"},
		{"unnamed", File{AgentID: AgentID("r1", "tester", "api", ""), Role: "tester", Module: "api", RepoID: "r1"},
			AgentID("r1", "tester", "api", "") + ".json", AgentID("r1", "tester", "api", "")},
		{"explicit version kept", File{Version: 1, Name: "carol", Role: "r", Module: "m"}, "carol.json", "carol"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), ".thrum", "identities")
			f := tt.file
			save(t, dir, &f)
			if f.Version != FileVersion {
				t.Errorf("Save left Version %d, want %d", f.Version, FileVersion)
			}
			path := filepath.Join(dir, tt.wantPath)
			if tt.file.Name != "" && Path(dir, tt.file.Name) != path {
				t.Errorf("Path(dir, %q) = %q, want %q", tt.file.Name, Path(dir, tt.file.Name), path)
			}
			got, err := Load(path)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			want := tt.file
			want.Version = FileVersion
			want.AgentID = tt.wantID
			if !reflect.DeepEqual(*got, want) {
				t.Fatalf("Load = %+v, want %+v", *got, want)
			}

			st, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if perm := st.Mode().Perm(); perm != 0o600 {
				t.Errorf("file mode %v, want 0600 (it holds a token)", perm)
			}
			dst, err := os.Stat(dir)
			if err != nil {
				t.Fatal(err)
			}
			if perm := dst.Mode().Perm(); perm != 0o700 {
				t.Errorf("dir mode %v, want 0700", perm)
			}
			if names := dirNames(t, dir); len(names) != 1 || names[0] != tt.wantPath {
				t.Errorf("dir holds %v, want only %s (no temp files)", names, tt.wantPath)
			}
			b, _ := os.ReadFile(path)
			if !bytes.HasSuffix(b, []byte("}\n")) {
				t.Errorf("file does not end with a newline: %q", b)
			}
		})
	}
}

func TestSaveOverwrite(t *testing.T) {
	dir := t.TempDir()
	path := Path(dir, "alice")
	writeRaw(t, path, `{"version":1,"name":"alice","role":"old","module":"m"}`)
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	save(t, dir, &File{Name: "alice", Role: "new", Module: "m", Token: "secret"})
	got, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if got.Role != "new" || got.Token != "secret" {
		t.Fatalf("after overwrite Load = %+v", got)
	}
	st, _ := os.Stat(path)
	if perm := st.Mode().Perm(); perm != 0o600 {
		t.Errorf("overwritten file mode %v, want 0600", perm)
	}
	if names := dirNames(t, dir); len(names) != 1 {
		t.Errorf("dir holds %v after overwrite", names)
	}
}

func TestSaveErrors(t *testing.T) {
	tests := []struct {
		name  string
		file  File
		setup func(t *testing.T, dir string)
	}{
		{"no name and no agent id", File{Role: "r", Module: "m"}, nil},
		{"path traversal in name", File{Name: "../evil", Role: "r", Module: "m"}, nil},
		{"path traversal in agent id", File{AgentID: "../../evil", Role: "r", Module: "m"}, nil},
		{"uppercase name", File{Name: "Alice", Role: "r", Module: "m"}, nil},
		{"target is a directory", File{Name: "alice", Role: "r", Module: "m"}, func(t *testing.T, dir string) {
			if err := os.MkdirAll(filepath.Join(dir, "alice.json", "x"), 0o700); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			dir := filepath.Join(root, "ids")
			if tt.setup != nil {
				tt.setup(t, dir)
			}
			f := tt.file
			if err := Save(dir, &f); err == nil {
				t.Fatal("Save: no error")
			}
			// Nothing left behind: no temp file, nothing outside dir.
			filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
				if err == nil && !d.IsDir() {
					t.Errorf("Save failed but left %s", p)
				}
				return nil
			})
		})
	}
}

func TestDecode(t *testing.T) {
	big := `{"version":1,"role":"r","module":"m","display":"` + strings.Repeat("x", maxFileBytes) + `"}`
	fits := `{"version":1,"role":"r","module":"m","display":"`
	fits += strings.Repeat("x", maxFileBytes-len(fits)-2) + `"}`
	tests := []struct {
		name    string
		in      string
		want    *File
		wantErr string
	}{
		{"minimal named", `{"version":1,"name":"alice","role":"r","module":"m"}`,
			&File{Version: 1, Name: "alice", AgentID: "alice", Role: "r", Module: "m"}, ""},
		{"agent_id kept when present", `{"version":1,"name":"alice","agent_id":"legacy_1","role":"r","module":"m"}`,
			&File{Version: 1, Name: "alice", AgentID: "legacy_1", Role: "r", Module: "m"}, ""},
		{"unnamed gets derived agent_id", `{"role":"r","module":"m","repo_id":"repo"}`,
			&File{Role: "r", Module: "m", RepoID: "repo", AgentID: AgentID("repo", "r", "m", "")}, ""},
		{"version 0 accepted", `{"version":0,"name":"a","role":"r","module":"m"}`,
			&File{Name: "a", AgentID: "a", Role: "r", Module: "m"}, ""},
		{"unknown fields ignored", `{"version":1,"name":"a","role":"r","module":"m","future":{"x":[1]}}`,
			&File{Version: 1, Name: "a", AgentID: "a", Role: "r", Module: "m"}, ""},
		{"surrounding whitespace", "\n  {\"name\":\"a\",\"role\":\"r\",\"module\":\"m\"}\n\n",
			&File{Name: "a", AgentID: "a", Role: "r", Module: "m"}, ""},
		{"exactly the size limit", fits, &File{Version: 1, Role: "r", Module: "m", Display: strings.Repeat("x", maxFileBytes-len(`{"version":1,"role":"r","module":"m","display":"`)-2), AgentID: AgentID("", "r", "m", "")}, ""},

		{"empty", ``, nil, "not valid JSON"},
		{"not JSON", `name=alice`, nil, "not valid JSON"},
		{"truncated", `{"name":"alice","role":"r"`, nil, "not valid JSON"},
		{"array", `[]`, nil, "not valid JSON"},
		{"wrong field type", `{"version":"1","role":"r","module":"m"}`, nil, "not valid JSON"},
		{"trailing object", `{"role":"r","module":"m"} {}`, nil, "data after"},
		{"trailing garbage", `{"role":"r","module":"m"}x`, nil, "data after"},
		{"newer version", `{"version":2,"role":"r","module":"m"}`, nil, "upgrade thrum"},
		{"missing role", `{"name":"a","module":"m"}`, nil, "role is required"},
		{"missing module", `{"name":"a","role":"r"}`, nil, "module is required"},
		{"invalid role", `{"name":"a","role":"Reviewer","module":"m"}`, nil, `role "Reviewer" is invalid`},
		{"invalid module", `{"name":"a","role":"r","module":"core-api"}`, nil, `module "core-api" is invalid`},
		{"invalid name", `{"name":"Alice","role":"r","module":"m"}`, nil, `agent name "Alice" is invalid`},
		{"reserved name", `{"name":"daemon","role":"r","module":"m"}`, nil, "reserved"},
		{"over 64 KiB", big, nil, "at most 65536"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Decode([]byte(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Decode = %+v, %v; want an error containing %q", got, err, tt.wantErr)
				}
				if got != nil {
					t.Fatalf("Decode returned a file with its error")
				}
				return
			}
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Decode = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(filepath.Join(dir, "missing.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load of a missing file: %v, want os.ErrNotExist", err)
	}
	bad := filepath.Join(dir, "bad.json")
	writeRaw(t, bad, `{"role":"r"}`)
	if _, err := Load(bad); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("Load of a bad file: %v, want an error naming %s", err, bad)
	}
}

func TestList(t *testing.T) {
	dir := t.TempDir()
	save(t, dir, &File{Name: "zed", Role: "r", Module: "m"})
	save(t, dir, &File{Name: "alice", Role: "r", Module: "m"})
	save(t, dir, &File{AgentID: AgentID("", "builder", "m", ""), Role: "builder", Module: "m"})
	// Ignored: hidden files (Save's temp files), other extensions, dirs.
	writeRaw(t, filepath.Join(dir, ".alice.123.tmp"), "garbage")
	writeRaw(t, filepath.Join(dir, ".hidden.json"), "garbage")
	writeRaw(t, filepath.Join(dir, "notes.txt"), "garbage")
	if err := os.Mkdir(filepath.Join(dir, "sub.json"), 0o700); err != nil {
		t.Fatal(err)
	}
	files, err := List(dir)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	var ids []string
	for _, f := range files {
		ids = append(ids, f.AgentID)
	}
	want := []string{"alice", AgentID("", "builder", "m", ""), "zed"}
	if !reflect.DeepEqual(ids, want) {
		t.Fatalf("List = %v, want %v (sorted by agent ID)", ids, want)
	}

	if files, err := List(filepath.Join(dir, "missing")); err != nil || len(files) != 0 {
		t.Fatalf("List of a missing dir = %v, %v; want none, nil", files, err)
	}
	notDir := filepath.Join(dir, "notes.txt")
	if _, err := List(notDir); err == nil {
		t.Fatalf("List of a file: no error")
	}

	writeRaw(t, filepath.Join(dir, "broken.json"), `{"name":"broken"`)
	if _, err := List(dir); err == nil || !strings.Contains(err.Error(), "broken.json") {
		t.Fatalf("List with a corrupt file: %v, want an error naming broken.json", err)
	}
}
