package jsonrpc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// ---- helpers shared by the tests of this package ----

// checkLeaks fails the test if it leaves goroutines behind. Register it
// first, so that its cleanup runs after the test's others.
func checkLeaks(t *testing.T) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for {
			n := runtime.NumGoroutine()
			if n <= before {
				return
			}
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				buf = buf[:runtime.Stack(buf, true)]
				t.Errorf("goroutines: %d before, %d after the test:\n%s", before, n, buf)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

// slowGate lets a test hold the "slow" handler until it is released.
type slowGate struct {
	started chan struct{}
	release chan struct{}
}

// testServer returns a server with the test methods registered:
//
//	ping → "pong"; echo → its params; fail → -32602 with data; boom → a plain
//	error; panic → a panic; notify {"n":N} → N notifications "note" {"i":i}
//	then "ok"; slow → waits for the gate (or ctx) then "done"; conn → the
//	Conn's transport.
func testServer(t testing.TB, opts *ServerOptions) (*Server, *slowGate) {
	t.Helper()
	s := NewServer(opts)
	gate := &slowGate{started: make(chan struct{}, 100), release: make(chan struct{})}
	s.Handle("ping", func(ctx context.Context, _ json.RawMessage) (any, error) { return "pong", nil })
	s.Handle("echo", func(ctx context.Context, p json.RawMessage) (any, error) { return p, nil })
	s.Handle("login", func(ctx context.Context, _ json.RawMessage) (any, error) {
		return "ok", ConnFromContext(ctx).Authenticate()
	})
	s.Handle("fail", func(ctx context.Context, _ json.RawMessage) (any, error) {
		return nil, fmt.Errorf("validate: %w", &Error{Code: CodeInvalidParams, Message: "invalid params: x must be positive", Data: map[string]string{"field": "x"}})
	})
	s.Handle("boom", func(ctx context.Context, _ json.RawMessage) (any, error) {
		return nil, errors.New("disk on fire at /secret/path")
	})
	s.Handle("panic", func(ctx context.Context, _ json.RawMessage) (any, error) { panic("oops") })
	s.Handle("notify", func(ctx context.Context, p json.RawMessage) (any, error) {
		var in struct{ N int }
		if err := json.Unmarshal(p, &in); err != nil {
			return nil, Errorf(CodeInvalidParams, "invalid params: %v", err)
		}
		c := ConnFromContext(ctx)
		for i := range in.N {
			if err := c.Notify("note", map[string]int{"i": i}); err != nil {
				return nil, err
			}
		}
		return "ok", nil
	})
	s.Handle("slow", func(ctx context.Context, _ json.RawMessage) (any, error) {
		gate.started <- struct{}{}
		select {
		case <-gate.release:
			return "done", nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	s.Handle("conn", func(ctx context.Context, _ json.RawMessage) (any, error) {
		return ConnFromContext(ctx).Transport(), nil
	})
	return s, gate
}

// serveUnix serves s on a Unix socket in a fresh directory and returns its
// path. Cleanup closes the server and waits for Serve to return.
func serveUnix(t testing.TB, s *Server) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "rpc") // t.TempDir() can exceed the 108-byte socket path limit
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "s.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- s.Serve(l) }()
	t.Cleanup(func() {
		s.Close()
		if err := <-errc; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve returned %v, want ErrServerClosed", err)
		}
	})
	return path
}

// unixConn is a raw client of the line protocol.
type unixConn struct {
	t  *testing.T
	nc net.Conn
	br *bufio.Reader
}

func dialUnix(t *testing.T, path string) *unixConn {
	t.Helper()
	nc, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &unixConn{t: t, nc: nc, br: bufio.NewReaderSize(nc, 1<<20)}
}

func (u *unixConn) send(s string) {
	u.t.Helper()
	if _, err := io.WriteString(u.nc, s); err != nil {
		u.t.Fatalf("write: %v", err)
	}
}

// line reads one reply line (without its newline).
func (u *unixConn) line() (string, error) {
	_ = u.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	l, err := u.br.ReadString('\n')
	if err != nil {
		return l, err
	}
	return strings.TrimSuffix(l, "\n"), nil
}

func (u *unixConn) mustLine() string {
	u.t.Helper()
	l, err := u.line()
	if err != nil {
		u.t.Fatalf("read reply: %v (got %q)", err, l)
	}
	return l
}

// sentinel is a request whose reply marks the end of the replies to what
// was sent before it.
const (
	sentinel      = `{"jsonrpc":"2.0","id":"sentinel","method":"ping"}`
	sentinelReply = `{"jsonrpc":"2.0","id":"sentinel","result":"pong"}`
)

// exchanger sends one message and returns the replies it produced (none for
// a notification), by sending the sentinel after it.
type exchanger func(t *testing.T, msg string) []string

func unixExchanger(path string) (func(t *testing.T) exchanger, string) {
	return func(t *testing.T) exchanger {
		u := dialUnix(t, path)
		return func(t *testing.T, msg string) []string {
			t.Helper()
			u.send(msg + "\n" + sentinel + "\n")
			var out []string
			for {
				l := u.mustLine()
				if l == sentinelReply {
					return out
				}
				out = append(out, l)
			}
		}
	}, TransportUnix
}

// protocolCases are messages and their exact replies, the same on every
// transport. The test server has MaxBatch 3.
var protocolCases = []struct {
	name string
	in   string
	want []string // nil: no reply
}{
	{"string id", `{"jsonrpc":"2.0","id":"abc","method":"ping"}`, []string{`{"jsonrpc":"2.0","id":"abc","result":"pong"}`}},
	{"escaped string id echoed raw", `{"jsonrpc":"2.0","id":"a\u0062c\n","method":"ping"}`, []string{`{"jsonrpc":"2.0","id":"a\u0062c\n","result":"pong"}`}},
	{"number id", `{"jsonrpc":"2.0","id":1,"method":"ping"}`, []string{`{"jsonrpc":"2.0","id":1,"result":"pong"}`}},
	{"fraction id kept as written", `{"jsonrpc":"2.0","id":1.50,"method":"ping"}`, []string{`{"jsonrpc":"2.0","id":1.50,"result":"pong"}`}},
	{"huge and negative ids", `{"jsonrpc":"2.0","id":-123456789012345678901234567890,"method":"ping"}`, []string{`{"jsonrpc":"2.0","id":-123456789012345678901234567890,"result":"pong"}`}},
	{"exponent id", `{"jsonrpc":"2.0","id":1e3,"method":"ping"}`, []string{`{"jsonrpc":"2.0","id":1e3,"result":"pong"}`}},
	{"null id", `{"jsonrpc":"2.0","id":null,"method":"ping"}`, []string{`{"jsonrpc":"2.0","id":null,"result":"pong"}`}},
	{"members in any order, whitespace", ` { "method" : "ping" , "id" : 7 , "jsonrpc" : "2.0" } `, []string{`{"jsonrpc":"2.0","id":7,"result":"pong"}`}},
	{"params object echoed", `{"jsonrpc":"2.0","id":2,"method":"echo","params":{"a":[1,2,{"b":null}]}}`, []string{`{"jsonrpc":"2.0","id":2,"result":{"a":[1,2,{"b":null}]}}`}},
	{"params array echoed", `{"jsonrpc":"2.0","id":3,"method":"echo","params":[1,"two"]}`, []string{`{"jsonrpc":"2.0","id":3,"result":[1,"two"]}`}},
	{"absent params are null", `{"jsonrpc":"2.0","id":4,"method":"echo"}`, []string{`{"jsonrpc":"2.0","id":4,"result":null}`}},
	{"notification", `{"jsonrpc":"2.0","method":"ping"}`, nil},
	{"notification of unknown method", `{"jsonrpc":"2.0","method":"nope"}`, nil},
	{"notification of failing method", `{"jsonrpc":"2.0","method":"fail","params":{}}`, nil},
	{"parse error", `{"jsonrpc":"2.0","id":1,"method":`, []string{`{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error: the request is not valid JSON"}}`}},
	{"parse error, garbage", `hello`, []string{`{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error: the request is not valid JSON"}}`}},
	{"parse error, trailing data", `{"jsonrpc":"2.0","id":1,"method":"ping"} {}`, []string{`{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error: the request is not valid JSON"}}`}},
	{"wrong version", `{"jsonrpc":"1.0","id":1,"method":"ping"}`, []string{`{"jsonrpc":"2.0","id":1,"error":{"code":-32600,"message":"invalid request: \"jsonrpc\" must be \"2.0\""}}`}},
	{"version missing", `{"id":"x","method":"ping"}`, []string{`{"jsonrpc":"2.0","id":"x","error":{"code":-32600,"message":"invalid request: \"jsonrpc\" must be \"2.0\""}}`}},
	{"version as number", `{"jsonrpc":2.0,"id":1,"method":"ping"}`, []string{`{"jsonrpc":"2.0","id":1,"error":{"code":-32600,"message":"invalid request: \"jsonrpc\" must be \"2.0\""}}`}},
	{"method missing", `{"jsonrpc":"2.0","id":1}`, []string{`{"jsonrpc":"2.0","id":1,"error":{"code":-32600,"message":"invalid request: \"method\" must be a string"}}`}},
	{"method not a string", `{"jsonrpc":"2.0","id":1,"method":1}`, []string{`{"jsonrpc":"2.0","id":1,"error":{"code":-32600,"message":"invalid request: \"method\" must be a string"}}`}},
	{"member names are case-sensitive", `{"jsonrpc":"2.0","id":1,"Method":"ping"}`, []string{`{"jsonrpc":"2.0","id":1,"error":{"code":-32600,"message":"invalid request: \"method\" must be a string"}}`}},
	{"invalid request without id answered with null", `{"jsonrpc":"2.0","method":1,"params":"bar"}`, []string{`{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request: \"method\" must be a string"}}`}},
	{"params a string", `{"jsonrpc":"2.0","id":1,"method":"echo","params":"x"}`, []string{`{"jsonrpc":"2.0","id":1,"error":{"code":-32600,"message":"invalid request: \"params\" must be an object or an array"}}`}},
	{"params null", `{"jsonrpc":"2.0","id":1,"method":"echo","params":null}`, []string{`{"jsonrpc":"2.0","id":1,"error":{"code":-32600,"message":"invalid request: \"params\" must be an object or an array"}}`}},
	{"id an object", `{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}`, []string{`{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request: id must be a string, a number or null"}}`}},
	{"id a bool", `{"jsonrpc":"2.0","id":true,"method":"ping"}`, []string{`{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request: id must be a string, a number or null"}}`}},
	{"not an object", `42`, []string{`{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request: not a JSON object"}}`}},
	{"a JSON null", `null`, []string{`{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request: not a JSON object"}}`}},
	{"method not found", `{"jsonrpc":"2.0","id":9,"method":"nope"}`, []string{`{"jsonrpc":"2.0","id":9,"error":{"code":-32601,"message":"method not found: \"nope\""}}`}},
	{"handler *Error passes through", `{"jsonrpc":"2.0","id":"p","method":"fail","params":{"x":-1}}`, []string{`{"jsonrpc":"2.0","id":"p","error":{"code":-32602,"message":"invalid params: x must be positive","data":{"field":"x"}}}`}},
	{"plain error is internal, not leaked", `{"jsonrpc":"2.0","id":5,"method":"boom"}`, []string{`{"jsonrpc":"2.0","id":5,"error":{"code":-32603,"message":"internal error"}}`}},
	{"panic is internal", `{"jsonrpc":"2.0","id":6,"method":"panic"}`, []string{`{"jsonrpc":"2.0","id":6,"error":{"code":-32603,"message":"internal error"}}`}},
	{"batch mixed", `[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"ping"},{"jsonrpc":"2.0","id":2,"method":"nope"}]`,
		[]string{`[{"jsonrpc":"2.0","id":1,"result":"pong"},{"jsonrpc":"2.0","id":2,"error":{"code":-32601,"message":"method not found: \"nope\""}}]`}},
	{"batch of invalid elements", `[1,{"jsonrpc":"2.0","id":"z","method":"echo","params":3}]`,
		[]string{`[{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request: not a JSON object"}},{"jsonrpc":"2.0","id":"z","error":{"code":-32600,"message":"invalid request: \"params\" must be an object or an array"}}]`}},
	{"empty batch", `[]`, []string{`{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request: empty batch"}}`}},
	{"batch of notifications", `[{"jsonrpc":"2.0","method":"ping"},{"jsonrpc":"2.0","method":"nope"}]`, nil},
	{"batch over the limit", `[{"jsonrpc":"2.0","method":"ping"},{"jsonrpc":"2.0","method":"ping"},{"jsonrpc":"2.0","method":"ping"},{"jsonrpc":"2.0","method":"ping"}]`,
		[]string{`{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"batch too large: limit is 3 requests"}}`}},
	{"invalid batch JSON", `[{"jsonrpc":"2.0","method":"ping"},`, []string{`{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error: the request is not valid JSON"}}`}},
	{"notifications before the reply", `{"jsonrpc":"2.0","id":1,"method":"notify","params":{"n":2}}`,
		[]string{`{"jsonrpc":"2.0","method":"note","params":{"i":0}}`, `{"jsonrpc":"2.0","method":"note","params":{"i":1}}`, `{"jsonrpc":"2.0","id":1,"result":"ok"}`}},
}

func runProtocolCases(t *testing.T, ex exchanger) {
	for _, tc := range protocolCases {
		t.Run(tc.name, func(t *testing.T) {
			got := ex(t, tc.in)
			if len(got) != len(tc.want) {
				t.Fatalf("in  %s\ngot  %q\nwant %q", tc.in, got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("in  %s\ngot  %s\nwant %s", tc.in, got[i], tc.want[i])
				}
			}
		})
	}
}

func TestProtocolUnix(t *testing.T) {
	checkLeaks(t)
	s, _ := testServer(t, &ServerOptions{MaxBatch: 3})
	mk, _ := unixExchanger(serveUnix(t, s))
	runProtocolCases(t, mk(t))
}

func TestProtocolPipe(t *testing.T) {
	checkLeaks(t)
	s, _ := testServer(t, &ServerOptions{MaxBatch: 3})
	a, b := net.Pipe()
	done := make(chan struct{})
	go func() { defer close(done); s.ServeConn(context.Background(), a, TransportPipe) }()
	u := &unixConn{t: t, nc: b, br: bufio.NewReader(b)}
	runProtocolCases(t, func(t *testing.T, msg string) []string {
		t.Helper()
		u.t = t
		// A pipe has no buffer: write from another goroutine, and fail
		// the test from this one if the write did.
		werr := make(chan error, 1)
		go func() { _, err := io.WriteString(u.nc, msg+"\n"+sentinel+"\n"); werr <- err }()
		var out []string
		for {
			l := u.mustLine()
			if l == sentinelReply {
				if err := <-werr; err != nil {
					t.Fatalf("write: %v", err)
				}
				return out
			}
			out = append(out, l)
		}
	})
	b.Close()
	<-done
}

func TestUnixOneShotClients(t *testing.T) {
	checkLeaks(t)
	s, _ := testServer(t, nil)
	path := serveUnix(t, s)
	const want = `{"jsonrpc":"2.0","id":1,"result":"pong"}`

	t.Run("python style: send, read once, close", func(t *testing.T) {
		u := dialUnix(t, path)
		u.send(`{"jsonrpc": "2.0", "method": "ping", "params": {}, "id": 1}` + "\n")
		buf := make([]byte, 4096)
		_ = u.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := u.nc.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		if got := string(buf[:n]); got != want+"\n" {
			t.Fatalf("got %q, want %q", got, want+"\n")
		}
		u.nc.Close()
	})
	for _, tail := range []string{"\n", ""} {
		t.Run(fmt.Sprintf("half-close, newline %q", tail), func(t *testing.T) {
			u := dialUnix(t, path)
			u.send(`{"jsonrpc":"2.0","method":"ping","id":1}` + tail)
			if err := u.nc.(*net.UnixConn).CloseWrite(); err != nil {
				t.Fatal(err)
			}
			_ = u.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
			all, err := io.ReadAll(u.nc)
			if err != nil {
				t.Fatal(err)
			}
			if string(all) != want+"\n" {
				t.Fatalf("got %q, want %q", all, want+"\n")
			}
		})
	}
	t.Run("blank and CRLF lines", func(t *testing.T) {
		u := dialUnix(t, path)
		u.send("\n  \r\n" + `{"jsonrpc":"2.0","method":"ping","id":1}` + "\r\n")
		if got := u.mustLine(); got != want {
			t.Fatalf("got %s, want %s", got, want)
		}
	})
}

func TestUnixPipelined(t *testing.T) {
	checkLeaks(t)
	s, _ := testServer(t, nil)
	u := dialUnix(t, serveUnix(t, s))
	const n = 2000
	var req bytes.Buffer
	for i := range n {
		fmt.Fprintf(&req, `{"jsonrpc":"2.0","id":%d,"method":"echo","params":[%d]}`+"\n", i, i)
	}
	go u.nc.Write(req.Bytes()) // one write; the replies are read meanwhile
	for i := range n {
		want := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"result":[%d]}`, i, i)
		if got := u.mustLine(); got != want {
			t.Fatalf("reply %d: got %s, want %s", i, got, want)
		}
	}
}

func TestUnixOversizeLine(t *testing.T) {
	checkLeaks(t)
	s, _ := testServer(t, &ServerOptions{MaxLineBytes: 1024})
	path := serveUnix(t, s)

	// Exactly at the limit is fine.
	u := dialUnix(t, path)
	pad := strings.Repeat("x", 1024-len(`{"jsonrpc":"2.0","id":1,"method":"echo","params":[""]}`))
	u.send(`{"jsonrpc":"2.0","id":1,"method":"echo","params":["` + pad + `"]}` + "\n")
	if got := u.mustLine(); !strings.HasPrefix(got, `{"jsonrpc":"2.0","id":1,"result":["xx`) {
		t.Fatalf("at the limit: got %.80s", got)
	}

	// One byte over: an error, then the connection closes.
	u.send(`{"jsonrpc":"2.0","id":1,"method":"echo","params":["x` + pad + `"]}` + "\n" + sentinel + "\n")
	want := `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"request too large: limit is 1024 bytes"}}`
	if got := u.mustLine(); got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
	if l, err := u.line(); err == nil {
		t.Fatalf("connection still open after an oversize line; read %q", l)
	}

	// A huge line without any newline does not grow memory without bound.
	u2 := dialUnix(t, path)
	go func() {
		chunk := bytes.Repeat([]byte("y"), 64<<10)
		for range 64 { // 4 MiB, until the server hangs up
			if _, err := u2.nc.Write(chunk); err != nil {
				return
			}
		}
	}()
	if got := u2.mustLine(); got != want {
		t.Fatalf("got %s, want %s", got, want)
	}

	// The server is still up.
	u3 := dialUnix(t, path)
	u3.send(sentinel + "\n")
	if got := u3.mustLine(); got != sentinelReply {
		t.Fatalf("after oversize: got %s", got)
	}
}

func TestConnLimitUnix(t *testing.T) {
	checkLeaks(t)
	s, _ := testServer(t, &ServerOptions{MaxConns: 2})
	path := serveUnix(t, s)
	var open []*unixConn
	for range 2 {
		u := dialUnix(t, path)
		u.send(sentinel + "\n") // make sure it is registered
		if got := u.mustLine(); got != sentinelReply {
			t.Fatal(got)
		}
		open = append(open, u)
	}
	u := dialUnix(t, path)
	want := `{"jsonrpc":"2.0","id":null,"error":{"code":-32006,"message":"too many connections: limit is 2"}}`
	if got := u.mustLine(); got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
	if _, err := u.line(); err == nil {
		t.Fatal("refused connection left open")
	}

	// The client reports the server's reason.
	c, err := Dial(context.Background(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = c.Call(context.Background(), "ping", nil, nil)
	if !errors.Is(err, ErrLimitExceeded) || !errors.Is(err, ErrConnClosed) {
		t.Fatalf("Call on a refused connection: %v, want ErrLimitExceeded and ErrConnClosed", err)
	}
	c.Close()

	// A slot frees when a connection ends.
	open[0].nc.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		u := dialUnix(t, path)
		_, _ = io.WriteString(u.nc, sentinel+"\n") // fails while the slot is still taken
		got, _ := u.line()
		if got == sentinelReply {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("slot not released: %s", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestConnState(t *testing.T) {
	checkLeaks(t)
	s, _ := testServer(t, nil)
	type key struct{}
	closed := make(chan string, 10)
	var mu sync.Mutex
	var conns []*Conn
	s.Handle("state", func(ctx context.Context, p json.RawMessage) (any, error) {
		c := ConnFromContext(ctx)
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
		n, _ := c.Value(key{}).(int)
		c.SetValue(key{}, n+1)
		if n == 0 {
			c.OnClose(func() { closed <- "hook" })
		}
		uid, ok := c.PeerUID()
		return map[string]any{"n": n + 1, "uid": uid, "ok": ok, "transport": c.Transport()}, nil
	})
	if ConnFromContext(context.Background()) != nil {
		t.Fatal("ConnFromContext outside a handler is not nil")
	}
	path := serveUnix(t, s)
	c, err := Dial(context.Background(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		N         int
		UID       int
		OK        bool
		Transport string
	}
	for want := 1; want <= 2; want++ {
		if err := c.Call(context.Background(), "state", nil, &res); err != nil {
			t.Fatal(err)
		}
		if res.N != want || res.Transport != TransportUnix {
			t.Fatalf("call %d: %+v", want, res)
		}
	}
	if runtime.GOOS == "linux" && (!res.OK || res.UID != os.Getuid()) {
		t.Fatalf("PeerUID = %d, %v; want %d, true", res.UID, res.OK, os.Getuid())
	}
	c.Close()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("OnClose hook did not run")
	}
	mu.Lock()
	sc := conns[0]
	mu.Unlock()
	ran := false
	sc.OnClose(func() { ran = true }) // already ended: runs at once
	if !ran {
		t.Fatal("OnClose on an ended conn did not run at once")
	}
	if err := sc.Notify("x", nil); !errors.Is(err, ErrConnClosed) {
		t.Fatalf("Notify on an ended conn: %v", err)
	}
}

func TestOnConnCloseOption(t *testing.T) {
	checkLeaks(t)
	got := make(chan string, 1)
	s, _ := testServer(t, &ServerOptions{OnConnClose: func(c *Conn) { got <- c.Transport() }})
	a, b := net.Pipe()
	done := make(chan struct{})
	go func() { defer close(done); s.ServeConn(context.Background(), a, TransportPipe) }()
	c := NewClient(b, nil)
	var tr string
	if err := c.Call(context.Background(), "conn", nil, &tr); err != nil || tr != TransportPipe {
		t.Fatalf("conn: %q, %v", tr, err)
	}
	c.Close()
	<-done
	if tr := <-got; tr != TransportPipe {
		t.Fatalf("OnConnClose got %q", tr)
	}
}

func TestServeConnContext(t *testing.T) {
	checkLeaks(t)
	s, _ := testServer(t, nil)
	type key struct{}
	s.Handle("who", func(ctx context.Context, _ json.RawMessage) (any, error) { return ctx.Value(key{}), nil })
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "embedded"))
	a, b := net.Pipe()
	done := make(chan struct{})
	go func() { defer close(done); s.ServeConn(ctx, a, TransportPipe) }()
	c := NewClient(b, nil)
	defer c.Close()
	var who string
	if err := c.Call(context.Background(), "who", nil, &who); err != nil || who != "embedded" {
		t.Fatalf("who: %q, %v", who, err)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("ServeConn did not return after its ctx ended")
	}
	<-c.Done()
}

func TestSlowConsumer(t *testing.T) {
	checkLeaks(t)
	s, _ := testServer(t, &ServerOptions{NotifyQueue: 8})
	conns := make(chan *Conn, 1)
	s.Handle("grab", func(ctx context.Context, _ json.RawMessage) (any, error) {
		conns <- ConnFromContext(ctx)
		return "ok", nil
	})
	path := serveUnix(t, s)
	u := dialUnix(t, path) // never reads
	u.send(`{"jsonrpc":"2.0","id":1,"method":"grab"}` + "\n")
	c := <-conns
	closed := make(chan struct{})
	c.OnClose(func() { close(closed) })

	payload := map[string]string{"pad": strings.Repeat("z", 4096)}
	var err error
	start := time.Now()
	for i := 0; i < 100000 && err == nil; i++ { // the socket buffer fills, then the queue
		err = c.Notify("note", payload)
	}
	if !errors.Is(err, ErrLimitExceeded) {
		t.Fatalf("Notify to a slow consumer: %v, want ErrLimitExceeded", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("notifying took %v: Notify blocked", d)
	}
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("slow consumer was not disconnected")
	}
	if err := c.Notify("note", nil); !errors.Is(err, ErrConnClosed) {
		t.Fatalf("Notify after disconnect: %v", err)
	}
}

func TestShutdown(t *testing.T) {
	checkLeaks(t)
	s, gate := testServer(t, nil)
	hooks := make(chan struct{}, 10)
	s.Handle("hook", func(ctx context.Context, _ json.RawMessage) (any, error) {
		ConnFromContext(ctx).OnClose(func() { hooks <- struct{}{} })
		return nil, nil
	})
	path := serveUnix(t, s)
	hs := httptest.NewServer(s)
	defer hs.Close()
	ctx := context.Background()

	uc, err := Dial(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	wc, err := DialWebSocket(ctx, "ws"+strings.TrimPrefix(hs.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer wc.Close()
	idle, err := Dial(ctx, path, nil) // no call in flight
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	for _, c := range []*Client{uc, wc, idle} {
		if err := c.Call(ctx, "hook", nil, nil); err != nil {
			t.Fatal(err)
		}
	}

	// A call in flight on each transport.
	results := make(chan error, 2)
	for _, c := range []*Client{uc, wc} {
		go func() {
			var r string
			err := c.Call(ctx, "slow", nil, &r)
			if err == nil && r != "done" {
				err = fmt.Errorf("result %q", r)
			}
			results <- err
		}()
		<-gate.started
	}
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(ctx) }()
	// The idle connection closes while the calls are still running.
	select {
	case <-idle.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("idle connection not closed by Shutdown")
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned %v with calls in flight", err)
	default:
	}
	// No new connections.
	if c, err := Dial(ctx, path, nil); err == nil {
		c.Close()
		t.Fatal("Dial succeeded after Shutdown began")
	}
	close(gate.release)
	for range 2 {
		if err := <-results; err != nil {
			t.Fatalf("call in flight during Shutdown: %v", err)
		}
	}
	select {
	case err := <-shut:
		if err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown did not return")
	}
	for range 3 {
		<-hooks // Shutdown returned after every OnClose ran
	}
	<-uc.Done()
	<-wc.Done()
	if code := closeStatus(wc.Err()); code != 1001 {
		t.Fatalf("WebSocket client ended with %v (status %d), want StatusGoingAway", wc.Err(), code)
	}
	if err := s.Shutdown(ctx); err != nil { // idempotent
		t.Fatalf("second Shutdown: %v", err)
	}
}

func TestShutdownTimeout(t *testing.T) {
	checkLeaks(t)
	s, gate := testServer(t, nil)
	path := serveUnix(t, s)
	c, err := Dial(context.Background(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	errc := make(chan error, 1)
	go func() { errc <- c.Call(context.Background(), "slow", nil, nil) }()
	<-gate.started
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := s.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown: %v, want DeadlineExceeded", err)
	}
	// The forced close cancelled the handler's ctx and dropped the call.
	if err := <-errc; !errors.Is(err, ErrConnClosed) {
		t.Fatalf("call: %v, want ErrConnClosed", err)
	}
}

func TestCloseIdempotent(t *testing.T) {
	checkLeaks(t)
	s, _ := testServer(t, nil)
	path := serveUnix(t, s)
	c, err := Dial(context.Background(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Call(context.Background(), "ping", nil, nil); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	<-c.Done()
	l, err := net.Listen("unix", path+"2")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Serve(l); !errors.Is(err, ErrServerClosed) {
		t.Fatalf("Serve after Close: %v", err)
	}
	a, b := net.Pipe()
	go func() { io.Copy(io.Discard, b) }()
	s.ServeConn(context.Background(), a, TransportPipe) // returns at once
	b.Close()
}

// TestHandleConcurrent registers and removes methods while calls run.
func TestHandleConcurrent(t *testing.T) {
	checkLeaks(t)
	s, _ := testServer(t, nil)
	path := serveUnix(t, s)
	c, err := Dial(context.Background(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := range 200 {
			if i%2 == 0 {
				s.Handle("flip", func(context.Context, json.RawMessage) (any, error) { return 1, nil })
			} else {
				s.Unhandle("flip")
			}
		}
	}()
	go func() {
		defer wg.Done()
		for range 200 {
			err := c.Call(context.Background(), "flip", nil, nil)
			if err != nil && !errors.Is(err, ErrMethodNotFound) {
				t.Errorf("flip: %v", err)
				return
			}
		}
	}()
	wg.Wait()
}
