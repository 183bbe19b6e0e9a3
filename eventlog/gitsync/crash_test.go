package gitsync_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/eventlog/gitsync"
	"github.com/thrumhq/thrum/rpc"
)

// The crash test's child is this test binary, re-executed with these
// variables set (see TestMain).
const (
	crashChildEnv = "GITSYNC_CRASH_CHILD" // the cycle's tag
	crashWTEnv    = "GITSYNC_CRASH_WT"
	crashDBEnv    = "GITSYNC_CRASH_DB"
)

// crashChild opens a node and a Syncer on a worktree, then sends
// messages as alice (printing "ack ID" once each send returned) while it
// runs sync rounds back to back, until it is killed.
func crashChild() int {
	tag := os.Getenv(crashChildEnv)
	n, err := thrum.Open(context.Background(), os.Getenv(crashWTEnv), &thrum.Options{DBPath: os.Getenv(crashDBEnv)})
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		return 2
	}
	s, err := gitsync.New(n.EventLog(), &gitsync.Options{Gate: n.Admission()})
	if err != nil {
		fmt.Fprintln(os.Stderr, "gitsync:", err)
		return 2
	}
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		fmt.Fprintf(os.Stdout, format+"\n", args...)
		mu.Unlock()
	}
	time.AfterFunc(time.Minute, func() { os.Exit(3) }) // never outlive a broken parent
	say("ready")
	go func() {
		ctx := thrum.AsAgent(context.Background(), "alice")
		for i := 0; ; i++ {
			r, err := n.SendMessage(ctx, &rpc.SendMessageParams{Content: fmt.Sprintf("crash %s #%d", tag, i), Mentions: []string{"@bob"}})
			if err != nil {
				say("send error: %v", err)
				time.Sleep(10 * time.Millisecond)
				continue
			}
			say("ack %s", r.MessageID)
			time.Sleep(time.Millisecond)
		}
	}()
	for {
		start := time.Now()
		if err := s.SyncOnce(context.Background()); err != nil {
			say("round error: %v", strings.ReplaceAll(err.Error(), "\n", " "))
		} else {
			say("round ok %v", time.Since(start).Round(time.Millisecond))
		}
	}
}

// crashRun starts the child on clone c's worktree and SIGKILLs it delay
// after it is ready, or (delay < 0) as soon as it finished its first
// round: the child alone, or its whole process group (it and its git
// commands, as a crash would; the remote's side runs in its own session,
// as on another machine). It returns what the child printed and how long
// after ready it was killed.
func crashRun(t *testing.T, c *clone, tag string, delay time.Duration, group bool) (out crashOutput) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+tag, crashWTEnv+"="+c.wt, crashDBEnv+"="+c.db)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := cmd.Process.Pid
	killed := false
	kill := func(group bool) {
		if !killed {
			killed = true
			if group {
				syscall.Kill(-pgid, syscall.SIGKILL)
			} else {
				syscall.Kill(pgid, syscall.SIGKILL)
			}
		}
	}
	defer kill(true)
	lines := make(chan string, 1024)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	select {
	case l, ok := <-lines:
		if !ok || l != "ready" {
			cmd.Wait()
			t.Fatalf("crash child did not start: %q\n%s", l, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("crash child not ready after 30s\n%s", stderr.String())
	}
	ready := time.Now()
	var timer <-chan time.Time
	if delay >= 0 {
		timer = time.After(delay)
	}
	note := func(l string) {
		switch {
		case strings.HasPrefix(l, "ack "):
			out.acks = append(out.acks, strings.TrimPrefix(l, "ack "))
		case strings.HasPrefix(l, "round ok"):
			out.rounds++
		default:
			out.notes = append(out.notes, l)
		}
	}
wait:
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				cmd.Wait()
				t.Fatalf("crash child exited before it was killed\n%s", stderr.String())
			}
			note(l)
			if delay < 0 && out.rounds > 0 {
				break wait
			}
		case <-timer:
			break wait
		case <-time.After(30 * time.Second):
			t.Fatalf("crash child: no first round after 30s\n%s", stderr.String())
		}
	}
	kill(group)
	out.after = time.Since(ready)
	for l := range lines {
		note(l)
	}
	if err := cmd.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("crash child: %v, want killed\n%s", err, stderr.String())
	}
	// A git command that outlived the child finishes before a new node
	// opens, as it would before a restarted daemon got that far.
	waitFor(t, 30*time.Second, "the crashed child's git commands to end", func() bool { return !groupAlive(pgid) })
	return out
}

// crashOutput is what a crash child printed before it died.
type crashOutput struct {
	acks   []string      // acknowledged message IDs
	rounds int           // sync rounds that succeeded
	notes  []string      // failed rounds and sends
	after  time.Duration // how long after ready it was killed
}

// TestCrashDuringSync SIGKILLs a node and its Syncer at different moments
// of sync rounds that import hundreds of events while the node keeps
// sending. Each time, reopening the node and syncing again gives logs
// without duplicates on both sides and every acknowledged message on both
// sides.
func TestCrashDuringSync(t *testing.T) {
	t.Parallel()
	_, a, b := pair(t, nil)
	// The remote is another machine: its git processes do not die with a.
	gitT(t, a.dir, "config", "remote.origin.uploadpack", "setsid git-upload-pack")
	gitT(t, a.dir, "config", "remote.origin.receivepack", "setsid git-receive-pack")
	a.close()

	// The first cycle kills the child as soon as its first round (which
	// imports b's new events) is done, and so measures how long such a
	// round takes on this machine, under this load; the next cycles kill
	// it at fractions of that, so that the kills land in every step of a
	// first round, and, past it, in later rounds (which commit and push
	// the child's new messages).
	fractions := []float64{0.05, 0.2, 0.4, 0.65, 0.9, 1.3}
	if testing.Short() {
		fractions = []float64{0.3, 0.8}
	}
	const fromB = 300 // events for a to import in each cycle
	acked := map[string]bool{}
	totalRepairs := 0
	var firstRound time.Duration
	for i := 0; i <= len(fractions); i++ {
		tag := fmt.Sprint(i)
		if err := sendMany(b, "bob", "alice", fromB, nil, 100+i); err != nil {
			t.Fatal(err)
		}
		b.sync()

		// Even cycles kill the process group (a machine's crash: the git
		// commands die too), odd ones the process only (kill -9 of the
		// daemon: its git command runs to its end).
		group := i%2 == 0
		delay := time.Duration(-1)
		if i > 0 {
			delay = time.Duration(fractions[i-1] * float64(firstRound))
		}
		out := crashRun(t, a, tag, delay, group)
		if i == 0 {
			firstRound = out.after
		}
		for _, id := range out.acks {
			acked[id] = true
		}
		var stale []string
		for _, p := range staleLockPaths(t, a) {
			if _, err := os.Stat(p); err == nil {
				stale = append(stale, filepath.Base(filepath.Dir(p))+"/"+filepath.Base(p))
			}
		}
		if len(stale) > 0 {
			t.Logf("cycle %d: the crash left git locks behind: %v", i, stale)
		}
		a.open()
		repairs := a.n.Repairs()
		totalRepairs += len(repairs)
		t.Logf("cycle %d: killed (group %v) %v after ready: %d acks, %d rounds done, %d torn tails repaired",
			i, group, out.after.Round(time.Millisecond), len(out.acks), out.rounds, len(repairs))
		for _, e := range out.notes {
			t.Logf("  child: %s", e)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := a.s.SyncOnce(ctx)
		cancel()
		if err != nil {
			t.Fatalf("cycle %d: the first round after the crash failed: %v", i, err)
		}
		checkNode(t, a, fmt.Sprintf("a after crash %d", i), acked)
		b.sync()
		checkNode(t, b, fmt.Sprintf("b after crash %d", i), acked)
		a.close()
	}
	t.Logf("%d acknowledged messages over %d crashes, %d torn tails repaired", len(acked), len(fractions)+1, totalRepairs)
	if len(acked) == 0 {
		t.Error("no message was acknowledged before any crash: the test did not test loss")
	}

	a.open()
	syncAll(t, a, b, a)
	wantTotal := len(acked) + fromB*(len(fractions)+1)
	for _, c := range []*clone{a, b} {
		if got := c.total(); got < wantTotal {
			t.Errorf("%s holds %d messages, want at least %d", c.name, got, wantTotal)
		}
	}
	if a.total() != b.total() {
		t.Errorf("a holds %d messages, b %d", a.total(), b.total())
	}
	sameShards(t, "a", a.logIDs(), "b", b.logIDs())
}

// checkNode checks a node's log has no duplicate events, its projection
// holds one message per message.create in the log, and every
// acknowledged message of alice is in bob's inbox.
func checkNode(t *testing.T, c *clone, what string, acked map[string]bool) {
	t.Helper()
	scanLog(t, c.n.EventLog(), what) // fails on duplicates
	creates := 0
	_, err := c.n.EventLog().Scan(context.Background(), nil, func(e *eventlog.Event) error {
		if e.Type == eventlog.TypeMessageCreate {
			creates++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.total(); got != creates {
		t.Errorf("%s: message.list total %d, but the log has %d message.create events", what, got, creates)
	}
	inbox := c.inbox("bob")
	lost := 0
	for id := range acked {
		if _, ok := inbox[id]; !ok {
			if lost++; lost <= 3 {
				t.Errorf("%s: acknowledged message %s is missing", what, id)
			}
		}
	}
	if lost > 0 {
		t.Fatalf("%s: %d of %d acknowledged messages missing", what, lost, len(acked))
	}
}

// TestStaleGitLocks leaves the lock files that git commands killed in the
// middle of a round leave behind (fast-import: the branch's and HEAD's;
// fetch and push: the remote-tracking ref's), as TestCrashDuringSync meets
// them only when a kill lands inside one of those commands. A new Syncer
// must sync anyway: git refuses to run while they exist, and nothing else
// would ever remove them.
func TestStaleGitLocks(t *testing.T) {
	t.Parallel()
	_, a, b := pair(t, nil)
	a.close()
	for _, p := range staleLockPaths(t, a) {
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	a.open()
	if got := a.logs.count("gitsync: removed a stale git lock left by a crash"); got != 3 {
		t.Errorf("New logged the removal of %d stale locks, want 3", got)
	}
	id := a.send("alice", "bob", "after the crash")
	b.send("bob", "alice", "while a was down")
	b.sync()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := a.s.SyncOnce(ctx); err != nil {
		t.Fatalf("SyncOnce with stale git locks: %v", err)
	}
	b.sync()
	if _, ok := b.inbox("bob")[id]; !ok {
		t.Errorf("b lacks %s, sent by a after the crash", id)
	}
	if got := a.total(); got != 2 {
		t.Errorf("a holds %d messages, want 2", got)
	}
}

// groupAlive reports whether a process of the group is still running.
// Zombies do not count: they wait for init to reap them, which here can
// take a second.
func groupAlive(pgid int) bool {
	if syscall.Kill(-pgid, 0) == syscall.ESRCH {
		return false
	}
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil || len(stats) == 0 {
		return true // no /proc: trust kill
	}
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces.
		rest := string(b[strings.LastIndexByte(string(b), ')')+1:])
		f := strings.Fields(rest)
		if len(f) > 2 && f[2] == strconv.Itoa(pgid) && f[0] != "Z" {
			return true
		}
	}
	return false
}

// staleLockPaths lists the lock files a round's git commands hold for a
// moment: the worktree's HEAD, the sync branch, its remote-tracking ref.
func staleLockPaths(t *testing.T, c *clone) []string {
	t.Helper()
	gitDir := gitT(t, c.wt, "rev-parse", "--absolute-git-dir")
	return []string{
		filepath.Join(gitDir, "HEAD.lock"),
		filepath.Join(c.gitDir, "refs", "heads", "a-sync.lock"),
		filepath.Join(c.gitDir, "refs", "remotes", "origin", "a-sync.lock"),
	}
}
