package msgindex_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/internal/msgindex"
	"github.com/thrumhq/thrum/store"
)

// A running index is not saved while it takes a burst of events (an
// import): a save would hold a copy of its orders on top of what the
// import holds. Once the burst is over it is saved at the next check.
func TestNoSaveDuringABurst(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := store.Open(filepath.Join(t.TempDir(), "x.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	x := msgindex.New()
	x.Build(ctx, st)
	path := filepath.Join(t.TempDir(), "x.index")
	done := make(chan struct{})
	go func() {
		defer close(done)
		x.SaveLoop(ctx, path, msgindex.SavePolicy{Min: 10, Age: time.Hour, Check: 50 * time.Millisecond}, nil)
	}()
	defer func() { cancel(); <-done }()
	for start := time.Now(); ; time.Sleep(time.Millisecond) {
		if _, onDisk := x.Unsaved(); onDisk {
			break // the build's save
		}
		if time.Since(start) > 5*time.Second {
			t.Fatal("the built index was never saved")
		}
	}
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	off := int64(0)
	for start := time.Now(); time.Since(start) < 500*time.Millisecond; time.Sleep(time.Millisecond) {
		var evs []*eventlog.Event
		for range 10 { // 10 a millisecond: 500 a check
			off += 100
			evs = append(evs, &eventlog.Event{Type: eventlog.TypeMessageCreate, Shard: "ann", Offset: off, Time: at,
				Payload: eventlog.MessageCreate{MessageID: fmt.Sprintf("msg_%08d", off), AgentID: "ann"}})
		}
		x.Apply(evs)
		if unsaved, _ := x.Unsaved(); unsaved < uint64(off/100) {
			t.Fatalf("saved during the burst, with %d of its %d events", uint64(off/100)-unsaved, off/100)
		}
	}
	for start := time.Now(); ; time.Sleep(time.Millisecond) {
		if unsaved, _ := x.Unsaved(); unsaved == 0 {
			return
		}
		if time.Since(start) > 5*time.Second {
			t.Fatal("not saved after the burst")
		}
	}
}
