package thrum_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/internal/access"
	"github.com/thrumhq/thrum/internal/thrumtest"
	"github.com/thrumhq/thrum/rpc"
)

// clock is a settable clock for Options.Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func codeOf(err error) int {
	var e *rpc.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}

// TestWebLoginOnceThenSession: a code from web.login (socket only) makes
// one WebSocket the owner's, exactly once and only while fresh; the web
// session it returns makes later WebSockets the owner's until it expires.
func TestWebLoginOnceThenSession(t *testing.T) {
	t.Parallel() // it waits more than it works
	ctx := context.Background()
	clk := &clock{t: time.Now()}
	n := thrumtest.OpenNode(t, &thrum.Options{Now: clk.now})
	thrumtest.Register(t, n, "alice", "dev", "core")
	d := thrumtest.Serve(t, n, nil)
	sock, err := d.Dial(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()
	ws := func() *rpc.Client {
		c, err := d.DialWebSocket(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}

	// Nobody on the WebSocket mints codes: not a stranger, not the owner.
	if _, err := ws().WebLogin(ctx, nil); codeOf(err) != rpc.CodeUnauthenticated {
		t.Fatalf("anonymous web.login: %v, want -32002", err)
	}
	owner := ws()
	if _, err := owner.Auth(ctx, &rpc.AuthParams{OwnerSecret: d.Secret}); err != nil {
		t.Fatal(err)
	}
	if _, err := owner.WebLogin(ctx, nil); codeOf(err) != rpc.CodeTransport {
		t.Fatalf("web.login over an owner's WebSocket: %v, want -32001", err)
	}

	login, err := sock.WebLogin(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(login.Code) < 40 {
		t.Fatalf("code %q is too short to be 256 bits", login.Code)
	}
	page := ws()
	if _, err := page.ListAgents(ctx, nil); codeOf(err) != rpc.CodeUnauthenticated {
		t.Fatalf("agent.list before login: %v, want -32002", err)
	}
	res, err := page.Auth(ctx, &rpc.AuthParams{LoginCode: login.Code})
	if err != nil {
		t.Fatalf("auth with the code: %v", err)
	}
	if !res.Owner || res.WebSession == "" || res.WebSession == login.Code || res.WebSessionExpiresAt == "" {
		t.Fatalf("auth result %+v: want the owner, with a new web session", res)
	}
	if _, err := page.ListAgents(ctx, nil); err != nil {
		t.Fatalf("agent.list after login: %v", err)
	}
	if _, err := ws().Auth(ctx, &rpc.AuthParams{LoginCode: login.Code}); codeOf(err) != rpc.CodeUnauthenticated {
		t.Fatalf("second use of the code: %v, want -32002", err)
	}
	if _, err := ws().Auth(ctx, &rpc.AuthParams{LoginCode: login.Code, WebSession: res.WebSession}); codeOf(err) != rpc.CodeInvalidParams {
		t.Fatalf("two credentials: %v, want -32602", err)
	}

	// The session signs in a new connection (a reload, a reconnect).
	again := ws()
	if r, err := again.Auth(ctx, &rpc.AuthParams{WebSession: res.WebSession}); err != nil || !r.Owner || r.WebSession != "" {
		t.Fatalf("auth with the web session: %+v, %v", r, err)
	}

	// A code can ride in the handshake instead (a browser's first sign-in
	// while strangers fill the pool of connections yet to authenticate):
	// the connection is the owner's from the start, and its auth with the
	// code returns the web session the handshake traded it for, once.
	hs, err := sock.WebLogin(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	tradedExpiry := eventlog.FormatTime(clk.now().Add(access.SessionTTL))
	first, err := d.DialWebSocket(ctx, &rpc.ClientOptions{Credential: hs.Code})
	if err != nil {
		t.Fatalf("handshake with a login code: %v", err)
	}
	defer first.Close()
	clk.add(time.Second) // a session made by auth now would expire later
	if _, err := first.ListAgents(ctx, nil); err != nil {
		t.Fatalf("agent.list on a connection whose handshake carried the code: %v", err)
	}
	if _, err := d.DialWebSocket(ctx, &rpc.ClientOptions{Credential: hs.Code}); err == nil || !strings.Contains(err.Error(), "login code works once") {
		t.Fatalf("a second handshake with the same code: %v, want it refused as a spent code", err)
	}
	if _, err := ws().Auth(ctx, &rpc.AuthParams{LoginCode: hs.Code}); codeOf(err) != rpc.CodeUnauthenticated {
		t.Fatalf("auth elsewhere with the code a handshake used: %v, want -32002", err)
	}
	if _, err := first.Auth(ctx, &rpc.AuthParams{LoginCode: "not-a-code"}); codeOf(err) != rpc.CodeUnauthenticated {
		t.Fatalf("auth with another code on the connection whose handshake traded one: %v, want -32002", err)
	}
	traded, err := first.Auth(ctx, &rpc.AuthParams{LoginCode: hs.Code})
	if err != nil || !traded.Owner || traded.WebSession == "" || traded.WebSession == res.WebSession {
		t.Fatalf("auth with the handshake's code: %+v, %v; want the owner, with a new web session", traded, err)
	}
	if traded.WebSessionExpiresAt != tradedExpiry {
		t.Fatalf("the session returned expires at %s, want %s: the one the handshake made, not a second", traded.WebSessionExpiresAt, tradedExpiry)
	}
	if _, err := first.Auth(ctx, &rpc.AuthParams{LoginCode: hs.Code}); codeOf(err) != rpc.CodeUnauthenticated {
		t.Fatalf("second auth with the handshake's code: %v, want -32002", err)
	}
	if r, err := ws().Auth(ctx, &rpc.AuthParams{WebSession: traded.WebSession}); err != nil || !r.Owner {
		t.Fatalf("auth with the session the handshake traded: %+v, %v", r, err)
	}

	// A code not used within access.LoginTTL is dead.
	late, err := sock.WebLogin(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	lateHS, err := sock.WebLogin(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	clk.add(access.LoginTTL)
	if _, err := ws().Auth(ctx, &rpc.AuthParams{LoginCode: late.Code}); codeOf(err) != rpc.CodeUnauthenticated {
		t.Fatalf("expired code: %v, want -32002", err)
	}
	if _, err := d.DialWebSocket(ctx, &rpc.ClientOptions{Credential: lateHS.Code}); err == nil {
		t.Fatal("a handshake with an expired code was let in")
	}
	if _, err := ws().Auth(ctx, &rpc.AuthParams{LoginCode: "not-a-code"}); codeOf(err) != rpc.CodeUnauthenticated {
		t.Fatalf("made-up code: %v, want -32002", err)
	}
	// And a session past access.SessionTTL.
	clk.add(access.SessionTTL)
	if _, err := ws().Auth(ctx, &rpc.AuthParams{WebSession: res.WebSession}); codeOf(err) != rpc.CodeUnauthenticated {
		t.Fatalf("expired session: %v, want -32002", err)
	}

	// A server without an owner's secret has no owner WebSockets to log in.
	plain := thrumtest.ServeUnix(t, n)
	pc, err := plain.Dial(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	if _, err := pc.WebLogin(ctx, nil); codeOf(err) != rpc.CodeUnavailable {
		t.Fatalf("web.login without an owner's secret: %v, want -32007", err)
	}
}

// TestWebLoginCodeKeptWhenNoSlot: a handshake refused for want of a
// slot does not spend the login code it carried.
func TestWebLoginCodeKeptWhenNoSlot(t *testing.T) {
	ctx := context.Background()
	n := thrumtest.OpenNode(t, nil)
	d := thrumtest.Serve(t, n, &thrum.RPCOptions{MaxConns: 1})
	sock, err := d.Dial(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()
	login, err := sock.WebLogin(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	owner, err := d.DialWebSocket(ctx, &rpc.ClientOptions{Credential: d.Secret}) // the one authenticated slot
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.DialWebSocket(ctx, &rpc.ClientOptions{Credential: login.Code}); err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("handshake with a code and no slot: %v, want HTTP 503", err)
	}
	owner.Close()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		page, err := d.DialWebSocket(ctx, &rpc.ClientOptions{Credential: login.Code})
		if err == nil {
			defer page.Close()
			if r, err := page.Auth(ctx, &rpc.AuthParams{LoginCode: login.Code}); err != nil || !r.Owner || r.WebSession == "" {
				t.Fatalf("auth after the handshake: %+v, %v", r, err)
			}
			return
		}
		if strings.Contains(err.Error(), "401") || time.Now().After(deadline) {
			t.Fatalf("handshake with the code once a slot is free: %v, want it let in (the refusal must not spend it)", err)
		}
	}
}

// TestUserSubscribesWithoutSession: a user (the person at the web
// console) has no sessions, yet subscribes, lists and unsubscribes its own
// subscriptions, and is pushed agents' messages.
func TestUserSubscribesWithoutSession(t *testing.T) {
	ctx := context.Background()
	n := thrumtest.OpenNode(t, nil)
	alice := thrumtest.Register(t, n, "alice", "dev", "core")
	d := thrumtest.Serve(t, n, nil)
	got := make(chan rpc.MessageNotification, 4)
	page, err := d.DialWebSocket(ctx, &rpc.ClientOptions{OnNotification: func(method string, params json.RawMessage) {
		var nt rpc.MessageNotification
		if method == rpc.NotificationMessage && json.Unmarshal(params, &nt) == nil {
			got <- nt
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer page.Close()
	if _, err := page.Auth(ctx, &rpc.AuthParams{OwnerSecret: d.Secret}); err != nil {
		t.Fatal(err)
	}
	if _, err := page.RegisterUser(ctx, &rpc.RegisterUserParams{Username: "leon"}); err != nil {
		t.Fatal(err)
	}
	sub, err := page.Subscribe(ctx, &rpc.SubscribeParams{All: true})
	if err != nil {
		t.Fatalf("a user subscribes: %v", err)
	}
	if sub.SessionID != "" {
		t.Fatalf("a user's subscription has session %q", sub.SessionID)
	}
	list, err := page.ListSubscriptions(ctx, nil)
	if err != nil || len(list.Subscriptions) != 1 || list.Subscriptions[0].ID != sub.SubscriptionID {
		t.Fatalf("subscriptions.list: %+v, %v", list, err)
	}
	sent, err := n.SendMessage(thrum.WithCaller(ctx, thrum.Caller{AgentID: alice.ID}), &rpc.SendMessageParams{Content: "hello", Mentions: []string{"everyone"}})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case nt := <-got:
		if nt.MessageID != sent.MessageID || nt.Author.AgentID != alice.ID {
			t.Fatalf("pushed %+v, want %s by %s", nt, sent.MessageID, alice.ID)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no notification for the user's subscription")
	}
	// An agent cannot remove the user's subscription; the user can.
	if r, err := n.Unsubscribe(thrum.WithCaller(ctx, thrum.Caller{AgentID: alice.ID}), &rpc.UnsubscribeParams{SubscriptionID: sub.SubscriptionID}); err != nil || r.Removed {
		t.Fatalf("alice removing leon's subscription: %+v, %v", r, err)
	}
	if r, err := page.Unsubscribe(ctx, &rpc.UnsubscribeParams{SubscriptionID: sub.SubscriptionID}); err != nil || !r.Removed {
		t.Fatalf("leon unsubscribing: %+v, %v", r, err)
	}
}

// TestWebSessionSurvivesARestart: with RPCOptions.WebSessionFile, a web
// session signs a browser in again after the server restarts, until its
// expiry; the file is the owner's alone and holds no session, only hashes.
func TestWebSessionSurvivesARestart(t *testing.T) {
	ctx := context.Background()
	clk := &clock{t: time.Now()}
	n := thrumtest.OpenNode(t, &thrum.Options{Now: clk.now})
	file := filepath.Join(t.TempDir(), "web.sessions")
	d := thrumtest.Serve(t, n, &thrum.RPCOptions{WebSessionFile: file})
	sock, err := d.Dial(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	login, err := sock.WebLogin(ctx, nil)
	sock.Close()
	if err != nil {
		t.Fatal(err)
	}
	page, err := d.DialWebSocket(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := page.Auth(ctx, &rpc.AuthParams{LoginCode: login.Code})
	page.Close()
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(file)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("sessions file: %v, %v: want mode 0600", fi, err)
	}
	if b, _ := os.ReadFile(file); strings.Contains(string(b), res.WebSession) || strings.Contains(string(b), login.Code) {
		t.Fatalf("the sessions file holds a credential itself:\n%s", b)
	}

	signIn := func() error {
		c, err := d.DialWebSocket(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, err = c.Auth(ctx, &rpc.AuthParams{WebSession: res.WebSession})
		return err
	}
	d.Stop()
	d.Start()
	if err := signIn(); err != nil {
		t.Fatalf("the web session after a restart: %v", err)
	}
	clk.add(access.SessionTTL)
	d.Stop()
	d.Start()
	if err := signIn(); codeOf(err) != rpc.CodeUnauthenticated {
		t.Fatalf("an expired web session after a restart: %v, want -32002", err)
	}
}
