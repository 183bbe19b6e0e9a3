package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/thrumhq/thrum/internal/thrumtest"
	"github.com/thrumhq/thrum/rpc"
)

// Attacks on the edges of the owner's standing (DESIGN.md, "Trust
// boundary"): a daemon that stops answering, a committed redirect or
// identity file, files made under a permissive umask.

// A daemon that stops answering (SIGSTOP: the socket still accepts, the
// kernel queues the request, nothing reads it) fails a command after the
// call timeout, saying which daemon and what to do, instead of hanging it.
func TestStoppedDaemonFailsCommands(t *testing.T) {
	t.Parallel()
	c := &thrumCLI{t: t, repo: thrumtest.GitRepo(t), bin: thrumtest.Binary(t)}
	c.ok("", "init")
	st := startDaemon(t, c)
	c.ok("", "quickstart", "--name", "alice", "--role", "implementer", "--module", "auth")
	pid := int(num(st, "pid"))
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGCONT) }) // before startDaemon's cleanup stops it

	start := time.Now()
	r := c.withEnv(map[string]string{"THRUM_NAME": "alice", "THRUM_CALL_TIMEOUT": "2s"}, "inbox")
	took := time.Since(start)
	if r.code != exitNoDaemon {
		t.Fatalf("inbox against a stopped daemon: want exit %d after the call timeout, got (after %v):\n%s", exitNoDaemon, took.Round(time.Millisecond), r)
	}
	contains(t, "stderr", r.stderr, "pid "+strconv.Itoa(pid), "did not answer", "2s", "daemon.log")
	t.Logf("inbox against a stopped daemon gave up after %v", took.Round(time.Millisecond))
}

// A message for alice waiting in project A, where she and bob are
// registered and its daemon runs; it returns A's CLI.
func projectWithMailForAlice(t *testing.T) *thrumCLI {
	t.Helper()
	a := &thrumCLI{t: t, repo: thrumtest.GitRepo(t), bin: thrumtest.Binary(t)}
	a.ok("", "init")
	startDaemon(t, a)
	a.ok("", "quickstart", "--name", "alice", "--role", "implementer", "--module", "auth")
	a.ok("", "quickstart", "--name", "bob", "--role", "reviewer", "--module", "auth")
	a.ok("bob", "send", "for-alice-only", "--to", "@alice")
	return a
}

// stillQueued fails the test unless alice's receipt of bob's message is
// still queued in a: no one took it for her.
func stillQueued(t *testing.T, a *thrumCLI) {
	t.Helper()
	var sent rpc.ListSentResult
	a.okJSON(&sent, "bob", "sent")
	if len(sent.Messages) != 1 || len(sent.Messages[0].Receipts) != 1 || sent.Messages[0].Receipts[0].State != rpc.ReceiptQueued {
		t.Errorf("bob's message to alice was taken for her: %+v", sent.Messages)
	}
}

// A committed .thrum/redirect naming another project's .thrum (and an
// identity file with alice's ID and no token beside it) does not bind a
// checkout to that project's daemon: the inbox monitor (thrum wait) and
// inbox refuse the redirect, and alice's mail stays hers.
func TestRedirectToAnotherProjectRefused(t *testing.T) {
	t.Parallel()
	a := projectWithMailForAlice(t)
	b := &thrumCLI{t: t, repo: thrumtest.GitRepo(t), bin: a.bin}
	redirect := filepath.Join(b.repo, ".thrum", "redirect")
	plant(t, redirect, filepath.Join(a.repo, ".thrum")+"\n")
	plant(t, filepath.Join(b.repo, ".thrum", "identities", "alice.json"),
		`{"version":1,"name":"alice","agent_id":"alice","role":"implementer","module":"auth"}`)
	thrumtest.Git(t, b.repo, "add", "-f", ".thrum")
	thrumtest.Git(t, b.repo, "commit", "-q", "-m", "a redirect and an identity, committed")

	for _, args := range [][]string{{"wait", "--timeout", "3s"}, {"inbox"}} {
		r := b.as("alice", args...)
		if r.code == 0 || strings.Contains(r.stdout, "for-alice-only") {
			t.Errorf("a committed redirect bound the checkout to another project's daemon:\n%s", r)
		}
		contains(t, "stderr", r.stderr, redirect, "not the .thrum of this repository's main worktree")
	}
	stillQueued(t, a)
}

// An identity file with an agent's ID and no token (committed on a
// branch, say, and checked out in a worktree that shares the daemon)
// binds nothing: thrum wait and inbox refuse it, and the agent's mail
// stays its own. The redirect to the main worktree is followed.
func TestIdentityWithoutTokenBindsNothing(t *testing.T) {
	t.Parallel()
	a := projectWithMailForAlice(t)
	feat := filepath.Join(t.TempDir(), "feature")
	thrumtest.Git(t, a.repo, "worktree", "add", "-q", "-b", "feature", feat)
	f := &thrumCLI{t: t, repo: feat, bin: a.bin}
	f.ok("", "init")
	plant(t, filepath.Join(feat, ".thrum", "identities", "alice.json"),
		`{"version":1,"name":"alice","agent_id":"alice","role":"implementer","module":"auth"}`)

	for _, args := range [][]string{{"wait", "--timeout", "3s"}, {"inbox"}} {
		f.fails(exitNoIdentity, "alice", args, "has no token", "binds nothing")
	}
	// Without a name, the one file is no identity either.
	f.fails(exitNoIdentity, "", []string{"inbox"}, "no identity file with a token")
	stillQueued(t, a)
	f.ok("", "quickstart", "--name", "carol", "--role", "tester", "--module", "auth")
	contains(t, "whoami", f.ok("carol", "agent", "whoami").stdout, "@carol")
}

// plant writes a file as someone else might have: a commit, a checkout.
func plant(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
