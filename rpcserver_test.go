package thrum_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/internal/gitwork"
	"github.com/thrumhq/thrum/internal/thrumtest"
	"github.com/thrumhq/thrum/rpc"
)

// daemon is a node served over a real Unix socket and a real WebSocket
// (thrumtest.Serve), with agents alice (implementer) and bob (reviewer).
type daemon struct {
	secret string // the owner's secret
	n      *thrum.Node
	sock   string
	wsURL  string
	tokens map[string]string // agent → token
}

func startDaemon(t testing.TB) *daemon { return startDaemonIn(t, "") }

// startDaemonIn is startDaemon for a node whose repository is repoDir
// ("" for the current directory's).
func startDaemonIn(t testing.TB, repoDir string) *daemon {
	t.Helper()
	return startDaemonWith(t, &thrum.Options{GitRepo: gitwork.New(repoDir)})
}

// startDaemonWith is startDaemon for a node opened with opts.
func startDaemonWith(t testing.TB, opts *thrum.Options) *daemon {
	t.Helper()
	return startDaemonServing(t, opts, nil)
}

// startDaemonServing is startDaemonWith, served with ropts.
func startDaemonServing(t testing.TB, opts *thrum.Options, ropts *thrum.RPCOptions) *daemon {
	t.Helper()
	n := thrumtest.OpenNode(t, opts)
	s := thrumtest.Serve(t, n, ropts)
	d := &daemon{secret: s.Secret, n: n, sock: s.Path, wsURL: s.WSURL, tokens: map[string]string{}}
	d.tokens["alice"] = thrumtest.Register(t, n, "alice", "implementer", "auth").Token
	d.tokens["bob"] = thrumtest.Register(t, n, "bob", "reviewer", "auth").Token
	return d
}

func (d *daemon) unix(t testing.TB, onNote func(string, json.RawMessage)) *rpc.Client {
	t.Helper()
	c, err := rpc.Dial(context.Background(), d.sock, &rpc.ClientOptions{OnNotification: onNote})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func (d *daemon) ws(t testing.TB, onNote func(string, json.RawMessage)) *rpc.Client {
	t.Helper()
	c, err := rpc.DialWebSocket(context.Background(), d.wsURL, &rpc.ClientOptions{OnNotification: onNote})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestGroupsByOwner: on the owner's Unix socket a group can be managed
// without an agent identity and is recorded as made by thrum.Owner; a
// WebSocket needs a token for the same, and an identified caller is
// recorded as itself.
func TestGroupsByOwner(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	u := d.unix(t, nil)
	if _, err := u.CreateGroup(ctx, &rpc.CreateGroupParams{Name: "backend"}); err != nil {
		t.Fatalf("create on the socket without identity: %v", err)
	}
	if _, err := u.AddGroupMember(ctx, &rpc.GroupMembership{Group: "backend", MemberType: rpc.MemberRole, MemberID: "reviewer"}); err != nil {
		t.Fatalf("add on the socket without identity: %v", err)
	}
	info, err := u.GroupInfo(ctx, &rpc.GroupInfoParams{Name: "backend"})
	if err != nil || info.CreatedBy != thrum.Owner || len(info.Members) != 1 {
		t.Fatalf("info = %+v, %v; want created_by %q and one member", info, err, thrum.Owner)
	}
	// The owner's group routes like any other.
	r, err := d.n.SendMessage(thrum.AsAgent(ctx, "alice"), &rpc.SendMessageParams{Content: "deploy at 5", Mentions: []string{"@backend"}})
	if err != nil || len(r.Recipients) != 1 || strings.Join(r.Recipients[0].Agents, ",") != "bob" {
		t.Fatalf("send to the owner's group: %+v, %v", r, err)
	}

	w := d.ws(t, nil)
	_, err = w.CreateGroup(ctx, &rpc.CreateGroupParams{Name: "frontend"})
	wantCode(t, err, rpc.CodeUnauthenticated, "call auth")
	_, err = w.DeleteGroup(ctx, &rpc.DeleteGroupParams{Name: "backend"})
	wantCode(t, err, rpc.CodeUnauthenticated, "call auth")
	_, err = w.AddGroupMember(ctx, &rpc.GroupMembership{Group: "backend", MemberType: rpc.MemberAgent, MemberID: "alice"})
	wantCode(t, err, rpc.CodeUnauthenticated, "call auth")
	if _, err := w.Auth(ctx, &rpc.AuthParams{Token: d.tokens["alice"]}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.CreateGroup(ctx, &rpc.CreateGroupParams{Name: "frontend"}); err != nil {
		t.Fatal(err)
	}
	if info, err := u.GroupInfo(ctx, &rpc.GroupInfoParams{Name: "frontend"}); err != nil || info.CreatedBy != "alice" {
		t.Fatalf("frontend info = %+v, %v; want created_by alice", info, err)
	}
	if _, err := u.DeleteGroup(ctx, &rpc.DeleteGroupParams{Name: "frontend"}); err != nil {
		t.Fatalf("delete on the socket without identity: %v", err)
	}
}

func TestSocketIsOwnerOnly(t *testing.T) {
	d := startDaemon(t)
	st, err := os.Stat(d.sock)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v, %v", st.Mode(), err)
	}
	dst, _ := os.Stat(filepath.Dir(d.sock))
	if dst.Mode().Perm() != 0o700 {
		t.Fatalf("socket dir mode %v", dst.Mode())
	}
	if _, err := thrum.ListenUnix(d.sock); err == nil || !strings.Contains(err.Error(), "already listening") {
		t.Fatalf("second listener on a live socket: %v", err)
	}
}

func TestCallerIdentification(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	c := d.unix(t, nil)

	// No identity: a clear error, not a guess.
	_, err := c.SendMessage(ctx, &rpc.SendMessageParams{Content: "x"})
	wantCode(t, err, rpc.CodeUnauthenticated, "caller_agent_id")

	// caller_agent_id in params.
	var sent rpc.SendMessageResult
	if err := c.Call(ctx, rpc.MethodMessageSend, map[string]any{"caller_agent_id": "alice", "content": "hi", "mentions": []string{"@bob"}}, &sent); err != nil {
		t.Fatal(err)
	}
	g, _ := c.GetMessage(ctx, &rpc.GetMessageParams{MessageID: sent.MessageID})
	if g.Message.Author.AgentID != "alice" {
		t.Fatalf("author = %s", g.Message.Author.AgentID)
	}

	// A connection bound once by auth acts as that agent.
	if r, err := c.Auth(ctx, &rpc.AuthParams{AgentID: "bob"}); err != nil || r.AgentID != "bob" || r.Kind != "agent" {
		t.Fatalf("auth: %+v %v", r, err)
	}
	w, err := c.Whoami(ctx, &rpc.WhoamiParams{})
	if err != nil || w.AgentID != "bob" || w.SessionID == "" {
		t.Fatalf("whoami: %+v %v", w, err)
	}
	inbox, _ := c.ListMessages(ctx, &rpc.ListMessagesParams{Mentions: true, Unread: true})
	if inbox.Total != 1 {
		t.Fatalf("bob's inbox: %+v", inbox)
	}
	_, err = c.Auth(ctx, &rpc.AuthParams{AgentID: "zed"})
	wantCode(t, err, rpc.CodeNotFound, "not registered")
	_, err = c.Auth(ctx, &rpc.AuthParams{Token: "bad"})
	wantCode(t, err, rpc.CodeUnauthenticated, "invalid token")

	// user.register is WebSocket-only.
	_, err = c.RegisterUser(ctx, &rpc.RegisterUserParams{Username: "leon"})
	wantCode(t, err, rpc.CodeTransport, "only available over WebSocket")

	// Bad params name the field.
	err = c.Call(ctx, rpc.MethodMessageList, map[string]any{"page_size": "ten"}, nil)
	wantCode(t, err, rpc.CodeInvalidParams, "page_size must be a number")
	err = c.Call(ctx, rpc.MethodMessageList, []int{1}, nil)
	wantCode(t, err, rpc.CodeInvalidParams, "params must be an object")
	err = c.Call(ctx, "message.nope", nil, nil)
	wantCode(t, err, rpc.CodeMethodNotFound, "")
	err = c.Call(ctx, rpc.MethodSyncStatus, nil, nil)
	wantCode(t, err, rpc.CodeMethodNotFound, "")
}

func TestWebSocketNeedsToken(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	c := d.ws(t, nil)
	if _, err := c.Health(ctx, &rpc.HealthParams{}); err != nil {
		t.Fatal(err)
	}
	_, err := c.ListAgents(ctx, &rpc.ListAgentsParams{})
	wantCode(t, err, rpc.CodeUnauthenticated, "needs a credential")
	_, err = c.SendMessage(ctx, &rpc.SendMessageParams{Content: "x"})
	wantCode(t, err, rpc.CodeUnauthenticated, "call auth with your token")
	err = c.Call(ctx, rpc.MethodMessageList, map[string]any{"caller_agent_id": "alice", "unread": true}, nil)
	wantCode(t, err, rpc.CodeUnauthenticated, "needs a credential")
	_, err = c.Auth(ctx, &rpc.AuthParams{AgentID: "alice"})
	wantCode(t, err, rpc.CodeUnauthenticated, "a credential is required")
	_, err = c.Auth(ctx, &rpc.AuthParams{AgentID: "bob", Token: d.tokens["alice"]})
	wantCode(t, err, rpc.CodeUnauthenticated, "belongs to alice")
	if _, err := c.Auth(ctx, &rpc.AuthParams{Token: d.tokens["alice"]}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SendMessage(ctx, &rpc.SendMessageParams{Content: "over ws", Mentions: []string{"bob"}}); err != nil {
		t.Fatal(err)
	}
	err = c.Call(ctx, rpc.MethodMessageSend, map[string]any{"caller_agent_id": "bob", "content": "spoof"}, nil)
	wantCode(t, err, rpc.CodeForbidden, "cannot act as bob")

	// Registering a user needs the owner's secret: no credential, or an
	// agent's token, is not enough.
	u := d.ws(t, nil)
	_, err = u.RegisterUser(ctx, &rpc.RegisterUserParams{Username: "leon"})
	wantCode(t, err, rpc.CodeUnauthenticated, "needs a credential")
	_, err = c.RegisterUser(ctx, &rpc.RegisterUserParams{Username: "leon"})
	wantCode(t, err, rpc.CodeForbidden, "needs the owner's secret")
	_, err = u.Auth(ctx, &rpc.AuthParams{OwnerSecret: "not-" + d.secret})
	wantCode(t, err, rpc.CodeUnauthenticated, "wrong owner secret")
	if a, err := u.Auth(ctx, &rpc.AuthParams{OwnerSecret: d.secret}); err != nil || !a.Owner {
		t.Fatalf("auth with the owner's secret: %+v %v", a, err)
	}
	// The owner registers a user and may act as an agent.
	r, err := u.RegisterUser(ctx, &rpc.RegisterUserParams{Username: "leon"})
	if err != nil || r.Status != "registered" {
		t.Fatalf("user.register: %+v %v", r, err)
	}
	if _, err := u.SendMessage(ctx, &rpc.SendMessageParams{Content: "as alice", ActingAs: "alice", Disclose: true}); err != nil {
		t.Fatal(err)
	}
	// The user's token alone is not the owner: no acting_as.
	lu := d.ws(t, nil)
	if _, err := lu.Auth(ctx, &rpc.AuthParams{Token: r.Token}); err != nil {
		t.Fatal(err)
	}
	_, err = lu.SendMessage(ctx, &rpc.SendMessageParams{Content: "as alice", ActingAs: "alice"})
	wantCode(t, err, rpc.CodeForbidden, "acting_as alice needs the owner")
}

func TestPushOnBothTransports(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	type note struct {
		via string
		n   rpc.MessageNotification
	}
	var mu sync.Mutex
	got := make(chan note, 10)
	sink := func(via string) func(string, json.RawMessage) {
		return func(method string, params json.RawMessage) {
			mu.Lock()
			defer mu.Unlock()
			var n rpc.MessageNotification
			if method != rpc.NotificationMessage || json.Unmarshal(params, &n) != nil {
				t.Errorf("bad notification %s %s", method, params)
			}
			got <- note{via, n}
		}
	}
	u := d.unix(t, sink("unix"))
	if _, err := u.Auth(ctx, &rpc.AuthParams{AgentID: "bob"}); err != nil {
		t.Fatal(err)
	}
	subU, err := u.Subscribe(ctx, &rpc.SubscribeParams{MentionRole: "reviewer"})
	if err != nil {
		t.Fatal(err)
	}
	w := d.ws(t, sink("websocket"))
	if _, err := w.Auth(ctx, &rpc.AuthParams{Token: d.tokens["bob"]}); err != nil {
		t.Fatal(err)
	}
	subW, err := w.Subscribe(ctx, &rpc.SubscribeParams{Scope: &rpc.Pair{Type: "module", Value: "auth"}})
	if err != nil {
		t.Fatal(err)
	}
	a := d.unix(t, nil)
	a.Auth(ctx, &rpc.AuthParams{AgentID: "alice"})
	sent, err := a.SendMessage(ctx, &rpc.SendMessageParams{Content: "review please", Mentions: []string{"@reviewer"}, Scopes: []rpc.Pair{{Type: "module", Value: "auth"}}})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]rpc.MessageNotification{}
	for len(seen) < 2 {
		select {
		case n := <-got:
			seen[n.via] = n.n
		case <-time.After(5 * time.Second):
			t.Fatalf("notifications: got %v", seen)
		}
	}
	if n := seen["unix"]; n.MessageID != sent.MessageID || n.MatchedSubscription.SubscriptionID != subU.SubscriptionID || n.MatchedSubscription.MatchType != "mention" || n.Author.Role != "implementer" {
		t.Fatalf("unix notification: %+v", n)
	}
	if n := seen["websocket"]; n.MatchedSubscription.SubscriptionID != subW.SubscriptionID || n.MatchedSubscription.MatchType != "scope" || n.Preview != "review please" {
		t.Fatalf("websocket notification: %+v", n)
	}
	subs, _ := u.ListSubscriptions(ctx, &rpc.ListSubscriptionsParams{})
	if len(subs.Subscriptions) != 2 {
		t.Fatalf("bob's session subscriptions: %+v", subs)
	}
	// Closing a connection drops its subscriptions.
	w.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		subs, _ = u.ListSubscriptions(ctx, &rpc.ListSubscriptionsParams{})
		if len(subs.Subscriptions) == 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(subs.Subscriptions) != 1 {
		t.Fatalf("after ws close: %+v", subs)
	}
}

func TestDialInProcess(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	notes := make(chan rpc.MessageNotification, 1)
	c := f.n.Dial(&rpc.ClientOptions{OnNotification: func(_ string, p json.RawMessage) {
		var n rpc.MessageNotification
		json.Unmarshal(p, &n)
		notes <- n
	}})
	defer c.Close()
	if _, err := c.Auth(ctx, &rpc.AuthParams{AgentID: "bob"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Subscribe(ctx, &rpc.SubscribeParams{MentionRole: "bob"}); err != nil {
		t.Fatal(err)
	}
	m := f.send("alice", rpc.SendMessageParams{Content: "in process", Mentions: []string{"bob"}})
	select {
	case n := <-notes:
		if n.MessageID != m.MessageID {
			t.Fatalf("notification %+v", n)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no notification over the pipe")
	}
	_, err := c.GetMessage(ctx, &rpc.GetMessageParams{MessageID: "msg_x"})
	if !errors.Is(err, thrum.ErrNotFound) {
		t.Fatalf("error code lost over the pipe: %v", err)
	}
}

// TestRPCServerMethodsAreFixed: an RPCServer exposes the net/http shape
// (and LimitListener, the caps of its loopback port's listener) and
// nothing that could add, replace or remove one of its methods (the
// engine's Handle is not reachable), and sync.status and sync.force exist
// exactly when RPCOptions.Sync is given, behind the same access policy as
// the other methods.
func TestRPCServerMethodsAreFixed(t *testing.T) {
	var got []string
	typ := reflect.TypeOf(&thrum.RPCServer{})
	for i := range typ.NumMethod() {
		got = append(got, typ.Method(i).Name)
	}
	if want := []string{"Close", "LimitListener", "Serve", "ServeConn", "ServeHTTP", "Shutdown"}; !slices.Equal(got, want) {
		t.Fatalf("RPCServer's methods are %v, want %v", got, want)
	}

	f := newFixture(t, nil)
	ctx := context.Background()
	sy := &fakeSync{}
	srv := f.n.RPCServer(&thrum.RPCOptions{Sync: sy})
	hs := httptest.NewServer(srv)
	a, b := net.Pipe()
	done := make(chan struct{})
	go func() { defer close(done); srv.ServeConn(ctx, a) }()
	t.Cleanup(func() { srv.Close(); hs.Close(); <-done })

	c := rpc.NewClient(b, nil)
	defer c.Close()
	st, err := c.SyncStatus(ctx, &rpc.SyncStatusParams{})
	if err != nil || st.SyncState != "synced" || !st.Running {
		t.Fatalf("sync.status with a SyncControl: %+v, %v", st, err)
	}
	if err := c.Call(ctx, rpc.MethodSyncForce, nil, nil); err != nil {
		t.Fatalf("sync.force from the owner: %v", err)
	}
	if sy.forced.Load() != 1 {
		t.Fatalf("sync.force reached the SyncControl %d times, want 1", sy.forced.Load())
	}

	ws, err := rpc.DialWebSocket(ctx, "ws"+strings.TrimPrefix(hs.URL, "http")+"/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	_, err = ws.SyncForce(ctx, &rpc.SyncForceParams{})
	wantCode(t, err, rpc.CodeUnauthenticated, "needs a credential")
	if sy.forced.Load() != 1 {
		t.Fatal("an anonymous WebSocket forced a sync")
	}
}

// fakeSync stands in for gitsync behind RPCOptions.Sync; the real one
// is driven end to end by cmd/thrum's TestSyncEndToEnd.
type fakeSync struct{ forced atomic.Int32 }

func (s *fakeSync) SyncStatus(context.Context, *rpc.SyncStatusParams) (*rpc.SyncStatusResult, error) {
	return &rpc.SyncStatusResult{Running: true, SyncState: "synced"}, nil
}

func (s *fakeSync) SyncForce(context.Context, *rpc.SyncForceParams) (*rpc.SyncForceResult, error) {
	s.forced.Add(1)
	return &rpc.SyncForceResult{Triggered: true, SyncState: "synced"}, nil
}
