package eventlog

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
)

var benchPayload = MessageCreate{
	MessageID: "msg_01JAAAAAAAAAAAAAAAAAAAAAAA", AgentID: "alice", SessionID: "ses_01JAAAAAAAAAAAAAAAAAAAAAAA",
	Format: "markdown", Content: "Reviewed the change to the event log: looks good, one nit on naming.", Priority: "normal",
}

func reportEventsPerSec(b *testing.B, events int) {
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(events)/s, "events/s")
	}
}

// BenchmarkAppend measures durable appends from one goroutine: one write
// and one fsync per event.
func BenchmarkAppend(b *testing.B) {
	l := openLog(b, b.TempDir(), nil)
	ctx := context.Background()
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		if err := l.Append(ctx, &Event{Type: TypeMessageCreate, Shard: "alice", Payload: &benchPayload}); err != nil {
			b.Fatal(err)
		}
		n++
	}
	reportEventsPerSec(b, n)
}

// BenchmarkAppendParallel measures durable appends from 8 goroutines, which
// share writes and fsyncs through group commit.
func BenchmarkAppendParallel(b *testing.B) {
	const goroutines = 8
	l := openLog(b, b.TempDir(), nil)
	ctx := context.Background()
	shards := []string{"", "alice", "bob", "carol"}
	b.ReportAllocs()
	b.ResetTimer()
	var left atomic.Int64
	left.Store(int64(b.N))
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				if err := l.Append(ctx, &Event{Type: TypeMessageCreate, Shard: shards[g%len(shards)], Payload: &benchPayload}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	reportEventsPerSec(b, b.N)
}

// BenchmarkScan measures replaying 100k events over four shards.
func BenchmarkScan(b *testing.B) {
	const total, chunk = 100_000, 1000
	l := openLog(b, b.TempDir(), &Options{NoSync: true})
	ctx := context.Background()
	shards := []string{"", "alice", "bob", "carol"}
	for i := 0; i < total; i += chunk {
		evs := make([]*Event, chunk)
		for j := range evs {
			evs[j] = &Event{Type: TypeMessageCreate, Shard: shards[(i+j)%len(shards)], Payload: &benchPayload}
		}
		if err := l.Append(ctx, evs...); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	scans := 0
	for range b.N {
		n := 0
		if _, err := l.Scan(ctx, nil, func(*Event) error { n++; return nil }); err != nil {
			b.Fatal(err)
		}
		if n != total {
			b.Fatalf("Scan passed %d events, want %d", n, total)
		}
		scans++
	}
	b.StopTimer()
	reportEventsPerSec(b, scans*total)
}
