package inbox

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/rpc"
)

// Statuses of a Wait.
const (
	StatusReceived     = "message_received"
	StatusAcknowledged = "acknowledged"
	StatusTimeout      = "timeout"
	StatusShutdown     = "shutdown"
)

// ErrWaitInProgress is the error of a Wait while another of the same
// Inbox waits.
var ErrWaitInProgress = errors.New("another wait is already waiting: only one may wait at a time")

// rank is p's place in eventlog.Priorities, lowest first; a priority
// not there ranks lowest. A floor is a rank.
func rank(p string) int { return max(slices.Index(eventlog.Priorities, p), 0) }

// WaitParams say what a Wait waits for.
type WaitParams struct {
	Timeout time.Duration
	// MinPriority is the lowest priority it returns ("" for any); the
	// others stay queued and unread.
	MinPriority string
	// Via is the step that shows what it claims (one of rpc's Via
	// constants).
	Via string
	// Shape frames the message.
	Shape Shape
	// Acks makes an acknowledgement of a message the agent sent with
	// ack_required end the wait too (see WatchAcks).
	Acks bool
	// Tick, if set, is called every TickEvery while it waits.
	Tick      func()
	TickEvery time.Duration
}

// WaitResult is how a Wait ended: with a message it claimed
// (StatusReceived), an acknowledgement (StatusAcknowledged), at its
// timeout (StatusTimeout) or because the Inbox ends (StatusShutdown).
// Overflow is how many pushed messages the queue dropped since the last
// Wait: they are unread, for Check.
type WaitResult struct {
	Status   string
	Message  *Message
	Ack      *Ack
	Overflow int
}

// Wait blocks until a message at or above the floor is claimed, its
// timeout passes, the Inbox ends, or, with Acks, an acknowledgement
// comes. One Wait of an Inbox runs at a time (ErrWaitInProgress). A Wait
// whose ctx ends returns ctx's error and claims nothing; a message claimed
// for it as it left is held for the next call.
//
// While it waits, the daemon holds a standing claim for it
// (message.claimNext): the next message at or above the floor is claimed
// in its own commit and pushed whole, so the wait needs neither a round
// trip nor a second fsync. The claim is cancelled when the wait ends.
func (ib *Inbox) Wait(ctx context.Context, p WaitParams) (*WaitResult, error) {
	floor := rank(p.MinPriority)
	if p.MinPriority != "" && !slices.Contains(eventlog.Priorities, p.MinPriority) {
		return nil, errors.New("inbox: unknown priority " + p.MinPriority)
	}
	ib.mu.Lock()
	if ib.waiting {
		ib.mu.Unlock()
		return nil, ErrWaitInProgress
	}
	ib.waiting = true
	ib.mu.Unlock()
	defer func() {
		ib.mu.Lock()
		ib.waiting = false
		ib.mu.Unlock()
	}()
	res, err := ib.wait(ctx, p, floor)
	ib.mu.Lock()
	if res != nil {
		res.Overflow = ib.queue.takeDropped()
	}
	ib.mu.Unlock()
	return res, err
}

func (ib *Inbox) wait(ctx context.Context, p WaitParams, floor int) (*WaitResult, error) {
	timer := time.NewTimer(p.Timeout)
	defer timer.Stop()
	var ticks <-chan time.Time
	if p.Tick != nil && p.TickEvery > 0 {
		t := time.NewTicker(p.TickEvery)
		defer t.Stop()
		ticks = t.C
	}
	for {
		ib.mu.Lock()
		changed, ending := ib.changed, ib.ending // before looking: a wake after the look ends the select
		ack := p.Acks && len(ib.acks) > 0
		ib.mu.Unlock()
		// An acknowledgement first: it is pushed before the reply that
		// made it is handed over, which the next call then returns.
		if ack {
			ib.disarmLater()
			return &WaitResult{Status: StatusAcknowledged, Ack: ib.takeAck()}, nil
		}
		m, s, err := ib.takeQueued(ctx, floor, p.Via, p.Shape)
		if err != nil || m != nil {
			ib.disarmLater()
			switch {
			case err != nil:
				return nil, err
			case ctx.Err() != nil:
				ib.hold(*s)
				return nil, ctx.Err()
			}
			return &WaitResult{Status: StatusReceived, Message: m}, nil
		}
		if ib.arm(ctx, floor, p.Via) {
			continue // a message may have been queued just before
		}
		select {
		case <-changed:
		case <-ticks:
			p.Tick()
		case <-timer.C:
			return ib.lastLook(ctx, floor, p.Shape, StatusTimeout, DefaultCallTimeout)
		case <-ctx.Done():
			ib.disarmLater() // what it takes meanwhile is held
			return nil, ctx.Err()
		case <-ending:
			// Bounded: the Inbox ends within a second even if the daemon
			// does not answer (a claim it makes later is then lost, as a
			// lost reply is).
			return ib.lastLook(ctx, floor, p.Shape, StatusShutdown, 250*time.Millisecond)
		}
	}
}

// lastLook ends a wait that is not cancelled: the standing claim is
// cancelled (waiting at most within), and a message it took meanwhile is
// the answer, framed in shape.
func (ib *Inbox) lastLook(ctx context.Context, floor int, shape Shape, status string, within time.Duration) (*WaitResult, error) {
	ib.disarm(within)
	if m, _ := ib.unholdOne(ctx, floor, shape); m != nil {
		return &WaitResult{Status: StatusReceived, Message: m}, nil
	}
	return &WaitResult{Status: status}, nil
}

// stopped reports whether a wait should give up without claiming.
func (ib *Inbox) stopped(ctx context.Context) bool {
	ib.mu.Lock()
	ended := ib.ended
	ib.mu.Unlock()
	return ended || ctx.Err() != nil
}

// unholdOne takes the oldest held message at or above floor and returns
// it framed in shape, and as the daemon has it; nil if there is none.
func (ib *Inbox) unholdOne(ctx context.Context, floor int, shape Shape) (*Message, *rpc.MessageSummary) {
	for {
		held := ib.unhold(ctx, 1, floor)
		if len(held) == 0 {
			return nil, nil
		}
		if m, ok := ib.showClaimed(ctx, &held[0], shape); ok {
			return m, &held[0]
		}
	}
}

// takeQueued claims the oldest queued message that passes the floor and
// returns it framed in shape, and as the daemon has it (to hold it, should
// the caller have left); nil if there is none (or the wait was stopped).
// Messages below the floor stay queued, in order; read or deleted ones
// leave.
func (ib *Inbox) takeQueued(ctx context.Context, floor int, via string, shape Shape) (*Message, *rpc.MessageSummary, error) {
	if m, s := ib.unholdOne(ctx, floor, shape); m != nil {
		return m, s, nil
	}
	ib.mu.Lock()
	items := ib.queue.snapshot()
	ib.mu.Unlock()
	for _, it := range items {
		if ib.stopped(ctx) {
			return nil, nil, nil
		}
		if it.priority != "" && rank(it.priority) < floor {
			continue
		}
		if floor == 0 {
			// Every message passes: claim it and get it in one call.
			d, claimed, err := ib.claimOne(ctx, it.id, via)
			if err != nil {
				return nil, nil, err
			}
			if !claimed {
				// Read already, or being claimed by another call: look at
				// it the long way, which drops what is read.
				if m, s, err := ib.takeOne(ctx, it, floor, via, shape); m != nil || err != nil {
					return m, s, err
				}
				continue
			}
			if d == nil || d.Deleted {
				continue // gone or deleted: nothing to return (it is read now)
			}
			s := Summary(d)
			if m, ok := ib.showClaimed(ctx, s, shape); ok {
				return m, s, nil
			}
			continue
		}
		if m, s, err := ib.takeOne(ctx, it, floor, via, shape); m != nil || err != nil {
			return m, s, err
		}
	}
	return nil, nil, nil
}

// takeOne fetches one queued message, and claims and returns it as
// takeQueued does if it passes the floor and is unread; nil if not, or
// the wait was stopped.
func (ib *Inbox) takeOne(ctx context.Context, it queued, floor int, via string, shape Shape) (*Message, *rpc.MessageSummary, error) {
	d, err := ib.get(ctx, it.id)
	if errors.Is(err, rpc.ErrNotFound) {
		ib.dequeue(it.id)
		return nil, nil, nil
	}
	if err != nil {
		if ib.stopped(ctx) {
			return nil, nil, nil
		}
		return nil, nil, err
	}
	ib.mu.Lock()
	ib.queue.setPriority(it.id, d.Priority)
	ib.mu.Unlock()
	if d.Deleted || d.IsRead {
		ib.dequeue(it.id)
		return nil, nil, nil
	}
	if rank(d.Priority) < floor || ib.stopped(ctx) {
		return nil, nil, nil // a stopped wait claims nothing
	}
	s := Summary(d)
	shown, err := ib.Show(ctx, s, nil, shape)
	if err != nil {
		ib.log.Warn("inbox: a message cannot be shown; left unread", "id", it.id, "err", err)
		ib.dequeue(it.id)
		return nil, nil, nil
	}
	claimed, err := ib.claim(ctx, []string{it.id}, via, time.Time{})
	if err != nil || len(claimed) == 0 {
		return nil, nil, err // none: another consumer of the agent took it
	}
	return &shown, s, nil
}

// showClaimed frames a message a claim took before it could be looked
// at: a one-call claim's, a standing claim's, one held for a caller that
// left. One that cannot be shown is read and shown to nobody, as a lost
// reply's is; the log says which.
func (ib *Inbox) showClaimed(ctx context.Context, s *rpc.MessageSummary, shape Shape) (*Message, bool) {
	shown, err := ib.Show(ctx, s, nil, shape)
	if err != nil {
		ib.log.Warn("inbox: a claimed message cannot be shown", "id", s.MessageID, "err", err)
		return nil, false
	}
	return &shown, true
}

// arm arms the daemon's standing claim for the current connection at
// floor, unless it is armed there already, and reports whether it armed
// it now. A failure is logged: the wait goes on without it, woken by
// notification.message.
func (ib *Inbox) arm(ctx context.Context, floor int, via string) bool {
	ib.cancelled(ctx)
	c, err := ib.Conn(ctx)
	if err != nil {
		return false
	}
	ib.mu.Lock()
	if ib.armedOn == c {
		ib.mu.Unlock()
		return false
	}
	// Armed before the call: the claim may fire before its reply comes.
	ib.armedOn, ib.armedOK = c, false
	ib.mu.Unlock()
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultCallTimeout)
	defer cancel()
	if _, err := c.ClaimNext(cctx, &rpc.ClaimNextParams{MinPriority: eventlog.Priorities[floor], Via: via}); err != nil {
		ib.mu.Lock()
		if ib.armedOn == c {
			ib.armedOn = nil
		}
		ib.mu.Unlock()
		ib.log.Debug("inbox: arming a standing claim", "err", err)
		return false
	}
	ib.mu.Lock()
	ib.armedOK = ib.armedOn == c
	ib.mu.Unlock()
	return true
}

// disarm cancels the standing claim, if one is armed, waiting at most
// within for the daemon. The daemon finishes a claim in flight first and
// pushes it before its reply, so once disarm returns in time, whatever the
// claim took is held here.
func (ib *Inbox) disarm(within time.Duration) {
	if c, done := ib.startDisarm(); c != nil {
		ib.cancelClaim(c, within, done)
	}
}

// disarmLater cancels the standing claim without waiting for the daemon:
// a wait that ends with something else to say (its message, or its
// cancellation) returns at once, and what the claim takes meanwhile is
// held for the next call. The next arm waits for the cancel.
func (ib *Inbox) disarmLater() {
	if c, done := ib.startDisarm(); c != nil {
		go ib.cancelClaim(c, DefaultCallTimeout, done)
	}
}

// startDisarm marks the standing claim disarmed and returns its
// connection and the channel to close once the daemon has cancelled it;
// a nil connection if none is armed.
func (ib *Inbox) startDisarm() (*rpc.Client, chan struct{}) {
	ib.mu.Lock()
	defer ib.mu.Unlock()
	c := ib.armedOn
	if c == nil {
		return nil, nil
	}
	ib.cancelling = make(chan struct{})
	ib.armedOn, ib.armedOK = nil, false
	return c, ib.cancelling
}

// cancelClaim asks the daemon to cancel c's standing claim, then closes
// done.
func (ib *Inbox) cancelClaim(c *rpc.Client, within time.Duration, done chan struct{}) {
	defer close(done)
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	if _, err := c.ClaimNext(ctx, &rpc.ClaimNextParams{Cancel: true}); err != nil && !errors.Is(err, rpc.ErrConnClosed) {
		ib.log.Warn("inbox: cancelling a standing claim", "err", err)
	}
}

// cancelled waits for the last cancel of the standing claim to be
// answered, so that it cannot cancel the claim armed next.
func (ib *Inbox) cancelled(ctx context.Context) {
	ib.mu.Lock()
	done := ib.cancelling
	ib.mu.Unlock()
	if done != nil {
		select {
		case <-done:
		case <-ctx.Done():
		}
	}
}

// onClaimed takes a notification.claimed: the standing claim fired. It
// runs on the client's read goroutine, so it only keeps the push; the next
// consuming call holds it (adoptClaimed) and frames it as it hands it out.
func (ib *Inbox) onClaimed(params json.RawMessage) {
	var n rpc.ClaimedNotification
	if err := json.Unmarshal(params, &n); err != nil || n.MessageID == "" {
		ib.log.Warn("inbox: bad claimed notification", "err", err)
		return
	}
	ib.mu.Lock()
	defer ib.mu.Unlock()
	ib.armedOn = nil // a standing claim fires once
	if n.Message != nil {
		if t, err := time.Parse(time.RFC3339Nano, n.Message.CreatedAt); err == nil {
			ib.advanceLocked(t)
		}
	}
	ib.queue.remove(n.MessageID)
	ib.claimed = append(ib.claimed, n)
	ib.wakeLocked()
}

// adoptClaimed makes what standing claims took into held messages, in
// order, unframed: the call that hands one out frames it as its caller
// asked. A message deleted meanwhile is dropped (it is read).
func (ib *Inbox) adoptClaimed(ctx context.Context) {
	ctx = context.WithoutCancel(ctx) // what was claimed must reach a caller
	ib.mu.Lock()
	got := ib.claimed
	ib.claimed = nil
	ib.mu.Unlock()
	var ss []rpc.MessageSummary
	for _, n := range got {
		m := n.Message
		if m == nil { // not fetched with the claim: fetch it now
			var err error
			if m, err = ib.get(ctx, n.MessageID); err != nil {
				ib.log.Warn("inbox: fetching a claimed message", "id", n.MessageID, "err", err)
				continue
			}
		}
		if !m.Deleted {
			ss = append(ss, *Summary(m))
		}
	}
	ib.mu.Lock()
	defer ib.mu.Unlock()
	ib.held = append(ib.held, ss...)
	if len(ss) > 0 {
		ib.wakeLocked()
	}
}
