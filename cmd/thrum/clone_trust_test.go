package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/identity"
	"github.com/thrumhq/thrum/internal/thrumtest"
	"github.com/thrumhq/thrum/rpc"
)

// TestPoisonedRemote: someone who can push to the remote plants on its
// a-sync branch, with git's plumbing, a local.jsonl whose credential.add
// makes a token of theirs authenticate as alice, a symbolic link to a
// file outside the repository, and a path outside the log
// (messages/../x.jsonl). A fresh clone's `thrum init` succeeds and its
// daemon takes none of it: the token opens nothing, the outside file is
// untouched, sync status and doctor report each planted file. A clone
// that an older thrum's init made before the bad path came (the remote's
// tree checked out whole) is repaired when the new daemon starts: the
// link and the local shard are moved aside, the token dropped, and
// doctor lists what was moved.
func TestPoisonedRemote(t *testing.T) {
	t.Parallel()
	thrumBin := thrumtest.Binary(t)
	remote := thrumtest.GitRemote(t)
	env := map[string]string{"GIT_CONFIG_GLOBAL": os.DevNull, "GIT_CONFIG_NOSYSTEM": "1"}
	refusal := "admit: refused events from another machine"
	// The planted token, tried below, is a refused credential: logged too.
	const credential = "loopback port refused"
	a := &syncCLI{thrumCLI: &thrumCLI{t: t, repo: remote.Clone("a"), bin: thrumBin}, name: "a", agent: "alice", allowed: []string{refusal}}
	a.do("", "init")
	a.startDaemon("--sync-interval", "1h")
	a.do("", "quickstart", "--name", "alice", "--role", "implementer", "--module", "auth")
	a.forceSync()

	outside := filepath.Join(t.TempDir(), "notes.txt")
	if err := os.WriteFile(outside, []byte("keep me\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	pwned := identity.NewToken()
	planted := map[string]thrumtest.Planted{
		eventlog.LocalFile: {Content: thrumtest.EventLine(t, eventlog.TypeCredentialAdd, map[string]any{
			"agent_id": "alice", "token_hash": identity.HashToken(pwned)}) + "\n"},
		eventlog.ShardPath("mallory"): {Content: outside, Link: true},
	}
	thrumtest.ForgeBranch(t, remote.Path, "a-sync", planted)

	// c: made as an older thrum's init made it, before the bad path came.
	cDir := remote.Clone("c")
	thrumtest.Git(t, cDir, "branch", "--no-track", "a-sync", "refs/remotes/origin/a-sync")
	cLog := filepath.Join(cDir, ".git", "thrum-sync", "a-sync")
	thrumtest.Git(t, cDir, "worktree", "add", "--quiet", cLog, "a-sync")

	thrumtest.ForgeBranch(t, remote.Path, "a-sync", map[string]thrumtest.Planted{eventlog.MessagesDir + "/../x.jsonl": {Content: "outside the log\n"}})
	moved := "thrum: moved out of the log directory, never read"
	dropped := "thrum: dropped credentials that came from the remote's tree"
	b := &syncCLI{thrumCLI: &thrumCLI{t: t, repo: remote.Clone("b"), bin: thrumBin}, name: "b", allowed: []string{refusal, credential}}
	c := &syncCLI{thrumCLI: &thrumCLI{t: t, repo: cDir, bin: thrumBin}, name: "c", allowed: []string{refusal, moved, dropped, credential}}
	b.do("", "init") // exit 0 with messages/../x.jsonl on the remote
	for _, x := range []*syncCLI{b, c} {
		x.startDaemon("--sync-interval", "1h")
		st := x.forceSync()
		if n := num(st, "refused"); x == b && n < 3 {
			t.Errorf("%s: sync status --json refused = %v, want the planted files: %v", x.name, n, st)
		}
		port, err := os.ReadFile(filepath.Join(x.repo, ".thrum", "var", "ws.port"))
		if err != nil {
			t.Fatal(err)
		}
		ws, err := rpc.DialWebSocket(context.Background(), "ws://127.0.0.1:"+strings.TrimSpace(string(port))+"/ws", nil)
		if err != nil {
			t.Fatal(err)
		}
		if r, err := ws.Auth(context.Background(), &rpc.AuthParams{Token: pwned}); err == nil {
			t.Errorf("%s: the planted token authenticates as %+v", x.name, r)
		}
		ws.Close()
	}
	contains(t, "b: sync status", b.do("", "sync", "status").stdout,
		"local.jsonl: the local shard belongs to the machine that wrote it",
		"messages/mallory.jsonl: a symbolic link",
		"messages/../x.jsonl: not a file of the log")
	if b, err := os.ReadFile(outside); err != nil || string(b) != "keep me\n" {
		t.Errorf("the file outside the repository now holds %q (%v)", b, err)
	}
	for _, x := range []*syncCLI{b, c} {
		x.do("", "daemon", "stop")
	}
	// b's merge, pushed first, left none of it in the remote's tree: c
	// finds nothing more to refuse there.
	r := b.withEnv(env, "doctor")
	if r.code != 0 {
		t.Errorf("b: doctor exit %d, want 0:\n%s", r.code, r)
	}
	contains(t, "b: doctor", r.stdout, "Sync refused ", "messages/mallory.jsonl: a symbolic link")
	if tree := thrumtest.Git(t, remote.Path, "ls-tree", "-r", "--name-only", "a-sync"); strings.Contains(tree, "mallory") || strings.Contains(tree, "local.jsonl") || strings.Contains(tree, "x.jsonl") {
		t.Errorf("the remote's tree still holds what was planted:\n%s", tree)
	}
	r = c.withEnv(env, "doctor")
	if r.code != 0 {
		t.Errorf("c: doctor exit %d, want 0:\n%s", r.code, r)
	}
	contains(t, "c: doctor", r.stdout, "Moved out of the log directory, never read",
		"messages/mallory.jsonl: a symbolic link in the log directory", "local.jsonl: the local shard as an older thrum checked it out")
	if fi, err := os.Lstat(filepath.Join(cLog, eventlog.ShardPath("mallory"))); err == nil {
		t.Errorf("c's log directory still holds the link (%v)", fi.Mode())
	}
}
