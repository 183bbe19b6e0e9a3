package gitsync

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestStoppedGitLeavesNoLock: a git command stopped while it holds a
// ref's lock (a daemon stopping mid-round) removes the lock as it ends,
// so the round that follows (the final one at the stop) is not refused
// with "Unable to create '….lock': File exists".
func TestStoppedGitLeavesNoLock(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{{"init", "-q"}, {"-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "--allow-empty", "-m", "first"}} {
		if out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v: %s", args, err, out)
		}
	}
	sha, err := exec.Command("git", "-C", dir, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// A prepared transaction holds its ref's lock until told to commit.
	cmd := gitCmd(ctx, dir, nil, "update-ref", "--stdin")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(in, "start\nupdate refs/heads/held %s\nprepare\n", strings.TrimSpace(string(sha)))
	lock := filepath.Join(dir, ".git", "refs", "heads", "held.lock")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(lock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("git never took the ref's lock")
		}
	}
	cancel()
	cmd.Wait()
	if _, err := os.Stat(lock); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the stopped git left %s behind (stat: %v)", lock, err)
	}
}
