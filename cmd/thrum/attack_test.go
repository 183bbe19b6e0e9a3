package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/identity"
	"github.com/thrumhq/thrum/internal/thrumtest"
	"github.com/thrumhq/thrum/rpc"
)

// The attack suite of the trust boundary (DESIGN.md, "Trust boundary"):
// each test drives a real daemon process, the built binary, over its real
// socket and loopback port, as a local user or a localhost web page would.
// TestAttackAllAtOnce runs the resource attacks together, at the issue's
// scale, and prints the daemon's peak memory.

// attackTarget is a running daemon and what its owner knows of it.
type attackTarget struct {
	c      *thrumCLI
	pid    int
	sock   string
	wsURL  string
	secret string
	tokens map[string]string
}

func startAttackTarget(t *testing.T) *attackTarget {
	t.Helper()
	thrumBin := thrumtest.Binary(t)
	c := &thrumCLI{t: t, repo: thrumtest.GitRepo(t), bin: thrumBin}
	c.ok("", "init")
	st := startDaemon(t, c)
	a := &attackTarget{c: c, pid: int(num(st, "pid")), tokens: map[string]string{}}
	a.sock = filepath.Join(c.repo, ".thrum", "var", "thrum.sock")
	a.wsURL = fmt.Sprintf("ws://127.0.0.1:%d/ws", int(num(st, "ws_port")))
	for _, q := range [][]string{{"alice", "implementer"}, {"bob", "reviewer"}} {
		c.ok("", "quickstart", "--name", q[0], "--role", q[1], "--module", "auth")
		f, err := identity.Load(filepath.Join(c.repo, ".thrum", "identities", q[0]+".json"))
		if err != nil {
			t.Fatal(err)
		}
		a.tokens[q[0]] = f.Token
	}
	b, err := os.ReadFile(filepath.Join(c.repo, ".thrum", "var", "owner.secret"))
	if err != nil {
		t.Fatalf("the daemon keeps no owner secret: %v", err)
	}
	if fi, _ := os.Stat(filepath.Join(c.repo, ".thrum", "var", "owner.secret")); fi.Mode().Perm() != 0o600 {
		t.Fatalf("owner.secret mode %v, want 0600", fi.Mode().Perm())
	}
	a.secret = strings.TrimSpace(string(b))
	return a
}

func (a *attackTarget) ws(t *testing.T) *rpc.Client {
	t.Helper()
	c, err := rpc.DialWebSocket(context.Background(), a.wsURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func (a *attackTarget) unix(t *testing.T) *rpc.Client {
	t.Helper()
	c, err := rpc.Dial(context.Background(), a.sock, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func (a *attackTarget) messageCount(t *testing.T) int {
	t.Helper()
	var r rpc.ListMessagesResult
	if err := a.unix(t).Call(context.Background(), rpc.MethodMessageList, map[string]any{"page_size": 1}, &r); err != nil {
		t.Fatal(err)
	}
	return r.Total
}

func wantRPCCode(t *testing.T, what string, err error, code int) {
	t.Helper()
	var e *rpc.Error
	if !errors.As(err, &e) || e.Code != code {
		t.Errorf("%s: %v, want code %d", what, err, code)
	}
}

// Attacks 1 and 3: an anonymous WebSocket gets nothing but health: no
// user.register, no message bodies, no agent contexts, no owner's email.
func TestAttackAnonymousWebSocket(t *testing.T) {
	t.Parallel()
	a := startAttackTarget(t)
	ctx := context.Background()
	u := a.unix(t)
	if _, err := u.Auth(ctx, &rpc.AuthParams{AgentID: "alice"}); err != nil {
		t.Fatal(err)
	}
	sent, err := u.SendMessage(ctx, &rpc.SendMessageParams{Content: "secret plans", Mentions: []string{"bob"}})
	if err != nil {
		t.Fatal(err)
	}
	var sessions rpc.ListSessionsResult
	if err := u.Call(ctx, rpc.MethodSessionList, map[string]any{"agent_id": "alice", "active_only": true}, &sessions); err != nil || len(sessions.Sessions) == 0 {
		t.Fatalf("alice's session: %+v %v", sessions, err)
	}
	aliceSession := sessions.Sessions[0].SessionID
	w := a.ws(t)
	if _, err := w.Health(ctx, &rpc.HealthParams{}); err != nil {
		t.Fatalf("health: %v", err)
	}
	for _, call := range []struct {
		method string
		params any
	}{
		{rpc.MethodUserRegister, map[string]any{"username": "mallory"}},
		{rpc.MethodMessageList, map[string]any{}},
		{rpc.MethodMessageGet, map[string]any{"message_id": sent.MessageID}},
		{rpc.MethodAgentListContext, map[string]any{}},
		{rpc.MethodUserIdentify, map[string]any{}},
		{rpc.MethodAgentList, map[string]any{}},
		{rpc.MethodAgentRegister, map[string]any{"name": "mallory", "role": "tester", "module": "x"}},
		{rpc.MethodThreadList, map[string]any{}},
		{rpc.MethodSessionList, map[string]any{}},
		{rpc.MethodGroupList, map[string]any{}},
		{rpc.MethodMessageSend, map[string]any{"content": "x", "acting_as": "alice"}},
		{rpc.MethodSessionEnd, map[string]any{"session_id": aliceSession}},
		{rpc.MethodAgentDelete, map[string]any{"name": "bob"}},
	} {
		var out json.RawMessage
		err := w.Call(ctx, call.method, call.params, &out)
		wantRPCCode(t, call.method+" without a credential", err, rpc.CodeUnauthenticated)
		if strings.Contains(string(out), "secret plans") || strings.Contains(string(out), "test@example.com") {
			t.Errorf("%s leaked: %s", call.method, out)
		}
	}
	_, err = w.Auth(ctx, &rpc.AuthParams{OwnerSecret: "0000"})
	wantRPCCode(t, "a guessed owner secret", err, rpc.CodeUnauthenticated)
	if n := a.messageCount(t); n != 1 {
		t.Errorf("%d messages after the attack, want 1", n)
	}
	if err := u.Call(ctx, rpc.MethodSessionList, map[string]any{"agent_id": "alice", "active_only": true}, &sessions); err != nil || len(sessions.Sessions) == 0 || sessions.Sessions[0].SessionID != aliceSession {
		t.Errorf("alice's session after the attack: %+v %v", sessions, err)
	}
	var agents rpc.ListAgentsResult
	if err := u.Call(ctx, rpc.MethodAgentList, map[string]any{}, &agents); err != nil || len(agents.Agents) < 2 {
		t.Errorf("agents after the attack: %+v %v", agents, err)
	}
}

// Attack 1: an agent's token is that agent alone: no acting_as, no
// user.register, no ending another's session, no deleting another agent.
// The owner's secret may do all of it.
func TestAttackTokenHolder(t *testing.T) {
	t.Parallel()
	a := startAttackTarget(t)
	ctx := context.Background()
	var sessions rpc.ListSessionsResult
	if err := a.unix(t).Call(ctx, rpc.MethodSessionList, map[string]any{"agent_id": "bob", "active_only": true}, &sessions); err != nil || len(sessions.Sessions) == 0 {
		t.Fatalf("bob's session: %+v %v", sessions, err)
	}
	bobSession := sessions.Sessions[0].SessionID

	m := a.ws(t)
	if _, err := m.Auth(ctx, &rpc.AuthParams{Token: a.tokens["alice"]}); err != nil {
		t.Fatal(err)
	}
	_, err := m.SendMessage(ctx, &rpc.SendMessageParams{Content: "from bob, honest", ActingAs: "bob", Mentions: []string{"alice"}})
	wantRPCCode(t, "acting_as bob with alice's token", err, rpc.CodeForbidden)
	_, err = m.RegisterUser(ctx, &rpc.RegisterUserParams{Username: "mallory"})
	wantRPCCode(t, "user.register with an agent's token", err, rpc.CodeForbidden)
	_, err = m.EndSession(ctx, &rpc.EndSessionParams{SessionID: bobSession})
	wantRPCCode(t, "ending bob's session", err, rpc.CodeForbidden)
	_, err = m.DeleteAgent(ctx, &rpc.DeleteAgentParams{Name: "bob"})
	wantRPCCode(t, "deleting bob", err, rpc.CodeForbidden)
	err = m.Call(ctx, rpc.MethodAgentCleanup, map[string]any{"force": true}, nil)
	wantRPCCode(t, "agent.cleanup --force", err, rpc.CodeForbidden)
	if n := a.messageCount(t); n != 0 {
		t.Errorf("%d messages stored by the attack", n)
	}
	var st rpc.ListSessionsResult
	if err := a.unix(t).Call(ctx, rpc.MethodSessionList, map[string]any{"agent_id": "bob", "active_only": true}, &st); err != nil || len(st.Sessions) == 0 || st.Sessions[0].SessionID != bobSession {
		t.Errorf("bob's session after the attack: %+v %v", st, err)
	}

	// The owner's secret, read from the owner's file, may.
	o := a.ws(t)
	if r, err := o.Auth(ctx, &rpc.AuthParams{OwnerSecret: a.secret}); err != nil || !r.Owner {
		t.Fatalf("auth with the owner's secret: %+v %v", r, err)
	}
	ada, err := o.RegisterUser(ctx, &rpc.RegisterUserParams{Username: "ada"})
	if err != nil {
		t.Fatalf("the owner registers a user: %v", err)
	}
	if _, err := o.SendMessage(ctx, &rpc.SendMessageParams{Content: "via ada", ActingAs: "bob", Disclose: true, Mentions: []string{"alice"}}); err != nil {
		t.Fatalf("the owner's user acts as bob: %v", err)
	}

	// A user's token alone (the owner registered the user, but whoever
	// holds the token is not the owner) speaks for that user only: no
	// acting as an agent, no ending or deleting another's.
	u := a.ws(t)
	if r, err := u.Auth(ctx, &rpc.AuthParams{Token: ada.Token}); err != nil || r.Owner {
		t.Fatalf("auth with ada's token: %+v %v", r, err)
	}
	_, err = u.SendMessage(ctx, &rpc.SendMessageParams{Content: "from bob?", ActingAs: "bob", Disclose: true, Mentions: []string{"alice"}})
	wantRPCCode(t, "acting_as bob with a user's token", err, rpc.CodeForbidden)
	_, err = u.EndSession(ctx, &rpc.EndSessionParams{SessionID: bobSession})
	wantRPCCode(t, "ending bob's session with a user's token", err, rpc.CodeForbidden)
	_, err = u.DeleteAgent(ctx, &rpc.DeleteAgentParams{Name: "bob"})
	wantRPCCode(t, "deleting bob with a user's token", err, rpc.CodeForbidden)
	if err := a.unix(t).Call(ctx, rpc.MethodSessionList, map[string]any{"agent_id": "bob", "active_only": true}, &st); err != nil || len(st.Sessions) == 0 || st.Sessions[0].SessionID != bobSession {
		t.Errorf("bob's session after the user's attempt: %+v %v", st, err)
	}
	if n := a.messageCount(t); n != 1 {
		t.Errorf("%d messages stored, want only the owner's one", n)
	}
	if _, err := u.SendMessage(ctx, &rpc.SendMessageParams{Content: "as myself", Mentions: []string{"alice"}}); err != nil {
		t.Errorf("ada sends as herself: %v", err)
	}
}

// Attack 2: a worktree ref names another repository whose config runs a
// program (core.fsmonitor); the daemon must not run git there. Its own
// repository's worktree still gets its git context.
func TestAttackGitOutsideRepo(t *testing.T) {
	t.Parallel()
	a := startAttackTarget(t)
	ctx := context.Background()
	evil := t.TempDir()
	marker := filepath.Join(t.TempDir(), "pwned")
	thrumtest.Git(t, evil, "init", "-q", "-b", "main")
	// A commit and a changed file: every command of the daemon's work
	// context (branch, commits, status) then has something to read, so
	// the ones that run the hook are reached, if the daemon goes there.
	thrumtest.GitUser(t, evil)
	if err := os.WriteFile(filepath.Join(evil, "secret.txt"), []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	thrumtest.Git(t, evil, "add", "secret.txt")
	thrumtest.Git(t, evil, "commit", "-q", "-m", "first")
	if err := os.WriteFile(filepath.Join(evil, "secret.txt"), []byte("changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	hook := filepath.Join(evil, "hook.sh")
	if err := os.WriteFile(hook, []byte("#!/bin/sh\ntouch "+marker+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	thrumtest.Git(t, evil, "config", "core.fsmonitor", hook)
	// The hook works when git does run there: the attack is real.
	thrumtest.Git(t, evil, "status", "--porcelain")
	if _, err := os.Stat(marker); err != nil {
		t.Skipf("this git does not run core.fsmonitor (%v): nothing to prove", err)
	}
	os.Remove(marker)

	w := a.ws(t)
	if _, err := w.Auth(ctx, &rpc.AuthParams{Token: a.tokens["alice"]}); err != nil {
		t.Fatal(err)
	}
	var sessions rpc.ListSessionsResult
	if err := w.Call(ctx, rpc.MethodSessionList, map[string]any{"agent_id": "alice", "active_only": true}, &sessions); err != nil || len(sessions.Sessions) == 0 {
		t.Fatalf("alice's session: %+v %v", sessions, err)
	}
	sid := sessions.Sessions[0].SessionID
	if _, err := w.Heartbeat(ctx, &rpc.HeartbeatParams{SessionID: sid, AddRefs: []rpc.Pair{{Type: "worktree", Value: evil}}}); err != nil {
		t.Fatal(err)
	}
	var lc rpc.ListContextResult
	if err := w.Call(ctx, rpc.MethodAgentListContext, map[string]any{}, &lc); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if _, err := os.Stat(marker); err == nil {
		t.Error("the daemon ran git in a repository a caller named: its hook ran")
	}
	for _, c := range lc.Contexts {
		if c.WorktreePath == evil {
			t.Errorf("a context of the foreign repository was recorded: %+v", c)
		}
	}
	if t.Failed() {
		return
	}
	// The daemon's own repository is still read.
	if _, err := w.Heartbeat(ctx, &rpc.HeartbeatParams{SessionID: sid, RemoveRefs: []rpc.Pair{{Type: "worktree", Value: evil}}, AddRefs: []rpc.Pair{{Type: "worktree", Value: a.c.repo}}}); err != nil {
		t.Fatal(err)
	}
	if err := w.Call(ctx, rpc.MethodAgentListContext, map[string]any{}, &lc); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, c := range lc.Contexts {
		found = found || c.WorktreePath == a.c.repo && c.Branch == "main"
	}
	if !found {
		t.Fatalf("no context for the daemon's own worktree: %+v", lc.Contexts)
	}
}

// Attack 7: wrong-typed identity params and invalid Unicode are refused
// with the right codes, and nothing is stored.
func TestAttackCodes(t *testing.T) {
	t.Parallel()
	a := startAttackTarget(t)
	ctx := context.Background()
	u := a.unix(t)
	err := u.Call(ctx, rpc.MethodMessageSend, map[string]any{"caller_agent_id": 42, "content": "x"}, nil)
	wantRPCCode(t, "caller_agent_id 42", err, rpc.CodeInvalidParams)
	err = u.Call(ctx, rpc.MethodMessageList, map[string]any{"caller_agent_id": []int{1}}, nil)
	wantRPCCode(t, "caller_agent_id [1]", err, rpc.CodeInvalidParams)
	raw := dialAttackUnix(t, a.sock)
	for _, line := range []string{
		"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"message.send\",\"params\":{\"caller_agent_id\":\"alice\",\"content\":\"bad \xff byte\"}}",
		`{"jsonrpc":"2.0","id":2,"method":"message.send","params":{"caller_agent_id":"alice","content":"lone \ud800 surrogate"}}`,
	} {
		reply := raw.roundTrip(t, line)
		if !strings.Contains(reply, `"code":-32700`) {
			t.Errorf("invalid Unicode: %s", reply)
		}
	}
	// The same frames on a WebSocket, as a token holder sends them.
	ws, code := thrumtest.RawHandshake(a.wsURL)
	if code != http.StatusSwitchingProtocols {
		t.Fatalf("handshake: HTTP %d", code)
	}
	defer ws.Close()
	if err := ws.Send([]byte(`{"jsonrpc":"2.0","id":1,"method":"auth","params":{"token":"` + a.tokens["alice"] + `"}}`)); err != nil {
		t.Fatal(err)
	}
	if reply, err := ws.ReadReply(); err != nil || !strings.Contains(string(reply), `"agent_id":"alice"`) {
		t.Fatalf("auth on the raw WebSocket: %s %v", reply, err)
	}
	for _, frame := range []string{
		"{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"message.send\",\"params\":{\"content\":\"bad \xff byte\"}}",
		`{"jsonrpc":"2.0","id":4,"method":"message.send","params":{"content":"lone \ud800 surrogate"}}`,
	} {
		if err := ws.Send([]byte(frame)); err != nil {
			t.Fatal(err)
		}
		if reply, err := ws.ReadReply(); err != nil || !strings.Contains(string(reply), `"code":-32700`) {
			t.Errorf("invalid Unicode over the WebSocket: %s %v", reply, err)
		}
	}
	if n := a.messageCount(t); n != 0 {
		t.Errorf("%d messages stored from invalid requests", n)
	}
}

// Attack 4: idle, never-authenticated WebSockets fill only their own
// small pool and are closed within seconds; the owner's CLI works all the
// while, and daemon status says the daemon runs.
func TestAttackIdleConnections(t *testing.T) {
	t.Parallel()
	a := startAttackTarget(t)
	const n = 300
	var (
		mu       sync.Mutex
		upgraded []net.Conn
		refused  int
	)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ws, code := thrumtest.RawHandshake(a.wsURL)
			mu.Lock()
			defer mu.Unlock()
			if code == http.StatusSwitchingProtocols {
				upgraded = append(upgraded, ws.Conn)
			} else {
				refused++
			}
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, c := range upgraded {
			c.Close()
		}
	})
	t.Logf("%d idle WebSockets: %d upgraded, %d refused", n, len(upgraded), refused)
	if len(upgraded) > thrum.DefaultMaxUnauthConns {
		t.Errorf("%d unauthenticated WebSockets held, the cap is %d", len(upgraded), thrum.DefaultMaxUnauthConns)
	}
	// The owner is not locked out.
	r := a.c.ok("alice", "send", "still here", "--to", "@bob")
	contains(t, "send during the attack", r.stdout, "Message sent")
	r = a.c.ok("", "daemon", "status")
	contains(t, "status during the attack", r.stdout, "Daemon running (pid "+strconv.Itoa(a.pid)+")")
	// The strangers hold the whole pool of connections that have not
	// authenticated: one more, even a token holder's that would
	// authenticate next, is refused at the handshake.
	ctx := context.Background()
	if len(upgraded) == thrum.DefaultMaxUnauthConns {
		if c, err := rpc.DialWebSocket(ctx, a.wsURL, nil); err == nil {
			c.Close()
			t.Error("a WebSocket without a credential in its handshake was upgraded while strangers held the pool")
		}
	} else {
		t.Logf("the strangers hold %d of the %d unauthenticated slots: the lockout they attempt is not complete", len(upgraded), thrum.DefaultMaxUnauthConns)
	}
	// A token holder that presents its token in the handshake gets in: it
	// starts in the authenticated pool. So does the owner's secret; a
	// credential the daemon does not know is refused.
	c, err := rpc.DialWebSocket(ctx, a.wsURL, &rpc.ClientOptions{Credential: a.tokens["bob"]})
	if err != nil {
		t.Fatalf("a token holder during the attack: %v", err)
	}
	defer c.Close()
	if w, err := c.Whoami(ctx, &rpc.WhoamiParams{}); err != nil || w.AgentID != "bob" {
		t.Errorf("whoami on bob's handshake-authenticated WebSocket: %+v %v", w, err)
	}
	if _, err := c.ListMessages(ctx, &rpc.ListMessagesParams{Mentions: true}); err != nil {
		t.Errorf("bob lists his inbox during the attack: %v", err)
	}
	err = c.Call(ctx, rpc.MethodMessageList, map[string]any{"caller_agent_id": "alice", "mentions": true}, nil)
	wantRPCCode(t, "bob's handshake token naming alice", err, rpc.CodeForbidden)
	o, err := rpc.DialWebSocket(ctx, a.wsURL, &rpc.ClientOptions{Credential: a.secret})
	if err != nil {
		t.Fatalf("the owner's secret during the attack: %v", err)
	}
	defer o.Close()
	if _, err := o.RegisterUser(ctx, &rpc.RegisterUserParams{Username: "ada"}); err != nil {
		t.Errorf("the owner registers a user on a handshake-authenticated WebSocket: %v", err)
	}
	if c, err := rpc.DialWebSocket(ctx, a.wsURL, &rpc.ClientOptions{Credential: "not-a-token"}); err == nil {
		c.Close()
		t.Error("a made-up credential was accepted in the handshake")
	} else if !strings.Contains(err.Error(), "401") {
		t.Errorf("a made-up credential: %v, want HTTP 401", err)
	}
	// The idle ones are closed by the server within its auth timeout.
	deadline := time.Now().Add(thrum.DefaultAuthTimeout + 5*time.Second)
	for _, nc := range upgraded {
		nc.SetReadDeadline(deadline)
		if _, err := io.Copy(io.Discard, nc); err != nil {
			t.Fatalf("an unauthenticated WebSocket was not closed within %v: %v", thrum.DefaultAuthTimeout, err)
		}
	}
}

// TestAttackAllAtOnce runs the resource attacks of the issue together
// against one daemon and prints its peak memory (VmHWM): concurrent
// oversized message.send on the socket, oversized frames on
// unauthenticated WebSockets, socket connections holding a long line they
// never finish, and idle WebSockets: the scale, 200 of each, 1 MB
// each (about 4 s with the race detector; with the request budget
// lifted it fails, the daemon peaking at 357–390 MiB).
func TestAttackAllAtOnce(t *testing.T) {
	a := startAttackTarget(t)
	const n, size = 200, 1_000_000
	before := vmHWM(t, a.pid)
	content := strings.Repeat("A", size)
	send := `{"jsonrpc":"2.0","id":1,"method":"message.send","params":{"caller_agent_id":"alice","content":"` + content + `","mentions":["bob"]}}` + "\n"
	frame := []byte(`{"jsonrpc":"2.0","id":1,"method":"message.send","params":{"content":"` + content + `"}}`)
	partial := []byte(`{"jsonrpc":"2.0","id":1,"method":"message.send","params":{"content":"` + strings.Repeat("B", 960_000))

	var wg sync.WaitGroup
	var held sync.Mutex
	var keep []net.Conn
	hold := func(c net.Conn) { held.Lock(); keep = append(keep, c); held.Unlock() }
	t.Cleanup(func() {
		for _, c := range keep {
			c.Close()
		}
	})
	var replies sync.Map // first reply line → count
	for range n {
		wg.Add(4)
		go func() { // an idle WebSocket that never authenticates
			defer wg.Done()
			if ws, code := thrumtest.RawHandshake(a.wsURL); code == http.StatusSwitchingProtocols {
				hold(ws.Conn)
			}
		}()
		go func() { // 1 MB message.send on the socket, all at once
			defer wg.Done()
			nc, err := net.Dial("unix", a.sock)
			if err != nil {
				return
			}
			hold(nc)
			go nc.Write([]byte(send))
			nc.SetReadDeadline(time.Now().Add(30 * time.Second))
			line, _ := bufio.NewReader(nc).ReadString('\n')
			reason := "closed"
			var r struct {
				Error *rpc.Error `json:"error"`
			}
			if json.Unmarshal([]byte(line), &r) == nil && r.Error != nil {
				reason, _, _ = strings.Cut(r.Error.Message, ":")
				reason = strconv.Itoa(r.Error.Code) + " " + reason
			}
			v, _ := replies.LoadOrStore(reason, new(int))
			held.Lock()
			*v.(*int)++
			held.Unlock()
		}()
		go func() { // 1 MB frame on an unauthenticated WebSocket
			defer wg.Done()
			ws, code := thrumtest.RawHandshake(a.wsURL)
			if code != http.StatusSwitchingProtocols {
				return
			}
			hold(ws.Conn)
			ws.Send(frame)
		}()
		go func() { // 960 KB of a line that never ends
			defer wg.Done()
			nc, err := net.Dial("unix", a.sock)
			if err != nil {
				return
			}
			hold(nc)
			nc.SetWriteDeadline(time.Now().Add(30 * time.Second))
			nc.Write(partial)
		}()
	}
	wg.Wait()
	// The owner still gets in while it all goes on.
	r := a.c.ok("alice", "send", "owner during the attack", "--to", "@bob")
	contains(t, "send during the attack", r.stdout, "Message sent")
	time.Sleep(time.Second)
	peak := vmHWM(t, a.pid)
	var summary []string
	replies.Range(func(k, v any) bool { summary = append(summary, fmt.Sprintf("%s×%d", k, *v.(*int))); return true })
	t.Logf("attack at scale %d × 1 MB: daemon VmHWM %d MiB before, %d MiB peak (goal < 100 MiB); oversized sends answered: %v",
		n, before>>20, peak>>20, summary)
	fmt.Printf("attack harness (n=%d): daemon VmHWM %d KiB before, %d KiB peak\n", n, before>>10, peak>>10)
	if peak > 100<<20 {
		t.Errorf("daemon peak memory %d MiB, goal under 100 MiB", peak>>20)
	}
	if n := a.messageCount(t); n != 1 {
		t.Errorf("%d messages stored, want only the owner's", n)
	}
}

// vmHWM returns the peak resident set of process pid, in bytes.
func vmHWM(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc status")
	return 0
}

// attackUnix is a raw line connection to the socket.
type attackUnix struct {
	nc net.Conn
	br *bufio.Reader
}

func dialAttackUnix(t *testing.T, sock string) *attackUnix {
	t.Helper()
	nc, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &attackUnix{nc: nc, br: bufio.NewReader(nc)}
}

func (u *attackUnix) roundTrip(t *testing.T, line string) string {
	t.Helper()
	u.nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(u.nc, line+"\n"); err != nil {
		t.Fatal(err)
	}
	s, err := u.br.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The stranger: another local user, uid and gid 65534. Tests that need
// one run as root (as CI does) and skip otherwise.
const strangerID = 65534

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root, to act as a second local user")
	}
}

// asStranger runs a command as the stranger and returns its exit code and
// output.
func asStranger(t *testing.T, name string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: strangerID, Gid: strangerID}}
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), string(out)
	} else if err != nil {
		t.Fatalf("%s as the stranger: %v", name, err)
	}
	return 0, string(out)
}

// reachable lets every user traverse dir and the temp directories above
// it (t.TempDir makes them 0700), as a repository in a home directory is.
func reachable(t *testing.T, dir string) {
	t.Helper()
	for d := dir; d != filepath.Dir(d) && strings.HasPrefix(d, os.TempDir()+"/"); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// underUmask is a thrumCLI whose binary runs under umask mask ("022",
// the usual default), whatever the test process's umask.
func underUmask(t *testing.T, repo, mask string) *thrumCLI {
	t.Helper()
	wrapper := filepath.Join(t.TempDir(), "thrum")
	script := "#!/bin/sh\numask " + mask + "\nexec " + thrumtest.Binary(t) + " \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return &thrumCLI{t: t, repo: repo, bin: wrapper}
}

// Under umask 022 every directory thrum makes is 0700 and every file
// 0600: the log in the git dir, .thrum and all in it. A stranger who can
// read the repository reads no message body.
func TestAttackStrangerReadsTheLog(t *testing.T) {
	needRoot(t)
	t.Parallel()
	repo := thrumtest.GitRepo(t)
	reachable(t, repo)
	c := underUmask(t, repo, "022")
	c.ok("", "init")
	startDaemon(t, c)
	c.ok("", "quickstart", "--name", "alice", "--role", "implementer", "--module", "auth")
	const body = "the-body-only-alice-may-read"
	c.ok("alice", "send", body, "--to", "@alice")

	// grep -l prints the files it found the body in; what it could not
	// read it reports as denied.
	_, out := asStranger(t, "grep", "-rl", body, repo)
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, repo) {
			t.Errorf("the stranger read the message body in %s", line)
		}
	}
	if !strings.Contains(out, "Permission denied") {
		t.Errorf("the stranger was denied nothing:\n%s", out)
	}
	wantPrivateTree(t, filepath.Join(repo, ".git", "thrum-sync"))
	wantPrivateTree(t, filepath.Join(repo, ".thrum"))
}

// wantPrivateTree fails the test unless every directory under root is
// 0700 and every file 0600 (or less), all this user's.
func wantPrivateTree(t *testing.T, root string) {
	t.Helper()
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case fi.IsDir():
			if fi.Mode().Perm() != 0o700 {
				t.Errorf("%s: mode %v, want 0700", path, fi.Mode().Perm())
			}
			if d.Name() == ".git" && path != root {
				return filepath.SkipDir
			}
		case d.Name() == ".git":
			// git's link to the worktree's metadata, inside the 0700 directory
		case fi.Mode().Perm()&0o077 != 0:
			t.Errorf("%s: mode %v, want 0600", path, fi.Mode().Perm())
		}
		if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != os.Geteuid() {
			t.Errorf("%s: owned by uid %d", path, st.Uid)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A stranger who made .thrum before the owner's init (writable by all,
// as a shared checkout might allow) does not get it used: init and the
// daemon refuse it, naming it, and so do the owner's other commands.
func TestAttackStrangerMadeThrumDir(t *testing.T) {
	needRoot(t)
	t.Parallel()
	repo := thrumtest.GitRepo(t)
	reachable(t, repo)
	if err := os.Chmod(repo, 0o777); err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(repo, ".thrum")
	if code, out := asStranger(t, "mkdir", "-m", "777", home, filepath.Join(home, "var")); code != 0 {
		t.Fatalf("the stranger's mkdir: %s", out)
	}
	c := underUmask(t, repo, "022")
	c.fails(1, "", []string{"init"}, home, "owned by")
	c.fails(1, "", []string{"daemon", "run"}, home, "owned by")
	c.fails(1, "", []string{"daemon", "start"}, home, "owned by")
	if _, err := os.Stat(filepath.Join(home, "var", "thrum.sock")); err == nil {
		t.Error("a daemon listens in the stranger's directory")
	}

	// The owner's own .thrum left writable by all, with the stranger's
	// var inside: var is refused, by name.
	if err := os.RemoveAll(home); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(home, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(home, 0o777); err != nil {
		t.Fatal(err)
	}
	if code, out := asStranger(t, "mkdir", "-m", "777", filepath.Join(home, "var")); code != 0 {
		t.Fatalf("the stranger's mkdir: %s", out)
	}
	c.fails(1, "", []string{"init"}, home, "writable by other users")
	if err := os.Chmod(home, 0o755); err != nil {
		t.Fatal(err)
	}
	c.fails(1, "", []string{"init"}, filepath.Join(home, "var"), "owned by")

	// The owner's own directories with loose modes are tightened.
	if err := os.RemoveAll(filepath.Join(home, "var")); err != nil {
		t.Fatal(err)
	}
	c.ok("", "init")
	for _, d := range []string{home, filepath.Join(home, "var")} {
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s after init: %v %v, want 0700", d, fi.Mode().Perm(), err)
		}
	}
}

// In a repository owned by another user git refuses to work ("dubious
// ownership"), so thrum cannot sync it: init says so and does nothing,
// rather than keep the log outside git with sync off.
func TestAttackDubiousOwnershipRepo(t *testing.T) {
	needRoot(t)
	t.Parallel()
	repo := thrumtest.GitRepo(t)
	if err := filepath.WalkDir(repo, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, strangerID, strangerID)
	}); err != nil {
		t.Fatal(err)
	}
	c := underUmask(t, repo, "022")
	c.fails(1, "", []string{"init"}, repo, "dubious ownership", "safe.directory")
	if _, err := os.Stat(filepath.Join(repo, ".thrum")); err == nil {
		t.Error("init made .thrum in a repository it cannot sync")
	}
}
