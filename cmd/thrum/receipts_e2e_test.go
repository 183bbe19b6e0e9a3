package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/thrumhq/thrum/identity"
	"github.com/thrumhq/thrum/internal/thrumtest"
	"github.com/thrumhq/thrum/mcpserver"
	"github.com/thrumhq/thrum/rpc"
)

// TestReceiptsEndToEnd follows one message asking for an acknowledgement
// through the built binary: alice sends it from her MCP server, bob's
// wait_for_message delivers it (his receipt says so), bob replies, and
// then alice's thrum sent --unacked no longer lists it, while her
// WebSocket connection, subscribed to her receipts, was pushed both the
// delivery and the acknowledgement. An acknowledgement by thrum ack, with
// a note, shows in thrum sent and thrum message get.
func TestReceiptsEndToEnd(t *testing.T) {
	t.Parallel()
	e := newMCPPair(t)

	// alice's WebSocket, subscribed to the receipts of her messages.
	var st struct {
		WSPort int `json:"ws_port"`
	}
	if err := json.Unmarshal([]byte(e.thrum("", "daemon", "status", "--json")), &st); err != nil || st.WSPort == 0 {
		t.Fatalf("daemon status: %v %+v", err, st)
	}
	f, err := identity.Load(filepath.Join(e.repo, ".thrum", "identities", "alice.json"))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var pushed []rpc.ReceiptNotification
	ctx := context.Background()
	ws, err := rpc.DialWebSocket(ctx, fmt.Sprintf("ws://127.0.0.1:%d/ws", st.WSPort), &rpc.ClientOptions{
		OnNotification: func(method string, params json.RawMessage) {
			var n rpc.ReceiptNotification
			if method == rpc.NotificationReceipt && json.Unmarshal(params, &n) == nil {
				mu.Lock()
				pushed = append(pushed, n)
				mu.Unlock()
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	if _, err := ws.Auth(ctx, &rpc.AuthParams{Token: f.Token}); err != nil {
		t.Fatal(err)
	}
	if _, err := ws.Subscribe(ctx, &rpc.SubscribeParams{Receipts: rpc.ReceiptsSent}); err != nil {
		t.Fatal(err)
	}

	alice, bob := e.serve("alice"), e.serve("bob")
	sent := mcpE2ECall[mcpserver.SendMessageOutput](t, alice, "send_message", map[string]any{"to": "@bob", "content": "review #42, please",
		"ack_required": true, "ack_within": "30m"})
	got := mcpE2EReceived(t, <-mcpE2EWait(bob, map[string]any{"timeout": 30}))
	if got.MessageID != sent.MessageID || !got.AckRequired {
		t.Fatalf("bob's wait returned %+v, want %s asking for an acknowledgement", got, sent.MessageID)
	}
	var g rpc.GetMessageResult
	if err := json.Unmarshal([]byte(e.thrum("alice", "message", "get", sent.MessageID, "--json")), &g); err != nil {
		t.Fatal(err)
	}
	if len(g.Message.Receipts) != 1 || g.Message.Receipts[0].State != rpc.ReceiptDelivered || g.Message.Receipts[0].Via != rpc.ViaWaitForMessage {
		t.Fatalf("receipts after bob's wait: %+v, want bob's delivered via wait_for_message", g.Message.Receipts)
	}
	unacked := func() []rpc.SentMessage {
		t.Helper()
		var r rpc.ListSentResult
		if err := json.Unmarshal([]byte(e.thrum("alice", "sent", "--unacked", "--json")), &r); err != nil {
			t.Fatal(err)
		}
		return r.Messages
	}
	if u := unacked(); len(u) != 1 || u[0].MessageID != sent.MessageID || u[0].Delivered != 1 || u[0].Acknowledged != 0 {
		t.Fatalf("thrum sent --unacked before the reply: %+v", u)
	}

	reply := mcpE2ECall[mcpserver.SendMessageOutput](t, bob, "send_message", map[string]any{"to": "alice", "content": "LGTM", "reply_to": sent.MessageID})
	if u := unacked(); len(u) != 0 {
		t.Fatalf("thrum sent --unacked after bob's reply still lists %+v", u)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(pushed)
		mu.Unlock()
		if n >= 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(pushed) != 2 {
		t.Fatalf("alice's WebSocket got %d receipts, want 2: %+v", len(pushed), pushed)
	}
	if d := pushed[0]; d.MessageID != sent.MessageID || d.Receipt.AgentID != "bob" || d.Receipt.State != rpc.ReceiptDelivered || d.Receipt.Via != rpc.ViaWaitForMessage {
		t.Errorf("first receipt %+v, want bob's delivery via wait_for_message", d)
	}
	if a := pushed[1]; a.MessageID != sent.MessageID || a.Receipt.State != rpc.ReceiptAcknowledged || a.Receipt.ReplyID != reply.MessageID || !a.AckRequired {
		t.Errorf("second receipt %+v, want bob's acknowledgement by reply %s", a, reply.MessageID)
	}

	// thrum send --ack and thrum ack, by the CLI alone.
	out := e.thrum("alice", "send", "ship it?", "--to", "@bob", "--ack-within", "1h", "--quiet")
	id := strings.TrimSpace(out)
	if r := e.run("alice", "ack", id); r.code == 0 || !strings.Contains(r.stderr, "only the agents it was sent to") {
		t.Errorf("alice acknowledging her own message: exit %d, %s", r.code, r.stderr)
	}
	if out := e.thrum("bob", "ack", id, "--note", "shipping at 5"); !strings.Contains(out, "Acknowledged "+id) {
		t.Errorf("thrum ack: %s", out)
	}
	if out := e.thrum("bob", "ack", id); !strings.Contains(out, "Already acknowledged") || !strings.Contains(out, "shipping at 5") {
		t.Errorf("a second thrum ack: %s", out)
	}
	if out := e.thrum("alice", "sent"); !strings.Contains(out, "1/1 delivered, 1 acked") || !strings.Contains(out, "done") {
		t.Errorf("thrum sent:\n%s", out)
	}
	if out := e.thrum("alice", "message", "get", id); !strings.Contains(out, `@bob  acknowledged just now: "shipping at 5" (delivered via ack just now)`) {
		t.Errorf("thrum message get:\n%s", out)
	}
	if out := e.thrum("bob", "inbox"); !strings.Contains(out, "[ack asked]") {
		t.Errorf("bob's inbox does not show that an acknowledgement is asked:\n%s", out)
	}
}

// TestReceiptsSyncAcrossClones: a message sent on clone a and delivered
// and acknowledged on clone b (the recipient's events, in its own shard)
// shows both on a after the clones sync through a bare remote.
func TestReceiptsSyncAcrossClones(t *testing.T) {
	t.Parallel()
	thrumBin := thrumtest.Binary(t)
	remote := thrumtest.GitRemote(t)
	a := &syncCLI{thrumCLI: &thrumCLI{t: t, repo: remote.Clone("a"), bin: thrumBin}, name: "a"}
	b := &syncCLI{thrumCLI: &thrumCLI{t: t, repo: remote.Clone("b"), bin: thrumBin}, name: "b"}
	for _, c := range []*syncCLI{a, b} {
		c.do("", "init")
		c.startDaemon("--sync-interval", "1h")
	}
	a.do("", "quickstart", "--name", "alice", "--role", "implementer", "--module", "auth")
	b.do("", "quickstart", "--name", "bob", "--role", "reviewer", "--module", "auth")
	// Each round may miss what came after it started: at most two passes.
	until := func(what string, done func() bool, rounds ...*syncCLI) {
		t.Helper()
		for pass := 1; !done(); pass++ {
			if pass > 2 {
				t.Fatalf("%s: not after %d passes of sync force", what, pass-1)
			}
			for _, c := range rounds {
				c.forceSync()
			}
		}
	}
	knowsBob := func() bool {
		var al rpc.ListAgentsResult
		a.json(&al, "", "agent", "list")
		for _, ag := range al.Agents {
			if ag.AgentID == "bob" {
				return true
			}
		}
		return false
	}
	until("a knows bob", knowsBob, b, a)

	var sent rpc.SendMessageResult
	a.json(&sent, "alice", "send", "Ship the fix?", "--to", "@bob", "--ack-within", "2h")
	bobHasIt := func() bool {
		var in rpc.ListMessagesResult
		b.json(&in, "bob", "inbox", "--unread")
		for _, m := range in.Messages {
			if m.MessageID == sent.MessageID {
				return m.AckRequired
			}
		}
		return false
	}
	until("b has the message, asking for an acknowledgement", bobHasIt, a, b)
	b.do("bob", "inbox", "--unread", "--mark-read")
	b.do("bob", "ack", sent.MessageID, "--note", "shipping")

	bobsReceipt := func() rpc.Receipt {
		var g rpc.GetMessageResult
		a.json(&g, "alice", "message", "get", sent.MessageID)
		if len(g.Message.Receipts) != 1 {
			t.Fatalf("a: receipts %+v, want bob's", g.Message.Receipts)
		}
		return g.Message.Receipts[0]
	}
	if r := bobsReceipt(); r.State != rpc.ReceiptQueued {
		t.Fatalf("a: bob's receipt before any sync: %+v, want queued", r)
	}
	until("a has bob's acknowledgement", func() bool { return bobsReceipt().State == rpc.ReceiptAcknowledged }, b, a)
	if r := bobsReceipt(); r.AgentID != "bob" || r.Via != rpc.ViaMarkRead || r.At == "" || r.Note != "shipping" || r.AckedAt == "" {
		t.Errorf("a: bob's receipt after sync: %+v, want delivered via mark_read and acknowledged with his note", r)
	}
	var unacked rpc.ListSentResult
	a.json(&unacked, "alice", "sent", "--unacked")
	if len(unacked.Messages) != 0 {
		t.Errorf("a: thrum sent --unacked after sync: %+v", unacked.Messages)
	}
}
