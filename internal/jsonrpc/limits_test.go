package jsonrpc

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// echoOf is a request to echo a string of n bytes.
func echoOf(id string, n int) string {
	return `{"jsonrpc":"2.0","id":"` + id + `","method":"echo","params":{"s":"` + strings.Repeat("x", n) + `"}}`
}

// The budget caps bytes held for requests across connections: a request
// whose handling would exceed it is refused with -32006 (its connection
// lives on); one whose reading would exceed it is refused and its
// connection closed, since the rest of its line cannot be skipped safely.
func TestBudgetRefusesOverRequests(t *testing.T) {
	checkLeaks(t)
	const budget = 256 << 10
	s, gate := testServer(t, &ServerOptions{MaxPendingBytes: budget, MaxLineBytes: 1 << 20})
	path := serveUnix(t, s)

	// Handling charges a few times the size: 80 KiB fits being read but
	// not being handled.
	u := dialUnix(t, path)
	u.send(echoOf("a", 80<<10) + "\n")
	got := u.mustLine()
	if !strings.Contains(got, `"code":-32006`) || !strings.Contains(got, "server busy") {
		t.Fatalf("80 KiB under a 256 KiB budget: %.200s", got)
	}
	u.send(sentinel + "\n")
	if got := u.mustLine(); got != sentinelReply {
		t.Fatalf("connection after a refused request: %s", got)
	}
	// Small requests fit and everything is given back.
	u.send(echoOf("b", 10<<10) + "\n")
	if got := u.mustLine(); !strings.Contains(got, `"result"`) {
		t.Fatalf("10 KiB: %.200s", got)
	}
	if n := s.budget.inUse(); n != 0 {
		t.Fatalf("budget holds %d bytes with nothing in flight", n)
	}

	// A line longer than the budget is refused while read, never held
	// whole, and the connection closed.
	w := dialUnix(t, path)
	go w.nc.Write([]byte(strings.Repeat("y", 2*budget))) // fails once the server hangs up
	got = w.mustLine()
	if !strings.Contains(got, `"code":-32006`) {
		t.Fatalf("a line over the budget: %.200s", got)
	}
	if _, err := w.line(); err == nil {
		t.Fatal("connection left open after a line over the budget")
	}

	// Requests in flight on other connections hold the budget: a slow call
	// holding most of it (its growing line buffers and its decoding) makes
	// the next large one wait its turn (refused).
	slow := dialUnix(t, path)
	slow.send(`{"jsonrpc":"2.0","id":"s","method":"slow","params":{"pad":"` + strings.Repeat("z", 40<<10) + `"}}` + "\n")
	<-gate.started
	x := dialUnix(t, path)
	x.send(echoOf("c", 20<<10) + "\n")
	if got := x.mustLine(); !strings.Contains(got, `"code":-32006`) {
		t.Fatalf("20 KiB while most of the budget is held: %.200s", got)
	}
	close(gate.release)
	slow.mustLine()
	y := dialUnix(t, path) // x was closed if its line was refused while read
	y.send(echoOf("d", 20<<10) + "\n")
	if got := y.mustLine(); !strings.Contains(got, `"result"`) {
		t.Fatalf("20 KiB once the budget is free: %.200s", got)
	}
}

// A line left half sent times out and closes its connection; an idle
// connection between requests does not.
func TestPartialLineTimesOut(t *testing.T) {
	checkLeaks(t)
	s, _ := testServer(t, &ServerOptions{LineTimeout: 200 * time.Millisecond})
	path := serveUnix(t, s)
	idle := dialUnix(t, path)
	half := dialUnix(t, path)
	half.send(`{"jsonrpc":"2.0","id":1,"method":"pi`)
	got := half.mustLine()
	if !strings.Contains(got, `"code":-32600`) || !strings.Contains(got, "timed out") {
		t.Fatalf("half-sent line: %s", got)
	}
	if _, err := half.line(); err == nil {
		t.Fatal("connection with a half-sent line left open")
	}
	time.Sleep(300 * time.Millisecond)
	idle.send(sentinel + "\n")
	if got := idle.mustLine(); got != sentinelReply {
		t.Fatalf("idle connection after the line timeout: %s", got)
	}
}

// The same for a WebSocket frame whose header promised more than came.
func TestPartialFrameTimesOut(t *testing.T) {
	checkLeaks(t)
	s, _ := testServer(t, &ServerOptions{LineTimeout: 200 * time.Millisecond, MaxUnauthConns: 4})
	url := serveWS(t, s)
	ctx := context.Background()
	ws, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	w, err := ws.Writer(ctx, websocket.MessageText)
	if err != nil {
		t.Fatal(err)
	}
	// A first fragment, flushed; the message is never finished.
	if _, err := w.Write([]byte(strings.Repeat(" ", 8<<10))); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	start := time.Now()
	_, _, err = ws.Read(rctx)
	if err == nil || errors.Is(rctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("half-sent frame: %v after %v, want the server to close", err, time.Since(start))
	}
}

// Invalid UTF-8 and lone surrogate escapes are refused whole, -32700: the
// decoder would otherwise store U+FFFD in their place. The refusal of a
// request carries its id when the id itself is clean, so the caller's
// call gets its answer (a client waited for one until its deadline).
func TestInvalidUnicodeRefused(t *testing.T) {
	s, _ := testServer(t, nil)
	ctx := context.Background()
	for _, tc := range []struct {
		in   string
		code int
	}{
		{"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"echo\",\"params\":{\"s\":\"\xff\"}}", CodeParseError},
		{`{"jsonrpc":"2.0","id":1,"method":"echo","params":{"s":"\ud800"}}`, CodeParseError},
		{`{"jsonrpc":"2.0","id":1,"method":"echo","params":{"s":"\udc00x"}}`, CodeParseError},
		{`{"jsonrpc":"2.0","id":1,"method":"echo","params":{"s":"\ud800\u0041"}}`, CodeParseError},
		{`{"jsonrpc":"2.0","id":1,"method":"echo","params":{"s":"\\ud800"}}`, 0}, // an escaped backslash, then text
		{`{"jsonrpc":"2.0","id":1,"method":"echo","params":{"s":"\ud83d\ude00 é"}}`, 0},
	} {
		out := s.handleMessage(ctx, []byte(tc.in))
		codes := checkReply(t, out)
		if len(codes) != 1 || codes[0] != tc.code {
			t.Errorf("%q: got %s, want code %d", tc.in, out, tc.code)
		}
		if !bytes.HasPrefix(out, []byte(`{"jsonrpc":"2.0","id":1,`)) {
			t.Errorf("%q: got %s, want the request's id", tc.in, out)
		}
	}
	for _, tc := range []struct{ in, id string }{
		{"{\"jsonrpc\":\"2.0\",\"id\":\"a\",\"method\":\"echo\",\"params\":{\"\xc2\xc2k\":1}}", `"a"`}, // in a key
		{"{\"jsonrpc\":\"2.0\",\"id\":\"\xff\",\"method\":\"echo\"}", "null"},                          // in the id: not echoed
		{`{"jsonrpc":"2.0","id":"\ud800","method":"echo"}`, "null"},
		{"[{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"echo\",\"params\":{\"s\":\"\xff\"}}]", "null"}, // a batch, refused whole
	} {
		out := s.handleMessage(ctx, []byte(tc.in))
		if codes := checkReply(t, out); len(codes) != 1 || codes[0] != CodeParseError || !bytes.HasPrefix(out, []byte(`{"jsonrpc":"2.0","id":`+tc.id+`,`)) {
			t.Errorf("%q: got %s, want -32700 with id %s", tc.in, out, tc.id)
		}
	}
}
