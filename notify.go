package thrum

import (
	"bytes"
	"context"
	"errors"
	"sort"
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/internal/jsonrpc"
	"github.com/thrumhq/thrum/rpc"
)

// ErrSlowConsumer is the Err of a Subscription that was closed because
// its consumer could not take a notification at once (its queue was
// full): writers never wait for subscribers. Catch up with ListMessages.
var ErrSlowConsumer = errors.New("thrum: subscriber fell behind and was closed")

// ErrSubscriptionClosed is the Err of a Subscription closed by Close.
var ErrSubscriptionClosed = errors.New("thrum: subscription closed")

// A Subscription is one consumer of notifications: every filter added to
// it with Node.Subscribe delivers to it, in commit order. It has one
// bounded queue, and one policy when the queue is full: the node never
// blocks on a subscriber, so the Subscription is closed, with Err
// ErrSlowConsumer, and its filters are removed. The queue is either its
// own channel (Listen: read C) or the consumer's (ListenFunc: an RPC
// connection's outgoing queue, say). A Subscription may be used from
// several goroutines.
type Subscription struct {
	n  *Node
	ch chan *rpc.MessageNotification
	// deliver, if set, takes notifications instead of ch, without
	// blocking; false means it could not (its queue is full).
	deliver func(*rpc.MessageNotification) bool
	// rch and deliverReceipt are the same for receipts (receipts.go):
	// rch is made by Listen; RPCServer sets deliverReceipt.
	rch            chan *rpc.ReceiptNotification
	deliverReceipt func(*rpc.ReceiptNotification) bool

	mu      sync.Mutex
	closed  bool
	err     error
	filters map[int64]*filter
}

// Listen returns a Subscription whose notifications queue on C, up to
// queue of them (0 means Options.SubscriberQueue).
func (n *Node) Listen(queue int) *Subscription {
	if queue <= 0 {
		queue = n.opts.SubscriberQueue
	}
	s := n.listen(make(chan *rpc.MessageNotification, queue), nil)
	s.rch = make(chan *rpc.ReceiptNotification, queue)
	return s
}

// ListenFunc returns a Subscription that hands each notification to
// deliver, on the commit path: deliver must not block, and returns false
// when it cannot take the notification now (its queue is full), which
// closes the Subscription with ErrSlowConsumer. C stays empty and is
// closed when the Subscription closes. RPCServer delivers onto each
// connection's outgoing queue this way, with no goroutine in between.
func (n *Node) ListenFunc(deliver func(*rpc.MessageNotification) bool) *Subscription {
	return n.listen(make(chan *rpc.MessageNotification), deliver)
}

func (n *Node) listen(ch chan *rpc.MessageNotification, deliver func(*rpc.MessageNotification) bool) *Subscription {
	s := &Subscription{n: n, ch: ch, deliver: deliver, filters: map[int64]*filter{}}
	n.subs.mu.Lock()
	n.subs.consumers[s] = struct{}{}
	n.subs.mu.Unlock()
	return s
}

// C returns the channel notifications arrive on. It is closed when the
// Subscription closes.
func (s *Subscription) C() <-chan *rpc.MessageNotification { return s.ch }

// Receipts returns the channel the receipts of a subscription to them
// (SubscribeParams.Receipts) arrive on, in commit order, with the same
// bound and policy as C: a full one closes the Subscription. It is nil for
// a Subscription made by ListenFunc, and closed when the Subscription
// closes.
func (s *Subscription) Receipts() <-chan *rpc.ReceiptNotification { return s.rch }

// Err reports why the Subscription closed, or nil while it is open.
func (s *Subscription) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Close closes the Subscription and removes its filters. It is
// idempotent.
func (s *Subscription) Close() { s.closeWith(ErrSubscriptionClosed) }

func (s *Subscription) closeWith(err error) {
	if ids, ok := s.markClosed(err); ok {
		s.n.subs.drop(s, ids)
	}
}

// markClosed closes the Subscription's side and returns its filter IDs
// for the notifier to drop; ok is false if it was closed already.
func (s *Subscription) markClosed(err error) (ids []int64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, false
	}
	s.closed = true
	s.err = err
	close(s.ch)
	if s.rch != nil {
		close(s.rch)
	}
	for id := range s.filters {
		ids = append(ids, id)
	}
	s.filters = nil
	return ids, true
}

// push queues a notification without blocking. A full queue closes the
// Subscription: push then returns the IDs of its filters, which the
// caller drops once it no longer holds the notifier's lock.
func (s *Subscription) push(nt *rpc.MessageNotification) (dropped []int64, slow bool) {
	return offer(s, s.deliver, s.ch, nt)
}

// offer is push for either kind of notification: to deliver if set, else
// onto ch.
func offer[T any](s *Subscription, deliver func(T) bool, ch chan T, nt T) (dropped []int64, slow bool) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, false
	}
	if deliver != nil {
		ok := deliver(nt)
		s.mu.Unlock()
		if ok {
			return nil, false
		}
		return s.markClosed(ErrSlowConsumer)
	}
	select {
	case ch <- nt:
		s.mu.Unlock()
		return nil, false
	default:
	}
	s.mu.Unlock()
	return s.markClosed(ErrSlowConsumer)
}

// filter is one subscription made by Node.Subscribe: what it matches,
// whose session it belongs to, and the Subscription it delivers to.
type filter struct {
	info      rpc.SubscriptionInfo
	sessionID string
	agentID   string
	s         *Subscription
}

// notifier holds the live subscriptions and matches committed messages
// against them.
type notifier struct {
	n         *Node
	mu        sync.RWMutex
	nextID    int64
	subs      map[int64]*filter
	consumers map[*Subscription]struct{}
}

func (s *notifier) init(n *Node) {
	s.n = n
	s.subs = map[int64]*filter{}
	s.consumers = map[*Subscription]struct{}{}
}

func (s *notifier) drop(c *Subscription, ids []int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		delete(s.subs, id)
	}
	delete(s.consumers, c)
}

func (s *notifier) closeAll() {
	s.mu.RLock()
	cs := make([]*Subscription, 0, len(s.consumers))
	for c := range s.consumers {
		cs = append(cs, c)
	}
	s.mu.RUnlock()
	for _, c := range cs {
		c.Close()
	}
}

// publish matches the batch's message creates and edits against every
// subscription and delivers one notification per match. It runs on the
// commit path, so it never blocks: deliveries are non-blocking and
// lookups hit memory or an indexed row.
func (s *notifier) publish(ctx context.Context, batch []*eventlog.Event) {
	slow := s.publishLocked(ctx, batch)
	for c, ids := range slow {
		s.drop(c, ids)
	}
	for c, ids := range s.publishReceipts(ctx, batch) {
		s.drop(c, ids)
	}
}

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
			if err != nil {
				continue
			}
			m = published{id: p.MessageID, thread: p.ThreadID, author: p.AgentID, content: p.Content, scopes: p.Scopes}
			for _, r := range p.Refs {
				if r.Type == rpc.RefMention {
					m.mentions = append(m.mentions, r.Value)
				}
			}
		case eventlog.TypeMessageEdit:
			p, err := eventlog.PayloadAs[eventlog.MessageEdit](e)
			if err != nil {
				continue
			}
			msg, err := s.n.store.Message(ctx, p.MessageID, "")
			if err != nil {
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

type published struct {
	id, thread, author, content string
	scopes                      []eventlog.Pair
	mentions                    []string
}

func (s *notifier) deliver(subs []*filter, m *published, at string, slow map[*Subscription][]int64) {
	var (
		author     *rpc.NotificationAuthor
		scopes     []rpc.Pair
		head, tail []byte // the notification encoded once, around its match
	)
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
		if author == nil {
			a, _ := s.n.dirc.Agent(m.author)
			author = &rpc.NotificationAuthor{AgentID: m.author, Role: a.Role, Module: a.Module}
			scopes = make([]rpc.Pair, len(m.scopes))
			for i, sc := range m.scopes {
				scopes[i] = rpc.Pair(sc)
			}
			head, tail = encodeAround(&rpc.MessageNotification{
				MessageID: m.id, ThreadID: m.thread, Author: *author,
				Preview: preview(m.content, 100), Scopes: scopes, Timestamp: at,
			})
		}
		nt := &rpc.MessageNotification{
			MessageID:           m.id,
			ThreadID:            m.thread,
			Author:              *author,
			Preview:             preview(m.content, 100),
			Scopes:              scopes,
			MatchedSubscription: rpc.MatchedSubscription{SubscriptionID: sub.info.ID, MatchType: match},
			Timestamp:           at,
		}
		if head != nil {
			nt.Frame = spliceMatch(head, tail, nt.MatchedSubscription)
		}
		ids, dropped := sub.s.push(nt)
		if dropped {
			slow[sub.s] = ids
		}
	}
}

// blankMatch is how an unset match encodes inside a notification: the
// place where each subscriber's own match goes.
const blankMatch = `"matched_subscription":{"subscription_id":0,"match_type":""}`

// encodeAround encodes a notification.message with no match once, and
// returns the bytes before and after the match's value, so that each
// subscriber's frame is a splice rather than another encoding. Both are
// nil if the encoding fails (callers then encode per subscriber).
func encodeAround(nt *rpc.MessageNotification) (head, tail []byte) {
	b, err := jsonrpc.EncodeNotification(rpc.NotificationMessage, nt)
	if err != nil {
		return nil, nil
	}
	i := bytes.Index(b, []byte(blankMatch))
	if i < 0 {
		return nil, nil
	}
	head = b[:i+len(`"matched_subscription":`)]
	return head, b[i+len(blankMatch):]
}

// spliceMatch is head, the match as JSON, tail: a whole notification.
func spliceMatch(head, tail []byte, m rpc.MatchedSubscription) []byte {
	out := make([]byte, 0, len(head)+len(tail)+64)
	out = append(out, head...)
	out = append(out, `{"subscription_id":`...)
	out = strconv.AppendInt(out, m.SubscriptionID, 10)
	out = append(out, `,"match_type":`...)
	out = strconv.AppendQuote(out, m.MatchType) // one of the rpc.Match* constants: plain ASCII
	out = append(out, '}')
	return append(out, tail...)
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

// Subscribe subscribes the caller's current session to messages matching
// exactly one of a scope, a mention (of a role, or of an agent by its ID,
// which covers its role and groups too) or all. Notifications go to sub
// (see Listen). A subscriber is not notified of its own messages. A user
// (a person at a browser) has no sessions: its subscriptions are the
// user's, with an empty session ID.
func (n *Node) Subscribe(ctx context.Context, sub *Subscription, p *rpc.SubscribeParams) (*rpc.SubscribeResult, error) {
	kinds := 0
	if p.Scope != nil {
		kinds++
		if p.Scope.Type == "" || p.Scope.Value == "" {
			return nil, invalid("scope needs both type and value")
		}
	}
	if p.MentionRole != "" {
		kinds++
	}
	if p.All {
		kinds++
	}
	if p.Receipts != "" {
		kinds++
		if p.Receipts != rpc.ReceiptsSent && p.Receipts != rpc.ReceiptsAll {
			return nil, invalid("invalid receipts %q: use sent (your messages') or all", p.Receipts)
		}
	}
	if kinds == 0 {
		return nil, invalid("at least one of scope, mention_role, or all must be specified") // the contract's words; receipts is ours
	}
	if kinds > 1 {
		return nil, invalid("only one of scope, mention_role, all or receipts may be specified")
	}
	if sub == nil {
		return nil, rpc.Errorf(rpc.CodeInvalidRequest, "subscribe needs a Subscription to deliver to: over RPC keep the connection open; in Go pass one from Node.Listen")
	}
	agent, sid, err := n.subscriber(ctx)
	if err != nil {
		return nil, err
	}
	f := &filter{sessionID: sid, agentID: agent, s: sub}
	f.info.CreatedAt = ts(n.now())
	if p.Scope != nil {
		f.info.ScopeType, f.info.ScopeValue = p.Scope.Type, p.Scope.Value
	}
	f.info.MentionRole = trimAt(p.MentionRole)
	f.info.All = p.All
	f.info.Receipts = p.Receipts

	sub.mu.Lock()
	if sub.closed {
		sub.mu.Unlock()
		return nil, rpc.Errorf(rpc.CodeUnavailable, "subscription is closed")
	}
	if p.Receipts != "" && sub.rch == nil && sub.deliverReceipt == nil {
		sub.mu.Unlock()
		return nil, rpc.Errorf(rpc.CodeInvalidRequest, "this Subscription takes no receipts: make it with Node.Listen")
	}
	if len(sub.filters) >= n.opts.MaxSubscriptions {
		sub.mu.Unlock()
		return nil, tooLarge("too many subscriptions on this connection: the limit is %d", n.opts.MaxSubscriptions)
	}
	n.subs.mu.Lock()
	n.subs.nextID++
	f.info.ID = n.subs.nextID
	n.subs.subs[f.info.ID] = f
	n.subs.mu.Unlock()
	sub.filters[f.info.ID] = f
	sub.mu.Unlock()
	return &rpc.SubscribeResult{SubscriptionID: f.info.ID, SessionID: f.sessionID, CreatedAt: f.info.CreatedAt}, nil
}

// Unsubscribe removes one of the caller's session's subscriptions.
func (n *Node) Unsubscribe(ctx context.Context, p *rpc.UnsubscribeParams) (*rpc.UnsubscribeResult, error) {
	if p.SubscriptionID == 0 {
		return nil, invalid("subscription_id is required")
	}
	agent, sid, err := n.subscriber(ctx)
	if err != nil {
		return nil, err
	}
	n.subs.mu.Lock()
	sub, ok := n.subs.subs[p.SubscriptionID]
	if !ok || sub.sessionID != sid || sub.agentID != agent {
		n.subs.mu.Unlock()
		return &rpc.UnsubscribeResult{Removed: false}, nil
	}
	delete(n.subs.subs, p.SubscriptionID)
	n.subs.mu.Unlock()
	sub.s.mu.Lock()
	delete(sub.s.filters, p.SubscriptionID)
	sub.s.mu.Unlock()
	return &rpc.UnsubscribeResult{Removed: true}, nil
}

// subscriber returns the caller and the session its subscriptions belong
// to: an agent's current session, or "" for a user, who has none.
func (n *Node) subscriber(ctx context.Context) (agent, sessionID string, err error) {
	id, err := n.callerID(ctx, "this call")
	if err != nil {
		return "", "", err
	}
	if a, ok := n.dirc.Agent(id); ok && a.Kind == KindUser {
		return id, "", nil
	}
	agent, sess, err := n.callerSession(ctx)
	if err != nil {
		return "", "", err
	}
	return agent, sess.SessionID, nil
}

// ListSubscriptions lists the subscriptions of the caller's session.
func (n *Node) ListSubscriptions(ctx context.Context, _ *rpc.ListSubscriptionsParams) (*rpc.ListSubscriptionsResult, error) {
	agent, sid, err := n.subscriber(ctx)
	if err != nil {
		return nil, err
	}
	out := &rpc.ListSubscriptionsResult{Subscriptions: []rpc.SubscriptionInfo{}}
	n.subs.mu.RLock()
	for _, sub := range n.subs.subs {
		if sub.sessionID == sid && sub.agentID == agent {
			out.Subscriptions = append(out.Subscriptions, sub.info)
		}
	}
	n.subs.mu.RUnlock()
	sort.Slice(out.Subscriptions, func(i, j int) bool { return out.Subscriptions[i].ID < out.Subscriptions[j].ID })
	return out, nil
}
