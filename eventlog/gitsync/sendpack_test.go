package gitsync_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/thrumhq/thrum/eventlog/gitsync"
)

// TestDirectPush: to a remote on disk, after its first push a Syncer
// pushes without git push (receive-pack's protocol, one pack of the
// objects it wrote) and moves its branch without update-ref; the remote
// and the clone stay valid repositories (git fsck --strict), the remote
// ends at the clone's HEAD, the branch's reflog records each move, a
// remote that moved on (b pushed) is merged as before, and a pack that
// lacks objects is refused by the remote and the round pushes with git
// push instead, losing nothing.
func TestDirectPush(t *testing.T) {
	remote, a, b := pair(t, nil)
	s := a.syncer.Load()
	before := gitsync.DirectPushes(s)
	const rounds = 4
	for i := 0; i < rounds; i++ {
		a.send("alice", "bob", fmt.Sprintf("round %d", i))
		a.sync()
	}
	if got := gitsync.DirectPushes(s) - before; got != rounds {
		t.Errorf("%d of %d rounds pushed directly", got, rounds)
	}
	head := gitT(t, a.wt, "rev-parse", "HEAD")
	if got := remoteHead(t, remote); got != head {
		t.Errorf("the remote's branch is at %s, the clone's HEAD at %s", got, head)
	}
	if got := gitT(t, a.wt, "rev-parse", "HEAD@{1}"); got != gitT(t, a.wt, "rev-parse", "HEAD^") {
		t.Errorf("HEAD's reflog: HEAD@{1} = %s, not HEAD's parent", got)
	}
	branch := strings.TrimPrefix(gitT(t, a.wt, "symbolic-ref", "HEAD"), "refs/heads/")
	if got := gitT(t, a.wt, "rev-parse", branch+"@{1}"); got != gitT(t, a.wt, "rev-parse", "HEAD^") {
		t.Errorf("the branch's reflog: %s@{1} = %s, not HEAD's parent", branch, got)
	}

	// The remote moves on: a's next push is git's, after a merge.
	b.send("bob", "alice", "from b")
	b.sync()
	a.send("alice", "bob", "after b")
	a.sync()

	// A pack without the blobs it must carry is refused; git push sends
	// them.
	n := gitsync.DirectPushes(s)
	a.send("alice", "bob", "once more, directly")
	a.sync()
	if gitsync.DirectPushes(s) != n+1 {
		t.Errorf("after git push the next round did not push directly")
	}
	n = gitsync.DirectPushes(s)
	undo := gitsync.DropUnpushedBlobs(s)
	a.send("alice", "bob", "a pack that lacks its blob")
	a.sync()
	undo()
	if gitsync.DirectPushes(s) != n {
		t.Errorf("the remote took a pack that lacked its blob")
	}
	if got := remoteHead(t, remote); got != gitT(t, a.wt, "rev-parse", "HEAD") {
		t.Errorf("after the refused pack the remote is at %s, not the clone's HEAD", got)
	}
	gitT(t, remote, "fsck", "--no-progress", "--strict")
	gitT(t, a.wt, "fsck", "--no-progress", "--strict")
	b.sync()
	if got := len(b.inbox("bob")); got != rounds+3 {
		t.Errorf("bob's inbox on b has %d messages, want %d", got, rounds+3)
	}
	sameShards(t, "a", a.logIDs(), "b", b.logIDs())
}
