package msgindex_test

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/internal/msgindex"
	"github.com/thrumhq/thrum/store"
)

// A saved and loaded index answers every listing as the one saved; a
// snapshot saved for another fingerprint, or damaged, is refused and
// leaves the index unbuilt for Build.
func TestSnapshotLoadEqualsSaved(t *testing.T) {
	ctx := context.Background()
	_, x, filters := listingFixture(t, 300)
	// A read that came before its message (synced out of order) is kept
	// for it: it must survive the snapshot too.
	x.Apply([]*eventlog.Event{{Type: eventlog.TypeMessageRead, Time: time.Now(),
		Payload: eventlog.MessageRead{AgentID: "bob", MessageIDs: []string{"msg_late"}}}})
	path := filepath.Join(t.TempDir(), "idx")
	fp := []byte("state-1")
	if err := x.Save(path, fp); err != nil {
		t.Fatal(err)
	}

	y := msgindex.New()
	if err := y.Load(path, fp); err != nil {
		t.Fatalf("Load: %v", err)
	}
	if !y.Built() {
		t.Fatal("a loaded index is not built")
	}
	for _, f := range filters {
		wantIDs, wantTotal, wantUnread, err := x.List(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		gotIDs, gotTotal, gotUnread, err := y.List(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(gotIDs, wantIDs) || gotTotal != wantTotal || gotUnread != wantUnread {
			t.Fatalf("filter %+v:\nloaded %d/%d %v\nsaved  %d/%d %v", f, gotTotal, gotUnread, gotIDs, wantTotal, wantUnread, wantIDs)
		}
	}
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

	// Another fingerprint: refused, and the index still waits for Build.
	z := msgindex.New()
	if err := z.Load(path, []byte("state-2")); err == nil {
		t.Fatal("a snapshot of another state was loaded")
	}
	if z.Built() {
		t.Fatal("a refused snapshot left the index built")
	}
	// Damaged anywhere: refused.
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, at := range []int{0, len(b) / 3, len(b) / 2, len(b) - 1} {
		bad := append([]byte(nil), b...)
		bad[at] ^= 0x40
		os.WriteFile(path, bad, 0o600)
		if err := msgindex.New().Load(path, fp); err == nil {
			t.Fatalf("a snapshot damaged at byte %d of %d was loaded", at, len(b))
		}
	}
	os.WriteFile(path, b[:len(b)/2], 0o600)
	if err := msgindex.New().Load(path, fp); err == nil {
		t.Fatal("a torn snapshot was loaded")
	}
}

// While Build reads the projection, listings do not wait: they get
// ErrBuilding, and the caller asks SQLite.
func TestListDuringBuildIsErrBuilding(t *testing.T) {
	st, _, _ := listingFixture(t, 300)
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
