package natsync_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/rpc"
)

// BenchmarkSendPublished: sends from 8 agents of one node whose Syncer
// publishes them (the server in process), for a CPU profile of the
// publishing side (cmd/thrum's BenchmarkNATSSend has the figures).
func BenchmarkSendPublished(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run("nats="+strconv.FormatBool(on), func(b *testing.B) { benchSend(b, on) })
	}
}

func benchSend(b *testing.B, on bool) {
	ns := startServer(b, nil)
	cfg := testConfig(ns)
	initStream(b, cfg)
	a := newMachine(b, "a", cfg)
	var agents []string
	for i := range 8 {
		name := "s" + strconv.Itoa(i)
		a.register(name)
		agents = append(agents, name)
	}
	settle(b, a)
	if !on {
		a.stopSync()
	}
	var next atomic.Int64
	b.ResetTimer()
	var wg sync.WaitGroup
	for _, name := range agents {
		wg.Go(func() {
			ctx := thrum.AsAgent(context.Background(), name)
			for next.Add(1) <= int64(b.N) {
				if _, err := a.n.SendMessage(ctx, &rpc.SendMessageParams{Content: "rate", Mentions: []string{"@s0"}}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	if on {
		settle(b, a)
	}
}
