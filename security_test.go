package thrum_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/internal/thrumtest"
	"github.com/thrumhq/thrum/rpc"
)

// Security tests: what the daemon refuses, over its real sockets. The
// WebSocket side uses a hand-rolled client (thrumtest.RawWS) so that a
// test controls every header and byte of a frame, which a well-behaved
// client library would never send.

// rawIOTimeout bounds every raw read and write, so that a daemon that
// stops answering fails the test instead of hanging it.
const rawIOTimeout = 10 * time.Second

// wsHandshake is thrumtest.Handshake, failing the test if no response
// came; an upgraded connection is closed when the test ends.
func wsHandshake(t testing.TB, wsURL, host string, hdr http.Header) (resp *http.Response, body string, ws *thrumtest.RawWS) {
	t.Helper()
	resp, body, ws, err := thrumtest.Handshake(wsURL, host, hdr)
	if err != nil {
		t.Fatal(err)
	}
	if ws != nil {
		t.Cleanup(func() { ws.Close() })
	}
	return resp, body, ws
}

// rawUnix is a newline-delimited JSON connection spoken by hand.
type rawUnix struct {
	nc net.Conn
	br *bufio.Reader
}

func dialRawUnix(t testing.TB, path string) *rawUnix {
	t.Helper()
	nc, err := net.DialTimeout("unix", path, rawIOTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &rawUnix{nc: nc, br: bufio.NewReader(nc)}
}

// send writes msg and a newline.
func (c *rawUnix) Send(msg []byte) error {
	c.nc.SetWriteDeadline(time.Now().Add(rawIOTimeout))
	_, err := c.nc.Write(append(msg[:len(msg):len(msg)], '\n'))
	return err
}

// readReply returns the next line without its newline.
func (c *rawUnix) ReadReply() ([]byte, error) {
	c.nc.SetReadDeadline(time.Now().Add(rawIOTimeout))
	line, err := c.br.ReadBytes('\n')
	if err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(line, []byte("\n")), nil
}

// wireReply is one JSON-RPC response as it crossed the wire.
type wireReply struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  json.RawMessage `json:"result"`
	Error   *rpc.Error      `json:"error"`
}

func decodeReply(t testing.TB, b []byte) wireReply {
	t.Helper()
	var r wireReply
	if err := json.Unmarshal(b, &r); err != nil || r.JSONRPC != "2.0" {
		t.Fatalf("reply %.200q is not a JSON-RPC response: %v", b, err)
	}
	return r
}

// wantErrorReply checks a raw reply is an error with code whose message
// contains want.
func wantErrorReply(t testing.TB, b []byte, code int, want string) wireReply {
	t.Helper()
	r := decodeReply(t, b)
	if r.Error == nil || r.Error.Code != code || !strings.Contains(r.Error.Message, want) {
		t.Fatalf("reply %.300s: want error %d containing %q", b, code, want)
	}
	return r
}

// wantClosed checks that reading ends the connection (EOF or a reset),
// with no further message.
func wantClosed(t testing.TB, read func() ([]byte, error)) {
	t.Helper()
	b, err := read()
	if err == nil {
		t.Fatalf("connection still open: got %.200q", b)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("connection not closed by the server: %v", err)
	}
	if !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read after close: %v, want EOF", err)
	}
}

const healthReq = `{"jsonrpc":"2.0","id":"h","method":"health"}`

// wantHealthy checks the daemon answers health on fresh connections of
// both transports.
func wantHealthy(t testing.TB, d *daemon) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), rawIOTimeout)
	defer cancel()
	for _, c := range []*rpc.Client{d.unix(t, nil), d.ws(t, nil)} {
		h, err := c.Health(ctx, &rpc.HealthParams{})
		if err != nil || h.Status != "ok" {
			t.Fatalf("health after abuse: %+v %v", h, err)
		}
		c.Close()
	}
}

func wsPort(t testing.TB, wsURL string) string {
	t.Helper()
	u, err := url.Parse(wsURL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Port()
}

func TestSecurityWebSocketOrigin(t *testing.T) {
	d := startDaemon(t)
	port := wsPort(t, d.wsURL)
	tests := []struct {
		name   string
		origin string // "" sends no Origin header
		allow  bool
	}{
		{"foreign", "https://evil.example", false},
		{"foreign with loopback port", "http://evil.example:" + port, false},
		{"null", "null", false},
		{"loopback name as subdomain", "http://localhost.evil.example", false},
		{"loopback IP as subdomain", "http://127.0.0.1.evil.example:" + port, false},
		{"userinfo", "http://evil.example@localhost:" + port, false},
		{"file scheme", "file:///etc/passwd", false},
		{"not a URL", "::::", false},
		{"none", "", true},
		{"localhost", "http://localhost:" + port, true},
		{"localhost https", "https://localhost:" + port, true},
		{"127.0.0.1", "http://127.0.0.1:" + port, true},
		{"ipv6 loopback", "http://[::1]:" + port, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hdr := http.Header{}
			if tt.origin != "" {
				hdr.Set("Origin", tt.origin)
			}
			resp, body, ws := wsHandshake(t, d.wsURL, "", hdr)
			checkHandshake(t, resp, body, ws, tt.allow, "Origin")
		})
	}
	wantHealthy(t, d)
}

func TestSecurityWebSocketHost(t *testing.T) {
	d := startDaemon(t)
	port := wsPort(t, d.wsURL)
	tests := []struct {
		name  string
		host  string
		allow bool
	}{
		{"dns rebinding", "evil.example:1234", false},
		{"rebinding on the daemon's port", "evil.example:" + port, false},
		{"no port", "evil.example", false},
		{"loopback name as subdomain", "localhost.evil.example:" + port, false},
		{"short IPv4 form", "127.1:" + port, false},
		{"unspecified address", "0.0.0.0:" + port, false},
		{"127.0.0.1", "127.0.0.1:" + port, true},
		{"localhost", "localhost:" + port, true},
		{"LOCALHOST", "LOCALHOST:" + port, true},
		{"ipv6 loopback", "[::1]:" + port, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Always connected to 127.0.0.1: only the Host header differs,
			// as after a DNS rebinding.
			resp, body, ws := wsHandshake(t, d.wsURL, tt.host, nil)
			checkHandshake(t, resp, body, ws, tt.allow, "Host")
		})
	}
	wantHealthy(t, d)
}

// checkHandshake checks a handshake was refused with 403 and no upgrade,
// or accepted, in which case the connection answers health.
func checkHandshake(t *testing.T, resp *http.Response, body string, ws *thrumtest.RawWS, allow bool, what string) {
	t.Helper()
	if !allow {
		if resp.StatusCode != http.StatusForbidden || ws != nil {
			t.Fatalf("status %s, want 403 Forbidden", resp.Status)
		}
		if up := resp.Header.Get("Upgrade"); up != "" || resp.Header.Get("Sec-WebSocket-Accept") != "" {
			t.Fatalf("refused handshake carries upgrade headers: %v", resp.Header)
		}
		if !strings.Contains(body, what) {
			t.Fatalf("refusal %q does not say the %s is the problem", body, what)
		}
		return
	}
	if ws == nil {
		t.Fatalf("status %s %q, want 101 Switching Protocols", resp.Status, body)
	}
	if err := ws.Send([]byte(healthReq)); err != nil {
		t.Fatal(err)
	}
	b, err := ws.ReadReply()
	if err != nil {
		t.Fatal(err)
	}
	if r := decodeReply(t, b); r.Error != nil || string(r.ID) != `"h"` {
		t.Fatalf("health over an accepted websocket: %s", b)
	}
	ws.CloseAck()
}

// paddedHealth returns a request of exactly n bytes: a health call padded with
// spaces inside the object, so that it is valid JSON at any size.
func paddedHealth(n int) []byte {
	b := make([]byte, 0, n)
	b = append(b, healthReq[:len(healthReq)-1]...)
	for len(b) < n-1 {
		b = append(b, ' ')
	}
	return append(b, '}')
}

// TestSecurityOversizeWebSocketFrame: a frame over the limit closes the
// WebSocket with 1009. The connections are the owner's, presenting the
// secret in the handshake, so that only the frame limit can close them:
// a stranger's is closed after DefaultAuthTimeout, which a slow machine
// can reach while the test is still sending.
func TestSecurityOversizeWebSocketFrame(t *testing.T) {
	d := startDaemon(t)

	// Exactly at the limit: still served.
	ws := dialOwnerWS(t, d)
	if err := ws.Send(paddedHealth(thrum.DefaultMaxRequestBytes)); err != nil {
		t.Fatal(err)
	}
	b, err := ws.ReadReply()
	if err != nil {
		t.Fatalf("a frame of exactly the limit: %v", err)
	}
	if r := decodeReply(t, b); r.Error != nil {
		t.Fatalf("a frame of exactly the limit: %s", b)
	}

	// One byte over: closed with 1009, no reply.
	errc := make(chan error, 1)
	go func() { errc <- ws.Send(paddedHealth(thrum.DefaultMaxRequestBytes + 1)) }()
	_, err = ws.ReadReply()
	var closed *thrumtest.WSClosed
	if !errors.As(err, &closed) || closed.Code != thrumtest.WSStatusMessageBig {
		t.Fatalf("after an oversize frame: %v, want close %d (message too big)", err, thrumtest.WSStatusMessageBig)
	}
	ws.CloseAck()
	<-errc // the write may fail once the server stopped reading; either is fine

	// A much larger frame, announced but only partly sent: refused as soon
	// as the limit is passed, not after buffering it all.
	ws = dialOwnerWS(t, d)
	go func() {
		big := make([]byte, 8*thrum.DefaultMaxRequestBytes)
		errc <- ws.Send(big)
	}()
	_, err = ws.ReadReply()
	if !errors.As(err, &closed) || closed.Code != thrumtest.WSStatusMessageBig {
		t.Fatalf("after an 8 MiB frame: %v, want close %d", err, thrumtest.WSStatusMessageBig)
	}
	ws.Conn.Close() // the writer may be stuck mid-frame: no close frame can follow it
	<-errc

	wantHealthy(t, d)
}

// A peer that announces a frame over the limit, sends past the limit and
// then goes silent without answering the 1009 close: the server still
// ends the connection once the request timeout has passed, rather than
// wait forever for the rest of the frame, holding the connection's slot.
func TestSecurityOversizeWebSocketFrameLeftUnfinished(t *testing.T) {
	const limit = 4 << 10
	n := thrumtest.OpenNode(t, nil)
	s := thrumtest.Serve(t, n, &thrum.RPCOptions{MaxRequestBytes: limit, RequestTimeout: time.Second})
	resp, body, ws := wsHandshake(t, s.WSURL, "", http.Header{"Authorization": {"Bearer " + s.Secret}})
	if ws == nil {
		t.Fatalf("websocket handshake with the owner's secret refused: %s %q", resp.Status, body)
	}
	// A text frame announcing 2*limit bytes, masked with a zero key, of
	// which limit+1 are sent.
	frame := []byte{0x80 | thrumtest.WSOpText, 0x80 | 127}
	frame = binary.BigEndian.AppendUint64(frame, 2*limit)
	frame = append(frame, 0, 0, 0, 0)
	frame = append(frame, bytes.Repeat([]byte{' '}, limit+1)...)
	ws.Conn.SetWriteDeadline(time.Now().Add(rawIOTimeout))
	if _, err := ws.Conn.Write(frame); err != nil {
		t.Fatal(err)
	}
	_, err := ws.ReadReply()
	var closed *thrumtest.WSClosed
	if !errors.As(err, &closed) || closed.Code != thrumtest.WSStatusMessageBig {
		t.Fatalf("after an oversize frame: %v, want close %d (message too big)", err, thrumtest.WSStatusMessageBig)
	}
	// Neither the rest of the frame nor a close frame follows: the server
	// must hang up by itself, well within the read's deadline.
	if _, err := ws.ReadReply(); !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("the server kept a connection whose peer went silent mid-frame: %v, want it closed", err)
	}
}

func TestSecurityOversizeUnixLine(t *testing.T) {
	d := startDaemon(t)

	// Exactly at the limit: still served.
	c := dialRawUnix(t, d.sock)
	if err := c.Send(paddedHealth(thrum.DefaultMaxRequestBytes)); err != nil {
		t.Fatal(err)
	}
	b, err := c.ReadReply()
	if err != nil {
		t.Fatalf("a line of exactly the limit: %v", err)
	}
	if r := decodeReply(t, b); r.Error != nil {
		t.Fatalf("a line of exactly the limit: %s", b)
	}

	// One byte over: an error reply naming the limit, then close.
	errc := make(chan error, 1)
	go func() { errc <- c.Send(paddedHealth(thrum.DefaultMaxRequestBytes + 1)) }()
	b, err = c.ReadReply()
	if err != nil {
		t.Fatalf("no reply to an oversize line: %v", err)
	}
	r := wantErrorReply(t, b, rpc.CodeInvalidRequest, "request too large: limit is "+strconv.Itoa(thrum.DefaultMaxRequestBytes))
	if string(r.ID) != "null" {
		t.Fatalf("oversize reply id %s, want null", r.ID)
	}
	wantClosed(t, c.ReadReply)
	<-errc

	// Through the typed client: the call fails with the server's reason.
	cl := d.unix(t, nil)
	err = cl.Call(context.Background(), rpc.MethodMessageSend, map[string]any{
		"caller_agent_id": "alice", "content": strings.Repeat("x", thrum.DefaultMaxRequestBytes),
	}, nil)
	if !errors.Is(err, rpc.ErrConnClosed) || !errors.Is(err, rpc.ErrInvalidRequest) || !strings.Contains(err.Error(), "request too large") {
		t.Fatalf("oversize call: %v, want the connection closed with the server's reason", err)
	}
	wantHealthy(t, d)
	if got := messageTotal(t, d); got != 0 {
		t.Fatalf("an oversize send created %d messages", got)
	}
}

// messageTotal is the number of messages the daemon stores.
func messageTotal(t testing.TB, d *daemon) int {
	t.Helper()
	r, err := d.n.ListMessages(context.Background(), &rpc.ListMessagesParams{IncludeDeleted: true, PageSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	return r.Total
}

func TestSecurityWrongToken(t *testing.T) {
	t.Parallel() // it waits more than it works
	d := startDaemon(t)
	ctx := context.Background()
	good := d.tokens["alice"]
	flipped := []byte(good)
	flipped[0] ^= 1
	bad := []struct {
		name  string
		token string
	}{
		{"garbage", "bad"},
		{"one bit off", string(flipped)},
		{"truncated", good[:len(good)-1]},
		{"padded", good + " "},
		{"upper case", strings.ToUpper(good)},
	}
	for _, transport := range []string{"unix", "websocket"} {
		t.Run(transport, func(t *testing.T) {
			var c *rpc.Client
			if transport == "unix" {
				c = d.unix(t, nil)
			} else {
				c = d.ws(t, nil)
			}
			for i, b := range bad {
				if transport == "websocket" && i > 0 {
					// Each wrong credential costs its connection a
					// second, and one that has not authenticated is
					// closed after five: a new one per pair.
					c = d.ws(t, nil)
				}
				_, err := c.Auth(ctx, &rpc.AuthParams{Token: b.token})
				wantCode(t, err, rpc.CodeUnauthenticated, "invalid token")
				// A wrong token alongside a real agent name binds nothing either.
				_, err = c.Auth(ctx, &rpc.AuthParams{AgentID: "alice", Token: b.token})
				wantCode(t, err, rpc.CodeUnauthenticated, "invalid token")
			}
			// The connection is still anonymous: it cannot write.
			_, err := c.SendMessage(ctx, &rpc.SendMessageParams{Content: "after a bad token", Mentions: []string{"bob"}})
			wantCode(t, err, rpc.CodeUnauthenticated, "")
			_, err = c.Subscribe(ctx, &rpc.SubscribeParams{All: true})
			wantCode(t, err, rpc.CodeUnauthenticated, "")
			// A group change: on the Unix socket it is the owner's (not
			// alice's, whom the bad tokens named); a WebSocket needs a token.
			_, err = c.CreateGroup(ctx, &rpc.CreateGroupParams{Name: "after_bad_token_" + transport})
			if transport == "unix" {
				info, ierr := d.n.GroupInfo(ctx, &rpc.GroupInfoParams{Name: "after_bad_token_unix"})
				if err != nil || ierr != nil || info.CreatedBy != thrum.Owner {
					t.Errorf("group.create on the socket after bad tokens: %v; info %+v, %v; want created_by %q", err, info, ierr, thrum.Owner)
				}
			} else {
				wantCode(t, err, rpc.CodeUnauthenticated, "")
			}
			if transport == "websocket" {
				// Naming an agent is not enough on a WebSocket.
				_, err = c.Auth(ctx, &rpc.AuthParams{AgentID: "alice"})
				wantCode(t, err, rpc.CodeUnauthenticated, "a credential is required")
				_, err = c.SendMessage(ctx, &rpc.SendMessageParams{Content: "after naming alice"})
				wantCode(t, err, rpc.CodeUnauthenticated, "call auth")
			}
			// The right token still works on the same connection.
			if r, err := c.Auth(ctx, &rpc.AuthParams{Token: good}); err != nil || r.AgentID != "alice" {
				t.Fatalf("auth with the right token: %+v %v", r, err)
			}
			if _, err := c.SendMessage(ctx, &rpc.SendMessageParams{Content: "authenticated", Mentions: []string{"bob"}}); err != nil {
				t.Fatal(err)
			}
		})
	}
	if got := messageTotal(t, d); got != 2 {
		t.Fatalf("%d messages stored, want the 2 sent after a good auth", got)
	}
}

func TestSecurityTokenCannotActAsAnother(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	bobsMsg, err := d.n.SendMessage(thrum.AsAgent(ctx, "bob"), &rpc.SendMessageParams{Content: "bob's", Mentions: []string{"alice"}})
	if err != nil {
		t.Fatal(err)
	}
	c := d.ws(t, nil)
	if _, err := c.Auth(ctx, &rpc.AuthParams{Token: d.tokens["alice"]}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		method string
		params map[string]any
		code   int
		msg    string
	}{
		{"send as bob", rpc.MethodMessageSend, map[string]any{"caller_agent_id": "bob", "content": "spoof", "mentions": []string{"alice"}}, rpc.CodeForbidden, "cannot act as bob"},
		{"send as @bob", rpc.MethodMessageSend, map[string]any{"caller_agent_id": "@bob", "content": "spoof"}, rpc.CodeForbidden, "cannot act as bob"},
		{"send as padded bob", rpc.MethodMessageSend, map[string]any{"caller_agent_id": " bob ", "content": "spoof"}, rpc.CodeForbidden, "cannot act as bob"},
		{"send as a user", rpc.MethodMessageSend, map[string]any{"caller_agent_id": "user:leon", "content": "spoof"}, rpc.CodeForbidden, "cannot act as"},
		{"read bob's unread", rpc.MethodMessageList, map[string]any{"caller_agent_id": "bob", "unread": true}, rpc.CodeForbidden, "cannot act as bob"},
		{"mark read as bob", rpc.MethodMessageMarkRead, map[string]any{"caller_agent_id": "bob", "message_ids": []string{bobsMsg.MessageID}}, rpc.CodeForbidden, "cannot act as bob"},
		{"subscribe as bob", rpc.MethodSubscribe, map[string]any{"caller_agent_id": "bob", "all": true}, rpc.CodeForbidden, "cannot act as bob"},
		{"whoami as bob", rpc.MethodAgentWhoami, map[string]any{"caller_agent_id": "bob"}, rpc.CodeForbidden, "cannot act as bob"},
		{"session for bob", rpc.MethodSessionStart, map[string]any{"agent_id": "bob"}, rpc.CodeForbidden, "may not start a session for bob"},
		{"acting_as bob", rpc.MethodMessageSend, map[string]any{"content": "spoof", "acting_as": "bob"}, rpc.CodeForbidden, "only users"},
		{"edit bob's message", rpc.MethodMessageEdit, map[string]any{"message_id": bobsMsg.MessageID, "content": "spoof"}, rpc.CodeForbidden, ""},
		{"delete bob's message", rpc.MethodMessageDelete, map[string]any{"message_id": bobsMsg.MessageID}, rpc.CodeForbidden, ""},
		{"bob's token for alice", rpc.MethodAuth, map[string]any{"agent_id": "bob", "token": d.tokens["alice"]}, rpc.CodeUnauthenticated, "belongs to alice"},
		{"name bob without token", rpc.MethodAuth, map[string]any{"agent_id": "bob"}, rpc.CodeUnauthenticated, "a credential is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := c.Call(ctx, tt.method, tt.params, nil)
			wantCode(t, err, tt.code, tt.msg)
		})
	}
	// Nothing was sent, edited or deleted, and the connection is still alice.
	if got := messageTotal(t, d); got != 1 {
		t.Fatalf("%d messages stored, want only bob's", got)
	}
	g, err := d.n.GetMessage(ctx, &rpc.GetMessageParams{MessageID: bobsMsg.MessageID})
	if err != nil || g.Message.Body.Content != "bob's" || g.Message.Deleted || g.Message.Version != 0 {
		t.Fatalf("bob's message after the spoofs: %+v %v", g, err)
	}
	if w, err := c.Whoami(ctx, &rpc.WhoamiParams{}); err != nil || w.AgentID != "alice" {
		t.Fatalf("whoami after the spoofs: %+v %v", w, err)
	}
}

func TestSecuritySecondDaemon(t *testing.T) {
	d := startDaemon(t)
	dataDir := d.n.Dir()

	t.Run("Open of a data dir in use", func(t *testing.T) {
		n2, err := thrum.Open(context.Background(), dataDir, nil)
		if err == nil {
			n2.Close()
			t.Fatal("a second Open of the same data directory succeeded")
		}
		if !errors.Is(err, thrum.ErrLocked) {
			t.Fatalf("err = %v, want ErrLocked", err)
		}
		if pid := "process " + strconv.Itoa(os.Getpid()); !strings.Contains(err.Error(), pid) {
			t.Fatalf("err = %q, want it to name the holder (%s)", err, pid)
		}
		if !strings.Contains(err.Error(), dataDir) {
			t.Fatalf("err = %q, want it to name the directory", err)
		}
		// The first node is untouched.
		wantHealthy(t, d)
	})

	t.Run("Open after Close", func(t *testing.T) {
		dir := t.TempDir()
		n1, err := thrum.Open(context.Background(), dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := thrum.Open(context.Background(), dir, nil); !errors.Is(err, thrum.ErrLocked) {
			t.Fatalf("second Open: %v, want ErrLocked", err)
		}
		if err := n1.Close(); err != nil {
			t.Fatal(err)
		}
		n2, err := thrum.Open(context.Background(), dir, nil)
		if err != nil {
			t.Fatalf("Open after the holder closed: %v", err)
		}
		n2.Close()
	})

	t.Run("ListenUnix on a live socket", func(t *testing.T) {
		l, err := thrum.ListenUnix(d.sock)
		if err == nil {
			l.Close()
			t.Fatal("a second listener on a live socket succeeded")
		}
		if !strings.Contains(err.Error(), "already listening") {
			t.Fatalf("err = %v", err)
		}
		// The live daemon's socket is still there and served.
		wantHealthy(t, d)
	})

	t.Run("ListenUnix on a file that is not a socket", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "var")
		file := filepath.Join(dir, "thrum.sock")
		sub := filepath.Join(dir, "sub.sock")
		if err := os.MkdirAll(sub, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, []byte("precious"), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{file, sub} {
			l, err := thrum.ListenUnix(p)
			if err == nil {
				l.Close()
				t.Fatalf("ListenUnix over %s succeeded", p)
			}
			if !strings.Contains(err.Error(), "not a socket") {
				t.Fatalf("ListenUnix over %s: %v", p, err)
			}
		}
		if b, err := os.ReadFile(file); err != nil || string(b) != "precious" {
			t.Fatalf("the file at the socket path was touched: %q %v", b, err)
		}
		if st, err := os.Stat(sub); err != nil || !st.IsDir() {
			t.Fatalf("the directory at the socket path was touched: %v", err)
		}
	})

	t.Run("ListenUnix on a stale socket", func(t *testing.T) {
		sock := filepath.Join(t.TempDir(), "var", "stale.sock")
		if err := os.MkdirAll(filepath.Dir(sock), 0o700); err != nil {
			t.Fatal(err)
		}
		old, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		old.(*net.UnixListener).SetUnlinkOnClose(false) // as if the process had crashed
		old.Close()
		if _, err := os.Stat(sock); err != nil {
			t.Fatalf("stale socket file: %v", err)
		}
		l, err := thrum.ListenUnix(sock)
		if err != nil {
			t.Fatalf("ListenUnix over a stale socket: %v", err)
		}
		srv := d.n.RPCServer(nil)
		done := make(chan error, 1)
		go func() { done <- srv.Serve(l) }()
		defer func() {
			srv.Close()
			if err := <-done; !errors.Is(err, thrum.ErrServerClosed) {
				t.Errorf("Serve: %v", err)
			}
		}()
		st, err := os.Stat(sock)
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("replaced socket mode %v, %v", st.Mode(), err)
		}
		c, err := rpc.Dial(context.Background(), sock, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Health(context.Background(), &rpc.HealthParams{}); err != nil {
			t.Fatalf("health on the replaced socket: %v", err)
		}
	})

	// A socket in a shared directory (sticky, writable by all, as /tmp
	// is) leaves the directory as it was; a missing one is made 0700.
	t.Run("ListenUnix leaves an existing directory's mode", func(t *testing.T) {
		shared := filepath.Join(t.TempDir(), "shared")
		if err := os.Mkdir(shared, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(shared, 0o777|os.ModeSticky); err != nil {
			t.Fatal(err)
		}
		l, err := thrum.ListenUnix(filepath.Join(shared, "thrum.sock"))
		if err != nil {
			t.Fatal(err)
		}
		l.Close()
		if st, err := os.Stat(shared); err != nil || st.Mode()&(os.ModePerm|os.ModeSticky) != 0o777|os.ModeSticky {
			t.Fatalf("the shared directory's mode became %v (%v), want drwxrwxrwt", st.Mode(), err)
		}
		made := filepath.Join(shared, "made", "thrum.sock")
		if l, err = thrum.ListenUnix(made); err != nil {
			t.Fatal(err)
		}
		l.Close()
		if st, err := os.Stat(filepath.Dir(made)); err != nil || st.Mode().Perm() != 0o700 {
			t.Fatalf("the directory ListenUnix made has mode %v (%v), want 0700", st.Mode(), err)
		}
	})
}

// capServer serves d's node with a MaxConns and MaxUnauthConns of max on its own Unix socket
// and WebSocket.
func capServer(t *testing.T, d *daemon, max int) (sock, wsURL string) {
	t.Helper()
	s := thrumtest.Serve(t, d.n, &thrum.RPCOptions{OwnerSecret: d.secret, MaxConns: max, MaxUnauthConns: max})
	return s.Path, s.WSURL
}

func TestSecurityConnCap(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	const max = 3
	sock, wsURL := capServer(t, d, max)

	dial := func() *rpc.Client {
		c, err := rpc.Dial(ctx, sock, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := c.Health(ctx, &rpc.HealthParams{}); err != nil {
			t.Fatalf("connection under the cap: %v", err)
		}
		return c
	}
	// Refused and failed handshakes hold no slot.
	for range 2 * max {
		resp, _, ws := wsHandshake(t, wsURL, "", http.Header{"Origin": {"https://evil.example"}})
		if ws != nil || resp.StatusCode != http.StatusForbidden {
			t.Fatalf("foreign origin: %s", resp.Status)
		}
		resp, _, ws = wsHandshake(t, wsURL, "", http.Header{"Sec-Websocket-Version": {"12"}})
		if ws != nil || resp.StatusCode == http.StatusSwitchingProtocols {
			t.Fatalf("bad websocket version: %s", resp.Status)
		}
	}
	var held []*rpc.Client
	for range max {
		held = append(held, dial())
	}

	// The 4th stream connection gets one -32006 line and is closed.
	c := dialRawUnix(t, sock)
	b, err := c.ReadReply()
	if err != nil {
		t.Fatalf("4th unix connection: %v, want an error line", err)
	}
	r := wantErrorReply(t, b, rpc.CodeLimitExceeded, "too many connections: limit is 3")
	if string(r.ID) != "null" {
		t.Fatalf("refusal id %s, want null", r.ID)
	}
	wantClosed(t, c.ReadReply)

	// The typed client reports the server's reason.
	cl, err := rpc.Dial(ctx, sock, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = cl.Health(ctx, &rpc.HealthParams{})
	cl.Close()
	if !errors.Is(err, rpc.ErrConnClosed) || !errors.Is(err, rpc.ErrLimitExceeded) {
		t.Fatalf("health on a refused connection: %v, want closed with -32006", err)
	}

	// WebSockets have their own pools: with the streams full, max
	// unauthenticated ones still connect; the next is refused with 503.
	var anon []*rpc.Client
	for range max {
		w, err := rpc.DialWebSocket(ctx, wsURL, nil)
		if err != nil {
			t.Fatalf("websocket while the streams are full: %v", err)
		}
		t.Cleanup(func() { w.Close() })
		anon = append(anon, w)
	}
	resp, body, ws := wsHandshake(t, wsURL, "", nil)
	if ws != nil || resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "too many unauthenticated connections") {
		t.Fatalf("websocket over the unauthenticated cap: %s %q, want 503", resp.Status, body)
	}
	// Authenticating moves a connection to the authenticated pool and
	// frees its unauthenticated slot.
	if _, err := anon[0].Auth(ctx, &rpc.AuthParams{Token: d.tokens["alice"]}); err != nil {
		t.Fatal(err)
	}
	var w *rpc.Client
	deadline := time.Now().Add(rawIOTimeout)
	for w == nil {
		w, err = rpc.DialWebSocket(ctx, wsURL, nil)
		if err != nil {
			if time.Now().After(deadline) {
				t.Fatalf("slot never freed: %v", err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	defer w.Close()
	if _, err := w.Health(ctx, &rpc.HealthParams{}); err != nil {
		t.Fatal(err)
	}

	// The held connections were not disturbed.
	for _, c := range held {
		if _, err := c.Health(ctx, &rpc.HealthParams{}); err != nil {
			t.Fatalf("held connection after refusals: %v", err)
		}
	}
	// A closed stream frees its slot (asynchronously).
	held[0].Close()
	deadline = time.Now().Add(rawIOTimeout)
	for {
		u, err := rpc.Dial(ctx, sock, nil)
		if err == nil {
			_, err = u.Health(ctx, &rpc.HealthParams{})
			u.Close()
		}
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stream slot never freed: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}

	// The daemon's own server has its own, default budget.
	wantHealthy(t, d)
}

func TestSecuritySubscriptionCap(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	for _, transport := range []string{"unix", "websocket"} {
		t.Run(transport, func(t *testing.T) {
			conn := func() *rpc.Client {
				var c *rpc.Client
				if transport == "unix" {
					c = d.unix(t, nil)
					if _, err := c.Auth(ctx, &rpc.AuthParams{AgentID: "bob"}); err != nil {
						t.Fatal(err)
					}
				} else {
					c = d.ws(t, nil)
					if _, err := c.Auth(ctx, &rpc.AuthParams{Token: d.tokens["bob"]}); err != nil {
						t.Fatal(err)
					}
				}
				return c
			}
			c := conn()
			for i := range thrum.DefaultMaxSubscriptions {
				if _, err := c.Subscribe(ctx, &rpc.SubscribeParams{MentionRole: fmt.Sprintf("r%d", i)}); err != nil {
					t.Fatalf("subscription %d of %d: %v", i+1, thrum.DefaultMaxSubscriptions, err)
				}
			}
			_, err := c.Subscribe(ctx, &rpc.SubscribeParams{All: true})
			wantCode(t, err, rpc.CodeLimitExceeded, fmt.Sprintf("too many subscriptions on this connection: the limit is %d", thrum.DefaultMaxSubscriptions))
			_, err = c.Subscribe(ctx, &rpc.SubscribeParams{MentionRole: "bob"})
			wantCode(t, err, rpc.CodeLimitExceeded, "too many subscriptions")
			// The connection still works, and the cap is per connection.
			if _, err := c.Health(ctx, &rpc.HealthParams{}); err != nil {
				t.Fatal(err)
			}
			c2 := conn()
			if _, err := c2.Subscribe(ctx, &rpc.SubscribeParams{MentionRole: "bob"}); err != nil {
				t.Fatalf("a second connection's first subscription: %v", err)
			}
			// Closing the full connection drops its subscriptions.
			c.Close()
			deadline := time.Now().Add(rawIOTimeout)
			for {
				subs, err := c2.ListSubscriptions(ctx, &rpc.ListSubscriptionsParams{})
				if err != nil {
					t.Fatal(err)
				}
				if len(subs.Subscriptions) == 1 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d subscriptions left after the full connection closed, want 1", len(subs.Subscriptions))
				}
				time.Sleep(5 * time.Millisecond)
			}
			c2.Close()
		})
	}
}

// A wrong credential on the loopback port costs the connection that
// presented it a delay (thrum.DefaultAuthFailureDelay), in a handshake
// (401) and to auth (-32002), and nothing else: while 20 connections
// keep presenting wrong ones (20 once made the server refuse every
// credential unchecked, the owner's too), each wrong one is checked and
// refused after the delay, the right ones on other connections are
// accepted at once, and the refusals are counted in health.
func TestSecurityWrongCredentialsCostTheirConnection(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	wrong := strings.Repeat("0", len(d.secret))
	stop := time.Now().Add(2 * time.Second)
	var wg sync.WaitGroup
	var mu sync.Mutex
	tried := 0
	var bad []string
	for g := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				start := time.Now()
				var got string
				if g < 14 { // and 6 by auth: the owner's pool of WebSockets yet to authenticate is 16
					resp, _, ws, err := thrumtest.Handshake(d.wsURL, "", http.Header{"Authorization": {"Bearer " + wrong}})
					if err != nil || ws != nil || resp.StatusCode != http.StatusUnauthorized {
						got = fmt.Sprintf("handshake with a wrong credential: %v, %v", resp, err)
					}
				} else {
					c, err := rpc.DialWebSocket(ctx, d.wsURL, nil)
					if err != nil {
						got = err.Error()
					} else if _, err := c.Auth(ctx, &rpc.AuthParams{OwnerSecret: wrong}); !errors.Is(err, rpc.ErrUnauthenticated) {
						got = fmt.Sprintf("auth with a wrong secret: %v", err)
					}
					if c != nil {
						c.Close()
					}
				}
				if took := time.Since(start); got == "" && took < thrum.DefaultAuthFailureDelay {
					got = fmt.Sprintf("a wrong credential was refused after %v, before the delay", took)
				}
				mu.Lock()
				tried++
				if got != "" {
					bad = append(bad, got)
				}
				mu.Unlock()
			}
		}()
	}
	time.Sleep(300 * time.Millisecond) // the wrong ones under way
	c, err := rpc.DialWebSocket(ctx, d.wsURL, &rpc.ClientOptions{Credential: d.secret})
	if err != nil {
		t.Errorf("the owner's secret in a handshake while wrong ones keep coming: %v", err)
	} else {
		c.Close()
	}
	if r, err := d.ws(t, nil).Auth(ctx, &rpc.AuthParams{OwnerSecret: d.secret}); err != nil || !r.Owner {
		t.Errorf("the owner's secret by auth while wrong ones keep coming: %+v %v", r, err)
	}
	if r, err := d.ws(t, nil).Auth(ctx, &rpc.AuthParams{Token: d.tokens["alice"]}); err != nil || r.AgentID != "alice" {
		t.Errorf("alice's token by auth while wrong ones keep coming: %+v %v", r, err)
	}
	wg.Wait()
	if len(bad) > 0 {
		t.Errorf("%d of %d wrong credentials were not checked and refused after the delay; the first: %s", len(bad), tried, bad[0])
	}
	h, err := d.ws(t, nil).Health(ctx, &rpc.HealthParams{})
	if err != nil || h.Refused == nil || h.Refused.Credentials != int64(tried) {
		t.Errorf("health: %+v %v, want the %d credentials refused", h.Refused, err, tried)
	}
}

// An idempotency key reused for another message, over a real WebSocket:
// -32009 on the wire, naming the first message in the error's data, and
// the new message is not stored; the exact retry still gets the first
// result.
func TestSecurityIdempotencyKeyReused(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	c := d.ws(t, nil)
	if _, err := c.Auth(ctx, &rpc.AuthParams{Token: d.tokens["alice"]}); err != nil {
		t.Fatal(err)
	}
	first, err := c.SendMessage(ctx, &rpc.SendMessageParams{Content: "deploy done", Mentions: []string{"bob"}, IdempotencyKey: "deploy-1"})
	if err != nil {
		t.Fatal(err)
	}
	before := messageTotal(t, d)
	_, err = c.SendMessage(ctx, &rpc.SendMessageParams{Content: "rollback!", Mentions: []string{"bob"}, IdempotencyKey: "deploy-1"})
	var e *rpc.Error
	if !errors.As(err, &e) || e.Code != rpc.CodeIdempotencyKey || !strings.Contains(e.Message, first.MessageID) || !strings.Contains(e.Message, "content") {
		t.Fatalf("a reused key with other content: %v, want -32009 naming %s and what differs", err, first.MessageID)
	}
	var data struct {
		MessageID string `json:"message_id"`
	}
	if b, _ := json.Marshal(e.Data); json.Unmarshal(b, &data) != nil || data.MessageID != first.MessageID {
		t.Errorf("error data %s, want message_id %s", b, first.MessageID)
	}
	if got := messageTotal(t, d); got != before {
		t.Errorf("%d messages after the refused send, want %d", got, before)
	}
	again, err := c.SendMessage(ctx, &rpc.SendMessageParams{Content: "deploy done", Mentions: []string{"bob"}, IdempotencyKey: "deploy-1"})
	if err != nil || again.MessageID != first.MessageID {
		t.Fatalf("the exact retry: %+v %v, want %s", again, err, first.MessageID)
	}
}

// Receipts are the sender's and the owner's: over the loopback port a
// token that did not send a message sees only its own receipt of it
// (none, if it is no recipient), never another recipient's delivery or
// acknowledgement note, and may not subscribe to every message's
// receipts (receipts "all"); the sender and the owner see them all.
func TestSecurityReceiptsPrivate(t *testing.T) {
	d := startDaemon(t)
	d.tokens["carol"] = thrumtest.Register(t, d.n, "carol", "tester", "auth").Token
	d.tokens["dave"] = thrumtest.Register(t, d.n, "dave", "tester", "ui").Token
	ctx := context.Background()
	sent, err := d.n.SendMessage(thrum.AsAgent(ctx, "alice"), &rpc.SendMessageParams{Content: "ship it?", Mentions: []string{"@bob", "@carol"}, AckRequired: true})
	if err != nil {
		t.Fatal(err)
	}
	const note = "bob's private note for alice"
	if _, err := d.n.AckMessage(thrum.AsAgent(ctx, "bob"), &rpc.AckMessageParams{MessageID: sent.MessageID, Note: note}); err != nil {
		t.Fatal(err)
	}
	as := func(who string) *rpc.Client {
		c, err := rpc.DialWebSocket(ctx, d.wsURL, &rpc.ClientOptions{Credential: d.tokens[who]})
		if who == "owner" {
			c, err = rpc.DialWebSocket(ctx, d.wsURL, &rpc.ClientOptions{Credential: d.secret})
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	receipts := func(c *rpc.Client) string {
		g, err := c.GetMessage(ctx, &rpc.GetMessageParams{MessageID: sent.MessageID})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range g.Message.Receipts {
			out = append(out, r.AgentID+":"+r.State+":"+r.Note)
		}
		return strings.Join(out, " ")
	}
	all := "bob:acknowledged:" + note + " carol:queued:"
	for who, want := range map[string]string{
		"alice": all,                        // the sender
		"owner": all,                        // the owner's secret
		"bob":   "bob:acknowledged:" + note, // a recipient: its own
		"carol": "carol:queued:",            // another recipient: its own, no note of bob's
		"dave":  "",                         // no recipient: none
	} {
		if got := receipts(as(who)); got != want {
			t.Errorf("%s reads the receipts %q, want %q", who, got, want)
		}
	}
	if got := receipts(d.unix(t, nil)); got != all {
		t.Errorf("the owner's socket reads the receipts %q, want %q", got, all)
	}

	_, err = as("carol").Subscribe(ctx, &rpc.SubscribeParams{Receipts: rpc.ReceiptsAll})
	wantCode(t, err, rpc.CodeForbidden, `receipts "all" needs the owner`)
	if _, err := as("carol").Subscribe(ctx, &rpc.SubscribeParams{Receipts: rpc.ReceiptsSent}); err != nil {
		t.Errorf("a token subscribes to its own messages' receipts: %v", err)
	}
	if err := as("owner").Call(ctx, rpc.MethodSubscribe, map[string]any{"receipts": rpc.ReceiptsAll, "caller_agent_id": "dave"}, nil); err != nil {
		t.Errorf("the owner subscribes to every receipt: %v", err)
	}
}
