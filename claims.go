package thrum

import (
	"context"
	"strings"
	"sync"

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
