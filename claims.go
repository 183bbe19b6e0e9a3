package thrum

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/internal/jsonrpc"
	"github.com/thrumhq/thrum/rpc"
	"github.com/thrumhq/thrum/store"
)

// The node's claim rules, in one file: a claim marks messages read for
// the agent and records how they reached it (via). Of the calls for one
// agent naming one unread message exactly one claims it (readClaims);
// a standing claim is filled in the message's own commit (standingClaims);
// a claim names a path that shows the message to the agent's model
// (vias), and one whose caller gave up is refused (MarkRead's deadline).
// DESIGN.md, "Delivery to agents" and "Reaching agents in their hosts".

// checkVia validates a claim's delivery path, def if none is given: one
// of the log's (eventlog.Vias) but ViaAck — only AckMessage's own claim
// records it, with the acknowledgement — and ViaChannel: a channel push
// only announces a message, which a host may drop, so it claims nothing
// (older logs hold it).
func checkVia(via, def string) (string, error) {
	if via == "" {
		return def, nil
	}
	if via == rpc.ViaAck || via == rpc.ViaChannel || !slices.Contains(eventlog.Vias, via) {
		return "", invalid("invalid via %q: use wait_for_message, check_messages, hook, stream, mark_read or reply", via)
	}
	return via, nil
}

// MarkRead marks messages read by the caller in its current session and
// says which of them this call newly marked: its claim. Claims are
// arbitrated (claims.go): of concurrent calls for one agent naming the same
// unread message, exactly one gets it in MarkedIDs, so a consumer that
// hands out only what it claimed hands each message out once. Unknown IDs
// are an error naming them (CodeNotFound, data {"unknown_ids": [...]}) and
// nothing is marked. AlsoReadBy names the other agents that read them.
// A claim whose Deadline passed before its read was queued is refused
// (CodeDeadlinePassed) and marks nothing.
func (n *Node) MarkRead(ctx context.Context, p *rpc.MarkReadParams) (*rpc.MarkReadResult, error) {
	if len(p.MessageIDs) == 0 {
		return nil, invalid("message_ids is required and must not be empty")
	}
	if len(p.MessageIDs) > maxMarkRead {
		return nil, tooLarge("too many message_ids: at most %d per call", maxMarkRead)
	}
	via, err := checkVia(p.Via, rpc.ViaMarkRead)
	if err != nil {
		return nil, err
	}
	var deadline time.Time
	if p.Deadline != "" {
		if deadline, err = time.Parse(time.RFC3339Nano, p.Deadline); err != nil {
			return nil, invalid("invalid deadline %q: use an RFC 3339 time", p.Deadline)
		}
	}
	me, sid, err := n.readerSession(ctx, "marking messages read")
	if err != nil {
		return nil, err
	}
	ids := dedupe(p.MessageIDs)
	claimed, release, err := n.claims.claim(ctx, n.store, me, ids)
	if err != nil {
		return nil, err
	}
	if len(claimed) > 0 && !deadline.IsZero() && !time.Now().Before(deadline) {
		// The caller has given up, or is about to: it could not show
		// what this call would claim.
		release()
		return nil, &rpc.Error{Code: rpc.CodeDeadlinePassed,
			Message: "the claim's deadline passed before its read could be written: nothing was marked read; claim again with a later deadline"}
	}
	// The claimed messages, if asked for, are fetched while their read
	// event is made durable: it changes nothing in them but is_read.
	var (
		msgs    []rpc.MessageDetail
		msgsErr error
		fetched chan struct{}
	)
	if p.WithMessages && len(claimed) > 0 {
		fetched = make(chan struct{})
		go func() {
			defer close(fetched)
			msgs, msgsErr = n.messageDetails(ctx, claimed, me)
		}()
	}
	if len(claimed) > 0 {
		e := &eventlog.Event{Type: eventlog.TypeMessageRead, Shard: shardOf(me), Payload: eventlog.MessageRead{
			AgentID: me, SessionID: sid, MessageIDs: claimed, Via: via}}
		err := n.append(ctx, e)
		release() // applied, not written, or durable and pending (see readClaims)
		if fetched != nil {
			<-fetched
		}
		if err != nil {
			return nil, err
		}
	}
	if msgsErr != nil {
		// The claim stands: report it, without the messages (the caller
		// fetches them with message.get), rather than fail a call that
		// marked them read.
		msgs = nil
	}
	others, err := n.store.Readers(ctx, ids, me)
	if err != nil {
		return nil, internal("mark read", err)
	}
	res := &rpc.MarkReadResult{MarkedCount: len(claimed), MarkedIDs: claimed}
	if res.MarkedIDs == nil {
		res.MarkedIDs = []string{}
	}
	if len(others) > 0 {
		res.AlsoReadBy = others
	}
	for i := range msgs {
		msgs[i].IsRead = true // by this call
	}
	res.Messages = msgs
	return res, nil
}

// readClaims arbitrates message.markRead: of the calls for one agent that
// name the same unread message, exactly one claims it (DESIGN.md,
// "Delivery to agents").
//
// A claim is decided before its read event is appended: under the
// agent's mutex, a message is claimable if the projection says the agent
// has not read it and no call in flight is marking it. The claimed IDs
// stay pending until the append returns — by then the projection holds
// the reads, because Append returns after the batch is applied — so at
// every instant either the pending set or the projection knows the
// message is taken. The agent's mutex is held across the projection query
// but not across the append: calls for many agents (or many messages)
// still share one group commit, and one agent's query never waits for
// another's. Only the lookup of the agent's entry is shared by all.
//
// A read event in the log is the claim's durable record: after a restart
// or a rebuild the message is read, and nothing can claim it again. A
// claim whose append fails is released and the call returns the error:
// when nothing was written the messages stay unread for a later call;
// when the read is durable but waits to be applied (a storage fault, see
// storage.go) it is applied later and no later call gets the messages, so
// in that case delivery is at most once.
type readClaims struct {
	mu     sync.Mutex
	agents map[string]*agentClaims
}

// agentClaims are one agent's claims in flight.
type agentClaims struct {
	// users counts the calls that hold this entry: from the start of a
	// claim until it returns, or, if it claimed something, until its
	// release. Guarded by readClaims.mu; at zero the entry is dropped (its
	// pending set is empty then).
	users int

	mu      sync.Mutex      // held while a claim is decided
	pending map[string]bool // message IDs being marked
}

// claimReader is the projection query a claim needs.
type claimReader interface {
	ReadState(ctx context.Context, ids []string, reader string) (map[string]bool, error)
}

var _ claimReader = (*store.Store)(nil)

// hold returns agent's entry, made if need be, counted as used.
func (c *readClaims) hold(agent string) *agentClaims {
	c.mu.Lock()
	defer c.mu.Unlock()
	a := c.agents[agent]
	if a == nil {
		if c.agents == nil {
			c.agents = map[string]*agentClaims{}
		}
		a = &agentClaims{pending: map[string]bool{}}
		c.agents[agent] = a
	}
	a.users++
	return a
}

// unhold ends one use of agent's entry, dropping it after the last.
func (c *readClaims) unhold(agent string, a *agentClaims) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if a.users--; a.users == 0 {
		delete(c.agents, agent)
	}
}

// claim returns which of ids agent may mark read now, in the order given,
// and a release to call once their read event was appended (or failed).
// An unknown ID fails the whole call with CodeNotFound naming the unknown
// ones, so that a caller never mistakes a typo for a message read before.
func (c *readClaims) claim(ctx context.Context, st claimReader, agent string, ids []string) (claimed []string, release func(), err error) {
	a := c.hold(agent)
	claimed, err = a.decide(ctx, st, agent, ids)
	if err != nil || len(claimed) == 0 {
		c.unhold(agent, a)
		if err != nil {
			return nil, nil, err
		}
		return nil, func() {}, nil
	}
	return claimed, func() {
		a.mu.Lock()
		for _, id := range claimed {
			delete(a.pending, id)
		}
		a.mu.Unlock()
		c.unhold(agent, a)
	}, nil
}

// decide picks the claimable ids and marks them pending.
func (a *agentClaims) decide(ctx context.Context, st claimReader, agent string, ids []string) ([]string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	state, err := st.ReadState(ctx, ids, agent)
	if err != nil {
		return nil, internal("mark read", err)
	}
	var unknown []string
	for _, id := range ids {
		if _, ok := state[id]; !ok {
			unknown = append(unknown, id)
		}
	}
	if len(unknown) > 0 {
		noun := "message"
		if len(unknown) > 1 {
			noun = "messages"
		}
		return nil, &rpc.Error{Code: rpc.CodeNotFound,
			Message: "unknown " + noun + ": " + strings.Join(unknown, ", "),
			Data:    map[string]any{"unknown_ids": unknown}}
	}
	var claimed []string
	for _, id := range ids {
		if !state[id] && !a.pending[id] {
			claimed = append(claimed, id)
			a.pending[id] = true
		}
	}
	return claimed, nil
}

// ---- standing claims (message.claimNext) ----

// A standing claim lets a waiting consumer have its next message claimed
// for it in the message's own commit (DESIGN.md, "Delivery to agents"):
// a send addressed to the claim's agent, at or above its floor, appends
// the agent's message.read in the same Append as the message.create, so
// the message and its claim become durable — and visible — together, and
// the waiter needs neither a round trip nor a second fsync. Once the
// append returns, the message is pushed to the claim's connection
// whole (NotificationClaimed). A standing claim fires once; the consumer
// arms it again for its next wait.
//
// Exactly once holds as for markRead: the claim's record is the read
// event, durable with the message, and no other call can claim a
// message that, from the instant it exists, is read. A cancel finishes a
// claim a send is making first, so that its caller learns of it (the
// push goes out before the cancel's reply); a push that cannot be made
// (the connection is gone) loses the message as a lost markRead reply
// does.
type standingClaim struct {
	agent, session string
	conn           any // the connection it pushes to, compared only
	push           func(*rpc.ClaimedNotification) bool

	// Guarded by standingClaims.mu.
	via     string // the consumer's delivery path, for the read (arm sets it)
	floor   int
	wanted  bool          // armed by its consumer, not cancelled, not fired
	taking  string        // the message a send in flight claims for it
	settled chan struct{} // closed when that send is settled
	took    string        // the message claimed for it since it was armed
}

// standingClaims are the node's standing claims.
type standingClaims struct {
	mu      sync.Mutex
	armed   map[string][]*standingClaim // per agent, wanted and free, oldest first
	taking  map[string][]*standingClaim // per message being sent, the claims it takes
	inSends atomic.Int32                // len(taking), read without mu
}

// priorityRank is p's place in eventlog.Priorities, lowest first; ok is
// false for no priority there.
func priorityRank(p string) (rank int, ok bool) {
	rank = slices.Index(eventlog.Priorities, p)
	return rank, rank >= 0
}

// arm makes sc wanted at floor, for a consumer that delivers via.
func (c *standingClaims) arm(sc *standingClaim, floor int, via string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	sc.floor, sc.via, sc.took = floor, via, ""
	if sc.wanted {
		return
	}
	sc.wanted = true
	if sc.taking == "" {
		if c.armed == nil {
			c.armed = map[string][]*standingClaim{}
		}
		c.armed[sc.agent] = append(c.armed[sc.agent], sc)
	}
}

// unarmLocked takes sc out of the armed list.
func (c *standingClaims) unarmLocked(sc *standingClaim) {
	list := slices.DeleteFunc(c.armed[sc.agent], func(x *standingClaim) bool { return x == sc })
	if len(list) == 0 {
		delete(c.armed, sc.agent)
	} else {
		c.armed[sc.agent] = list
	}
}

// cancel disarms sc, first waiting (while ctx lasts) for a send that is
// claiming a message for it, and returns the message claimed for it since
// it was armed, "" if none.
func (c *standingClaims) cancel(ctx context.Context, sc *standingClaim) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	sc.wanted = false
	c.unarmLocked(sc)
	for sc.taking != "" {
		ch := sc.settled
		c.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			c.mu.Lock()
			return ""
		}
		c.mu.Lock()
	}
	return sc.took
}

// drop disarms sc without waiting: its connection is gone.
func (c *standingClaims) drop(sc *standingClaim) {
	c.mu.Lock()
	defer c.mu.Unlock()
	sc.wanted = false
	c.unarmLocked(sc)
}

// reserve takes, for message id (by author, at priority), the oldest armed
// claim at or below its priority of each recipient agent but the author,
// and returns them with the read events that claim the message for them.
func (c *standingClaims) reserve(id, author, priority string, recipients []rpc.Recipient) ([]*standingClaim, []*eventlog.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.armed) == 0 {
		return nil, nil
	}
	rank, _ := priorityRank(priority) // a sent message's, checked at send
	var taken []*standingClaim
	var reads []*eventlog.Event
	seen := map[string]bool{author: true}
	for _, r := range recipients {
		for _, agent := range r.Agents {
			if seen[agent] {
				continue
			}
			seen[agent] = true
			for _, sc := range c.armed[agent] {
				if sc.floor > rank {
					continue
				}
				c.unarmLocked(sc)
				sc.taking, sc.settled = id, make(chan struct{})
				taken = append(taken, sc)
				reads = append(reads, &eventlog.Event{Type: eventlog.TypeMessageRead, Shard: shardOf(agent), Payload: eventlog.MessageRead{
					AgentID: agent, SessionID: sc.session, MessageIDs: []string{id}, Via: sc.via}})
				break
			}
		}
	}
	if len(taken) > 0 {
		if c.taking == nil {
			c.taking = map[string][]*standingClaim{}
		}
		c.taking[id] = taken
		c.inSends.Store(int32(len(c.taking)))
	}
	return taken, reads
}

// claimedFor reports whether a send in flight claims message id for the
// standing claim of conn: that connection is sent the message whole, not
// its notification.message.
func (c *standingClaims) claimedFor(id string, conn any) bool {
	if c.inSends.Load() == 0 {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, sc := range c.taking[id] {
		if sc.conn == conn {
			return true
		}
	}
	return false
}

// settleClaims ends the claims a send made of message id: pushed if the send was committed (err nil), armed again if not
// and still wanted.
func (n *Node) settleClaims(ctx context.Context, taken []*standingClaim, id string, err error) {
	if len(taken) == 0 {
		return
	}
	if err == nil {
		// Each claim is pushed the message as its reader's message.get
		// now returns it (read), read back from the projection: the send
		// returned after the batch was applied. A message that cannot be
		// read back goes without it: the consumer fetches it.
		for _, sc := range taken {
			nt := &rpc.ClaimedNotification{MessageID: id}
			if d, err := n.messageDetail(context.WithoutCancel(ctx), id, sc.agent); err == nil {
				nt.Message = d
			}
			sc.push(nt) // before it is settled: a cancel's reply follows it
		}
	}
	c := &n.standing
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.taking, id)
	c.inSends.Store(int32(len(c.taking)))
	for _, sc := range taken {
		sc.taking = ""
		close(sc.settled)
		switch {
		case err == nil:
			sc.took, sc.wanted = id, false
		case sc.wanted:
			c.armed[sc.agent] = append(c.armed[sc.agent], sc)
		}
	}
}

// standingKey keys a connection's standing claim (jsonrpc.Conn.Value).
type standingKey struct{}

// claimNext is message.claimNext: arm or cancel this connection's
// standing claim.
func (s *RPCServer) claimNext(ctx context.Context, p *rpc.ClaimNextParams) (*rpc.ClaimNextResult, error) {
	c := jsonrpc.ConnFromContext(ctx)
	if c == nil {
		return nil, rpc.Errorf(rpc.CodeInvalidRequest, "message.claimNext needs a connection to push to")
	}
	sc, _ := c.Value(standingKey{}).(*standingClaim)
	if p.Cancel {
		if sc == nil {
			return &rpc.ClaimNextResult{}, nil
		}
		return &rpc.ClaimNextResult{ClaimedID: s.n.standing.cancel(ctx, sc)}, nil
	}
	via, err := checkVia(p.Via, rpc.ViaWaitForMessage)
	if err != nil {
		return nil, err
	}
	floor := 0
	if p.MinPriority != "" {
		f, ok := priorityRank(p.MinPriority)
		if !ok {
			return nil, invalid("invalid min_priority %q: use low, normal, high or critical", p.MinPriority)
		}
		floor = f
	}
	me, sid, err := s.n.readerSession(ctx, "claiming messages")
	if err != nil {
		return nil, err
	}
	if sc != nil && (sc.agent != me || sc.session != sid) {
		s.n.standing.cancel(ctx, sc) // the connection acts as someone else now
		sc = nil
	}
	if sc == nil {
		sc = &standingClaim{agent: me, session: sid, conn: c,
			push: func(nt *rpc.ClaimedNotification) bool { return c.Notify(rpc.NotificationClaimed, nt) == nil }}
		c.SetValue(standingKey{}, sc)
		c.OnClose(func() { s.n.standing.drop(sc) })
	}
	s.n.standing.arm(sc, floor, via)
	return &rpc.ClaimNextResult{Armed: true}, nil
}
