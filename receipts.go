package thrum

import (
	"context"
	"slices"
	"sort"
	"time"

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/rpc"
	"github.com/thrumhq/thrum/store"
)

// Receipts (DESIGN.md, "Receipts"). A message records the agents its
// mentions reached at send (eventlog.MessageCreate.Recipients, never its
// author); for each of them it is queued until a read delivers it (the
// message.read event says by which path), and acknowledged by a
// message.ack or a reply of that agent. All of it is in the log, in the
// shard of whoever acted, so it syncs and survives a rebuild; the
// projection keeps the earliest delivery and the first acknowledgement.

// maxAckNote bounds the note of an acknowledgement.
const maxAckNote = 500

// ackWithin validates a send's request for an acknowledgement and returns
// whether one is asked and the time given for it ("" for none), as the
// message.create event keeps it.
func ackWithin(p *rpc.SendMessageParams) (bool, string, error) {
	if p.AckWithin == "" {
		return p.AckRequired, "", nil
	}
	d, err := time.ParseDuration(p.AckWithin)
	if err != nil {
		return false, "", invalid("invalid ack_within %q: use a duration such as 30m or 2h", p.AckWithin)
	}
	max, _ := time.ParseDuration(rpc.MaxAckWithin)
	if d < time.Second || d > max {
		return false, "", invalid("ack_within %s is out of range: use 1s to %s", p.AckWithin, rpc.MaxAckWithin)
	}
	return true, d.String(), nil
}

// recipientAgents are the agents rs reach, once each in the order met,
// without the author.
func recipientAgents(rs []rpc.Recipient, author string) []string {
	var out []string
	for _, r := range rs {
		for _, a := range r.Agents {
			if a != author && !slices.Contains(out, a) {
				out = append(out, a)
			}
		}
	}
	return out
}

// receiptOf is a stored receipt as the API shows it.
func receiptOf(r store.Receipt) rpc.Receipt {
	out := rpc.Receipt{AgentID: r.AgentID, State: rpc.ReceiptQueued, Via: r.Via, At: r.ReadAt,
		AckedAt: r.AckedAt, Note: r.Note, ReplyID: r.ReplyID}
	switch {
	case r.AckedAt != "":
		out.State = rpc.ReceiptAcknowledged
	case r.ReadAt != "":
		out.State = rpc.ReceiptDelivered
	}
	return out
}

func receiptsOf(r *store.Receipts) []rpc.Receipt {
	if r == nil || len(r.Recipients) == 0 {
		return nil
	}
	out := make([]rpc.Receipt, len(r.Recipients))
	for i, x := range r.Recipients {
		out[i] = receiptOf(x)
	}
	return out
}

// receipts returns the receipts of message id.
func (n *Node) receipts(ctx context.Context, id string) ([]rpc.Receipt, error) {
	rs, err := n.store.Receipts(ctx, []string{id})
	if err != nil {
		return nil, internal("receipts", err)
	}
	return receiptsOf(rs[id]), nil
}

// AckMessage acknowledges a message addressed to the caller, with an
// optional note for its sender. Only a recipient resolved at send may
// (CodeForbidden otherwise); a second acknowledgement, or one after a
// reply, changes nothing and says so (Already). An acknowledgement also
// consumes the message, if no path has delivered it yet: it is claimed as
// message.markRead claims (via "ack"), so no consumer hands it out later.
func (n *Node) AckMessage(ctx context.Context, p *rpc.AckMessageParams) (*rpc.AckMessageResult, error) {
	if p.MessageID == "" {
		return nil, invalid("message_id is required")
	}
	if len(p.Note) > maxAckNote {
		return nil, tooLarge("note is %d bytes: the limit is %d", len(p.Note), maxAckNote)
	}
	me, sid, err := n.readerSession(ctx, "acknowledging a message")
	if err != nil {
		return nil, err
	}
	// One acknowledgement at a time: the check and the append together
	// make a second one a no-op. Acknowledgements are rare, so one lock
	// for all costs nothing that matters.
	n.ackMu.Lock()
	defer n.ackMu.Unlock()
	rs, err := n.store.Receipts(ctx, []string{p.MessageID})
	if err != nil {
		return nil, internal("acknowledge", err)
	}
	r := rs[p.MessageID]
	if r == nil {
		return nil, notFound("message not found: %s", p.MessageID)
	}
	i := slices.IndexFunc(r.Recipients, func(x store.Receipt) bool { return x.AgentID == me })
	if i < 0 {
		return nil, forbidden("message %s is not addressed to %s: only the agents it was sent to may acknowledge it", p.MessageID, me)
	}
	if r.Recipients[i].AckedAt != "" {
		return &rpc.AckMessageResult{MessageID: p.MessageID, Receipt: receiptOf(r.Recipients[i]), Already: true}, nil
	}
	claimed, release, err := n.claims.claim(ctx, n.store, me, []string{p.MessageID})
	if err != nil {
		return nil, err
	}
	defer release()
	var evs []*eventlog.Event
	if len(claimed) > 0 {
		evs = append(evs, &eventlog.Event{Type: eventlog.TypeMessageRead, Shard: shardOf(me), Payload: eventlog.MessageRead{
			AgentID: me, SessionID: sid, MessageIDs: claimed, Via: rpc.ViaAck}})
	}
	evs = append(evs, &eventlog.Event{Type: eventlog.TypeMessageAck, Shard: shardOf(me), Payload: eventlog.MessageAck{
		AgentID: me, SessionID: sid, MessageID: p.MessageID, Note: p.Note}})
	if err := n.append(ctx, evs...); err != nil {
		return nil, err
	}
	after, err := n.receipts(ctx, p.MessageID)
	if err != nil {
		return nil, err
	}
	res := &rpc.AckMessageResult{MessageID: p.MessageID}
	for _, x := range after {
		if x.AgentID == me {
			res.Receipt = x
		}
	}
	return res, nil
}

// ListSent lists the caller's messages, newest first, with their
// receipts: all of them, or those whose acknowledgement is missing
// (Unacked), or missing past its time (Overdue).
func (n *Node) ListSent(ctx context.Context, p *rpc.ListSentParams) (*rpc.ListSentResult, error) {
	page, size, offset, err := pageParams(p.Page, p.PageSize)
	if err != nil {
		return nil, err
	}
	me, err := n.registeredCaller(ctx, "listing sent messages")
	if err != nil {
		return nil, err
	}
	now := ts(n.now())
	ids, total, err := n.store.SentMessages(ctx, store.SentFilter{AuthorID: me, Unacked: p.Unacked, Overdue: p.Overdue,
		Now: now, Limit: size, Offset: offset})
	if err != nil {
		return nil, internal("list sent messages", err)
	}
	rows, err := n.store.MessagesByID(ctx, ids, "")
	if err != nil {
		return nil, internal("list sent messages", err)
	}
	rs, err := n.store.Receipts(ctx, ids)
	if err != nil {
		return nil, internal("list sent messages", err)
	}
	out := &rpc.ListSentResult{Messages: make([]rpc.SentMessage, 0, len(rows)), Total: total,
		Page: page, PageSize: size, TotalPages: totalPages(total, size)}
	for _, m := range rows {
		sm := rpc.SentMessage{MessageID: m.MessageID, ThreadID: m.ThreadID, CreatedAt: m.CreatedAt,
			Preview: preview(body(m).Content, 100), Priority: m.Priority, AckRequired: m.AckRequired, AckDue: m.AckDue,
			Receipts: receiptsOf(rs[m.MessageID])}
		if sm.Receipts == nil {
			sm.Receipts = []rpc.Receipt{}
		}
		sm.Recipients = len(sm.Receipts)
		for _, r := range sm.Receipts {
			if r.State != rpc.ReceiptQueued {
				sm.Delivered++
			}
			if r.State == rpc.ReceiptAcknowledged {
				sm.Acknowledged++
			}
		}
		sm.Overdue = m.AckRequired && m.AckDue != "" && m.AckDue < now && sm.Acknowledged < sm.Recipients
		out.Messages = append(out.Messages, sm)
	}
	return out, nil
}

// ---- pushing receipts ----

// receiptChange is a receipt that an event of a batch may have changed:
// message id's, for agent, at the event's time.
type receiptChange struct {
	id, agent, at string
	ack           bool // an acknowledgement, not a delivery
}

// receiptChanges lists the receipts the batch's reads, acknowledgements
// and replies may change.
func receiptChanges(batch []*eventlog.Event) []receiptChange {
	var out []receiptChange
	for _, e := range batch {
		switch e.Type {
		case eventlog.TypeMessageRead:
			if p, err := eventlog.PayloadAs[eventlog.MessageRead](e); err == nil {
				for _, id := range p.MessageIDs {
					out = append(out, receiptChange{id: id, agent: p.AgentID, at: e.Timestamp()})
				}
			}
		case eventlog.TypeMessageAck:
			if p, err := eventlog.PayloadAs[eventlog.MessageAck](e); err == nil {
				out = append(out, receiptChange{id: p.MessageID, agent: p.AgentID, at: e.Timestamp(), ack: true})
			}
		case eventlog.TypeMessageCreate:
			if p, err := eventlog.PayloadAs[eventlog.MessageCreate](e); err == nil {
				for _, r := range p.Refs {
					if r.Type == rpc.RefReplyTo {
						out = append(out, receiptChange{id: r.Value, agent: p.AgentID, at: e.Timestamp(), ack: true})
					}
				}
			}
		}
	}
	return out
}

// publishReceipts pushes, to the subscriptions to receipts, each receipt
// the batch changed: a recipient's first delivery and its first
// acknowledgement, each once, with the change named and the receipt as
// the projection now holds it. It runs on the commit path after publish and costs nothing while no
// one subscribes to receipts; else the store reads the receipts of the
// batch's messages (store.Receipts: three indexed queries) before the
// notifier's lock is taken, so subscribing never waits for them.
func (s *notifier) publishReceipts(ctx context.Context, batch []*eventlog.Event) map[*Subscription][]int64 {
	if !s.anyReceipts() {
		return nil
	}
	changes := receiptChanges(batch)
	if len(changes) == 0 {
		return nil
	}
	ids := make([]string, 0, len(changes))
	for _, c := range changes {
		ids = append(ids, c.id)
	}
	rs, err := s.n.store.Receipts(ctx, dedupe(ids))
	if err != nil {
		if lg := s.n.opts.Logger; lg != nil {
			lg.Warn("thrum: read receipts to push", "err", err)
		}
		return nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	var subs []*filter
	for _, f := range s.subs {
		if f.info.Receipts != "" {
			subs = append(subs, f)
		}
	}
	sort.Slice(subs, func(i, j int) bool { return subs[i].info.ID < subs[j].info.ID })
	slow := map[*Subscription][]int64{}
	pushed := map[receiptChange]bool{}
	for _, c := range changes {
		m := rs[c.id]
		if m == nil || pushed[receiptChange{id: c.id, agent: c.agent, ack: c.ack}] {
			continue
		}
		i := slices.IndexFunc(m.Recipients, func(x store.Receipt) bool { return x.AgentID == c.agent })
		if i < 0 {
			continue // not a recipient: no receipt
		}
		r := m.Recipients[i]
		change := rpc.ReceiptDelivered
		if c.ack {
			change = rpc.ReceiptAcknowledged
		}
		if c.ack && r.AckedAt != c.at || !c.ack && r.ReadAt != c.at {
			continue // delivered or acknowledged before: nothing changed
		}
		pushed[receiptChange{id: c.id, agent: c.agent, ack: c.ack}] = true
		for _, f := range subs {
			if f.info.Receipts == rpc.ReceiptsSent && f.agentID != m.AuthorID && f.agentID != m.ActingAs {
				continue
			}
			nt := &rpc.ReceiptNotification{MessageID: c.id, AuthorID: m.AuthorID, AckRequired: m.AckRequired,
				Change: change, Receipt: receiptOf(r), SubscriptionID: f.info.ID}
			if ids, dropped := f.s.pushReceipt(nt); dropped {
				slow[f.s] = ids
			}
		}
	}
	return slow
}

// anyReceipts reports whether any subscription takes receipts.
func (s *notifier) anyReceipts() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, f := range s.subs {
		if f.info.Receipts != "" {
			return true
		}
	}
	return false
}

// pushReceipt queues a receipt without blocking, as push does a message.
func (s *Subscription) pushReceipt(nt *rpc.ReceiptNotification) (dropped []int64, slow bool) {
	return s.offer(func() bool {
		if s.conn != nil {
			return s.conn.notifyReceipt(nt)
		}
		select {
		case s.rch <- nt:
			return true
		default:
			return false
		}
	})
}
