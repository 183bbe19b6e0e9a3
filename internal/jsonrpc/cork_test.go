package jsonrpc

import (
	"context"
	"encoding/json"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Tests of adaptive corking (cork.go). The corker's ticks are driven by
// the test (manual), and its period is an hour, so that nothing here
// depends on timing: a notification that should wait for a tick would
// never arrive without one, and the count of writes on the server's side
// of the connection shows how they were gathered.

// countingConn counts the writes made to a connection.
type countingConn struct {
	net.Conn
	writes atomic.Int64
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// corkRig is one pipe connection to a server whose corker ticks only when
// the test says, with the server's Conn, the writes made on it and the
// notifications its client received, in order.
type corkRig struct {
	s      *Server
	k      *corker
	c      *Client
	conn   *Conn
	server *countingConn

	mu    sync.Mutex
	got   []int
	notes chan int
}

func newCorkRig(t *testing.T) *corkRig {
	t.Helper()
	s, _ := testServer(t, nil)
	s.cork.period, s.cork.manual = time.Hour, true
	r := &corkRig{s: s, k: s.cork, notes: make(chan int, 1024)}
	conns := make(chan *Conn, 1)
	s.Handle("grab", func(ctx context.Context, _ json.RawMessage) (any, error) {
		conns <- ConnFromContext(ctx)
		return "ok", nil
	})
	srvEnd, cliEnd := net.Pipe()
	r.server = &countingConn{Conn: srvEnd}
	served := make(chan struct{})
	go func() {
		defer close(served)
		s.ServeConn(context.Background(), r.server, TransportPipe)
	}()
	r.c = NewClient(cliEnd, &ClientOptions{OnNotification: func(method string, params json.RawMessage) {
		var p struct{ I int }
		if method != "note" || json.Unmarshal(params, &p) != nil {
			t.Errorf("unexpected notification %s %s", method, params)
			return
		}
		r.mu.Lock()
		r.got = append(r.got, p.I)
		r.mu.Unlock()
		r.notes <- p.I
	}})
	t.Cleanup(func() {
		r.c.Close()
		<-served
	})
	if err := r.c.Call(context.Background(), "grab", nil, nil); err != nil {
		t.Fatal(err)
	}
	r.conn = <-conns
	return r
}

// busy puts the corker in its busy state, as corkBusy notifications
// within one period would.
func (r *corkRig) busy() {
	r.k.mu.Lock()
	r.k.busy = true
	r.k.mu.Unlock()
}

// stream makes the connection one whose last notification was queued
// just now: the next is likely to gather with others.
func (r *corkRig) stream() { r.lastQueued(r.k.now()) }

func (r *corkRig) lastQueued(at time.Duration) {
	r.k.mu.Lock()
	r.conn.queuedAt = at
	r.k.mu.Unlock()
}

func (r *corkRig) notify(t *testing.T, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		if err := r.conn.Notify("note", map[string]int{"i": i}); err != nil {
			t.Fatal(err)
		}
	}
}

// await waits for notifications up to number to-1 to arrive. Its bound is
// there to fail instead of hanging; nothing here is slow.
func (r *corkRig) await(t *testing.T, to int) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		r.mu.Lock()
		n := len(r.got)
		r.mu.Unlock()
		if n >= to {
			return
		}
		select {
		case <-r.notes:
		case <-timeout:
			t.Fatalf("%d notifications arrived, want %d", n, to)
		}
	}
}

func (r *corkRig) checkOrder(t *testing.T, n int) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.got) != n {
		t.Fatalf("%d notifications, want %d", len(r.got), n)
	}
	for i, v := range r.got {
		if v != i {
			t.Fatalf("notification %d is number %d: out of order", i, v)
		}
	}
}

// waiting reports whether the connection waits for the corker's tick.
func (r *corkRig) waiting() bool {
	r.k.mu.Lock()
	defer r.k.mu.Unlock()
	return r.conn.waiting
}

func TestCorkIdleServerWritesAtOnce(t *testing.T) {
	checkLeaks(t)
	r := newCorkRig(t)
	r.stream()
	for i := range 5 {
		r.notify(t, i, i+1)
		r.await(t, i+1) // no tick ever comes: it went at once
	}
	r.checkOrder(t, 5)
	if r.waiting() {
		t.Fatal("a connection of a server that is not busy waits for a tick")
	}
}

func TestCorkSparseNotificationWritesAtOnce(t *testing.T) {
	checkLeaks(t)
	r := newCorkRig(t)
	r.busy()
	r.lastQueued(r.k.now() - 2*r.k.period) // its last notification was longer than a period ago
	writes := r.server.writes.Load()
	r.notify(t, 0, 1)
	r.await(t, 1)
	if r.waiting() {
		t.Fatal("a quiet connection's notification waits for a tick")
	}
	if w := r.server.writes.Load() - writes; w != 1 {
		t.Fatalf("%d writes for one notification, want 1", w)
	}
}

func TestCorkGathersAStreamIntoOneWrite(t *testing.T) {
	checkLeaks(t)
	r := newCorkRig(t)
	r.busy()
	r.stream()
	writes := r.server.writes.Load()
	const n = 10
	r.notify(t, 0, n)
	if !r.waiting() {
		t.Fatal("a busy server's stream does not wait for the tick")
	}
	if q := len(r.conn.notes); q != n {
		t.Fatalf("%d notifications queued before the tick, want %d", q, n)
	}
	if w := r.server.writes.Load() - writes; w != 0 {
		t.Fatalf("%d writes before the tick, want 0", w)
	}
	r.k.tick()
	r.await(t, n)
	r.checkOrder(t, n)
	if w := r.server.writes.Load() - writes; w != 1 {
		t.Fatalf("%d writes for %d notifications after one tick, want 1", w, n)
	}
}

func TestCorkUrgentQueueWritesWithoutTick(t *testing.T) {
	checkLeaks(t)
	r := newCorkRig(t)
	r.busy()
	r.stream()
	// Notifications while one is being written may stay queued for the
	// tick, but never more than corkUrgent of them: the rest go.
	const n = 3 * corkUrgent
	r.notify(t, 0, n)
	r.await(t, n-corkUrgent)
	r.k.tick()
	r.await(t, n)
	r.checkOrder(t, n)
}

func TestCorkedNotificationsPrecedeReply(t *testing.T) {
	checkLeaks(t)
	r := newCorkRig(t)
	r.busy()
	r.stream()
	r.notify(t, 0, 3)
	if !r.waiting() {
		t.Fatal("the notifications do not wait for the tick")
	}
	if err := r.c.Call(context.Background(), "ping", nil, nil); err != nil {
		t.Fatal(err)
	}
	// The client hands notifications on before it reads the next message,
	// so all three were handed on before the reply.
	r.checkOrder(t, 3)
}

func TestCorkBusyStartsAndEnds(t *testing.T) {
	checkLeaks(t)
	r := newCorkRig(t)
	isBusy := func() bool {
		r.k.mu.Lock()
		defer r.k.mu.Unlock()
		return r.k.busy
	}
	r.notify(t, 0, corkBusy-1)
	if isBusy() {
		t.Fatalf("busy after %d notifications, want %d", corkBusy-1, corkBusy)
	}
	r.notify(t, corkBusy-1, corkBusy)
	if !isBusy() {
		t.Fatalf("not busy after %d notifications in one period", corkBusy)
	}
	r.await(t, corkBusy) // written at once, as they came while not busy
	if !r.k.tick() {
		t.Fatal("not busy one tick after becoming busy")
	}
	if r.k.tick() {
		t.Fatal("still busy after two ticks without notifications")
	}
	r.stream()
	r.notify(t, corkBusy, corkBusy+1)
	r.await(t, corkBusy+1)
	r.checkOrder(t, corkBusy+1)
}
