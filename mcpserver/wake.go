package mcpserver

import (
	"context"

	"github.com/thrumhq/thrum/inbox"
)

// wake runs Options.Wake until ctx ends, an error of Wake, or the server
// ends its waits: once the client has spoken (heard: the host has its
// session), each batch of new mail rings once with the doorbell's line
// (inbox.Doorbell.Wake), after the mail settled (inbox.DoorbellSettle).
func (s *Server) wake(ctx context.Context, heard <-chan struct{}) {
	select {
	case <-heard:
	case <-ctx.Done():
		return
	}
	err := s.ib.Doorbells(ctx, inbox.DoorbellSettle, func(d *inbox.Doorbell) error {
		if text := d.Wake(); text != "" {
			return s.opts.Wake(ctx, text)
		}
		return nil
	})
	if err != nil && ctx.Err() == nil {
		s.log.Warn("mcpserver: waking the session stopped; new mail waits for the agent's next prompt or tool call", "err", err)
	}
}
