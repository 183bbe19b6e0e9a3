package thrum

import (
	"context"
	"testing"
	"time"
)

// gatedReader is a projection whose ReadState, for one agent, waits for
// a gate: every message is known and unread.
type gatedReader struct {
	agent   string
	entered chan struct{}
	gate    chan struct{}
}

func (r *gatedReader) ReadState(_ context.Context, ids []string, reader string) (map[string]bool, error) {
	if reader == r.agent {
		r.entered <- struct{}{}
		<-r.gate
	}
	out := map[string]bool{}
	for _, id := range ids {
		out[id] = false
	}
	return out, nil
}

// One agent's claim, held up in its projection query, holds up neither
// another agent's claim nor the release of another's; and an agent's
// entry is gone once its claims are released.
func TestClaimsArePerAgent(t *testing.T) {
	var c readClaims
	st := &gatedReader{agent: "alice", entered: make(chan struct{}), gate: make(chan struct{})}
	ctx := context.Background()

	aliceDone := make(chan []string)
	go func() {
		ids, release, err := c.claim(ctx, st, "alice", []string{"m1"})
		if err != nil {
			t.Error(err)
		}
		release()
		aliceDone <- ids
	}()
	<-st.entered // alice's claim holds her mutex, inside the query

	bobDone := make(chan struct{})
	go func() {
		defer close(bobDone)
		ids, release, err := c.claim(ctx, st, "bob", []string{"m1", "m2"})
		if err != nil || len(ids) != 2 {
			t.Errorf("bob claimed %v (%v), want m1 and m2", ids, err)
			return
		}
		// While bob's claim is pending, a second call of his gets nothing.
		again, release2, err := c.claim(ctx, st, "bob", []string{"m1", "m2"})
		if err != nil || len(again) != 0 {
			t.Errorf("bob's second call claimed %v (%v), want none while the first is pending", again, err)
		}
		release2()
		release()
	}()
	select {
	case <-bobDone:
	case <-time.After(10 * time.Second):
		t.Fatal("bob's claims waited for alice's query")
	}

	close(st.gate)
	if ids := <-aliceDone; len(ids) != 1 || ids[0] != "m1" {
		t.Fatalf("alice claimed %v, want m1", ids)
	}
	c.mu.Lock()
	left := len(c.agents)
	c.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d agents' entries left after every claim was released", left)
	}
}
