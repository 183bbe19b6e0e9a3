package jsonrpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
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
	DefaultMaxLineBytes     = 2 << 20 // 2 MiB
	DefaultMaxConns         = 256
	DefaultMaxUnauthConns   = 16
	DefaultMaxStrangerConns = 16
	DefaultAuthFailureDelay = time.Second
	DefaultAuthTimeout      = 5 * time.Second
	DefaultLineTimeout      = 10 * time.Second
	DefaultMaxPendingBytes  = 16 << 20 // 16 MiB
	DefaultMaxBatch         = 100
	DefaultNotifyQueue      = 1024
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
	// one WebSocket message (64 KiB at most until the WebSocket
	// authenticates: strangers waiting to must not hold the budget). A longer line is answered with an error and its
	// connection closed, since the stream cannot be resynchronised; a longer
	// WebSocket message closes the connection with StatusMessageTooBig.
	// Default DefaultMaxLineBytes.
	MaxLineBytes int

	// MaxConns caps concurrent stream connections (Unix socket, pipe), and
	// separately authenticated WebSockets (see Conn.Authenticate). Over it,
	// a stream connection gets one -32006 error line and is closed, and
	// Conn.Authenticate fails. Default DefaultMaxConns.
	MaxConns int

	// MaxUnauthConns caps the WebSockets of each local user that have
	// not authenticated yet: a small pool per user, so that connections
	// which present no credential never crowd out those that did (see
	// Authorize), nor the Unix socket, nor another user's. Over it a
	// WebSocket handshake is answered with HTTP 503. The user is the
	// owner of the peer's socket, where the system tells (Linux); else
	// every peer counts as this process's user. Default
	// DefaultMaxUnauthConns.
	MaxUnauthConns int

	// MaxStrangerConns caps the TCP connections of each local user other
	// than this process's, on a listener from LimitListener; a peer whose
	// user cannot be found counts as one such user. Default
	// DefaultMaxStrangerConns.
	MaxStrangerConns int

	// AuthFailureDelay is what a wrong credential costs the connection
	// that presented it: a WebSocket handshake whose credential Authorize
	// refused with -32002 is answered (401) this much later, and so is a
	// call whose handler calls Conn.CredentialRefused, the connection's
	// slots held, so guessing is slow however fast the guesser, while
	// every other connection's credentials are checked at once. Default
	// DefaultAuthFailureDelay.
	AuthFailureDelay time.Duration

	// AuthTimeout is how long a WebSocket may stay unauthenticated before
	// it is closed. Default DefaultAuthTimeout.
	AuthTimeout time.Duration

	// LineTimeout is how long the rest of a request may take to arrive once
	// its first byte has: a line or frame left half sent for longer closes
	// its connection. An idle connection between requests is not timed.
	// Default DefaultLineTimeout.
	LineTimeout time.Duration

	// MaxPendingBytes is the server-wide budget of bytes held for requests
	// being read or handled (a request is charged its size while read and
	// a few times its size while handled). A request that would exceed it
	// is refused with -32006, so memory stays bounded however many
	// connections send at once. Default DefaultMaxPendingBytes.
	MaxPendingBytes int64

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

	// Authorize, if set, checks the credential a WebSocket handshake
	// carries, before the upgrade and once a slot in the MaxConns pool is
	// held for it: in an "Authorization: Bearer" header, or, from a
	// browser, as a subprotocol "bearer.<credential>" offered beside
	// Subprotocol (without it the handshake gets 400). It returns a
	// function that binds the new connection to what the credential
	// proves (called once the connection exists, before its first request
	// is read), or an error: HTTP 401 with the *Error's message, or 503
	// for CodeUnavailable and 500 (logged) for CodeInternal or an error
	// with no *Error. A connection so authorized starts authenticated: in
	// the MaxConns pool, never timed out, so connections that present no
	// credential cannot keep it out by filling theirs.
	Authorize func(r *http.Request, credential string) (bind func(*Conn), err error)
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

	budget   budget
	cork     *corker
	refusals refusals // what the loopback port refused
	uid      int      // this process's user: the owner's peers are not strangers

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*Conn]struct{}
	nconns    [numClasses]int // reserved connection slots per class, registered or about to be
	unauth    map[int]int     // classUnauth slots per peer (see peerKey)
	shutdown  bool            // Shutdown or Close was called
	stopc     chan struct{}   // closed when shutdown becomes true
	drained   chan struct{}   // closed when shutdown and nconns reaches 0
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
	if o.MaxUnauthConns <= 0 {
		o.MaxUnauthConns = DefaultMaxUnauthConns
	}
	if o.MaxStrangerConns <= 0 {
		o.MaxStrangerConns = DefaultMaxStrangerConns
	}
	if o.AuthFailureDelay <= 0 {
		o.AuthFailureDelay = DefaultAuthFailureDelay
	}
	if o.AuthTimeout <= 0 {
		o.AuthTimeout = DefaultAuthTimeout
	}
	if o.LineTimeout <= 0 {
		o.LineTimeout = DefaultLineTimeout
	}
	if o.MaxPendingBytes <= 0 {
		o.MaxPendingBytes = DefaultMaxPendingBytes
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
		budget:    budget{max: o.MaxPendingBytes},
		cork:      newCorker(defaultCorkPeriod),
		opts:      o,
		log:       log,
		handlers:  make(map[string]HandlerFunc),
		listeners: make(map[net.Listener]struct{}),
		conns:     make(map[*Conn]struct{}),
		unauth:    make(map[int]int),
		uid:       os.Getuid(),
		refusals:  refusals{recent: make(map[int]int64)},
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
		if e := s.reserve(classStream, 0); e != nil {
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
	if e := s.reserve(classStream, 0); e != nil {
		s.refuse(nc, e)
		return
	}
	c := s.newStreamConn(ctx, nc, transport)
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	c.serve()
}

func (s *Server) newStreamConn(ctx context.Context, nc net.Conn, transport string) *Conn {
	t := &streamTransport{nc: nc, lr: newLineReader(nc, s.opts.MaxLineBytes), timeout: s.opts.LineTimeout}
	t.lr.arm = t.arm
	c := s.newConn(ctx, transport, classStream, t)
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

// Connection classes, each with its own cap: one class can never use up
// another's slots.
const (
	classStream = iota // Unix socket or pipe: MaxConns
	classWS            // authenticated WebSocket: MaxConns
	classUnauth        // WebSocket not authenticated yet: MaxUnauthConns
	numClasses
)

func (s *Server) classCap(class int) int {
	if class == classUnauth {
		return s.opts.MaxUnauthConns
	}
	return s.opts.MaxConns
}

func classLimitError(class, limit int) *Error {
	switch class {
	case classUnauth:
		return Errorf(CodeLimitExceeded, "too many unauthenticated connections from your user: limit is %d", limit)
	case classWS:
		return Errorf(CodeLimitExceeded, "too many authenticated WebSocket connections: limit is %d", limit)
	}
	return Errorf(CodeLimitExceeded, "too many connections: limit is %d", limit)
}

// reserve takes a connection slot of class for peer (see peerKey), or
// says why there is none.
func (s *Server) reserve(class, peer int) *Error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shutdown {
		return Errorf(CodeUnavailable, "server is shutting down: reconnect later")
	}
	if e := s.fullLocked(class, peer); e != nil {
		return e
	}
	s.takeLocked(class, peer, 1)
	return nil
}

// fullLocked says why class has no slot for peer, nil if it has one.
func (s *Server) fullLocked(class, peer int) *Error {
	limit := s.classCap(class)
	if class == classUnauth && s.unauth[peer] >= limit || class != classUnauth && s.nconns[class] >= limit {
		return classLimitError(class, limit)
	}
	return nil
}

// takeLocked takes (n = 1) or gives back (n = -1) a slot of class.
func (s *Server) takeLocked(class, peer, n int) {
	s.nconns[class] += n
	if class == classUnauth {
		if s.unauth[peer] += n; s.unauth[peer] == 0 {
			delete(s.unauth, peer)
		}
	}
}

// move moves peer's slot from one class to another, or says why it
// cannot.
func (s *Server) move(from, to, peer int) *Error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.fullLocked(to, peer); e != nil {
		return e
	}
	s.takeLocked(from, peer, -1)
	s.takeLocked(to, peer, 1)
	return nil
}

// release gives back a slot taken by reserve.
func (s *Server) release(class, peer int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.takeLocked(class, peer, -1)
	if s.shutdown && s.totalLocked() == 0 {
		select {
		case <-s.drained:
		default:
			close(s.drained)
		}
	}
}

func (s *Server) totalLocked() int {
	n := 0
	for _, k := range s.nconns {
		n += k
	}
	return n
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

func (s *Server) unregister(c *Conn, class int) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.release(class, c.peer)
}

func (s *Server) isShutdown() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.shutdown
}

// beginShutdownLocked stops accepting and returns the live connections and the
// first error of closing the listeners. s.mu must be held.
func (s *Server) beginShutdownLocked() (conns []*Conn, err error) {
	if !s.shutdown {
		s.shutdown = true
		close(s.stopc)
		if s.totalLocked() == 0 {
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
	// read returns the next message; the slice is valid until the next
	// call. It charges the bytes it holds to ch as it reads them and
	// returns errBudget when the charge is refused, errLineTimeout when the
	// rest of a begun message did not arrive within the line timeout.
	read(ctx context.Context, ch *charge) ([]byte, error)
	// write sends msgs, in order, with as few writes to the connection as
	// it can (one, on both transports).
	write(ctx context.Context, msgs [][]byte) error
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
	peer      int         // the key of its peer's slots, see peerKey
	charge    charge      // what the request being read or handled holds of the budget
	authTimer *time.Timer // closes an unauthenticated WebSocket; nil on streams

	ctx    context.Context // handlers' context; cancelled when the conn dies
	cancel context.CancelFunc

	resp     chan []byte   // replies, handed from the reader to the writer
	notes    chan []byte   // queued notifications
	readDone chan struct{} // closed when the reader stopped
	dead     chan struct{} // closed when the conn is closed or has ended
	deadOnce sync.Once
	wg       sync.WaitGroup // the writer and any interrupt goroutine

	wake   chan struct{} // wakes the writer to write the queued notifications
	urgent int           // queued notifications that wake the writer even while corked
	// Guarded by srv.cork.mu: when the last notification was queued, on
	// the corker's clock, and whether the connection is in the corker's
	// list of those to wake at its tick.
	queuedAt time.Duration
	waiting  bool

	mu          sync.Mutex
	class       int  // connection class, see reserve
	stopping    bool // graceful end requested: read no more requests
	readEnded   bool
	interrupted bool
	ended       bool
	inflight    int // requests read whose reply is not yet written
	values      map[any]any
	onClose     []func()
}

func (s *Server) newConn(parent context.Context, transport string, class int, t transport) *Conn {
	c := &Conn{
		srv:       s,
		t:         t,
		transport: transport,
		class:     class,
		charge:    charge{b: &s.budget},
		resp:      make(chan []byte),
		notes:     make(chan []byte, s.opts.NotifyQueue),
		wake:      make(chan struct{}, 1),
		urgent:    min(corkUrgent, max(1, s.opts.NotifyQueue/2)),
		readDone:  make(chan struct{}),
		dead:      make(chan struct{}),
	}
	c.queuedAt = -1 << 62 // never
	ctx, cancel := context.WithCancel(parent)
	c.ctx, c.cancel = context.WithValue(ctx, connKey{}, c), cancel
	return c
}

// Transport reports how the connection arrived: TransportUnix,
// TransportWebSocket, TransportPipe, or what ServeConn was given.
func (c *Conn) Transport() string { return c.transport }

// PeerUID returns the user id of the process at the other end: of a Unix
// socket (SO_PEERCRED), or of a WebSocket from this machine (the owner of
// the peer's socket). ok is false on other transports, on systems other
// than Linux, and when the peer could not be found.
func (c *Conn) PeerUID() (uid int, ok bool) { return c.peerUID, c.peerOK }

// Authenticate records that the connection presented a credential. A
// WebSocket then leaves the small pool of unauthenticated connections
// (ServerOptions.MaxUnauthConns) for the authenticated one (MaxConns), is
// no longer closed at AuthTimeout, and may send messages up to
// MaxLineBytes (64 KiB before); if that pool is full, Authenticate
// returns a -32006 *Error and the connection stays unauthenticated. On
// other transports it does nothing.
func (c *Conn) Authenticate() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.class != classUnauth {
		return nil
	}
	if e := c.srv.move(classUnauth, classWS, c.peer); e != nil {
		return e
	}
	c.class = classWS
	if c.authTimer != nil {
		c.authTimer.Stop()
	}
	if t, ok := c.t.(*wsTransport); ok {
		t.setMax(c.srv.opts.MaxLineBytes)
	}
	return nil
}

// Authenticated reports whether Authenticate was called on a WebSocket;
// it is true for other transports.
func (c *Conn) Authenticated() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.class != classUnauth
}

// expireAuth closes the connection if it has not authenticated.
func (c *Conn) expireAuth() {
	if c.Authenticated() {
		return
	}
	c.srv.log.Info("rpc: closing a WebSocket that did not authenticate in time", "timeout", c.srv.opts.AuthTimeout)
	c.Close()
}

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
	if err := c.queue(b); err != nil {
		if errors.Is(err, ErrConnClosed) {
			return fmt.Errorf("rpc: notify %s: %w", method, err)
		}
		return err
	}
	return nil
}

// NotifyEncoded queues a notification already encoded as a whole JSON-RPC
// message (see EncodeNotification), as Notify does. The slice may be shared
// by many connections and must not be modified afterwards.
func (c *Conn) NotifyEncoded(msg []byte) error {
	if err := c.queue(msg); err != nil {
		if errors.Is(err, ErrConnClosed) {
			return fmt.Errorf("rpc: notify: %w", err)
		}
		return err
	}
	return nil
}

// queue adds an encoded notification to the connection's queue and lets
// the corker wake the writer (see cork.go). A full queue closes the
// connection as a slow consumer.
func (c *Conn) queue(msg []byte) error {
	select {
	case <-c.dead:
		return ErrConnClosed
	case <-c.readDone:
		return ErrConnClosed
	default:
	}
	select {
	case c.notes <- msg:
		c.srv.cork.queued(c)
		return nil
	default:
	}
	c.srv.log.Warn("rpc: closing slow consumer", "transport", c.transport, "queue", cap(c.notes))
	c.Close()
	return Errorf(CodeLimitExceeded, "notification queue full (limit is %d): connection closed as a slow consumer", cap(c.notes))
}

// EncodeNotification encodes a notification (a request without an id) as
// Conn.NotifyEncoded takes it.
func EncodeNotification(method string, params any) ([]byte, error) {
	return encodeNotification(method, params)
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
		msg, err := c.t.read(c.ctx, &c.charge)
		if err != nil {
			c.charge.release()
			if e := c.readError(err); e != nil {
				c.mu.Lock()
				c.inflight++
				c.mu.Unlock()
				c.reply(encodeError(nil, e))
			}
			c.srv.log.Debug("rpc: connection read ended", "transport", c.transport, "err", err)
			return
		}
		c.mu.Lock()
		if c.stopping {
			c.mu.Unlock()
			c.charge.release()
			return
		}
		c.inflight++
		c.mu.Unlock()
		var out []byte
		// Handling a request copies it a few times over: charge for that
		// before it starts, so the budget bounds what decoding holds too.
		if c.charge.take((decodeFactor-1)*len(msg)) != nil {
			out = encodeError(nil, c.srv.busyError())
		} else {
			out = c.srv.handleMessage(c.ctx, msg)
		}
		c.charge.release()
		if out != nil {
			c.reply(out)
		} else {
			c.replied()
		}
	}
}

// readError is the error reply owed for a read that failed, nil if none
// (the peer went away).
func (c *Conn) readError(err error) *Error {
	switch {
	case errors.Is(err, errLineTooLong):
		return Errorf(CodeInvalidRequest, "request too large: limit is %d bytes", c.srv.opts.MaxLineBytes)
	case errors.Is(err, errBudget):
		return c.srv.busyError()
	case errors.Is(err, errLineTimeout):
		return Errorf(CodeInvalidRequest, "request timed out: it was not completed within %v of its first byte", c.srv.opts.LineTimeout)
	}
	return nil
}

func (s *Server) busyError() *Error {
	return Errorf(CodeLimitExceeded, "server busy: requests in flight hold its whole memory budget (%d bytes); retry shortly, or send smaller requests", s.opts.MaxPendingBytes)
}

// reply hands a reply to the writer.
func (c *Conn) reply(b []byte) {
	select {
	case c.resp <- b:
	case <-c.dead:
	}
}

// writeLoop writes replies and notifications, whole and in order. What is
// queued when it wakes goes out together (see takeNotes): under load, when
// a notification fans out to many connections faster than their writers
// run, or while the corker holds a stream's notifications for its tick,
// each writer catches up with one write instead of one per message.
func (c *Conn) writeLoop() {
	defer c.wg.Done()
	var batch [][]byte
	write := func() bool {
		err := c.t.write(c.ctx, batch)
		clear(batch) // do not keep the messages alive until the next write
		batch = batch[:0]
		if err != nil {
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
			for n := len(c.notes); ; {
				if batch, n = c.takeNotes(batch, n); n == 0 {
					break
				}
				if !write() {
					c.replied()
					return
				}
			}
			batch = append(batch, b)
			ok := write()
			c.replied()
			if !ok {
				return
			}
		case <-c.wake:
			for n := len(c.notes); n > 0; {
				if batch, n = c.takeNotes(batch, n); !write() {
					return
				}
			}
		case <-c.readDone:
			// Flush the notifications already queued.
			for n := len(c.notes); n > 0; {
				if batch, n = c.takeNotes(batch, n); !write() {
					return
				}
			}
			return
		case <-c.dead:
			return
		}
	}
}

// maxWriteBatch bounds the bytes takeNotes gathers into one write.
const maxWriteBatch = 64 << 10

// takeNotes appends up to n queued notifications to batch, stopping early
// once it holds maxWriteBatch bytes, and returns how many of the n it
// left in the queue.
func (c *Conn) takeNotes(batch [][]byte, n int) ([][]byte, int) {
	size := 0
	for _, b := range batch {
		size += len(b)
	}
	for ; n > 0 && size < maxWriteBatch; n-- {
		b := <-c.notes
		batch = append(batch, b)
		size += len(b)
	}
	return batch, n
}

// finish closes the transport and runs the close hooks.
func (c *Conn) finish() {
	c.mu.Lock()
	c.ended = true
	hooks := c.onClose
	c.onClose = nil
	shutdown := c.stopping
	class := c.class
	c.mu.Unlock()
	if c.authTimer != nil {
		c.authTimer.Stop()
	}

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
	c.srv.unregister(c, class)
}

func (c *Conn) runHook(f func()) {
	defer func() {
		if p := recover(); p != nil {
			c.srv.log.Error("rpc: connection close hook panicked", "panic", p)
		}
	}()
	f()
}

// errLineTimeout is returned by a transport's read when a message that had
// begun was not completed within the line timeout.
var errLineTimeout = errors.New("request not completed in time")

// streamTransport is newline-delimited JSON on a net.Conn.
type streamTransport struct {
	nc      net.Conn
	lr      *lineReader
	timeout time.Duration
	wbuf    []byte // used by the writer goroutine only

	mu          sync.Mutex
	interrupted bool // interrupt set the deadline: leave it alone
}

// arm sets (on) or clears the deadline of a line that has begun.
func (t *streamTransport) arm(on bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.interrupted {
		return
	}
	var d time.Time
	if on {
		d = time.Now().Add(t.timeout)
	}
	_ = t.nc.SetReadDeadline(d) // without deadlines a half-sent line waits; the budget still bounds it
}

func (t *streamTransport) read(_ context.Context, ch *charge) ([]byte, error) {
	t.lr.charge = ch
	for {
		line, err := t.lr.next()
		if err != nil {
			// Only arm and interrupt set deadlines.
			t.mu.Lock()
			timedOut := !t.interrupted
			t.mu.Unlock()
			if timedOut && errors.Is(err, os.ErrDeadlineExceeded) {
				return nil, errLineTimeout
			}
			return nil, err
		}
		if len(trimSpace(line)) > 0 { // blank lines are framing, not messages
			return line, nil
		}
	}
}

func (t *streamTransport) write(_ context.Context, msgs [][]byte) error {
	t.wbuf = t.wbuf[:0]
	for _, msg := range msgs {
		t.wbuf = append(append(t.wbuf, msg...), '\n')
	}
	_, err := t.nc.Write(t.wbuf)
	if cap(t.wbuf) > 64<<10 {
		t.wbuf = nil
	}
	return err
}

func (t *streamTransport) interrupt(*sync.WaitGroup) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.interrupted = true
	if err := t.nc.SetReadDeadline(time.Unix(1, 0)); err != nil {
		t.nc.Close() // no deadlines on this conn: closing is the only way
	}
}

func (t *streamTransport) close(bool) { t.nc.Close() }
func (t *streamTransport) kill()      { t.nc.Close() }

// Compile-time check that the stream transport satisfies the interface.
var _ transport = (*streamTransport)(nil)
