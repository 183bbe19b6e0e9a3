package thrum_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/internal/fault"
	"github.com/thrumhq/thrum/internal/thrumtest"
	"github.com/thrumhq/thrum/rpc"
	"github.com/thrumhq/thrum/store"
)

// faultyDisk injects failures into every log write, log fsync and
// projection apply under dir: each fails with probability percent/100,
// with ENOSPC (a full disk) or, one time in four, EIO.
type faultyDisk struct {
	dir     string
	percent atomic.Int32
	mu      sync.Mutex
	rng     *rand.Rand
	counts  map[string]int
}

func newFaultyDisk(t *testing.T, dir string, seed uint64) *faultyDisk {
	d := &faultyDisk{dir: dir, rng: rand.New(rand.NewPCG(seed, 9)), counts: map[string]int{}}
	t.Cleanup(fault.Set(d.check))
	return d
}

func (d *faultyDisk) check(op, path string) error {
	if !strings.HasPrefix(path, d.dir) || d.percent.Load() == 0 {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.rng.IntN(100) >= int(d.percent.Load()) {
		return nil
	}
	d.counts[op]++
	errno := syscall.ENOSPC
	if d.rng.IntN(4) == 0 {
		errno = syscall.EIO
	}
	return &fs.PathError{Op: op, Path: path, Err: errno}
}

// TestStorageFaultsKeepProjectionEqualToLog holds the invariant of
// DESIGN.md "Durability and storage faults": after any sequence of failed
// writes, fsyncs and applies, and restarts (some while events are waiting
// to be applied), the projection equals a rebuild from the log, and every
// acknowledged message is in both. The checkpoint never passes an event
// that was not applied, so a later good batch cannot hide a failed one.
// Senders retry with an idempotency key, and no message is stored twice.
func TestStorageFaultsKeepProjectionEqualToLog(t *testing.T) {
	seed := thrumtest.Seed(t)
	ctx := context.Background()
	dir := t.TempDir()
	disk := newFaultyDisk(t, dir, seed)
	open := func() *thrum.Node {
		t.Helper()
		n, err := thrum.Open(context.Background(), dir, &thrum.Options{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	n := open()
	defer func() { n.Close() }()
	agents := []string{"alice", "bob", "carol"}
	for _, a := range agents {
		thrumtest.Register(t, n, a, "dev", "m")
	}

	acked := map[string]string{} // message ID → content
	codes := map[int]int{}
	var mu sync.Mutex
	const rounds, perAgent = 6, 10
	for round := range rounds {
		disk.percent.Store(25)
		var wg sync.WaitGroup
		for _, a := range agents {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range perAgent {
					// A client that retries with its key, a few times.
					content := fmt.Sprintf("r%d %s %d", round, a, i)
					for range 4 {
						r, err := n.SendMessage(thrum.AsAgent(ctx, a), &rpc.SendMessageParams{Content: content, IdempotencyKey: content})
						mu.Lock()
						if err == nil {
							acked[r.MessageID] = content
						} else {
							var re *rpc.Error
							if !errors.As(err, &re) {
								t.Errorf("send: %v is not an *rpc.Error", err)
							} else {
								codes[re.Code]++
							}
						}
						mu.Unlock()
						if err == nil {
							break
						}
						time.Sleep(5 * time.Millisecond)
					}
				}
			}()
		}
		wg.Wait()
		if round%3 == 2 {
			// Restart with whatever is waiting to be applied: Open's catch-up
			// must apply it.
			n.Close()
			disk.percent.Store(0)
			n = open()
		} else {
			// Space returns: the node must catch up by itself.
			disk.percent.Store(0)
			waitHealthy(t, n)
		}
		for id, content := range acked {
			g, err := n.GetMessage(ctx, &rpc.GetMessageParams{MessageID: id})
			if err != nil || g.Message.Body.Content != content {
				t.Fatalf("round %d: acknowledged message %s (%q) not in the projection: %+v %v", round, id, content, g, err)
			}
		}
	}
	t.Logf("faults injected %v; %d messages acknowledged; errors by code %v", disk.counts, len(acked), codes)
	if disk.counts[fault.LogWrite] == 0 || disk.counts[fault.StoreApply] == 0 || disk.counts[fault.LogSync] == 0 {
		t.Fatalf("the run injected too few kinds of fault: %v", disk.counts)
	}
	for code := range codes {
		if code != rpc.CodeStorageFull && code != rpc.CodeUnavailable && code != rpc.CodeInternal {
			t.Errorf("a storage fault surfaced as code %d", code)
		}
	}
	if codes[rpc.CodeStorageFull] == 0 {
		t.Errorf("no send failed with CodeStorageFull: %v", codes)
	}

	// Every acknowledged message is in the log, and the log's messages are
	// exactly the projection's.
	// Retries with a key never stored a message twice.
	inLog := map[string]bool{}
	contents := map[string]int{}
	if _, err := n.EventLog().Scan(ctx, nil, func(e *eventlog.Event) error {
		if e.Type == eventlog.TypeMessageCreate {
			inLog[messageIDOf(e.Raw)] = true
			var p eventlog.MessageCreate
			if err := e.Decode(&p); err != nil {
				return err
			}
			if contents[p.Content]++; contents[p.Content] == 2 {
				t.Errorf("%q is in the log twice", p.Content)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for id := range acked {
		if !inLog[id] {
			t.Errorf("acknowledged message %s is not in the log", id)
		}
	}
	rebuilt, err := n.Rebuild(ctx, filepath.Join(t.TempDir(), "rebuilt.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer rebuilt.Close()
	live, want := dumpProjection(t, thrum.ProjectionOf(n)), dumpProjection(t, rebuilt)
	if d := diffDumps(live, want); d != "" {
		pos, _ := thrum.ProjectionOf(n).Positions(ctx)
		_, _ = n.EventLog().Scan(ctx, nil, func(e *eventlog.Event) error {
			if e.Type == eventlog.TypeMessageCreate && !strings.Contains(strings.Join(live["messages"], " "), messageIDOf(e.Raw)) {
				t.Logf("missing %s %s off %d; checkpoint %d", messageIDOf(e.Raw), e.Shard, e.Offset, pos[eventlog.ShardPath(e.Shard)])
			}
			return nil
		})
		t.Fatalf("live projection differs from a rebuild of the log:\n%s", d)
	}
	if len(live["messages"]) != len(inLog) {
		t.Fatalf("projection has %d messages, the log %d", len(live["messages"]), len(inLog))
	}
}

// waitHealthy waits until health says ok.
func waitHealthy(t *testing.T, n *thrum.Node) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		h, err := n.Health(context.Background(), &rpc.HealthParams{})
		if err != nil {
			t.Fatal(err)
		}
		if h.Status == "ok" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still degraded after 10s: %v", h.Problems)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestDiskFullIsReportedAndResolvesItself fills the disk under the
// projection: the send fails with CodeStorageFull naming the database,
// health is degraded with the cause, further writes are refused without
// touching the log, and when space returns the node catches up by itself:
// the first message appears, and writes work again.
func TestDiskFullIsReportedAndResolvesItself(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	n := thrumtest.OpenNodeIn(t, dir, &thrum.Options{NoSync: true})
	thrumtest.Register(t, n, "alice", "dev", "m")
	alice := thrum.AsAgent(ctx, "alice")
	var full atomic.Bool
	full.Store(true)
	defer fault.Set(func(op, path string) error {
		if full.Load() && op == fault.StoreApply && strings.HasPrefix(path, dir) {
			return &fs.PathError{Op: "write", Path: path, Err: syscall.ENOSPC}
		}
		return nil
	})()
	_, err := n.SendMessage(alice, &rpc.SendMessageParams{Content: "first", IdempotencyKey: "k"})
	wantCode(t, err, rpc.CodeStorageFull, "disk full: no space left on the device holding "+filepath.Join(dir, thrum.DefaultDBName))
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("disk full in Go: %v, want errors.Is ENOSPC", err)
	}
	h, _ := n.Health(ctx, &rpc.HealthParams{})
	if h.Status != "degraded" || len(h.Problems) != 1 || !strings.Contains(h.Problems[0], "disk full") {
		t.Fatalf("health while the disk is full: %+v", h)
	}
	before := n.EventLog().Positions()
	_, err = n.SendMessage(alice, &rpc.SendMessageParams{Content: "second"})
	wantCode(t, err, rpc.CodeStorageFull, "writes are refused")
	if after := n.EventLog().Positions(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("a refused write reached the log: %v → %v", before, after)
	}
	full.Store(false)
	waitHealthy(t, n)
	r, err := n.SendMessage(alice, &rpc.SendMessageParams{Content: "first", IdempotencyKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	g, err := n.GetMessage(ctx, &rpc.GetMessageParams{MessageID: r.MessageID})
	if err != nil || g.Message.Body.Content != "first" {
		t.Fatalf("the message committed while the disk was full: %+v %v", g, err)
	}
	l, _ := n.ListMessages(alice, &rpc.ListMessagesParams{})
	if l.Total != 1 {
		t.Fatalf("%d messages, want 1 (the retry returned the first)", l.Total)
	}
}

// TestFsyncFailureWhileStagedAppliesNothing: the projection applies a
// batch while the log fsyncs it (eventlog.Options.Stage); when that fsync
// fails, the open transaction is rolled back: the send fails, no reader
// saw the message meanwhile, the store's checkpoint and the log are as
// before, and the next send goes through, leaving a projection equal to
// a rebuild of the log.
func TestFsyncFailureWhileStagedAppliesNothing(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := store.Open(filepath.Join(dir, "messages.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	p := thrum.NewProjector(st)
	var staged atomic.Pointer[chan struct{}]
	lg, err := eventlog.Open(dir, &eventlog.Options{NoSync: true, Stage: func(b []*eventlog.Event, durable func() error) error {
		return p.Stage(b, func() error {
			// The batch's statements have run, uncommitted.
			if c := staged.Swap(nil); c != nil {
				close(*c)
			}
			return durable()
		})
	}})
	if err != nil {
		t.Fatal(err)
	}
	n, err := thrum.New(ctx, lg, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	thrumtest.Register(t, n, "alice", "dev", "m")
	alice := thrum.AsAgent(ctx, "alice")
	if _, err := n.SendMessage(alice, &rpc.SendMessageParams{Content: "one"}); err != nil {
		t.Fatal(err)
	}
	checkpoint, err := st.Positions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	logEnd := lg.Positions()

	shard := filepath.Join(dir, filepath.FromSlash(eventlog.ShardPath("alice")))
	ready := make(chan struct{})
	staged.Store(&ready)
	var seen atomic.Int32
	restore := fault.Set(func(op, path string) error {
		if op != fault.LogSync || path != shard {
			return nil
		}
		select { // fail the fsync only once the batch is staged
		case <-ready:
		case <-time.After(10 * time.Second):
			t.Error("the batch was not staged while its fsync ran")
		}
		c, err := st.MessageCount(ctx, "alice") // a reader, while the transaction is open
		if err != nil {
			t.Error(err)
		}
		seen.Store(int32(c))
		return &fs.PathError{Op: op, Path: path, Err: syscall.EIO}
	})
	_, err = n.SendMessage(alice, &rpc.SendMessageParams{Content: "two"})
	restore()
	if err == nil {
		t.Fatal("the send succeeded although its fsync failed")
	}
	if seen.Load() != 1 {
		t.Errorf("a reader saw %d messages while the failing batch was staged, want 1", seen.Load())
	}
	if got, _ := st.MessageCount(ctx, "alice"); got != 1 {
		t.Errorf("the store holds %d messages after the failed send, want 1", got)
	}
	if got, err := st.Positions(ctx); err != nil || fmt.Sprint(got) != fmt.Sprint(checkpoint) {
		t.Errorf("checkpoint %v after the failed send, was %v (%v)", got, checkpoint, err)
	}
	if got := lg.Positions(); fmt.Sprint(got) != fmt.Sprint(logEnd) {
		t.Errorf("log ends at %v after the failed send, was %v", got, logEnd)
	}
	if _, err := n.SendMessage(alice, &rpc.SendMessageParams{Content: "three"}); err != nil {
		t.Fatalf("the send after the failure: %v", err)
	}
	if got, _ := st.MessageCount(ctx, "alice"); got != 2 {
		t.Errorf("the store holds %d messages, want 2", got)
	}
	rebuilt, err := n.Rebuild(ctx, filepath.Join(t.TempDir(), "rebuilt.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer rebuilt.Close()
	if d := diffDumps(dumpProjection(t, st), dumpProjection(t, rebuilt)); d != "" {
		t.Fatalf("live projection differs from a rebuild of the log:\n%s", d)
	}
}

// A storage error other than a full disk reaches the caller with its
// cause: over the daemon's socket the message names what failed and why
// (an I/O error on the log's shard, then on the projection's commit), and
// in Go errors.Is still finds the cause. Writes resume when it clears.
func TestStorageErrorsCarryTheirCause(t *testing.T) {
	ctx := context.Background()
	d := startDaemon(t)
	dir := d.n.EventLog().Dir()
	var op atomic.Value // the fault.* operation to fail, or ""
	op.Store("")
	defer fault.Set(func(o, path string) error {
		if o == op.Load().(string) && strings.HasPrefix(path, dir) {
			return &fs.PathError{Op: "write", Path: path, Err: syscall.EIO}
		}
		return nil
	})()
	u := d.unix(t, nil)
	if _, err := u.Auth(ctx, &rpc.AuthParams{AgentID: "alice"}); err != nil {
		t.Fatal(err)
	}
	send := func() error {
		_, err := u.SendMessage(ctx, &rpc.SendMessageParams{Content: "x", Mentions: []string{"@bob"}})
		return err
	}

	op.Store(fault.LogWrite)
	err := send()
	wantCode(t, err, rpc.CodeInternal, "the event log could not be written (")
	wantCode(t, err, rpc.CodeInternal, "input/output error")
	wantCode(t, err, rpc.CodeInternal, filepath.Join(dir, "messages", "alice"))
	_, err = d.n.SendMessage(thrum.AsAgent(ctx, "alice"), &rpc.SendMessageParams{Content: "x", Mentions: []string{"@bob"}})
	if !errors.Is(err, syscall.EIO) || !errors.Is(err, thrum.ErrInternal) {
		t.Fatalf("in Go: %v; want errors.Is EIO and ErrInternal", err)
	}

	op.Store(fault.StoreApply)
	waitHealthy(t, d.n) // the log's disk probe clears the failed write
	err = send()
	wantCode(t, err, rpc.CodeUnavailable, "the projection cannot apply committed writes (")
	wantCode(t, err, rpc.CodeUnavailable, "input/output error")

	op.Store("")
	waitHealthy(t, d.n)
	if err := send(); err != nil {
		t.Fatalf("a send once the fault cleared: %v", err)
	}
}
