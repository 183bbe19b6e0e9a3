package mcpserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/thrumhq/thrum/internal/thrumtest"
	"github.com/thrumhq/thrum/mcpserver"
	"github.com/thrumhq/thrum/rpc"
)

// dropAfterSend is a client connection that lets the first message.send
// request through and then closes: the daemon runs the send, but its
// reply never comes back — the case a retry must not turn into two sends.
// Once that request is written, nothing more is read from the connection,
// so a reply that races the close is lost too rather than delivered.
type dropAfterSend struct {
	net.Conn
	cut   atomic.Bool // this connection carried the dropped send
	once  *sync.Once
	mu    *sync.Mutex
	sends *[]string // the idempotency keys of the message.send requests written
}

func (c *dropAfterSend) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.cut.Load() {
		c.Conn.Close()
		return 0, net.ErrClosed
	}
	return n, err
}

func (c *dropAfterSend) Write(p []byte) (int, error) {
	if !bytes.Contains(p, []byte(`"message.send"`)) {
		return c.Conn.Write(p)
	}
	var req struct {
		Params struct {
			Key string `json:"idempotency_key"`
		} `json:"params"`
	}
	_ = json.Unmarshal(bytes.TrimSpace(p), &req)
	c.mu.Lock()
	*c.sends = append(*c.sends, req.Params.Key)
	c.mu.Unlock()
	c.once.Do(func() { c.cut.Store(true) })
	n, err := c.Conn.Write(p)
	if c.cut.Load() {
		c.Conn.Close()
	}
	return n, err
}

// TestSendRetriesWithItsKey checks that send_message gives its send an
// idempotency key and, when the connection drops before the reply,
// retries once on the next connection with the same key (the node
// dedupes on it).
func TestSendRetriesWithItsKey(t *testing.T) {
	n := newNode(t, nil)
	addAgent(t, n, "bob", "reviewer", "auth")
	aliceID := addAgent(t, n, "alice", "implementer", "auth")
	d := thrumtest.ServeUnix(t, n)
	var once sync.Once
	var mu sync.Mutex
	var sends []string
	dial := func(ctx context.Context, onNote func(string, json.RawMessage)) (*rpc.Client, error) {
		nc, err := (&net.Dialer{}).DialContext(ctx, "unix", d.Path)
		if err != nil {
			return nil, err
		}
		return rpc.NewClient(&dropAfterSend{Conn: nc, once: &once, mu: &mu, sends: &sends}, &rpc.ClientOptions{OnNotification: onNote}), nil
	}
	srv, err := mcpserver.New(context.Background(), dial, aliceID, &mcpserver.Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	alice := serve(t, srv, aliceID)
	out := call[mcpserver.SendMessageOutput](t, alice, "send_message", args{"to": "@bob", "content": "once"})
	mu.Lock()
	first := append([]string(nil), sends...)
	mu.Unlock()
	if len(first) != 2 || first[0] == "" || first[0] != first[1] {
		t.Fatalf("message.send requests carried keys %q, want two with the same key", first)
	}
	// The node dedupes on the key: the retry returned the first send's
	// result, and bob has the message once.
	if got := unread(t, n, "bob"); len(got) != 1 {
		t.Fatalf("after a retried send (key %s, message %s) bob has %d copies, want 1", first[0], out.MessageID, len(got))
	}
	// A second tool call is a new send: a new key.
	call[mcpserver.SendMessageOutput](t, alice, "send_message", args{"to": "@bob", "content": "again"})
	mu.Lock()
	defer mu.Unlock()
	if len(sends) != 3 || sends[2] == sends[0] {
		t.Errorf("second send_message: keys %q, want a new one", sends)
	}
}
