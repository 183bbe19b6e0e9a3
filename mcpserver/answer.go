package mcpserver

import (
	"bytes"
	"context"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The SDK's session close refuses writes at once, so a wait answered at
// shutdown could have its answer refused on the way out. Run therefore
// watches its transport: it notes each wait_for_message request read and
// each response written, and at shutdown ends the waits and closes the
// session only once their answers are written (or a bound passes).

// shutdownGrace bounds how long Run waits for the answers of ended waits.
const shutdownGrace = 500 * time.Millisecond

type unanswered struct {
	mu  sync.Mutex
	ids map[jsonrpc.ID]bool
}

func (u *unanswered) add(id jsonrpc.ID) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.ids == nil {
		u.ids = map[jsonrpc.ID]bool{}
	}
	u.ids[id] = true
}

func (u *unanswered) done(id jsonrpc.ID) {
	u.mu.Lock()
	delete(u.ids, id)
	u.mu.Unlock()
}

func (u *unanswered) empty() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.ids) == 0
}

// awaitAnswers returns when every wait read was answered, or after max.
func (u *unanswered) awaitAnswers(max time.Duration) {
	deadline := time.Now().Add(max)
	for !u.empty() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
}

// answering wraps Run's transport; with a channel, it also gives the
// channel its connection and tells it when the client is initialized.
type answering struct {
	mcp.Transport
	waits *unanswered
	ch    *channel // nil without Options.Channel
}

func (a *answering) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := a.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	if a.ch != nil {
		a.ch.conn = c
	}
	return &answeringConn{Connection: c, waits: a.waits, ch: a.ch}, nil
}

type answeringConn struct {
	mcp.Connection
	waits *unanswered
	ch    *channel
}

func (c *answeringConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	m, err := c.Connection.Read(ctx)
	if r, ok := m.(*jsonrpc.Request); ok {
		switch {
		case r.IsCall() && r.Method == "tools/call" && bytes.Contains(r.Params, []byte(`"wait_for_message"`)):
			c.waits.add(r.ID)
		case !r.IsCall() && r.Method == "notifications/initialized" && c.ch != nil:
			c.ch.initialized()
		}
	}
	return m, err
}

func (c *answeringConn) Write(ctx context.Context, m jsonrpc.Message) error {
	err := c.Connection.Write(ctx, m)
	if r, ok := m.(*jsonrpc.Response); ok {
		c.waits.done(r.ID)
	}
	return err
}
