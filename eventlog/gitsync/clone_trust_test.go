package gitsync_test

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/eventlog/gitsync"
	"github.com/thrumhq/thrum/identity"
	"github.com/thrumhq/thrum/internal/thrumtest"
	"github.com/thrumhq/thrum/rpc"
)

// poison plants on the remote's sync branch, with git's plumbing, what a
// fresh clone must never take: a local shard whose credential.add makes
// "pwned-token" authenticate as alice, symbolic links to files outside
// the repository (one that exists, which a write through the link would
// empty or extend, and one that does not, which it would create), and,
// if weird, a path outside the log. It returns the outside paths.
func poison(t *testing.T, remote string, weird bool) (existing, missing, pwned string) {
	t.Helper()
	outside := t.TempDir()
	existing, missing, pwned = filepath.Join(outside, "notes.txt"), filepath.Join(outside, "created-by-the-remote"), "pwned-token"
	if err := os.WriteFile(existing, []byte("keep me\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	planted := map[string]thrumtest.Planted{
		eventlog.LocalFile: {Content: thrumtest.EventLine(t, eventlog.TypeCredentialAdd, map[string]any{
			"agent_id": "alice", "token_hash": identity.HashToken(pwned)}) + "\n"},
		eventlog.ShardPath("mallory"):       {Content: existing, Link: true},
		eventlog.SegmentPath("", 1):         {Content: missing, Link: true},
		eventlog.SegmentPath("alice", 1):    {Content: existing, Link: true},
		eventlog.MessagesDir + "/notes.txt": {Content: "not a shard of this log\n"},
	}
	if weird {
		planted[eventlog.MessagesDir+"/../x.jsonl"] = thrumtest.Planted{Content: "outside the log\n"}
	}
	thrumtest.ForgeBranch(t, remote, "a-sync", planted)
	return existing, missing, pwned
}

// outsideUntouched fails the test if a write reached the files outside
// the repository.
func outsideUntouched(t *testing.T, existing, missing string) {
	t.Helper()
	if b, err := os.ReadFile(existing); err != nil || string(b) != "keep me\n" {
		t.Errorf("%s, outside the repository, now holds %q (%v)", existing, b, err)
	}
	if _, err := os.Lstat(missing); err == nil {
		t.Errorf("%s, a path the remote chose, was created", missing)
	}
}

// privateTree fails the test unless every file in the log directory is
// 0600 and every directory 0700, and none is a symbolic link.
func privateTree(t *testing.T, dir string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == filepath.Join(dir, ".git") {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		want := fs.FileMode(0o600)
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			t.Errorf("%s is a symbolic link", path)
			return nil
		case fi.IsDir():
			want = 0o700
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s has mode %04o, want %04o", path, fi.Mode().Perm(), want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A fresh clone of a remote that planted a local shard, symbolic links,
// a file that is none of the log's and a path outside the log: the clone
// is made (init succeeds), syncs, takes the log's own lines through
// admission and nothing else. No link is written through, the planted
// token authenticates as nobody, every file it left out is reported, and
// the log's files are its owner's alone whatever the umask.
func TestFreshCloneTakesOnlyTheLogsOwnFiles(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	remote := newRemote(t)
	a := newClone(t, remote, "a", nil)
	a.register("alice", "implementer")
	id := a.send("alice", "alice", "a note to self")
	a.sync()
	existing, missing, pwned := poison(t, remote, true)

	b := newClone(t, remote, "b", nil) // init: must not fail on messages/../x.jsonl
	b.sync()
	if _, ok := b.hasMessage(id); !ok {
		t.Error("b lacks alice's message: the log's own lines were not admitted")
	}
	if who, err := b.n.Authenticate(context.Background(), pwned); err == nil {
		t.Errorf("b: the planted token authenticates as %s", who)
	}
	outsideUntouched(t, existing, missing)
	privateTree(t, b.wt)
	for _, rel := range []string{eventlog.SegmentPath("", 1), eventlog.SegmentPath("alice", 1), eventlog.MessagesDir + "/notes.txt"} {
		if _, err := os.Lstat(filepath.Join(b.wt, rel)); err == nil {
			t.Errorf("b's log directory holds %s, which only the remote wrote", rel)
		}
	}
	if local, _ := os.ReadFile(filepath.Join(b.wt, eventlog.LocalFile)); strings.Contains(string(local), identity.HashToken(pwned)) {
		t.Error("b's local shard holds the remote's credential")
	}
	st := b.s.Status()
	var reported []string
	for _, r := range st.Refusals {
		reported = append(reported, r.File+": "+r.Reason)
	}
	got := strings.Join(reported, "\n")
	for _, want := range []string{
		"local.jsonl: the local shard",
		"messages/mallory.jsonl: a symbolic link",
		"events/000001.jsonl: a symbolic link",
		"messages/alice/000001.jsonl: a symbolic link",
		"messages/notes.txt: not a file of the log",
		"messages/../x.jsonl: not a file of the log",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("b's sync status lacks %q:\n%s", want, got)
		}
	}
}

// makeOldWorktree makes the log's worktree as an older thrum's init did:
// the sync branch started from the remote's and checked out whole.
func makeOldWorktree(t *testing.T, dir, wt string) {
	t.Helper()
	gitT(t, dir, "branch", "--no-track", "a-sync", "refs/remotes/origin/a-sync")
	if err := os.MkdirAll(filepath.Dir(wt), 0o755); err != nil {
		t.Fatal(err)
	}
	gitT(t, dir, "worktree", "add", "--quiet", wt, "a-sync")
}

// A clone that an older thrum's init made from a poisoned remote (its
// worktree holds the remote's local shard and links), then used (carol
// registered here, so the local shard holds her credential after the
// remote's), is repaired at its next start: the links are moved aside
// unfollowed, the remote's credential is dropped and carol's kept, and
// the next sync commits a tree without the local shard or the links.
func TestPoisonedCloneRepairedAtStart(t *testing.T) {
	remote := newRemote(t)
	a := newClone(t, remote, "a", nil)
	a.register("alice", "implementer")
	a.sync()
	existing, missing, pwned := poison(t, remote, false)

	dir := filepath.Join(t.TempDir(), "b")
	gitT(t, filepath.Dir(dir), "clone", "-q", remote, dir)
	thrumtest.GitUser(t, dir)
	common := gitT(t, dir, "rev-parse", "--git-common-dir")
	wt := filepath.Join(dir, common, "thrum-sync", "a-sync")
	makeOldWorktree(t, dir, wt)
	if fi, err := os.Lstat(filepath.Join(wt, eventlog.ShardPath("mallory"))); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Fatalf("the old init did not check out the planted link (%v)", err)
	}
	db := filepath.Join(t.TempDir(), "m.db")
	ctx := context.Background()
	n, err := thrum.Open(ctx, wt, &thrum.Options{DBPath: db, NoSync: true})
	if err != nil {
		t.Fatalf("open the poisoned log: %v", err)
	}
	r, err := n.RegisterAgent(ctx, &rpc.RegisterAgentParams{Name: "carol", Role: "reviewer", Module: "m"})
	if err != nil {
		t.Fatal(err)
	}
	carol := r.Token
	n.Close()

	adopted := filepath.Join(t.TempDir(), "adopted")
	rep, err := gitsync.Repair(ctx, wt, adopted)
	if err != nil {
		t.Fatalf("Repair: %v", err)
	}
	if !rep.LocalRewritten || len(rep.Dropped) != 1 || rep.Dropped[0] != "alice" {
		t.Errorf("Repair: rewrote the local shard %v, dropped %v; want it rewritten and alice's credential dropped", rep.LocalRewritten, rep.Dropped)
	}
	for _, f := range []string{db, db + "-wal", db + "-shm"} {
		os.Remove(f)
	}
	n, err = thrum.Open(ctx, wt, &thrum.Options{DBPath: db, NoSync: true})
	if err != nil {
		t.Fatalf("open the repaired log: %v", err)
	}
	defer n.Close()
	if who, err := n.Authenticate(ctx, pwned); err == nil {
		t.Errorf("the planted token authenticates as %s", who)
	}
	if who, err := n.Authenticate(ctx, carol); err != nil || who != "carol" {
		t.Errorf("carol's token, issued here: %q, %v", who, err)
	}
	outsideUntouched(t, existing, missing)
	privateTree(t, wt)
	moved, err := gitsync.ReadAdopted(adopted)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, m := range moved {
		paths = append(paths, m.Path)
		if fi, err := os.Lstat(m.MovedTo); err != nil {
			t.Errorf("%s was moved to %s, which is missing: %v", m.Path, m.MovedTo, err)
		} else if strings.HasSuffix(m.Path, "mallory.jsonl") && fi.Mode()&fs.ModeSymlink == 0 {
			t.Errorf("the link %s was not moved as a link", m.Path)
		}
	}
	for _, want := range []string{eventlog.ShardPath("mallory"), eventlog.SegmentPath("", 1), eventlog.SegmentPath("alice", 1), eventlog.LocalFile} {
		if !strings.Contains(strings.Join(paths, " "), want) {
			t.Errorf("the adopted list %v lacks %s", paths, want)
		}
	}
	// Again: nothing more to do.
	if rep, err := gitsync.Repair(ctx, wt, adopted); err != nil || len(rep.Moved) != 0 || rep.LocalRewritten {
		t.Errorf("Repair again: %+v, %v; want nothing done", rep, err)
	}
	// The next sync commits a tree without what the remote planted.
	s, err := gitsync.New(n.EventLog(), &gitsync.Options{Gate: n.Admission()})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SyncOnce(ctx); err != nil {
		t.Fatalf("sync: %v", err)
	}
	tree := gitT(t, dir, "ls-tree", "-r", "--name-only", "a-sync")
	for _, gone := range []string{eventlog.LocalFile, eventlog.ShardPath("mallory"), eventlog.SegmentPath("", 1)} {
		if strings.Contains("\n"+tree+"\n", "\n"+gone+"\n") {
			t.Errorf("the branch's tree still holds %s after a sync:\n%s", gone, tree)
		}
	}
}
