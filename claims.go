package thrum

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/rpc"
	"github.com/thrumhq/thrum/store"
)

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

// priorityRank orders the priorities, lowest first.
var priorityRank = map[string]int{rpc.PriorityLow: 0, rpc.PriorityNormal: 1, rpc.PriorityHigh: 2, rpc.PriorityCritical: 3}

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
	rank := priorityRank[priority]
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

// settleClaims ends the claims a send made of message id, which e
// creates: pushed if the send was committed (err nil), armed again if not
// and still wanted.
func (n *Node) settleClaims(taken []*standingClaim, id string, e *eventlog.Event, err error) {
	if len(taken) == 0 {
		return
	}
	if err == nil {
		// One message for every claim — read, as each reader's message.get
		// now returns it — from the payload as committed and applied.
		nt := &rpc.ClaimedNotification{MessageID: id}
		if p, perr := eventlog.PayloadAs[eventlog.MessageCreate](e); perr == nil {
			nt.Message = claimedDetail(p, e.Time)
		}
		for _, sc := range taken {
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

// claimedDetail is the message p creates, committed at at, as message.get
// returns it to a reader who has read it — built from the event rather
// than read back from the projection, which holds the same (scopes and
// refs in order, once each; the structured payload trimmed; no edits
// yet). TestClaimNextPushIsMessageGet holds the two equal, but for the
// receipts, which only message.get reports.
func claimedDetail(p eventlog.MessageCreate, at time.Time) *rpc.MessageDetail {
	d := &rpc.MessageDetail{
		MessageID: p.MessageID, ThreadID: p.ThreadID,
		Author: rpc.Author{AgentID: p.AgentID, SessionID: p.SessionID},
		Body:   rpc.Body{Format: p.Format, Content: p.Content, Structured: nullJSON(p.Structured)},
		Scopes: pairsAsStored(p.Scopes), Refs: pairsAsStored(p.Refs),
		CreatedAt: ts(at), Priority: p.Priority, Tags: slices.Clone(p.Tags), IsRead: true,
		AckRequired: p.AckRequired, AckDue: store.AckDue(p, at),
	}
	if d.Tags == nil {
		d.Tags = []string{}
	}
	if p.Disclose {
		d.DisclosedVia = p.ActingAs
	}
	return d
}

// pairsAsStored orders a copy of pairs and drops repeats, as the
// projection does.
func pairsAsStored(ps []rpc.Pair) []rpc.Pair {
	out := append(make([]rpc.Pair, 0, len(ps)), ps...)
	slices.SortFunc(out, func(a, b rpc.Pair) int {
		if c := strings.Compare(a.Type, b.Type); c != 0 {
			return c
		}
		return strings.Compare(a.Value, b.Value)
	})
	return slices.Compact(out)
}

// nullJSON is a structured payload as the projection keeps it: trimmed,
// "" for none.
func nullJSON(raw json.RawMessage) string {
	if s := strings.TrimSpace(string(raw)); s != "null" {
		return s
	}
	return ""
}
