package inbox

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/thrumhq/thrum/rpc"
)

// Acknowledgements. An Inbox whose agent sends a message with
// ack_required, or waits with Acks, subscribes its connection to the
// receipts of the agent's messages (and again on each new connection);
// each acknowledgement of a message that asked for one is queued, at most
// maxAcks of them (the oldest dropped), until a Wait with Acks returns it.
// Subscribing before the send means an acknowledgement that comes at once
// is not missed; those made while the connection was down are
// (message.listSent still has them).

// Ack is an acknowledgement of a message the agent sent with
// ack_required, as a Wait with Acks returns it.
type Ack struct {
	MessageID string `json:"message_id" jsonschema:"your message"`
	By        string `json:"by" jsonschema:"who acknowledged it"`
	Note      string `json:"note,omitempty"`
	ReplyID   string `json:"reply_id,omitempty" jsonschema:"the reply that acknowledged it"`
}

// maxAcks bounds the queue of acknowledgements.
const maxAcks = 100

// WatchAcks subscribes the connection to the agent's receipts, once, so
// that a Wait with Acks returns the acknowledgements of its messages:
// call it before a send that asks for one. A failure is logged: sends and
// waits go on without it.
func (ib *Inbox) WatchAcks(ctx context.Context) {
	ib.mu.Lock()
	ib.wantAcks = true
	ib.mu.Unlock()
	c, err := ib.Conn(ctx)
	if err != nil {
		return
	}
	if err := ib.subscribeAcks(ctx, c); err != nil {
		ib.log.Warn("inbox: subscribing to acknowledgements", "err", err)
	}
}

// subscribeAcks subscribes c to the agent's receipts, unless it is
// already (or being) or they were not asked for.
func (ib *Inbox) subscribeAcks(ctx context.Context, c *rpc.Client) error {
	ib.mu.Lock()
	if !ib.wantAcks || ib.acksOn == c {
		ib.mu.Unlock()
		return nil
	}
	ib.acksOn = c // before the call: a second caller does not subscribe again
	ib.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultCallTimeout)
	defer cancel()
	_, err := c.Subscribe(ctx, &rpc.SubscribeParams{Receipts: rpc.ReceiptsSent})
	if err == nil {
		return nil
	}
	ib.mu.Lock()
	if ib.acksOn == c {
		ib.acksOn = nil
	}
	ib.mu.Unlock()
	var re *rpc.Error
	if errors.As(err, &re) && re.Code == rpc.CodeInvalidParams {
		return errors.New("the thrum daemon does not push receipts: update it")
	}
	return err
}

// onReceipt queues an acknowledgement of a message that asked for one. It
// runs on the client's read goroutine and never blocks.
func (ib *Inbox) onReceipt(params json.RawMessage) {
	var n rpc.ReceiptNotification
	if err := json.Unmarshal(params, &n); err != nil {
		ib.log.Warn("inbox: bad receipt notification", "err", err)
		return
	}
	if !n.AckRequired || n.Change != rpc.ReceiptAcknowledged {
		return // a delivery, even one after the acknowledgement
	}
	ib.mu.Lock()
	defer ib.mu.Unlock()
	if len(ib.acks) == maxAcks {
		ib.acks = ib.acks[1:]
	}
	ib.acks = append(ib.acks, Ack{MessageID: n.MessageID, By: n.Receipt.AgentID, Note: n.Receipt.Note, ReplyID: n.Receipt.ReplyID})
	ib.wakeLocked()
}

// takeAck takes the oldest queued acknowledgement, nil if none.
func (ib *Inbox) takeAck() *Ack {
	ib.mu.Lock()
	defer ib.mu.Unlock()
	if len(ib.acks) == 0 {
		return nil
	}
	a := ib.acks[0]
	ib.acks = ib.acks[1:]
	return &a
}
