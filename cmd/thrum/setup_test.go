package main

import (
	"bytes"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/thrumhq/thrum/identity"
	"github.com/thrumhq/thrum/internal/thrumtest"
)

// setupCLI runs the built binary in a fresh git repository, with HOME at
// a fresh directory and the binary first on PATH, as a user who installed
// thrum would.
type setupCLI struct {
	*thrumCLI
	home string
}

func newSetupCLI(t *testing.T) *setupCLI {
	t.Helper()
	return &setupCLI{thrumCLI: &thrumCLI{t: t, repo: thrumtest.GitRepo(t), bin: thrumtest.Binary(t)}, home: t.TempDir()}
}

func (c *setupCLI) setup(args ...string) result {
	c.t.Helper()
	path := filepath.Dir(c.bin) + string(os.PathListSeparator) + os.Getenv("PATH")
	return c.withEnv(map[string]string{"HOME": c.home, "PATH": path}, append([]string{"setup"}, args...)...)
}

// files reads every file under dir but .git, by slash path.
func files(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() && e.Name() == ".git" {
			return filepath.SkipDir
		}
		if e.Type().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(dir, p)
			out[filepath.ToSlash(rel)] = string(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// copyTree copies the fixture directory src into dst.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	for rel, body := range files(t, src) {
		p := filepath.Join(dst, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// saveIdentity writes an identity file for name, as quickstart would,
// without a daemon.
func saveIdentity(t *testing.T, repo, name string) {
	t.Helper()
	f := &identity.File{Version: identity.FileVersion, Name: name, Role: "implementer", Module: "auth", Token: "tok"}
	if err := identity.Save(filepath.Join(repo, ".thrum", "identities"), f); err != nil {
		t.Fatal(err)
	}
}

// isSubsequence reports whether every byte of old appears in new in
// order: what an edit that only inserts leaves true.
func isSubsequence(old, new string) bool {
	i := 0
	for j := 0; i < len(old) && j < len(new); j++ {
		if old[i] == new[j] {
			i++
		}
	}
	return i == len(old)
}

// TestSetupGolden runs setup for each host in an empty project: the files
// it writes and what it prints match the golden files, and a second run
// changes nothing, byte for byte, and says so.
func TestSetupGolden(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		args []string
	}{
		{"claude", []string{"claude"}},
		{"claude_channel_agent", []string{"claude", "--channel", "--agent", "alice"}},
		{"codex", []string{"codex"}},
		{"cursor", []string{"cursor"}},
		{"gemini", []string{"gemini", "--agent", "alice"}},
		{"opencode", []string{"opencode"}},
		{"opencode_agent", []string{"opencode", "--agent", "alice"}},
		{"opencode_no_wake", []string{"opencode", "--no-wake"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newSetupCLI(t)
			saveIdentity(t, c.repo, "alice")
			r := c.setup(tc.args...)
			if r.code != 0 {
				t.Fatalf("want exit 0:\n%s", r)
			}
			golden(t, "setup/"+tc.name+"/stdout.txt", r.stdout)
			written := files(t, c.repo)
			for _, rel := range sortedKeys(written) {
				if strings.HasPrefix(rel, ".thrum/") {
					continue
				}
				golden(t, "setup/"+tc.name+"/"+rel, written[rel])
			}
			again := c.setup(tc.args...)
			if again.code != 0 {
				t.Fatalf("second run:\n%s", again)
			}
			contains(t, "second run", again.stdout, "nothing changed")
			lacks(t, "second run", again.stdout, "created", "updated")
			if after := files(t, c.repo); !maps.Equal(after, written) {
				t.Errorf("the second run changed files:\nbefore %v\nafter  %v", written, after)
			}
			if f := files(t, c.home); len(f) != 0 {
				t.Errorf("setup without --user wrote in the home directory: %v", sortedKeys(f))
			}
		})
	}
}

// TestSetupMergesIntoExistingConfig runs setup over configurations that
// already hold other servers, keys, hooks and comments: every byte of
// each file is still there, in order (setup only inserts), the results
// match the golden files, and a second run changes nothing.
func TestSetupMergesIntoExistingConfig(t *testing.T) {
	t.Parallel()
	for _, host := range []string{"claude", "codex", "cursor", "gemini", "opencode"} {
		t.Run(host, func(t *testing.T) {
			t.Parallel()
			c := newSetupCLI(t)
			fixture := filepath.Join("testdata", "setup", host)
			copyTree(t, fixture, c.repo)
			before := files(t, c.repo)
			r := c.setup(host)
			if r.code != 0 {
				t.Fatalf("want exit 0:\n%s", r)
			}
			after := files(t, c.repo)
			for rel, old := range before {
				if !isSubsequence(old, after[rel]) {
					t.Errorf("%s lost some of its text:\nbefore:\n%s\nafter:\n%s", rel, old, after[rel])
				}
				if after[rel] == old {
					t.Errorf("%s is unchanged: setup added nothing to it", rel)
				}
			}
			for _, rel := range sortedKeys(after) {
				golden(t, "setup/merge_"+host+"/"+rel, after[rel])
			}
			if r := c.setup(host); r.code != 0 || !strings.Contains(r.stdout, "nothing changed") {
				t.Errorf("second run:\n%s", r)
			}
			if again := files(t, c.repo); !maps.Equal(again, after) {
				t.Error("the second run changed files")
			}
		})
	}
}

// TestSetupRefusesUnparseableFile: a file setup cannot parse stops it
// with an error naming the file and where it breaks; no file is written
// or created.
func TestSetupRefusesUnparseableFile(t *testing.T) {
	t.Parallel()
	cases := []struct {
		host, file, body string
		want             []string
	}{
		{"claude", ".claude/settings.json", "{\n  \"hooks\": {\n    \"Stop\": [\n  }\n}\n", []string{".claude/settings.json: line 4, column 3"}},
		{"claude", ".mcp.json", "{\"mcpServers\": {\"a\": 1,}}", []string{".mcp.json: line 1", "invalid character '}'"}},
		{"codex", ".codex/config.toml", "model = \"x\"\n[mcp_servers.thrum\ncommand = \"thrum\"\n", []string{".codex/config.toml: toml: line", "to end table name"}},
		{"cursor", ".cursor/hooks.json", "// no comments in this file\n{}", []string{".cursor/hooks.json: line 1, column 1"}},
		{"gemini", ".gemini/settings.json", "{ /* open", []string{".gemini/settings.json: line 1, column 3", "comment not closed"}},
		{"opencode", "opencode.json", "[1, 2]", []string{"opencode.json", "no JSON object"}},
	}
	for _, tc := range cases {
		t.Run(tc.host+"_"+strings.ReplaceAll(tc.file, "/", "_"), func(t *testing.T) {
			t.Parallel()
			c := newSetupCLI(t)
			p := filepath.Join(c.repo, filepath.FromSlash(tc.file))
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(tc.body), 0o644); err != nil {
				t.Fatal(err)
			}
			before := files(t, c.repo)
			r := c.setup(tc.host)
			if r.code != exitError {
				t.Fatalf("want exit %d:\n%s", exitError, r)
			}
			contains(t, "stderr", r.stderr, append(tc.want, "nothing was written")...)
			if r.stdout != "" {
				t.Errorf("an error wrote on stdout: %q", r.stdout)
			}
			if after := files(t, c.repo); !maps.Equal(after, before) {
				t.Errorf("files changed after the error: %v", sortedKeys(after))
			}
		})
	}
}

// TestSetupDryRun prints the diff a run would make and writes nothing.
func TestSetupDryRun(t *testing.T) {
	t.Parallel()
	c := newSetupCLI(t)
	copyTree(t, filepath.Join("testdata", "setup", "claude"), c.repo)
	before := files(t, c.repo)
	r := c.setup("claude", "--dry-run")
	if r.code != 0 {
		t.Fatalf("want exit 0:\n%s", r)
	}
	golden(t, "setup/dry_run_claude.txt", r.stdout)
	contains(t, "dry run", r.stdout, "--- a/.mcp.json\n+++ b/.mcp.json\n", "+    \"thrum\": {\n", "Dry run: nothing was written.")
	if after := files(t, c.repo); !maps.Equal(after, before) {
		t.Errorf("--dry-run changed files: %v", sortedKeys(after))
	}
	// What the dry run showed is what a real run then does.
	if r := c.setup("claude"); r.code != 0 {
		t.Fatalf("want exit 0:\n%s", r)
	}
	if again := c.setup("claude", "--dry-run"); again.code != 0 || strings.Contains(again.stdout, "+++") {
		t.Errorf("dry run after the real run shows changes:\n%s", again)
	}
}

// TestSetupUser writes the home-level files — HOME points at a temp dir —
// keeping what is there, comments included, and nothing in the project.
func TestSetupUser(t *testing.T) {
	t.Parallel()
	c := newSetupCLI(t)
	codexCfg := "# my settings\nmodel = \"o3\"\n\n[mcp_servers.other]\ncommand = \"other\" # keep\n"
	claudeJSON := "{\n  \"numStartups\": 7,\n  \"projects\": {\n    \"/x\": {\n      \"mcpServers\": {}\n    }\n  }\n}\n"
	for p, body := range map[string]string{".codex/config.toml": codexCfg, ".claude.json": claudeJSON} {
		full := filepath.Join(c.home, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, host := range []string{"codex", "claude"} {
		r := c.setup(host, "--user")
		if r.code != 0 {
			t.Fatalf("want exit 0:\n%s", r)
		}
		contains(t, host+" --user", r.stdout, "~/")
	}
	home := files(t, c.home)
	want := codexCfg + "\n[mcp_servers.thrum]\ncommand = \"thrum\"\nargs = [\"mcp\", \"serve\", \"--wake=codex\"]\n"
	if got := home[".codex/config.toml"]; got != want {
		t.Errorf("~/.codex/config.toml:\n%s\nwant:\n%s", got, want)
	}
	contains(t, "~/.codex/hooks.json", home[".codex/hooks.json"], `"command": "thrum hook codex stop"`)
	if !isSubsequence(claudeJSON, home[".claude.json"]) || !strings.Contains(home[".claude.json"], "\"thrum\": {\n      \"type\": \"stdio\"") {
		t.Errorf("~/.claude.json:\n%s", home[".claude.json"])
	}
	contains(t, "~/.claude/settings.json", home[".claude/settings.json"], `"command": "thrum hook claude session-start"`)
	if st, err := os.Stat(filepath.Join(c.home, ".claude.json")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("~/.claude.json mode: %v, %v; want 0600 kept", st.Mode(), err)
	}
	if f := files(t, c.repo); len(f) != 0 {
		t.Errorf("--user wrote in the project: %v", sortedKeys(f))
	}
	// CODEX_HOME moves Codex's home directory, and setup follows it.
	codexHome := t.TempDir()
	path := filepath.Dir(c.bin) + string(os.PathListSeparator) + os.Getenv("PATH")
	if r := c.withEnv(map[string]string{"HOME": c.home, "PATH": path, "CODEX_HOME": codexHome}, "setup", "codex", "--user"); r.code != 0 {
		t.Fatalf("want exit 0:\n%s", r)
	}
	if _, err := os.Stat(filepath.Join(codexHome, "config.toml")); err != nil {
		t.Errorf("CODEX_HOME: %v", err)
	}
}

// TestSetupAgent: --agent must name an agent with an identity file here
// (no daemon needed); its name goes into the server's and hooks'
// commands, and a run for another agent replaces them rather than adding
// a second set.
func TestSetupAgent(t *testing.T) {
	t.Parallel()
	c := newSetupCLI(t)
	r := c.setup("claude", "--agent", "bob")
	if r.code != exitNoIdentity {
		t.Fatalf("want exit %d:\n%s", exitNoIdentity, r)
	}
	contains(t, "stderr", r.stderr, "no agent bob here", "thrum quickstart --name bob --role ROLE --module MODULE")
	if f := files(t, c.repo); len(f) != 0 {
		t.Errorf("a refused run wrote %v", sortedKeys(f))
	}
	if r := c.setup("claude", "--agent", "Bob!"); r.code != exitUsage {
		t.Errorf("an invalid name: want exit %d:\n%s", exitUsage, r)
	}

	saveIdentity(t, c.repo, "bob")
	saveIdentity(t, c.repo, "carol")
	r = c.setup("claude", "--agent", "bob")
	if r.code != 0 {
		t.Fatalf("want exit 0:\n%s", r)
	}
	contains(t, "stdout", r.stdout, "thrum send --to @bob 'ping'")
	r = c.setup("claude", "--agent", "carol")
	if r.code != 0 {
		t.Fatalf("want exit 0:\n%s", r)
	}
	got := files(t, c.repo)
	contains(t, ".mcp.json", got[".mcp.json"], "\"--agent-id\",\n        \"carol\"")
	settings := got[".claude/settings.json"]
	for _, ev := range []string{"session-start", "user-prompt-submit", "post-tool-use", "stop"} {
		if n := strings.Count(settings, "thrum hook claude "+ev+" "); n != 1 {
			t.Errorf("%d hooks for %s, want 1:\n%s", n, ev, settings)
		}
		contains(t, "settings", settings, "thrum hook claude "+ev+" --agent-id carol\"")
	}
	lacks(t, "files", got[".mcp.json"]+settings, "bob")

	// Two agents and no --agent: setup says the host must be told which.
	r = c.setup("cursor")
	if r.code != 0 {
		t.Fatalf("want exit 0:\n%s", r)
	}
	contains(t, "stderr", r.stderr, "2 identities in", "(bob, carol)", "--agent NAME")
	contains(t, "stdout", r.stdout, "thrum send --to @NAME 'ping'")
}

// TestSetupRefusesConflictingCodexServer: a thrum server Codex already
// has, written in a way setup does not edit (an inline table), is the
// user's to change; setup says what to set and writes nothing.
func TestSetupRefusesConflictingCodexServer(t *testing.T) {
	t.Parallel()
	c := newSetupCLI(t)
	cfg := "[mcp_servers]\nthrum = { command = \"docker\", args = [\"run\", \"thrum\"] }\n"
	if err := os.MkdirAll(filepath.Join(c.repo, ".codex"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(c.repo, ".codex", "config.toml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	r := c.setup("codex")
	if r.code != exitError {
		t.Fatalf("want exit %d:\n%s", exitError, r)
	}
	contains(t, "stderr", r.stderr, ".codex/config.toml: cannot write [mcp_servers.thrum]", `set command = "thrum" and args = ["mcp", "serve", "--wake=codex"]`)
	got := files(t, c.repo)
	if got[".codex/config.toml"] != cfg || len(got) != 1 {
		t.Errorf("files after the refusal: %v", got)
	}
}

func TestSetupChannelIsForClaude(t *testing.T) {
	t.Parallel()
	c := newSetupCLI(t)
	r := c.setup("codex", "--channel")
	if r.code != exitUsage {
		t.Fatalf("want exit %d:\n%s", exitUsage, r)
	}
	contains(t, "stderr", r.stderr, "--channel is for claude only")
	if c.setup("vim").code != exitUsage {
		t.Error("an unknown host is not a usage error")
	}
}

func TestUnifiedDiffHunks(t *testing.T) {
	t.Parallel()
	var old, new bytes.Buffer
	for i := range 20 {
		line := strings.Repeat("x", i)
		old.WriteString(line + "\n")
		if i == 2 || i == 15 {
			new.WriteString("added\n")
		}
		if i != 16 {
			new.WriteString(line + "\n")
		}
	}
	got := unifiedDiff("f", old.String(), new.String(), false)
	hunks := strings.Count(got, "\n@@ ")
	if hunks != 2 {
		t.Fatalf("want two hunks, got %d:\n%s", hunks, got)
	}
	contains(t, "diff", got, "@@ -1,5 +1,6 @@\n \n x\n+added\n xx\n xxx\n xxxx\n",
		"@@ -13,8 +14,8 @@\n", "+added\n xxxxxxxxxxxxxxx\n-xxxxxxxxxxxxxxxx\n xxxxxxxxxxxxxxxxx\n")
	if unifiedDiff("f", "same\n", "same\n", false) != "" {
		t.Error("a diff of equal texts is not empty")
	}
	if got := unifiedDiff("f", "", "a\nb\n", true); got != "--- /dev/null\n+++ b/f\n@@ -0,0 +1,2 @@\n+a\n+b\n" {
		t.Errorf("a new file:\n%s", got)
	}
}

// FuzzCodexServer edits whatever Codex config a fuzzer finds (a committed
// file is anyone's): the result is an error, or a config that parses to
// the same settings but thrum's server, as setup writes it; and a second
// run changes nothing.
func FuzzCodexServer(f *testing.F) {
	for _, s := range []string{
		"", "model = \"o3\"\n", "[mcp_servers.thrum]\ncommand = \"thrum\"\nargs = [\"mcp\", \"serve\"]\n",
		"# c\n[mcp_servers.thrum] # t\ncommand = '/opt/thrum'\nargs = [\n  \"mcp\", # k\n  \"serve\",\n]\nenv = { A = \"]\" }\n[x]\ny = 1\n",
		"[mcp_servers.\"thrum\"]\r\nargs = []\r\n", "[mcp_servers]\nthrum = { command = \"x\" }\n",
		"[mcp_servers.thrum]\ncommand = \"\"\"\nthrum\"\"\"\n", "\uFEFFa = 1",
	} {
		f.Add([]byte(s), "alice")
		f.Add([]byte(s), "")
	}
	f.Fuzz(func(t *testing.T, src []byte, agent string) {
		args := []string{"mcp", "serve"}
		if agent != "" {
			args = append(args, "--agent-id", agent)
		}
		out, err := codexServer(src, args)
		if err != nil {
			return
		}
		if err := codexSameBut(src, out, args); err != nil {
			t.Fatalf("%v:\n%s\n->\n%s", err, src, out)
		}
		again, err := codexServer(out, args)
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("a second run: %v\n%s\n->\n%s", err, out, again)
		}
	})
}
