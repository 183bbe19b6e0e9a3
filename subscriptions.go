package thrum

import (
	"context"
	"errors"
	"sort"
	"sync"

	"github.com/thrumhq/thrum/rpc"
)

// ErrSlowConsumer is the Err of a Subscription that was closed because
// its consumer could not take a notification at once (its queue was
// full): writers never wait for subscribers. Catch up with ListMessages.
var ErrSlowConsumer = errors.New("thrum: subscriber fell behind and was closed")

// ErrSubscriptionClosed is the Err of a Subscription closed by Close.
var ErrSubscriptionClosed = errors.New("thrum: subscription closed")

// A Subscription is one consumer of notifications: every filter added to
// it with Node.Subscribe delivers to it, in commit order. Its queues are
// bounded, with one policy when one is full: the node never blocks on a
// subscriber, so the Subscription is closed, with Err ErrSlowConsumer,
// and its filters are removed. The queues are its own channels (Listen:
// messages on C, receipts on Receipts) or, for an RPC connection's
// subscriptions, the connection's outgoing queue (see connSink). A
// Subscription may be used from several goroutines.
type Subscription struct {
	n  *Node
	ch chan *rpc.MessageNotification
	// rch is ch for receipts (SubscribeParams.Receipts; receipts.go).
	rch chan *rpc.ReceiptNotification
	// conn, if set, takes notifications instead of ch and rch, without
	// blocking.
	conn *connSink

	mu      sync.Mutex
	closed  bool
	err     error
	filters map[int64]*filter
}

// Listen returns a Subscription whose messages queue on C and receipts
// on Receipts, up to queue of each (0 means Options.SubscriberQueue).
func (n *Node) Listen(queue int) *Subscription {
	if queue <= 0 {
		queue = n.opts.SubscriberQueue
	}
	return n.listen(queue, nil)
}

// listen returns a Subscription that queues on its channels or, if conn
// is set, pushes to conn on the commit path (C then stays empty, and is
// closed when the Subscription closes).
func (n *Node) listen(queue int, conn *connSink) *Subscription {
	s := &Subscription{n: n, ch: make(chan *rpc.MessageNotification, queue), conn: conn, filters: map[int64]*filter{}}
	if conn == nil {
		s.rch = make(chan *rpc.ReceiptNotification, queue)
	}
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
// bound and policy as C: a full one closes the Subscription. It is closed
// when the Subscription closes.
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
	if a, ok := n.dirc.Agent(id); ok && a.Kind == rpc.KindUser {
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
