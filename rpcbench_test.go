package thrum_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/thrumhq/thrum/rpc"
)

// Benchmarks of the daemon's API over its real sockets: the durable send
// and the send → push latency of DESIGN.md's performance budget, as a
// client sees them. Run them with
//
//	go test -run '^$' -bench 'RPCSend|PushLatency' -benchtime 2000x .

// benchConn opens a connection to d over transport, bound to agent: by
// name over the Unix socket, by token over the WebSocket.
func benchConn(b *testing.B, d *daemon, transport, agent string, onNote func(string, json.RawMessage)) *rpc.Client {
	b.Helper()
	ctx := context.Background()
	var c *rpc.Client
	auth := &rpc.AuthParams{AgentID: agent}
	switch transport {
	case "unix":
		c = d.unix(b, onNote)
	case "websocket":
		c = d.ws(b, onNote)
		auth = &rpc.AuthParams{Token: d.tokens[agent]}
	default:
		b.Fatalf("unknown transport %q", transport)
	}
	if r, err := c.Auth(ctx, auth); err != nil || r.AgentID != agent {
		b.Fatalf("auth as %s over %s: %+v %v", agent, transport, r, err)
	}
	return c
}

var benchTransports = []string{"unix", "websocket"}

// BenchmarkRPCSend measures message.send acknowledged by a durable daemon
// (fsynced), from 1 and 8 clients, each on its own connection and each a
// distinct agent, so each appends to its own shard of the log, as 8
// agents at work do (8 connections of one agent would share one shard
// and one fsync per commit). BenchmarkSendVsDisk compares these rates
// with the disk's.
func BenchmarkRPCSend(b *testing.B) {
	for _, transport := range benchTransports {
		b.Run(transport, func(b *testing.B) {
			for _, clients := range []int{1, 8} {
				b.Run("clients="+strconv.Itoa(clients), func(b *testing.B) {
					benchRPCSend(b, transport, clients)
				})
			}
		})
	}
}

func benchRPCSend(b *testing.B, transport string, clients int) {
	d := startDaemon(b)
	conns := make([]*rpc.Client, clients)
	for i := range conns {
		agent := fmt.Sprintf("sender_%d", i)
		r, err := d.n.RegisterAgent(context.Background(), &rpc.RegisterAgentParams{Name: agent, Role: "implementer", Module: "m"})
		if err != nil {
			b.Fatal(err)
		}
		d.tokens[agent] = r.Token
		if _, err := d.n.StartSession(context.Background(), &rpc.StartSessionParams{AgentID: agent}); err != nil {
			b.Fatal(err)
		}
		conns[i] = benchConn(b, d, transport, agent, nil)
	}
	ctx := context.Background()
	var lat latencies
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				n := next.Add(1)
				if n > int64(b.N) {
					return
				}
				p := &rpc.SendMessageParams{Content: fmt.Sprintf("bench %d from client %d", n, i), Mentions: []string{"@bob"}}
				t0 := time.Now()
				if _, err := c.SendMessage(ctx, p); err != nil {
					b.Error(err)
					return
				}
				lat.add(time.Since(t0))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "sends/s")
	lat.report(b)
}

// BenchmarkPushLatency measures, over each transport, the time from just
// before alice's message.send to the moment bob's subscribed connection
// receives the notification.message for it.
func BenchmarkPushLatency(b *testing.B) {
	for _, transport := range []string{"websocket", "unix"} {
		b.Run(transport, func(b *testing.B) {
			benchPushLatency(b, transport)
		})
	}
}

type pushArrival struct {
	id string
	at time.Time
}

func benchPushLatency(b *testing.B, transport string) {
	d := startDaemon(b)
	ctx := context.Background()
	arrivals := make(chan pushArrival, 1024)
	sub := benchConn(b, d, transport, "bob", func(method string, params json.RawMessage) {
		at := time.Now() // first, before any decoding
		if method != rpc.NotificationMessage {
			return
		}
		var n struct {
			MessageID string `json:"message_id"`
		}
		if json.Unmarshal(params, &n) == nil {
			arrivals <- pushArrival{n.MessageID, at}
		}
	})
	if _, err := sub.Subscribe(ctx, &rpc.SubscribeParams{MentionRole: "bob"}); err != nil {
		b.Fatal(err)
	}
	snd := benchConn(b, d, transport, "alice", nil)
	var lat latencies
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		sent, err := snd.SendMessage(ctx, &rpc.SendMessageParams{Content: "push " + strconv.Itoa(i), Mentions: []string{"@bob"}})
		if err != nil {
			b.Fatal(err)
		}
		// The notification may arrive before the reply: wait for its id.
		timeout := time.After(10 * time.Second)
	wait:
		for {
			select {
			case a := <-arrivals:
				if a.id == sent.MessageID {
					lat.add(a.at.Sub(t0))
					break wait
				}
			case <-timeout:
				b.Fatalf("no notification for %s within 10s", sent.MessageID)
			}
		}
	}
	b.StopTimer()
	lat.report(b)
}

// BenchmarkRPCSendFanout measures message.send (one client, Unix socket)
// with no subscriber and with 100 WebSocket subscribers, each subscribed
// to every message and reading its pushes: what fan-out costs the sender.
// The subscribers run in a process of their own (subscribers=100), as
// the programs that watch a daemon do, or as goroutines of this one
// (subscribers=100-inprocess), where the daemon's scheduler queues their
// reads with its own work. cpu-ms/send is the CPU time of the processes
// (daemon, sender and subscribers) per send, until every notification
// was read: a figure that holds better than the rate on a busy machine.
// reads/send and writes/send count their read and write system calls
// (Linux), which fan-out multiplies: a notification costs the daemon a
// write and its subscriber's client a read that takes it and one that
// finds the socket empty, unless several share them (see DESIGN.md,
// "Corking adapts"). push-p50-ms and push-p99-ms are the time from just before
// a send to its notification's arrival at the last subscriber, the one
// the daemon queues it for last.
//
//	go test -run '^$' -bench 'RPCSendFanout' -benchtime 2000x -count 3 .
func BenchmarkRPCSendFanout(b *testing.B) {
	for _, run := range []struct {
		subs      int
		inProcess bool
	}{{0, false}, {100, false}, {100, true}} {
		name := "subscribers=" + strconv.Itoa(run.subs)
		if run.inProcess {
			name += "-inprocess"
		}
		b.Run(name, func(b *testing.B) {
			d := startDaemon(b)
			ctx := context.Background()
			var got atomic.Int64
			var pushes pushTimes
			var child *fanoutProcess
			if run.inProcess {
				for i := range run.subs {
					c := benchConn(b, d, "websocket", "bob", func(method string, params json.RawMessage) {
						if method == rpc.NotificationMessage {
							got.Add(1)
							if i == run.subs-1 {
								pushes.arrived(params)
							}
						}
					})
					if _, err := c.Subscribe(ctx, &rpc.SubscribeParams{All: true}); err != nil {
						b.Fatal(err)
					}
				}
			} else if run.subs > 0 {
				child = startFanoutProcess(b, d, "bob", run.subs)
				child.start(b)
			}
			snd := benchConn(b, d, "unix", "alice", nil)
			var lat latencies
			b.ResetTimer()
			cpu0, cpuOK := processCPU()
			r0, w0, sysOK := processSyscalls()
			start := time.Now()
			for i := range b.N {
				t0 := time.Now()
				r, err := snd.SendMessage(ctx, &rpc.SendMessageParams{Content: "fan-out " + strconv.Itoa(i), Mentions: []string{"@bob"}})
				if err != nil {
					b.Fatal(err)
				}
				lat.add(time.Since(t0))
				if run.subs > 0 {
					pushes.sent(r.MessageID, t0)
				}
			}
			elapsed := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "sends/s")
			lat.report(b)
			// Every subscriber got every message (none was dropped as slow).
			want := int64(run.subs * b.N)
			var childCPU time.Duration
			var childReads, childWrites int64
			if child != nil {
				rep := child.report(b, int(want))
				got.Store(rep.Got)
				for id, at := range rep.Arrivals {
					pushes.arrivedAt(id, at)
				}
				childCPU, childReads, childWrites = rep.CPU, rep.Reads, rep.Writes
			}
			deadline := time.Now().Add(30 * time.Second)
			for child == nil && got.Load() < want && time.Now().Before(deadline) { // the child waited already
				time.Sleep(10 * time.Millisecond)
			}
			if n := got.Load(); n != want {
				b.Fatalf("%d notifications delivered, want %d", n, want)
			}
			pushes.report(b)
			if cpu1, ok := processCPU(); ok && cpuOK {
				b.ReportMetric(float64(cpu1-cpu0+childCPU)/float64(time.Millisecond)/float64(b.N), "cpu-ms/send")
			}
			if r1, w1, ok := processSyscalls(); ok && sysOK {
				b.ReportMetric(float64(r1-r0+childReads)/float64(b.N), "reads/send")
				b.ReportMetric(float64(w1-w0+childWrites)/float64(b.N), "writes/send")
			}
		})
	}
}

// pushTimes pairs sends with their notifications' arrival, by message ID.
type pushTimes struct {
	mu      sync.Mutex
	sentAt  map[string]time.Time
	arrival map[string]time.Time
}

func (p *pushTimes) sent(id string, at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.sentAt == nil {
		p.sentAt = map[string]time.Time{}
	}
	p.sentAt[id] = at
}

// arrived records a notification's arrival now.
func (p *pushTimes) arrived(params []byte) {
	at := time.Now()
	if id, ok := noteMessageID(params); ok {
		p.arrivedAt(id, at)
	}
}

// arrivedAt records the arrival of message id's notification at at.
func (p *pushTimes) arrivedAt(id string, at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.arrival == nil {
		p.arrival = map[string]time.Time{}
	}
	p.arrival[id] = at
}

// report adds push-p50-ms and push-p99-ms to the benchmark's line.
func (p *pushTimes) report(b *testing.B) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var d []time.Duration
	for id, t0 := range p.sentAt {
		if at, ok := p.arrival[id]; ok {
			d = append(d, at.Sub(t0))
		}
	}
	if len(d) == 0 {
		return
	}
	slices.Sort(d)
	pct := func(q float64) float64 { return float64(d[int(q*float64(len(d)-1))].Microseconds()) / 1000 }
	b.ReportMetric(pct(0.50), "push-p50-ms")
	b.ReportMetric(pct(0.99), "push-p99-ms")
}
