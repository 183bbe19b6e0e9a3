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

// ErrSlowListener is the Err of a Listener that was closed because its
// queue filled up: writers never wait for listeners. Catch up with
// ListMessages.
var ErrSlowListener = errors.New("thrum: listener fell behind and was closed")

// ErrListenerClosed is the Err of a Listener closed by Close.
var ErrListenerClosed = errors.New("thrum: listener closed")

// A Listener receives the notifications of the subscriptions made with
// its context (see Listener.Context and Node.Subscribe). Notifications
// arrive on C in commit order. The node never blocks on a listener: when
// its queue is full the listener is closed, C is closed and Err returns
// ErrSlowListener. A Listener may be used from several goroutines.
type Listener struct {
	n  *Node
	ch chan *rpc.MessageNotification
	// sink, if set, takes notifications instead of ch, without blocking;
	// false means it could not (its consumer is too slow).
	sink func(*rpc.MessageNotification) bool

	mu     sync.Mutex
	closed bool
	err    error
	subs   map[int64]*subscription
}

// Listen creates a Listener with a queue of queue notifications (0 means
// Options.SubscriberQueue).
func (n *Node) Listen(queue int) *Listener {
	if queue <= 0 {
		queue = n.opts.SubscriberQueue
	}
	l := &Listener{n: n, ch: make(chan *rpc.MessageNotification, queue), subs: map[int64]*subscription{}}
	n.subs.mu.Lock()
	n.subs.listeners[l] = struct{}{}
	n.subs.mu.Unlock()
	return l
}

// listenTo is Listen for a consumer that takes each notification at once
// and never blocks (an RPC connection's queue): one goroutine hop less
// per notification and subscriber than a channel and a forwarder. C
// stays empty and is closed when the listener closes.
func (n *Node) listenTo(sink func(*rpc.MessageNotification) bool) *Listener {
	l := n.Listen(1)
	l.mu.Lock()
	l.sink = sink
	l.mu.Unlock()
	return l
}

// C returns the channel notifications arrive on. It is closed when the
// listener closes.
func (l *Listener) C() <-chan *rpc.MessageNotification { return l.ch }

// Err reports why the listener closed, or nil while it is open.
func (l *Listener) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Close closes the listener and removes its subscriptions. It is
// idempotent.
func (l *Listener) Close() { l.closeWith(ErrListenerClosed) }

func (l *Listener) closeWith(err error) {
	if ids, ok := l.markClosed(err); ok {
		l.n.subs.drop(l, ids)
	}
}

// markClosed closes the listener's side and returns its subscription IDs
// for the notifier to drop; ok is false if it was closed already.
func (l *Listener) markClosed(err error) (ids []int64, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, false
	}
	l.closed = true
	l.err = err
	close(l.ch)
	for id := range l.subs {
		ids = append(ids, id)
	}
	l.subs = nil
	return ids, true
}

// deliver queues a notification without blocking. A full queue closes
// the listener: deliver then returns the IDs of its subscriptions, which
// the caller drops once it no longer holds the notifier's lock.
func (l *Listener) deliver(nt *rpc.MessageNotification) (dropped []int64, slow bool) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, false
	}
	if l.sink != nil {
		ok := l.sink(nt)
		l.mu.Unlock()
		if ok {
			return nil, false
		}
		return l.markClosed(ErrSlowListener)
	}
	select {
	case l.ch <- nt:
		l.mu.Unlock()
		return nil, false
	default:
	}
	l.mu.Unlock()
	return l.markClosed(ErrSlowListener)
}

type listenerKey struct{}

// Context returns ctx carrying the listener: Subscribe calls made with it
// deliver to this listener.
func (l *Listener) Context(ctx context.Context) context.Context {
	return context.WithValue(ctx, listenerKey{}, l)
}

func listenerFrom(ctx context.Context) *Listener {
	l, _ := ctx.Value(listenerKey{}).(*Listener)
	return l
}

type subscription struct {
	info      rpc.SubscriptionInfo
	sessionID string
	agentID   string
	l         *Listener
}

// notifier holds the live subscriptions and matches committed messages
// against them.
type notifier struct {
	n         *Node
	mu        sync.RWMutex
	nextID    int64
	subs      map[int64]*subscription
	listeners map[*Listener]struct{}
}

func (s *notifier) init(n *Node) {
	s.n = n
	s.subs = map[int64]*subscription{}
	s.listeners = map[*Listener]struct{}{}
}

func (s *notifier) drop(l *Listener, ids []int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		delete(s.subs, id)
	}
	delete(s.listeners, l)
}

func (s *notifier) closeAll() {
	s.mu.RLock()
	ls := make([]*Listener, 0, len(s.listeners))
	for l := range s.listeners {
		ls = append(ls, l)
	}
	s.mu.RUnlock()
	for _, l := range ls {
		l.Close()
	}
}

// publish matches the batch's message creates and edits against every
// subscription and delivers one notification per match. It runs on the
// commit path, so it never blocks: deliveries are non-blocking and
// lookups hit memory or an indexed row.
func (s *notifier) publish(ctx context.Context, batch []*eventlog.Event) {
	slow := s.publishLocked(ctx, batch)
	for l, ids := range slow {
		s.drop(l, ids)
	}
}

func (s *notifier) publishLocked(ctx context.Context, batch []*eventlog.Event) map[*Listener][]int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if len(s.subs) == 0 {
		return nil
	}
	slow := map[*Listener][]int64{}
	subs := make([]*subscription, 0, len(s.subs))
	for _, sub := range s.subs {
		subs = append(subs, sub)
	}
	sort.Slice(subs, func(i, j int) bool { return subs[i].info.ID < subs[j].info.ID })
	for _, e := range batch {
		var m published
		switch e.Type {
		case eventlog.TypeMessageCreate:
			var p eventlog.MessageCreate
			if e.Decode(&p) != nil {
				continue
			}
			m = published{id: p.MessageID, thread: p.ThreadID, author: p.AgentID, content: p.Content, scopes: p.Scopes}
			for _, r := range p.Refs {
				if r.Type == rpc.RefMention {
					m.mentions = append(m.mentions, r.Value)
				}
			}
		case eventlog.TypeMessageEdit:
			var p eventlog.MessageEdit
			if e.Decode(&p) != nil {
				continue
			}
			msg, err := s.n.store.Message(ctx, p.MessageID, "")
			if err != nil {
				continue
			}
			m = published{id: msg.MessageID, thread: msg.ThreadID, author: msg.AgentID, content: msg.Content}
			for _, sc := range msg.Scopes {
				m.scopes = append(m.scopes, eventlog.Pair(sc))
			}
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

func (s *notifier) deliver(subs []*subscription, m *published, at string, slow map[*Listener][]int64) {
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
				ts = s.n.dirc.mentionTargets(sub.info.MentionRole)
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
			a, _ := s.n.dirc.agent(m.author)
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
		ids, dropped := sub.l.deliver(nt)
		if dropped {
			slow[sub.l] = ids
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
// which covers its role and groups too) or all. Notifications go to the
// Listener in ctx (see Listener.Context). A subscriber is not notified of
// its own messages.
func (n *Node) Subscribe(ctx context.Context, p *rpc.SubscribeParams) (*rpc.SubscribeResult, error) {
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
	if kinds == 0 {
		return nil, invalid("at least one of scope, mention_role, or all must be specified")
	}
	if kinds > 1 {
		return nil, invalid("only one of scope, mention_role, or all may be specified")
	}
	l := listenerFrom(ctx)
	if l == nil {
		return nil, rpc.Errorf(rpc.CodeInvalidRequest, "subscribe needs a connection to deliver to: over RPC keep the connection open; in Go call Node.Listen and use Listener.Context")
	}
	agent, sess, err := n.callerSession(ctx)
	if err != nil {
		return nil, err
	}
	sub := &subscription{sessionID: sess.SessionID, agentID: agent, l: l}
	sub.info.CreatedAt = ts(n.now())
	if p.Scope != nil {
		sub.info.ScopeType, sub.info.ScopeValue = p.Scope.Type, p.Scope.Value
	}
	sub.info.MentionRole = trimAt(p.MentionRole)
	sub.info.All = p.All

	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, rpc.Errorf(rpc.CodeUnavailable, "listener is closed")
	}
	if len(l.subs) >= n.opts.MaxSubscriptions {
		l.mu.Unlock()
		return nil, tooLarge("too many subscriptions on this connection: the limit is %d", n.opts.MaxSubscriptions)
	}
	n.subs.mu.Lock()
	n.subs.nextID++
	sub.info.ID = n.subs.nextID
	n.subs.subs[sub.info.ID] = sub
	n.subs.mu.Unlock()
	l.subs[sub.info.ID] = sub
	l.mu.Unlock()
	return &rpc.SubscribeResult{SubscriptionID: sub.info.ID, SessionID: sub.sessionID, CreatedAt: sub.info.CreatedAt}, nil
}

// Unsubscribe removes one of the caller's session's subscriptions.
func (n *Node) Unsubscribe(ctx context.Context, p *rpc.UnsubscribeParams) (*rpc.UnsubscribeResult, error) {
	if p.SubscriptionID == 0 {
		return nil, invalid("subscription_id is required")
	}
	_, sess, err := n.callerSession(ctx)
	if err != nil {
		return nil, err
	}
	n.subs.mu.Lock()
	sub, ok := n.subs.subs[p.SubscriptionID]
	if !ok || sub.sessionID != sess.SessionID {
		n.subs.mu.Unlock()
		return &rpc.UnsubscribeResult{Removed: false}, nil
	}
	delete(n.subs.subs, p.SubscriptionID)
	n.subs.mu.Unlock()
	sub.l.mu.Lock()
	delete(sub.l.subs, p.SubscriptionID)
	sub.l.mu.Unlock()
	return &rpc.UnsubscribeResult{Removed: true}, nil
}

// ListSubscriptions lists the subscriptions of the caller's session.
func (n *Node) ListSubscriptions(ctx context.Context, _ *rpc.ListSubscriptionsParams) (*rpc.ListSubscriptionsResult, error) {
	_, sess, err := n.callerSession(ctx)
	if err != nil {
		return nil, err
	}
	out := &rpc.ListSubscriptionsResult{Subscriptions: []rpc.SubscriptionInfo{}}
	n.subs.mu.RLock()
	for _, sub := range n.subs.subs {
		if sub.sessionID == sess.SessionID {
			out.Subscriptions = append(out.Subscriptions, sub.info)
		}
	}
	n.subs.mu.RUnlock()
	sort.Slice(out.Subscriptions, func(i, j int) bool { return out.Subscriptions[i].ID < out.Subscriptions[j].ID })
	return out, nil
}
