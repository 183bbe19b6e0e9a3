package thrum_test

import (
	"sync"
	"testing"

	"github.com/thrumhq/thrum"
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
	n, err := thrum.Open(f.dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	r, err := n.MarkRead(thrum.AsAgent(f.ctx, "bob"), &rpc.MarkReadParams{MessageIDs: ids})
	if err != nil || r.MarkedCount != 0 {
		t.Fatalf("after restart bob claimed %d (%v): the claims were not kept", r.MarkedCount, err)
	}
}
