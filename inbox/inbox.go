// Package inbox is the agent side of delivery: one agent's connection to
// thrum, the queue of messages pushed to it, the claims that hand a
// message to the agent, and the doorbells that only announce one. Its
// faces call it: mcpserver's tools, `thrum wait` and `thrum hook`.
//
// Delivered means a model saw it (DESIGN.md, "Reaching agents in their
// hosts"). A claim marks a message read for the agent and records how it
// reached it; the daemon gives each message to exactly one claim of the
// agent, across every connection and process. Only a step whose result
// goes before the agent's model claims: a tool result (Check, Wait) or a
// hook's context (Check with a deadline). A channel event or a monitor's
// line may be dropped by its host, so those ring a doorbell (Doorbells):
// who sent what, and how many wait, claiming nothing; the agent's next
// tool call or context hook claims.
//
// An Inbox holds one persistent rpc.Client — a daemon's Unix socket, or an
// in-process pipe to an embedded node (thrum.Node.Dial) — for calls and
// for push notifications: a Wait is woken by a subscription on it, not by
// polling. If the connection drops, the Inbox redials, re-authenticates,
// resubscribes and queues what was sent to the agent meanwhile; every
// operation waits a bounded time for a connection rather than fail at
// once, so a daemon that restarts is not noticed by the agent.
//
// Its methods may be called concurrently. Its state is under one mutex,
// which is a leaf: it is never held across a call to the daemon or to a
// caller's function, and no other lock is taken under it.
package inbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/thrumhq/thrum/rpc"
)

// Defaults of Options, and bounds.
const (
	DefaultQueueSize   = 1000
	DefaultCallTimeout = 30 * time.Second
	// ReconnectWait is how long an operation waits for a connection that
	// is being re-established before it fails with ErrUnreachable.
	ReconnectWait = 5 * time.Second
)

// ErrUnreachable is the error of an operation that found no connection
// to thrum within ReconnectWait.
var ErrUnreachable = errors.New("the thrum daemon is not reachable")

// Dialer opens a connection to thrum whose notifications go to onNote.
// rpc.Dial to a daemon's socket and thrum.Node.Dial both fit.
type Dialer func(ctx context.Context, onNote func(method string, params json.RawMessage)) (*rpc.Client, error)

// Identity is the agent an Inbox acts as.
type Identity struct {
	AgentID string
	Role    string
	// Token authenticates the agent; required over a WebSocket, optional on
	// a Unix socket or pipe.
	Token string
}

// Options configure an Inbox. A nil *Options means all defaults.
type Options struct {
	// Logger receives warnings. Nil means silent.
	Logger *slog.Logger
	// QueueSize bounds the pushed messages waiting for a Wait; the
	// oldest is dropped when full (it stays unread in the daemon, where
	// Check finds it). Default DefaultQueueSize.
	QueueSize int
	// Lazy makes New return without a connection: its loop makes the
	// first one as it makes every other, with backoff, and queues what
	// was sent meanwhile. Until then each operation fails after
	// ReconnectWait with ErrUnreachable and the last connect's error. For
	// a server that must stay up while no daemon runs, or before one
	// knows the agent.
	Lazy bool
	// NoPush makes the Inbox subscribe to no pushes of the messages sent
	// to the agent: for a caller that claims or counts once and leaves (a
	// hook), whom a subscription would cost a round trip and the daemon a
	// listener. A Wait then gets only what its standing claim takes, and
	// Doorbells rings at its start only.
	NoPush bool
}

// Inbox is one agent's side of delivery. Its methods may be called
// concurrently.
type Inbox struct {
	id   Identity
	dial Dialer
	opts Options
	log  *slog.Logger

	stop     chan struct{} // closed by Close: the connection loop ends
	loopDone chan struct{} // closed when it has

	// mu guards everything below. It is a leaf: never held across a call
	// to the daemon, a caller's function or another lock.
	mu sync.Mutex

	client *rpc.Client   // the current connection; nil while reconnecting
	ready  chan struct{} // closed when client is set; replaced when it is lost
	closed bool
	// since is how far the pushes are known complete: every message
	// addressed to the agent created up to it was pushed. A reconnect
	// re-reads what came after it.
	since time.Time
	// lastErr is why the last connect failed; nil once one succeeded.
	lastErr error

	queue queue
	// changed is closed, and replaced, when something a waiter looks at
	// may be new: a push, a claim, an acknowledgement, a reconnect.
	changed chan struct{}

	ending chan struct{} // closed by End
	ended  bool

	waiting bool        // a Wait holds the single-waiter slot
	armedOn *rpc.Client // the connection whose standing claim a Wait armed
	armedOK bool        // and the daemon answered that it is armed
	// cancelling is closed once the daemon answered the last cancel of
	// the standing claim: the next arm waits for it.
	cancelling chan struct{}
	// held keeps what a claim took but could not return (its caller
	// left as it was made, or it was a standing claim's): the next Check
	// or Wait returns it first, framed as that call's caller asks.
	held []rpc.MessageSummary
	// claimed are the standing claim's pushes not yet made into held.
	claimed []rpc.ClaimedNotification

	wantAcks bool        // the agent's receipts were asked for
	acksOn   *rpc.Client // the connection subscribed to them
	acks     []Ack

	roster roster
}

// New connects to thrum through dial, authenticates as id and, unless
// NoPush, subscribes to every message addressed to it (by name, role,
// group or @everyone).
// The Inbox keeps the connection until Close.
func New(ctx context.Context, dial Dialer, id Identity, opts *Options) (*Inbox, error) {
	if id.AgentID == "" {
		return nil, errors.New("inbox: identity has no agent ID")
	}
	ib := &Inbox{id: id, dial: dial, stop: make(chan struct{}), loopDone: make(chan struct{}),
		ready: make(chan struct{}), changed: make(chan struct{}), ending: make(chan struct{})}
	if opts != nil {
		ib.opts = *opts
	}
	if ib.opts.QueueSize <= 0 {
		ib.opts.QueueSize = DefaultQueueSize
	}
	ib.log = ib.opts.Logger
	if ib.log == nil {
		ib.log = slog.New(slog.DiscardHandler)
	}
	ib.queue.init(ib.opts.QueueSize)
	if ib.opts.Lazy {
		ib.since = time.Now()
		go ib.keep(nil)
		return ib, nil
	}
	// The first connection is made here, so that a caller learns at once
	// that the daemon or the identity is wrong.
	c, subAt, err := ib.connect(ctx)
	if err != nil {
		return nil, err
	}
	ib.connected(c, subAt)
	go ib.keep(c)
	return ib, nil
}

// ID returns the agent the Inbox acts as.
func (ib *Inbox) ID() Identity { return ib.id }

// Close ends the connection and stops reconnecting; pending and later
// waits end as with End. It is idempotent.
func (ib *Inbox) Close() error {
	ib.mu.Lock()
	if ib.closed {
		ib.mu.Unlock()
		return nil
	}
	ib.closed = true
	c := ib.client
	close(ib.stop)
	ib.mu.Unlock()
	ib.End()
	if c != nil {
		c.Close()
	}
	<-ib.loopDone
	ib.cancelled(context.Background()) // a cancel in flight ends with the connection
	return nil
}

// End answers a pending Wait, and every later one, with StatusShutdown
// and no message (they claim nothing), and ends Doorbells. It is
// idempotent.
func (ib *Inbox) End() {
	ib.mu.Lock()
	defer ib.mu.Unlock()
	if !ib.ended {
		ib.ended = true
		close(ib.ending)
	}
}

// Conn returns the current connection, waiting up to ReconnectWait for
// one being re-established: for calls that are not delivery (a send, a
// listing). The connection may drop at any time; a call on it then fails
// with rpc.ErrConnClosed.
func (ib *Inbox) Conn(ctx context.Context) (*rpc.Client, error) {
	t := time.NewTimer(ReconnectWait)
	defer t.Stop()
	for {
		ib.mu.Lock()
		c, ready, closed := ib.client, ib.ready, ib.closed
		if c != nil {
			select {
			case <-c.Done():
				// Dropped, and the loop has not noticed yet: wait for it
				// rather than hand out a dead connection.
				ib.lostLocked(c)
				c, ready = nil, ib.ready
			default:
			}
		}
		ib.mu.Unlock()
		switch {
		case closed:
			return nil, fmt.Errorf("%w: the agent's inbox is shutting down", ErrUnreachable)
		case c != nil:
			return c, nil
		}
		select {
		case <-ready:
		case <-t.C:
			ib.mu.Lock()
			lastErr := ib.lastErr
			ib.mu.Unlock()
			if lastErr != nil {
				return nil, fmt.Errorf("%w: %w", ErrUnreachable, lastErr)
			}
			return nil, ErrUnreachable
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Call runs f, one call, on ib's current connection (see Conn), bounded
// by DefaultCallTimeout.
func Call[R any](ctx context.Context, ib *Inbox, f func(context.Context, *rpc.Client) (*R, error)) (*R, error) {
	c, err := ib.Conn(ctx)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, DefaultCallTimeout)
	defer cancel()
	return f(ctx, c)
}

// connect dials, authenticates and subscribes (unless NoPush). subAt is
// a time before the subscription began: messages created after it are
// pushed.
func (ib *Inbox) connect(ctx context.Context) (_ *rpc.Client, subAt time.Time, _ error) {
	c, err := ib.dial(ctx, ib.onNote)
	if err != nil {
		return nil, subAt, fmt.Errorf("inbox: connect to thrum: %w", err)
	}
	if _, err := c.Auth(ctx, &rpc.AuthParams{AgentID: ib.id.AgentID, Token: ib.id.Token}); err != nil {
		c.Close()
		return nil, subAt, fmt.Errorf("inbox: authenticate as %s: %w", ib.id.AgentID, err)
	}
	subAt = time.Now()
	if !ib.opts.NoPush {
		if _, err := c.Subscribe(ctx, &rpc.SubscribeParams{MentionRole: ib.id.AgentID}); err != nil {
			c.Close()
			return nil, subAt, fmt.Errorf("inbox: subscribe: %w", err)
		}
	}
	if err := ib.subscribeAcks(ctx, c); err != nil {
		ib.log.Warn("inbox: subscribing to acknowledgements", "err", err)
	}
	return c, subAt, nil
}

// connected makes c the connection, complete since subAt.
func (ib *Inbox) connected(c *rpc.Client, subAt time.Time) {
	ib.mu.Lock()
	defer ib.mu.Unlock()
	ib.client, ib.lastErr = c, nil
	close(ib.ready)
	ib.advanceLocked(subAt)
	ib.wakeLocked() // a waiter may have missed pushes: it looks again
}

// lostLocked forgets c, if it is the connection, until the next one.
func (ib *Inbox) lostLocked(c *rpc.Client) {
	if ib.client == c {
		ib.client, ib.ready = nil, make(chan struct{})
	}
}

// keep watches the connection and replaces it when it drops, with
// backoff, until Close; with c nil it makes the first.
func (ib *Inbox) keep(c *rpc.Client) {
	defer close(ib.loopDone)
	for {
		if c != nil {
			select {
			case <-ib.stop:
				return
			case <-c.Done():
			}
			ib.log.Warn("inbox: lost the thrum connection; reconnecting", "err", c.Err())
		}
		ib.mu.Lock()
		if c != nil {
			ib.lostLocked(c)
		}
		cutoff := ib.since
		ib.mu.Unlock()
		if c = ib.reconnect(cutoff); c == nil {
			return
		}
		ib.log.Info("inbox: connected to thrum")
	}
}

// reconnect connects again, with backoff, and queues what was sent after
// cutoff; nil once the Inbox is closed.
func (ib *Inbox) reconnect(cutoff time.Time) *rpc.Client {
	backoff := 50 * time.Millisecond
	for {
		ctx, cancel := context.WithTimeout(context.Background(), ReconnectWait)
		c, subAt, err := ib.connect(ctx)
		if err == nil {
			ib.catchUp(ctx, c, cutoff)
		}
		cancel()
		if err == nil {
			ib.connected(c, subAt)
			return c
		}
		ib.log.Debug("inbox: reconnect failed", "err", err)
		ib.mu.Lock()
		ib.lastErr = err
		ib.mu.Unlock()
		select {
		case <-ib.stop:
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// catchUp queues what was sent while the Inbox was disconnected: the
// unread messages addressed to the agent created after cutoff, oldest
// first, at most a queue's worth. Notifications are not replayed, so a
// Wait would never see them otherwise.
func (ib *Inbox) catchUp(ctx context.Context, c *rpc.Client, cutoff time.Time) {
	const pageSize = 100
	var missed []string
	for page := 1; len(missed) < ib.opts.QueueSize; page++ {
		r, err := c.ListMessages(ctx, &rpc.ListMessagesParams{Mentions: true, Unread: true, PageSize: pageSize, Page: page, SortOrder: "desc"})
		if err != nil {
			ib.log.Warn("inbox: re-read messages missed while disconnected", "err", err)
			break
		}
		done := len(r.Messages) < pageSize
		for _, m := range r.Messages {
			if t, err := time.Parse(time.RFC3339Nano, m.CreatedAt); err == nil && !t.After(cutoff) {
				done = true
				break
			}
			missed = append(missed, m.MessageID)
		}
		if done {
			break
		}
	}
	missed = missed[:min(len(missed), ib.opts.QueueSize)]
	slices.Reverse(missed)
	ib.mu.Lock()
	n := ib.queue.pushAll(missed)
	ib.wakeLocked()
	ib.mu.Unlock()
	if n > 0 {
		ib.log.Info("inbox: queued messages sent while disconnected", "count", n)
	}
}

// advanceLocked moves since forward to t.
func (ib *Inbox) advanceLocked(t time.Time) {
	if t.After(ib.since) {
		ib.since = t
	}
}

// wakeLocked tells every waiter to look again.
func (ib *Inbox) wakeLocked() {
	close(ib.changed)
	ib.changed = make(chan struct{})
}

// onNote takes the connection's pushes. It runs on the client's read
// goroutine and never blocks.
func (ib *Inbox) onNote(method string, params json.RawMessage) {
	switch method {
	case rpc.NotificationMessage:
		var n rpc.MessageNotification
		if err := json.Unmarshal(params, &n); err != nil {
			ib.log.Warn("inbox: bad notification", "err", err)
			return
		}
		ib.mu.Lock()
		defer ib.mu.Unlock()
		if ib.queue.push(n.MessageID) {
			ib.wakeLocked()
		}
		if t, err := time.Parse(time.RFC3339Nano, n.Timestamp); err == nil {
			ib.advanceLocked(t)
		}
	case rpc.NotificationClaimed:
		ib.onClaimed(params)
	case rpc.NotificationReceipt:
		ib.onReceipt(params)
	}
}

// Stats is a snapshot of an Inbox, for diagnostics and tests.
type Stats struct {
	Queued  []string // pushed messages waiting for a Wait, oldest first
	Dropped int      // pushes the full queue dropped since the last Wait
	Held    int      // claimed messages waiting for the next Check or Wait
	Waiting bool     // a Wait is in progress
	Armed   bool     // its standing claim is armed in the daemon
}

// Stats returns the Inbox's state now.
func (ib *Inbox) Stats() Stats {
	ib.mu.Lock()
	defer ib.mu.Unlock()
	st := Stats{Dropped: ib.queue.dropped, Held: len(ib.held) + len(ib.claimed), Waiting: ib.waiting,
		Armed: ib.armedOn != nil && ib.armedOK}
	for _, it := range ib.queue.items {
		st.Queued = append(st.Queued, it.id)
	}
	return st
}
