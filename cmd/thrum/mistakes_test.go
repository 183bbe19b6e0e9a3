package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/thrumhq/thrum/internal/thrumtest"
	"github.com/thrumhq/thrum/mcpserver"
)

// What a new user runs into in their first hour, against the built
// binary: each answer must say what happened and what to do.

// TestSendWithoutToSaysItReachesNoOne: a message sent with no --to is
// addressed to no one, and send says so instead of just "sent"; with --to
// it says whom the address reaches.
func TestSendWithoutToSaysItReachesNoOne(t *testing.T) {
	t.Parallel()
	c := aliceAndBob(t)

	r := c.ok("alice", "send", "hello, anyone")
	contains(t, "send without --to", r.stdout, "> Message sent: msg_", "\n  To no one: no agent is notified", "--to @everyone")
	id := idAfter(t, r.stdout, "> Message sent: ")
	// As said: bob's inbox lacks it, inbox --all lists it.
	lacks(t, "bob's inbox", c.ok("bob", "inbox").stdout, id)
	contains(t, "bob's inbox --all", c.ok("bob", "inbox", "--all").stdout, id)

	r = c.ok("alice", "send", "hello, everyone", "--to", "@everyone")
	contains(t, "send --to @everyone", r.stdout, "  To @everyone (everyone): 2 agents, 2 active\n")
	lacks(t, "send --to @everyone", r.stdout, "no one")
	if r := c.ok("alice", "send", "quiet", "--quiet"); !strings.HasPrefix(r.stdout, "msg_") || strings.Count(r.stdout, "\n") != 1 {
		t.Errorf("send --quiet without --to should print just the ID:\n%s", r)
	}
	contains(t, "send --help", c.ok("", "send", "--help").stdout, "addressed to no one", "--to @everyone")
}

// TestInboxAndMessageGetMarkNothing: looking is not consuming. Plain
// inbox and message get show read state and leave it; inbox --mark-read
// claims the unread messages shown and says how many.
func TestInboxAndMessageGetMarkNothing(t *testing.T) {
	t.Parallel()
	c := aliceAndBob(t)
	m1 := strings.TrimSpace(c.ok("alice", "send", "first", "--to", "@bob", "--quiet").stdout)
	m2 := strings.TrimSpace(c.ok("alice", "send", "second", "--to", "@bob", "--quiet").stdout)

	for range 2 {
		r := c.ok("bob", "inbox")
		contains(t, "bob's inbox", r.stdout, "● "+m1, "● "+m2, "(2 unread)")
		lacks(t, "bob's inbox", r.stdout, "Marked")
	}
	r := c.ok("bob", "message", "get", m1)
	contains(t, "message get", r.stdout, "  Read:    no (unread)\n", "first")
	contains(t, "inbox after message get", c.ok("bob", "inbox", "--unread").stdout, m1, m2, "(2 unread)")

	r = c.ok("bob", "inbox", "--mark-read")
	contains(t, "inbox --mark-read", r.stdout, "● "+m1, "● "+m2, "> Marked 2 messages as read\n")
	contains(t, "inbox after --mark-read", c.ok("bob", "inbox").stdout, "○ "+m1, "○ "+m2, "(0 unread)")
	contains(t, "message get after --mark-read", c.ok("bob", "message", "get", m1).stdout, "  Read:    yes\n")
	contains(t, "inbox --mark-read again", c.ok("bob", "inbox", "--mark-read").stdout, "> Marked 0 messages as read\n")

	m3 := strings.TrimSpace(c.ok("alice", "send", "third", "--to", "@bob", "--quiet").stdout)
	var got map[string]any
	c.okJSON(&got, "bob", "inbox", "--unread", "--mark-read")
	if ids, _ := got["marked_ids"].([]any); num(got, "marked_count") != 1 || len(ids) != 1 || ids[0] != m3 || num(got, "total") != 1 {
		t.Errorf("inbox --unread --mark-read --json = %v, want %s marked", got, m3)
	}
	contains(t, "inbox --help", c.ok("", "inbox", "--help").stdout, "Looking marks nothing read", "--mark-read")
}

// TestPeekingLeavesAnAgentsMail: a person running `thrum inbox` or
// `message get` as an agent — by THRUM_NAME, or through the single identity
// file — takes nothing from it: the agent's MCP check_messages, over a real
// `thrum mcp serve`, still returns the message.
func TestPeekingLeavesAnAgentsMail(t *testing.T) {
	t.Parallel()
	e := newMCPE2E(t)
	e.thrum("", "init")
	e.startDaemon()
	e.thrum("", "quickstart", "--name", "alice", "--role", "implementer", "--module", "auth")
	// bob works in a worktree of his own, so alice's is the single
	// identity file in the main one.
	bob := linkedWorktree(t, &thrumCLI{t: t, repo: e.repo, bin: e.bin})
	bob.ok("", "quickstart", "--name", "bob", "--role", "reviewer", "--module", "auth")
	m := strings.TrimSpace(bob.ok("", "send", "for alice", "--to", "@alice", "--quiet").stdout)

	c := &thrumCLI{t: t, repo: e.repo, bin: e.bin}
	for _, args := range [][]string{{"inbox"}, {"inbox", "--mentions"}, {"inbox", "--unread"}} {
		for _, who := range []string{"alice", ""} {
			contains(t, strings.Join(args, " ")+" as "+strconv.Quote(who), c.ok(who, args...).stdout, "● "+m, "(1 unread)")
		}
	}
	contains(t, "message get", c.ok("", "message", "get", m).stdout, "Read:    no (unread)")

	alice := e.serve("alice")
	got := mcpE2ECall[mcpserver.CheckMessagesOutput](t, alice, "check_messages", nil)
	if len(got.Messages) != 1 || got.Messages[0].MessageID != m {
		t.Fatalf("alice's check_messages after a person looked = %+v, want %s", got, m)
	}
	// Her check consumed it: it is read now, and a second check is empty.
	if got := mcpE2ECall[mcpserver.CheckMessagesOutput](t, alice, "check_messages", nil); len(got.Messages) != 0 {
		t.Errorf("a second check_messages returned %+v", got)
	}
	contains(t, "alice's inbox after her check", c.ok("", "inbox").stdout, "○ "+m, "(0 unread)")
}

// TestDaemonOfAnotherHome: with a daemon running for the repository, a
// start with another THRUM_HOME says where that daemon's state is instead
// of calling it "not answering" with a dial error, and so do status and init.
func TestDaemonOfAnotherHome(t *testing.T) {
	t.Parallel()
	repo := thrumtest.GitRepo(t)
	c := &thrumCLI{t: t, repo: repo, bin: thrumtest.Binary(t)}
	c.ok("", "init")
	pid := strconv.Itoa(int(num(startDaemon(t, c), "pid")))
	home := filepath.Join(t.TempDir(), "elsewhere")
	env := map[string]string{"THRUM_HOME": home}
	want := []string{"(pid " + pid + ")", "its runtime state is in " + filepath.Join(repo, ".thrum") + ", not in " + home,
		"without THRUM_HOME"}

	r := c.withEnv(env, "init")
	if r.code != 0 {
		t.Fatalf("init with another home:\n%s", r)
	}
	contains(t, "init with another home", r.stderr, want...)
	lacks(t, "init with another home", r.stderr, "Next: thrum daemon start")

	r = c.withEnv(env, "daemon", "start")
	if r.code != exitError {
		t.Errorf("daemon start with another home: want exit 1, got:\n%s", r)
	}
	contains(t, "daemon start with another home", r.stderr, want...)
	lacks(t, "daemon start with another home", r.stderr, "dial", "no such file")

	r = c.withEnv(env, "daemon", "status")
	contains(t, "daemon status with another home", r.stdout, want...)
	lacks(t, "daemon status with another home", r.stdout, "dial", "no such file")
	if _, err := os.Stat(filepath.Join(home, "var", "thrum.sock")); !os.IsNotExist(err) {
		t.Errorf("a second daemon made a socket in %s: %v", home, err)
	}
}

// TestInitAgainSaysTheDaemonRuns: init run again, or in a second worktree,
// while the daemon runs points to quickstart, not to daemon start.
func TestInitAgainSaysTheDaemonRuns(t *testing.T) {
	t.Parallel()
	c := &thrumCLI{t: t, repo: thrumtest.GitRepo(t), bin: thrumtest.Binary(t)}
	contains(t, "the first init", c.ok("", "init").stderr, "Next: thrum daemon start")
	pid := strconv.Itoa(int(num(startDaemon(t, c), "pid")))
	feat := linkedWorktree(t, c)
	for _, c := range []*thrumCLI{c, feat} {
		r := c.ok("", "init")
		contains(t, "init in "+c.repo, r.stderr, "The daemon is running (pid "+pid+"). Next: thrum quickstart")
		lacks(t, "init in "+c.repo, r.stderr, "thrum daemon start")
	}
}

// TestQuickstartInASecondWorktree: quickstart of a name whose identity is
// in another worktree refuses, naming it, instead of ending that agent's
// session there; --force moves the agent and removes the other file.
func TestQuickstartInASecondWorktree(t *testing.T) {
	t.Parallel()
	main := aliceAndBob(t)
	repo := main.repo
	var before map[string]any
	main.okJSON(&before, "alice", "agent", "whoami")
	mainFile := filepath.Join(repo, ".thrum", "identities", "alice.json")

	fc := linkedWorktree(t, main)
	feat := fc.repo
	qs := []string{"quickstart", "--name", "alice", "--role", "implementer", "--module", "auth"}
	fc.fails(exitError, "", qs, "alice works in another worktree", mainFile, "--force")
	var after map[string]any
	main.okJSON(&after, "alice", "agent", "whoami")
	if s := str(before, "session_id"); s == "" || str(after, "session_id") != s {
		t.Errorf("the refused quickstart changed alice's session: %v, then %v", before, after)
	}
	if _, err := os.Stat(filepath.Join(feat, ".thrum", "identities", "alice.json")); !os.IsNotExist(err) {
		t.Errorf("the refused quickstart wrote an identity file: %v", err)
	}
	// A quickstart in alice's own worktree is hers to repeat.
	main.ok("", qs...)

	r := fc.ok("", append(qs, "--force")...)
	contains(t, "quickstart --force", r.stdout, "> Agent alice updated", "  Moved here: removed "+mainFile+"\n")
	if _, err := os.Stat(mainFile); !os.IsNotExist(err) {
		t.Errorf("alice's identity file is still in the main worktree: %v", err)
	}
	contains(t, "whoami in the feature worktree", fc.ok("alice", "agent", "whoami").stdout, "@alice")
	// Now the main worktree is the other one.
	main.fails(exitError, "", qs, "alice works in another worktree", filepath.Join(feat, ".thrum", "identities", "alice.json"))
}

// TestErrorsHaveOnePrefix: no error reads "thrum: thrum ...", whether its
// message starts with the product's name or wraps a library error that
// carries the prefix.
func TestErrorsHaveOnePrefix(t *testing.T) {
	t.Parallel()
	thrumBin := thrumtest.Binary(t)
	plain := &thrumCLI{t: t, repo: t.TempDir(), bin: thrumBin}
	repo := thrumtest.GitRepo(t)
	c := &thrumCLI{t: t, repo: repo, bin: thrumBin}
	c.ok("", "init")
	for _, run := range []struct {
		c    *thrumCLI
		args []string
		want string
	}{
		{plain, []string{"inbox"}, plain.repo + " is not set up for thrum: run `thrum init`"},
		{plain, []string{"doctor"}, plain.repo + " is not set up for thrum: run `thrum init`"},
		{plain, []string{"inbx"}, "unexpected argument inbx"},
	} {
		r := run.c.run(run.args...)
		if r.code == 0 {
			t.Errorf("want an error, got:\n%s", r)
		}
		contains(t, strings.Join(run.args, " "), r.stderr, "thrum: "+run.want)
		lacks(t, strings.Join(run.args, " "), r.stderr, "thrum: thrum", ": thrum: ")
	}
	startDaemon(t, c)
	// The library's ErrLocked ("thrum: data directory in use") inside the
	// CLI's own words.
	r := c.run("daemon", "run")
	contains(t, "a second daemon run", r.stderr, "thrum: ", "data directory in use")
	lacks(t, "a second daemon run", r.stderr, "thrum: thrum", ": thrum: ")
}

// TestUnprefixed: report's tidying of nested prefixes.
func TestUnprefixed(t *testing.T) {
	for in, want := range map[string]string{
		"thrum: open: thrum: data directory in use": "open: data directory in use",
		"doctor: thrum: verify: bad line":           "doctor: verify: bad line",
		"thrum is not set up":                       "thrum is not set up",
		"see thrum: the docs":                       "see thrum: the docs",
	} {
		if got := unprefixed(in); got != want {
			t.Errorf("unprefixed(%q) = %q, want %q", in, got, want)
		}
	}
}

// aliceAndBob is a fresh git repository with its daemon running and two
// agents: alice (implementer) and bob (reviewer), of module auth.
func aliceAndBob(t *testing.T) *thrumCLI {
	t.Helper()
	c := &thrumCLI{t: t, repo: thrumtest.GitRepo(t), bin: thrumtest.Binary(t)}
	c.ok("", "init")
	startDaemon(t, c)
	c.ok("", "quickstart", "--name", "alice", "--role", "implementer", "--module", "auth")
	c.ok("", "quickstart", "--name", "bob", "--role", "reviewer", "--module", "auth")
	return c
}

// linkedWorktree adds a worktree of c's repository, on a new branch
// "feature", runs init there, and returns a CLI working in it.
func linkedWorktree(t *testing.T, c *thrumCLI) *thrumCLI {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "feature")
	thrumtest.Git(t, c.repo, "worktree", "add", "-q", "-b", "feature", dir)
	fc := &thrumCLI{t: t, repo: dir, bin: c.bin}
	fc.ok("", "init")
	return fc
}

// TestInitNeedsACommit: a repository with no commit has no name that
// every clone shares, and events signed under another would be refused
// everywhere else: init says to commit first and makes nothing.
func TestInitNeedsACommit(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	thrumtest.Git(t, repo, "init", "-q", "-b", "main")
	c := &thrumCLI{t: t, repo: repo, bin: thrumtest.Binary(t)}
	c.fails(exitError, "", []string{"init"}, "has no commit yet", "git commit --allow-empty")
	if _, err := os.Stat(filepath.Join(repo, ".thrum")); !os.IsNotExist(err) {
		t.Errorf("a refused init made .thrum: %v", err)
	}
	thrumtest.GitUser(t, repo)
	thrumtest.Git(t, repo, "commit", "-q", "--allow-empty", "-m", "first")
	// A clone of a remote whose HEAD names no branch has branches but
	// no HEAD: a commit there would start another history, so init says
	// to check one out.
	thrumtest.Git(t, repo, "checkout", "-q", "--orphan", "unborn")
	c.fails(exitError, "", []string{"init"}, "names no commit", "git switch main")
	thrumtest.Git(t, repo, "checkout", "-q", "main")
	c.ok("", "init")
}

// TestRepoIDIsTheOldestRoot: a branch that merged an unrelated history
// has two roots; every clone and branch names the repository by the
// older, the one its history began with.
func TestRepoIDIsTheOldestRoot(t *testing.T) {
	t.Parallel()
	repo := thrumtest.GitRepo(t)
	first := thrumtest.Git(t, repo, "rev-parse", "HEAD")
	thrumtest.Git(t, repo, "checkout", "-q", "--orphan", "other")
	later := exec.Command("git", "commit", "-q", "--allow-empty", "-m", "another history")
	later.Dir, later.Env = repo, append(thrumtest.GitEnv(), "GIT_COMMITTER_DATE=2090-01-01T00:00:00Z")
	if out, err := later.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	thrumtest.Git(t, repo, "checkout", "-q", "main")
	thrumtest.Git(t, repo, "merge", "-q", "--allow-unrelated-histories", "-m", "merge", "other")
	got, err := rootCommit(t.Context(), repo)
	if err != nil || got != strings.TrimSpace(first) {
		t.Fatalf("rootCommit = %q, %v; want the first commit %s", got, err, first)
	}
	// Once recorded, the ID stays, even when a history older than the
	// first commit is merged in.
	l := &layout{Root: repo, Git: true}
	id := l.RepoID(t.Context())
	if id != got[:16] {
		t.Fatalf("RepoID = %q, want %q", id, got[:16])
	}
	thrumtest.Git(t, repo, "checkout", "-q", "--orphan", "older")
	older := exec.Command("git", "commit", "-q", "--allow-empty", "-m", "an older history")
	older.Dir, older.Env = repo, append(thrumtest.GitEnv(), "GIT_COMMITTER_DATE=2001-01-01T00:00:00Z")
	if out, err := older.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	thrumtest.Git(t, repo, "checkout", "-q", "main")
	thrumtest.Git(t, repo, "merge", "-q", "--allow-unrelated-histories", "-m", "merge", "older")
	if again := (&layout{Root: repo, Git: true}).RepoID(t.Context()); again != id {
		t.Errorf("after merging an older history RepoID = %q, want %q as recorded", again, id)
	}
}
