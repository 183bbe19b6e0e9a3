package thrum_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/internal/directory"
	"github.com/thrumhq/thrum/internal/dirlock"
	"github.com/thrumhq/thrum/internal/thrumtest"
	"github.com/thrumhq/thrum/rpc"
	"github.com/thrumhq/thrum/store"
)

// recorder is an embedder's projection: it keeps every message it is
// given, once each (Apply is idempotent, as a Projection must be), and
// fails while fail is set.
type recorder struct {
	fail atomic.Bool

	mu    sync.Mutex
	seen  map[string]bool
	order []string // message contents, in the order applied
	calls int
}

func (r *recorder) Apply(_ context.Context, batch []*eventlog.Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	if r.fail.Load() {
		return errors.New("recorder: refusing")
	}
	for _, e := range batch {
		if e.Type != eventlog.TypeMessageCreate || r.seen[e.ID] {
			continue
		}
		p, err := eventlog.PayloadAs[eventlog.MessageCreate](e)
		if err != nil {
			return err
		}
		if r.seen == nil {
			r.seen = map[string]bool{}
		}
		r.seen[e.ID] = true
		r.order = append(r.order, p.Content)
	}
	return nil
}

func (r *recorder) contents() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.order...)
}

// newFromParts builds a node the long way: a store (the file db in dir),
// a projector with the extra projection, a log whose commits go to the
// projector. It returns the projector too.
func newFromParts(t *testing.T, dir, db string, extra thrum.Projection) (*thrum.Node, *thrum.Projector) {
	t.Helper()
	st, err := store.Open(filepath.Join(dir, db), nil)
	if err != nil {
		t.Fatal(err)
	}
	p := thrum.NewProjector(st, extra)
	lg, err := eventlog.Open(dir, &eventlog.Options{OnCommit: p.Commit, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	n, err := thrum.New(context.Background(), lg, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n.EventLog() != lg {
		t.Fatal("the node does not hold the parts it was given")
	}
	return n, p
}

func TestNewFromPartsDrivesAnExtraProjection(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	rec := &recorder{}
	n, _ := newFromParts(t, dir, "parts.db", rec)
	thrumtest.Register(t, n, "alice", "dev", "core")
	thrumtest.Register(t, n, "bob", "dev", "core")
	alice := thrum.AsAgent(ctx, "alice")
	send := func(content string) error {
		_, err := n.SendMessage(alice, &rpc.SendMessageParams{Content: content, Mentions: []string{"@bob"}})
		return err
	}
	for _, c := range []string{"one", "two"} {
		if err := send(c); err != nil {
			t.Fatal(err)
		}
	}
	if got := rec.contents(); len(got) != 2 || got[0] != "one" || got[1] != "two" {
		t.Fatalf("the projection saw %q, want [one two]", got)
	}

	// A failing projection holds writes back like a failing store: the
	// batch is durable, stays pending, and is applied by a retry.
	rec.fail.Store(true)
	if err := send("three"); !errors.Is(err, thrum.ErrUnavailable) {
		t.Fatalf("send while the projection fails: %v, want ErrUnavailable", err)
	}
	if err := send("four"); !errors.Is(err, thrum.ErrUnavailable) {
		t.Fatalf("send while events are pending: %v, want ErrUnavailable", err)
	}
	h, _ := n.Health(ctx, nil)
	if h.Status != "degraded" {
		t.Fatalf("health while pending: %+v", h)
	}
	rec.fail.Store(false)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := send("five"); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("writes never resumed: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := rec.contents(); len(got) != 4 || got[2] != "three" || got[3] != "five" {
		t.Fatalf("after the retry the projection saw %q, want [one two three five]", got)
	}
	inbox, err := n.ListMessages(thrum.AsAgent(ctx, "bob"), &rpc.ListMessagesParams{Mentions: true})
	if err != nil || inbox.Total != 4 {
		t.Fatalf("bob's inbox: %+v %v", inbox, err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}

	// A new node replays the whole log into a fresh projection.
	again := &recorder{}
	n2, _ := newFromParts(t, dir, "parts.db", again)
	defer n2.Close()
	if got := again.contents(); len(got) != 4 || got[0] != "one" || got[3] != "five" {
		t.Fatalf("replayed into a new projection: %q", got)
	}
}

func TestProjectorServesOneNode(t *testing.T) {
	n, p := newFromParts(t, t.TempDir(), "parts.db", &recorder{})
	defer n.Close()
	if _, err := thrum.New(context.Background(), n.EventLog(), p, nil); err == nil {
		t.Fatal("a second node over the same projector was accepted")
	}
	if _, err := n.Health(context.Background(), nil); err != nil {
		t.Fatalf("the first node was harmed: %v", err)
	}
}

func TestOpenHonoursItsContext(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := thrum.Open(ctx, dir, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("Open with a cancelled context: %v, want context.Canceled", err)
	}
	// The failed Open released the directory.
	n, err := thrum.Open(context.Background(), dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	n.Close()
}

// The root's names for the everyone group and the lock file are the
// internal packages' (which the root cannot show in go doc).
func TestRootConstantsMatchInternal(t *testing.T) {
	if thrum.EveryoneGroup != directory.Everyone || thrum.LockFile != dirlock.File {
		t.Fatalf("EveryoneGroup %q vs %q, LockFile %q vs %q", thrum.EveryoneGroup, directory.Everyone, thrum.LockFile, dirlock.File)
	}
}
