package jsonrpc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultClientMaxLineBytes is the default of ClientOptions.MaxLineBytes.
// It is larger than the server's request limit because replies (pages of
// messages) are larger than requests, and a client trusts its server.
const DefaultClientMaxLineBytes = 16 << 20 // 16 MiB

// ClientOptions are the optional knobs of a Client; nil means all defaults.
type ClientOptions struct {
	// Logger receives oddities of the connection (undecodable messages,
	// server errors without an id). Nil is silent.
	Logger *slog.Logger

	// OnNotification receives the server's notifications (messages with a
	// method and no id), in the order they arrived, from the client's read
	// goroutine. No reply is read while it runs, so it must return quickly
	// and must not wait for a Call of this client: hand work to another
	// goroutine. Nil drops notifications.
	OnNotification func(method string, params json.RawMessage)

	// MaxLineBytes caps one incoming line or WebSocket message; a longer one
	// ends the connection. Default DefaultClientMaxLineBytes.
	MaxLineBytes int

	// Credential, for DialWebSocket, is sent in the handshake as an
	// "Authorization: Bearer" header (see ServerOptions.Authorize).
	Credential string

	// CallTimeout bounds each Call and Notify whose ctx has no deadline of
	// its own: one waiting longer returns context.DeadlineExceeded, as if
	// its ctx had carried the deadline. Default 0: no bound.
	CallTimeout time.Duration
}

// Client is a JSON-RPC 2.0 client on one connection (a Unix socket, a
// WebSocket, or any stream such as an in-process pipe). Calls may be made
// concurrently; their replies are matched by id, so a slow call does not
// hold up others on the wire (the server may still answer in order).
type Client struct {
	t       clientTransport
	log     *slog.Logger
	onNote  func(string, json.RawMessage)
	maxMsg  int
	timeout time.Duration // ClientOptions.CallTimeout

	ctx    context.Context // lifetime of the read goroutine
	cancel context.CancelFunc

	nextID     atomic.Int64
	inCallback atomic.Bool
	closeOnce  sync.Once
	done       chan struct{}

	mu      sync.Mutex
	pending map[int64]chan reply
	err     error  // why the connection ended; set before done is closed
	connErr *Error // the last error the server sent with a null id
	closing bool
}

type reply struct {
	result json.RawMessage
	err    *Error
}

// clientTransport is what a Client reads from and writes to.
type clientTransport interface {
	read(ctx context.Context) ([]byte, error)
	// write sends one message; it may be called concurrently. If ctx ends
	// while a message is half written, the connection is closed, since the
	// stream cannot be resynchronised.
	write(ctx context.Context, msg []byte) error
	close() error // graceful; the read goroutine is still running
	kill()
}

// Dial connects to a server's Unix socket.
func Dial(ctx context.Context, socketPath string, opts *ClientOptions) (*Client, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", socketPath)
	if err != nil {
		return nil, fmt.Errorf("rpc: dial %s: %w", socketPath, err)
	}
	return NewClient(nc, opts), nil
}

// DialWebSocket connects to a server's WebSocket endpoint, such as
// "ws://127.0.0.1:9999/". ctx bounds the handshake only.
func DialWebSocket(ctx context.Context, url string, opts *ClientOptions) (*Client, error) {
	o := clientDefaults(opts)
	t, err := dialWebSocket(ctx, url, o.MaxLineBytes, o.Credential)
	if err != nil {
		return nil, fmt.Errorf("rpc: dial %s: %w", url, err)
	}
	return newClient(t, o), nil
}

// NewClient runs a client on a stream connection speaking newline-delimited
// JSON, such as one end of a net.Pipe whose other end is given to
// Server.ServeConn. The client owns nc and closes it.
func NewClient(nc net.Conn, opts *ClientOptions) *Client {
	o := clientDefaults(opts)
	t := &clientStream{nc: nc, lr: newLineReader(nc, o.MaxLineBytes), sem: make(chan struct{}, 1)}
	return newClient(t, o)
}

func clientDefaults(opts *ClientOptions) ClientOptions {
	var o ClientOptions
	if opts != nil {
		o = *opts
	}
	if o.MaxLineBytes <= 0 {
		o.MaxLineBytes = DefaultClientMaxLineBytes
	}
	if o.Logger == nil {
		o.Logger = discardLogger
	}
	return o
}

func newClient(t clientTransport, o ClientOptions) *Client {
	c := &Client{
		t:       t,
		log:     o.Logger,
		onNote:  o.OnNotification,
		maxMsg:  o.MaxLineBytes,
		timeout: o.CallTimeout,
		done:    make(chan struct{}),
		pending: make(map[int64]chan reply),
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	go c.readLoop()
	return c
}

// bound gives ctx the client's CallTimeout unless it has a deadline.
func (c *Client) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok || c.timeout <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, c.timeout)
}

// Call calls method with params (nil for none) and decodes the reply's
// result into result (nil to discard it). An error reply is returned as
// its *Error, so errors.Is(err, ErrNotFound) and errors.As work. If ctx ends
// first, Call stops waiting and returns ctx's error; the reply, when it
// comes, is dropped. If the connection ends, the error wraps ErrConnClosed.
// Ids are increasing integers.
func (c *Client) Call(ctx context.Context, method string, params, result any) error {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	id := c.nextID.Add(1)
	req, err := encodeRequest(strconv.AppendInt(nil, id, 10), method, params)
	if err != nil {
		return fmt.Errorf("rpc: call %s: %w", method, err)
	}
	ch := make(chan reply, 1)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return fmt.Errorf("rpc: call %s: %w", method, err)
	}
	c.pending[id] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
	}()

	if err := c.t.write(ctx, req); err != nil {
		return fmt.Errorf("rpc: call %s: %w", method, c.writeFailed(ctx, err))
	}
	var r reply
	select {
	case r = <-ch:
	case <-ctx.Done():
		return fmt.Errorf("rpc: call %s: %w", method, ctx.Err())
	case <-c.done:
		select {
		case r = <-ch: // the reply came just before the end
		default:
			return fmt.Errorf("rpc: call %s: %w", method, c.Err())
		}
	}
	if r.err != nil {
		return r.err
	}
	if result != nil && len(r.result) > 0 {
		if err := json.Unmarshal(r.result, result); err != nil {
			return fmt.Errorf("rpc: call %s: decode result: %w", method, err)
		}
	}
	return nil
}

// Notify sends a notification: a request without an id, which the server
// runs and never answers.
func (c *Client) Notify(ctx context.Context, method string, params any) error {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	b, err := encodeNotification(method, params)
	if err != nil {
		return fmt.Errorf("rpc: notify %s: %w", method, err)
	}
	if err := c.Err(); err != nil {
		return fmt.Errorf("rpc: notify %s: %w", method, err)
	}
	if err := c.t.write(ctx, b); err != nil {
		return fmt.Errorf("rpc: notify %s: %w", method, c.writeFailed(ctx, err))
	}
	return nil
}

// writeFailed returns the error to report for a failed write. Unless ctx
// ended, the connection is broken: the read goroutine is about to see why
// (it may still have the server's last words, like "too many connections"
// to read), so wait for it and report its reason.
func (c *Client) writeFailed(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	select {
	case <-c.done:
		return c.Err()
	case <-ctx.Done():
		return err
	}
}

// Done is closed when the connection has ended and the read goroutine has
// stopped.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err reports why the connection ended (wrapping ErrConnClosed and the
// cause, such as io.EOF, a WebSocket close status, or the server's error
// like "too many connections"), or nil while it is open.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close closes the connection (a WebSocket with a close handshake), fails
// pending calls and waits for the read goroutine to stop. While an
// OnNotification callback runs it does not wait, so that the callback
// itself may call Close. It is idempotent.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closing = true
		c.mu.Unlock()
		_ = c.t.close()
	})
	if !c.inCallback.Load() {
		<-c.done
	}
	return nil
}

func (c *Client) readLoop() {
	var cause error
	for {
		msg, err := c.t.read(c.ctx)
		if err != nil {
			cause = err
			break
		}
		c.dispatch(msg)
	}
	c.mu.Lock()
	switch {
	case c.closing:
		c.err = fmt.Errorf("%w: closed by the client", ErrConnClosed)
	case c.connErr != nil:
		c.err = fmt.Errorf("%w: %w", ErrConnClosed, c.connErr)
	case errors.Is(cause, errLineTooLong):
		c.err = fmt.Errorf("%w: a message from the server exceeds the limit of %d bytes", ErrConnClosed, c.maxMsg)
	default:
		c.err = fmt.Errorf("%w: %w", ErrConnClosed, cause)
	}
	c.mu.Unlock()
	c.cancel()
	c.t.kill()
	close(c.done)
}

// dispatch routes one incoming message: a reply to its caller, a
// notification to OnNotification. This client sends no batches, so a
// batch (which would answer one) is undecodable here like anything else
// that is not one message.
func (c *Client) dispatch(msg []byte) {
	msg = trimSpace(msg)
	if len(msg) == 0 {
		return
	}
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method *string         `json:"method"`
		Params json.RawMessage `json:"params"`
		Result json.RawMessage `json:"result"`
		Error  json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(msg, &m); err != nil {
		c.log.Warn("rpc: client: undecodable message from server", "err", err)
		return
	}
	if m.Method != nil {
		if m.ID != nil {
			c.log.Warn("rpc: client: ignoring a request from the server", "method", *m.Method)
			return
		}
		c.notify(*m.Method, m.Params)
		return
	}
	c.route(m.ID, m.Result, m.Error)
}

// route hands a reply to the call waiting for it, or records an error
// about the connection (one with a null id).
func (c *Client) route(rawID, result, rawErr []byte) {
	var e *Error
	if len(rawErr) > 0 && string(rawErr) != "null" {
		e = new(Error)
		if err := json.Unmarshal(rawErr, e); err != nil {
			e = Errorf(CodeInternal, "malformed error reply from server: %s", rawErr)
		}
	}
	id, err := strconv.ParseInt(string(rawID), 10, 64)
	if err != nil { // a null id: an error about the connection, not a call
		if e != nil {
			c.log.Warn("rpc: client: server error", "code", e.Code, "message", e.Message)
			c.mu.Lock()
			c.connErr = e
			c.mu.Unlock()
		}
		return
	}
	c.mu.Lock()
	ch := c.pending[id]
	delete(c.pending, id)
	c.mu.Unlock()
	if ch != nil {
		ch <- reply{result: result, err: e}
	}
}

func (c *Client) notify(method string, params json.RawMessage) {
	if c.onNote == nil {
		return
	}
	c.inCallback.Store(true)
	defer c.inCallback.Store(false)
	defer func() {
		if p := recover(); p != nil {
			c.log.Error("rpc: client: OnNotification panicked", "method", method, "panic", p)
		}
	}()
	c.onNote(method, params)
}

// clientStream is newline-delimited JSON on a net.Conn.
type clientStream struct {
	nc   net.Conn
	lr   *lineReader
	sem  chan struct{} // one writer at a time, waited for with a ctx
	wbuf []byte
}

func (t *clientStream) read(context.Context) ([]byte, error) {
	for {
		line, err := t.lr.next()
		if err != nil {
			return nil, err
		}
		if len(trimSpace(line)) > 0 {
			return line, nil
		}
	}
}

func (t *clientStream) write(ctx context.Context, msg []byte) error {
	select {
	case t.sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-t.sem }()
	if err := ctx.Err(); err != nil {
		return err
	}
	t.wbuf = append(append(t.wbuf[:0], msg...), '\n')
	var (
		stop  func() bool
		fired chan struct{}
	)
	if ctx.Done() != nil {
		fired = make(chan struct{})
		stop = context.AfterFunc(ctx, func() {
			_ = t.nc.SetWriteDeadline(time.Unix(1, 0)) // unblock the Write
			close(fired)
		})
	}
	n, err := t.nc.Write(t.wbuf)
	if stop != nil && !stop() {
		<-fired
		_ = t.nc.SetWriteDeadline(time.Time{})
		if err != nil {
			err = ctx.Err()
		}
	}
	if err != nil && n > 0 {
		t.nc.Close() // a partial line would corrupt the stream
	}
	if cap(t.wbuf) > 64<<10 {
		t.wbuf = nil
	}
	return err
}

func (t *clientStream) close() error { return t.nc.Close() }
func (t *clientStream) kill()        { t.nc.Close() }
