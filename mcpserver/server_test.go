package mcpserver_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/thrumhq/thrum/internal/thrumtest"
	"github.com/thrumhq/thrum/mcpserver"
	"github.com/thrumhq/thrum/rpc"
)

// TestMCPServerNewErrors checks that New refuses an identity it cannot
// act as, with an error that says why.
func TestMCPServerNewErrors(t *testing.T) {
	n := newNode(t, nil)
	bob := addAgent(t, n, "bob", "reviewer", "auth")
	if _, err := n.RegisterAgent(context.Background(), &rpc.RegisterAgentParams{Name: "idle", Role: "tester", Module: "qa"}); err != nil {
		t.Fatal(err)
	}
	d := thrumtest.ServeUnix(t, n)

	for _, tc := range []struct {
		name string
		id   mcpserver.Identity
		want string
	}{
		{"no agent ID", mcpserver.Identity{Role: "reviewer"}, "no agent ID"},
		{"wrong token", mcpserver.Identity{AgentID: "bob", Role: "reviewer", Token: "not-the-token"}, "authenticate as bob"},
		{"unknown agent", mcpserver.Identity{AgentID: "ghost", Role: "reviewer"}, "ghost"},
		{"no session", mcpserver.Identity{AgentID: "idle", Role: "tester"}, "session"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, err := mcpserver.New(context.Background(), dialer(d), tc.id, nil)
			if err == nil {
				srv.Close()
				t.Fatalf("New(%+v) succeeded", tc.id)
			}
			t.Logf("New: %v", err)
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New(%+v) = %v, want it to say %q", tc.id, err, tc.want)
			}
		})
	}

	// A dial that fails is reported as such.
	_, err := mcpserver.New(context.Background(), func(context.Context, func(string, json.RawMessage)) (*rpc.Client, error) {
		return nil, context.DeadlineExceeded
	}, bob, nil)
	if err == nil || !strings.Contains(err.Error(), "connect to thrum") {
		t.Errorf("New with a failing dial = %v", err)
	}
}

// TestMCPServerClose checks that Close answers a wait in progress with a
// clean "shutdown" result, later calls fail cleanly, and Close is
// idempotent.
func TestMCPServerClose(t *testing.T) {
	n := newNode(t, nil)
	bob := connect(t, n, addAgent(t, n, "bob", "reviewer", "auth"), nil)
	ch := startWait(bob, args{"timeout": 600})
	time.Sleep(20 * time.Millisecond) // let it block (either way it must end)
	if err := bob.srv.Close(); err != nil {
		t.Fatal(err)
	}
	if out := decode[mcpserver.WaitForMessageOutput](t, "wait_for_message", await(t, ch).res); out.Status != "shutdown" || out.Message != nil {
		t.Errorf("wait pending at Close = %+v, want status shutdown and no message", out)
	}
	callErr(t, bob, "list_agents", nil, "shutting down")
	if out := call[mcpserver.WaitForMessageOutput](t, bob, "wait_for_message", args{"timeout": 1}); out.Status != "shutdown" {
		t.Errorf("wait after Close = %+v, want status shutdown", out)
	}
}

// TestMCPStreamableHTTP serves the tools over Streamable HTTP
// (HTTPHandler) to a go-sdk client: the transport for remote hosts.
func TestMCPStreamableHTTP(t *testing.T) {
	n := newNode(t, nil)
	addAgent(t, n, "alice", "implementer", "auth")
	bobID := addAgent(t, n, "bob", "reviewer", "auth")
	srv, err := n.MCPServer(context.Background(), bobID, nil)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.HTTPHandler())
	t.Cleanup(func() {
		hs.Close()
		srv.Close()
	})
	client := mcp.NewClient(&mcp.Implementation{Name: "thrum-http-test", Version: "1"}, nil)
	cs, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: hs.URL, MaxRetries: -1,
		HTTPClient: bearerClient(bobID.Token)}, nil)
	if err != nil {
		t.Fatalf("connect over Streamable HTTP: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	bob := &agentClient{id: bobID, srv: srv, cs: cs}

	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil || len(tools.Tools) != len(mcpserver.ToolNames) {
		t.Fatalf("tools/list over HTTP: %v, %d tools", err, len(tools.Tools))
	}
	ch := startWait(bob, args{"timeout": 30})
	id := send(t, n, "alice", "@bob", "over http", "normal")
	if m := received(t, await(t, ch), id); body(t, m) != "over http" {
		t.Errorf("got %+v", m)
	}
	callErr(t, bob, "send_message", args{"to": "@nobody", "content": "x"}, "unknown recipient")
}
