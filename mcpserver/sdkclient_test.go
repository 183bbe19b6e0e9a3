package mcpserver_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/inbox"
	"github.com/thrumhq/thrum/mcpserver"
	"github.com/thrumhq/thrum/rpc"
)

// The tests of the MCP server's delivery, transports and message info
// that need more than the property test (delivery_test.go), each through
// a real go-sdk client.

// httpAgent serves srv over Streamable HTTP and connects a go-sdk client
// with the agent's token.
func httpAgent(t testing.TB, n *thrum.Node, id mcpserver.Identity, opts *mcpserver.Options) (*agentClient, *httptest.Server) {
	t.Helper()
	srv, err := n.MCPServer(context.Background(), id, opts)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.HTTPHandler())
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "http", Version: "1"}, nil).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: hs.URL, HTTPClient: bearerClient(id.Token), MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cs.Close()
		srv.EndWaits()
		hs.Close()
		srv.Close()
	})
	return &agentClient{id: id, srv: srv, cs: cs}, hs
}

// A filtered wait returns the matching message and leaves the
// others unread and queued, in order, for later waits and checks.
func TestFilteredWaitLeavesTheRestQueued(t *testing.T) {
	n := newNode(t, nil)
	addAgent(t, n, "alice", "implementer", "auth")
	bob := connect(t, n, addAgent(t, n, "bob", "reviewer", "auth"), nil)
	low := send(t, n, "alice", "@bob", "low", "low")
	normal := send(t, n, "alice", "@bob", "normal", "normal")
	high := send(t, n, "alice", "@bob", "high", "high")
	critical := send(t, n, "alice", "@bob", "critical", "critical")
	queuedUntil(t, bob.srv, critical)

	waitFor(t, bob, args{"timeout": 5, "priority_filter": "critical"}, critical)
	if q := mcpserver.QueueIDs(bob.srv); !slices.Equal(q, []string{low, normal, high}) {
		t.Fatalf("queue after a critical-only wait = %v, want low, normal, high in order", q)
	}
	if u := unread(t, n, "bob"); !slices.Equal(u, []string{low, normal, high}) {
		t.Fatalf("unread after a critical-only wait = %v", u)
	}
	waitFor(t, bob, args{"timeout": 5, "priority_filter": "high_and_above"}, high)
	waitFor(t, bob, args{"timeout": 5}, low)
	got := call[mcpserver.CheckMessagesOutput](t, bob, "check_messages", nil)
	if len(got.Messages) != 1 || got.Messages[0].MessageID != normal {
		t.Errorf("check_messages = %+v, want the normal one", got.Messages)
	}
	if q := mcpserver.QueueLen(bob.srv); q != 0 {
		t.Errorf("queue holds %d after everything was consumed", q)
	}
}

// The queue's overflow is reported in the next wait's result, and
// the dropped messages stay unread for check_messages.
func TestQueueOverflowIsReported(t *testing.T) {
	n := newNode(t, nil)
	addAgent(t, n, "alice", "implementer", "auth")
	bob := connect(t, n, addAgent(t, n, "bob", "reviewer", "auth"), &mcpserver.Options{QueueSize: 3})
	var ids []string
	for i := range 5 {
		ids = append(ids, send(t, n, "alice", "@bob", "m"+string(rune('0'+i)), "normal"))
	}
	queuedUntil(t, bob.srv, ids[4])
	out := decode[mcpserver.WaitForMessageOutput](t, "wait_for_message", await(t, startWait(bob, args{"timeout": 5})).res)
	if out.Message == nil || out.Message.MessageID != ids[2] || out.QueueOverflow != 2 {
		t.Fatalf("first wait = %+v, want %s with queue_overflow 2", out, ids[2])
	}
	res := await(t, startWait(bob, args{"timeout": 5})).res
	if _, ok := structured(t, res)["queue_overflow"]; ok {
		t.Errorf("second wait reports overflow again: %v", structured(t, res))
	}
	got := call[mcpserver.CheckMessagesOutput](t, bob, "check_messages", nil)
	var left []string
	for _, m := range got.Messages {
		left = append(left, m.MessageID)
	}
	if !slices.Equal(left, []string{ids[0], ids[1], ids[4]}) {
		t.Errorf("check_messages = %v, want the two dropped and the one still queued", left)
	}
}

// In memory, a cancelled wait claims nothing and frees the slot
// at once; the next message goes to the next wait.
func TestCancelledWaitClaimsNothing(t *testing.T) {
	n := newNode(t, nil)
	addAgent(t, n, "alice", "implementer", "auth")
	bob := connect(t, n, addAgent(t, n, "bob", "reviewer", "auth"), nil)
	cancel, errc := waitInBackground(bob)
	time.Sleep(50 * time.Millisecond)
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("cancelled call returned no error")
	}
	// The slot is free at once (no "already waiting"), and the message
	// sent now goes to the new wait, not to the cancelled one. While the
	// cancellation is still on its way to the server, the old wait may
	// take a message sent meanwhile: it then hands it to the next wait, so
	// every message sent reaches a later wait, in order, none lost.
	deadline := time.Now().Add(2 * time.Second)
	var sent []string
	for {
		ch := startWait(bob, args{"timeout": 5})
		sent = append(sent, send(t, n, "alice", "@bob", fmt.Sprintf("after the cancel %d", len(sent)), "normal"))
		r := await(t, ch)
		if r.res.IsError && strings.Contains(resultText(r.res), "already waiting") && time.Now().Before(deadline) {
			continue // the cancellation is still on its way to the server
		}
		received(t, r, sent[0])
		for _, id := range sent[1:] {
			received(t, await(t, startWait(bob, args{"timeout": 5})), id)
		}
		break
	}
}

// rawSession opens an MCP session over plain HTTP, for what a go-sdk
// client would not do: drop a POST mid-wait, delete a session.
type rawSession struct {
	url, token, id string
}

func (s *rawSession) post(ctx context.Context, body string) (*http.Response, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+s.token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if s.id != "" {
		req.Header.Set("Mcp-Session-Id", s.id)
		req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	}
	return http.DefaultClient.Do(req)
}

func openRaw(t *testing.T, url, token string) *rawSession {
	t.Helper()
	s := &rawSession{url: url, token: token}
	resp, err := s.post(context.Background(), `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	s.id = resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != 200 || s.id == "" {
		t.Fatalf("initialize: %s, session %q", resp.Status, s.id)
	}
	resp, err = s.post(context.Background(), `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return s
}

// Over HTTP, a client that drops mid-wait (no DELETE), or deletes its
// session, leaves no wait behind: the slot is free at once and the next
// message reaches another session's wait.
func TestHTTPDroppedWaitClaimsNothing(t *testing.T) {
	n := newNode(t, nil)
	addAgent(t, n, "alice", "implementer", "auth")
	bobID := addAgent(t, n, "bob", "reviewer", "auth")
	bob, hs := httpAgent(t, n, bobID, nil)

	for _, how := range []string{"drop", "delete"} {
		raw := openRaw(t, hs.URL, bobID.Token)
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			resp, err := raw.post(ctx, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"wait_for_message","arguments":{"timeout":600}}}`)
			if err == nil {
				io.Copy(io.Discard, resp.Body) // until the drop
				resp.Body.Close()
			}
		}()
		// The wait holds the slot once it runs.
		for deadline := time.Now().Add(5 * time.Second); !mcpserver.Waiting(bob.srv); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the raw wait never started", how)
			}
		}
		if how == "drop" {
			cancel()
		} else {
			req, _ := http.NewRequest(http.MethodDelete, hs.URL, nil)
			req.Header.Set("Authorization", "Bearer "+bobID.Token)
			req.Header.Set("Mcp-Session-Id", raw.id)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
		start := time.Now()
		for mcpserver.Waiting(bob.srv) {
			if time.Since(start) > 2*time.Second {
				t.Fatalf("%s: the abandoned wait still holds the slot", how)
			}
			time.Sleep(time.Millisecond)
		}
		t.Logf("%s: slot free after %v", how, time.Since(start).Round(time.Millisecond))
		// The next message goes to the next wait, not to the abandoned one.
		ch := startWait(bob, args{"timeout": 5})
		untilWaiting(t, bob.srv, ch)
		mid := send(t, n, "alice", "@bob", "after the "+how, "normal")
		received(t, await(t, ch), mid)
		cancel()
	}
}

// untilWaiting returns once srv holds the wait that ch reports on. It
// fails if that wait returns first (it never held the slot, or lost it)
// or if it holds none within a minute: a test that would otherwise spin
// forever says which.
func untilWaiting(t testing.TB, srv *mcpserver.Server, ch <-chan waitResult) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !mcpserver.Waiting(srv); time.Sleep(time.Millisecond) {
		select {
		case r := <-ch:
			if r.err != nil {
				t.Fatalf("the wait returned before it held the slot: %v", r.err)
			}
			t.Fatalf("the wait returned before it held the slot: %s", resultText(r.res))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the wait never held the slot")
		}
	}
}

// When Run's context ends (SIGTERM in thrum mcp serve), a pending
// wait is answered with status "shutdown" and Run returns at once.
func TestShutdownAnswersPendingWait(t *testing.T) {
	n := newNode(t, nil)
	id := addAgent(t, n, "bob", "reviewer", "auth")
	srv, err := n.MCPServer(context.Background(), id, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	st, ct := mcp.NewInMemoryTransports()
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- srv.Run(ctx, st) }()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(context.Background(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	bob := &agentClient{id: id, srv: srv, cs: cs}
	ch := startWait(bob, args{"timeout": 600})
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	cancel()
	if out := decode[mcpserver.WaitForMessageOutput](t, "wait_for_message", await(t, ch).res); out.Status != "shutdown" || out.Message != nil {
		t.Errorf("pending wait at shutdown = %+v, want status shutdown", out)
	}
	select {
	case <-runDone:
	case <-time.After(time.Second):
		t.Fatal("Run did not return within a second of its context ending")
	}
	t.Logf("shutdown answered the wait and returned in %v", time.Since(start).Round(time.Millisecond))
}

// A wait with a progressToken sends notifications/progress at the
// interval (every 10 s by default; 30 ms here), with that token.
func TestWaitSendsProgress(t *testing.T) {
	t.Parallel() // it waits more than it works
	n := newNode(t, nil)
	id := addAgent(t, n, "bob", "reviewer", "auth")
	for _, transport := range []string{"memory", "http"} {
		t.Run(transport, func(t *testing.T) {
			opts := &mcpserver.Options{ProgressInterval: 30 * time.Millisecond}
			var mu sync.Mutex
			var tokens []any
			copts := &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
				mu.Lock()
				tokens = append(tokens, r.Params.ProgressToken)
				mu.Unlock()
			}}
			srv, err := n.MCPServer(context.Background(), id, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			var tr mcp.Transport
			if transport == "memory" {
				st, ct := mcp.NewInMemoryTransports()
				go srv.Run(context.Background(), st)
				tr = ct
			} else {
				hs := httptest.NewServer(srv.HTTPHandler())
				defer hs.Close()
				defer srv.EndWaits()
				tr = &mcp.StreamableClientTransport{Endpoint: hs.URL, HTTPClient: bearerClient(id.Token), MaxRetries: -1}
			}
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, copts).Connect(context.Background(), tr, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			p := &mcp.CallToolParams{Name: "wait_for_message", Arguments: args{"timeout": 1}}
			p.SetProgressToken("wait-1")
			res, err := cs.CallTool(context.Background(), p)
			if err != nil || res.IsError {
				t.Fatalf("wait: %v %s", err, resultText(res))
			}
			// Without a token, no progress.
			if _, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "wait_for_message", Arguments: args{"timeout": 1}}); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			// About 30 on an idle machine; a loaded one drops ticks, so
			// ask only that progress repeats.
			if len(tokens) < 3 {
				t.Errorf("%d progress notifications in a 1 s wait at 30 ms, want several (about 30 when idle)", len(tokens))
			}
			for _, tok := range tokens {
				if tok != "wait-1" {
					t.Errorf("progress with token %v, want wait-1", tok)
				}
			}
		})
	}
}

// MessageInfo says where a message belongs and how it reached the
// agent, and get_message follows the conversation.
func TestMessageInfoAndConversation(t *testing.T) {
	n := newNode(t, nil)
	alice := connect(t, n, addAgent(t, n, "alice", "implementer", "auth"), nil)
	bob := connect(t, n, addAgent(t, n, "bob", "reviewer", "auth"), nil)
	ctx := thrum.AsAgent(context.Background(), "alice")
	if _, err := n.CreateGroup(ctx, &rpc.CreateGroupParams{Name: "backend"}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.AddGroupMember(ctx, &rpc.GroupMembership{Group: "backend", MemberType: rpc.MemberRole, MemberID: "reviewer"}); err != nil {
		t.Fatal(err)
	}
	root := call[mcpserver.SendMessageOutput](t, alice, "send_message", args{"to": "@reviewer", "content": "review PR 7",
		"priority": "high", "metadata": args{"pr": 7}}).MessageID
	got := call[mcpserver.CheckMessagesOutput](t, bob, "check_messages", nil).Messages
	if len(got) != 1 {
		t.Fatalf("bob got %+v", got)
	}
	m := got[0]
	if m.From != "alice" || m.FromRole != "implementer" || m.Priority != "high" || m.AddressedAs == nil ||
		*m.AddressedAs != (inbox.Addressed{Kind: "role", Name: "reviewer"}) || m.Metadata != `{"pr":7}` {
		t.Errorf("message info = %+v (addressed_as %+v, metadata %s)", m, m.AddressedAs, m.Metadata)
	}
	reply := call[mcpserver.SendMessageOutput](t, bob, "send_message", args{"to": "alice", "content": "looking", "reply_to": root}).MessageID
	again := call[mcpserver.SendMessageOutput](t, alice, "send_message", args{"to": "@backend", "content": "thanks", "reply_to": reply}).MessageID
	everyone := call[mcpserver.SendMessageOutput](t, alice, "send_message", args{"to": "@everyone", "content": "unrelated"}).MessageID
	w := waitFor(t, bob, args{"timeout": 5}, again)
	if w.ReplyTo != reply || w.AddressedAs == nil || *w.AddressedAs != (inbox.Addressed{Kind: "group", Name: "backend"}) {
		t.Errorf("reply info = %+v (addressed_as %+v)", w, w.AddressedAs)
	}
	if e := waitFor(t, bob, args{"timeout": 5}, everyone); e.AddressedAs == nil || e.AddressedAs.Kind != "everyone" {
		t.Errorf("to everyone: %+v", e)
	}
	byName := call[mcpserver.SendMessageOutput](t, alice, "send_message", args{"to": "bob", "content": "direct"}).MessageID
	if d := waitFor(t, bob, args{"timeout": 5}, byName); d.AddressedAs == nil || *d.AddressedAs != (inbox.Addressed{Kind: "agent", Name: "bob"}) {
		t.Errorf("by name: %+v", d.AddressedAs)
	}

	conv := call[mcpserver.GetMessageOutput](t, bob, "get_message", args{"message_id": reply})
	var ids []string
	for _, c := range conv.Conversation {
		ids = append(ids, c.MessageID)
	}
	if conv.MessageID != reply || !slices.Equal(ids, []string{root, reply, again}) {
		t.Errorf("get_message conversation = %v, want root, reply, reply to the reply", ids)
	}
	// A thread is a conversation too.
	th, err := n.CreateThread(ctx, &rpc.CreateThreadParams{Title: "design", Message: &rpc.ThreadMessage{Content: "first"}, Recipient: "@bob"})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := n.SendMessage(ctx, &rpc.SendMessageParams{ThreadID: th.ThreadID, Content: "second", Mentions: []string{"@bob"}})
	if err != nil {
		t.Fatal(err)
	}
	conv = call[mcpserver.GetMessageOutput](t, bob, "get_message", args{"message_id": r2.MessageID})
	if len(conv.Conversation) != 2 || body(t, conv.Conversation[0]) != "first" || conv.Conversation[1].ThreadID != th.ThreadID {
		t.Errorf("thread conversation = %+v", conv.Conversation)
	}
	callErr(t, bob, "get_message", args{"message_id": "msg_nope"}, "msg_nope", "check_messages")
}

func mustJSON(t testing.TB, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The HTTP transport needs the agent's token and refuses foreign
// Origins and non-loopback Hosts.
func TestHTTPTransportGuards(t *testing.T) {
	t.Parallel() // it waits more than it works
	n := newNode(t, nil)
	id := addAgent(t, n, "bob", "reviewer", "auth")
	_, hs := httpAgent(t, n, id, nil)
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
	for _, tc := range []struct {
		name   string
		header map[string]string
		host   string
		want   int
	}{
		{"no token", nil, "", http.StatusUnauthorized},
		{"wrong token", map[string]string{"Authorization": "Bearer nope"}, "", http.StatusUnauthorized},
		{"foreign origin", map[string]string{"Authorization": "Bearer " + id.Token, "Origin": "http://evil.example"}, "", http.StatusForbidden},
		{"null origin", map[string]string{"Authorization": "Bearer " + id.Token, "Origin": "null"}, "", http.StatusForbidden},
		{"rebinding host", map[string]string{"Authorization": "Bearer " + id.Token}, "evil.example:80", http.StatusForbidden},
		{"token, loopback origin", map[string]string{"Authorization": "Bearer " + id.Token, "Origin": "http://localhost:3000"}, "", http.StatusOK},
		{"token", map[string]string{"Authorization": "Bearer " + id.Token}, "", http.StatusOK},
		{"lower-case scheme", map[string]string{"Authorization": "bearer " + id.Token}, "", http.StatusOK},
		{"upper-case scheme", map[string]string{"Authorization": "BEARER " + id.Token}, "", http.StatusOK},
		{"other scheme", map[string]string{"Authorization": "Basic " + id.Token}, "", http.StatusUnauthorized},
	} {
		req, _ := http.NewRequest(http.MethodPost, hs.URL, strings.NewReader(init))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		for k, v := range tc.header {
			req.Header.Set(k, v)
		}
		if tc.host != "" {
			req.Host = tc.host
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s: %s, want %d", tc.name, resp.Status, tc.want)
		}
	}
}

// recipient_status never counts the sender.
func TestRecipientStatusLeavesOutTheSender(t *testing.T) {
	n := newNode(t, nil)
	alice := connect(t, n, addAgent(t, n, "alice", "implementer", "auth"), nil)
	addAgent(t, n, "bob", "reviewer", "auth")
	out := call[mcpserver.SendMessageOutput](t, alice, "send_message", args{"to": "@implementer", "content": "anyone?"})
	if out.RecipientStatus != "no_agents" || len(out.Recipients) != 1 || len(out.Recipients[0].Agents) != 0 || len(out.Recipients[0].Active) != 0 {
		t.Errorf("send to the sender's own role = %+v, want no_agents and nobody", out)
	}
	out = call[mcpserver.SendMessageOutput](t, alice, "send_message", args{"to": "@everyone", "content": "all"})
	if out.RecipientStatus != "active" || !slices.Equal(out.Recipients[0].Agents, []string{"bob"}) {
		t.Errorf("send to everyone = %+v, want bob only", out)
	}
}

// A malformed line on the stdio stream is answered with -32700
// (not JSON) or -32600 (not JSON-RPC), and the session goes on.
func TestStdioSurvivesMalformedLines(t *testing.T) {
	n := newNode(t, nil)
	id := addAgent(t, n, "bob", "reviewer", "auth")
	srv, err := n.MCPServer(context.Background(), id, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	runDone := make(chan error, 1)
	go func() { runDone <- srv.ServeStdio(context.Background(), inR, outW) }()
	lines := bufio.NewScanner(outR)
	lines.Buffer(nil, 1<<20)
	ask := func(line string) map[string]any {
		t.Helper()
		if _, err := io.WriteString(inW, line+"\n"); err != nil {
			t.Fatal(err)
		}
		if !lines.Scan() {
			t.Fatalf("no answer to %q: %v", line, lines.Err())
		}
		var m map[string]any
		if err := json.Unmarshal(lines.Bytes(), &m); err != nil {
			t.Fatalf("answer is not JSON: %s", lines.Bytes())
		}
		return m
	}
	code := func(m map[string]any) float64 {
		e, _ := m["error"].(map[string]any)
		c, _ := e["code"].(float64)
		return c
	}
	if m := ask(`{not json`); code(m) != -32700 || m["id"] != nil {
		t.Errorf("answer to {not json = %v, want -32700 with id null", m)
	}
	if m := ask(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`); m["result"] == nil {
		t.Fatalf("initialize after a bad line = %v", m)
	}
	io.WriteString(inW, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n")
	if m := ask(`{"jsonrpc":"2.0","id":7}`); code(m) != -32600 {
		t.Errorf("answer to an invalid message = %v, want -32600", m)
	}
	if m := ask(`[1,2`); code(m) != -32700 {
		t.Errorf("answer to a broken batch = %v, want -32700", m)
	}
	if m := ask(`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`); m["result"] == nil || !bytes.Contains(mustJSON(t, m), []byte("wait_for_message")) {
		t.Errorf("tools/list after bad lines = %v", m)
	}
	inW.Close()
	select {
	case <-runDone:
	case <-time.After(5 * time.Second):
		t.Fatal("ServeStdio did not end with its input")
	}
}

// get_message shows messages that never reached the caller: a group is
// named in addressed_as only when the caller is in it.
func TestGetMessageAddressedAsOnlyForOwnGroups(t *testing.T) {
	n := newNode(t, nil)
	addAgent(t, n, "alice", "implementer", "auth")
	addAgent(t, n, "carol", "designer", "ui")
	bob := connect(t, n, addAgent(t, n, "bob", "reviewer", "auth"), nil)
	ctx := thrum.AsAgent(context.Background(), "alice")
	for _, g := range []struct{ group, member string }{{"ops", "carol"}, {"review", "bob"}} {
		if _, err := n.CreateGroup(ctx, &rpc.CreateGroupParams{Name: g.group}); err != nil {
			t.Fatal(err)
		}
		if _, err := n.AddGroupMember(ctx, &rpc.GroupMembership{Group: g.group, MemberType: rpc.MemberAgent, MemberID: g.member}); err != nil {
			t.Fatal(err)
		}
	}
	notMine := send(t, n, "alice", "@ops", "for ops", "normal")
	mine := send(t, n, "alice", "@review", "for review", "normal")
	if c := call[mcpserver.GetMessageOutput](t, bob, "get_message", args{"message_id": notMine}).Conversation; len(c) != 1 || c[0].AddressedAs != nil {
		t.Errorf("a message to a group bob is not in: %+v", c)
	}
	if c := call[mcpserver.GetMessageOutput](t, bob, "get_message", args{"message_id": mine}).Conversation; len(c) != 1 || c[0].AddressedAs == nil ||
		*c[0].AddressedAs != (inbox.Addressed{Kind: "group", Name: "review"}) {
		t.Errorf("a message to bob's group: %+v", c)
	}
}

// HTTP sessions are capped (a client that would start one more gets 503)
// and closed when idle, after which new ones start again.
func TestHTTPSessionsCappedAndExpire(t *testing.T) {
	n := newNode(t, nil)
	id := addAgent(t, n, "bob", "reviewer", "auth")
	const idle = 500 * time.Millisecond
	_, hs := httpAgent(t, n, id, &mcpserver.Options{MaxHTTPSessions: 3, HTTPSessionIdle: idle}) // one session
	start := func() *http.Response {
		t.Helper()
		init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
		req, _ := http.NewRequest(http.MethodPost, hs.URL, strings.NewReader(init))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer "+id.Token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	for i := 0; i < 2; i++ {
		if resp := start(); resp.StatusCode != http.StatusOK || resp.Header.Get("Mcp-Session-Id") == "" {
			t.Fatalf("session %d under the cap: %s", i+2, resp.Status)
		}
	}
	if resp := start(); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a session over the cap: %s, want 503", resp.Status)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		time.Sleep(idle)
		resp := start()
		if resp.StatusCode == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no idle session was closed: still %s", resp.Status)
		}
	}
}

// Close ends the HTTP sessions the server keeps: one whose client never
// sent DELETE is gone with it, rather than left running until idle.
func TestCloseEndsHTTPSessions(t *testing.T) {
	n := newNode(t, nil)
	id := addAgent(t, n, "bob", "reviewer", "auth")
	srv, err := n.MCPServer(context.Background(), id, nil)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.HTTPHandler())
	defer hs.Close()
	raw := openRaw(t, hs.URL, id.Token)
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	resp, err := raw.post(context.Background(), `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("a request in a session after Close: %s, want 404 (no such session)", resp.Status)
	}
}
