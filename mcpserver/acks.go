package mcpserver

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/thrumhq/thrum/rpc"
)

// Acknowledgements. A server that sends a message with ack_required, or
// waits with acks, subscribes its daemon connection to the receipts of
// the agent's messages (and again on each new connection); each
// acknowledgement of a message that asked for one is queued, at most
// maxAcks of them (the oldest dropped), until a wait_for_message with
// acks returns it. Subscribing before the send means an acknowledgement
// that comes at once is not missed; those made while the connection was
// down are (message.listSent still has them).

// statusAcknowledged is wait_for_message's status when it returns an
// acknowledgement.
const statusAcknowledged = "acknowledged"

// maxAcks bounds the queue of acknowledgements.
const maxAcks = 100

// watchAcks subscribes the current connection to the agent's receipts,
// once. A failure is logged: sends and waits go on without it.
func (s *Server) watchAcks(ctx context.Context) {
	s.subMu.Lock()
	s.wantAcks = true
	s.subMu.Unlock()
	c, err := s.conn(ctx)
	if err != nil {
		return
	}
	if err := s.subscribeAcks(ctx, c); err != nil {
		s.log.Warn("mcpserver: subscribing to acknowledgements", "err", err)
	}
}

// subscribeAcks subscribes c to the agent's receipts, unless it is
// already or the server has not asked for them.
func (s *Server) subscribeAcks(ctx context.Context, c *rpc.Client) error {
	s.subMu.Lock()
	defer s.subMu.Unlock()
	if !s.wantAcks || s.acksOn == c {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultCallTimeout)
	defer cancel()
	if _, err := c.Subscribe(ctx, &rpc.SubscribeParams{Receipts: rpc.ReceiptsSent}); err != nil {
		var re *rpc.Error
		if errors.As(err, &re) && re.Code == rpc.CodeInvalidParams {
			return errors.New("the thrum daemon does not push receipts: update it")
		}
		return err
	}
	s.acksOn = c
	return nil
}

// onReceipt queues an acknowledgement of a message that asked for one. It
// runs on the client's read goroutine and never blocks.
func (s *Server) onReceipt(params json.RawMessage) {
	var n rpc.ReceiptNotification
	if err := json.Unmarshal(params, &n); err != nil {
		s.log.Warn("mcpserver: bad receipt notification", "err", err)
		return
	}
	if !n.AckRequired || n.Change != rpc.ReceiptAcknowledged {
		return // a delivery, even one after the acknowledgement
	}
	s.acksMu.Lock()
	if len(s.acks) == maxAcks {
		s.acks = s.acks[1:]
	}
	s.acks = append(s.acks, AckInfo{MessageID: n.MessageID, By: n.Receipt.AgentID, Note: n.Receipt.Note, ReplyID: n.Receipt.ReplyID})
	s.acksMu.Unlock()
	s.queue.wake()
}

// hasAck reports whether an acknowledgement is queued.
func (s *Server) hasAck() bool {
	s.acksMu.Lock()
	defer s.acksMu.Unlock()
	return len(s.acks) > 0
}

// takeAck takes the oldest queued acknowledgement, nil if none.
func (s *Server) takeAck() *AckInfo {
	s.acksMu.Lock()
	defer s.acksMu.Unlock()
	if len(s.acks) == 0 {
		return nil
	}
	a := s.acks[0]
	s.acks = s.acks[1:]
	return &a
}
