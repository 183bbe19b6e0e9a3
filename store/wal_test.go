package store_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/store"
)

// TestWALIsTruncatedWhenIdle writes a few MiB of messages through Apply
// and checks that once the store is idle the WAL file is emptied.
func TestWALIsTruncatedWhenIdle(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "p.db")
	st, err := store.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	body := strings.Repeat("x", 8<<10)
	var off int64
	for i := range 400 {
		off += 100
		e := &eventlog.Event{ID: eventlog.NewID(), Time: time.Now(), Type: eventlog.TypeMessageCreate, Shard: "alice", Offset: off,
			Payload: eventlog.MessageCreate{MessageID: fmt.Sprintf("msg_%d", i), AgentID: "alice", Format: "plain", Content: body, Priority: "normal"}}
		if err := st.Apply(ctx, []*eventlog.Event{e}); err != nil {
			t.Fatal(err)
		}
	}
	peak := walSize(t, path)
	deadline := time.Now().Add(10 * time.Second)
	for walSize(t, path) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("WAL still %d bytes 10s after the last write (peak %d)", walSize(t, path), peak)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("WAL peaked at %d bytes while writing 3.2 MiB, 0 once idle", peak)
}

func walSize(t *testing.T, path string) int64 {
	st, err := os.Stat(path + "-wal")
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// TestWALRestartsUnderSteadyWrites applies messages without a pause, so
// that no passive checkpoint ever finds the WAL fully copied, and checks
// that the WAL still shrinks once it passes WALMaxSize — restarted by the
// writer after a checkpoint under the applier's lock — without a TRUNCATE
// checkpoint, which would hold the write lock for milliseconds and leave
// commits sleeping in SQLite's busy handler.
func TestWALRestartsUnderSteadyWrites(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "p.db")
	st, err := store.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	body := strings.Repeat("x", 8<<10)
	var off, peak int64
	over, shrunk := false, false
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; !shrunk; i++ {
		if time.Now().After(deadline) {
			tr, locked := st.CheckpointCounts()
			t.Fatalf("the WAL never shrank below %d bytes after passing it (peak %d, %d truncates, %d locked checkpoints)",
				store.WALMaxSize, peak, tr, locked)
		}
		off += 100
		e := &eventlog.Event{ID: eventlog.NewID(), Time: time.Now(), Type: eventlog.TypeMessageCreate, Shard: "alice", Offset: off,
			Payload: eventlog.MessageCreate{MessageID: fmt.Sprintf("msg_%d", i), AgentID: "alice", Format: "plain", Content: body, Priority: "normal"}}
		if err := st.Apply(ctx, []*eventlog.Event{e}); err != nil {
			t.Fatal(err)
		}
		n := walSize(t, path)
		peak = max(peak, n)
		over = over || n > store.WALMaxSize
		shrunk = over && n < store.WALMaxSize
	}
	tr, locked := st.CheckpointCounts()
	if tr != 0 || locked == 0 {
		t.Fatalf("while writing: %d TRUNCATE checkpoints, %d under the applier's lock; want 0 and at least 1", tr, locked)
	}
	if peak > store.WALHardMax {
		t.Fatalf("WAL peaked at %d bytes, over the bound %d", peak, store.WALHardMax)
	}
	t.Logf("WAL peaked at %d bytes and was restarted by the writer after %d locked checkpoint(s)", peak, locked)
}
