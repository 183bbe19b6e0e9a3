package main

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/internal/thrumtest"
	"github.com/thrumhq/thrum/rpc"
)

// What a newcomer meets once two agents talk, against the built binary:
// an inbox that is theirs, long messages, builds told apart, restarts,
// and errors whose hints lead on.

// twoWorktrees is a repository with its daemon running, alice
// (implementer) in its main worktree and bob (reviewer) in a linked one.
func twoWorktrees(t *testing.T) (main, feat *thrumCLI) {
	t.Helper()
	main = &thrumCLI{t: t, repo: thrumtest.GitRepo(t), bin: thrumtest.Binary(t)}
	main.ok("", "init")
	startDaemon(t, main)
	main.ok("", "quickstart", "--name", "alice", "--role", "implementer", "--module", "auth")
	feat = linkedWorktree(t, main)
	feat.ok("", "quickstart", "--name", "bob", "--role", "reviewer", "--module", "auth")
	return main, feat
}

// sendID sends text as name with args and returns the new message's ID.
func sendID(c *thrumCLI, name, text string, args ...string) string {
	c.t.Helper()
	return strings.TrimSpace(c.ok(name, append([]string{"send", text, "--quiet"}, args...)...).stdout)
}

// TestInboxListsWhatIsAddressedToMe: plain thrum inbox is the agent's
// own, by name, role, group or @everyone; --all is the whole feed;
// --mentions, the old spelling, lists the same as the default. With no
// identity it says what to set, and --all works without one.
func TestInboxListsWhatIsAddressedToMe(t *testing.T) {
	t.Parallel()
	main, feat := twoWorktrees(t)
	toBob := sendID(main, "", "for bob", "--to", "@bob")
	toRole := sendID(main, "", "for the reviewers", "--to", "@reviewer")
	toAll := sendID(main, "", "for everyone", "--to", "@everyone")
	note := sendID(main, "", "a note to no one")
	fromBob := sendID(feat, "", "for alice", "--to", "@alice")

	r := feat.ok("", "inbox")
	contains(t, "bob's inbox", r.stdout, toBob, toRole, toAll, "Showing 1-3 of 3 messages")
	lacks(t, "bob's inbox", r.stdout, note, fromBob)
	if m := feat.ok("", "inbox", "--mentions"); m.stdout != r.stdout {
		t.Errorf("inbox --mentions differs from inbox:\n%s\n%s", m.stdout, r.stdout)
	}
	contains(t, "bob's inbox --all", feat.ok("", "inbox", "--all").stdout, toBob, note, fromBob, "of 5 messages")

	dir := filepath.Join(t.TempDir(), "nobody")
	thrumtest.Git(t, main.repo, "worktree", "add", "-q", "-b", "nobody", dir)
	nobody := &thrumCLI{t: t, repo: dir, bin: main.bin}
	nobody.fails(exitNoIdentity, "", []string{"inbox"}, "thrum quickstart", "thrum inbox --all lists every message")
	contains(t, "inbox --all with no identity", nobody.ok("", "inbox", "--all").stdout, toBob, note, fromBob)
}

// TestSendReadsTheTextFromStdinOrAFile: send and reply take "-" for
// stdin and --file, byte for byte, up to the daemon's limit on content:
// a text at the limit that JSON escapes six-fold still fits a request;
// one byte more is refused before anything is sent.
func TestSendReadsTheTextFromStdinOrAFile(t *testing.T) {
	t.Parallel()
	c := aliceAndBob(t)
	content := func(id string) string {
		t.Helper()
		var m map[string]any
		c.okJSON(&m, "alice", "message", "get", id)
		return str(m, "message.body.content")
	}
	piped := func(stdin string) *thrumCLI { p := *c; p.stdin = stdin; return &p }

	text := "line one\n  line two, with \"quotes\" and $HOME\n"
	if id := sendID(piped(text), "alice", "-", "--to", "@bob"); content(id) != text {
		t.Errorf("send - stored %q, want %q", content(id), text)
	}
	path := filepath.Join(t.TempDir(), "body.md")
	if err := os.WriteFile(path, []byte("# From a file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	id := strings.TrimSpace(c.ok("alice", "send", "--file", path, "--to", "@bob", "--quiet").stdout)
	if content(id) != "# From a file\n" {
		t.Errorf("send --file stored %q", content(id))
	}
	reply := strings.TrimSpace(piped("a piped reply").ok("bob", "reply", id, "-", "--quiet").stdout)
	if content(reply) != "a piped reply" {
		t.Errorf("reply - stored %q", content(reply))
	}

	limit := strings.Repeat("<", thrum.DefaultMaxContentBytes) // each "<" is six bytes in JSON
	if id := sendID(piped(limit), "alice", "-", "--to", "@bob"); content(id) != limit {
		t.Errorf("a text at the limit came back as %d bytes, want %d", len(content(id)), len(limit))
	}
	r := piped(limit+"<").fails(exitUsage, "alice", []string{"send", "-", "--to", "@bob"}, "over the limit of "+strconv.Itoa(thrum.DefaultMaxContentBytes)+" bytes")
	if r.stdout != "" {
		t.Errorf("a refused send printed on stdout: %s", r)
	}
	c.fails(exitUsage, "alice", []string{"send", "twice", "--file", path}, "give the text once")
	c.fails(exitUsage, "alice", []string{"send", "--to", "@bob"}, "no message text", "--file")
}

// TestVersionSaysTheBuild: --version keeps "thrum VERSION" alone on its
// first line, then names the commit; version --json has the build's
// fields; thrum and thrum help print the usage and exit 0.
func TestVersionSaysTheBuild(t *testing.T) {
	t.Parallel()
	c := &thrumCLI{t: t, repo: t.TempDir(), bin: thrumtest.Binary(t)}
	var v map[string]any
	c.okJSON(&v, "", "version")
	hasKeys(t, "version --json", v, "version", "revision", "modified", "vcs_time")
	b := rpc.Build{Version: str(v, "version"), Revision: str(v, "revision"), Modified: v["modified"] == true, VCSTime: str(v, "vcs_time")}
	if b.Version != thrum.Version {
		t.Errorf("version --json says version %q, want %q", b.Version, thrum.Version)
	}
	for _, args := range [][]string{{"--version"}, {"version"}} {
		r := c.ok("", args...)
		first, rest, _ := strings.Cut(r.stdout, "\n")
		if first != "thrum "+thrum.Version || !strings.HasPrefix(rest, "commit ") || r.stdout != versionText(b) {
			t.Errorf("%v: want %q, got:\n%s", args, versionText(b), r)
		}
	}
	for _, args := range [][]string{{}, {"help"}} {
		contains(t, "thrum "+strings.Join(args, " "), c.ok("", args...).stdout, "Usage: thrum <command>", "Commands:")
	}
	contains(t, "thrum help send", c.ok("", "help", "send").stdout, "Usage: thrum send")
}

// TestVersionText: a stamped build names its commit and time.
func TestVersionText(t *testing.T) {
	b := rpc.Build{Version: "0.1.0", Revision: "0123456789abcdef0123456789abcdef01234567", Modified: true, VCSTime: "2026-11-28T10:00:00Z"}
	if got, want := versionText(b), "thrum 0.1.0\ncommit 0123456789ab+dirty, built 2026-11-28T10:00:00Z\n"; got != want {
		t.Errorf("versionText = %q, want %q", got, want)
	}
	if got, want := buildWhen(rpc.Build{Version: "0.1.0"}), "0.1.0"; got != want {
		t.Errorf("buildWhen without stamps = %q, want %q", got, want)
	}
}

// TestDaemonRestart: restart starts the daemon again with the flags it
// was started with and on the same WebSocket port, the messages kept;
// health reports the build. A start that finds the port taken says so.
func TestDaemonRestart(t *testing.T) {
	t.Parallel()
	c := &thrumCLI{t: t, repo: thrumtest.GitRepo(t), bin: thrumtest.Binary(t)}
	c.ok("", "init")
	st := startDaemon(t, c, "--sync-interval", "5m")
	port := strconv.Itoa(int(num(st, "ws_port")))
	c.ok("", "quickstart", "--name", "alice", "--role", "implementer", "--module", "auth")
	id := sendID(c, "", "before the restart", "--to", "@alice")

	r := c.ok("", "daemon", "restart")
	contains(t, "daemon restart", r.stdout, "Daemon stopped (pid "+strconv.Itoa(int(num(st, "pid")))+")\n", "Daemon started (pid ", "/ws\n")
	lacks(t, "daemon restart", r.stdout, "was taken")
	var now map[string]any
	c.okJSON(&now, "", "daemon", "status")
	hasKeys(t, "daemon status", now, "health.version", "health.revision", "health.modified", "health.vcs_time")
	if num(now, "pid") == num(st, "pid") || strconv.Itoa(int(num(now, "ws_port"))) != port {
		t.Errorf("after restart: pid %v (was %v), ws port %v (was %s)", now["pid"], st["pid"], now["ws_port"], port)
	}
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(int(num(now, "pid"))) + "/cmdline")
	if err == nil && !strings.Contains(string(cmdline), "--sync-interval\x005m0s") {
		t.Errorf("the restarted daemon lost its flags: %q", cmdline)
	}
	contains(t, "inbox after restart", c.ok("", "inbox").stdout, id)

	c.ok("", "daemon", "stop")
	l, err := net.Listen("tcp", "127.0.0.1:"+port)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	r = c.ok("", "daemon", "start")
	contains(t, "daemon start on a taken port", r.stdout, "the web console's port "+port+" was taken, so it moved to ", "thrum web")
}

// TestBuildMismatchIsSaid: a CLI of another build than the daemon's says
// so once on stderr, naming both and the fix; daemon restart runs the
// CLI's build, and then the other one says so.
func TestBuildMismatchIsSaid(t *testing.T) {
	t.Parallel()
	c := aliceAndBob(t)
	other := filepath.Join(t.TempDir(), "thrum")
	build := exec.Command("go", "build", "-ldflags", "-X github.com/thrumhq/thrum.Version=0.0.0-other", "-o", other, "github.com/thrumhq/thrum/cmd/thrum")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	o := &thrumCLI{t: t, repo: c.repo, bin: other}

	lacks(t, "the daemon's own build", c.ok("alice", "send", "hi", "--to", "@bob").stderr, "the daemon runs")
	r := o.ok("alice", "send", "hi", "--to", "@bob")
	if n := strings.Count(r.stderr, "the daemon runs build "); n != 1 {
		t.Errorf("want the build notice once, got %d:\n%s", n, r)
	}
	contains(t, "another build", r.stderr, "the daemon runs build "+thrum.Version, "this CLI is 0.0.0-other: thrum daemon restart")
	lacks(t, "--quiet", o.ok("alice", "inbox", "--quiet").stderr, "the daemon runs")

	o.ok("", "daemon", "restart")
	lacks(t, "after restart", o.ok("alice", "inbox").stderr, "the daemon runs")
	contains(t, "the first build after restart", c.ok("alice", "inbox").stderr, "the daemon runs build 0.0.0-other", "this CLI is "+thrum.Version)
}

// TestHintsLeadOn: an unknown name in THRUM_NAME or --to gets the
// nearest known one; an agent of another worktree, where it works; a
// name with a hyphen, its underscore form.
func TestHintsLeadOn(t *testing.T) {
	t.Parallel()
	main, feat := twoWorktrees(t)
	main.fails(exitNoIdentity, "alcie", []string{"inbox"}, "did you mean alice? (THRUM_NAME=alice)")
	rel, err := filepath.Rel(main.repo, feat.repo)
	if err != nil {
		t.Fatal(err)
	}
	r := main.fails(exitNoIdentity, "bob", []string{"inbox"}, "bob works in "+rel+": run it there")
	lacks(t, "bob in alice's worktree", r.stderr, "thrum quickstart --name bob")
	main.fails(exitError, "alice", []string{"send", "hi", "--to", "@alcie"}, "unknown recipient @alcie", "did you mean @alice?")
	main.fails(exitError, "alice", []string{"send", "hi", "--to", "@reviewr"}, "did you mean @reviewer?")
	main.fails(exitUsage, "", []string{"quickstart", "--name", "claude-1", "--role", "implementer", "--module", "auth"}, "did you mean claude_1?")
	main.fails(exitError, "Claude-1", []string{"inbox"}, "did you mean claude_1?")
}

// TestWordsThatMisled: a replayed send says who is active, as the first
// did; inbox --mark-read counts what is unread after it; init in a linked
// worktree says whose daemon it shares; a daemon whose runtime directory
// was deleted is not said to run with another THRUM_HOME.
func TestWordsThatMisled(t *testing.T) {
	t.Parallel()
	main, feat := twoWorktrees(t)
	send := []string{"send", "once", "--to", "@bob", "--idempotency-key", "k1"}
	first := main.ok("", send...)
	again := main.ok("", send...)
	contains(t, "a send", first.stdout, "To @bob (agent): bob (active)")
	contains(t, "its replay", again.stdout, "To @bob (agent): bob (active)")

	sendID(main, "", "two", "--to", "@bob")
	sendID(main, "", "three", "--to", "@bob")
	r := feat.ok("", "inbox", "--page-size", "2", "--mark-read")
	contains(t, "inbox --mark-read", r.stdout, "Showing 1-2 of 3 messages (1 unread)\n", "> Marked 2 messages as read")

	contains(t, "init again in a linked worktree", feat.ok("", "init").stdout,
		"thrum is already set up in "+feat.repo, "shares the daemon and log of "+main.repo)

	if err := os.RemoveAll(filepath.Join(main.repo, ".thrum")); err != nil {
		t.Fatal(err)
	}
	r = main.ok("", "daemon", "status")
	contains(t, "status after .thrum was deleted", r.stdout, ".thrum/var was deleted while it ran", "thrum daemon stop")
	lacks(t, "status after .thrum was deleted", r.stdout, "THRUM_HOME")
	lacks(t, "stop after .thrum was deleted", main.ok("", "daemon", "stop").stderr, "pid file names 0")
}
