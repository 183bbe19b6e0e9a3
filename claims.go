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
// A claim is decided before its read event is appended: under mu, a
// message is claimable if the projection says the agent has not read it
// and no call in flight is marking it. The claimed IDs stay pending until
// the append returns — by then the projection holds the reads, because
// Append returns after the batch is applied — so at every instant either
// the pending set or the projection knows the message is taken. mu is not
// held across the append: calls for many agents (or many messages) still
// share one group commit.
//
// A read event in the log is the claim's durable record: after a restart
// or a rebuild the message is read, and nothing can claim it again. A
// claim whose append fails is released and the call returns the error:
// when nothing was written the messages stay unread for a later call;
// when the read is durable but waits to be applied (a storage fault, see
// storage.go) it is applied later and no later call gets the messages, so
// in that case delivery is at most once.
type readClaims struct {
	mu      sync.Mutex
	pending map[string]map[string]bool // agent → message IDs being marked
}

// claimReader is the projection query a claim needs.
type claimReader interface {
	ReadState(ctx context.Context, ids []string, reader string) (map[string]bool, error)
}

var _ claimReader = (*store.Store)(nil)

// claim returns which of ids agent may mark read now, in the order given,
// and a release to call once their read event was appended (or failed).
// An unknown ID fails the whole call with CodeNotFound naming the unknown
// ones, so that a caller never mistakes a typo for a message read before.
func (c *readClaims) claim(ctx context.Context, st claimReader, agent string, ids []string) (claimed []string, release func(), err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	state, err := st.ReadState(ctx, ids, agent)
	if err != nil {
		return nil, nil, internal("mark read", err)
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
		return nil, nil, &rpc.Error{Code: rpc.CodeNotFound,
			Message: "unknown " + noun + ": " + strings.Join(unknown, ", "),
			Data:    map[string]any{"unknown_ids": unknown}}
	}
	mine := c.pending[agent]
	for _, id := range ids {
		if !state[id] && !mine[id] {
			claimed = append(claimed, id)
		}
	}
	if len(claimed) == 0 {
		return nil, func() {}, nil
	}
	if mine == nil {
		if c.pending == nil {
			c.pending = map[string]map[string]bool{}
		}
		mine = map[string]bool{}
		c.pending[agent] = mine
	}
	for _, id := range claimed {
		mine[id] = true
	}
	return claimed, func() { c.release(agent, claimed) }, nil
}

func (c *readClaims) release(agent string, ids []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	mine := c.pending[agent]
	for _, id := range ids {
		delete(mine, id)
	}
	if len(mine) == 0 {
		delete(c.pending, agent)
	}
}
