package mcpserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/thrumhq/thrum/internal/thrumtest"
	"github.com/thrumhq/thrum/mcpserver"
	"github.com/thrumhq/thrum/rpc"
)

// dialer is what thrum mcp serve hands mcpserver.New: a socket dial.
func dialer(d *thrumtest.Daemon) mcpserver.Dialer {
	return func(ctx context.Context, onNote func(string, json.RawMessage)) (*rpc.Client, error) {
		return d.Dial(ctx, &rpc.ClientOptions{OnNotification: onNote})
	}
}

// logBuffer collects a server's log, printed if the test fails.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func testLogger(t testing.TB) *slog.Logger {
	var lb logBuffer
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("MCP server log:\n%s", lb.String())
		}
	})
	return slog.New(slog.NewTextHandler(&lb, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// TestReconnectAfterDaemonRestart stops the daemon under an MCP server
// and starts a new one on the same socket: the server redials,
// re-authenticates and resubscribes, and wait_for_message (one blocked
// across the restart, and a new one) still receives new messages.
func TestReconnectAfterDaemonRestart(t *testing.T) {
	n := newNode(t, nil)
	alice := connect(t, n, addAgent(t, n, "alice", "implementer", "auth"), nil) // in process: unaffected by the restart
	bobID := addAgent(t, n, "bob", "reviewer", "auth")
	d := thrumtest.ServeUnix(t, n)
	srv, err := mcpserver.New(context.Background(), dialer(d), bobID, &mcpserver.Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatalf("mcpserver.New over the socket: %v", err)
	}
	bob := serve(t, srv, bobID)

	sent := call[mcpserver.SendMessageOutput](t, alice, "send_message", args{"to": "@bob", "content": "before"})
	waitFor(t, bob, args{"timeout": 10}, sent.MessageID)

	blocked := startWait(bob, args{"timeout": 60})
	d.Stop()
	d.Start()
	// A tool call succeeds only on a new connection, and the server
	// subscribes before it hands the connection out.
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := bob.rawCall(context.Background(), "list_agents", nil)
		if err != nil {
			t.Fatalf("list_agents: protocol error %v", err)
		}
		if !res.IsError {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the MCP server did not reconnect: %s", resultText(res))
		}
		time.Sleep(10 * time.Millisecond)
	}

	after := call[mcpserver.SendMessageOutput](t, alice, "send_message", args{"to": "@reviewer", "content": "after the restart"})
	if m := received(t, await(t, blocked), after.MessageID); body(t, m) != "after the restart" {
		t.Errorf("blocked wait got %+v", m)
	}
	again := call[mcpserver.SendMessageOutput](t, alice, "send_message", args{"to": "@bob", "content": "and again"})
	waitFor(t, bob, args{"timeout": 10}, again.MessageID)

	// The other tools work over the new connection as bob.
	reply := call[mcpserver.SendMessageOutput](t, bob, "send_message", args{"to": "@alice", "content": "back", "reply_to": again.MessageID})
	if m := getMessage(t, n, "", reply.MessageID); m.Author.AgentID != "bob" {
		t.Errorf("reply written as %s", m.Author.AgentID)
	}
	if got := call[mcpserver.CheckMessagesOutput](t, bob, "check_messages", nil); got.Status != "empty" {
		t.Errorf("check_messages = %+v, want empty: every message was taken by a wait", got)
	}
}

// TestReconnectCatchesUp checks that a message sent while the MCP server
// was disconnected is not lost to wait_for_message: after reconnecting it
// re-reads what it missed (DESIGN.md: a subscriber that lost its
// connection re-reads via message.list) — and only that: not the backlog
// from before it started, and not a second copy of what was queued
// already (what a priority filter passed over stays queued, first).
func TestReconnectCatchesUp(t *testing.T) {
	n := newNode(t, nil)
	addAgent(t, n, "alice", "implementer", "auth")
	bobID := addAgent(t, n, "bob", "reviewer", "auth")
	backlog := send(t, n, "alice", "@bob", "from before the server started", "normal")
	d := thrumtest.ServeUnix(t, n)
	srv, err := mcpserver.New(context.Background(), dialer(d), bobID, &mcpserver.Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	bob := serve(t, srv, bobID)

	passed := send(t, n, "alice", "@bob", "passed over by the filter", "low")
	critical := send(t, n, "alice", "@bob", "critical", "critical")
	waitFor(t, bob, args{"timeout": 10, "priority_filter": "critical"}, critical)
	queued := send(t, n, "alice", "@bob", "queued before the drop", "normal")
	queuedUntil(t, bob.srv, queued)

	d.Stop()
	missed := send(t, n, "alice", "@bob", "sent while bob's server was disconnected", "high")
	d.Start()
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := bob.rawCall(context.Background(), "list_groups", nil)
		if err != nil {
			t.Fatal(err)
		}
		if !res.IsError {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no reconnect: %s", resultText(res))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := mcpserver.QueueIDs(bob.srv); !slices.Equal(got, []string{passed, queued, missed}) {
		t.Errorf("queue after reconnecting = %v, want [passed over %s, queued %s, missed %s]", got, passed, queued, missed)
	}
	waitFor(t, bob, args{"timeout": 10}, passed)
	waitFor(t, bob, args{"timeout": 10}, queued)
	if m := waitFor(t, bob, args{"timeout": 10}, missed); m.Priority != "high" || m.From != "alice" {
		t.Errorf("got %+v", m)
	}
	got := call[mcpserver.CheckMessagesOutput](t, bob, "check_messages", nil)
	var left []string
	for _, m := range got.Messages {
		left = append(left, m.MessageID)
	}
	if !slices.Equal(left, []string{backlog}) {
		t.Errorf("check_messages = %v, want the backlog %s", left, backlog)
	}
}

// TestReconnectDaemonDown checks that while the daemon stays down the
// tools fail as tool errors that say what to do, and a wait in progress
// keeps waiting rather than failing.
func TestReconnectDaemonDown(t *testing.T) {
	t.Parallel()
	n := newNode(t, nil)
	bobID := addAgent(t, n, "bob", "reviewer", "auth")
	d := thrumtest.ServeUnix(t, n)
	srv, err := mcpserver.New(context.Background(), dialer(d), bobID, &mcpserver.Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	bob := serve(t, srv, bobID)
	blocked := startWait(bob, args{"timeout": 1})
	d.Stop()

	// The first call may still meet the dropped connection (a "connection
	// closed" error); once the server knows, a call waits a bounded time
	// for the reconnect and then says the daemon is not reachable.
	for i := 0; ; i++ {
		txt := callErr(t, bob, "check_messages", nil)
		if strings.Contains(txt, "not reachable") {
			if !strings.Contains(txt, "retry") {
				t.Errorf("error %q does not say to retry", txt)
			}
			break
		}
		if i == 3 {
			t.Fatalf("check_messages with the daemon down: %q, want it to say the daemon is not reachable", txt)
		}
	}
	r := await(t, blocked)
	if out := decode[mcpserver.WaitForMessageOutput](t, "wait_for_message", r.res); out.Status != "timeout" {
		t.Errorf("wait across the outage = %+v, want timeout", out)
	}
}
