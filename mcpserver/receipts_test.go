package mcpserver_test

import (
	"context"
	"testing"
	"time"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/mcpserver"
	"github.com/thrumhq/thrum/rpc"
)

// receiptOf returns agent's receipt of message id.
func receiptOf(t testing.TB, n *thrum.Node, id, agent string) rpc.Receipt {
	t.Helper()
	for _, r := range getMessage(t, n, "", id).Receipts {
		if r.AgentID == agent {
			return r
		}
	}
	t.Fatalf("%s has no receipt for %s", id, agent)
	return rpc.Receipt{}
}

// Send, then wait for the acknowledgement, from MCP alone: the recipient
// sees that one is asked, its wait delivers the message (and says so in
// the receipt), its reply acknowledges it, and the sender's wait with
// acks returns that acknowledgement — whether it came while the sender
// waited or before.
func TestSendThenWaitForTheAck(t *testing.T) {
	n := newNode(t, nil)
	alice := connect(t, n, addAgent(t, n, "alice", "implementer", "auth"), nil)
	bob := connect(t, n, addAgent(t, n, "bob", "reviewer", "auth"), nil)
	carol := connect(t, n, addAgent(t, n, "carol", "reviewer", "ui"), nil)

	sent := call[mcpserver.SendMessageOutput](t, alice, "send_message", args{"to": "@bob", "content": "review #42?",
		"ack_required": true, "ack_within": "30m"})
	got := call[mcpserver.WaitForMessageOutput](t, bob, "wait_for_message", args{"timeout": 10})
	if got.Message == nil || got.Message.MessageID != sent.MessageID || !got.Message.AckRequired {
		t.Fatalf("bob's wait: %+v, want the message, ack_required", got)
	}
	if r := receiptOf(t, n, sent.MessageID, "bob"); r.State != rpc.ReceiptDelivered || r.Via != rpc.ViaWaitForMessage {
		t.Fatalf("bob's receipt after his wait: %+v", r)
	}

	// The sender waits first; the reply wakes it.
	type result struct {
		out mcpserver.WaitForMessageOutput
	}
	done := make(chan result, 1)
	go func() {
		done <- result{call[mcpserver.WaitForMessageOutput](t, alice, "wait_for_message", args{"timeout": 30, "acks": true})}
	}()
	waitUntil(t, "alice's wait to arm its claim", func() bool { return mcpserver.ArmedInDaemon(alice.srv) })
	reply := call[mcpserver.SendMessageOutput](t, bob, "send_message", args{"to": "alice", "content": "looks good", "reply_to": sent.MessageID})
	var r result
	select {
	case r = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("alice's wait with acks was not woken by the acknowledgement")
	}
	if r.out.Status != "acknowledged" || r.out.Ack == nil || r.out.Ack.MessageID != sent.MessageID || r.out.Ack.By != "bob" ||
		r.out.Ack.ReplyID != reply.MessageID || r.out.Message != nil {
		t.Fatalf("alice's wait: %+v (ack %+v)", r.out, r.out.Ack)
	}
	// The reply itself is a message for alice: it is still hers to read.
	if got := call[mcpserver.WaitForMessageOutput](t, alice, "wait_for_message", args{"timeout": 10}); got.Message == nil || got.Message.MessageID != reply.MessageID {
		t.Fatalf("alice's next wait: %+v, want bob's reply", got)
	}

	// Acknowledged before the sender waits: the acknowledgement is queued.
	second := call[mcpserver.SendMessageOutput](t, alice, "send_message", args{"to": "@carol", "content": "and this?", "ack_required": true})
	checked := call[mcpserver.CheckMessagesOutput](t, carol, "check_messages", args{})
	if len(checked.Messages) != 1 || !checked.Messages[0].AckRequired {
		t.Fatalf("carol's check: %+v", checked)
	}
	if r := receiptOf(t, n, second.MessageID, "carol"); r.State != rpc.ReceiptDelivered || r.Via != rpc.ViaCheckMessages {
		t.Fatalf("carol's receipt after her check: %+v", r)
	}
	if _, err := n.AckMessage(thrum.AsAgent(context.Background(), "carol"), &rpc.AckMessageParams{MessageID: second.MessageID, Note: "done"}); err != nil {
		t.Fatal(err)
	}
	got = call[mcpserver.WaitForMessageOutput](t, alice, "wait_for_message", args{"timeout": 10, "acks": true})
	if got.Status != "acknowledged" || got.Ack == nil || got.Ack.MessageID != second.MessageID || got.Ack.By != "carol" || got.Ack.Note != "done" {
		t.Fatalf("alice's wait after carol's ack: %+v", got)
	}
	// A wait without acks leaves a queued acknowledgement for one with.
	third := call[mcpserver.SendMessageOutput](t, alice, "send_message", args{"to": "@bob", "content": "ack me", "ack_required": true})
	if _, err := n.AckMessage(thrum.AsAgent(context.Background(), "bob"), &rpc.AckMessageParams{MessageID: third.MessageID}); err != nil {
		t.Fatal(err)
	}
	plain := send(t, n, "bob", "@alice", "plain", "normal")
	if got := call[mcpserver.WaitForMessageOutput](t, alice, "wait_for_message", args{"timeout": 10}); got.Ack != nil || got.Message == nil || got.Message.MessageID != plain {
		t.Fatalf("a wait without acks: %+v, want bob's plain message", got)
	}
	if got := call[mcpserver.WaitForMessageOutput](t, alice, "wait_for_message", args{"timeout": 10, "acks": true}); got.Ack == nil || got.Ack.MessageID != third.MessageID {
		t.Fatalf("the next wait with acks: %+v, want bob's acknowledgement", got)
	}

	// Bad requests for an acknowledgement are refused, with nothing sent.
	callErr(t, alice, "send_message", args{"to": "@bob", "content": "x", "ack_within": "-1h"}, "out of range")
	callErr(t, alice, "send_message", args{"to": "@bob", "content": "x", "ack_within": "tomorrow"}, "duration")
}

// waitUntil polls cond until it holds, failing after 10 s.
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// One acknowledgement is returned once: a reply acknowledges, and the
// read that thrum reply makes after it (delivery by reply) pushes the
// receipt again, acknowledged, but as a delivery, which a wait with acks
// does not return.
func TestAckReturnedOnceWhenTheReplyIsReadAfter(t *testing.T) {
	n := newNode(t, nil)
	alice := connect(t, n, addAgent(t, n, "alice", "implementer", "auth"), nil)
	addAgent(t, n, "bob", "reviewer", "auth")
	sent := call[mcpserver.SendMessageOutput](t, alice, "send_message", args{"to": "@bob", "content": "ship it?", "ack_required": true})
	bob := thrum.AsAgent(context.Background(), "bob")
	reply, err := n.SendMessage(bob, &rpc.SendMessageParams{Content: "yes", Mentions: []string{"@alice"},
		Refs: []rpc.Pair{{Type: rpc.RefReplyTo, Value: sent.MessageID}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.MarkRead(bob, &rpc.MarkReadParams{MessageIDs: []string{sent.MessageID}, Via: rpc.ViaReply}); err != nil {
		t.Fatal(err)
	}
	got := call[mcpserver.WaitForMessageOutput](t, alice, "wait_for_message", args{"timeout": 10, "acks": true})
	if got.Status != "acknowledged" || got.Ack == nil || got.Ack.ReplyID != reply.MessageID {
		t.Fatalf("alice's wait: %+v, want bob's acknowledgement by reply", got)
	}
	// The reply is a message for alice; take it, then nothing is left.
	if got := call[mcpserver.WaitForMessageOutput](t, alice, "wait_for_message", args{"timeout": 10, "acks": true}); got.Message == nil || got.Message.MessageID != reply.MessageID {
		t.Fatalf("alice's second wait: %+v (ack %+v), want bob's reply", got, got.Ack)
	}
	if got := call[mcpserver.WaitForMessageOutput](t, alice, "wait_for_message", args{"timeout": 1, "acks": true}); got.Ack != nil || got.Message != nil {
		t.Fatalf("alice's third wait: %+v (ack %+v), want nothing: the acknowledgement was returned", got, got.Ack)
	}
}
