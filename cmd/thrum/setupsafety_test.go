package main

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// putFile writes body at rel under dir, making its directories.
func putFile(t *testing.T, dir, rel, body string) string {
	t.Helper()
	p := filepath.Join(dir, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSetupRefusesLinksOutOfTheProject: a symlink committed in the
// repository, to a file or a directory outside it, stops setup before it
// writes anything, with an error naming the link; what the link points to
// is untouched.
func TestSetupRefusesLinksOutOfTheProject(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, link, target, host string }{
		{"file", ".mcp.json", "victim.json", "claude"},
		{"directory", ".claude", "victimdir", "claude"},
		{"codex directory", ".codex", "victimdir", "codex"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newSetupCLI(t)
			outside := t.TempDir()
			target := filepath.Join(outside, tc.target)
			if strings.HasSuffix(tc.target, "dir") {
				putFile(t, target, "settings.json", "{}\n")
				putFile(t, target, "hooks.json", "{}\n")
			} else {
				putFile(t, outside, tc.target, "{}\n")
			}
			if err := os.Symlink(target, filepath.Join(c.repo, tc.link)); err != nil {
				t.Fatal(err)
			}
			before, repoBefore := files(t, outside), files(t, c.repo)
			r := c.setup(tc.host)
			if r.code != exitError {
				t.Fatalf("want exit %d:\n%s", exitError, r)
			}
			contains(t, "stderr", r.stderr, filepath.Join(c.repo, tc.link)+" is a symlink to "+target, "outside", "nothing was written")
			if after := files(t, outside); !maps.Equal(after, before) {
				t.Errorf("setup wrote outside the project through %s:\n%v", tc.link, after)
			}
			if after := files(t, c.repo); !maps.Equal(after, repoBefore) {
				t.Errorf("setup wrote in the project: %v", sortedKeys(after))
			}
		})
	}
}

// TestSetupFollowsLinksInside: a symlink that stays inside the project
// (or, with --user, the home directory: a dotfiles checkout) is followed;
// it stays a link and its target gets the change.
func TestSetupFollowsLinksInside(t *testing.T) {
	t.Parallel()
	c := newSetupCLI(t)
	target := putFile(t, c.repo, "config/mcp.json", "{\"mcpServers\": {}}\n")
	link := filepath.Join(c.repo, ".cursor", "mcp.json")
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("..", "config", "mcp.json"), link); err != nil {
		t.Fatal(err)
	}
	dotfile := putFile(t, c.home, "dotfiles/claude-settings.json", "{}\n")
	if err := os.MkdirAll(filepath.Join(c.home, ".claude"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(dotfile, filepath.Join(c.home, ".claude", "settings.json")); err != nil {
		t.Fatal(err)
	}
	if r := c.setup("cursor"); r.code != 0 {
		t.Fatalf("want exit 0:\n%s", r)
	}
	if r := c.setup("claude", "--user"); r.code != 0 {
		t.Fatalf("want exit 0:\n%s", r)
	}
	for link, target := range map[string]string{link: target, filepath.Join(c.home, ".claude", "settings.json"): dotfile} {
		if st, err := os.Lstat(link); err != nil || st.Mode()&os.ModeSymlink == 0 {
			t.Errorf("%s is no longer a symlink: %v", link, err)
		}
		b, _ := os.ReadFile(target)
		contains(t, target, string(b), `"thrum`)
	}
}

// TestSetupRefusesAnotherUsersFile: a file in the project that belongs to
// someone else is left as it is, owner and all.
func TestSetupRefusesAnotherUsersFile(t *testing.T) {
	t.Parallel()
	if os.Getuid() != 0 {
		t.Skip("making a file another user owns needs root")
	}
	c := newSetupCLI(t)
	p := putFile(t, c.repo, ".mcp.json", "{}\n")
	if err := os.Chown(p, 4242, 4242); err != nil {
		t.Fatal(err)
	}
	r := c.setup("claude")
	if r.code != exitError {
		t.Fatalf("want exit %d:\n%s", exitError, r)
	}
	contains(t, "stderr", r.stderr, ".mcp.json belongs to another user")
	st, err := os.Stat(p)
	if err != nil || st.Sys().(*syscall.Stat_t).Uid != 4242 {
		t.Errorf(".mcp.json changed hands: %v", err)
	}
	if b, _ := os.ReadFile(p); string(b) != "{}\n" {
		t.Errorf(".mcp.json was rewritten:\n%s", b)
	}
}

// TestSetupRefusesSpecialAndHugeFiles: a FIFO, a device and a file past
// the size cap are refused at once, with what is wrong, and nothing is
// read from them: a FIFO without a writer once hung setup, deaf to
// Ctrl-C, and /dev/zero grew it by hundreds of megabytes a second.
func TestSetupRefusesSpecialAndHugeFiles(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		make func(path string) error
		want string
	}{
		{"fifo", func(p string) error { return syscall.Mkfifo(p, 0o644) }, "is not a regular file"},
		{"device", func(p string) error {
			if os.Getuid() != 0 {
				return errors.ErrUnsupported
			}
			return syscall.Mknod(p, syscall.S_IFCHR|0o644, 1<<8|5) // /dev/zero's numbers
		}, "is not a regular file"},
		{"huge", func(p string) error {
			f, err := os.Create(p)
			if err != nil {
				return err
			}
			defer f.Close()
			return f.Truncate(setupFileMax + 1) // sparse: no disk used
		}, "is 16777217 bytes, more than setup reads (16 MiB)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newSetupCLI(t)
			p := filepath.Join(c.repo, ".mcp.json")
			if err := tc.make(p); errors.Is(err, errors.ErrUnsupported) {
				t.Skip("making a device needs root")
			} else if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			r := c.setup("claude")
			if r.code != exitError {
				t.Fatalf("want exit %d after %v:\n%s", exitError, time.Since(start), r)
			}
			contains(t, "stderr", r.stderr, ".mcp.json "+tc.want, "nothing was written")
			if _, err := os.Stat(filepath.Join(c.repo, ".claude")); err == nil {
				t.Error("setup wrote .claude/ after refusing .mcp.json")
			}
		})
	}
}

// TestSetupKeepsByteOrderMark: a file that starts with a UTF-8 byte-order
// mark is edited, and keeps it.
func TestSetupKeepsByteOrderMark(t *testing.T) {
	t.Parallel()
	c := newSetupCLI(t)
	putFile(t, c.repo, ".mcp.json", "\uFEFF{\n  \"mcpServers\": {}\n}\n")
	putFile(t, c.repo, ".codex/config.toml", "\uFEFFmodel = \"o3\"\n")
	for _, host := range []string{"claude", "codex"} {
		if r := c.setup(host); r.code != 0 {
			t.Fatalf("want exit 0:\n%s", r)
		}
	}
	got := files(t, c.repo)
	if want := "\uFEFF{\n  \"mcpServers\": {\n    \"thrum\": {\n      \"type\": \"stdio\",\n      \"command\": \"thrum\",\n      \"args\": [\n        \"mcp\",\n        \"serve\",\n        \"--wake=claude\"\n      ]\n    }\n  }\n}\n"; got[".mcp.json"] != want {
		t.Errorf(".mcp.json:\n%q\nwant\n%q", got[".mcp.json"], want)
	}
	if want := "\uFEFFmodel = \"o3\"\n\n[mcp_servers.thrum]\ncommand = \"thrum\"\nargs = [\"mcp\", \"serve\", \"--wake=codex\"]\n"; got[".codex/config.toml"] != want {
		t.Errorf(".codex/config.toml:\n%q\nwant\n%q", got[".codex/config.toml"], want)
	}
}

// TestSetupAllOrNothing: when the second file cannot be written (here the
// file size limit stops it), the first is not left changed, no temporary
// file stays behind, and the error says nothing was changed.
func TestSetupAllOrNothing(t *testing.T) {
	t.Parallel()
	c := newSetupCLI(t)
	putFile(t, c.repo, ".mcp.json", "{}\n")
	// The second file is larger than the limit once thrum's hooks are in.
	putFile(t, c.repo, ".claude/settings.json", "{\"x-pad\": \""+strings.Repeat("x", 3000)+"\"}\n")
	before := files(t, c.repo)
	path := filepath.Dir(c.bin) + string(os.PathListSeparator) + os.Getenv("PATH")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// ulimit -f counts 512-byte blocks (dash; bash: 1024): enough for .mcp.json.
	cmd := exec.CommandContext(ctx, "sh", "-c", `ulimit -f 2 && exec "$0" "$@"`, c.bin, "--repo", c.repo, "setup", "claude")
	cmd.Env = append(cleanEnv(), "HOME="+c.home, "PATH="+path)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitError {
		t.Fatalf("want exit %d, got %v\nstdout:\n%s\nstderr:\n%s", exitError, err, &stdout, &stderr)
	}
	contains(t, "stderr", stderr.String(), "writing .claude/settings.json", "nothing was changed")
	if after := files(t, c.repo); !maps.Equal(after, before) {
		t.Errorf("files changed after the failure:\nbefore %v\nafter  %v", sortedKeys(before), sortedKeys(after))
	}
}

// TestCommitRestoresOnFailedRename: when a rename fails after others were
// made, the files already replaced get their old text back and those
// created are removed, with the directories made for them.
func TestCommitRestoresOnFailedRename(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	old := putFile(t, dir, "a.json", "old\n")
	blocked := filepath.Join(dir, "b.json")
	putFile(t, blocked, "keep", "a directory where a file should go\n") // rename onto it fails
	changes := []*setupChange{
		{Path: "a.json", real: old, old: []byte("old\n"), new: []byte("new\n"), mode: 0o600},
		{Path: "sub/c.json", real: filepath.Join(dir, "sub", "c.json"), new: []byte("c\n"), mode: 0o644, Created: true},
		{Path: "b.json", real: blocked, old: []byte("x"), new: []byte("y"), mode: 0o644},
	}
	err := commit(changes)
	if err == nil || !strings.Contains(err.Error(), "writing b.json") {
		t.Fatalf("commit = %v, want an error writing b.json", err)
	}
	if b, _ := os.ReadFile(old); string(b) != "old\n" {
		t.Errorf("a.json = %q, want its old text back", b)
	}
	if st, err := os.Stat(old); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("a.json's mode: %v, %v", st.Mode(), err)
	}
	if _, err := os.Stat(filepath.Join(dir, "sub")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the directory made for c.json is still there: %v", err)
	}
	got := files(t, dir)
	delete(got, "b.json/keep")
	if len(got) != 1 {
		t.Errorf("files left: %v, want a.json alone", sortedKeys(got))
	}
}

// TestSetupChangesOnlyThrumsOwn: the user's own path to thrum, in the
// server entry and in a hook command, and their words around the hook
// command stay; only thrum's arguments change.
func TestSetupChangesOnlyThrumsOwn(t *testing.T) {
	t.Parallel()
	c := newSetupCLI(t)
	saveIdentity(t, c.repo, "alice")
	putFile(t, c.repo, ".mcp.json", `{"mcpServers": {"thrum": {"command": "/opt/tools/thrum", "args": ["mcp", "serve"], "env": {"X": "1"}}}}`)
	putFile(t, c.repo, ".claude/settings.json", `{"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "/opt/tools/thrum hook claude stop --agent-id bob 2>>/tmp/thrum-hook.log", "timeout": 9}]}]}}`)
	putFile(t, c.repo, "opencode.json", `{"mcp": {"thrum": {"type": "local", "command": ["/opt/tools/thrum", "mcp", "serve"]}}}`)
	for _, host := range []string{"claude", "opencode"} {
		if r := c.setup(host, "--agent", "alice"); r.code != 0 {
			t.Fatalf("want exit 0:\n%s", r)
		}
	}
	got := files(t, c.repo)
	want := `{"mcpServers": {"thrum": {"command": "/opt/tools/thrum", "args": [ "mcp", "serve", "--wake=claude", "--agent-id", "alice" ], "env": {"X": "1"}, "type": "stdio"}}}`
	if got[".mcp.json"] != want {
		t.Errorf(".mcp.json:\n%s\nwant:\n%s", got[".mcp.json"], want)
	}
	contains(t, "settings.json", got[".claude/settings.json"], `"command": "/opt/tools/thrum hook claude stop 2>>/tmp/thrum-hook.log --agent-id alice", "timeout": 5}`)
	contains(t, "opencode.json", got["opencode.json"], `"command": [ "/opt/tools/thrum", "mcp", "serve", "--agent-id", "alice" ]`)
}

// TestSetupTakesAgentIDFlag: thrum setup --agent-id NAME (the global
// flag) is --agent NAME; THRUM_NAME in the environment names nobody in
// the files, which stay shareable.
func TestSetupTakesAgentIDFlag(t *testing.T) {
	t.Parallel()
	c := newSetupCLI(t)
	saveIdentity(t, c.repo, "alice")
	saveIdentity(t, c.repo, "bob")
	if r := c.setup("cursor", "--agent-id", "alice"); r.code != 0 {
		t.Fatalf("want exit 0:\n%s", r)
	}
	contains(t, ".cursor/mcp.json", files(t, c.repo)[".cursor/mcp.json"], `"--agent-id",`+"\n"+`        "alice"`)
	if r := c.setup("cursor", "--agent", "alice", "--agent-id", "bob"); r.code != exitUsage {
		t.Errorf("--agent and --agent-id for two agents: want exit %d:\n%s", exitUsage, r)
	}

	d := newSetupCLI(t)
	saveIdentity(t, d.repo, "alice")
	path := filepath.Dir(d.bin) + string(os.PathListSeparator) + os.Getenv("PATH")
	if r := d.withEnv(map[string]string{"HOME": d.home, "PATH": path, "THRUM_NAME": "alice"}, "setup", "cursor"); r.code != 0 {
		t.Fatalf("want exit 0:\n%s", r)
	}
	lacks(t, ".cursor/mcp.json", files(t, d.repo)[".cursor/mcp.json"], "alice")
}

// TestSetupShowsWhatARerunChanges: a run with other flags than the last
// shows the lines it takes out and puts in, for JSON and Codex's TOML
// alike (which it updates in place, comments kept), and an --agent run
// says which files are that agent's alone.
func TestSetupShowsWhatARerunChanges(t *testing.T) {
	t.Parallel()
	c := newSetupCLI(t)
	saveIdentity(t, c.repo, "alice")
	saveIdentity(t, c.repo, "bob")
	// As an older setup wrote it, with the channel in the shared file.
	putFile(t, c.repo, ".mcp.json", "{\n  \"mcpServers\": {\n    \"thrum\": {\n      \"type\": \"stdio\",\n      \"command\": \"thrum\",\n      \"args\": [\"mcp\", \"serve\", \"--channel\"]\n    }\n  }\n}\n")
	r := c.setup("claude", "--agent", "alice")
	if r.code != 0 {
		t.Fatalf("want exit 0:\n%s", r)
	}
	contains(t, "stdout", r.stdout, "--- a/.mcp.json\n+++ b/.mcp.json\n", `-      "args": ["mcp", "serve", "--channel"]`, `+      "args": [ "mcp", "serve", "--wake=claude", "--agent-id", "alice" ]`,
		"updated .mcp.json", "Do not commit .mcp.json, .claude/settings.json: they are for alice alone")

	cfg := "# mine\n[mcp_servers.thrum] # thrum\ncommand = \"thrum\"\nargs = [\n  \"mcp\", \"serve\", # keep\n  \"--agent-id\", \"alice\",\n]\nenv = { A = \"]\" }\n\n[profiles.x]\nmodel = \"o3\"\n"
	putFile(t, c.repo, ".codex/config.toml", cfg)
	r = c.setup("codex", "--agent", "bob")
	if r.code != 0 {
		t.Fatalf("want exit 0:\n%s", r)
	}
	want := "# mine\n[mcp_servers.thrum] # thrum\ncommand = \"thrum\"\nargs = [\"mcp\", \"serve\", \"--wake=codex\", \"--agent-id\", \"bob\"]\nenv = { A = \"]\" }\n\n[profiles.x]\nmodel = \"o3\"\n"
	if got := files(t, c.repo)[".codex/config.toml"]; got != want {
		t.Errorf(".codex/config.toml:\n%s\nwant:\n%s", got, want)
	}
	contains(t, "stdout", r.stdout, "updated .codex/config.toml", "+args = [\"mcp\", \"serve\", \"--wake=codex\", \"--agent-id\", \"bob\"]")
}

// TestSetupPluginListenerForSetup: thrum setup claude writes the listener
// sub-agent with the tool names its server has there, mcp__thrum__*.
func TestSetupPluginListenerForSetup(t *testing.T) {
	t.Parallel()
	c := newSetupCLI(t)
	if r := c.setup("claude"); r.code != 0 {
		t.Fatalf("want exit 0:\n%s", r)
	}
	checkAgent(t, filepath.Join(c.repo, ".claude", "agents", "thrum-listener.md"), "mcp__thrum__")
}
