package msgindex_test

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/internal/msgindex"
	"github.com/thrumhq/thrum/store"
)

// An index that took reads before their messages (an import brings an
// agent's reads of messages in shards it merges later) holds, once the
// messages are in, no more than one that took the messages first: the
// room the early reads took is given back.
func TestEarlyReadsGiveTheirRoomBack(t *testing.T) {
	const n = 20_000
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var msgs, reads []*eventlog.Event
	for i := range n {
		id := fmt.Sprintf("msg_%06d", i)
		msgs = append(msgs, &eventlog.Event{Type: eventlog.TypeMessageCreate, Shard: "ann", Time: at,
			Payload: eventlog.MessageCreate{MessageID: id, AgentID: "ann", SessionID: "ses_ann", Format: "markdown", Content: "x", Priority: "normal"}})
		reads = append(reads, &eventlog.Event{Type: eventlog.TypeMessageRead, Shard: "bob", Time: at,
			Payload: eventlog.MessageRead{AgentID: "bob", SessionID: "ses_bob", MessageIDs: []string{id}}})
	}
	st, err := store.Open(filepath.Join(t.TempDir(), "x.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// heldBy is the heap an index fed first and then second holds: the
	// heap in use while it is, less that once it is gone.
	heldBy := func(first, second []*eventlog.Event) uint64 {
		var with uint64
		func() {
			x := built(st)
			for _, evs := range [][]*eventlog.Event{first, second} {
				for i := 0; i < len(evs); i += 1000 {
					x.Apply(evs[i:min(i+1000, len(evs))])
				}
			}
			with = liveHeap()
			runtime.KeepAlive(x)
		}()
		return with - min(with, liveHeap())
	}
	inOrder := heldBy(msgs, reads)
	early := heldBy(reads, msgs)
	t.Logf("messages first: %d KiB held; reads first: %d KiB", inOrder>>10, early>>10)
	if early > inOrder+inOrder/10+256<<10 {
		t.Fatalf("an index that took %d reads before their messages holds %d KiB, one that took the messages first %d KiB", n, early>>10, inOrder>>10)
	}
}

// liveHeap is the heap in use after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// Reads waiting for their messages (an import holds tens of thousands
// while it merges the shards of their readers before those of the
// messages) take less than 64 bytes each: not the message's ID, nor a
// list and a name per read.
func TestEarlyReadsAreSmallWhileTheyWait(t *testing.T) {
	const n = 20_000
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	st, err := store.Open(filepath.Join(t.TempDir(), "x.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	x := built(st)
	before := liveHeap()
	for i := range n / 100 { // each read made as it is applied, then let go
		ids := make([]string, 100)
		for j := range ids {
			ids[j] = fmt.Sprintf("msg_01M8JVD4R2PB0QRWMV%06d", i*100+j)
		}
		x.Apply([]*eventlog.Event{{Type: eventlog.TypeMessageRead, Shard: "bob", Time: at,
			Payload: eventlog.MessageRead{AgentID: "bob", SessionID: "ses_bob", MessageIDs: ids}}})
	}
	after := liveHeap()
	runtime.KeepAlive(x)
	held := after - min(before, after)
	t.Logf("%d reads waiting: %d KiB, %d bytes each", n, held>>10, held/n)
	if held/n >= 64 {
		t.Fatalf("%d reads waiting for their messages hold %d KiB, %d bytes each", n, held>>10, held/n)
	}
}

// An index that took its messages one commit at a time (an import of
// 50,000) holds no more than one loaded from its snapshot: no map of
// every message it indexed, no slack of a slice grown by a quarter. And
// either holds a message in under 90 bytes: a message ID as a thrum
// makes one takes 16 of them, where as a string it took 48 (111 a
// message).
func TestAnIndexedImportIsAsSmallAsALoad(t *testing.T) {
	const n = 50_000
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	st, err := store.Open(filepath.Join(t.TempDir(), "x.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	path := filepath.Join(t.TempDir(), "x.index")
	before := liveHeap()
	x := built(st)
	for i := 0; i < n; i += 500 { // each commit made as it is applied, then let go
		var evs []*eventlog.Event
		for j := i; j < i+500; j++ {
			evs = append(evs, &eventlog.Event{Type: eventlog.TypeMessageCreate, Shard: "ann", Time: at.Add(time.Duration(j)), Offset: int64(j+1) * 100,
				Payload: eventlog.MessageCreate{MessageID: fmt.Sprintf("msg_01M8JVD4R2PB0QRWMV%08d", j), AgentID: "ann",
					Refs: []eventlog.Pair{{Type: "mention", Value: "bob"}}}})
		}
		x.Apply(evs)
	}
	imported := liveHeap() - min(before, liveHeap())
	if err := x.Save(path); err != nil {
		t.Fatal(err)
	}
	x.Close()
	runtime.KeepAlive(x)
	before = liveHeap()
	y := msgindex.New()
	if err := y.Load(context.Background(), path, emptyLog{}); err != nil {
		t.Fatal(err)
	}
	loaded := liveHeap() - min(before, liveHeap())
	runtime.KeepAlive(y)
	t.Logf("%d messages: %d KiB indexed as they came, %d KiB loaded", n, imported>>10, loaded>>10)
	if imported > loaded+loaded/10 {
		t.Fatalf("an index of %d messages that came one commit at a time holds %d KiB, loaded from its snapshot %d KiB", n, imported>>10, loaded>>10)
	}
	if most := max(imported, loaded); most > 90*n {
		t.Fatalf("an index of %d messages holds %d KiB: %d bytes a message", n, most>>10, most/n)
	}
}

// emptyLog is a log that holds every position a snapshot names and
// nothing past them.
type emptyLog struct{}

func (emptyLog) Positions() map[string]int64 { return nil }
func (emptyLog) CheckAt(string, int64, string) (*eventlog.Event, error) {
	return nil, nil
}
func (emptyLog) Scan(_ context.Context, from map[string]int64, _ func(*eventlog.Event) error) (map[string]int64, error) {
	return from, nil
}
