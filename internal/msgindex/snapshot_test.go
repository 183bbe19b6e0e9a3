package msgindex_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/internal/msgindex"
	"github.com/thrumhq/thrum/store"
)

// A lister answers a listing: Index.List, store.MessageIDs.
type lister func(context.Context, store.MessageFilter) (ids []string, total, unread int, err error)

// sameListings fails unless got answers every filter as want does (an
// empty page and none are the same).
func sameListings(t *testing.T, got, want lister, filters []store.MessageFilter) {
	t.Helper()
	ctx := context.Background()
	for _, f := range filters {
		wantIDs, wantTotal, wantUnread, err := want(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		gotIDs, gotTotal, gotUnread, err := got(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		if len(gotIDs) == 0 && len(wantIDs) == 0 {
			gotIDs, wantIDs = nil, nil
		}
		if !reflect.DeepEqual(gotIDs, wantIDs) || gotTotal != wantTotal || gotUnread != wantUnread {
			t.Fatalf("filter %+v:\ngot  %d/%d %v\nwant %d/%d %v", f, gotTotal, gotUnread, gotIDs, wantTotal, wantUnread, wantIDs)
		}
	}
}

// saved saves x to a new file and returns its path.
func saved(t *testing.T, x *msgindex.Index) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "idx")
	if err := x.Save(path); err != nil {
		t.Fatal(err)
	}
	return path
}

// built returns an index built from st, as a start without a snapshot
// would.
func built(st *store.Store) *msgindex.Index {
	x := msgindex.New()
	x.Build(context.Background(), st)
	return x
}

// A saved and loaded index answers every listing as the one saved; a
// damaged or torn snapshot is refused and leaves the index unbuilt for
// Build.
func TestSnapshotLoadEqualsSaved(t *testing.T) {
	ctx := context.Background()
	_, lg, x, filters := listingFixture(t, 300)
	// A read that came before its message (synced out of order) is kept
	// for it: it must survive the snapshot too.
	x.Apply([]*eventlog.Event{{Type: eventlog.TypeMessageRead, Time: time.Now(),
		Payload: eventlog.MessageRead{AgentID: "bob", MessageIDs: []string{"msg_late"}}}})
	path := saved(t, x)

	y := msgindex.New()
	if err := y.Load(ctx, path, lg); err != nil {
		t.Fatalf("Load: %v", err)
	}
	if !y.Built() {
		t.Fatal("a loaded index is not built")
	}
	sameListings(t, y.List, x.List, filters)
	// Both take the late message the same way: bob's early read applies.
	late := []*eventlog.Event{{Type: eventlog.TypeMessageCreate, Time: time.Now(),
		Payload: eventlog.MessageCreate{MessageID: "msg_late", AgentID: "ann", Refs: []eventlog.Pair{{Type: "mention", Value: "bob"}}}}}
	x.Apply(late)
	y.Apply(late)
	f := store.MessageFilter{Mentions: []string{"bob"}, Reader: "bob", Unread: true, Limit: 1000}
	_, wantTotal, _, _ := x.List(ctx, f)
	ids, gotTotal, _, _ := y.List(ctx, f)
	if gotTotal != wantTotal {
		t.Fatalf("unread for bob after the late message: loaded %d, saved %d", gotTotal, wantTotal)
	}
	for _, id := range ids {
		if id == "msg_late" {
			t.Fatal("the early read was lost in the snapshot: msg_late is unread")
		}
	}

	// Damaged anywhere: refused, and the index still waits for Build.
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, at := range []int{0, len(b) / 3, len(b) / 2, len(b) - 1} {
		bad := append([]byte(nil), b...)
		bad[at] ^= 0x40
		os.WriteFile(path, bad, 0o600)
		z := msgindex.New()
		if err := z.Load(ctx, path, lg); err == nil {
			t.Fatalf("a snapshot damaged at byte %d of %d was loaded", at, len(b))
		}
		if z.Built() {
			t.Fatal("a refused snapshot left the index built")
		}
	}
	os.WriteFile(path, b[:len(b)/2], 0o600)
	if err := msgindex.New().Load(ctx, path, lg); err == nil {
		t.Fatal("a torn snapshot was loaded")
	}
}

// A snapshot older than the log — the node crashed after saving it — is
// made current from the log's tail: the loaded index answers as one
// built from the whole projection, including edits, deletes and reads of
// messages the snapshot already had.
func TestSnapshotReplaysLogTail(t *testing.T) {
	ctx := context.Background()
	st, lg, x, filters := listingFixture(t, 300)
	path := saved(t, x)
	newTail(t, 3, lg, x).commit(100, st, nil)
	y := msgindex.New()
	if err := y.Load(ctx, path, lg); err != nil {
		t.Fatalf("Load: %v", err)
	}
	sameListings(t, y.List, built(st).List, filters)
}

// A snapshot whose positions the log does not hold — another log, or
// one cut back before them — is refused: its tail cannot be found.
func TestSnapshotRefusedForAnotherLog(t *testing.T) {
	ctx := context.Background()
	_, _, x, _ := listingFixture(t, 300)
	path := saved(t, x)
	_, other, _, _ := listingFixture(t, 200) // the same shards, other lines
	if err := msgindex.New().Load(ctx, path, other); err == nil {
		t.Fatal("a snapshot was loaded over another log")
	}
	empty, err := eventlog.Open(t.TempDir(), &eventlog.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer empty.Close()
	if err := msgindex.New().Load(ctx, path, empty); err == nil {
		t.Fatal("a snapshot was loaded over an empty log")
	}
}

// Save holds the index's lock only in short steps, so events are applied
// while it runs. Whatever mix of states a snapshot catches, loading it
// and replaying the log past its positions gives the index of the whole
// log.
func TestSaveWhileApplying(t *testing.T) {
	defer msgindex.SetSnapshotChunk(7)()
	ctx := context.Background()
	st, lg, x, filters := listingFixture(t, 300)
	tl := newTail(t, 5, lg, x)
	dir := t.TempDir()
	var wg sync.WaitGroup
	done := make(chan struct{})
	var saved []string
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			p := filepath.Join(dir, fmt.Sprintf("idx-%d", i))
			if err := x.Save(p); err != nil {
				t.Error(err)
				return
			}
			saved = append(saved, p)
		}
	}()
	for range 40 {
		tl.commit(5, nil, x) // the store catches up at the end
	}
	close(done)
	wg.Wait()
	if _, err := st.CatchUp(ctx, lg); err != nil {
		t.Fatal(err)
	}
	want := built(st)
	// The index that saved finds its messages through each snapshot's
	// by-ID order from then on: it must still take every event right.
	sameListings(t, x.List, want.List, filters)
	if len(saved) < 2 {
		t.Fatalf("only %d snapshots saved while applying", len(saved))
	}
	if len(saved) > 6 { // a spread of them: each load is checked with every filter
		step := len(saved) / 6
		var some []string
		for i := 0; i < len(saved); i += step {
			some = append(some, saved[i])
		}
		saved = some
	}
	for _, p := range saved {
		y := msgindex.New()
		if err := y.Load(ctx, p, lg); err != nil {
			t.Fatalf("Load %s: %v", p, err)
		}
		sameListings(t, y.List, want.List, filters)
	}
}

// ids lists every message x holds.
func ids(t *testing.T, x *msgindex.Index) []string {
	t.Helper()
	out, _, _, err := x.List(context.Background(), store.MessageFilter{IncludeDeleted: true, Limit: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A tail commits random events (tailEvents) to a log, and to a store and
// an index when given, in the projector's order: the store, then the
// index.
type tail struct {
	t   *testing.T
	r   *rand.Rand
	lg  *eventlog.Log
	old []string // every message ID so far: edits, deletes and reads pick from them
}

func newTail(t *testing.T, seed uint64, lg *eventlog.Log, x *msgindex.Index) *tail {
	return &tail{t: t, r: rand.New(rand.NewPCG(seed, seed+1)), lg: lg, old: ids(t, x)}
}

// commit commits n new messages, each with an edit, delete or read, and
// returns the events.
func (tl *tail) commit(n int, st *store.Store, x *msgindex.Index) []*eventlog.Event {
	tl.t.Helper()
	ctx := context.Background()
	evs := tailEvents(tl.r, tl.old, n)
	if err := tl.lg.Append(ctx, evs...); err != nil {
		tl.t.Fatal(err)
	}
	if st != nil {
		if err := st.Apply(ctx, evs); err != nil {
			tl.t.Fatal(err)
		}
	}
	if x != nil {
		x.Apply(evs)
	}
	for _, e := range evs {
		if e.Type == eventlog.TypeMessageCreate {
			p, _ := eventlog.PayloadAs[eventlog.MessageCreate](e)
			tl.old = append(tl.old, p.MessageID)
		}
	}
	return evs
}

// tailEvents makes n events of every kind the index keeps: new messages
// (some mentioning bob), and edits, deletes and reads of old messages and
// of the new ones, including a read that comes before its message.
func tailEvents(r *rand.Rand, old []string, n int) []*eventlog.Event {
	agents := []string{"ann", "bob", "cat", "dan"}
	at := time.Now()
	edited := "z"
	var evs []*eventlog.Event
	for range n {
		from := agents[r.IntN(len(agents))]
		id := fmt.Sprintf("msg_t%08d", r.IntN(1e8))
		p := eventlog.MessageCreate{MessageID: id, AgentID: from, SessionID: "ses_" + from, Format: "markdown", Content: "t", Priority: "normal"}
		if r.IntN(2) == 0 {
			p.Refs = []eventlog.Pair{{Type: "mention", Value: "bob"}}
		}
		if r.IntN(4) == 0 { // its read first: synced out of order
			evs = append(evs, &eventlog.Event{Type: eventlog.TypeMessageRead, Shard: "bob", Time: at,
				Payload: eventlog.MessageRead{AgentID: "bob", SessionID: "ses_bob", MessageIDs: []string{id}}})
		}
		evs = append(evs, &eventlog.Event{Type: eventlog.TypeMessageCreate, Shard: from, Time: at, Payload: p})
		target := old[r.IntN(len(old))]
		if r.IntN(3) == 0 {
			target = id
		}
		switch r.IntN(3) {
		case 0:
			evs = append(evs, &eventlog.Event{Type: eventlog.TypeMessageEdit, Shard: "ann", Time: at.Add(time.Second),
				Payload: eventlog.MessageEdit{MessageID: target, AgentID: "ann", Content: &edited}})
		case 1:
			evs = append(evs, &eventlog.Event{Type: eventlog.TypeMessageDelete, Shard: "ann", Time: at,
				Payload: eventlog.MessageDelete{MessageID: target, AgentID: "ann"}})
		default:
			reader := agents[r.IntN(len(agents))]
			evs = append(evs, &eventlog.Event{Type: eventlog.TypeMessageRead, Shard: reader, Time: at,
				Payload: eventlog.MessageRead{AgentID: reader, SessionID: "ses_" + reader, MessageIDs: []string{target}}})
		}
	}
	return evs
}

// While Build reads the projection, listings do not wait: they get
// ErrBuilding, and the caller asks SQLite.
func TestListDuringBuildIsErrBuilding(t *testing.T) {
	st, _, _, _ := listingFixture(t, 300)
	x := msgindex.New()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	blocked := make(chan struct{})
	go func() {
		defer close(blocked)
		x.Build(ctx, st)
	}()
	for {
		_, _, _, err := x.List(context.Background(), store.MessageFilter{Limit: 5})
		if err == nil {
			break // built already: nothing more to see
		}
		if err != msgindex.ErrBuilding {
			t.Fatalf("List during Build: %v, want ErrBuilding", err)
		}
	}
	<-blocked
}
