package jsonrpc

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// ServeHTTP serves the WebSocket endpoint: one JSON-RPC message (or batch)
// per frame, replies as text frames. It blocks until the connection ends.
//
// Before the upgrade it refuses with 403 a request whose Host is not
// loopback (DNS rebinding) or whose Origin is present and neither loopback
// nor in ServerOptions.AllowedOrigins (the literal "null" included), and
// with 503 a connection over ServerOptions.MaxUnauthConns (its user's) or
// during shutdown. A connection starts unauthenticated: it is closed after
// ServerOptions.AuthTimeout unless a handler calls Conn.Authenticate. A
// credential refused in the handshake (or by a handler, see
// Conn.CredentialRefused) costs the connection
// ServerOptions.AuthFailureDelay.
// Frames are read into a buffer that grows as the frame arrives, charged
// to the server's budget, and must complete within LineTimeout.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	peer := s.requestPeer(r)
	if !loopbackHost(r.Host) {
		s.refusals.add(s.log, peer, false, "websocket refused: Host "+strconv.Quote(r.Host)+" is not loopback")
		http.Error(w, "forbidden: Host must be localhost, 127.0.0.1 or [::1]", http.StatusForbidden)
		return
	}
	if origin := r.Header.Get("Origin"); origin != "" && !s.allowedOrigin(origin) {
		s.refusals.add(s.log, peer, false, "websocket refused: Origin "+strconv.Quote(origin)+" not allowed")
		http.Error(w, "forbidden: Origin not allowed", http.StatusForbidden)
		return
	}
	// A credential in the handshake puts the connection in the
	// authenticated pool from the start. Its slot is taken before the
	// credential is checked, so that a credential the check spends (a
	// one-time login code) is never spent on a connection then refused
	// for want of a slot.
	class := classUnauth
	cred, err := bearer(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	withCred := cred != "" && s.opts.Authorize != nil
	if withCred {
		class = classWS
	}
	if e := s.reserve(class, peer); e != nil {
		s.refusals.add(s.log, peer, false, "websocket refused: "+e.Message)
		http.Error(w, e.Message, http.StatusServiceUnavailable)
		return
	}
	var bind func(*Conn)
	if withCred {
		if bind, err = s.opts.Authorize(r, cred); err != nil {
			var e *Error
			if errors.As(err, &e) && e.Code == CodeUnauthenticated {
				// Its slot held: not r's context, which ends as soon as
				// the peer goes away, and a guesser would go at once.
				s.failed(context.Background(), peer, "websocket credential refused: "+e.Message)
			}
			s.release(class, peer)
			s.refuseCredential(w, r, err)
			return
		}
	}
	// The origin check is done above, with rules coder/websocket does not
	// know (loopback origins on any port), hence InsecureSkipVerify.
	hw := &corkHijacker{ResponseWriter: w}
	ws, err := websocket.Accept(hw, r, &websocket.AcceptOptions{InsecureSkipVerify: true, Subprotocols: []string{Subprotocol}})
	if err != nil { // Accept has written the HTTP error
		s.release(class, peer)
		s.log.Debug("rpc: websocket handshake failed", "remote", r.RemoteAddr, "err", err)
		return
	}
	// The request's context ends with ServeHTTP; keep its values only.
	t := &wsTransport{ws: ws, cork: hw.conn, timeout: s.opts.LineTimeout}
	if class == classUnauth {
		t.setMax(min(s.opts.MaxLineBytes, maxUnauthMessage))
	} else {
		t.setMax(s.opts.MaxLineBytes)
	}
	c := s.newConn(context.WithoutCancel(r.Context()), TransportWebSocket, class, t)
	c.peer = peer
	c.peerUID, c.peerOK = peer, peersKnown && peer != unknownPeer
	if bind != nil {
		bind(c)
	} else {
		c.authTimer = time.AfterFunc(s.opts.AuthTimeout, c.expireAuth)
	}
	c.serve()
}

// Subprotocol is the WebSocket subprotocol the server selects when a
// client offers it. A browser, which cannot set an Authorization header,
// offers it beside "bearer.<credential>" to present a credential in the
// handshake: it must offer a subprotocol the server selects, or the
// connection fails.
const Subprotocol = "jsonrpc"

// bearerProtocol prefixes a credential offered as a subprotocol.
const bearerProtocol = "bearer."

// bearer returns the credential a handshake carries, "" if none: an
// "Authorization: Bearer" header, or a subprotocol "bearer.<credential>",
// which must come with Subprotocol: without it the server would select
// no subprotocol, a browser would drop the connection, and a one-time
// credential would be spent for nothing.
func bearer(r *http.Request) (string, error) {
	if scheme, cred, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") {
		if cred = strings.TrimSpace(cred); cred != "" {
			return cred, nil
		}
	}
	var cred string
	jsonrpc := false
	for _, h := range r.Header.Values("Sec-WebSocket-Protocol") {
		for _, p := range strings.Split(h, ",") {
			p = strings.TrimSpace(p)
			if c, ok := strings.CutPrefix(p, bearerProtocol); ok && c != "" {
				cred = c
			}
			jsonrpc = jsonrpc || p == Subprotocol
		}
	}
	if cred != "" && !jsonrpc {
		return "", errors.New("bad request: offer the subprotocol " + Subprotocol + " beside " + bearerProtocol + "<credential>")
	}
	return cred, nil
}

// refuseCredential answers a handshake whose credential Authorize did
// not accept: 401 if it was refused, 503 or 500 if it could not be
// checked (the server is shutting down, or failed: logged, as a
// handler's failure is).
func (s *Server) refuseCredential(w http.ResponseWriter, r *http.Request, err error) {
	var e *Error
	if !errors.As(err, &e) || e == nil {
		e = &Error{Code: CodeInternal, Message: "internal error"}
	}
	switch e.Code {
	case CodeUnavailable:
		http.Error(w, e.Message, http.StatusServiceUnavailable)
	case CodeInternal:
		s.log.Error("rpc: websocket credential could not be checked", "remote", r.RemoteAddr, "err", err)
		http.Error(w, e.Message, http.StatusInternalServerError)
	default:
		s.log.Debug("rpc: websocket refused: credential not accepted", "remote", r.RemoteAddr, "err", err)
		w.Header().Set("WWW-Authenticate", "Bearer")
		http.Error(w, "unauthorized: "+e.Message, http.StatusUnauthorized)
	}
}

// loopbackHost reports whether a Host header names this machine's loopback
// interface: localhost, 127.0.0.0/8 or ::1, with an optional port.
func loopbackHost(hostport string) bool {
	if hostport == "" {
		return false
	}
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	} else if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1]
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	// Reject forms net.ParseIP would not (like "127.1"), and zones.
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback() && !strings.Contains(host, "%")
}

// allowedOrigin reports whether a browser page at origin may connect: a
// loopback http(s) origin, or one listed in AllowedOrigins.
func (s *Server) allowedOrigin(origin string) bool {
	if origin == "null" {
		return false
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || u.User != nil {
		return false
	}
	if (u.Scheme == "http" || u.Scheme == "https") && loopbackHost(u.Host) {
		return true
	}
	for _, a := range s.opts.AllowedOrigins {
		if strings.EqualFold(a, u.Host) || strings.EqualFold(a, u.Scheme+"://"+u.Host) {
			return true
		}
	}
	return false
}

// maxUnauthMessage caps the messages of a WebSocket that has not
// authenticated: auth needs a few hundred bytes, and another user's
// connections waiting to authenticate must not hold the request budget
// that everyone's requests, the owner's socket's too, draw on.
const maxUnauthMessage = 64 << 10

// wsTransport is one JSON-RPC message per WebSocket frame.
type wsTransport struct {
	ws      *websocket.Conn
	cork    *corkConn    // the connection under ws
	max     atomic.Int64 // the largest message read; see setMax
	timeout time.Duration
	buf     []byte
}

// setMax sets the largest message the connection may send: a larger one
// closes it with StatusMessageTooBig (the library does).
func (t *wsTransport) setMax(n int) {
	t.max.Store(int64(n))
	t.ws.SetReadLimit(int64(n))
}

// wsChunk is the least a frame buffer grows by.
const wsChunk = 4 << 10

func (t *wsTransport) read(ctx context.Context, ch *charge) ([]byte, error) {
	if cap(t.buf) > 64<<10 { // do not keep a large buffer for an idle conn
		t.buf = nil
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	_, r, err := t.ws.Reader(rctx) // waits for a frame without a deadline
	if err != nil {
		return nil, err
	}
	// From its first byte, the whole message must arrive in time; the
	// library closes the connection when the read's context ends.
	var timedOut atomic.Bool
	timer := time.AfterFunc(t.timeout, func() { timedOut.Store(true); cancel() })
	defer timer.Stop()
	buf := t.buf[:0]
	limit := int(t.max.Load())
	for {
		if len(buf) == cap(buf) {
			// The library passes limit+1 bytes, then fails the next read
			// with StatusMessageTooBig: room for both, and no more.
			grow := max(cap(buf), wsChunk)
			if len(buf)+grow > limit+2 {
				grow = limit + 2 - len(buf)
			}
			if err := ch.take(grow); err != nil {
				return nil, err
			}
			nb := make([]byte, len(buf), len(buf)+grow)
			copy(nb, buf)
			buf = nb
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			t.buf = buf
			return buf, nil
		}
		if err != nil {
			if timedOut.Load() {
				return nil, errLineTimeout
			}
			return nil, err
		}
	}
}

// write sends msgs, one frame each, in one write to the connection: the
// library flushes every frame, so the frames are corked (gathered in
// memory) until the last. It gives the library no cancellable context: a
// context with a Done channel costs a timer registration per frame, which
// adds up when a notification fans out to many connections; a write to a
// dead connection ends anyway, as kill closes the socket under it.
func (t *wsTransport) write(_ context.Context, msgs [][]byte) error {
	if len(msgs) == 1 {
		return t.ws.Write(context.Background(), websocket.MessageText, msgs[0])
	}
	t.cork.cork()
	for _, msg := range msgs {
		if err := t.ws.Write(context.Background(), websocket.MessageText, msg); err != nil {
			_ = t.cork.uncork()
			return err
		}
	}
	return t.cork.uncork()
}

// corkHijacker hands the library, when it hijacks the HTTP connection, the
// connection wrapped in a corkConn.
type corkHijacker struct {
	http.ResponseWriter
	conn *corkConn
}

func (h *corkHijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	nc, brw, err := http.NewResponseController(h.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	if err := brw.Writer.Flush(); err != nil {
		nc.Close()
		return nil, nil, err
	}
	h.conn = &corkConn{Conn: nc}
	brw.Writer.Reset(h.conn)
	return h.conn, brw, nil
}

// corkConn is a server WebSocket's connection. While corked, what is
// written to it collects in memory; uncork writes it all at once. Writes
// are ordered: one made while uncork is writing waits for it.
type corkConn struct {
	net.Conn
	mu     sync.Mutex
	corked bool
	buf    []byte
}

func (c *corkConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.corked {
		c.buf = append(c.buf, p...)
		return len(p), nil
	}
	return c.Conn.Write(p)
}

func (c *corkConn) cork() {
	c.mu.Lock()
	c.corked = true
	c.mu.Unlock()
}

func (c *corkConn) uncork() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.corked = false
	if len(c.buf) == 0 {
		return nil
	}
	_, err := c.Conn.Write(c.buf)
	c.buf = c.buf[:0]
	if cap(c.buf) > maxWriteBatch*2 {
		c.buf = nil
	}
	return err
}

// interrupt starts the close handshake; the reader returns when the peer
// answers it (or after the library's 5 s wait).
func (t *wsTransport) interrupt(wg *sync.WaitGroup) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = t.ws.Close(websocket.StatusGoingAway, "server shutting down")
	}()
}

// close starts the close handshake and waits for the peer's answer. The
// library reads the rest of a frame it stopped reading (one over the
// limit) before it looks for that answer, and with no deadline of its
// own: a peer gone silent mid-frame would hold the connection forever.
// The peer has the request timeout to finish; then the socket is closed.
func (t *wsTransport) close(shutdown bool) {
	_ = t.cork.SetReadDeadline(time.Now().Add(t.timeout))
	if shutdown {
		_ = t.ws.Close(websocket.StatusGoingAway, "server shutting down")
		return
	}
	_ = t.ws.Close(websocket.StatusNormalClosure, "")
}

func (t *wsTransport) kill() { _ = t.ws.CloseNow() }

var _ transport = (*wsTransport)(nil)

// wsClient is the client side of a WebSocket, for Client.
type wsClient struct {
	ws  *websocket.Conn
	buf []byte // used by the read goroutine only
}

// wsHTTPClient dials WebSockets without pooling connections: a refused
// handshake must not leave an idle keep-alive connection behind.
var wsHTTPClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

func dialWebSocket(ctx context.Context, u string, maxMsg int, credential string) (*wsClient, error) {
	opts := &websocket.DialOptions{HTTPClient: wsHTTPClient}
	if credential != "" {
		opts.HTTPHeader = http.Header{"Authorization": {"Bearer " + credential}}
	}
	ws, resp, err := websocket.Dial(ctx, u, opts)
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			return nil, &httpStatusError{status: resp.Status, reason: refusalReason(resp.Body), err: err}
		}
		return nil, err
	}
	ws.SetReadLimit(int64(maxMsg))
	return &wsClient{ws: ws}, nil
}

// httpStatusError is a refused WebSocket handshake.
type httpStatusError struct {
	status string
	reason string // the first line of the response's body, if any
	err    error
}

func (e *httpStatusError) Error() string {
	if e.reason == "" {
		return "handshake refused: " + e.status
	}
	return "handshake refused: " + e.status + ": " + e.reason
}

// refusalReason returns the first line of a refused handshake's body (the
// library keeps its first KiB): at most 300 bytes of valid UTF-8, without
// control characters.
func refusalReason(body io.Reader) string {
	if body == nil {
		return ""
	}
	b, _ := io.ReadAll(io.LimitReader(body, 1024))
	line, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	if len(line) > 300 {
		line = line[:300]
	}
	return strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return -1 // no terminal control from a server's body
		}
		return r
	}, strings.ToValidUTF8(strings.TrimSpace(line), ""))
}
func (e *httpStatusError) Unwrap() error { return e.err }

// read returns the next message, in a buffer it reuses: the slice is
// valid until the next call. It gives the library no cancellable context,
// which would cost a timer registration per message: the read goroutine
// ends when the connection is closed under it (Client.Close, kill).
func (t *wsClient) read(context.Context) ([]byte, error) {
	_, r, err := t.ws.Reader(context.Background())
	if err != nil {
		return nil, err
	}
	if cap(t.buf) > 64<<10 { // do not keep a large buffer between messages
		t.buf = nil
	}
	buf := t.buf[:0]
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)] // grow
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			t.buf = buf
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

func (t *wsClient) write(ctx context.Context, msg []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return t.ws.Write(ctx, websocket.MessageText, msg)
}

func (t *wsClient) close() error {
	err := t.ws.Close(websocket.StatusNormalClosure, "")
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

func (t *wsClient) kill() { _ = t.ws.CloseNow() }
