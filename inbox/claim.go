package inbox

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/thrumhq/thrum/rpc"
)

// Claims. A claim is message.markRead: it marks messages read for the
// agent and returns those this call took, and the daemon gives each
// message to exactly one claim of the agent. A claim runs to its end even
// if its caller's ctx ends meanwhile, since a claim made must reach a
// caller: what a caller that left could not take is held, and the next
// Check or Wait returns it first. A claim whose reply is lost (the
// connection drops after the read is written) is read and returned to
// nobody (DESIGN.md, "Delivery to agents").

// CheckParams say what Check claims.
type CheckParams struct {
	// Limit is how many messages it claims at most (at least 1).
	Limit int
	// Via is the step that shows what it claims, for the receipts (one
	// of rpc's Via constants).
	Via string
	// Shape frames each message.
	Shape Shape
	// TotalMax, if set, bounds the frames together, in UTF-16 units as
	// Shape's host counts them: messages that would not fit are not
	// claimed.
	TotalMax int
	// ResultMax, if set, bounds the messages as JSON together, in bytes,
	// for a tool result a host cuts past a size: messages that would not
	// fit are not claimed (the first always is).
	ResultMax int
	// Deadline, if set, binds the claim to a caller that cannot wait
	// long (a hook): the daemon refuses a claim it could not queue for
	// writing by then (rpc.ErrDeadlinePassed: nothing is claimed), and
	// the answer is awaited only while Check's ctx lasts — which should
	// outlast Deadline by the time a write may take, since what is
	// claimed when ctx ends is lost with its caller.
	Deadline time.Time
}

// CheckResult is what Check claimed, oldest first, and how many messages
// are left for the next call: those held for it and, when Check listed the
// unread ones, those it did not claim.
type CheckResult struct {
	Messages  []Message
	Remaining int
}

// Check claims the agent's oldest unread messages — first what a claim
// of this Inbox took for a caller that left — and returns them framed. A
// message that cannot be shown is not claimed: it stays unread, and the
// others are shown.
// If ctx ends while the claim is made, what it took is held for the next
// call and Check returns ctx's error.
func (ib *Inbox) Check(ctx context.Context, p CheckParams) (*CheckResult, error) {
	out := &CheckResult{}
	var took []rpc.MessageSummary // out.Messages as the daemon has them
	o := p.Shape.options()
	used, bytes := 0, 0
	// fits reports whether m fits in p's limits beside out.Messages, and
	// counts it if it does; first lets it through regardless.
	fits := func(m Message, first bool) bool {
		n, b := o.Len(m.Content)+1, jsonLen(m)
		if !first && ((p.TotalMax > 0 && used+n > p.TotalMax) || (p.ResultMax > 0 && bytes > 0 && bytes+b > p.ResultMax)) {
			return false
		}
		used, bytes = used+n, bytes+b
		return true
	}
	// What is held is read already: the first of it is shown even past
	// the limits, lest it be held for ever; what does not fit is held
	// again, ahead of the rest.
	held, full := ib.unhold(ctx, p.Limit, 0), false
	for i := range held {
		m, ok := ib.showClaimed(ctx, &held[i], p.Shape)
		if !ok {
			continue
		}
		if full = !fits(*m, len(out.Messages) == 0); full {
			ib.hold(held[i:]...)
			break
		}
		out.Messages, took = append(out.Messages, *m), append(took, held[i])
	}
	if full || len(out.Messages) == p.Limit {
		ib.mu.Lock()
		remaining := len(ib.held)
		ib.mu.Unlock()
		return ib.handOut(ctx, out, took, remaining)
	}
	pre := ctx // what comes before the claim ends by its deadline
	if !p.Deadline.IsZero() {
		var cancel context.CancelFunc
		pre, cancel = context.WithDeadline(ctx, p.Deadline)
		defer cancel()
	}
	r, err := Call(pre, ib, func(ctx context.Context, c *rpc.Client) (*rpc.ListMessagesResult, error) {
		return c.ListMessages(ctx, &rpc.ListMessagesParams{Mentions: true, Unread: true, PageSize: p.Limit - len(out.Messages), SortOrder: "asc"})
	})
	if err != nil {
		return ib.heldOr(ctx, out, took, err)
	}
	// Framed before the claim: only what can be shown is claimed.
	var ids []string
	shown := map[string]int{} // ID as the daemon knows it (m's is escaped) → its place in r.Messages
	frames := make([]Message, len(r.Messages))
	for i := range r.Messages {
		m, err := ib.Show(pre, &r.Messages[i], nil, p.Shape)
		if err != nil {
			ib.log.Warn("inbox: a message cannot be shown; left unread", "id", r.Messages[i].MessageID, "err", err)
			continue
		}
		if !fits(m, false) {
			break
		}
		id := r.Messages[i].MessageID
		ids = append(ids, id)
		shown[id], frames[i] = i, m
	}
	if err := pre.Err(); err != nil {
		return ib.heldOr(ctx, out, took, err) // too late to claim
	}
	var claimed []string
	if len(ids) > 0 {
		if claimed, err = ib.claim(ctx, ids, p.Via, p.Deadline); err != nil {
			return ib.heldOr(ctx, out, took, err)
		}
	}
	for _, id := range ids { // in the listed order: oldest first
		if slices.Contains(claimed, id) {
			i := shown[id]
			out.Messages, took = append(out.Messages, frames[i]), append(took, r.Messages[i])
		}
	}
	// Those listed and not claimed were taken by another consumer: no
	// longer unread.
	return ib.handOut(ctx, out, took, max(r.Total-len(ids), 0))
}

// jsonLen is the length of m as JSON, with the comma after it.
func jsonLen(m Message) int {
	b, _ := json.Marshal(m)
	return len(b) + 1
}

// handOut returns out, which shows took, with remaining; if the caller is
// gone, what Check took is held for the next call instead.
func (ib *Inbox) handOut(ctx context.Context, out *CheckResult, took []rpc.MessageSummary, remaining int) (*CheckResult, error) {
	if ctx.Err() != nil {
		ib.hold(took...)
		return nil, ctx.Err()
	}
	out.Remaining = remaining
	return out, nil
}

// heldOr returns the held messages Check took already, rather than lose
// them to err; err if there are none.
func (ib *Inbox) heldOr(ctx context.Context, out *CheckResult, took []rpc.MessageSummary, err error) (*CheckResult, error) {
	if len(out.Messages) == 0 {
		return nil, err
	}
	ib.log.Warn("inbox: check returns held messages only", "err", err)
	return ib.handOut(ctx, out, took, 0)
}

// claim marks ids read for the agent and returns those this call
// claimed. A message that vanished meanwhile (an unknown ID) is left out.
func (ib *Inbox) claim(ctx context.Context, ids []string, via string, deadline time.Time) ([]string, error) {
	p := &rpc.MarkReadParams{MessageIDs: ids, Via: via}
	if deadline.IsZero() {
		ctx = context.WithoutCancel(ctx) // a claim made must reach its caller
	} else {
		// The caller waits for the answer while ctx lasts, and the daemon
		// claims nothing it could not queue by the deadline.
		p.Deadline = deadline.Format(time.RFC3339Nano)
	}
	for len(p.MessageIDs) > 0 {
		r, err := Call(ctx, ib, func(ctx context.Context, c *rpc.Client) (*rpc.MarkReadResult, error) {
			return c.MarkRead(ctx, p)
		})
		if err == nil {
			ib.dequeue(r.MarkedIDs...)
			return r.MarkedIDs, nil
		}
		gone := unknownIDs(err)
		if len(gone) == 0 {
			return nil, err
		}
		ib.dequeue(gone...)
		p.MessageIDs = slices.DeleteFunc(slices.Clone(p.MessageIDs), func(id string) bool { return slices.Contains(gone, id) })
	}
	return nil, nil
}

// claimOne claims one message and returns it as the claim found it: one
// round trip where fetching it first would take two. m is nil if the
// message is gone; claimed is false if this call did not claim it (it is
// read, or another call is claiming it). An error after the claim leaves
// the message read and returned to nobody, as a lost reply does.
func (ib *Inbox) claimOne(ctx context.Context, id, via string) (m *rpc.MessageDetail, claimed bool, err error) {
	ctx = context.WithoutCancel(ctx)
	r, err := Call(ctx, ib, func(ctx context.Context, c *rpc.Client) (*rpc.MarkReadResult, error) {
		return c.MarkRead(ctx, &rpc.MarkReadParams{MessageIDs: []string{id}, WithMessages: true, Via: via})
	})
	if len(unknownIDs(err)) > 0 {
		ib.dequeue(id)
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	ib.dequeue(r.MarkedIDs...)
	if len(r.MarkedIDs) == 0 {
		return nil, false, nil
	}
	for i := range r.Messages {
		if r.Messages[i].MessageID == id {
			return &r.Messages[i], true, nil
		}
	}
	// Claimed, but the daemon could not fetch it with the claim.
	m, err = ib.get(ctx, id)
	if errors.Is(err, rpc.ErrNotFound) {
		return nil, true, nil
	}
	return m, true, err
}

// get fetches one message.
func (ib *Inbox) get(ctx context.Context, id string) (*rpc.MessageDetail, error) {
	g, err := Call(ctx, ib, func(ctx context.Context, c *rpc.Client) (*rpc.GetMessageResult, error) {
		return c.GetMessage(ctx, &rpc.GetMessageParams{MessageID: id})
	})
	if err != nil {
		return nil, err
	}
	return &g.Message, nil
}

// unknownIDs returns the IDs a message.markRead error names as unknown.
func unknownIDs(err error) []string {
	var re *rpc.Error
	if !errors.As(err, &re) || re.Code != rpc.CodeNotFound {
		return nil
	}
	d, ok := re.Data.(map[string]any)
	if !ok {
		return nil
	}
	var out []string
	switch v := d["unknown_ids"].(type) {
	case []string:
		out = v
	case []any:
		for _, x := range v {
			if s, ok := x.(string); ok {
				out = append(out, s)
			}
		}
	}
	return out
}

// dequeue takes ids out of the queue.
func (ib *Inbox) dequeue(ids ...string) {
	ib.mu.Lock()
	ib.queue.remove(ids...)
	ib.mu.Unlock()
}

// hold keeps claimed messages that a call could not hand out for the
// next consuming call, ahead of those held already: they were taken first.
func (ib *Inbox) hold(ss ...rpc.MessageSummary) {
	if len(ss) == 0 {
		return
	}
	ib.mu.Lock()
	defer ib.mu.Unlock()
	ib.held = append(slices.Clone(ss), ib.held...)
	ib.wakeLocked()
}

// unhold takes up to n held messages at or above floor, oldest first,
// after making what standing claims took into held messages.
func (ib *Inbox) unhold(ctx context.Context, n, floor int) []rpc.MessageSummary {
	ib.adoptClaimed(ctx)
	ib.mu.Lock()
	defer ib.mu.Unlock()
	var out []rpc.MessageSummary
	ib.held = slices.DeleteFunc(ib.held, func(m rpc.MessageSummary) bool {
		if len(out) < n && rank(m.Priority) >= floor {
			out = append(out, m)
			return true
		}
		return false
	})
	return out
}
