package main

import (
	"bytes"
	"context"
	"net"
	"sync/atomic"
	"testing"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/internal/thrumtest"
	"github.com/thrumhq/thrum/rpc"
)

// answerDropper is a listener whose connections lose the first answer to
// a message.send: the daemon stores the message, and the connection
// closes instead of replying, as when a daemon restarts mid-call.
type answerDropper struct {
	net.Listener
	dropped atomic.Bool
}

func (l *answerDropper) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &dropConn{Conn: c, l: l}, nil
}

type dropConn struct {
	net.Conn
	l *answerDropper
}

func (c *dropConn) Write(b []byte) (int, error) {
	if bytes.Contains(b, []byte(`"message_id"`)) && c.l.dropped.CompareAndSwap(false, true) {
		c.Conn.Close()
		return 0, net.ErrClosed
	}
	return c.Conn.Write(b)
}

// TestSendRetriesWithItsKey: when the answer to a send is lost, thrum send
// reconnects and sends again with the same idempotency key, and the
// message is stored once.
func TestSendRetriesWithItsKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	repo := t.TempDir()
	c := &thrumCLI{t: t, repo: repo}
	c.ok("", "init")
	l, err := resolveLayout(ctx, &Globals{Repo: repo, env: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	n := thrumtest.OpenNodeIn(t, l.LogDir, &thrum.Options{DBPath: l.DB, IdentityDir: l.IDs, NoSync: true})
	ul, err := thrum.ListenUnix(l.Socket)
	if err != nil {
		t.Fatal(err)
	}
	dl := &answerDropper{Listener: ul}
	srv := n.RPCServer(nil)
	go srv.Serve(dl)
	defer srv.Shutdown(ctx)

	c.ok("", "quickstart", "--name", "alice", "--role", "dev", "--module", "m")
	r := c.ok("alice", "send", "exactly once", "--verbose")
	if !dl.dropped.Load() {
		t.Fatal("no answer was dropped: the test did not test anything")
	}
	contains(t, "send after a lost answer", r.stdout, "> Message sent: msg_")
	contains(t, "send after a lost answer", r.stderr, "retrying with idempotency key cli-")
	list, err := n.ListMessages(thrum.AsAgent(ctx, "alice"), &rpc.ListMessagesParams{})
	if err != nil {
		t.Fatal(err)
	}
	if list.Total != 1 || idAfter(t, r.stdout, "> Message sent: ") != list.Messages[0].MessageID {
		t.Fatalf("after a retried send: %d messages %v; send said %q", list.Total, list.Messages, r.stdout)
	}
}
