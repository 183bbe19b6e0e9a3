package msgindex

import (
	"fmt"
	"runtime"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/thrumhq/thrum/eventlog"
)

// A save runs at the end of an import, on the heap's fullest: beyond the
// index, it holds no more than about one copy of an order and one
// chunk's encoding at a time: 8 bytes a message at 100,000, its by-ID
// order (the one copy it keeps) included, where one value of the orders
// and the strings made it hold 16.
func TestASaveHoldsLittleBeyondTheIndex(t *testing.T) {
	const n = 100_000
	x := New()
	x.install(New(), nil)
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := 0; i < n; i += 1000 {
		var evs []*eventlog.Event
		for j := i; j < i+1000; j++ {
			evs = append(evs, &eventlog.Event{Type: eventlog.TypeMessageCreate, Time: at.Add(time.Duration(j) * time.Millisecond),
				Payload: eventlog.MessageCreate{MessageID: fmt.Sprintf("msg_01M8JVD4R2PB0QRWMV%08d", j), AgentID: fmt.Sprintf("agent_%02d", j%20),
					ThreadID: fmt.Sprintf("thr_%05d", j/4), Refs: []eventlog.Pair{{Type: "mention", Value: "reviewer"}}}})
		}
		for r := range 10 {
			evs = append(evs, &eventlog.Event{Type: eventlog.TypeMessageRead, Time: at,
				Payload: eventlog.MessageRead{AgentID: fmt.Sprintf("agent_%02d", r), MessageIDs: []string{evs[r].Payload.(eventlog.MessageCreate).MessageID}}})
		}
		x.Apply(evs)
	}
	w := &heapWatcher{}
	before := w.live()
	if _, err := x.writeSnapshot(w); err != nil {
		t.Fatal(err)
	}
	runtime.KeepAlive(x)
	held := w.most - min(before, w.most)
	t.Logf("%d messages, %d KiB live before the save: it held %d KiB more at most (%.1f bytes a message), over %d writes",
		n, before>>10, held>>10, float64(held)/n, w.writes)
	if held > 11*n {
		t.Fatalf("a save of %d messages held %d KiB beyond the index (%.1f bytes a message): over 11", n, held>>10, float64(held)/n)
	}
}

// heapWatcher is a writer that discards what it is given and, at every
// write, collects and notes the live heap: a snapshot's writer holds the
// most it ever holds when it writes what it encoded.
type heapWatcher struct {
	most   uint64
	writes int
}

func (w *heapWatcher) live() uint64 {
	runtime.GC()
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

func (w *heapWatcher) Write(p []byte) (int, error) {
	w.most = max(w.most, w.live())
	w.writes++
	return len(p), nil
}
