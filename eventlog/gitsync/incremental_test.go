package gitsync_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/eventlog/gitsync"
	"github.com/thrumhq/thrum/internal/thrumtest"
)

// TestMergeChecksOnlyNewLines: a clone whose remote shard file grew
// since its last merge checks only the new lines, and a clone reading
// back what it pushed itself checks none.
func TestMergeChecksOnlyNewLines(t *testing.T) {
	t.Parallel()
	_, a, b := pair(t, nil)
	for i := 0; i < 5; i++ {
		a.send("alice", "bob", "first batch "+strconv.Itoa(i))
	}
	syncAll(t, a, b)
	for i := 0; i < 3; i++ {
		a.send("alice", "bob", "second batch "+strconv.Itoa(i))
	}
	a.sync()
	before := a.s.Status()
	a.sync() // fetches its own push back
	if got := a.s.Status().Checked - before.Checked; got != 0 {
		t.Errorf("a checked %d remote lines reading back its own push, want 0", got)
	}
	bBefore := b.s.Status()
	b.sync()
	bAfter := b.s.Status()
	imported := bAfter.Imported - bBefore.Imported
	if imported < 3 {
		t.Fatalf("b imported %d events, want at least the 3 messages", imported)
	}
	if got := bAfter.Checked - bBefore.Checked; got != imported {
		t.Errorf("b checked %d remote lines for %d new events: it re-read old ones", got, imported)
	}
	if got := len(b.inbox("bob")); got != 8 {
		t.Errorf("bob's inbox on b has %d messages, want 8", got)
	}
}

// TestMergeRewrittenRemoteFile: when a remote shard file's old bytes
// changed (here a new event was put in front of them), the offset of the
// last merge does not apply: the file is read in full and the new event
// is imported.
func TestMergeRewrittenRemoteFile(t *testing.T) {
	t.Parallel()
	remote, a, b := pair(t, nil)
	a.send("alice", "bob", "one")
	a.send("alice", "bob", "two")
	syncAll(t, a, b)
	id := a.send("alice", "bob", "three, delivered out of band") // a does not sync it

	// Find the shard file holding it in a's log and its line.
	var rel string
	var line []byte
	files, _ := filepath.Glob(filepath.Join(a.wt, "messages", "*.jsonl"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range bytes.SplitAfter(data, []byte("\n")) {
			if bytes.Contains(l, []byte(id)) {
				rel, line = "messages/"+filepath.Base(f), l
			}
		}
	}
	if line == nil {
		t.Fatalf("message %s is in none of a's shard files", id)
	}

	// A plain git clone rewrites the remote file: the new line first.
	dir := filepath.Join(t.TempDir(), "rewriter")
	gitT(t, filepath.Dir(dir), "clone", "-q", "-b", "a-sync", remote, dir)
	thrumtest.GitUser(t, dir)
	old, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(rel)))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(old, []byte(id)) {
		t.Fatal("the remote already has the message")
	}
	if err := os.WriteFile(filepath.Join(dir, filepath.FromSlash(rel)), append(append([]byte(nil), line...), old...), 0o644); err != nil {
		t.Fatal(err)
	}
	gitT(t, dir, "commit", "-q", "-am", "rewrite a shard")
	gitT(t, dir, "push", "-q", "origin", "a-sync")

	before := b.s.Status()
	b.sync()
	after := b.s.Status()
	if _, ok := b.inbox("bob")[id]; !ok {
		t.Fatalf("b did not import the event put in front of the old lines")
	}
	lines := strings.Count(string(old), "\n") + 1
	if got := after.Checked - before.Checked; got < lines {
		t.Errorf("b checked %d lines of the rewritten file, want all %d", got, lines)
	}
	syncAll(t, a, b) // and both still agree
	sameShards(t, "a", a.logIDs(), "b", b.logIDs())
}

// TestRepackPacksLooseObjects: every PackEvery rounds that wrote objects
// the Syncer repacks its repository, leaving no loose objects that the
// packs hold, and sync goes on working.
func TestRepackPacksLooseObjects(t *testing.T) {
	t.Parallel()
	_, a, b := pair(t, &gitsync.Options{PackEvery: 3})
	packs := a.s.Status().Packs
	for i := 0; i < 7 && a.s.Status().Packs == packs; i++ {
		a.send("alice", "bob", "packed "+strconv.Itoa(i))
		a.sync()
	}
	if a.s.Status().Packs == packs {
		t.Fatalf("no repack after 7 rounds that committed, PackEvery 3")
	}
	// Right after a repack, the reachable objects are all packed.
	out := gitT(t, a.wt, "count-objects", "-v")
	if !strings.Contains(out, "\ncount: 0\n") && !strings.HasPrefix(out, "count: 0\n") {
		t.Errorf("loose objects remain after the repack:\n%s", out)
	}
	gitT(t, a.wt, "fsck", "--no-progress", "--connectivity-only")
	b.sync()
	if got := len(b.inbox("bob")); got == 0 {
		t.Errorf("b has no message from a after the repack")
	}
	sameShards(t, "a", a.logIDs(), "b", b.logIDs())
}

// TestStagedBlobsMatchTheLog: the commits fast-import writes (blobs,
// trees, commits, one pack each) are valid git objects, and HEAD's tree
// holds exactly the segment files' bytes, through a new agent and a
// segment roll (a new directory), and never the local shard; a round with
// nothing new leaves HEAD as it was. b, on the other side, gets every
// message.
func TestStagedBlobsMatchTheLog(t *testing.T) {
	t.Parallel()
	_, a, b := pair(t, nil)
	a.send("alice", "bob", "first")
	a.sync()
	a.register("carol", "tester") // a new file in messages/
	a.send("carol", "bob", "from a new agent")
	a.sync()
	big := strings.Repeat("x", 200<<10)
	for i := 0; i < 2; i++ { // over a segment: alice's next one is messages/alice/000001.jsonl
		a.send("alice", "bob", big+strconv.Itoa(i))
		a.sync()
	}
	a.send("alice", "bob", "after the roll")
	a.sync()
	head := gitT(t, a.wt, "rev-parse", "HEAD")
	a.sync()
	if got := gitT(t, a.wt, "rev-parse", "HEAD"); got != head {
		t.Errorf("a round with nothing new moved HEAD from %s to %s", head, got)
	}
	gitT(t, a.wt, "fsck", "--no-progress", "--strict")
	// Each commit's objects are one pack.
	idxs, _ := filepath.Glob(filepath.Join(a.gitDir, "objects", "pack", "*.idx"))
	if len(idxs) < 5 {
		t.Errorf("%d packs in the clone after 5 commits, want one per commit: %v", len(idxs), idxs)
	}
	for _, idx := range idxs {
		gitT(t, a.wt, "verify-pack", idx)
	}
	var paths []string
	for _, shard := range []string{"", "alice", "carol"} {
		segs, err := a.n.EventLog().Segments(shard)
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, segs...)
	}
	if !slices.Contains(paths, eventlog.SegmentPath("alice", 1)) {
		t.Fatalf("alice's messages did not roll into a second segment: %v", paths)
	}
	for _, rel := range paths {
		want, err := os.ReadFile(filepath.Join(a.wt, filepath.FromSlash(rel)))
		if err != nil {
			t.Fatal(err)
		}
		if got := gitT(t, a.wt, "cat-file", "blob", "HEAD:"+rel); got != strings.TrimSpace(string(want)) {
			t.Errorf("HEAD's %s differs from the file", rel)
		}
	}
	if _, err := os.Stat(filepath.Join(a.wt, eventlog.LocalFile)); err != nil {
		t.Fatalf("a has no local shard after registering agents: %v", err)
	}
	if tree := gitT(t, a.wt, "ls-tree", "-r", "--name-only", "HEAD"); strings.Contains(tree, eventlog.LocalFile) {
		t.Errorf("HEAD's tree holds the local shard:\n%s", tree)
	}
	b.sync()
	if got := len(b.inbox("bob")); got != 5 {
		t.Errorf("bob's inbox on b has %d messages, want 5", got)
	}
	sameShards(t, "a", a.logIDs(), "b", b.logIDs())
}

// A push streams the files it commits to git: a first push of a log of
// 8 MB allocates far less than the log, however large.
func TestFirstPushStreamsTheLog(t *testing.T) {
	a := newClone(t, newRemote(t), "a", nil)
	a.register("alice", "implementer")
	a.register("bob", "reviewer")
	big := strings.Repeat("x", 200<<10)
	for i := range 40 {
		a.send("alice", "bob", big+strconv.Itoa(i))
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	a.sync()
	runtime.ReadMemStats(&after)
	got := after.TotalAlloc - before.TotalAlloc
	t.Logf("the first push of 8 MB of messages allocated %.2f MB", float64(got)/(1<<20))
	if got > 4<<20 {
		t.Errorf("the first push of 8 MB of messages allocated %.1f MB", float64(got)/(1<<20))
	}
	if n := gitT(t, a.wt, "rev-list", "--count", "HEAD"); n == "0" {
		t.Fatal("nothing was committed")
	}
	if got := len(strings.Fields(gitT(t, a.wt, "ls-tree", "-r", "--name-only", "HEAD", "messages/alice"))); got < 10 {
		t.Errorf("HEAD holds %d of alice's segments, want at least 10", got)
	}
}

// A segment cut short behind the log's back is refused before git runs,
// naming the file, and leaves no fast-import crash report.
func TestShortSegmentRefusedBeforeGit(t *testing.T) {
	t.Parallel()
	a := newClone(t, newRemote(t), "a", nil)
	a.register("alice", "implementer")
	a.register("bob", "reviewer")
	a.sync()
	a.send("alice", "bob", "a message whose file is then cut short")
	rel := eventlog.SegmentPath("alice", 0)
	path := filepath.Join(a.wt, filepath.FromSlash(rel))
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, fi.Size()-10); err != nil {
		t.Fatal(err)
	}
	head := gitT(t, a.wt, "rev-parse", "HEAD")
	err = a.s.SyncOnce(context.Background())
	if err == nil || !strings.Contains(err.Error(), rel) || !strings.Contains(err.Error(), "shorter") {
		t.Fatalf("a round over a cut segment: %v; want an error naming %s", err, rel)
	}
	if got := gitT(t, a.wt, "rev-parse", "HEAD"); got != head {
		t.Errorf("the branch moved from %s to %s", head, got)
	}
	if crashes, _ := filepath.Glob(filepath.Join(a.gitDir, "fast_import_crash_*")); len(crashes) > 0 {
		t.Errorf("fast-import left crash reports: %v", crashes)
	}
}
