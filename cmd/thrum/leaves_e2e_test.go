package main

import (
	"strings"
	"testing"

	"github.com/thrumhq/thrum/internal/thrumtest"
)

// TestInitAndStartSayWhatLeaves: in a clone whose remote was added with
// a relative path (git remote add origin ../remote.git), init says in one
// line that the log goes to that remote's a-sync branch; the first
// daemon start says it too, a second start does not repeat it; the
// daemon then pushes there (the relative path means what it meant from
// the repository's root); and sync status shows the interval and the
// next round, exit 0.
func TestInitAndStartSayWhatLeaves(t *testing.T) {
	t.Parallel()
	remote := thrumtest.GitRemote(t)
	dir := remote.Clone("a")
	thrumtest.Git(t, dir, "remote", "set-url", "origin", "../remote.git")
	c := &syncCLI{thrumCLI: &thrumCLI{t: t, repo: dir, bin: thrumtest.Binary(t)}, name: "a"}

	r := c.do("", "init")
	contains(t, "init", r.stdout, "pushes every message and event of the log", "git remote origin (../remote.git), branch a-sync", "thrum init --local")
	start := c.do("", "daemon", "start", "--sync-interval", "1h")
	contains(t, "first daemon start", start.stdout, "git remote origin (../remote.git), branch a-sync")
	c.do("", "daemon", "stop")
	c.startDaemon("--sync-interval", "1h")
	again := c.do("", "daemon", "start")
	lacks(t, "a later daemon start", again.stdout, "a-sync")

	c.do("", "quickstart", "--name", "alice", "--role", "dev", "--module", "m")
	c.do("alice", "send", "over a relative remote", "--to", "@everyone")
	c.forceSync()
	tree := thrumtest.Git(t, remote.Path, "ls-tree", "-r", "--name-only", "refs/heads/a-sync")
	contains(t, "the remote's a-sync", tree, "messages/alice.jsonl")

	st := c.syncStatus()
	if num(st, "interval_ms") != 3600*1000 || str(st, "next_sync_at") == "" {
		t.Errorf("sync status --json lacks the interval or the next round: %v", st)
	}
	r = c.do("", "sync", "status")
	contains(t, "sync status", r.stdout, "Sync: synced", "Interval: 1h0m0s when idle", "next round in ")
}

// TestInitLocalSendsNothing: in a clone of a remote whose a-sync already
// holds history, init --local says the log stays here, how many commits
// the remote's branch holds and how to delete it; the daemon then never
// pushes (the remote's branch is unchanged after a send), and sync
// status says sync is off, exit 0.
func TestInitLocalSendsNothing(t *testing.T) {
	t.Parallel()
	bin := thrumtest.Binary(t)
	remote := thrumtest.GitRemote(t)
	// Another clone pushed the log before.
	a := &syncCLI{thrumCLI: &thrumCLI{t: t, repo: remote.Clone("a"), bin: bin}, name: "a"}
	a.do("", "init")
	a.startDaemon("--sync-interval", "1h")
	a.do("", "quickstart", "--name", "alice", "--role", "dev", "--module", "m")
	a.forceSync()
	before := thrumtest.Git(t, remote.Path, "rev-parse", "refs/heads/a-sync")
	commits := thrumtest.Git(t, remote.Path, "rev-list", "--count", "refs/heads/a-sync")

	b := &syncCLI{thrumCLI: &thrumCLI{t: t, repo: remote.Clone("b"), bin: bin}, name: "b"}
	r := b.do("", "init", "--local")
	contains(t, "init --local", r.stdout, "Local: the log stays on this machine",
		"origin/a-sync already holds "+commits+" commits", "git push origin --delete a-sync")
	lacks(t, "init --local", r.stdout, "pushes every message")
	if v := thrumtest.Git(t, b.repo, "config", "--get", "thrum.local"); v != "true" {
		t.Fatalf("thrum.local = %q after init --local", v)
	}
	b.startDaemon("--sync-interval", "1h")
	b.do("", "quickstart", "--name", "bob", "--role", "dev", "--module", "m")
	b.do("bob", "send", "stays here", "--to", "@everyone")
	st := b.syncStatus()
	if str(st, "sync_state") != "off" {
		t.Errorf("sync status --json in a local clone: %v", st)
	}
	r = b.do("", "sync", "status")
	contains(t, "sync status", r.stdout, "Sync: off")
	if f := b.run("sync", "force", "--wait"); f.code != 1 || !strings.Contains(f.stderr, "sync is off") {
		t.Errorf("sync force in a local clone:\n%s", f)
	}
	if after := thrumtest.Git(t, remote.Path, "rev-parse", "refs/heads/a-sync"); after != before {
		t.Errorf("the remote's a-sync moved from %s to %s in local mode", before, after)
	}
}
