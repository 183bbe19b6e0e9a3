package thrum

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"unicode/utf8"

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/rpc"
)

// The write path. Every write of the node — one message.send, say — goes
// through these steps, in this file's order, before its caller gets the
// reply:
//
//   - Node.append: refused while committed events wait to be applied
//     (storage.go), or if a field breaks the log's rules
//     (eventlog.CheckFields, which admission runs on other machines);
//     otherwise each event gets the key that signs it (Node.sign,
//     signing.go) and the events go to the log.
//   - eventlog.Log.Append: queued for the log's committer, which takes
//     every call waiting (group commit), encodes each line once, signs
//     those bytes (the line ends in its "sig" member), writes the lines
//     and fsyncs them once. While the fsync runs it hands the batch to the
//     Projector's Stage, which Open sets as the log's
//     eventlog.Options.Stage (an embedder composing parts with New sets it,
//     or OnCommit to Commit).
//   - Projector.Stage: the store's statements in a transaction (after any
//     events pending from a failed apply); once the fsync returned, the
//     transaction commits and the extra projections apply the batch.
//   - Projector.inMemory: the message index and the directory take it,
//     then Node.applied: the caches it made stale are dropped and
//     notifier.publish matches its messages against every subscription
//     and pushes each match without blocking (Subscription.push: a
//     channel, or an RPC connection's queue through connSink.notify),
//     then pushes the receipts the batch changed to the subscriptions to
//     receipts (publishReceipts, receipts.go).
//   - Back in Node.append, which returns once the batch is durable and
//     applied everywhere: the caller's result is the reply.

// append commits events: durable in the log, applied to every read
// model, published to subscribers, all before it returns. While
// committed events wait to be applied (storage.go), it refuses.
func (n *Node) append(ctx context.Context, evs ...*eventlog.Event) error {
	if err := n.refuseWrites(); err != nil {
		return err
	}
	// The rules admission holds other machines' lines to: what this node
	// writes, every other machine must take.
	for _, e := range evs {
		if err := eventlog.CheckFields(e, n.now()); err != nil {
			return invalid("%v", err)
		}
		// A read of a message dated ahead of this clock (its machine's
		// runs ahead) takes the message's time: every machine refuses a
		// receipt dated before its message.
		floor, err := n.receiptFloor(ctx, e)
		if err != nil {
			return internal("check a receipt", err)
		}
		if e.Time.IsZero() && floor.After(n.now()) {
			e.Time = floor
		}
		if err := n.sign(e); err != nil {
			return err
		}
	}
	if err := n.log.Append(ctx, evs...); err != nil {
		var re *rpc.Error
		switch {
		case errors.As(err, &re): // from the projector: durable, not applied
			return err
		case errors.Is(err, eventlog.ErrClosed):
			return rpc.Errorf(rpc.CodeUnavailable, "thrum is shutting down")
		case errors.Is(err, eventlog.ErrTooLarge):
			return tooLarge("%v", err)
		case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
			return err
		}
		return n.writeFailure(err)
	}
	n.writeSucceeded()
	return nil
}

// Stage is Commit while the batch is fsynced, the log's
// eventlog.Options.Stage, called by the log's committer with each batch
// in log order: it runs the batch's statements (after the
// pending events) in a store transaction, then waits for durable. Once
// the batch is durable it commits the transaction, and the extra
// projections, the index and the notifier take the batch; if the fsync
// failed it rolls the transaction back, leaving the store, its
// checkpoint and the pending events as they were. Nothing else is
// applied in between.
func (p *Projector) Stage(batch []*eventlog.Event, durable func() error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	evs := batch
	if len(p.pending) > 0 {
		evs = append(p.pending[:len(p.pending):len(p.pending)], batch...)
	}
	if slices.ContainsFunc(batch, waitsForKey) {
		p.sealedWait.Store(true)
	}
	staged, err := p.store.Stage(context.Background(), evs)
	if derr := durable(); derr != nil {
		if err == nil {
			staged.Rollback()
		}
		return nil // not in the log: nothing to apply
	}
	if err == nil {
		err = staged.Commit()
	}
	if err == nil {
		err = p.applyExtra(context.Background(), evs)
	}
	if err != nil {
		return p.failed(batch, evs, err)
	}
	p.pending, p.applyErr = nil, nil
	p.behind.Store(false)
	p.inMemory(evs)
	return nil
}

// Commit applies a committed batch, after the events still pending from
// a failed apply: it is the log's eventlog.Options.OnCommit.
func (p *Projector) Commit(batch []*eventlog.Event) error {
	return p.Stage(batch, func() error { return nil })
}

// failed keeps evs, durable but not applied, pending, and returns the
// error for the Append calls of batch. Called with p.mu held.
func (p *Projector) failed(batch, evs []*eventlog.Event, err error) error {
	if len(p.pending) == 0 { // the log reuses batch's array after we return
		evs = append([]*eventlog.Event(nil), batch...)
	}
	p.pending, p.applyErr = evs, err
	p.behind.Store(true)
	if lg := p.logger(); lg != nil {
		lg.Error("thrum: the projection failed to apply committed events; they are safe in the log, and writes are refused until a retry applies them",
			"events", len(evs), "err", err)
	}
	select {
	case p.kick <- struct{}{}:
	default:
	}
	if n := p.n.Load(); n != nil {
		return n.applyFailure(err)
	}
	return err
}

// apply applies evs to the store, then to the extra projections.
func (p *Projector) apply(ctx context.Context, evs []*eventlog.Event) error {
	if err := p.store.Apply(ctx, evs); err != nil {
		return err
	}
	return p.applyExtra(ctx, evs)
}

// applyExtra applies evs to the extra projections.
func (p *Projector) applyExtra(ctx context.Context, evs []*eventlog.Event) error {
	for _, x := range p.extra {
		if err := x.Apply(ctx, evs); err != nil {
			return fmt.Errorf("projection %T: %w", x, err)
		}
	}
	return nil
}

// inMemory runs after the store and the extra projections applied a
// batch, in log order: the in-memory message index and directory take it,
// then the node (Node.applied): its caches and subscribers.
func (p *Projector) inMemory(batch []*eventlog.Event) {
	p.idx.Apply(batch)
	if slices.ContainsFunc(batch, changesDirectory) {
		if err := p.dirc.Apply(context.Background(), p.store, batch); err != nil {
			if lg := p.logger(); lg != nil {
				lg.Error("thrum: reload directory", "err", err)
			}
		}
	}
	if n := p.n.Load(); n != nil {
		n.applied(batch)
	}
}

// applied runs after every read model took a batch, in log order: it
// drops the caches the batch made stale, publishes the batch's messages to
// subscribers (notifier.publish) and hands it to Options.OnCommit.
func (n *Node) applied(batch []*eventlog.Event) {
	reload, sessions := false, false
	for _, e := range batch {
		reload = reload || changesDirectory(e)
		switch e.Type {
		case eventlog.TypeAgentCleanup, eventlog.TypeSessionStart, eventlog.TypeSessionEnd:
			sessions = true
		}
	}
	if sessions || reload {
		// Who is active changed: recipients' status must see it now.
		n.seenMu.Lock()
		n.seen = nil
		n.seenMu.Unlock()
	}
	if sessions {
		n.sessMu.Lock()
		n.sessGen++
		clear(n.sessCache)
		n.sessMu.Unlock()
	}
	n.subs.publish(context.Background(), batch)
	if n.opts.OnCommit != nil {
		n.opts.OnCommit(batch)
	}
}

// publish matches the batch's message creates and edits against every
// subscription and delivers one notification per match, then the
// batch's receipts (publishReceipts). It runs on the commit path, so it
// never blocks: deliveries are non-blocking and lookups hit memory or
// indexed rows.
func (s *notifier) publish(ctx context.Context, batch []*eventlog.Event) {
	slow := s.publishLocked(ctx, batch)
	for c, ids := range slow {
		s.drop(c, ids)
	}
	for c, ids := range s.publishReceipts(ctx, batch) {
		s.drop(c, ids)
	}
}

// publishLocked is publish under the notifier's read lock; it returns
// the Subscriptions that fell behind, with their filters to drop.
func (s *notifier) publishLocked(ctx context.Context, batch []*eventlog.Event) map[*Subscription][]int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if len(s.subs) == 0 {
		return nil
	}
	slow := map[*Subscription][]int64{}
	subs := make([]*filter, 0, len(s.subs))
	for _, sub := range s.subs {
		subs = append(subs, sub)
	}
	sort.Slice(subs, func(i, j int) bool { return subs[i].info.ID < subs[j].info.ID })
	for _, e := range batch {
		var m published
		switch e.Type {
		case eventlog.TypeMessageCreate:
			p, err := eventlog.PayloadAs[eventlog.MessageCreate](e)
			if err != nil || p.Sealed != nil {
				continue // a body no held key opens is not delivered: see reopenSealed
			}
			m = published{id: p.MessageID, thread: p.ThreadID, author: p.AgentID, content: p.Content, scopes: p.Scopes}
			for _, r := range p.Refs {
				if r.Type == rpc.RefMention {
					m.mentions = append(m.mentions, r.Value)
				}
			}
		case eventlog.TypeMessageEdit:
			p, err := eventlog.PayloadAs[eventlog.MessageEdit](e)
			if err != nil || p.Sealed != nil {
				continue
			}
			msg, err := s.n.store.Message(ctx, p.MessageID, "")
			if err != nil || msg.Sealed != "" {
				continue
			}
			m = published{id: msg.MessageID, thread: msg.ThreadID, author: msg.AgentID, content: msg.Content}
			m.scopes = msg.Scopes
			for _, r := range msg.Refs {
				if r.Type == rpc.RefMention {
					m.mentions = append(m.mentions, r.Value)
				}
			}
		default:
			continue
		}
		s.deliver(subs, &m, e.Timestamp(), slow)
	}
	return slow
}

// published is a message as the notifier matches it: a create's
// payload, or the message an edit changed as the store holds it now.
type published struct {
	id, thread, author, content string
	scopes                      []rpc.Pair
	mentions                    []string
}

// deliver pushes m to each of subs that it matches, but its author's, the
// notification made once for them all.
func (s *notifier) deliver(subs []*filter, m *published, at string, slow map[*Subscription][]int64) {
	var nt *rpc.MessageNotification  // made at the first match, shared by every subscriber
	targets := map[string][]string{} // mention_role → its targets, per publish
	for _, sub := range subs {
		if sub.agentID == m.author {
			continue // nobody is woken by their own message
		}
		match := ""
		switch {
		case sub.info.All:
			match = rpc.MatchAll
		case sub.info.ScopeType != "":
			for _, sc := range m.scopes {
				if sc.Type == sub.info.ScopeType && sc.Value == sub.info.ScopeValue {
					match = rpc.MatchScope
					break
				}
			}
		case sub.info.MentionRole != "" && len(m.mentions) > 0:
			ts, ok := targets[sub.info.MentionRole]
			if !ok {
				ts = s.n.dirc.MentionTargets(sub.info.MentionRole)
				targets[sub.info.MentionRole] = ts
			}
			if intersects(m.mentions, ts) {
				match = rpc.MatchMention
			}
		}
		if match == "" {
			continue
		}
		if nt == nil {
			a, _ := s.n.dirc.Agent(m.author)
			scopes := append([]rpc.Pair{}, m.scopes...) // the payload's are shared with every projection
			nt = &rpc.MessageNotification{
				MessageID: m.id, ThreadID: m.thread,
				Author:  rpc.NotificationAuthor{AgentID: m.author, Role: a.Role, Module: a.Module},
				Preview: preview(m.content, 100), Scopes: scopes, Timestamp: at,
			}
		}
		ids, dropped := sub.s.push(nt, rpc.MatchedSubscription{SubscriptionID: sub.info.ID, MatchType: match})
		if dropped {
			slow[sub.s] = ids
		}
	}
}

// push queues nt, with the match m, without blocking. nt is the
// message's notification, shared by every subscriber and never changed:
// a channel gets a copy with its match. A full queue closes the
// Subscription: push then returns the IDs of its filters, which the
// caller drops once it no longer holds the notifier's lock.
func (s *Subscription) push(nt *rpc.MessageNotification, m rpc.MatchedSubscription) (dropped []int64, slow bool) {
	return s.offer(func() bool {
		if s.conn != nil {
			return s.conn.notify(nt, m)
		}
		own := *nt
		own.MatchedSubscription = m
		select {
		case s.ch <- &own:
			return true
		default:
			return false
		}
	})
}

// offer runs try, which hands a notification on without blocking, unless
// the Subscription is closed; if try could not, the Subscription is
// closed as a slow consumer and offer returns its filters to drop.
func (s *Subscription) offer(try func() bool) (dropped []int64, slow bool) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, false
	}
	ok := try()
	s.mu.Unlock()
	if ok {
		return nil, false
	}
	return s.markClosed(ErrSlowConsumer)
}

func intersects(a, b []string) bool {
	for _, x := range a {
		for _, y := range b {
			if x == y {
				return true
			}
		}
	}
	return false
}

// preview returns the first n characters (runes) of s.
func preview(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	i := 0
	for j := range s {
		if i == n {
			return s[:j]
		}
		i++
	}
	return s
}
