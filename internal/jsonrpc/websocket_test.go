package jsonrpc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
)

func closeStatus(err error) int { return int(websocket.CloseStatus(err)) }

// testHTTPClient does not keep idle connections, so tests leave no
// goroutines behind.
var testHTTPClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// serveWS serves s's WebSocket endpoint on 127.0.0.1 and returns its
// ws:// URL. Cleanup closes the server first, then the HTTP server.
func serveWS(t testing.TB, s *Server) string {
	t.Helper()
	hs := httptest.NewServer(s)
	t.Cleanup(hs.Close)
	t.Cleanup(func() { s.Close() })
	return "ws" + strings.TrimPrefix(hs.URL, "http")
}

func dialWS(t *testing.T, url string, opts *websocket.DialOptions) *websocket.Conn {
	t.Helper()
	ws, err := tryDialWS(url, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.CloseNow() })
	return ws
}

func tryDialWS(url string, opts *websocket.DialOptions) (*websocket.Conn, error) {
	o := websocket.DialOptions{HTTPClient: testHTTPClient}
	if opts != nil {
		o = *opts
		o.HTTPClient = testHTTPClient
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, url, &o)
	return ws, err
}

func wsWrite(t *testing.T, ws *websocket.Conn, msg string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := ws.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
		t.Fatalf("write: %v", err)
	}
}

func wsRead(ws *websocket.Conn) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	typ, b, err := ws.Read(ctx)
	if err == nil && typ != websocket.MessageText {
		return "", errors.New("reply is not a text frame")
	}
	return string(b), err
}

func TestProtocolWebSocket(t *testing.T) {
	checkLeaks(t)
	s, _ := testServer(t, &ServerOptions{MaxBatch: 3})
	ws := dialWS(t, serveWS(t, s), nil)
	runProtocolCases(t, func(t *testing.T, msg string) []string {
		t.Helper()
		wsWrite(t, ws, msg)
		wsWrite(t, ws, sentinel)
		var out []string
		for {
			got, err := wsRead(ws)
			if err != nil {
				t.Fatalf("read: %v", err)
			}
			if got == sentinelReply {
				return out
			}
			out = append(out, got)
		}
	})
	// A binary frame is a message too; the reply is text.
	ctx := context.Background()
	if err := ws.Write(ctx, websocket.MessageBinary, []byte(sentinel)); err != nil {
		t.Fatal(err)
	}
	if got, err := wsRead(ws); err != nil || got != sentinelReply {
		t.Fatalf("binary frame: %q, %v", got, err)
	}
	ws.Close(websocket.StatusNormalClosure, "")
}

func TestWebSocketOriginAndHost(t *testing.T) {
	checkLeaks(t)
	s, _ := testServer(t, &ServerOptions{AllowedOrigins: []string{"app.example", "https://ui.example:8443"}})
	url := serveWS(t, s)
	cases := []struct {
		name   string
		origin string
		host   string
		ok     bool
	}{
		{"no origin (not a browser)", "", "", true},
		{"loopback origin", "http://127.0.0.1:3000", "", true},
		{"localhost origin", "https://LOCALHOST", "", true},
		{"ipv6 loopback origin", "http://[::1]:8080", "", true},
		{"127/8 origin", "http://127.4.5.6", "", true},
		{"allowed origin host", "https://app.example", "", true},
		{"allowed origin with scheme", "https://ui.example:8443", "", true},
		{"allowed origin, other scheme", "http://ui.example:8443", "", false},
		{"foreign origin", "https://evil.example", "", false},
		{"null origin", "null", "", false},
		{"origin naming localhost as a subdomain", "http://localhost.evil.example", "", false},
		{"origin with a non-web scheme", "file://localhost", "", false},
		{"garbage origin", "::::", "", false},
		{"host localhost", "", "localhost:80", true},
		{"host [::1]", "", "[::1]:9999", true},
		{"host without port", "", "127.0.0.1", true},
		{"foreign host (DNS rebinding)", "", "evil.example:80", false},
		{"foreign host, loopback origin", "http://localhost", "evil.example", false},
		{"host 0.0.0.0", "", "0.0.0.0:80", false},
		{"host short form", "", "127.1", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			if tc.origin != "" {
				h.Set("Origin", tc.origin)
			}
			ws, err := tryDialWS(url, &websocket.DialOptions{HTTPHeader: h, Host: tc.host})
			if tc.ok {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				defer ws.CloseNow()
				wsWrite(t, ws, sentinel)
				if got, err := wsRead(ws); got != sentinelReply {
					t.Fatalf("got %q, %v", got, err)
				}
				return
			}
			if err == nil {
				ws.CloseNow()
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), "403") {
				t.Fatalf("want a 403 refusal, got %v", err)
			}
		})
	}
}

func TestWebSocketOversizeFrame(t *testing.T) {
	checkLeaks(t)
	s, _ := testServer(t, &ServerOptions{MaxLineBytes: 1024})
	url := serveWS(t, s)
	ws := dialWS(t, url, nil)
	wsWrite(t, ws, `{"jsonrpc":"2.0","id":1,"method":"echo","params":["`+strings.Repeat("x", 2000)+`"]}`)
	_, err := wsRead(ws)
	if closeStatus(err) != int(websocket.StatusMessageTooBig) {
		t.Fatalf("oversize frame: %v, want close status MessageTooBig", err)
	}
	ws2 := dialWS(t, url, nil)
	wsWrite(t, ws2, sentinel)
	if got, err := wsRead(ws2); got != sentinelReply {
		t.Fatalf("after oversize: %q, %v", got, err)
	}
	ws2.Close(websocket.StatusNormalClosure, "")
}

// Connection classes: unauthenticated WebSockets have a small pool of
// their own and a deadline; authenticated ones and streams have theirs.
func TestConnLimitWebSocket(t *testing.T) {
	checkLeaks(t)
	s, _ := testServer(t, &ServerOptions{MaxConns: 2, MaxUnauthConns: 2, AuthTimeout: 300 * time.Millisecond})
	url := serveWS(t, s)
	ctx := context.Background()
	dial := func() *Client {
		t.Helper()
		c, err := DialWebSocket(ctx, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if err := c.Call(ctx, "ping", nil, nil); err != nil {
			t.Fatal(err)
		}
		return c
	}
	a, b := dial(), dial()
	if _, err := DialWebSocket(ctx, url, nil); err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("third unauthenticated connection: %v, want a 503 refusal", err)
	}
	// Streams have their own slots: a pipe still connects.
	if err := newPipeClient(t, s).Call(ctx, "ping", nil, nil); err != nil {
		t.Fatalf("pipe while the unauthenticated pool is full: %v", err)
	}
	// Authenticating moves a connection to the other pool, freeing its slot.
	if err := a.Call(ctx, "login", nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := b.Call(ctx, "login", nil, nil); err != nil {
		t.Fatal(err)
	}
	c := dial()
	if err := c.Call(ctx, "login", nil, nil); !errors.Is(err, ErrLimitExceeded) {
		t.Fatalf("authenticating over MaxConns: %v", err)
	}
	// The unauthenticated one is closed at its deadline; the others stay.
	time.Sleep(600 * time.Millisecond)
	if err := c.Call(ctx, "ping", nil, nil); err == nil {
		t.Fatal("an unauthenticated connection outlived AuthTimeout")
	}
	for _, x := range []*Client{a, b} {
		if err := x.Call(ctx, "ping", nil, nil); err != nil {
			t.Fatalf("authenticated connection closed: %v", err)
		}
	}
}

func TestWebSocketClientNotifications(t *testing.T) {
	checkLeaks(t)
	s, _ := testServer(t, nil)
	url := serveWS(t, s)
	notes := make(chan json.RawMessage, 100)
	ctx := context.Background()
	c, err := DialWebSocket(ctx, url, &ClientOptions{OnNotification: func(method string, params json.RawMessage) {
		if method == "note" {
			notes <- params
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Call(ctx, "notify", map[string]int{"n": 5}, nil); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		select {
		case p := <-notes:
			var n struct{ I int }
			if err := json.Unmarshal(p, &n); err != nil || n.I != i {
				t.Fatalf("notification %d: %s", i, p)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("notification %d did not arrive", i)
		}
	}
}

func TestWebSocketNotAnUpgrade(t *testing.T) {
	checkLeaks(t)
	s, _ := testServer(t, nil)
	url := serveWS(t, s)
	resp, err := testHTTPClient.Get("http" + strings.TrimPrefix(url, "ws"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUpgradeRequired {
		t.Fatalf("plain GET: %s", resp.Status)
	}
	// The refused handshake gave its slot back.
	c, err := DialWebSocket(context.Background(), url, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

func TestDialWebSocketContextBoundsHandshakeOnly(t *testing.T) {
	checkLeaks(t)
	s, _ := testServer(t, nil)
	url := serveWS(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	c, err := DialWebSocket(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cancel()
	time.Sleep(20 * time.Millisecond)
	if err := c.Call(context.Background(), "ping", nil, nil); err != nil {
		t.Fatalf("call after the dial ctx ended: %v", err)
	}
}

// TestNotificationBurstInOrder: notifications queued faster than they are
// written go out gathered into few writes (more than one write's worth
// here), whole and in order, and before the reply of the call that queued
// them — on a WebSocket and on a Unix socket.
func TestNotificationBurstInOrder(t *testing.T) {
	checkLeaks(t)
	s, _ := testServer(t, nil)
	pad := strings.Repeat("x", 1<<10)
	const n = 300 // ~300 KiB: several batches of maxWriteBatch
	s.Handle("burst", func(ctx context.Context, _ json.RawMessage) (any, error) {
		c := ConnFromContext(ctx)
		for i := range n {
			if err := c.Notify("note", map[string]any{"i": i, "pad": pad}); err != nil {
				return nil, err
			}
		}
		return "ok", nil
	})
	wsURL, sock := serveWS(t, s), serveUnix(t, s)
	ctx := context.Background()
	for _, transport := range []string{TransportWebSocket, TransportUnix} {
		t.Run(transport, func(t *testing.T) {
			var got []int
			opts := &ClientOptions{OnNotification: func(method string, params json.RawMessage) {
				var p struct {
					I   int
					Pad string
				}
				if method != "note" || json.Unmarshal(params, &p) != nil || p.Pad != pad {
					t.Errorf("unexpected notification %s %.80s", method, params)
					return
				}
				got = append(got, p.I)
			}}
			var c *Client
			var err error
			if transport == TransportWebSocket {
				c, err = DialWebSocket(ctx, wsURL, opts)
			} else {
				c, err = Dial(ctx, sock, opts)
			}
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			for round := range 3 {
				got = got[:0]
				if err := c.Call(ctx, "burst", nil, nil); err != nil {
					t.Fatal(err)
				}
				// The notifications precede the reply on the wire, so all
				// were handed to OnNotification before Call returned.
				if len(got) != n {
					t.Fatalf("round %d: %d notifications before the reply, want %d", round, len(got), n)
				}
				for i, v := range got {
					if v != i {
						t.Fatalf("round %d: notification %d is number %d", round, i, v)
					}
				}
			}
		})
	}
}

// Refusals are logged at most once per refusalLogEvery (10 s; shorter
// here), each line with the count since the one before, by the uid of
// the peer: a page or a local user hammering the port does not fill the
// log, and the owner sees who it is.
func TestRefusedHandshakesLogSparingly(t *testing.T) {
	defer func(d time.Duration) { refusalLogEvery = d }(refusalLogEvery)
	refusalLogEvery = 500 * time.Millisecond
	var buf lockedBuffer
	s, _ := testServer(t, &ServerOptions{Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	url := serveWS(t, s)
	refuse := func(n int) {
		for range n {
			if ws, err := tryDialWS(url, &websocket.DialOptions{HTTPHeader: http.Header{"Origin": {"https://evil.example"}}}); err == nil {
				ws.CloseNow()
				t.Fatal("a foreign origin was upgraded")
			}
		}
	}
	start := time.Now()
	refuse(50)
	took := time.Since(start)
	time.Sleep(refusalLogEvery + 100*time.Millisecond)
	refuse(1) // long after any line: logged, with what is left
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if most := 2 + int(took/refusalLogEvery); len(lines) > most {
		t.Fatalf("%d log lines for 51 refusals in %v, want at most %d:\n%s", len(lines), took, most, buf.String())
	}
	me := "by_uid=" + strconv.Itoa(os.Getuid()) + ":"
	if !peersKnown {
		me = "by_uid="
	}
	total := 0
	for _, l := range lines {
		_, n, ok := strings.Cut(l, " refused=")
		n, _, _ = strings.Cut(n, " ")
		c, err := strconv.Atoi(n)
		if !ok || err != nil || !strings.Contains(l, me) || !strings.Contains(l, "level=WARN") {
			t.Fatalf("a line without its warning, count or uid (%s): %s", me, l)
		}
		total += c
	}
	if total != 51 {
		t.Fatalf("the lines count %d refusals, want 51:\n%s", total, buf.String())
	}
	if r := s.Refused(); r.Connections != 51 || r.Credentials != 0 {
		t.Fatalf("Refused() = %+v, want 51 connections", r)
	}
}

// lockedBuffer is a bytes.Buffer safe for a logger and a test at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestRefusalReason: a refused handshake's error carries the first line
// of the body, bounded and without control characters, so a Go caller
// learns why without a server being able to write to its terminal.
func TestRefusalReason(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{"", ""},
		{"unauthorized: credential not accepted\n", "unauthorized: credential not accepted"},
		{"first\nsecond", "first"},
		{"bell\a and \x1b[31mred\x1b[0m", "bell and [31mred[0m"},
		{"bad \xff utf-8", "bad  utf-8"},
		{strings.Repeat("x", 2000), strings.Repeat("x", 300)},
	} {
		if got := refusalReason(strings.NewReader(tc.body)); got != tc.want {
			t.Errorf("refusalReason(%q) = %q, want %q", tc.body, got, tc.want)
		}
	}
	if got := refusalReason(nil); got != "" {
		t.Errorf("refusalReason(nil) = %q", got)
	}
}

// TestHandshakeCredential: a credential in the handshake, as a header or
// (from a browser) a subprotocol offered beside "jsonrpc", is checked
// before the upgrade; accepted, it binds the connection, which is never
// timed out for want of auth; refused, it gets 401, and a server that
// cannot check it says so (503, 500). A subprotocol credential without
// "jsonrpc", and one over the authenticated pool, never reach the check,
// so a one-time credential is not spent on a connection that fails.
func TestHandshakeCredential(t *testing.T) {
	type who struct{}
	var checked atomic.Int32
	s, _ := testServer(t, &ServerOptions{MaxConns: 2, AuthTimeout: 100 * time.Millisecond, AuthFailureDelay: time.Millisecond,
		Authorize: func(r *http.Request, cred string) (func(*Conn), error) {
			checked.Add(1)
			switch cred {
			case "good":
				return func(c *Conn) { c.SetValue(who{}, cred) }, nil
			case "down":
				return nil, &Error{Code: CodeUnavailable, Message: "shutting down"}
			case "boom":
				return nil, errors.New("lookup: disk on fire")
			}
			return nil, fmt.Errorf("check: %w", &Error{Code: -32002, Message: "unknown credential"})
		}})
	s.Handle("who", func(ctx context.Context, _ json.RawMessage) (any, error) {
		return ConnFromContext(ctx).Value(who{}), nil
	})
	url := serveWS(t, s)
	status := func(opts *websocket.DialOptions) (int, string) {
		t.Helper()
		o := *opts
		o.HTTPClient = testHTTPClient
		ws, resp, err := websocket.Dial(context.Background(), url, &o)
		if err == nil {
			ws.CloseNow()
			return http.StatusSwitchingProtocols, ""
		}
		if resp == nil {
			t.Fatalf("dial: %v", err)
		}
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	header := func(cred string) *websocket.DialOptions {
		return &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + cred}}}
	}

	for _, opts := range []*websocket.DialOptions{header("good"), {Subprotocols: []string{Subprotocol, "bearer.good"}}} {
		ws := dialWS(t, url, opts)
		if opts.Subprotocols != nil && ws.Subprotocol() != Subprotocol {
			t.Errorf("selected subprotocol %q, want %q", ws.Subprotocol(), Subprotocol)
		}
		time.Sleep(300 * time.Millisecond) // past AuthTimeout
		wsWrite(t, ws, `{"jsonrpc":"2.0","id":1,"method":"who"}`)
		if got, err := wsRead(ws); err != nil || !strings.Contains(got, `"result":"good"`) {
			t.Errorf("a connection bound in its handshake, after the auth timeout: %s %v", got, err)
		}
		ws.CloseNow()
	}
	for cred, want := range map[string]int{"bad": http.StatusUnauthorized, "down": http.StatusServiceUnavailable, "boom": http.StatusInternalServerError} {
		if code, body := status(header(cred)); code != want || strings.Contains(body, "disk on fire") {
			t.Errorf("credential %q: HTTP %d %q, want %d, and no cause of a server fault", cred, code, body, want)
		}
	}
	if _, body := status(header("bad")); !strings.Contains(body, "unknown credential") {
		t.Errorf("a refused credential's body %q does not say why", body)
	}

	checked.Store(0)
	if code, _ := status(&websocket.DialOptions{Subprotocols: []string{"bearer.good"}}); code != http.StatusBadRequest {
		t.Errorf("a subprotocol credential without %q: HTTP %d, want 400", Subprotocol, code)
	}
	held := []*websocket.Conn{dialWS(t, url, header("good")), dialWS(t, url, header("good"))} // the pool of 2
	if code, _ := status(header("good")); code != http.StatusServiceUnavailable {
		t.Errorf("a credential over the authenticated pool: HTTP %d, want 503", code)
	}
	if n := checked.Load(); n != 2 {
		t.Errorf("Authorize ran %d times, want 2 (the held connections' only)", n)
	}
	for _, ws := range held {
		ws.CloseNow()
	}
}

// A wrong credential costs the connection that presented it the delay, in
// the handshake (401) and in a call whose handler refuses it
// (CredentialRefused), its slot held even if the
// guesser hangs up at once; a right credential on another connection is
// checked and accepted meanwhile, and nothing is refused unchecked.
func TestWrongCredentialCostsItsConnection(t *testing.T) {
	const delay = 3 * time.Second
	var checks atomic.Int32
	s, _ := testServer(t, &ServerOptions{MaxConns: 5, AuthFailureDelay: delay,
		Authorize: func(r *http.Request, cred string) (func(*Conn), error) {
			checks.Add(1)
			if cred == "good" {
				return func(*Conn) {}, nil
			}
			return nil, &Error{Code: CodeUnauthenticated, Message: "unknown credential"}
		}})
	s.Handle("auth", func(ctx context.Context, p json.RawMessage) (any, error) {
		if string(p) != `{"c":"good"}` {
			ConnFromContext(ctx).CredentialRefused("unknown credential")
			return nil, &Error{Code: CodeUnauthenticated, Message: "unknown credential"}
		}
		return "ok", ConnFromContext(ctx).Authenticate()
	})
	url := serveWS(t, s)
	header := func(cred string) *websocket.DialOptions {
		return &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + cred}}}
	}

	// A wrong credential in a call costs its connection the delay too;
	// another connection's right one is answered meanwhile.
	guesser := dialWS(t, url, nil)
	callStart := time.Now()
	wsWrite(t, guesser, `{"jsonrpc":"2.0","id":1,"method":"auth","params":{"c":"bad"}}`)
	other := dialWS(t, url, nil)
	wsWrite(t, other, `{"jsonrpc":"2.0","id":1,"method":"auth","params":{"c":"good"}}`)
	if got, err := wsRead(other); err != nil || !strings.Contains(got, `"result":"ok"`) {
		t.Errorf("the right credential by auth: %s %v", got, err)
	}

	// Three guessers in the handshake, each answered after the delay;
	// one hangs up at once, and its slot of the five stays taken.
	var answered atomic.Int32
	start := time.Now()
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ws, err := tryDialWS(url, header("bad"))
			if err == nil {
				ws.CloseNow()
			}
			answered.Add(1)
			if d := time.Since(start); d < delay {
				t.Errorf("a wrong credential was answered after %v, before the delay of %v", d, delay)
			}
		}()
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for checks.Load() < 3 {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	websocket.Dial(ctx, url, &websocket.DialOptions{HTTPClient: testHTTPClient, HTTPHeader: header("bad").HTTPHeader})
	for checks.Load() < 3 {
		time.Sleep(time.Millisecond)
	}
	// The right credential: checked and accepted while the guessers wait.
	ws := dialWS(t, url, header("good"))
	if n := answered.Load(); n != 0 {
		t.Errorf("the right credential was answered after %d wrong ones: it waited for them", n)
	}
	// The five slots are the two right ones' and the three guessers',
	// the one who hung up included, until their delay is over.
	if _, err := tryDialWS(url, header("good")); err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("a sixth connection while five are held (one by a guesser who hung up): %v, want 503", err)
	}
	if got, err := wsRead(guesser); err != nil || !strings.Contains(got, "-32002") {
		t.Errorf("the wrong credential by auth: %s %v", got, err)
	} else if d := time.Since(callStart); d < delay {
		t.Errorf("a wrong credential by auth was answered after %v, before the delay of %v", d, delay)
	}
	wg.Wait()
	ws.CloseNow()
	if r := s.Refused(); r.Credentials != 4 {
		t.Errorf("Refused() = %+v, want 4 credentials", r)
	}
}

// A WebSocket that has not authenticated may send only small messages (an
// auth call is a few hundred bytes): another user's connections waiting
// to authenticate cannot hold the request budget that every request, the
// owner's too, draws on. Once it authenticates, MaxLineBytes applies.
func TestUnauthenticatedMessagesAreSmall(t *testing.T) {
	s, _ := testServer(t, nil)
	url := serveWS(t, s)
	big := `{"jsonrpc":"2.0","id":1,"method":"echo","params":{"x":"` + strings.Repeat("a", maxUnauthMessage) + `"}}`

	stranger := dialWS(t, url, nil)
	wsWrite(t, stranger, big)
	if got, err := wsRead(stranger); websocket.CloseStatus(err) != websocket.StatusMessageTooBig {
		t.Fatalf("a message over %d bytes before auth: %.80s %v, want the connection closed with 1009", maxUnauthMessage, got, err)
	}

	owner := dialWS(t, url, nil)
	owner.SetReadLimit(1 << 20)
	wsWrite(t, owner, `{"jsonrpc":"2.0","id":1,"method":"login"}`)
	if got, err := wsRead(owner); err != nil || !strings.Contains(got, `"result":"ok"`) {
		t.Fatalf("login: %s %v", got, err)
	}
	wsWrite(t, owner, big)
	if got, err := wsRead(owner); err != nil || !strings.Contains(got, `"result":{"x":"aaa`) {
		t.Fatalf("the same message after auth: %.80s %v", got, err)
	}
}
