package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/thrumhq/thrum/rpc"
)

// A waiting wait_for_message arms a standing claim in the daemon
// (message.claimNext): the next message sent to this agent at or above
// the wait's floor is marked read for it in the message's own commit and
// pushed here whole (notification.claimed), so the wait returns it with
// no round trip and no second fsync. What the daemon claimed is this
// server's to return: it is held, like the claim of a stopped wait, and
// the next consuming call returns it first (DESIGN.md, "Delivery to
// agents").

// floorNames maps a priority floor to min_priority.
var floorNames = []string{rpc.PriorityLow, rpc.PriorityNormal, rpc.PriorityHigh, rpc.PriorityCritical}

// arm arms the daemon's standing claim for the current connection at
// floor, unless it is armed there already, and reports whether it armed
// it now. A failure is logged: the wait goes on without it, woken by
// notification.message.
func (s *Server) arm(ctx context.Context, floor int, via string) bool {
	c, err := s.conn(ctx)
	if err != nil {
		return false
	}
	// After the cancel of the last wait's claim, so that it cannot cancel
	// this one.
	s.armCalls.Lock()
	defer s.armCalls.Unlock()
	s.armMu.Lock()
	if s.armedOn == c || s.noClaimNext == c {
		s.armMu.Unlock()
		return false
	}
	// Armed before the call: the claim may fire before its reply comes.
	s.armedOn = c
	s.armMu.Unlock()
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultCallTimeout)
	defer cancel()
	if _, err := c.ClaimNext(cctx, &rpc.ClaimNextParams{MinPriority: floorNames[floor], Via: via}); err != nil {
		s.armMu.Lock()
		if s.armedOn == c {
			s.armedOn = nil
		}
		var re *rpc.Error
		if errors.As(err, &re) && re.Code == rpc.CodeMethodNotFound {
			s.noClaimNext = c // an older daemon: wait as before, woken by notification.message
		}
		s.armMu.Unlock()
		s.log.Debug("mcpserver: arming a standing claim", "err", err)
		return false
	}
	return true
}

// disarm cancels the standing claim, if one is armed, waiting at most
// within for the daemon. The daemon finishes a claim in flight first and
// pushes it before its reply, so once disarm returns in time, whatever the
// claim took is held here.
func (s *Server) disarm(within time.Duration) {
	s.armCalls.Lock()
	defer s.armCalls.Unlock()
	s.disarmLocked(within)
}

// disarmLater cancels the standing claim without waiting for the daemon:
// a wait that ends with something else to say (its message, or its
// cancellation) frees the single-waiter slot at once, and what the claim
// took meanwhile is held for the next call. The next wait arms only after
// the cancel.
func (s *Server) disarmLater() {
	s.armMu.Lock()
	armed := s.armedOn != nil
	s.armMu.Unlock()
	if !armed {
		return
	}
	s.armCalls.Lock() // taken here, so that the next arm comes after
	go func() {
		defer s.armCalls.Unlock()
		s.disarmLocked(DefaultCallTimeout)
	}()
}

func (s *Server) disarmLocked(within time.Duration) {
	s.armMu.Lock()
	c := s.armedOn
	s.armedOn = nil
	s.armMu.Unlock()
	if c == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	if _, err := c.ClaimNext(ctx, &rpc.ClaimNextParams{Cancel: true}); err != nil && !errors.Is(err, rpc.ErrConnClosed) {
		s.log.Warn("mcpserver: cancelling a standing claim", "err", err)
	}
}

// onClaimed takes a notification.claimed: the standing claim fired. It
// runs on the client's read goroutine, so it only holds the message; the
// next consuming call turns it into a result (adoptClaimed).
func (s *Server) onClaimed(params json.RawMessage) {
	var n rpc.ClaimedNotification
	if err := json.Unmarshal(params, &n); err != nil || n.MessageID == "" {
		s.log.Warn("mcpserver: bad claimed notification", "err", err)
		return
	}
	s.armMu.Lock()
	s.armedOn = nil // a standing claim fires once
	s.armMu.Unlock()
	if n.Message != nil {
		if t, err := time.Parse(time.RFC3339Nano, n.Message.CreatedAt); err == nil {
			s.advance(t)
		}
	}
	s.queue.remove(n.MessageID)
	s.heldMu.Lock()
	s.claimed = append(s.claimed, n)
	s.heldMu.Unlock()
	s.queue.wake()
}

// adoptClaimed moves what standing claims took into held, in order, as
// results; a message deleted meanwhile is dropped (it is read).
func (s *Server) adoptClaimed(ctx context.Context) {
	ctx = context.WithoutCancel(ctx) // what was claimed must reach a caller
	s.heldMu.Lock()
	got := s.claimed
	s.claimed = nil
	s.heldMu.Unlock()
	for _, n := range got {
		m := n.Message
		if m == nil { // not fetched with the claim: fetch it now
			g, err := callRPC(ctx, s, func(ctx context.Context, c *rpc.Client) (*rpc.GetMessageResult, error) {
				return c.GetMessage(ctx, &rpc.GetMessageParams{MessageID: n.MessageID})
			})
			if err != nil {
				s.log.Warn("mcpserver: fetching a claimed message", "id", n.MessageID, "err", err)
				continue
			}
			m = &g.Message
		}
		if m.Deleted {
			continue
		}
		// Held with a wake: another wait may have looked at held while
		// this one was turning the notification into a result.
		s.hold(s.info(ctx, m.MessageID, m.ThreadID, m.Author.AgentID, m.Body, m.Refs, m.Priority, m.CreatedAt, m.AckRequired, nil))
	}
}
