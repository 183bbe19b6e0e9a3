package mcpserver

import (
	"context"
	"time"

	"github.com/thrumhq/thrum/rpc"
)

// Stream hands deliver the messages addressed to the agent, one at a
// time, each claimed for it just before: first the unread ones waiting
// now, oldest first, at most backlog of them; then each one as it
// arrives. When more were waiting than backlog, or the queue of arrivals
// overflowed, deliver is called once with m nil and more the number left
// unread (for check_messages). It is the consumer wait_for_message is,
// run without end: every message goes to exactly one consumer of the
// agent, whether this stream, a tool call, another server or a hook.
//
// Stream returns nil when ctx ends or the server ends its waits
// (EndWaits, Close), and deliver's error if deliver fails; it leaves no
// standing claim armed. A message claimed while it was stopping is
// delivered before it returns nil, if deliver still works. A message
// whose deliver failed is read and returned to nobody, like a claim whose
// reply is lost (DESIGN.md, "Delivery to agents"); a deliver that wants
// no more returns an error of its own, which Stream returns.
func (s *Server) Stream(ctx context.Context, backlog int, deliver func(m *MessageInfo, more int) error) error {
	err := s.stream(ctx, backlog, deliver)
	// No standing claim outlives the stream; what it, or a claim on its
	// way, took as the stream stopped is held.
	s.disarm(shutdownGrace / 2)
	if err != nil {
		return err
	}
	for _, m := range s.unhold(context.WithoutCancel(ctx), s.opts.QueueSize, 0) {
		if err := deliver(&m, 0); err != nil {
			return err
		}
	}
	return nil
}

// stream is Stream until it stops: nil when ctx ends or the server ends
// its waits, deliver's error if deliver fails.
func (s *Server) stream(ctx context.Context, backlog int, deliver func(m *MessageInfo, more int) error) error {
	if err := s.streamBacklog(ctx, backlog, deliver); err != nil {
		return err
	}
	pause := streamPause
	for !s.stopped(ctx) {
		m, status, err := s.wait(ctx, MaxWaitTimeout, 0, nil, s.streamVia(), false)
		if status == "shutdown" || ctx.Err() != nil {
			return nil
		}
		if err != nil {
			// The daemon is unreachable for longer than a call waits for
			// the reconnect: keep waiting, as the reconnect loop does.
			s.log.Warn("mcpserver: stream: waiting for a message", "err", err)
			select {
			case <-ctx.Done():
			case <-s.ending:
			case <-time.After(pause):
			}
			pause = min(2*pause, 2*time.Second)
			continue
		}
		pause = streamPause
		if n := s.queue.takeDropped(); n > 0 {
			if err := deliver(nil, n); err != nil {
				return err
			}
		}
		if m != nil {
			if err := deliver(m, 0); err != nil {
				return err
			}
		}
	}
	return nil
}

// streamBacklog delivers up to max of the unread messages, oldest first,
// claiming each just before, then says how many more are unread.
func (s *Server) streamBacklog(ctx context.Context, max int, deliver func(m *MessageInfo, more int) error) error {
	if max <= 0 {
		return nil
	}
	r, err := callRPC(ctx, s, func(ctx context.Context, c *rpc.Client) (*rpc.ListMessagesResult, error) {
		return c.ListMessages(ctx, &rpc.ListMessagesParams{Mentions: true, Unread: true, PageSize: max, SortOrder: "asc"})
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		// Not fatal: the messages stay unread, and arrivals still come.
		s.log.Warn("mcpserver: listing unread messages for the stream", "err", err)
		return nil
	}
	for _, sm := range r.Messages {
		if s.stopped(ctx) {
			return nil
		}
		m, claimed, err := s.claimOne(ctx, sm.MessageID, s.streamVia())
		if err != nil {
			s.log.Warn("mcpserver: claiming an unread message for the stream", "id", sm.MessageID, "err", err)
			continue
		}
		if !claimed || m == nil || m.Deleted {
			continue // another consumer has it, or it is gone
		}
		info := s.info(ctx, m.MessageID, m.ThreadID, m.Author.AgentID, m.Body, m.Refs, m.Priority, m.CreatedAt, m.AckRequired, nil)
		if err := deliver(&info, 0); err != nil {
			return err
		}
	}
	if more := r.Total - len(r.Messages); more > 0 {
		return deliver(nil, more)
	}
	return nil
}

// streamVia is how a Stream delivers, for the receipts: a channel
// server's stream is its channel (Options.Channel), any other a stream of
// the caller's (a monitor's lines).
func (s *Server) streamVia() string {
	if s.opts.Channel {
		return rpc.ViaChannel
	}
	return rpc.ViaStream
}

// streamPause is how long Stream first waits before it looks again after
// a failed wait, so that an unreachable daemon does not spin it.
const streamPause = 100 * time.Millisecond
