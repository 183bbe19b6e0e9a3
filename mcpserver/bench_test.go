package mcpserver_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/inbox"
	"github.com/thrumhq/thrum/internal/thrumtest"
	"github.com/thrumhq/thrum/mcpserver"
)

// BenchmarkSendToWait measures DESIGN.md's budget "send_message → woken
// wait_for_message p99 < 10 ms" end to end through MCP: bob's
// wait_for_message is already blocked, alice calls send_message, and the
// time is from just before alice's call to bob's call returning the
// message, framed — which includes claiming it: bob's wait has a standing claim
// armed, so the daemon marks the message read for bob in the send's own
// commit and pushes it to bob's server whole. Both agents use
// go-sdk clients over in-memory MCP transports, or over stdio (the
// newline-delimited stream on OS pipes that thrum mcp serve reads, with
// its screen); their servers reach the node in process (Node.MCPServer)
// or over a Unix socket, as thrum mcp serve reaches the daemon. ns/op
// includes a pause per iteration that lets the wait block; read p50-ms
// and p99-ms.
//
//	go test -run '^$' -bench SendToWait -benchtime 500x ./mcpserver/
func BenchmarkSendToWait(b *testing.B) {
	b.Run("in-process", func(b *testing.B) { benchSendToWait(b, nil, false, false) })
	b.Run("unix-socket", func(b *testing.B) { benchSendToWait(b, nil, true, false) })
	b.Run("stdio-unix-socket", func(b *testing.B) { benchSendToWait(b, nil, true, true) })
	// Without fsync: what the path costs beyond the durable writes.
	b.Run("in-process-nosync", func(b *testing.B) { benchSendToWait(b, &thrum.Options{NoSync: true}, false, false) })
	b.Run("stdio-unix-socket-nosync", func(b *testing.B) { benchSendToWait(b, &thrum.Options{NoSync: true}, true, true) })
}

// stdioPipes returns the two ends of a pair of OS pipes as MCP
// transports: the server's, as thrum mcp serve reads stdin and writes
// stdout, and its host's.
func stdioPipes(b testing.TB) (server, client mcp.Transport) {
	b.Helper()
	inR, inW, err := os.Pipe()
	if err != nil {
		b.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		b.Fatal(err)
	}
	return mcpserver.NewLineTransport(inR, outW), &mcp.IOTransport{Reader: outR, Writer: inW}
}

// serveStdio runs srv on a pair of OS pipes, as a host runs thrum mcp
// serve, and connects a go-sdk client to the other ends.
func serveStdio(b testing.TB, srv *mcpserver.Server, id mcpserver.Identity) *agentClient {
	b.Helper()
	st, ct := stdioPipes(b)
	go srv.Run(context.Background(), st)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).Connect(context.Background(), ct, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		cs.Close()
		srv.Close()
	})
	return &agentClient{id: id, srv: srv, cs: cs}
}

func benchSendToWait(b *testing.B, opts *thrum.Options, socket, stdio bool) {
	n := newNode(b, opts)
	aliceID := addAgent(b, n, "alice", "implementer", "auth")
	bobID := addAgent(b, n, "bob", "reviewer", "auth")
	var alice, bob *agentClient
	if socket {
		d := thrumtest.ServeUnix(b, n)
		for _, p := range []struct {
			id  mcpserver.Identity
			out **agentClient
		}{{aliceID, &alice}, {bobID, &bob}} {
			srv, err := mcpserver.New(context.Background(), dialer(d), p.id, nil)
			if err != nil {
				b.Fatal(err)
			}
			if stdio {
				*p.out = serveStdio(b, srv, p.id)
			} else {
				*p.out = serve(b, srv, p.id)
			}
		}
	} else {
		alice, bob = connect(b, n, aliceID, nil), connect(b, n, bobID, nil)
	}
	ctx := context.Background()
	in := args{"to": "@bob", "content": "ping"}

	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		ch := startWait(bob, args{"timeout": 30})
		time.Sleep(2 * time.Millisecond) // the wait reaches the server and blocks
		b.StartTimer()
		start := time.Now()
		res, err := alice.rawCall(ctx, "send_message", in)
		if err != nil || res.IsError {
			b.Fatalf("send_message: %v %v", err, res)
		}
		r := <-ch
		if r.err != nil || r.res.IsError {
			b.Fatalf("wait_for_message: %v %v", r.err, r.res)
		}
		lat = append(lat, r.at.Sub(start))
	}
	b.StopTimer()
	thrumtest.ReportLatencies(b, lat)
}

// BenchmarkSendToChannel measures the channel's budget "send → channel
// ring: p99 < 10 ms": bob's server is a Claude Code channel
// (Options.Channel) and his host takes each notifications/claude/channel
// off the wire; alice calls send_message, and the time is from just
// before her call to bob's host reading the ring — which includes the
// ring's count of bob's unread messages. Each send comes a ring's
// interval (inbox.DoorbellEvery) after the last, as the first message
// after a quiet second does, so it rings at once. In process, or as thrum
// mcp serve --channel runs (stdio on OS pipes, the daemon over a Unix
// socket). Read p50-ms and p99-ms; ns/op includes the second's pause.
//
//	go test -run '^$' -bench SendToChannel -benchtime 50x ./mcpserver/
func BenchmarkSendToChannel(b *testing.B) {
	b.Run("in-process", func(b *testing.B) { benchSendToChannel(b, nil, false) })
	b.Run("stdio-unix-socket", func(b *testing.B) { benchSendToChannel(b, nil, true) })
	// Without fsync: what the path costs beyond the durable write, which
	// after a quiet second is the slowest part here.
	b.Run("in-process-nosync", func(b *testing.B) { benchSendToChannel(b, &thrum.Options{NoSync: true}, false) })
}

func benchSendToChannel(b *testing.B, opts *thrum.Options, stdio bool) {
	n := newNode(b, opts)
	aliceID := addAgent(b, n, "alice", "implementer", "auth")
	bobID := addAgent(b, n, "bob", "reviewer", "auth")
	alice := connect(b, n, aliceID, nil)
	var srv *mcpserver.Server
	var err error
	var st, ct mcp.Transport
	if stdio {
		d := thrumtest.ServeUnix(b, n)
		srv, err = mcpserver.New(context.Background(), dialer(d), bobID, &mcpserver.Options{Channel: true})
		st, ct = stdioPipes(b)
	} else {
		srv, err = n.MCPServer(context.Background(), bobID, &mcpserver.Options{Channel: true})
		st, ct = mcp.NewInMemoryTransports()
	}
	if err != nil {
		b.Fatal(err)
	}
	go srv.Run(context.Background(), st)
	h := newHost(ct)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "claude-code", Version: "2"}, nil).Connect(context.Background(), h, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		cs.Close()
		srv.Close()
	})
	ctx := context.Background()
	in := args{"to": "@bob", "content": "ping"}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		time.Sleep(inbox.DoorbellEvery + 50*time.Millisecond) // the next message rings at once
		b.StartTimer()
		start := time.Now()
		res, err := alice.rawCall(ctx, "send_message", in)
		if err != nil || res.IsError {
			b.Fatalf("send_message: %v %v", err, res)
		}
		select {
		case <-h.events:
		case <-time.After(30 * time.Second):
			b.Fatal("no channel event")
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	thrumtest.ReportLatencies(b, lat)
}
