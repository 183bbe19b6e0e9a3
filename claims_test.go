package thrum_test

import (
	"errors"
	"sync"
	"testing"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/internal/thrumtest"
	"github.com/thrumhq/thrum/rpc"
)

// Concurrent message.markRead calls of one agent, each naming every
// message, claim each message exactly once between them; after a restart
// the claims stand (every message is read, none can be claimed again).
func TestMarkReadClaimsOnce(t *testing.T) {
	f := newFixture(t, nil)
	var ids []string
	for range 40 {
		ids = append(ids, f.send("alice", rpc.SendMessageParams{Content: "x", Mentions: []string{"@reviewer"}}).MessageID)
	}
	const callers = 8
	claimed := make([][]string, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			// Each caller names the messages in its own rotation, so the
			// calls overlap in every order.
			order := append(append([]string(nil), ids[i*5:]...), ids[:i*5]...)
			for j := 0; j < len(order); j += 7 {
				r, err := f.n.MarkRead(f.as("bob"), &rpc.MarkReadParams{MessageIDs: order[j:min(j+7, len(order))]})
				if err != nil {
					t.Errorf("caller %d: %v", i, err)
					return
				}
				if r.MarkedCount != len(r.MarkedIDs) {
					t.Errorf("caller %d: marked_count %d but %d marked_ids", i, r.MarkedCount, len(r.MarkedIDs))
				}
				claimed[i] = append(claimed[i], r.MarkedIDs...)
			}
		})
	}
	wg.Wait()
	times := map[string]int{}
	for _, c := range claimed {
		for _, id := range c {
			times[id]++
		}
	}
	for _, id := range ids {
		if times[id] != 1 {
			t.Errorf("message %s claimed %d times, want exactly once", id, times[id])
		}
	}
	// carol reads separately: bob's claims are not hers.
	if r, err := f.n.MarkRead(f.as("carol"), &rpc.MarkReadParams{MessageIDs: ids}); err != nil || r.MarkedCount != len(ids) {
		t.Fatalf("carol: %+v %v", r, err)
	}

	if err := f.n.Close(); err != nil {
		t.Fatal(err)
	}
	n := thrumtest.OpenNodeIn(t, f.dir, nil)
	r, err := n.MarkRead(thrum.AsAgent(f.ctx, "bob"), &rpc.MarkReadParams{MessageIDs: ids})
	if err != nil || r.MarkedCount != 0 {
		t.Fatalf("after restart bob claimed %d (%v): the claims were not kept", r.MarkedCount, err)
	}
}

// The unknown IDs of a message.markRead error cross the wire as data, so
// that a client (the MCP server) can drop them and claim the rest.
func TestMarkReadUnknownIDsOverRPC(t *testing.T) {
	f := newFixture(t, nil)
	id := f.send("alice", rpc.SendMessageParams{Content: "x", Mentions: []string{"@bob"}}).MessageID
	c := f.n.Dial(nil)
	defer c.Close()
	if _, err := c.Auth(f.ctx, &rpc.AuthParams{AgentID: "bob"}); err != nil {
		t.Fatal(err)
	}
	_, err := c.MarkRead(f.ctx, &rpc.MarkReadParams{MessageIDs: []string{id, "msg_gone"}})
	var re *rpc.Error
	if !errors.As(err, &re) || re.Code != rpc.CodeNotFound {
		t.Fatalf("mark read with an unknown ID over RPC: %v", err)
	}
	d, _ := re.Data.(map[string]any)
	if ids, _ := d["unknown_ids"].([]any); len(ids) != 1 || ids[0] != "msg_gone" {
		t.Errorf("error data = %#v, want unknown_ids [msg_gone]", re.Data)
	}
	r, err := c.MarkRead(f.ctx, &rpc.MarkReadParams{MessageIDs: []string{id}})
	if err != nil || r.MarkedCount != 1 {
		t.Errorf("the known one, after: %+v %v (the failed call must not have marked it)", r, err)
	}
}

// message.markRead with with_messages returns the messages it claimed, in
// full and read, in the order of marked_ids, over the wire; what it did
// not claim (read before) is in neither.
func TestMarkReadWithMessages(t *testing.T) {
	f := newFixture(t, nil)
	first := f.send("alice", rpc.SendMessageParams{Content: "first", Mentions: []string{"@bob"}}).MessageID
	second := f.send("alice", rpc.SendMessageParams{Content: "second", Mentions: []string{"@bob"}, Priority: rpc.PriorityHigh}).MessageID
	c := f.n.Dial(nil)
	defer c.Close()
	if _, err := c.Auth(f.ctx, &rpc.AuthParams{AgentID: "bob"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.MarkRead(f.ctx, &rpc.MarkReadParams{MessageIDs: []string{first}}); err != nil {
		t.Fatal(err)
	}
	r, err := c.MarkRead(f.ctx, &rpc.MarkReadParams{MessageIDs: []string{first, second}, WithMessages: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.MarkedIDs) != 1 || r.MarkedIDs[0] != second {
		t.Fatalf("marked %v, want only %s (%s was read before)", r.MarkedIDs, second, first)
	}
	if len(r.Messages) != 1 {
		t.Fatalf("%d messages, want the one claimed: %+v", len(r.Messages), r.Messages)
	}
	m := r.Messages[0]
	if m.MessageID != second || m.Body.Content != "second" || m.Priority != rpc.PriorityHigh || m.Author.AgentID != "alice" || !m.IsRead {
		t.Fatalf("message %+v, want %s from alice, high, read", m, second)
	}
	// Without with_messages, none are returned.
	third := f.send("alice", rpc.SendMessageParams{Content: "third", Mentions: []string{"@bob"}}).MessageID
	if r, err := c.MarkRead(f.ctx, &rpc.MarkReadParams{MessageIDs: []string{third}}); err != nil || len(r.MarkedIDs) != 1 || r.Messages != nil {
		t.Fatalf("plain markRead: %+v %v", r, err)
	}
}
