package rpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"
)

// Transports, as reported by Conn.Transport.
const (
	TransportUnix      = "unix"      // newline-delimited JSON on a Unix socket (Serve)
	TransportWebSocket = "websocket" // one message per WebSocket frame (ServeHTTP)
	TransportPipe      = "pipe"      // an in-process stream (ServeConn with net.Pipe)
)

// Defaults of ServerOptions.
const (
	DefaultMaxLineBytes = 1 << 20 // 1 MiB
	DefaultMaxConns     = 256
	DefaultMaxBatch     = 100
	DefaultNotifyQueue  = 1024
)

// ErrServerClosed is returned by Serve after Shutdown or Close.
var ErrServerClosed = errors.New("rpc: server closed")

// ErrConnClosed is the error (or wrapped in the error) of an operation on a
// connection that has ended: Conn.Notify on the server side, Client calls on
// the client side.
var ErrConnClosed = errors.New("rpc: connection closed")

// ServerOptions are the optional knobs of a Server. A nil *ServerOptions
// means all defaults; zero or negative numbers mean the default too.
type ServerOptions struct {
	// Logger receives connection events and handler faults. Nil is silent.
	Logger *slog.Logger

	// MaxLineBytes caps one request line on a stream (Unix socket, pipe) or
	// one WebSocket message. A longer line is answered with an error and its
	// connection closed, since the stream cannot be resynchronised; a longer
	// WebSocket message closes the connection with StatusMessageTooBig.
	// Default DefaultMaxLineBytes.
	MaxLineBytes int

	// MaxConns caps concurrent connections across all transports. Over it, a
	// stream connection gets one -32006 error line and is closed, and a
	// WebSocket handshake is answered with HTTP 503. Default DefaultMaxConns.
	MaxConns int

	// MaxBatch caps the requests of one batch. Default DefaultMaxBatch.
	MaxBatch int

	// NotifyQueue is the number of outbound notifications a connection may
	// have queued. When it is full the connection is closed (a slow
	// consumer): the notifier never blocks. Default DefaultNotifyQueue.
	NotifyQueue int

	// AllowedOrigins lists extra Origin hosts ("app.example:8080", or with a
	// scheme, "https://app.example") a browser may connect from over
	// WebSocket, besides loopback origins. Default none.
	AllowedOrigins []string

	// OnConnClose, if set, is called once for each connection after it ended
	// and after its own OnClose functions ran.
	OnConnClose func(*Conn)
}

// Server is a JSON-RPC 2.0 server. It knows no methods of its own: the
// caller registers them with Handle. It serves newline-delimited JSON on
// stream connections (Serve, ServeConn) and one message per frame on
// WebSockets (ServeHTTP).
//
// All methods may be called concurrently. Requests of one connection are
// handled one at a time, in order; different connections run concurrently.
type Server struct {
	opts ServerOptions
	log  *slog.Logger

	hmu      sync.RWMutex
	handlers map[string]HandlerFunc

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*Conn]struct{}
	nconns    int           // reserved connection slots, registered or about to be
	shutdown  bool          // Shutdown or Close was called
	stopc     chan struct{} // closed when shutdown becomes true
	drained   chan struct{} // closed when shutdown and nconns reaches 0
}

// NewServer returns a server with no methods. opts may be nil; it is copied.
func NewServer(opts *ServerOptions) *Server {
	var o ServerOptions
	if opts != nil {
		o = *opts
		o.AllowedOrigins = append([]string(nil), opts.AllowedOrigins...)
	}
	if o.MaxLineBytes <= 0 {
		o.MaxLineBytes = DefaultMaxLineBytes
	}
	if o.MaxConns <= 0 {
		o.MaxConns = DefaultMaxConns
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = DefaultMaxBatch
	}
	if o.NotifyQueue <= 0 {
		o.NotifyQueue = DefaultNotifyQueue
	}
	log := o.Logger
	if log == nil {
		log = discardLogger
	}
	return &Server{
		opts:      o,
		log:       log,
		handlers:  make(map[string]HandlerFunc),
		listeners: make(map[net.Listener]struct{}),
		conns:     make(map[*Conn]struct{}),
		stopc:     make(chan struct{}),
		drained:   make(chan struct{}),
	}
}

// Handle registers h for method, replacing any previous handler. Calls
// already running keep the handler they started with.
func (s *Server) Handle(method string, h HandlerFunc) {
	if h == nil {
		panic("rpc: Handle of " + method + " with a nil handler")
	}
	s.hmu.Lock()
	s.handlers[method] = h
	s.hmu.Unlock()
}

// Unhandle removes the handler of method; later calls get -32601.
func (s *Server) Unhandle(method string) {
	s.hmu.Lock()
	delete(s.handlers, method)
	s.hmu.Unlock()
}

func (s *Server) handler(method string) HandlerFunc {
	s.hmu.RLock()
	defer s.hmu.RUnlock()
	return s.handlers[method]
}

// Serve accepts stream connections on l and serves each in its own
// goroutine, until Shutdown or Close, when it returns ErrServerClosed. Any
// other Accept error that is not temporary is returned. Serve closes l when
// it returns.
//
// Connections from a Unix listener report TransportUnix and their peer's
// UID; others report their network's name ("tcp").
func (s *Server) Serve(l net.Listener) error {
	defer l.Close()
	s.mu.Lock()
	if s.shutdown {
		s.mu.Unlock()
		return ErrServerClosed
	}
	s.listeners[l] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, l)
		s.mu.Unlock()
	}()

	var delay time.Duration
	for {
		nc, err := l.Accept()
		if err != nil {
			if s.isShutdown() {
				return ErrServerClosed
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			// Probably temporary (out of file descriptors): back off, as net/http does.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			s.log.Warn("rpc: accept failed; retrying", "err", err, "delay", delay)
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-s.stopc:
				t.Stop()
				return ErrServerClosed
			}
			continue
		}
		delay = 0
		transport := nc.LocalAddr().Network()
		if _, ok := nc.(*net.UnixConn); ok {
			transport = TransportUnix
		}
		if e := s.reserve(); e != nil {
			s.refuse(nc, e)
			continue
		}
		c := s.newStreamConn(context.Background(), nc, transport)
		go c.serve()
	}
}

// ServeConn serves one stream connection (newline-delimited JSON), such as
// one end of a net.Pipe for an in-process client, and blocks until it ends.
// transport is what Conn.Transport reports (TransportPipe for a pipe).
// Handlers' contexts derive from ctx, so its values reach them; cancelling
// ctx closes the connection.
func (s *Server) ServeConn(ctx context.Context, nc net.Conn, transport string) {
	if e := s.reserve(); e != nil {
		s.refuse(nc, e)
		return
	}
	c := s.newStreamConn(ctx, nc, transport)
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	c.serve()
}

func (s *Server) newStreamConn(ctx context.Context, nc net.Conn, transport string) *Conn {
	c := s.newConn(ctx, transport, &streamTransport{nc: nc, lr: newLineReader(nc, s.opts.MaxLineBytes)})
	c.peerUID, c.peerOK = peerUID(nc)
	return c
}

// refuse answers a stream connection that gets no slot with one error line
// and closes it.
func (s *Server) refuse(nc net.Conn, e *Error) {
	s.log.Warn("rpc: connection refused", "remote", nc.RemoteAddr().String(), "reason", e.Message)
	_ = nc.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = nc.Write(append(encodeError(nil, e), '\n'))
	_ = nc.Close()
}

// reserve takes a connection slot, or says why there is none.
func (s *Server) reserve() *Error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shutdown {
		return Errorf(CodeUnavailable, "server is shutting down: reconnect later")
	}
	if s.nconns >= s.opts.MaxConns {
		return Errorf(CodeLimitExceeded, "too many connections: limit is %d", s.opts.MaxConns)
	}
	s.nconns++
	return nil
}

// release gives back a slot taken by reserve.
func (s *Server) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nconns--
	if s.shutdown && s.nconns == 0 {
		select {
		case <-s.drained:
		default:
			close(s.drained)
		}
	}
}

// register adds c to the live connections unless the server is shutting down.
func (s *Server) register(c *Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shutdown {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *Server) unregister(c *Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.release()
}

func (s *Server) isShutdown() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.shutdown
}

// beginShutdown stops accepting and returns the live connections and the
// first error of closing the listeners. s.mu must be held.
func (s *Server) beginShutdownLocked() (conns []*Conn, err error) {
	if !s.shutdown {
		s.shutdown = true
		close(s.stopc)
		if s.nconns == 0 {
			close(s.drained)
		}
	}
	for l := range s.listeners {
		if cerr := l.Close(); cerr != nil && err == nil && !errors.Is(cerr, net.ErrClosed) {
			err = cerr
		}
		delete(s.listeners, l)
	}
	for c := range s.conns {
		conns = append(conns, c)
	}
	return conns, err
}

// Shutdown stops the server gracefully: it closes the listeners, lets calls
// in flight finish and their replies go out, then closes every connection
// (WebSockets with StatusGoingAway) and waits until each has ended and its
// OnClose functions ran. If ctx ends first, Shutdown closes everything at
// once, as Close does, and returns ctx's error.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	conns, err := s.beginShutdownLocked()
	s.mu.Unlock()
	for _, c := range conns {
		c.stop()
	}
	select {
	case <-s.drained:
		return err
	case <-ctx.Done():
		s.Close()
		return ctx.Err()
	}
}

// Close closes the listeners and every connection at once; handlers' contexts
// are cancelled. It does not wait for handlers to return. Close is
// idempotent.
func (s *Server) Close() error {
	s.mu.Lock()
	conns, err := s.beginShutdownLocked()
	s.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	return err
}

// transport is what a Conn reads from and writes to.
type transport interface {
	// read returns the next message; the slice is valid until the next call.
	read(ctx context.Context) ([]byte, error)
	// write sends one message.
	write(ctx context.Context, msg []byte) error
	// interrupt makes a blocked read return, to end the connection
	// gracefully. It must not block; a goroutine it starts is added to wg.
	interrupt(wg *sync.WaitGroup)
	// close ends the connection gracefully, after the last write.
	close(shutdown bool)
	// kill ends the connection at once; it may be called concurrently with
	// anything else.
	kill()
}

type connKey struct{}

// ConnFromContext returns the connection a handler's call arrived on, or
// nil outside a handler.
func ConnFromContext(ctx context.Context) *Conn {
	c, _ := ctx.Value(connKey{}).(*Conn)
	return c
}

// Conn is the server side of one connection. Handlers reach it through
// ConnFromContext to push notifications and keep per-connection state. All
// its methods may be called concurrently.
type Conn struct {
	srv       *Server
	t         transport
	transport string
	peerUID   int
	peerOK    bool

	ctx    context.Context // handlers' context; cancelled when the conn dies
	cancel context.CancelFunc

	resp     chan []byte   // replies, handed from the reader to the writer
	notes    chan []byte   // queued notifications
	readDone chan struct{} // closed when the reader stopped
	dead     chan struct{} // closed when the conn is closed or has ended
	deadOnce sync.Once
	wg       sync.WaitGroup // the writer and any interrupt goroutine

	mu          sync.Mutex
	stopping    bool // graceful end requested: read no more requests
	readEnded   bool
	interrupted bool
	ended       bool
	inflight    int // requests read whose reply is not yet written
	values      map[any]any
	onClose     []func()
}

func (s *Server) newConn(parent context.Context, transport string, t transport) *Conn {
	c := &Conn{
		srv:       s,
		t:         t,
		transport: transport,
		resp:      make(chan []byte),
		notes:     make(chan []byte, s.opts.NotifyQueue),
		readDone:  make(chan struct{}),
		dead:      make(chan struct{}),
	}
	ctx, cancel := context.WithCancel(parent)
	c.ctx, c.cancel = context.WithValue(ctx, connKey{}, c), cancel
	return c
}

// Transport reports how the connection arrived: TransportUnix,
// TransportWebSocket, TransportPipe, or what ServeConn was given.
func (c *Conn) Transport() string { return c.transport }

// PeerUID returns the user id of the process at the other end of a Unix
// socket (SO_PEERCRED, Linux). ok is false on other transports and systems.
func (c *Conn) PeerUID() (uid int, ok bool) { return c.peerUID, c.peerOK }

// Value returns the value SetValue stored under key, or nil.
func (c *Conn) Value(key any) any {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.values[key]
}

// SetValue stores per-connection state, such as the identity the connection
// authenticated as. A nil val deletes key.
func (c *Conn) SetValue(key, val any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if val == nil {
		delete(c.values, key)
		return
	}
	if c.values == nil {
		c.values = make(map[any]any)
	}
	c.values[key] = val
}

// OnClose registers f to run once when the connection ends, after its
// transport is closed, from the connection's goroutine. If the connection
// has already ended, f runs at once in the caller's goroutine.
func (c *Conn) OnClose(f func()) {
	c.mu.Lock()
	if !c.ended {
		c.onClose = append(c.onClose, f)
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	f()
}

// Notify queues a JSON-RPC notification (a request without an id) for the
// peer; it is written between replies, never inside one. Notify never
// blocks: if the queue (ServerOptions.NotifyQueue) is full, the connection
// is closed as a slow consumer and a -32006 *Error returned. On an ended
// connection it returns an error wrapping ErrConnClosed.
func (c *Conn) Notify(method string, params any) error {
	b, err := encodeNotification(method, params)
	if err != nil {
		return fmt.Errorf("rpc: notify %s: %w", method, err)
	}
	select {
	case <-c.dead:
		return fmt.Errorf("rpc: notify %s: %w", method, ErrConnClosed)
	case <-c.readDone:
		return fmt.Errorf("rpc: notify %s: %w", method, ErrConnClosed)
	default:
	}
	select {
	case c.notes <- b:
		return nil
	default:
	}
	c.srv.log.Warn("rpc: closing slow consumer", "transport", c.transport, "queue", cap(c.notes))
	c.Close()
	return Errorf(CodeLimitExceeded, "notification queue full (limit is %d): connection closed as a slow consumer", cap(c.notes))
}

// Close closes the connection at once; a call in flight has its context
// cancelled and its reply dropped. Close is idempotent.
func (c *Conn) Close() error {
	c.markDead(true)
	return nil
}

// markDead closes dead and cancels the handlers' context, the first time;
// kill also closes the transport at once.
func (c *Conn) markDead(kill bool) {
	c.deadOnce.Do(func() {
		close(c.dead)
		c.cancel()
		if kill {
			c.t.kill()
		}
	})
}

func (c *Conn) isDead() bool {
	select {
	case <-c.dead:
		return true
	default:
		return false
	}
}

// stop asks the connection to end gracefully: read no more requests, finish
// the one in flight and write its reply, then close.
func (c *Conn) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopping {
		return
	}
	c.stopping = true
	if c.inflight == 0 {
		c.interruptLocked()
	}
}

func (c *Conn) interruptLocked() {
	if c.interrupted || c.readEnded {
		return
	}
	c.interrupted = true
	c.t.interrupt(&c.wg)
}

// replied marks one request as answered (or needing no answer).
func (c *Conn) replied() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inflight--
	if c.stopping && c.inflight == 0 {
		c.interruptLocked()
	}
}

// serve runs the connection until it ends: the reader in this goroutine,
// the writer in another.
func (c *Conn) serve() {
	registered := c.srv.register(c)
	if registered {
		c.srv.log.Debug("rpc: connection opened", "transport", c.transport)
		c.wg.Add(1)
		go c.writeLoop()
		c.readLoop()
	}
	c.mu.Lock()
	if !registered {
		c.stopping = true // the server began shutting down first
	}
	c.readEnded = true
	c.mu.Unlock()
	close(c.readDone)
	c.wg.Wait()
	c.finish()
}

func (c *Conn) readLoop() {
	for {
		c.mu.Lock()
		stopping := c.stopping
		c.mu.Unlock()
		if stopping || c.isDead() {
			return
		}
		msg, err := c.t.read(c.ctx)
		if err != nil {
			if errors.Is(err, errLineTooLong) {
				c.mu.Lock()
				c.inflight++
				c.mu.Unlock()
				c.reply(encodeError(nil, Errorf(CodeInvalidRequest, "request too large: limit is %d bytes", c.srv.opts.MaxLineBytes)))
			}
			c.srv.log.Debug("rpc: connection read ended", "transport", c.transport, "err", err)
			return
		}
		c.mu.Lock()
		if c.stopping {
			c.mu.Unlock()
			return
		}
		c.inflight++
		c.mu.Unlock()
		if out := c.srv.handleMessage(c.ctx, msg); out != nil {
			c.reply(out)
		} else {
			c.replied()
		}
	}
}

// reply hands a reply to the writer.
func (c *Conn) reply(b []byte) {
	select {
	case c.resp <- b:
	case <-c.dead:
	}
}

// writeLoop writes replies and notifications, whole and one at a time.
func (c *Conn) writeLoop() {
	defer c.wg.Done()
	write := func(b []byte) bool {
		if err := c.t.write(c.ctx, b); err != nil {
			c.srv.log.Debug("rpc: connection write failed", "transport", c.transport, "err", err)
			c.Close()
			return false
		}
		return true
	}
	for {
		select {
		case b := <-c.resp:
			// Notifications the handler queued before replying go first, so
			// that a client sees them in causal order.
			for n := len(c.notes); n > 0; n-- {
				if !write(<-c.notes) {
					c.replied()
					return
				}
			}
			ok := write(b)
			c.replied()
			if !ok {
				return
			}
		case b := <-c.notes:
			if !write(b) {
				return
			}
		case <-c.readDone:
			for { // flush the notifications already queued
				select {
				case b := <-c.notes:
					if !write(b) {
						return
					}
				default:
					return
				}
			}
		case <-c.dead:
			return
		}
	}
}

// finish closes the transport and runs the close hooks.
func (c *Conn) finish() {
	c.mu.Lock()
	c.ended = true
	hooks := c.onClose
	c.onClose = nil
	shutdown := c.stopping
	c.mu.Unlock()

	if !c.isDead() {
		c.t.close(shutdown)
	}
	c.markDead(false)
	for _, f := range hooks {
		c.runHook(f)
	}
	if f := c.srv.opts.OnConnClose; f != nil {
		c.runHook(func() { f(c) })
	}
	c.srv.log.Debug("rpc: connection closed", "transport", c.transport)
	c.srv.unregister(c)
}

func (c *Conn) runHook(f func()) {
	defer func() {
		if p := recover(); p != nil {
			c.srv.log.Error("rpc: connection close hook panicked", "panic", p)
		}
	}()
	f()
}

// streamTransport is newline-delimited JSON on a net.Conn.
type streamTransport struct {
	nc   net.Conn
	lr   *lineReader
	wbuf []byte // used by the writer goroutine only
}

func (t *streamTransport) read(context.Context) ([]byte, error) {
	for {
		line, err := t.lr.next()
		if err != nil {
			return nil, err
		}
		if len(trimSpace(line)) > 0 { // blank lines are framing, not messages
			return line, nil
		}
	}
}

func (t *streamTransport) write(_ context.Context, msg []byte) error {
	t.wbuf = append(append(t.wbuf[:0], msg...), '\n')
	_, err := t.nc.Write(t.wbuf)
	if cap(t.wbuf) > 64<<10 {
		t.wbuf = nil
	}
	return err
}

func (t *streamTransport) interrupt(*sync.WaitGroup) {
	if err := t.nc.SetReadDeadline(time.Unix(1, 0)); err != nil {
		t.nc.Close() // no deadlines on this conn: closing is the only way
	}
}

func (t *streamTransport) close(bool) { t.nc.Close() }
func (t *streamTransport) kill()      { t.nc.Close() }

// Compile-time check that the stream transport satisfies the interface.
var _ transport = (*streamTransport)(nil)
