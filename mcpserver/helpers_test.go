package mcpserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/inbox"
	"github.com/thrumhq/thrum/internal/frame/frametest"
	"github.com/thrumhq/thrum/internal/thrumtest"
	"github.com/thrumhq/thrum/mcpserver"
	"github.com/thrumhq/thrum/rpc"
)

// The tests drive the MCP server the way an agent's host does: a go-sdk
// client over in-memory transports, against a real node (event log and
// SQLite in t.TempDir()).

// clock is a node clock that can be moved forward, to make every agent
// look offline without waiting two minutes.
type clock struct{ offset atomic.Int64 }

func (c *clock) Now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *clock) advance(d time.Duration) { c.offset.Add(int64(d)) }

// newNode opens a node in a fresh directory and closes it at the end of
// the test.
func newNode(t testing.TB, opts *thrum.Options) *thrum.Node {
	t.Helper()
	return thrumtest.OpenNode(t, opts)
}

// addAgent registers an agent and starts its session (what thrum
// quickstart does) and returns its identity. An empty name gives an
// unnamed agent (ID role_hash).
func addAgent(t testing.TB, n *thrum.Node, name, role, module string) mcpserver.Identity {
	t.Helper()
	a := thrumtest.Register(t, n, name, role, module)
	return mcpserver.Identity{AgentID: a.ID, Role: a.Role, Token: a.Token}
}

// addStaleAgent registers an agent whose registration event is an hour
// old, as one synced in from another machine would be: it is offline.
func addStaleAgent(t testing.TB, n *thrum.Node, name, role, module string) {
	t.Helper()
	e := &eventlog.Event{Type: eventlog.TypeAgentRegister, Time: time.Now().Add(-time.Hour),
		Payload: eventlog.AgentRegister{AgentID: name, Kind: "agent", Name: name, Role: role, Module: module}}
	if err := n.EventLog().Append(context.Background(), e); err != nil {
		t.Fatalf("append stale registration of %s: %v", name, err)
	}
}

// agentClient is one agent's MCP server and the client connected to it.
type agentClient struct {
	id  mcpserver.Identity
	srv *mcpserver.Server
	cs  *mcp.ClientSession
}

// connect starts an MCP server for id on n (in process, Node.MCPServer),
// serves it with Run over an in-memory transport and connects a go-sdk
// client. Everything is closed at the end of the test.
func connect(t testing.TB, n *thrum.Node, id mcpserver.Identity, opts *mcpserver.Options) *agentClient {
	t.Helper()
	srv, err := n.MCPServer(context.Background(), id, opts)
	if err != nil {
		t.Fatalf("MCP server for %s: %v", id.AgentID, err)
	}
	return serve(t, srv, id)
}

// serve runs srv over an in-memory transport and connects a client.
func serve(t testing.TB, srv *mcpserver.Server, id mcpserver.Identity) *agentClient {
	t.Helper()
	st, ct := mcp.NewInMemoryTransports()
	runDone := make(chan error, 1)
	go func() { runDone <- srv.Run(context.Background(), st) }()
	client := mcp.NewClient(&mcp.Implementation{Name: "thrum-test", Version: "1"}, nil)
	cs, err := client.Connect(context.Background(), ct, nil)
	if err != nil {
		srv.Close()
		t.Fatalf("connect client for %s: %v", id.AgentID, err)
	}
	t.Cleanup(func() {
		cs.Close()
		select {
		case <-runDone:
		case <-time.After(10 * time.Second):
			t.Errorf("Run of %s did not return after the client closed", id.AgentID)
		}
		if err := srv.Close(); err != nil {
			t.Errorf("close MCP server of %s: %v", id.AgentID, err)
		}
		if err := srv.Close(); err != nil { // idempotent
			t.Errorf("second close of MCP server of %s: %v", id.AgentID, err)
		}
	})
	return &agentClient{id: id, srv: srv, cs: cs}
}

type args = map[string]any

// rawCall calls a tool and returns what came back, protocol error and all.
// It is safe to use from any goroutine.
func (a *agentClient) rawCall(ctx context.Context, name string, in args) (*mcp.CallToolResult, error) {
	return a.cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: in})
}

// call calls a tool that must succeed and decodes its structured content
// into T, checking that it has no field T lacks and that the text content
// carries the same JSON.
func call[T any](t testing.TB, a *agentClient, name string, in args) T {
	t.Helper()
	res, err := a.rawCall(context.Background(), name, in)
	if err != nil {
		t.Fatalf("%s %s(%v): protocol error: %v", a.id.AgentID, name, in, err)
	}
	return decode[T](t, name, res)
}

// decode checks a successful result and decodes it.
func decode[T any](t testing.TB, name string, res *mcp.CallToolResult) T {
	t.Helper()
	var out T
	if res.IsError {
		t.Fatalf("%s: tool error: %s", name, resultText(res))
	}
	if res.StructuredContent == nil {
		t.Fatalf("%s: no structured content", name)
	}
	raw, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatalf("%s: structured content: %v", name, err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err != nil {
		t.Fatalf("%s: structured content does not match %T: %v\n%s", name, out, err, raw)
	}
	// The text copy, for clients that ignore structured content.
	if len(res.Content) != 1 {
		t.Fatalf("%s: want one content block (the text copy), got %d", name, len(res.Content))
	}
	tc, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		t.Fatalf("%s: content is %T, want text", name, res.Content[0])
	}
	var fromText, fromStruct any
	if err := json.Unmarshal([]byte(tc.Text), &fromText); err != nil {
		t.Fatalf("%s: text content is not JSON: %v\n%s", name, err, tc.Text)
	}
	json.Unmarshal(raw, &fromStruct)
	if !reflect.DeepEqual(fromText, fromStruct) {
		t.Fatalf("%s: text content differs from structured content:\ntext: %s\nstructured: %s", name, tc.Text, raw)
	}
	return out
}

// structured returns the structured content as a JSON object, to check
// which keys are present.
func structured(t testing.TB, res *mcp.CallToolResult) map[string]any {
	t.Helper()
	raw, _ := json.Marshal(res.StructuredContent)
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("structured content is not an object: %s", raw)
	}
	return m
}

// callErr calls a tool that must fail as a tool error (a result with
// IsError and a text saying what was wrong), never as a protocol failure,
// and returns the text.
func callErr(t testing.TB, a *agentClient, name string, in args, want ...string) string {
	t.Helper()
	res, err := a.rawCall(context.Background(), name, in)
	if err != nil {
		t.Fatalf("%s(%v): protocol error, want a tool error: %v", name, in, err)
	}
	return checkToolErr(t, name, res, want...)
}

func checkToolErr(t testing.TB, name string, res *mcp.CallToolResult, want ...string) string {
	t.Helper()
	if !res.IsError {
		raw, _ := json.Marshal(res.StructuredContent)
		t.Fatalf("%s: want a tool error, got success: %s", name, raw)
	}
	txt := resultText(res)
	if txt == "" {
		t.Fatalf("%s: tool error without text", name)
	}
	for _, w := range want {
		if !strings.Contains(txt, w) {
			t.Errorf("%s: error %q does not say %q", name, txt, w)
		}
	}
	// The structured error: {code, message, hint}, and the text is its copy.
	raw, _ := json.Marshal(res.StructuredContent)
	var te mcpserver.ToolError
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&te); err != nil || te.Code == "" || te.Message == "" {
		t.Errorf("%s: tool error's structured content %s is not a {code, message, hint}: %v", name, raw, err)
	}
	if txt != te.Error() {
		t.Errorf("%s: tool error text %q is not a copy of its structured content %s", name, txt, raw)
	}
	// Hints name tools, never CLI commands an agent cannot run.
	if cliCommand.MatchString(txt) {
		t.Errorf("%s: tool error %q points to a CLI command", name, txt)
	}
	return txt
}

var cliCommand = regexp.MustCompile(`thrum (agent (list|register)|group (list|create)|quickstart|daemon (start|stop)|send|inbox|message )`)

// body is the text of a message a tool returned, read back from its
// frame, which must be the whole content.
func body(t testing.TB, m inbox.Message) string {
	t.Helper()
	fm, _, err := frametest.Parse(m.Content)
	if err != nil || fm.ID != m.MessageID {
		t.Fatalf("message %s: content is not its frame (%v):\n%s", m.MessageID, err, m.Content)
	}
	return fm.Body
}

func resultText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// send sends a message as from straight through the node (not MCP), for
// tests where the sender is not what is under test.
func send(t testing.TB, n *thrum.Node, from, to, content, priority string) string {
	t.Helper()
	r, err := n.SendMessage(thrum.AsAgent(context.Background(), from),
		&rpc.SendMessageParams{Content: content, Mentions: []string{to}, Priority: priority})
	if err != nil {
		t.Fatalf("send %s → %s: %v", from, to, err)
	}
	return r.MessageID
}

// getMessage reads a message through the node, as reader ("" for none).
func getMessage(t testing.TB, n *thrum.Node, reader, id string) rpc.MessageDetail {
	t.Helper()
	ctx := context.Background()
	if reader != "" {
		ctx = thrum.AsAgent(ctx, reader)
	}
	r, err := n.GetMessage(ctx, &rpc.GetMessageParams{MessageID: id})
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return r.Message
}

// unread returns the IDs of the unread messages addressed to agent, oldest
// first.
func unread(t testing.TB, n *thrum.Node, agent string) []string {
	t.Helper()
	r, err := n.ListMessages(thrum.AsAgent(context.Background(), agent),
		&rpc.ListMessagesParams{Mentions: true, Unread: true, PageSize: 100, SortOrder: "asc"})
	if err != nil {
		t.Fatalf("list unread of %s: %v", agent, err)
	}
	ids := []string{}
	for _, m := range r.Messages {
		ids = append(ids, m.MessageID)
	}
	return ids
}

// bearerClient is an HTTP client that sends token as a bearer.
func bearerClient(token string) *http.Client {
	return &http.Client{Transport: bearer{token: token, next: http.DefaultTransport}}
}

type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// waitInBackground starts a wait_for_message of up to an hour on c and
// returns its cancel function and where its error comes.
func waitInBackground(c *agentClient) (cancel context.CancelFunc, errc <-chan error) {
	ctx, cancel := context.WithCancel(context.Background())
	ec := make(chan error, 1)
	go func() {
		_, err := c.rawCall(ctx, "wait_for_message", args{"timeout": 3600})
		ec <- err
	}()
	return cancel, ec
}
