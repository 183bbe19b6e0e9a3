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

// CheckResult is what Check claimed, oldest first, and how many unread
// messages are left.
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
	out := &CheckResult{Messages: ib.unhold(ctx, p.Limit, 0)}
	if len(out.Messages) == p.Limit {
		return out, nil
	}
	pre := ctx // what comes before the claim ends by its deadline
	if !p.Deadline.IsZero() {
		var cancel context.CancelFunc
		pre, cancel = context.WithDeadline(ctx, p.Deadline)
		defer cancel()
	}
	r, err := call(pre, ib, func(ctx context.Context, c *rpc.Client) (*rpc.ListMessagesResult, error) {
		return c.ListMessages(ctx, &rpc.ListMessagesParams{Mentions: true, Unread: true, PageSize: p.Limit - len(out.Messages), SortOrder: "asc"})
	})
	if err != nil {
		return ib.heldOr(out, err)
	}
	// Framed before the claim: only what can be shown is claimed.
	o := p.Shape.options()
	used, bytes := 0, 0
	for _, m := range out.Messages {
		used += o.Len(m.Content) + 1
		bytes += jsonLen(m)
	}
	var ids []string
	shown := map[string]Message{}
	for i := range r.Messages {
		m, err := ib.Show(pre, &r.Messages[i], nil, p.Shape)
		if err != nil {
			ib.log.Warn("inbox: a message cannot be shown; left unread", "id", r.Messages[i].MessageID, "err", err)
			continue
		}
		n, b := o.Len(m.Content)+1, jsonLen(m)
		if (p.TotalMax > 0 && used+n > p.TotalMax) || (p.ResultMax > 0 && bytes > 0 && bytes+b > p.ResultMax) {
			break
		}
		used, bytes = used+n, bytes+b
		id := r.Messages[i].MessageID // as the daemon knows it: m's is escaped
		ids = append(ids, id)
		shown[id] = m
	}
	if err := pre.Err(); err != nil {
		return ib.heldOr(out, err) // too late to claim
	}
	var claimed []string
	if len(ids) > 0 {
		if claimed, err = ib.claim(ctx, ids, p.Via, p.Deadline); err != nil {
			return ib.heldOr(out, err)
		}
	}
	for _, id := range ids { // in the listed order: oldest first
		if slices.Contains(claimed, id) {
			out.Messages = append(out.Messages, shown[id])
		}
	}
	if ctx.Err() != nil {
		// The caller is gone: what this call claimed goes to the next one.
		ib.hold(out.Messages...)
		return nil, ctx.Err()
	}
	// Those listed and not claimed were taken by another consumer: no
	// longer unread.
	out.Remaining = max(r.Total-len(ids), 0)
	return out, nil
}

// jsonLen is the length of m as JSON, with the comma after it.
func jsonLen(m Message) int {
	b, _ := json.Marshal(m)
	return len(b) + 1
}

// heldOr returns the held messages Check took already, rather than lose
// them to err; err if there are none.
func (ib *Inbox) heldOr(out *CheckResult, err error) (*CheckResult, error) {
	if len(out.Messages) == 0 {
		return nil, err
	}
	ib.log.Warn("inbox: check returns held messages only", "err", err)
	return out, nil
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
		r, err := call(ctx, ib, func(ctx context.Context, c *rpc.Client) (*rpc.MarkReadResult, error) {
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
	r, err := call(ctx, ib, func(ctx context.Context, c *rpc.Client) (*rpc.MarkReadResult, error) {
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
	g, err := call(ctx, ib, func(ctx context.Context, c *rpc.Client) (*rpc.GetMessageResult, error) {
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

// hold keeps claimed messages for the next consuming call.
func (ib *Inbox) hold(ms ...Message) {
	if len(ms) == 0 {
		return
	}
	ib.mu.Lock()
	defer ib.mu.Unlock()
	ib.held = append(ib.held, ms...)
	ib.wakeLocked()
}

// unhold takes up to n held messages at or above floor, oldest first,
// after making what standing claims took into held messages.
func (ib *Inbox) unhold(ctx context.Context, n, floor int) []Message {
	ib.adoptClaimed(ctx)
	ib.mu.Lock()
	defer ib.mu.Unlock()
	var out []Message
	ib.held = slices.DeleteFunc(ib.held, func(m Message) bool {
		if len(out) < n && priorities[m.Priority] >= floor {
			out = append(out, m)
			return true
		}
		return false
	})
	return out
}
