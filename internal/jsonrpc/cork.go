package jsonrpc

import (
	"sync"
	"time"
)

// Adaptive corking of notifications. A notification's cost to the server
// is mostly the write that carries it (and, at the other end, the reads
// that take it): a system call each, whatever the size. When one message
// fans out to many connections many times a second, those calls are most
// of the work, so the server then lets a connection's notifications
// gather for a moment and sends them in one write:
//
//   - The server is busy when at least corkBusy notifications were queued
//     across all its connections within one period (defaultCorkPeriod).
//     It stops being busy after two ticks with fewer.
//   - While it is busy, a notification queued for a connection less than
//     a period after the one before (so the next is likely to come before
//     the tick) waits for the next tick, at most a period away, when every
//     connection with notifications waiting is woken once. A notification
//     that follows its connection's last one by more than a period would
//     gather nothing: it is written at once, as is an isolated push, even
//     a wide one.
//   - A connection with corkUrgent notifications waiting writes at once,
//     so a burst never fills its queue waiting for a tick.
//
// The period is a trade: with one sender waiting for each
// acknowledgement and 100 subscribers, broadcasts come about 1 ms apart,
// and a 2 ms period gathers about two notifications per write (1 ms
// rarely gathers two), for up to 2 ms more latency on such a stream.
//
// A server that is not busy writes every notification at once, as soon
// as its connection's writer runs: a single subscriber's push latency is
// unchanged. Order is unchanged too: a connection has one queue and one
// writer, and a reply still goes out after the notifications queued
// before it.
const (
	defaultCorkPeriod = 2 * time.Millisecond
	corkBusy          = 32
	corkUrgent        = 64
)

// corker decides, for each queued notification, whether its connection's
// writer is woken now or at the next tick, and runs the ticks while the
// server is busy.
type corker struct {
	period time.Duration
	epoch  time.Time // now() counts from here, on the monotonic clock
	// manual, for tests, leaves ticks to the test (tick), instead of a
	// goroutine started when the server becomes busy.
	manual bool

	mu          sync.Mutex
	busy        bool
	windowStart time.Duration // of the window counting toward busy
	count       int           // notifications queued in the window, or since the last tick
	last        int           // notifications queued between the last two ticks
	waiting     []*Conn       // connections to wake at the next tick
}

func newCorker(period time.Duration) *corker {
	return &corker{period: period, epoch: time.Now()}
}

func (k *corker) now() time.Duration { return time.Since(k.epoch) }

// queued is called after a notification was added to c's queue; it wakes
// c's writer unless the notification is to wait for the next tick.
func (k *corker) queued(c *Conn) {
	now := k.now()
	k.mu.Lock()
	k.count++
	gap := now - c.queuedAt
	c.queuedAt = now
	if !k.busy {
		if now-k.windowStart > k.period {
			k.windowStart, k.count = now, 1
		}
		if k.count >= corkBusy {
			k.busy, k.count, k.last = true, 0, k.count
			if !k.manual {
				go k.run()
			}
		}
		k.mu.Unlock()
		c.wakeWriter()
		return
	}
	if c.waiting {
		k.mu.Unlock()
		if len(c.notes) >= c.urgent {
			c.wakeWriter()
		}
		return
	}
	if gap > k.period || len(c.notes) >= c.urgent {
		k.mu.Unlock()
		c.wakeWriter() // nothing to gather, or a queue filling up
		return
	}
	c.waiting = true
	k.waiting = append(k.waiting, c)
	k.mu.Unlock()
}

// run ticks every period while the server stays busy.
func (k *corker) run() {
	t := time.NewTicker(k.period)
	defer t.Stop()
	for range t.C {
		if !k.tick() {
			return
		}
	}
}

// tick wakes the writers of the connections whose notifications waited,
// and reports whether the server is still busy: it stops being busy when
// fewer than corkBusy notifications were queued over the last two ticks
// (two, so that a stream of broadcasts a little slower than the ticks
// does not leave and re-enter the busy state at every one).
func (k *corker) tick() (busy bool) {
	k.mu.Lock()
	wake := k.waiting
	k.waiting = nil
	for _, c := range wake {
		c.waiting = false
	}
	if k.last+k.count < corkBusy {
		k.busy = false
		k.windowStart = k.now()
	}
	k.last, k.count = k.count, 0
	busy = k.busy
	k.mu.Unlock()
	for _, c := range wake {
		c.wakeWriter()
	}
	return busy
}

// wakeWriter makes c's writer write what is queued, without blocking: a
// wake already pending covers this one too.
func (c *Conn) wakeWriter() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}
