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

// TestWALRestartsUnderSteadyWrites applies messages steadily, a commit
// every millisecond or so, so that a passive checkpoint rarely finds the
// WAL fully copied, and checks that the WAL is restarted by the writer
// after checkpoints under the applier's lock, its file bounded, without a
// TRUNCATE checkpoint: that would hold the write lock for milliseconds and
// leave a commit sleeping in SQLite's busy handler.
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
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; ; i++ {
		tr, locked := st.CheckpointCounts()
		if tr != 0 {
			t.Fatalf("a TRUNCATE checkpoint ran while writing (WAL file peak %d bytes)", peak)
		}
		if locked >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d checkpoints under the applier's lock in 30s of writing, want 3 (WAL file peak %d bytes)", locked, peak)
		}
		off += 100
		e := &eventlog.Event{ID: eventlog.NewID(), Time: time.Now(), Type: eventlog.TypeMessageCreate, Shard: "alice", Offset: off,
			Payload: eventlog.MessageCreate{MessageID: fmt.Sprintf("msg_%d", i), AgentID: "alice", Format: "plain", Content: body, Priority: "normal"}}
		if err := st.Apply(ctx, []*eventlog.Event{e}); err != nil {
			t.Fatal(err)
		}
		peak = max(peak, walSize(t, path))
		time.Sleep(time.Millisecond)
	}
	if peak > store.WALHardMax {
		t.Fatalf("WAL file peaked at %d bytes, over the bound %d", peak, store.WALHardMax)
	}
	t.Logf("WAL file peaked at %d bytes; 3 checkpoints under the applier's lock, no TRUNCATE", peak)
}
