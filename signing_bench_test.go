package thrum_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/internal/thrumtest"
	"github.com/thrumhq/thrum/rpc"
)

// BenchmarkSendSigned sends messages through the node's API from 8
// agents at once, unsigned (as before signatures) and signed, side by
// side in one run, with the log fsynced (durable) and not (nosync, where
// the CPU a signature costs shows most). It reports sends/s and the log
// bytes per message event.
//
//	go test -run '^$' -bench SendSigned -benchtime 4000x .
func BenchmarkSendSigned(b *testing.B) {
	for _, durable := range []bool{true, false} {
		for _, signed := range []bool{false, true} {
			name := fmt.Sprintf("durable=%v/signed=%v", durable, signed)
			b.Run(name, func(b *testing.B) { benchSend(b, durable, signed, false) })
		}
	}
}

func benchSend(b *testing.B, durable, signed, sealed bool) {
	n := thrumtest.OpenNode(b, &thrum.Options{NoSync: !durable})
	if !signed {
		thrum.SignOff(n)
	}
	if sealed {
		if _, err := n.NewKey(context.Background(), &rpc.KeyNewParams{}); err != nil {
			b.Fatal(err)
		}
	}
	const agents = 8
	for i := range agents {
		thrumtest.Register(b, n, fmt.Sprintf("agent_%d", i), "implementer", "core")
	}
	ctx := context.Background()
	var next atomic.Int64
	b.SetParallelism(agents / 2) // 8 senders on this machine's 2 cores
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		me := fmt.Sprintf("agent_%d", next.Add(1)%agents)
		actx := thrum.AsAgent(ctx, me)
		for pb.Next() {
			if _, err := n.SendMessage(actx, &rpc.SendMessageParams{Content: "the build is green on main; merging the signing branch next", Mentions: []string{"@agent_0"}}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "sends/s")
	var bytes, events int
	_, err := n.EventLog().Scan(ctx, nil, func(e *eventlog.Event) error {
		if e.Type == eventlog.TypeMessageCreate {
			bytes += len(e.Raw) + 1
			events++
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(bytes)/float64(events), "B/event")
}
