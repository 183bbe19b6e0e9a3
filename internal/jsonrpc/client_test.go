package jsonrpc

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// newPipeClient connects a Client to s through net.Pipe and ServeConn.
func newPipeClient(t *testing.T, s *Server) *Client {
	t.Helper()
	return newPipeClientOpts(t, s, nil)
}

func newPipeClientOpts(t *testing.T, s *Server, opts *ClientOptions) *Client {
	t.Helper()
	a, b := net.Pipe()
	done := make(chan struct{})
	go func() { defer close(done); s.ServeConn(context.Background(), a, TransportPipe) }()
	c := NewClient(b, opts)
	t.Cleanup(func() { c.Close(); <-done })
	return c
}

// clients returns a connected client of s on each transport.
func clients(t *testing.T, s *Server) map[string]*Client {
	t.Helper()
	ctx := context.Background()
	uc, err := Dial(ctx, serveUnix(t, s), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { uc.Close() })
	wc, err := DialWebSocket(ctx, serveWS(t, s), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wc.Close() })
	return map[string]*Client{"unix": uc, "websocket": wc, "pipe": newPipeClient(t, s)}
}

func TestClientCalls(t *testing.T) {
	checkLeaks(t)
	s, _ := testServer(t, nil)
	ctx := context.Background()
	for name, c := range clients(t, s) {
		t.Run(name, func(t *testing.T) {
			var pong string
			if err := c.Call(ctx, "ping", nil, &pong); err != nil || pong != "pong" {
				t.Fatalf("ping: %q, %v", pong, err)
			}
			var tr string
			if err := c.Call(ctx, "conn", nil, &tr); err != nil || tr != name {
				t.Fatalf("transport: %q, %v", tr, err)
			}
			if err := c.Call(ctx, "ping", nil, nil); err != nil { // result discarded
				t.Fatal(err)
			}

			err := c.Call(ctx, "fail", map[string]int{"x": -1}, nil)
			var e *Error
			if !errors.Is(err, ErrInvalidParams) || !errors.As(err, &e) {
				t.Fatalf("fail: %v, want ErrInvalidParams", err)
			}
			if e.Message != "invalid params: x must be positive" || fmt.Sprint(e.Data) != "map[field:x]" {
				t.Fatalf("fail: %+v", e)
			}
			if err := c.Call(ctx, "nope", nil, nil); !errors.Is(err, ErrMethodNotFound) {
				t.Fatalf("nope: %v", err)
			}
			if err := c.Call(ctx, "boom", nil, nil); !errors.Is(err, ErrInternal) || strings.Contains(err.Error(), "secret") {
				t.Fatalf("boom: %v", err)
			}
			var bad struct{ A int }
			if err := c.Call(ctx, "echo", []string{"x"}, &bad); err == nil || !strings.Contains(err.Error(), "decode result") {
				t.Fatalf("undecodable result: %v", err)
			}
			if err := c.Call(ctx, "echo", 42, nil); !errors.Is(err, ErrInvalidRequest) {
				t.Fatalf("scalar params: %v", err)
			}

			// Concurrent calls are matched by id.
			var wg sync.WaitGroup
			for g := range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 40 {
						want := fmt.Sprintf("%d-%d", g, i)
						var got []string
						if err := c.Call(ctx, "echo", []string{want}, &got); err != nil || len(got) != 1 || got[0] != want {
							t.Errorf("echo %s: %v, %v", want, got, err)
							return
						}
					}
				}()
			}
			wg.Wait()

			// Notify runs the method without a reply.
			if err := c.Notify(ctx, "ping", nil); err != nil {
				t.Fatal(err)
			}
			if err := c.Call(ctx, "ping", nil, nil); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestClientWireFormat(t *testing.T) {
	checkLeaks(t)
	a, b := net.Pipe()
	c := NewClient(b, nil)
	defer c.Close()
	br := bufio.NewReader(a)
	ctx := context.Background()
	type call struct {
		params any
		want   string
	}
	calls := []call{
		{nil, `{"jsonrpc":"2.0","id":1,"method":"m"}`},
		{map[string]int{"a": 1}, `{"jsonrpc":"2.0","id":2,"method":"m","params":{"a":1}}`},
		{(*struct{})(nil), `{"jsonrpc":"2.0","id":3,"method":"m"}`},
		{json.RawMessage(`[1]`), `{"jsonrpc":"2.0","id":4,"method":"m","params":[1]}`},
	}
	for _, cl := range calls {
		errc := make(chan error, 1)
		go func() { errc <- c.Call(ctx, "m", cl.params, nil) }()
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if line != cl.want+"\n" {
			t.Fatalf("request %q, want %q", line, cl.want)
		}
		var req struct{ ID json.RawMessage }
		json.Unmarshal([]byte(line), &req)
		fmt.Fprintf(a, `{"jsonrpc":"2.0","id":%s,"result":null}`+"\n", req.ID)
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	go c.Notify(ctx, "n", []int{1})
	if line, _ := br.ReadString('\n'); line != `{"jsonrpc":"2.0","method":"n","params":[1]}`+"\n" {
		t.Fatalf("notification %q", line)
	}
	// Junk from the server does not break the client.
	go c.Call(ctx, "m", nil, nil)
	br.ReadString('\n')
	fmt.Fprint(a, "garbage\n{\"id\":99,\"result\":1}\n[]\n{\"jsonrpc\":\"2.0\",\"id\":5,\"error\":\"not an object\"}\n")
	a.Close()
	<-c.Done()
}

func TestClientCancel(t *testing.T) {
	checkLeaks(t)
	s, gate := testServer(t, nil)
	c := newPipeClient(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := c.Call(ctx, "slow", nil, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("slow: %v, want DeadlineExceeded", err)
	}
	close(gate.release)
	// The abandoned reply is dropped; the next call gets its own.
	var pong string
	if err := c.Call(context.Background(), "ping", nil, &pong); err != nil || pong != "pong" {
		t.Fatalf("ping after cancel: %q, %v", pong, err)
	}
	// An already cancelled ctx fails at once and leaves the client usable.
	if err := c.Call(ctx, "ping", nil, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("call with ended ctx: %v", err)
	}
	if err := c.Call(context.Background(), "ping", nil, nil); err != nil {
		t.Fatal(err)
	}
}

func TestClientPendingFailOnDrop(t *testing.T) {
	checkLeaks(t)
	s, gate := testServer(t, nil)
	for name, c := range clients(t, s) {
		errc := make(chan error, 1)
		go func() { errc <- c.Call(context.Background(), "slow", nil, nil) }()
		<-gate.started
		_ = name
		defer func() {
			if err := <-errc; !errors.Is(err, ErrConnClosed) {
				t.Errorf("%s: pending call: %v, want ErrConnClosed", name, err)
			}
			<-c.Done()
			if c.Err() == nil {
				t.Errorf("%s: Err is nil after the connection dropped", name)
			}
			if err := c.Call(context.Background(), "ping", nil, nil); !errors.Is(err, ErrConnClosed) {
				t.Errorf("%s: call after drop: %v", name, err)
			}
		}()
	}
	s.Close()
}

func TestClientNotificationsInOrder(t *testing.T) {
	checkLeaks(t)
	s, _ := testServer(t, nil)
	var mu sync.Mutex
	var got []int
	c := newPipeClientOpts(t, s, &ClientOptions{OnNotification: func(method string, params json.RawMessage) {
		var n struct{ I int }
		json.Unmarshal(params, &n)
		mu.Lock()
		got = append(got, n.I)
		mu.Unlock()
	}})
	if err := c.Call(context.Background(), "notify", map[string]int{"n": 500}, nil); err != nil {
		t.Fatal(err)
	}
	// Notifications queued before the reply are written before it, and the
	// callback runs on the read goroutine, so all have arrived.
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 500 {
		t.Fatalf("got %d notifications before the reply, want 500", len(got))
	}
	for i, n := range got {
		if n != i {
			t.Fatalf("notification %d is %d", i, n)
		}
	}
}

func TestClientCloseFromCallback(t *testing.T) {
	checkLeaks(t)
	s, _ := testServer(t, nil)
	var c *Client
	ready := make(chan struct{})
	c = newPipeClientOpts(t, s, &ClientOptions{OnNotification: func(string, json.RawMessage) {
		<-ready
		c.Close() // must not deadlock
	}})
	close(ready)
	err := c.Call(context.Background(), "notify", map[string]int{"n": 1}, nil)
	if err != nil && !errors.Is(err, ErrConnClosed) {
		t.Fatal(err)
	}
	<-c.Done()
	if !errors.Is(c.Err(), ErrConnClosed) {
		t.Fatalf("Err: %v", c.Err())
	}
}

func TestClientOversizeReply(t *testing.T) {
	checkLeaks(t)
	s, _ := testServer(t, nil)
	c := newPipeClientOpts(t, s, &ClientOptions{MaxLineBytes: 100})
	err := c.Call(context.Background(), "echo", []string{strings.Repeat("x", 200)}, nil)
	if !errors.Is(err, ErrConnClosed) || !strings.Contains(err.Error(), "exceeds the limit of 100 bytes") {
		t.Fatalf("oversize reply: %v", err)
	}
}

func TestDialErrors(t *testing.T) {
	checkLeaks(t)
	ctx := context.Background()
	if _, err := Dial(ctx, "/nonexistent/thrum.sock", nil); err == nil {
		t.Fatal("Dial of a missing socket succeeded")
	}
	if _, err := DialWebSocket(ctx, "ws://127.0.0.1:1/", nil); err == nil {
		t.Fatal("DialWebSocket of a closed port succeeded")
	}
}

// An embedder serves a Server over an in-process pipe and calls it with a
// Client; the same Client dials a Unix socket (Dial) or a WebSocket
// (DialWebSocket).
func Example() {
	srv := NewServer(nil)
	srv.Handle("greet", func(ctx context.Context, params json.RawMessage) (any, error) {
		var p struct{ Name string }
		if err := json.Unmarshal(params, &p); err != nil || p.Name == "" {
			return nil, Errorf(CodeInvalidParams, "greet: name is required")
		}
		return "hello, " + p.Name, nil
	})
	a, b := net.Pipe()
	go srv.ServeConn(context.Background(), a, TransportPipe)
	c := NewClient(b, nil)
	defer srv.Shutdown(context.Background())
	defer c.Close()

	var greeting string
	if err := c.Call(context.Background(), "greet", map[string]string{"name": "world"}, &greeting); err != nil {
		fmt.Println(err)
	}
	fmt.Println(greeting)
	err := c.Call(context.Background(), "greet", map[string]string{}, nil)
	fmt.Println(errors.Is(err, ErrInvalidParams), err)
	// Output:
	// hello, world
	// true greet: name is required
}

// BenchmarkCall measures one ping round trip per transport.
func BenchmarkCall(b *testing.B) {
	s, _ := testServer(b, nil)
	ctx := context.Background()
	uc, err := Dial(ctx, serveUnix(b, s), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer uc.Close()
	wc, err := DialWebSocket(ctx, serveWS(b, s), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer wc.Close()
	pa, pb := net.Pipe()
	go s.ServeConn(ctx, pa, TransportPipe)
	pc := NewClient(pb, nil)
	defer pc.Close()
	for name, c := range map[string]*Client{"unix": uc, "websocket": wc, "pipe": pc} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if err := c.Call(ctx, "ping", nil, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/parallel", func(b *testing.B) {
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := c.Call(ctx, "ping", nil, nil); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// A server that reads requests and never answers (a stopped process, as
// far as its peer can tell) fails a call after CallTimeout instead of
// hanging it; a call whose ctx has its own deadline keeps that one.
func TestClientCallTimeout(t *testing.T) {
	checkLeaks(t)
	a, b := net.Pipe()
	go io.Copy(io.Discard, a) // reads everything, answers nothing
	t.Cleanup(func() { a.Close() })
	c := NewClient(b, &ClientOptions{CallTimeout: 50 * time.Millisecond})
	t.Cleanup(func() { c.Close() })

	start := time.Now()
	err := c.Call(context.Background(), "ping", nil, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("call to a server that never answers: %v, want context.DeadlineExceeded", err)
	}
	if waited := time.Since(start); waited < 50*time.Millisecond {
		t.Errorf("gave up after %v, before the CallTimeout", waited)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start = time.Now()
	err = c.Call(ctx, "ping", nil, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("call with its own deadline: %v", err)
	}
	if waited := time.Since(start); waited < 300*time.Millisecond {
		t.Errorf("a call with its own deadline of 300ms gave up after %v: CallTimeout replaced it", waited)
	}
}
