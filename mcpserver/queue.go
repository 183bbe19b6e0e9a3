package mcpserver

import "sync"

// queue holds the IDs of messages pushed to this agent until a consuming
// call claims them: bounded, in arrival order, each message once (an edit
// notifies again; it keeps its place). When full, the oldest entry is
// dropped and counted: the message stays unread in the daemon, where
// check_messages finds it, and the next wait_for_message result reports
// the count.
//
// An entry leaves the queue when it is claimed (by any consumer of this
// server), found read or deleted, or dropped. A filtered wait skips
// entries below its floor and leaves them in place.
type queue struct {
	mu      sync.Mutex
	items   []*queued
	index   map[string]*queued
	max     int
	dropped int // entries dropped since the last takeDropped

	// changed is closed, and replaced, when something may be new: every
	// waiter of the server wakes (a channel's stream and a
	// wait_for_message may wait at once, for different floors).
	sigMu sync.Mutex
	sig   chan struct{}
}

// queued is one entry. priority is "" until the message was fetched.
type queued struct {
	id       string
	priority string
}

func (q *queue) init(max int) {
	q.max = max
	q.index = map[string]*queued{}
	q.sig = make(chan struct{})
}

// push appends id unless it is queued already, and reports whether it
// added it.
func (q *queue) push(id string) bool {
	q.mu.Lock()
	added := q.add(id)
	q.mu.Unlock()
	if added {
		q.wake()
	}
	return added
}

// pushAll appends those of ids not queued already, in order, and returns
// how many it added.
func (q *queue) pushAll(ids []string) int {
	q.mu.Lock()
	n := 0
	for _, id := range ids {
		if q.add(id) {
			n++
		}
	}
	q.mu.Unlock()
	if n > 0 {
		q.wake()
	}
	return n
}

func (q *queue) add(id string) bool {
	if _, ok := q.index[id]; ok {
		return false
	}
	if len(q.items) >= q.max {
		delete(q.index, q.items[0].id)
		q.items[0] = nil
		q.items = q.items[1:]
		q.dropped++
	}
	it := &queued{id: id}
	q.items = append(q.items, it)
	q.index[id] = it
	return true
}

// wake tells every waiter to look again.
func (q *queue) wake() {
	q.sigMu.Lock()
	close(q.sig)
	q.sig = make(chan struct{})
	q.sigMu.Unlock()
}

// changed returns a channel that is closed at the next wake. A waiter
// takes it before it looks at the queue, so that no wake is missed.
func (q *queue) changed() <-chan struct{} {
	q.sigMu.Lock()
	defer q.sigMu.Unlock()
	return q.sig
}

// snapshot returns the entries in order, with their known priorities.
func (q *queue) snapshot() []queued {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := make([]queued, len(q.items))
	for i, it := range q.items {
		out[i] = *it
	}
	return out
}

// setPriority records a fetched message's priority.
func (q *queue) setPriority(id, priority string) {
	q.mu.Lock()
	if it, ok := q.index[id]; ok {
		it.priority = priority
	}
	q.mu.Unlock()
}

// remove takes ids out of the queue, wherever they are.
func (q *queue) remove(ids ...string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	gone := false
	for _, id := range ids {
		if _, ok := q.index[id]; ok {
			delete(q.index, id)
			gone = true
		}
	}
	if !gone {
		return
	}
	kept := q.items[:0]
	for _, it := range q.items {
		if q.index[it.id] == it {
			kept = append(kept, it)
		}
	}
	clear(q.items[len(kept):])
	q.items = kept
}

// takeDropped returns how many entries overflow dropped since it was last
// called, and resets the count.
func (q *queue) takeDropped() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := q.dropped
	q.dropped = 0
	return n
}

func (q *queue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}
