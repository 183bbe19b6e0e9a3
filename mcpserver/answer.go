package mcpserver

import (
	"bytes"
	"context"
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

// answering wraps Run's transport; with a channel, it also gives the
// channel its connection and tells it when the client is initialized.
// waits, the IDs of the wait_for_message requests read and not yet
// answered, is guarded by s.mu.
type answering struct {
	mcp.Transport
	s     *Server
	waits map[jsonrpc.ID]bool
	ch    *channel // nil without Options.Channel
	// heard is closed when the client's first message is read: a host
	// has the session (Options.Wake rings only then). heardDone says it
	// is; guarded by s.mu.
	heard     chan struct{}
	heardDone bool
}

func newAnswering(t mcp.Transport, s *Server) *answering {
	return &answering{Transport: t, s: s, waits: map[jsonrpc.ID]bool{}, heard: make(chan struct{})}
}

// awaitAnswers returns when every wait read was answered, or after max.
func (a *answering) awaitAnswers(max time.Duration) {
	for deadline := time.Now().Add(max); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		a.s.mu.Lock()
		n := len(a.waits)
		a.s.mu.Unlock()
		if n == 0 {
			return
		}
	}
}

func (a *answering) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := a.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	if a.ch != nil {
		a.ch.conn = c
	}
	return &answeringConn{Connection: c, a: a}, nil
}

type answeringConn struct {
	mcp.Connection
	a *answering
}

func (c *answeringConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	m, err := c.Connection.Read(ctx)
	if err == nil {
		c.a.s.mu.Lock()
		if !c.a.heardDone {
			c.a.heardDone = true
			close(c.a.heard)
		}
		c.a.s.mu.Unlock()
	}
	if r, ok := m.(*jsonrpc.Request); ok {
		switch {
		case r.IsCall() && r.Method == "tools/call" && bytes.Contains(r.Params, []byte(`"wait_for_message"`)):
			c.a.s.mu.Lock()
			c.a.waits[r.ID] = true
			c.a.s.mu.Unlock()
		case !r.IsCall() && r.Method == "notifications/initialized" && c.a.ch != nil:
			c.a.ch.initialized(c.a.s)
		}
	}
	return m, err
}

func (c *answeringConn) Write(ctx context.Context, m jsonrpc.Message) error {
	err := c.Connection.Write(ctx, m)
	if r, ok := m.(*jsonrpc.Response); ok {
		c.a.s.mu.Lock()
		delete(c.a.waits, r.ID)
		c.a.s.mu.Unlock()
	}
	return err
}
