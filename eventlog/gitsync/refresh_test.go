package gitsync_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/thrumhq/thrum/rpc"
)

// Refresh: a caller waits for a round that started
// after its call, so what the remote had at the call is then applied;
// with no Run loop it waits only until its ctx ends.
func TestRefreshWaitsForAFreshRound(t *testing.T) {
	_, a, b := pair(t, loopOpts())
	ctx := context.Background()
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := a.s.Refresh(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Refresh without Run: %v, want the deadline", err)
	}

	a.run()
	b.register("carol", "tester")
	b.sync() // carol is on the remote; a has not looked since
	knows := func() bool {
		l, err := a.n.ListAgents(ctx, &rpc.ListAgentsParams{Role: "tester"})
		return err == nil && len(l.Agents) == 1 && l.Agents[0].AgentID == "carol"
	}
	if knows() {
		t.Fatal("a knows carol before any round")
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	start := time.Now()
	if err := a.s.Refresh(wctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("Refresh took %v", time.Since(start).Round(time.Millisecond))
	if !knows() {
		t.Fatal("after Refresh, a does not know carol")
	}
}
