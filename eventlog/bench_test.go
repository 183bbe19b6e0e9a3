package eventlog

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
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

// BenchmarkSignVerify signs a message line as the committer does and
// verifies it as admission does (ParseSig, VerifyLine): the cost a
// signed event adds across machines.
//
//	go test -run '^$' -bench SignVerify ./eventlog/
func BenchmarkSignVerify(b *testing.B) {
	pub, priv := newKey(b)
	sign := signer(priv, "0123456789abcdef")
	var buf bytes.Buffer
	e := &Event{ID: NewID(), Type: TypeMessageCreate, Time: time.Now(), Payload: MessageCreate{MessageID: "msg_" + NewID(), AgentID: "alice",
		SessionID: "ses_" + NewID(), Format: "markdown", Content: "the build is green on main; merging the signing branch next",
		Refs: []Pair{{"mention", "bob"}}, Priority: "normal", Recipients: []string{"bob"}}}
	if err := e.encode(&buf, e.Payload); err != nil {
		b.Fatal(err)
	}
	line := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	signedLine := signLine(b, line, sign)
	signOnce := func() { signLine(b, line, sign) }
	verifyOnce := func() {
		s, unsigned, ok, err := ParseSig(signedLine)
		if !ok || err != nil || !VerifyLine("0123456789abcdef", s, unsigned, pub) {
			b.Fatal("does not verify")
		}
	}
	b.Run("sign", func(b *testing.B) {
		for b.Loop() {
			signOnce()
		}
	})
	b.Run("verify", func(b *testing.B) {
		for b.Loop() {
			verifyOnce()
		}
	})
	b.Run("sign+verify", func(b *testing.B) {
		for b.Loop() {
			signOnce()
			verifyOnce()
		}
	})
}

// BenchmarkSealedField seals and opens one field (a message's content of
// 60 bytes and of 1 KiB), and decodes a whole message.create line as a
// rebuild does, in clear and sealed with the key held: the cost sealing
// adds to a rebuild, per event. It reports the bytes a sealed field
// holds beyond its plaintext, before and after base64.
//
//	go test -run '^$' -bench SealedField ./eventlog/
func BenchmarkSealedField(b *testing.B) {
	keys := newTestKeys(b, true)
	for _, size := range []int{60, 1024} {
		plain := bytes.Repeat([]byte("x"), size)
		sealed := sealField(keys.sealing, "01JEVENTIDEVENTIDEVENTIDEV", TypeMessageCreate, "alice", "content", plain)
		b.Run(fmt.Sprintf("seal/%dB", size), func(b *testing.B) {
			for b.Loop() {
				sealField(keys.sealing, "01JEVENTIDEVENTIDEVENTIDEV", TypeMessageCreate, "alice", "content", plain)
			}
			b.ReportMetric(float64(SealOverhead), "B/field-raw")
			b.ReportMetric(float64(len(sealed)-size), "B/field-encoded")
		})
		b.Run(fmt.Sprintf("open/%dB", size), func(b *testing.B) {
			for b.Loop() {
				if _, err := openField(keys, "01JEVENTIDEVENTIDEVENTIDEV", TypeMessageCreate, "alice", "content", sealed); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	for _, seal := range []bool{false, true} {
		dir := b.TempDir()
		var opts *Options
		if seal {
			opts = &Options{TeamKeys: keys}
		}
		l := openLog(b, dir, opts)
		e := sealedCreate("alice")
		p := e.Payload.(MessageCreate)
		p.Content, p.Structured = "the build is green on main; merging the signing branch next", nil
		e.Payload = p
		appendOK(b, l, e)
		line := append([]byte(nil), e.Raw...)
		l.Close()
		b.Run(fmt.Sprintf("decode/sealed=%v", seal), func(b *testing.B) {
			var k TeamKeys
			if seal {
				k = keys
			}
			for b.Loop() {
				ev, err := DecodeLine(line)
				if err != nil {
					b.Fatal(err)
				}
				ev.decodePayload(k)
				if p := ev.decoded.(MessageCreate); p.Sealed != nil {
					b.Fatal("did not open")
				}
			}
			b.ReportMetric(float64(len(line)), "B/line")
		})
	}
}
