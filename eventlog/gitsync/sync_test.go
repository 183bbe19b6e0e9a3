package gitsync_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/eventlog/gitsync"
	"github.com/thrumhq/thrum/rpc"
)

// loopOpts makes a Run loop that syncs only when forced (or, for
// Notify, after an hour), so that a test decides when rounds happen.
func loopOpts() *gitsync.Options {
	return &gitsync.Options{Interval: time.Hour, Debounce: time.Hour}
}

// pair makes two clones of one remote, alice registered on a and bob on
// b, and syncs until each knows the other.
func pair(t testing.TB, opts *gitsync.Options) (remote string, a, b *clone) {
	t.Helper()
	remote = newRemote(t)
	a = newClone(t, remote, "a", opts)
	b = newClone(t, remote, "b", opts)
	a.register("alice", "implementer")
	b.register("bob", "reviewer")
	syncAll(t, a, b, a)
	return remote, a, b
}

// drain returns the notifications waiting on l without blocking. A
// node publishes while it commits, before Import (and so SyncOnce)
// returns: what a finished round notified is already queued.
func drain(l *thrum.Subscription) []*rpc.MessageNotification {
	var out []*rpc.MessageNotification
	for {
		select {
		case nt, ok := <-l.C():
			if !ok {
				return out
			}
			out = append(out, nt)
		default:
			return out
		}
	}
}

// TestMessageReachesOtherClone sends in clone a and reads in clone b,
// first with SyncOnce, then with Force on running loops. b's listener is
// notified exactly once per message, however many rounds follow.
func TestMessageReachesOtherClone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, a, b := pair(t, loopOpts())

	l := b.n.Listen(0)
	defer l.Close()
	if _, err := b.n.Subscribe(thrum.AsAgent(ctx, "bob"), l, &rpc.SubscribeParams{MentionRole: "bob"}); err != nil {
		t.Fatal(err)
	}
	checkOnce := func(id, content string) {
		t.Helper()
		if got := b.inbox("bob"); got[id] != content {
			t.Errorf("b: bob's inbox has %q for %s, want %q (inbox %v)", got[id], id, content, got)
		}
		nts := drain(l)
		if len(nts) != 1 || nts[0].MessageID != id {
			t.Fatalf("b: notifications = %+v, want exactly one for %s", nts, id)
		}
		nt := nts[0]
		if nt.Author.AgentID != "alice" || nt.Author.Role != "implementer" || nt.Preview != content || nt.MatchedSubscription.MatchType != rpc.MatchMention {
			t.Errorf("b: notification = %+v", nt)
		}
	}
	noMore := func(when string) {
		t.Helper()
		if nts := drain(l); len(nts) != 0 {
			t.Errorf("b: %d notifications %s, want none: %+v", len(nts), when, nts[0])
		}
	}

	// SyncOnce.
	id := a.send("alice", "bob", "hello from a")
	if got := b.inbox("bob"); len(got) != 0 {
		t.Fatalf("b has bob's inbox %v before any sync", got)
	}
	a.sync()
	noMore("after only a synced")
	b.sync()
	checkOnce(id, "hello from a")
	syncAll(t, a, b, a, b)
	noMore("after more rounds")

	// Force on running loops.
	a.run()
	b.run()
	noMore("after Run's first round")
	id2 := a.send("alice", "bob", "hello again, through the loop")
	a.forceRound()
	b.forceRound()
	checkOnce(id2, "hello again, through the loop")
	for i := 0; i < 2; i++ {
		a.forceRound()
		b.forceRound()
	}
	noMore("after more forced rounds")
	for _, c := range []*clone{a, b} {
		if st := c.s.Status(); !st.Running || st.State != gitsync.StateSynced || st.LastError != "" || st.LastSyncAt.IsZero() {
			t.Errorf("%s: Status = %+v, want running, synced", c.name, st)
		}
	}
	if got := a.total(); got != 2 {
		t.Errorf("a holds %d messages, want 2", got)
	}

	// After the loops stop, Status says so.
	a.stop()
	if st := a.s.Status(); st.Running || st.State != gitsync.StateStopped {
		t.Errorf("a: Status after Run returned = %+v, want stopped", st)
	}

	// A restarted b (a new Syncer, which knows nothing of earlier
	// rounds) imports nothing twice and notifies nobody again.
	l.Close()
	b.close()
	b.open()
	l = b.n.Listen(0)
	defer l.Close()
	if _, err := b.n.Subscribe(thrum.AsAgent(ctx, "bob"), l, &rpc.SubscribeParams{MentionRole: "bob"}); err != nil {
		t.Fatal(err)
	}
	syncAll(t, b, a, b)
	noMore("after b restarted and synced")
	if st := b.s.Status(); st.Imported != 0 {
		t.Errorf("b imported %d events again after a restart", st.Imported)
	}
	if got := b.total(); got != 2 {
		t.Errorf("b holds %d messages after a restart, want 2", got)
	}
	b.logIDs() // fails on a duplicate
}

// TestOfflineThousandsEachSide sends 1,000 messages on each side with no
// sync in between, then syncs a, b, a: both projections and both logs
// hold all 2,000 exactly once.
func TestOfflineThousandsEachSide(t *testing.T) {
	t.Parallel()
	const n = 1000
	remote, a, b := pair(t, nil)
	want := map[string]string{} // message ID → content
	var errs [2]error
	parallel(func() { errs[0] = sendMany(a, "alice", "bob", n, want, 0) }, func() { errs[1] = sendMany(b, "bob", "alice", n, nil, 1) })
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if a.total() != n || b.total() != n {
		t.Fatalf("before sync: a has %d messages, b %d; want %d each", a.total(), b.total(), n)
	}
	syncAll(t, a, b, a)

	for _, c := range []*clone{a, b} {
		if got := c.total(); got != 2*n {
			t.Errorf("%s: message.list total = %d, want %d", c.name, got, 2*n)
		}
		bob := c.inbox("bob")
		for id, content := range want {
			if bob[id] != content {
				t.Errorf("%s: bob's inbox lacks %s (%q)", c.name, id, content)
				break
			}
		}
		if got := len(c.inbox("alice")); got != n {
			t.Errorf("%s: alice's inbox has %d messages, want %d", c.name, got, n)
		}
	}
	ai, bi := a.logIDs(), b.logIDs()
	sameShards(t, "a", ai, "b", bi)
	if got := len(ai[eventlog.ShardPath("alice")]) + len(ai[eventlog.ShardPath("bob")]); got != 2*n {
		t.Errorf("a's message shards hold %d events, want %d", got, 2*n)
	}
	// The remote holds every event too (a pushed last).
	sameShards(t, "a", ai, "the remote", remoteIDs(t, remote))
}

// sendMany sends n messages from one agent to another, recording them in
// want when it is not nil. It reports instead of failing: it may run on
// its own goroutine.
func sendMany(c *clone, from, to string, n int, want map[string]string, tag int) error {
	ctx := thrum.AsAgent(context.Background(), from)
	for i := 0; i < n; i++ {
		content := fmt.Sprintf("%s → %s #%d.%d", from, to, tag, i)
		r, err := c.n.SendMessage(ctx, &rpc.SendMessageParams{Content: content, Mentions: []string{"@" + to}})
		if err != nil {
			return fmt.Errorf("clone %s: send %d: %w", c.name, i, err)
		}
		if want != nil {
			want[r.MessageID] = content
		}
	}
	return nil
}

// remoteIDs reads the event IDs of every shard on the remote's a-sync.
func remoteIDs(t testing.TB, remote string) map[string]map[string]bool {
	t.Helper()
	out := map[string]map[string]bool{}
	for _, row := range strings.Split(gitT(t, remote, "ls-tree", "-r", "refs/heads/a-sync"), "\n") {
		meta, path, ok := strings.Cut(row, "\t")
		f := strings.Fields(meta)
		shard, _, isSegment := eventlog.ParseSegmentPath(path)
		if !ok || len(f) != 3 || !isSegment {
			continue
		}
		blob := gitT(t, remote, "cat-file", "blob", f[2])
		key := eventlog.ShardPath(shard) // a shard's segments, as one
		ids := out[key]
		if ids == nil {
			ids = map[string]bool{}
		}
		for _, line := range strings.Split(blob, "\n") {
			if line == "" {
				continue
			}
			e, err := eventlog.DecodeLine([]byte(line))
			if err != nil {
				t.Fatalf("remote %s: %v", path, err)
			}
			if ids[e.ID] {
				t.Errorf("remote %s holds event %s twice", path, e.ID)
			}
			ids[e.ID] = true
		}
		out[key] = ids
	}
	return out
}

// pushLog installs hooks on the remote that record every push that
// reaches it and every push it accepts. The first push of a round waits
// (up to 3 s) at the remote until the expected number of pushes have
// reached it, so that two clones pushing together both get past their own
// fast-forward check and one of them loses at the remote, whatever the
// machine's load. expect sets that number.
func pushLog(t *testing.T, remote string) (reached, accepted func() int, expect func(int)) {
	t.Helper()
	dir := t.TempDir()
	file := func(name string) string { return filepath.Join(dir, name) }
	hook := func(name, body string) {
		if err := os.WriteFile(filepath.Join(remote, "hooks", name), []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	hook("pre-receive", fmt.Sprintf(`cat >/dev/null
echo x >> %[1]q
n=0
while [ "$(wc -l < %[1]q)" -lt "$(cat %[2]q)" ] && [ $n -lt 300 ]; do sleep 0.01; n=$((n+1)); done
`, file("reached"), file("target")))
	hook("post-receive", fmt.Sprintf("cat >/dev/null\necho x >> %q\n", file("accepted")))
	count := func(name string) func() int {
		return func() int {
			b, _ := os.ReadFile(file(name))
			return strings.Count(string(b), "\n")
		}
	}
	expect = func(n int) {
		if err := os.WriteFile(file("target"), []byte(strconv.Itoa(n)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	expect(0)
	return count("reached"), count("accepted"), expect
}

// TestConcurrentPushes runs two syncers at the same moment, both with new
// events: both rounds succeed (the loser of the push race retries) and
// nothing is lost.
func TestConcurrentPushes(t *testing.T) {
	t.Parallel()
	remote, a, b := pair(t, nil)
	reached, accepted, expect := pushLog(t, remote)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const rounds, per = 3, 20
	lost := 0
	for i := 0; i < rounds; i++ {
		if err := sendMany(a, "alice", "bob", per, nil, i); err != nil {
			t.Fatal(err)
		}
		if err := sendMany(b, "bob", "alice", per, nil, i); err != nil {
			t.Fatal(err)
		}
		r0, a0 := reached(), accepted()
		expect(r0 + 2)
		var errA, errB error
		parallel(func() { errA = a.s.SyncOnce(ctx) }, func() { errB = b.s.SyncOnce(ctx) })
		if errA != nil || errB != nil {
			t.Fatalf("round %d: SyncOnce: a: %v; b: %v", i, errA, errB)
		}
		r, acc := reached()-r0, accepted()-a0
		if acc != 2 {
			t.Errorf("round %d: the remote accepted %d pushes, want 2 (one per clone)", i, acc)
		}
		lost += r - acc
	}
	if lost < rounds {
		t.Errorf("%d pushes lost a race at the remote in %d concurrent rounds, want one per round: the test did not test the retry", lost, rounds)
	}
	t.Logf("%d pushes lost a race at the remote and were retried", lost)
	syncAll(t, a, b, a)
	for _, c := range []*clone{a, b} {
		if got := c.total(); got != 2*rounds*per {
			t.Errorf("%s holds %d messages, want %d", c.name, got, 2*rounds*per)
		}
	}
	ai := a.logIDs()
	sameShards(t, "a", ai, "b", b.logIDs())
	sameShards(t, "a", ai, "the remote", remoteIDs(t, remote))
}

// TestOfflineFirst syncs against a remote that has gone away: rounds fail
// and say so in Status, sends keep working, and once the remote is back
// one round delivers everything.
func TestOfflineFirst(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	remote, a, b := pair(t, loopOpts())
	away := remote + ".away"
	if err := os.Rename(remote, away); err != nil {
		t.Fatal(err)
	}
	restored := false
	defer func() {
		if !restored {
			os.Rename(away, remote)
		}
	}()

	var sent []string
	sent = append(sent, a.send("alice", "bob", "written while offline"))
	rounds := a.s.Status().Rounds
	err := a.s.SyncOnce(ctx)
	if err == nil || !strings.Contains(err.Error(), "fetch") {
		t.Fatalf("SyncOnce with the remote gone: %v, want a fetch error", err)
	}
	st := a.s.Status()
	if st.LastError != err.Error() || st.Rounds != rounds || st.Running || st.State != gitsync.StateStopped {
		t.Errorf("Status after SyncOnce failed = %+v, want LastError %q, %d rounds, not running, stopped", st, err, rounds)
	}
	lastSync := st.LastSyncAt

	// The loop records the failure and keeps going; sends still work and
	// wait, pending, for a round that succeeds.
	a.run()
	st = a.s.Status()
	if !st.Running || st.State != gitsync.StateError || st.LastError == "" || st.LastSyncAt != lastSync {
		t.Errorf("Status with the remote gone = %+v, want running, state error, LastError set, LastSyncAt unchanged", st)
	}
	for i := 0; i < 5; i++ {
		sent = append(sent, a.send("alice", "bob", "offline #"+strconv.Itoa(i)))
	}
	if st := a.s.Status(); !st.Pending {
		t.Errorf("Status after sends = %+v, want pending", st)
	}
	st = a.forceRound()
	if st.State != gitsync.StateError || st.LastError == "" || st.Pending {
		t.Errorf("Status after a forced round with the remote gone = %+v, want state error, LastError set, not pending", st)
	}
	bobSent := b.send("bob", "alice", "b is offline too")
	if err := b.s.SyncOnce(ctx); err == nil {
		t.Error("b: SyncOnce with the remote gone: no error")
	}
	if got := a.total(); got != len(sent) {
		t.Errorf("a holds %d messages while offline, want %d", got, len(sent))
	}

	// The remote comes back.
	if err := os.Rename(away, remote); err != nil {
		t.Fatal(err)
	}
	restored = true
	st = a.forceRound()
	if st.State != gitsync.StateSynced || st.LastError != "" || !st.LastSyncAt.After(lastSync) {
		t.Errorf("Status after the remote came back = %+v, want synced, no error", st)
	}
	b.sync()
	if st := b.s.Status(); st.LastError != "" {
		t.Errorf("b: Status after a round succeeded = %+v, want LastError cleared", st)
	}
	inbox := b.inbox("bob")
	for _, id := range sent {
		if _, ok := inbox[id]; !ok {
			t.Errorf("b: bob's inbox lacks %s, sent while offline", id)
		}
	}
	a.forceRound()
	if _, ok := a.inbox("alice")[bobSent]; !ok {
		t.Errorf("a: alice's inbox lacks %s, sent by b while offline", bobSent)
	}
	sameShards(t, "a", a.logIDs(), "b", b.logIDs())
}

// TestUserRepositoryUntouched checks the check that every clone of these
// tests makes when its test ends (see newClone): the snapshot covers
// HEAD, the branch, status, the index and file contents, sees a change
// when there is one, and sees none after a busy sync session.
func TestUserRepositoryUntouched(t *testing.T) {
	t.Parallel()
	remote, a, b := pair(t, loopOpts())
	before := map[*clone]repoState{a: snapshotRepo(t, a.dir), b: snapshotRepo(t, b.dir)}
	if before[a].fields["git status --porcelain"] == "" || before[a].fields["git diff --cached"] == "" {
		t.Fatalf("the fixture has no work in progress: %+v", before[a])
	}
	for i := 0; i < 3; i++ {
		a.send("alice", "bob", "ping "+strconv.Itoa(i))
		b.send("bob", "alice", "pong "+strconv.Itoa(i))
		syncAll(t, a, b)
	}
	a.run()
	b.run()
	a.send("alice", "bob", "through the loop")
	a.forceRound()
	b.forceRound()
	c := newClone(t, remote, "c", nil) // a late clone starts from origin/a-sync
	c.sync()
	if got := c.total(); got != 7 {
		t.Errorf("the late clone holds %d messages, want 7", got)
	}
	for _, x := range []*clone{a, b} {
		if d := before[x].diff(snapshotRepo(t, x.dir)); d != "" {
			t.Errorf("clone %s: the user's repository changed:\n%s", x.name, d)
		}
	}
	// The snapshot notices a change (so the checks above can fail).
	if err := os.WriteFile(filepath.Join(a.dir, "notes.txt"), []byte("changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := before[a].diff(snapshotRepo(t, a.dir))
	if !strings.Contains(d, "working tree files") {
		t.Errorf("the snapshot missed a changed file: %q", d)
	}
	if err := os.WriteFile(filepath.Join(a.dir, "notes.txt"), []byte("untracked\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestNoEmptyMergePingPong checks that clones that have converged stop
// making commits: rounds with nothing new on either side commit nothing
// and leave the remote alone, with SyncOnce and with running loops.
func TestNoEmptyMergePingPong(t *testing.T) {
	t.Parallel()
	remote := newRemote(t)
	a := newClone(t, remote, "a", nil)
	b := newClone(t, remote, "b", nil)
	a.register("alice", "implementer")
	b.register("bob", "reviewer")
	syncAll(t, a, b)
	c := newClone(t, remote, "c", nil) // from origin/a-sync, unlike a and b
	c.register("carol", "tester")
	syncAll(t, c, a, b)
	for i := 0; i < 3; i++ {
		a.send("alice", "bob", "a"+strconv.Itoa(i))
		b.send("bob", "carol", "b"+strconv.Itoa(i))
		c.send("carol", "alice", "c"+strconv.Itoa(i))
	}
	all := []*clone{a, b, c}
	commits := func() (n [3]int) {
		for i, x := range all {
			n[i] = x.s.Status().Commits
		}
		return n
	}
	// Converge: until a pass over all clones makes no commit.
	passes := 0
	for {
		passes++
		before := commits()
		syncAll(t, all...)
		if commits() == before {
			break
		}
		if passes == 4 {
			t.Fatalf("still committing after %d passes: commits %v", passes, commits())
		}
	}
	t.Logf("converged after %d passes; commits %v", passes, commits())
	for _, x := range all {
		if got := x.total(); got != 9 {
			t.Errorf("%s holds %d messages, want 9", x.name, got)
		}
	}

	wantCommits, wantHead := commits(), remoteHead(t, remote)
	heads := func() (h [3]string) {
		for i, x := range all {
			h[i] = gitT(t, x.wt, "rev-parse", "HEAD")
		}
		return h
	}
	wantHeads := heads()
	check := func(when string) {
		t.Helper()
		if got := commits(); got != wantCommits {
			t.Errorf("%s: Status().Commits = %v, want %v", when, got, wantCommits)
		}
		if got := remoteHead(t, remote); got != wantHead {
			t.Errorf("%s: the remote's a-sync moved from %s to %s", when, wantHead, got)
		}
		if got := heads(); got != wantHeads {
			t.Errorf("%s: the clones' a-sync heads moved from %v to %v", when, wantHeads, got)
		}
	}
	for i := 0; i < 3; i++ {
		syncAll(t, c, b, a)
	}
	check("after 3 more passes of SyncOnce")

	// Loops syncing every few milliseconds on all three clones.
	fast := &gitsync.Options{Interval: 10 * time.Millisecond}
	for _, x := range all {
		x.close()
		x.opts = fast
		x.open()
		x.run()
	}
	wantCommits = [3]int{} // new Syncers count from zero
	for _, x := range all {
		r0 := x.s.Status().Rounds
		waitFor(t, 30*time.Second, x.name+": 5 more rounds", func() bool { return x.s.Status().Rounds >= r0+5 })
	}
	check("after loops ran")
}

// TestPushDeniedByRemote checks that a remote refusing every push (a
// protected branch, a hook) fails the round with the remote's own words,
// and that the events wait, safe, for a remote that accepts them.
func TestPushDeniedByRemote(t *testing.T) {
	t.Parallel()
	remote, a, b := pair(t, nil)
	hook := filepath.Join(remote, "hooks", "pre-receive")
	if err := os.WriteFile(hook, []byte("#!/bin/sh\necho 'a-sync is protected here' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	id := a.send("alice", "bob", "held back by the remote")
	err := a.s.SyncOnce(context.Background())
	if err == nil || !strings.Contains(err.Error(), "a-sync is protected here") {
		t.Fatalf("SyncOnce against a remote that denies pushes: %v, want the remote's message", err)
	}
	if st := a.s.Status(); st.LastError != err.Error() {
		t.Errorf("Status().LastError = %q, want %q", st.LastError, err)
	}
	if err := os.Remove(hook); err != nil {
		t.Fatal(err)
	}
	syncAll(t, a, b)
	if _, ok := b.inbox("bob")[id]; !ok {
		t.Errorf("b lacks %s once the remote accepted it", id)
	}
}

// TestRemoteRepointedIsRead points the clone's remote at another
// repository on disk between rounds: the next round with nothing local
// reads the new remote and imports what it holds.
func TestRemoteRepointedIsRead(t *testing.T) {
	remote, a, b := pair(t, nil)
	other := filepath.Join(t.TempDir(), "moved.git")
	gitT(t, filepath.Dir(other), "clone", "-q", "--bare", remote, other)
	gitT(t, b.dir, "remote", "set-url", "origin", other)
	id := b.send("bob", "alice", "sent through the moved remote")
	b.sync()
	a.sync() // with the old remote: nothing new
	gitT(t, a.dir, "remote", "set-url", "origin", "file://"+other)
	a.sync()
	if got := a.inbox("alice"); !strings.Contains(got[id], "moved remote") {
		t.Errorf("after its remote moved, a's inbox for alice is %v, want %s", got, id)
	}
}
