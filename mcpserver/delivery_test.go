package mcpserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/internal/thrumtest"
	"github.com/thrumhq/thrum/mcpserver"
	"github.com/thrumhq/thrum/rpc"
)

// wire wraps a client transport and records every message ID that comes
// back in a check_messages or wait_for_message result as it crosses the
// wire, and every message a channel event names (which delivers nothing) — also the results of calls the client
// had given up on, which it reads and drops. What an agent could have
// been handed is what crossed.
type wire struct {
	mcp.Transport
	rec *delivered
}

type delivered struct {
	mu    sync.Mutex
	times map[string]int
	by    map[string][]string // message ID → which consumers got it
	rung  map[string]bool     // message IDs a channel event named
}

func (d *delivered) note(who string, ids ...string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, id := range ids {
		d.times[id]++
		d.by[id] = append(d.by[id], who)
	}
}

func (d *delivered) total() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, c := range d.times {
		n += c
	}
	return n
}

func (w *wire) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := w.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &wireConn{Connection: c, rec: w.rec, who: fmt.Sprintf("%T", w.Transport)}, nil
}

type wireConn struct {
	mcp.Connection
	rec *delivered
	who string
}

func (c *wireConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	m, err := c.Connection.Read(ctx)
	if r, ok := m.(*jsonrpc.Request); ok && r.Method == mcpserver.ChannelMethod {
		var ev mcpserver.ChannelEvent
		if json.Unmarshal(r.Params, &ev) == nil {
			c.rec.mu.Lock()
			for _, id := range msgIDs.FindAllString(ev.Content, -1) {
				c.rec.rung[id] = true
			}
			c.rec.mu.Unlock()
		}
	}
	if r, ok := m.(*jsonrpc.Response); ok && r.Result != nil {
		var res struct {
			StructuredContent struct {
				Message *struct {
					MessageID string `json:"message_id"`
				} `json:"message"`
				Messages []struct {
					MessageID string `json:"message_id"`
				} `json:"messages"`
			} `json:"structuredContent"`
		}
		if json.Unmarshal(r.Result, &res) == nil {
			if m := res.StructuredContent.Message; m != nil {
				c.rec.note(c.who, m.MessageID)
			}
			for _, m := range res.StructuredContent.Messages {
				c.rec.note(c.who, m.MessageID)
			}
		}
	}
	return m, err
}

var msgIDs = regexp.MustCompile(`msg_[0-9A-Z]+`)

// TestDeliveryExactlyOnce: random senders send to bob by name, role,
// group and everyone at random priorities, while bob's three MCP servers
// — one over an in-memory transport, one over Streamable HTTP, and a
// Claude Code channel that rings as messages come — consume concurrently
// with waits (random priority filters), checks (random limits) and waits
// cancelled at random moments. Every message addressed to bob crosses the
// wire to him exactly once in a tool result, none is left unread, and the
// channel's rings, which deliver nothing, named messages meanwhile.
func TestDeliveryExactlyOnce(t *testing.T) {
	r := rand.New(rand.NewPCG(thrumtest.Seed(t), 11))
	n := newNode(t, nil)
	for _, s := range []struct{ name, role string }{{"alice", "implementer"}, {"carol", "implementer"}, {"dave", "ops"}, {"erin", "reviewer"}} {
		addAgent(t, n, s.name, s.role, "core")
	}
	bobID := addAgent(t, n, "bob", "reviewer", "core")
	ctx := context.Background()
	if _, err := n.CreateGroup(thrum.AsAgent(ctx, "alice"), &rpc.CreateGroupParams{Name: "backend"}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.AddGroupMember(thrum.AsAgent(ctx, "alice"), &rpc.GroupMembership{Group: "backend", MemberType: rpc.MemberAgent, MemberID: "bob"}); err != nil {
		t.Fatal(err)
	}
	rec := &delivered{times: map[string]int{}, by: map[string][]string{}, rung: map[string]bool{}}

	// Server A: in memory.
	srvA, err := n.MCPServer(ctx, bobID, nil)
	if err != nil {
		t.Fatal(err)
	}
	st, ct := mcp.NewInMemoryTransports()
	go srvA.Run(ctx, st)
	csA, err := mcp.NewClient(&mcp.Implementation{Name: "a", Version: "1"}, nil).Connect(ctx, &wire{Transport: ct, rec: rec}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Server B: Streamable HTTP.
	srvB, err := n.MCPServer(ctx, bobID, nil)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srvB.HTTPHandler())
	csB, err := mcp.NewClient(&mcp.Implementation{Name: "b", Version: "1"}, nil).Connect(ctx,
		&wire{Transport: &mcp.StreamableClientTransport{Endpoint: hs.URL, HTTPClient: bearerClient(bobID.Token), MaxRetries: -1}, rec: rec}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Server C: a channel, in memory.
	srvC, err := n.MCPServer(ctx, bobID, &mcpserver.Options{Channel: true})
	if err != nil {
		t.Fatal(err)
	}
	st, ct = mcp.NewInMemoryTransports()
	go srvC.Run(ctx, st)
	csC, err := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, nil).Connect(ctx, &wire{Transport: ct, rec: rec}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		csA.Close()
		csB.Close()
		csC.Close()
		srvA.EndWaits()
		srvB.EndWaits()
		hs.Close()
		srvA.Close()
		srvB.Close()
		srvC.Close()
	})

	// Senders.
	var sent []string
	var sentMu sync.Mutex
	var senders sync.WaitGroup
	addrs := []string{"@bob", "bob", "@reviewer", "@backend", "@everyone"}
	prios := []string{"low", "normal", "high"} // critical only after: see the cancelled waits below
	for _, from := range []string{"alice", "carol", "dave"} {
		seed := r.Uint64()
		senders.Go(func() {
			r := rand.New(rand.NewPCG(seed, 1))
			for i := range 40 {
				id := send(t, n, from, addrs[r.IntN(len(addrs))], fmt.Sprintf("%s %d", from, i), prios[r.IntN(len(prios))])
				sentMu.Lock()
				sent = append(sent, id)
				sentMu.Unlock()
				if r.IntN(4) == 0 { // in bursts, so that consumers race for them
					time.Sleep(time.Duration(r.IntN(60)) * time.Millisecond)
				}
			}
		})
	}

	// Consumers: two goroutines per server, so waits also meet the
	// single-waiter rule.
	done := make(chan struct{})
	var consumers sync.WaitGroup
	filters := []string{"all", "normal_and_above", "high_and_above"}
	for i, cs := range []*mcp.ClientSession{csA, csA, csA, csB, csB, csB, csC, csC} {
		inMemory := i < 3 || i >= 6
		seed := r.Uint64()
		consumers.Go(func() {
			r := rand.New(rand.NewPCG(seed, 2))
			for {
				select {
				case <-done:
					return
				default:
				}
				switch k := r.IntN(10); {
				case k < 4:
					_, _ = cs.CallTool(ctx, &mcp.CallToolParams{Name: "wait_for_message",
						Arguments: map[string]any{"timeout": 1, "priority_filter": filters[r.IntN(len(filters))]}})
				case k < 7:
					_, _ = cs.CallTool(ctx, &mcp.CallToolParams{Name: "check_messages", Arguments: map[string]any{"limit": 1 + r.IntN(10)}})
				default:
					// A wait cancelled at a random moment. In memory, whatever
					// it was about to return still crosses the wire (and is
					// counted); over HTTP the stream closes with the request,
					// so the wait there is one nothing can satisfy (no
					// critical message is sent meanwhile): it must claim
					// nothing and free the slot.
					filter := filters[r.IntN(len(filters))]
					if !inMemory {
						filter = "critical"
					}
					cctx, cancel := context.WithTimeout(ctx, time.Duration(r.IntN(40))*time.Millisecond)
					_, _ = cs.CallTool(cctx, &mcp.CallToolParams{Name: "wait_for_message",
						Arguments: map[string]any{"timeout": 5, "priority_filter": filter}})
					cancel()
				}
			}
		})
	}
	senders.Wait()
	time.Sleep(200 * time.Millisecond)
	close(done)
	consumers.Wait()

	// A cancelled wait freed the single-waiter slot: a wait on each
	// server now runs (and times out) instead of "already waiting".
	for _, cs := range []*mcp.ClientSession{csA, csB, csC} {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "wait_for_message", Arguments: map[string]any{"timeout": 1, "priority_filter": "critical"}})
		if err != nil || res.IsError {
			t.Fatalf("wait after the cancelled ones: %v %s", err, resultText(res))
		}
	}
	// With the tool consumers gone, a message rings the channel and
	// stays unread for the drain.
	last := send(t, n, "alice", "@bob", "for the channel", "normal")
	sent = append(sent, last)
	waitUntil(t, "the channel to ring for "+last, func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return rec.rung[last]
	})
	// Drain what is left through the servers.
	for _, cs := range []*mcp.ClientSession{csA, csB, csC, csA} {
		for {
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "check_messages", Arguments: map[string]any{"limit": 100}})
			if err != nil || res.IsError {
				t.Fatalf("drain: %v %s", err, resultText(res))
			}
			if structured(t, res)["status"] == "empty" {
				break
			}
		}
	}
	// Responses of cancelled calls may still be on their way.
	deadline := time.Now().Add(5 * time.Second)
	for rec.total() < len(sent) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}

	if left := unread(t, n, "bob"); len(left) != 0 {
		t.Errorf("%d messages left unread for bob: skipped", len(left))
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, id := range sent {
		if c := rec.times[id]; c != 1 {
			t.Errorf("message %s was delivered %d times (%v), want exactly once", id, c, rec.by[id])
		}
	}
	if len(rec.times) != len(sent) {
		t.Errorf("%d distinct messages delivered, %d sent", len(rec.times), len(sent))
	}
	if len(rec.rung) < 2 {
		t.Errorf("the channel named %d messages, want some besides the last", len(rec.rung))
	}
	t.Logf("%d messages, each delivered once; the channel named %d of them", len(sent), len(rec.rung))
}
