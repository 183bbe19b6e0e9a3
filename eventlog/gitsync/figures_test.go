package gitsync_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/rpc"
)

// TestSyncFigures prints what sync costs; it asserts only what makes
// the figures meaningful. Run it with
//
//	THRUM_SYNC_FIGURES=1 go test ./eventlog/gitsync -run 'TestSyncFigures$' -v
func TestSyncFigures(t *testing.T) {
	if os.Getenv("THRUM_SYNC_FIGURES") != "1" {
		t.Skip("set THRUM_SYNC_FIGURES=1 to print sync figures")
	}
	t.Run("import 10k", func(t *testing.T) {
		const n = 10000
		_, a, b := pair(t, nil)
		a.noSync = false // the importing side is durable, as in a daemon
		a.close()
		a.open()
		for i := 0; i < 3; i++ {
			if err := sendMany(b, "bob", "alice", n, nil, i); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			b.sync()
			push := time.Since(start)
			start = time.Now()
			a.sync()
			pull := time.Since(start)
			if got := a.total(); got != (i+1)*n {
				t.Fatalf("a holds %d messages, want %d", got, (i+1)*n)
			}
			t.Logf("batch %d: the round committing and pushing %d new local events took %v; the other clone's round importing them took %v (%.0f events/s); %d messages stored",
				i+1, n, push.Round(time.Millisecond), pull.Round(time.Millisecond), n/pull.Seconds(), (i+1)*n)
		}
	})

	t.Run("commits per 1000 messages", func(t *testing.T) {
		const n, gap = 1000, 5 * time.Millisecond
		// The Run loop with the default debounce, sends spread over time.
		remote, a, _ := pair(t, nil)
		a.run()
		c0, r0 := a.s.Status().Commits, a.s.Status().Rounds
		start := time.Now()
		spread(t, a, n, gap, nil)
		waitFor(t, time.Minute, "the loop to sync the last send", func() bool {
			st := a.s.Status()
			return !st.Pending && st.Rounds > r0 && remoteHas(t, remote, a)
		})
		st := a.s.Status()
		t.Logf("Run loop, debounce %v: %d messages one every %v (%v) made %d commits in %d rounds",
			500*time.Millisecond, n, gap, time.Since(start).Round(time.Millisecond), st.Commits-c0, st.Rounds-r0)

		// SyncOnce after every send.
		_, c, _ := pair(t, nil)
		c0 = c.s.Status().Commits
		start = time.Now()
		spread(t, c, n, gap, c.sync)
		t.Logf("SyncOnce per message: %d messages (%v) made %d commits", n, time.Since(start).Round(time.Millisecond), c.s.Status().Commits-c0)
	})
}

// spread sends n messages from alice, one every gap, calling after (if
// set) after each.
func spread(t *testing.T, c *clone, n int, gap time.Duration, after func()) {
	t.Helper()
	ctx := thrum.AsAgent(context.Background(), "alice")
	tick := time.NewTicker(gap)
	defer tick.Stop()
	for i := 0; i < n; i++ {
		<-tick.C
		if _, err := c.n.SendMessage(ctx, &rpc.SendMessageParams{Content: fmt.Sprint("spread ", i), Mentions: []string{"@bob"}}); err != nil {
			t.Fatal(err)
		}
		if after != nil {
			after()
		}
	}
}

// remoteHas reports whether the remote's a-sync holds the clone's HEAD.
func remoteHas(t *testing.T, remote string, c *clone) bool {
	head := gitT(t, c.wt, "rev-parse", "HEAD")
	_, err := gitIn(remote, "merge-base", "--is-ancestor", head, "refs/heads/a-sync")
	return err == nil
}

// BenchmarkImportRound measures a round that imports 1,000 new events
// from the other clone (the other clone's sends and push are not timed).
func BenchmarkImportRound(b *testing.B) {
	const n = 1000
	_, x, y := pair(b, nil)
	x.noSync = false
	x.close()
	x.open()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		if err := sendMany(y, "bob", "alice", n, nil, i); err != nil {
			b.Fatal(err)
		}
		y.sync()
		b.StartTimer()
		x.sync()
	}
	b.StopTimer()
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "events/s")
}
