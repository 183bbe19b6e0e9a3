package gitsync_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/eventlog/gitsync"
	"github.com/thrumhq/thrum/internal/thrumtest"
	"github.com/thrumhq/thrum/rpc"
	"go.uber.org/goleak"
)

// TestMain isolates git from the developer's configuration (signing,
// hooks, templates), for the tests and for the git commands the Syncer
// runs, and turns the test binary into the crash test's child when asked.
// It fails the package if a goroutine outlives its tests (a Syncer's
// loop, a git process's pipes).
func TestMain(m *testing.M) {
	os.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	os.Setenv("GIT_CONFIG_GLOBAL", os.DevNull)
	os.Setenv("GIT_TERMINAL_PROMPT", "0")
	if os.Getenv(crashChildEnv) != "" {
		os.Exit(crashChild())
	}
	if isGitWrapper() {
		os.Exit(gitWrapper())
	}
	goleak.VerifyTestMain(m)
}

// gitIn runs git in dir and returns its trimmed stdout.
func gitIn(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("git %s (in %s): %v: %s", strings.Join(args, " "), dir, err, strings.TrimSpace(errb.String()))
	}
	return strings.TrimSpace(out.String()), nil
}

func gitT(t testing.TB, dir string, args ...string) string {
	t.Helper()
	return thrumtest.Git(t, dir, args...)
}

// newRemote makes a bare repository with branch main holding one commit,
// the "server" every clone syncs through.
func newRemote(t testing.TB) string {
	t.Helper()
	return thrumtest.GitRemote(t).Path
}

// clone is one machine: a clone of the remote with work in progress in
// its working tree, the sync worktree made as `thrum init` makes it, a
// node on that worktree and its Syncer.
type clone struct {
	t      testing.TB
	name   string
	dir    string // the user's working tree
	gitDir string // its common git dir
	wt     string // the sync worktree: <git-common-dir>/thrum-sync/a-sync
	db     string // the projection, outside the worktree
	opts   *gitsync.Options
	noSync bool

	logs   *logCounter // what the Syncers logged
	n      *thrum.Node
	s      *gitsync.Syncer
	syncer atomic.Pointer[gitsync.Syncer] // what OnCommit notifies

	runCancel context.CancelFunc
	runDone   chan struct{}
}

// newClone clones remote into a fresh directory, leaves work in progress
// in the user's tree, builds the sync worktree and opens a node and a
// Syncer on it. When the test ends it checks that the user's working
// tree, index, HEAD and branch are exactly as they were before the sync
// worktree existed.
func newClone(t testing.TB, remote, name string, opts *gitsync.Options) *clone {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	gitT(t, filepath.Dir(dir), "clone", "-q", remote, dir)
	thrumtest.GitUser(t, dir)
	// Work in progress of every kind: thrum must not touch any of it.
	write := func(rel, s string) {
		if err := os.WriteFile(filepath.Join(dir, rel), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("README.md", "# project\n\nunstaged edit in "+name+"\n")
	write("staged.go", "package staged\n")
	gitT(t, dir, "add", "staged.go")
	write("staged.go", "package staged\n// edited after staging\n")
	write("notes.txt", "untracked\n")

	common := gitT(t, dir, "rev-parse", "--git-common-dir")
	if !filepath.IsAbs(common) {
		common = filepath.Join(dir, common)
	}
	c := &clone{t: t, name: name, dir: dir, gitDir: filepath.Clean(common), db: filepath.Join(t.TempDir(), "messages.db"), opts: opts, noSync: true, logs: &logCounter{}}
	c.wt = filepath.Join(c.gitDir, "thrum-sync", "a-sync")
	before := snapshotRepo(t, dir)
	t.Cleanup(func() {
		after := snapshotRepo(t, dir)
		if d := before.diff(after); d != "" {
			t.Errorf("clone %s: the user's repository changed:\n%s", name, d)
		}
	})
	makeSyncWorktree(t, dir, c.wt)
	c.open()
	return c
}

// makeSyncWorktree does what `thrum init` does (cmd/thrum/paths.go):
// gitsync.MakeWorktree.
func makeSyncWorktree(t testing.TB, dir, wt string) {
	t.Helper()
	if _, err := gitsync.MakeWorktree(context.Background(), dir, wt, "a-sync"); err != nil {
		t.Fatal(err)
	}
}

// open opens the node and a new Syncer on the worktree.
func (c *clone) open() {
	c.t.Helper()
	opts := &thrum.Options{
		DBPath: c.db,
		NoSync: c.noSync,
		OnCommit: func(batch []*eventlog.Event) {
			if s := c.syncer.Load(); s != nil && slices.ContainsFunc(batch, func(e *eventlog.Event) bool { return !e.Imported() }) {
				s.Notify()
			}
		},
	}
	n, err := thrum.Open(context.Background(), c.wt, opts)
	// A process forked by another test at the moment the previous node
	// closed holds a copy of its lock until it execs: wait that out.
	for deadline := time.Now().Add(5 * time.Second); errors.Is(err, thrum.ErrLocked) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		n, err = thrum.Open(context.Background(), c.wt, opts)
	}
	if err != nil {
		c.t.Fatalf("clone %s: open: %v", c.name, err)
	}
	var o gitsync.Options
	if c.opts != nil {
		o = *c.opts
	}
	o.Logger = slog.New(c.logs)
	o.Gate = n.Admission()
	s, err := gitsync.New(n.EventLog(), &o)
	if err != nil {
		n.Close()
		c.t.Fatalf("clone %s: gitsync.New: %v", c.name, err)
	}
	c.n, c.s = n, s
	c.syncer.Store(s)
	c.t.Cleanup(c.close)
}

// close stops the Run loop if any and closes the node. Idempotent.
func (c *clone) close() {
	c.stop()
	if c.n != nil {
		c.syncer.Store(nil)
		if err := c.n.Close(); err != nil {
			c.t.Errorf("clone %s: close: %v", c.name, err)
		}
		c.n, c.s = nil, nil
	}
}

// run starts the Syncer's Run loop; stop (or the test's end) stops it.
func (c *clone) run() {
	c.t.Helper()
	if c.runDone != nil {
		c.t.Fatalf("clone %s: Run already running", c.name)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	c.runCancel, c.runDone = cancel, done
	s := c.s
	r0, f0 := s.Status().Rounds, c.logs.count(failedRound)
	go func() {
		defer close(done)
		if err := s.Run(ctx); err != nil {
			c.t.Errorf("clone %s: Run: %v", c.name, err)
		}
	}()
	// Wait for Run to take its first look at the remote.
	waitFor(c.t, 30*time.Second, c.name+": first round of Run", func() bool {
		return s.Status().Rounds > r0 || c.logs.count(failedRound) > f0
	})
}

func (c *clone) stop() {
	if c.runDone == nil {
		return
	}
	c.runCancel()
	<-c.runDone
	c.runCancel, c.runDone = nil, nil
}

// forceRound asks a running loop for a sync now and waits until a round
// that started after the request has finished.
func (c *clone) forceRound() gitsync.Status {
	c.t.Helper()
	r0, f0 := c.s.Status().Rounds, c.logs.count(failedRound)
	if !c.s.Force() {
		c.t.Fatalf("clone %s: Force did not queue a round", c.name)
	}
	var st gitsync.Status
	waitFor(c.t, 30*time.Second, c.name+": forced round", func() bool {
		st = c.s.Status()
		return st.Rounds > r0 || c.logs.count(failedRound) > f0
	})
	return st
}

// failedRound is what Run logs when a round fails.
const failedRound = "gitsync: sync failed; will retry"

// logCounter is a slog.Handler that counts records by message.
type logCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (h *logCounter) count(msg string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[msg]
}

func (h *logCounter) Enabled(context.Context, slog.Level) bool { return true }
func (h *logCounter) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *logCounter) WithGroup(string) slog.Handler            { return h }
func (h *logCounter) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == nil {
		h.n = map[string]int{}
	}
	h.n[r.Message]++
	return nil
}

func (c *clone) sync() {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := c.s.SyncOnce(ctx); err != nil {
		c.t.Fatalf("clone %s: SyncOnce: %v", c.name, err)
	}
}

// syncAll runs SyncOnce on each clone in order.
func syncAll(t testing.TB, cs ...*clone) {
	t.Helper()
	for _, c := range cs {
		c.sync()
	}
}

// register registers an agent with a session.
func (c *clone) register(name, role string) {
	c.t.Helper()
	ctx := context.Background()
	r, err := c.n.RegisterAgent(ctx, &rpc.RegisterAgentParams{Name: name, Role: role, Module: "sync"})
	if err != nil || r.Status == "conflict" {
		c.t.Fatalf("clone %s: register %s: %+v %v", c.name, name, r, err)
	}
	if _, err := c.n.StartSession(thrum.AsAgent(ctx, name), &rpc.StartSessionParams{AgentID: name}); err != nil {
		c.t.Fatalf("clone %s: start session of %s: %v", c.name, name, err)
	}
}

// send sends content from an agent, mentioning to.
func (c *clone) send(from, to, content string) string {
	c.t.Helper()
	r, err := c.n.SendMessage(thrum.AsAgent(context.Background(), from), &rpc.SendMessageParams{Content: content, Mentions: []string{"@" + to}})
	if err != nil {
		c.t.Fatalf("clone %s: send from %s: %v", c.name, from, err)
	}
	return r.MessageID
}

// list returns every message (any author, any recipient), newest first.
func (c *clone) list(p rpc.ListMessagesParams) *rpc.ListMessagesResult {
	c.t.Helper()
	r, err := c.n.ListMessages(context.Background(), &p)
	if err != nil {
		c.t.Fatalf("clone %s: list %+v: %v", c.name, p, err)
	}
	return r
}

func (c *clone) total() int {
	c.t.Helper()
	return c.list(rpc.ListMessagesParams{PageSize: 1}).Total
}

// inbox returns the message IDs of agent's inbox (messages mentioning it).
func (c *clone) inbox(agent string) map[string]string {
	c.t.Helper()
	out := map[string]string{}
	for page := 1; ; page++ {
		r, err := c.n.ListMessages(thrum.AsAgent(context.Background(), agent), &rpc.ListMessagesParams{Mentions: true, PageSize: 100, Page: page})
		if err != nil {
			c.t.Fatalf("clone %s: inbox of %s: %v", c.name, agent, err)
		}
		for _, m := range r.Messages {
			out[m.MessageID] = m.Body.Content
		}
		if page >= r.TotalPages {
			return out
		}
	}
}

// logIDs scans the clone's log and returns its event IDs per shard path,
// failing the test on an event ID seen twice (in any shard).
func (c *clone) logIDs() map[string]map[string]bool {
	c.t.Helper()
	return scanLog(c.t, c.n.EventLog(), c.name)
}

func scanLog(t testing.TB, l *eventlog.Log, what string) map[string]map[string]bool {
	t.Helper()
	out := map[string]map[string]bool{}
	where := map[string]string{}
	dups := 0
	_, err := l.Scan(context.Background(), nil, func(e *eventlog.Event) error {
		shard := eventlog.ShardPath(e.Shard)
		if prev, ok := where[e.ID]; ok {
			if dups++; dups <= 5 {
				t.Errorf("%s: event %s (%s) is in the log twice: %s and %s", what, e.ID, e.Type, prev, shard)
			}
		}
		where[e.ID] = shard
		if out[shard] == nil {
			out[shard] = map[string]bool{}
		}
		out[shard][e.ID] = true
		return nil
	})
	if err != nil {
		t.Fatalf("%s: scan: %v", what, err)
	}
	if dups > 0 {
		t.Errorf("%s: %d duplicate events in the log", what, dups)
	}
	return out
}

// sameShards fails the test unless a and b hold the same event IDs in
// every shard but the local one (each machine's own).
func sameShards(t testing.TB, an string, a map[string]map[string]bool, bn string, b map[string]map[string]bool) {
	t.Helper()
	shards := map[string]bool{}
	for s := range a {
		shards[s] = true
	}
	for s := range b {
		shards[s] = true
	}
	delete(shards, eventlog.LocalFile)
	for s := range shards {
		onlyA, onlyB := 0, 0
		for id := range a[s] {
			if !b[s][id] {
				onlyA++
			}
		}
		for id := range b[s] {
			if !a[s][id] {
				onlyB++
			}
		}
		if onlyA+onlyB > 0 {
			t.Errorf("shard %s: %d events only in %s (of %d), %d only in %s (of %d)", s, onlyA, an, len(a[s]), onlyB, bn, len(b[s]))
		}
	}
}

// remoteHead returns the remote's a-sync commit ("" if none).
func remoteHead(t testing.TB, remote string) string {
	t.Helper()
	out, err := gitIn(remote, "rev-parse", "--verify", "--quiet", "refs/heads/a-sync")
	if err != nil {
		return ""
	}
	return out
}

func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// repoState is what of a user's repository thrum must leave alone.
type repoState struct {
	fields map[string]string
}

func snapshotRepo(t testing.TB, dir string) repoState {
	t.Helper()
	s := repoState{fields: map[string]string{
		"HEAD (git rev-parse HEAD)":                gitT(t, dir, "rev-parse", "HEAD"),
		"branch (git symbolic-ref HEAD)":           gitT(t, dir, "symbolic-ref", "HEAD"),
		"git status --porcelain":                   gitT(t, dir, "status", "--porcelain=v1", "--untracked-files=all"),
		"index (git ls-files -s)":                  gitT(t, dir, "ls-files", "-s"),
		"git diff":                                 gitT(t, dir, "diff"),
		"git diff --cached":                        gitT(t, dir, "diff", "--cached"),
		"refs/heads/main":                          gitT(t, dir, "rev-parse", "refs/heads/main"),
		"refs other than a-sync and origin/a-sync": refsExceptSync(t, dir),
	}}
	var files []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if d.IsDir() {
			if rel == ".git" {
				return filepath.SkipDir
			}
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		files = append(files, rel+" "+fi.Mode().String()+" "+hex.EncodeToString(sum[:8]))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	s.fields["working tree files"] = strings.Join(files, "\n")
	return s
}

func refsExceptSync(t testing.TB, dir string) string {
	var keep []string
	for _, l := range strings.Split(gitT(t, dir, "for-each-ref", "--format=%(refname) %(objectname)"), "\n") {
		if strings.HasPrefix(l, "refs/heads/a-sync ") || strings.HasPrefix(l, "refs/remotes/origin/a-sync ") {
			continue
		}
		keep = append(keep, l)
	}
	return strings.Join(keep, "\n")
}

func (a repoState) diff(b repoState) string {
	var keys []string
	for k := range a.fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out strings.Builder
	for _, k := range keys {
		if a.fields[k] != b.fields[k] {
			fmt.Fprintf(&out, "%s:\nbefore:\n%s\nafter:\n%s\n", k, a.fields[k], b.fields[k])
		}
	}
	return out.String()
}

// parallel runs fns at the same moment and waits for all of them.
func parallel(fns ...func()) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, fn := range fns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			fn()
		}()
	}
	close(start)
	wg.Wait()
}
