package gitsync_test

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// gitStarts returns the argv of every git process started while fn ran
// (the Syncer's, and those git and the remote's receive-pack start), as
// git's trace2 events log them.
func gitStarts(t *testing.T, fn func()) [][]string {
	t.Helper()
	trace := filepath.Join(t.TempDir(), "trace2.json")
	t.Setenv("GIT_TRACE2_EVENT", trace)
	fn()
	os.Unsetenv("GIT_TRACE2_EVENT") // t.Setenv restores it at the end
	f, err := os.Open(trace)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var starts [][]string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var ev struct {
			Event string   `json:"event"`
			Argv  []string `json:"argv"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("trace2 line %q: %v", sc.Text(), err)
		}
		if ev.Event == "start" {
			starts = append(starts, ev.Argv)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return starts
}

// isAutoGC reports whether argv is receive-pack's automatic gc (newer
// git runs maintenance instead).
func isAutoGC(argv []string) bool {
	return (slices.Contains(argv, "gc") || slices.Contains(argv, "maintenance")) && slices.Contains(argv, "--auto")
}

// TestPushesToRemoteOnDiskRunItsGCOnceInEight pushes sixteen rounds to a
// bare remote on disk: its receive-pack runs git gc --auto after two of
// them, not after each; and a Syncer's first push runs it, so that a
// daemon restarted before its eighth push still lets the remote's gc run.
func TestPushesToRemoteOnDiskRunItsGCOnceInEight(t *testing.T) {
	remote := newRemote(t)
	a := newClone(t, remote, "a", nil)
	a.register("alice", "implementer")
	a.register("bob", "reviewer")
	first := gitStarts(t, a.sync)
	if n := len(slices.DeleteFunc(first, func(argv []string) bool { return !isAutoGC(argv) })); n != 1 {
		t.Errorf("the first push ran git gc --auto %d times, want 1", n)
	}
	starts := gitStarts(t, func() {
		for i := 0; i < 16; i++ {
			a.send("alice", "bob", "one message per round")
			a.sync()
		}
	})
	var gcs, pushes int
	for _, argv := range starts {
		if isAutoGC(argv) {
			gcs++
		}
		if slices.Contains(argv, "push") {
			pushes++
		}
	}
	if pushes != 16 || gcs != 2 {
		t.Errorf("16 rounds pushed %d times and ran git gc --auto %d times, want 16 and 2", pushes, gcs)
	}
	if !remoteHas(t, remote, a) {
		t.Error("the remote lacks the clone's last commit")
	}
}

// TestRoundWithNothingNewAsksRemoteOnDiskInOneProcess runs a round with
// nothing new on either side: it reads the branch of the remote on disk
// with one git process (no ls-remote, shell and upload-pack).
func TestRoundWithNothingNewAsksRemoteOnDiskInOneProcess(t *testing.T) {
	_, a, _ := pair(t, nil)
	a.sync()
	starts := gitStarts(t, a.sync)
	if len(starts) != 1 || !slices.Contains(starts[0], "rev-parse") {
		t.Errorf("a round with nothing new started %d git processes %q, want one git rev-parse", len(starts), starts)
	}
}

// TestRemoteRepointedOnDiskIsRead points the clone's remote at another
// repository on disk between rounds: the next round with nothing local
// reads the new remote and imports what it holds.
func TestRemoteRepointedOnDiskIsRead(t *testing.T) {
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
