package msgindex_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/internal/msgindex"
	"github.com/thrumhq/thrum/store"
)

// Two Saves that overlap — the one that saw fewer messages finishing
// last — must not lose the lookup of the messages only the other one
// saw: each Save replaces the by-ID order with its own and keeps in the
// map only the messages added after its first step. A message the index
// can no longer find is added again by a replayed create, and its
// delete, edit and reads are dropped.
func TestOverlappingSavesKeepEveryMessageFindable(t *testing.T) {
	defer msgindex.SetSnapshotChunk(1)()
	ctx := context.Background()
	st, err := store.Open(filepath.Join(t.TempDir(), "x.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	x := msgindex.New()
	x.Build(ctx, st)
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	create := func(i int) *eventlog.Event {
		return &eventlog.Event{Type: eventlog.TypeMessageCreate, Time: at.Add(time.Duration(i) * time.Millisecond),
			Payload: eventlog.MessageCreate{MessageID: fmt.Sprintf("msg_%06d", i), AgentID: "ann"}}
	}
	dir := t.TempDir()
	var wg sync.WaitGroup
	done := make(chan struct{})
	for g := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				if err := x.Save(filepath.Join(dir, fmt.Sprint(g))); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	const msgs = 3000
	for i := range msgs {
		x.Apply([]*eventlog.Event{create(i)})
		if i%50 == 0 {
			time.Sleep(100 * time.Microsecond)
		}
	}
	close(done)
	wg.Wait()
	// Every create again (a replay does this): nothing new.
	var again []*eventlog.Event
	for i := range msgs {
		again = append(again, create(i))
	}
	x.Apply(again)
	if got := x.Len(); got != msgs {
		t.Fatalf("%d messages after applying %d creates twice: the index lost the lookup of %d of them", got, msgs, got-msgs)
	}
}
