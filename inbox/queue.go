package inbox

// queue holds the IDs of messages pushed to the agent until a claim takes
// them: bounded, in arrival order, each message once (an edit pushes it
// again; it keeps its place). When full, the oldest entry is dropped and
// counted: the message stays unread in the daemon, where Check finds it,
// and the next Wait reports the count.
//
// An entry leaves when it is claimed (by any consumer of the Inbox), found
// read or deleted, or dropped. A filtered Wait skips entries below its
// floor and leaves them in place. Its methods are called under Inbox.mu.
type queue struct {
	items   []*queued
	index   map[string]*queued
	max     int
	dropped int // entries dropped since the last takeDropped
}

// queued is one entry. priority is "" until the message was fetched.
type queued struct {
	id       string
	priority string
}

func (q *queue) init(max int) {
	q.max = max
	q.index = map[string]*queued{}
}

// push appends id unless it is queued already, and reports whether it
// added it.
func (q *queue) push(id string) bool {
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

// pushAll appends those of ids not queued already, in order, and returns
// how many it added.
func (q *queue) pushAll(ids []string) int {
	n := 0
	for _, id := range ids {
		if q.push(id) {
			n++
		}
	}
	return n
}

// snapshot returns the entries in order, with their known priorities.
func (q *queue) snapshot() []queued {
	out := make([]queued, len(q.items))
	for i, it := range q.items {
		out[i] = *it
	}
	return out
}

// setPriority records a fetched message's priority.
func (q *queue) setPriority(id, priority string) {
	if it, ok := q.index[id]; ok {
		it.priority = priority
	}
}

// remove takes ids out of the queue, wherever they are.
func (q *queue) remove(ids ...string) {
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
	n := q.dropped
	q.dropped = 0
	return n
}
