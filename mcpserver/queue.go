package mcpserver

import (
	"sync"

	"github.com/thrumhq/thrum/rpc"
)

// queue holds notifications until wait_for_message takes them: bounded,
// first in first out, dropping the oldest when full.
type queue struct {
	mu      sync.Mutex
	items   []*rpc.MessageNotification
	max     int
	dropped int
	signal  chan struct{} // receives a token when something may be new
	closed  bool
}

func (q *queue) init(max int) {
	q.max = max
	q.signal = make(chan struct{}, 1)
}

func (q *queue) push(n *rpc.MessageNotification) {
	q.mu.Lock()
	if len(q.items) >= q.max {
		q.items = q.items[1:]
		q.dropped++
	}
	q.items = append(q.items, n)
	q.mu.Unlock()
	q.wake()
}

// pushMissing appends those of ns not queued already, as push does, and
// returns how many it added.
func (q *queue) pushMissing(ns []*rpc.MessageNotification) int {
	q.mu.Lock()
	queued := make(map[string]bool, len(q.items))
	for _, n := range q.items {
		queued[n.MessageID] = true
	}
	added := 0
	for _, n := range ns {
		if queued[n.MessageID] {
			continue
		}
		if len(q.items) >= q.max {
			q.items = q.items[1:]
			q.dropped++
		}
		q.items = append(q.items, n)
		added++
	}
	q.mu.Unlock()
	if added > 0 {
		q.wake()
	}
	return added
}

// wake tells a waiter to look again.
func (q *queue) wake() {
	select {
	case q.signal <- struct{}{}:
	default:
	}
}

// pop takes the oldest notification, if any.
func (q *queue) pop() (*rpc.MessageNotification, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) == 0 {
		return nil, false
	}
	n := q.items[0]
	q.items[0] = nil
	q.items = q.items[1:]
	return n, true
}

func (q *queue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}

func (q *queue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.wake()
}
