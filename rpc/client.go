package rpc

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"time"

	"github.com/thrumhq/thrum/internal/jsonrpc"
)

// DefaultClientMaxLineBytes is the default of ClientOptions.MaxLineBytes.
// It is larger than the server's request limit because replies (pages of
// messages) are larger than requests, and a client trusts its server.
const DefaultClientMaxLineBytes = jsonrpc.DefaultClientMaxLineBytes // 16 MiB

// ClientOptions are the optional knobs of a Client; nil means all defaults.
type ClientOptions struct {
	// Logger receives oddities of the connection (undecodable messages,
	// server errors without an id). Nil is silent.
	Logger *slog.Logger

	// OnNotification receives the server's notifications (messages with a
	// method and no id), in the order they arrived, from the client's read
	// goroutine. No reply is read while it runs, so it must return quickly
	// and must not wait for a Call of this client: hand work to another
	// goroutine. Nil drops notifications. thrum sends NotificationMessage,
	// whose params are a MessageNotification, and, to a connection with a
	// standing claim (ClaimNext), NotificationClaimed, whose params are a
	// ClaimedNotification, and, to a subscription to receipts,
	// NotificationReceipt, whose params are a ReceiptNotification.
	OnNotification func(method string, params json.RawMessage)

	// MaxLineBytes caps one incoming line or WebSocket message; a longer one
	// ends the connection. Default DefaultClientMaxLineBytes.
	MaxLineBytes int

	// Credential, for DialWebSocket, is presented in the handshake (an
	// "Authorization: Bearer" header): an agent's or user's token, the
	// owner's secret, a web session, or a login code (Auth with the code
	// then returns the web session it was traded for). The connection is
	// then authenticated from the start, as Auth would make it, and the
	// daemon's small pool of connections that have not authenticated yet,
	// which anyone on the machine can fill, cannot keep it out. A
	// credential the daemon refuses fails the dial (HTTP 401, the error
	// carrying the daemon's reason). Other transports ignore it.
	Credential string

	// CallTimeout bounds each call whose ctx has no deadline of its own:
	// one that gets no answer within it returns context.DeadlineExceeded,
	// so a server that stopped answering (stopped, or wedged) fails the
	// call instead of hanging it. Give a call that waits by design (a
	// ClaimNext with a wait, a SyncForce with Wait) a ctx with its own
	// deadline. Default 0: no bound.
	CallTimeout time.Duration
}

func (o *ClientOptions) engine() *jsonrpc.ClientOptions {
	if o == nil {
		return nil
	}
	return &jsonrpc.ClientOptions{Logger: o.Logger, OnNotification: o.OnNotification, MaxLineBytes: o.MaxLineBytes, Credential: o.Credential, CallTimeout: o.CallTimeout}
}

// Client is a client of a thrum daemon (or of a node in process, see
// thrum.Node.Dial) on one connection: a Unix socket, a WebSocket, or any
// stream such as an in-process pipe. It has a typed method per API method
// (Health, SendMessage, ...) and Call for any method by name. Calls may be
// made concurrently; their replies are matched by id, so a slow call does
// not hold up others on the wire (the server may still answer in order).
type Client struct {
	c *jsonrpc.Client
}

// Dial connects to a daemon's Unix socket.
func Dial(ctx context.Context, socketPath string, opts *ClientOptions) (*Client, error) {
	c, err := jsonrpc.Dial(ctx, socketPath, opts.engine())
	if err != nil {
		return nil, err
	}
	return &Client{c}, nil
}

// DialWebSocket connects to a daemon's WebSocket endpoint, such as
// "ws://127.0.0.1:9999/ws". ctx bounds the handshake only. A WebSocket may
// call nothing but health and auth until it authenticates: with Auth, or
// at once by giving its credential in opts.Credential.
func DialWebSocket(ctx context.Context, url string, opts *ClientOptions) (*Client, error) {
	c, err := jsonrpc.DialWebSocket(ctx, url, opts.engine())
	if err != nil {
		return nil, err
	}
	return &Client{c}, nil
}

// NewClient runs a client on a stream connection speaking newline-delimited
// JSON, such as one end of a net.Pipe whose other end a server serves. The
// client owns nc and closes it.
func NewClient(nc net.Conn, opts *ClientOptions) *Client {
	return &Client{jsonrpc.NewClient(nc, opts.engine())}
}

// Call calls method with params (nil for none) and decodes the reply's
// result into result (nil to discard it). An error reply is returned as
// its *Error, so errors.Is(err, ErrNotFound) and errors.As work. If ctx ends
// first, Call stops waiting and returns ctx's error; the reply, when it
// comes, is dropped. If the connection ends, the error wraps ErrConnClosed.
func (c *Client) Call(ctx context.Context, method string, params, result any) error {
	return c.c.Call(ctx, method, params, result)
}

// Notify sends a notification: a request without an id, which the server
// runs and never answers (so its error, if any, is not seen either).
func (c *Client) Notify(ctx context.Context, method string, params any) error {
	return c.c.Notify(ctx, method, params)
}

// Done is closed when the connection has ended and the client's read
// goroutine has stopped.
func (c *Client) Done() <-chan struct{} { return c.c.Done() }

// Err reports why the connection ended (wrapping ErrConnClosed and the
// cause, such as io.EOF, a WebSocket close status, or the server's error
// like "too many connections"), or nil while it is open.
func (c *Client) Err() error { return c.c.Err() }

// Close closes the connection (a WebSocket with a close handshake), fails
// pending calls and waits for the read goroutine to stop. While an
// OnNotification callback runs it does not wait, so that the callback
// itself may call Close. It is idempotent.
func (c *Client) Close() error { return c.c.Close() }
