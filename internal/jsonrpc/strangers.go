package jsonrpc

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"
)

// The loopback port is reachable by every local user and every page on a
// localhost origin. What one of them does must not lock out the others,
// the owner above all: each user's connections are capped apart (by the
// owner of the peer's socket), a wrong credential costs the connection
// that presented it a delay, not everyone a refusal, and what is refused
// is counted (Server.Refused) and logged sparingly.

// unknownPeer is the key of peers whose user cannot be found: together,
// one more stranger.
const unknownPeer = -1

// peerKey is the key under which the peer of a TCP connection between
// local and remote is capped: its user's uid, or unknownPeer. Where the
// system cannot tell (peersKnown false), every peer is this process's
// user, as before users were told apart.
func (s *Server) peerKey(local, remote netip.AddrPort) int {
	if !peersKnown {
		return s.uid
	}
	if uid, ok := tcpPeerUID(local, remote); ok {
		return uid
	}
	return unknownPeer
}

// requestPeer is peerKey for the connection r came on.
func (s *Server) requestPeer(r *http.Request) int {
	la, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	remote, err := netip.ParseAddrPort(r.RemoteAddr)
	if la == nil || err != nil {
		return unknownPeer
	}
	local, err := netip.ParseAddrPort(la.String())
	if err != nil {
		return unknownPeer
	}
	return s.peerKey(local, remote)
}

// LimitListener returns l, a TCP listener for the WebSocket's
// http.Server, with caps: at most MaxConns + MaxUnauthConns + 64
// connections at once in all (Accept waits while they are open), so that
// connections still in their HTTP handshake are bounded too, and at most
// MaxStrangerConns of each local user other than this process's, whose
// connections over it are closed as soon as accepted and counted in
// Refused.
func (s *Server) LimitListener(l net.Listener) net.Listener {
	n := s.opts.MaxConns + s.opts.MaxUnauthConns + 64
	return &limitListener{Listener: l, s: s, sem: make(chan struct{}, n), done: make(chan struct{}), open: map[int]int{}}
}

type limitListener struct {
	net.Listener
	s         *Server
	sem       chan struct{}
	done      chan struct{}
	closeOnce sync.Once

	mu   sync.Mutex
	open map[int]int // connections open per stranger
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		select {
		case l.sem <- struct{}{}:
		case <-l.done:
			return nil, net.ErrClosed
		}
		c, err := l.Listener.Accept()
		if err != nil {
			<-l.sem
			return nil, err
		}
		peer := l.s.uid
		if tl, ok := c.LocalAddr().(*net.TCPAddr); ok {
			if tr, ok := c.RemoteAddr().(*net.TCPAddr); ok {
				peer = l.s.peerKey(tl.AddrPort(), tr.AddrPort())
			}
		}
		if l.admit(peer) {
			return &limitConn{Conn: c, release: func() { l.leave(peer); <-l.sem }}, nil
		}
		c.Close()
		<-l.sem
		l.s.refusals.add(l.s.log, peer, false, fmt.Sprintf("too many connections from uid %d: limit is %d", peer, l.s.opts.MaxStrangerConns))
	}
}

// admit counts a connection of peer, unless it is a stranger at its cap.
func (l *limitListener) admit(peer int) bool {
	if peer == l.s.uid {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[peer] >= l.s.opts.MaxStrangerConns {
		return false
	}
	l.open[peer]++
	return true
}

func (l *limitListener) leave(peer int) {
	if peer == l.s.uid {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[peer]--; l.open[peer] <= 0 {
		delete(l.open, peer)
	}
}

func (l *limitListener) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() { close(l.done) })
	return err
}

type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// CredentialRefused records that a handler refused a credential the
// connection presented (a wrong token to an auth method, say). On a
// WebSocket the refusal is counted (Server.Refused) and logged sparingly,
// and the caller waits ServerOptions.AuthFailureDelay, the connection
// held all the while (the peer hanging up does not end the wait; closing
// the connection or the server does): a guesser gets so many tries a
// second per connection it may hold, and no one else waits. On other
// transports it does nothing. Call it from the handler, before it returns
// the refusal.
func (c *Conn) CredentialRefused(reason string) {
	if c.transport == TransportWebSocket {
		c.srv.failed(c.ctx, c.peer, "websocket credential refused: "+reason)
	}
}

// failed makes the connection that presented a wrong credential pay for
// it: it waits AuthFailureDelay (less if the server shuts down or ctx,
// which a peer going away does not end, is done), and the refusal is
// counted and logged.
func (s *Server) failed(ctx context.Context, peer int, reason string) {
	s.refusals.add(s.log, peer, true, reason)
	t := time.NewTimer(s.opts.AuthFailureDelay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	case <-s.stopc:
	}
}

// Refusals counts what the loopback port refused since the server
// started (Server.Refused).
type Refusals struct {
	// Connections over a cap: another user's over MaxStrangerConns, a
	// user's unauthenticated WebSockets over MaxUnauthConns, handshakes
	// refused for their Host or Origin.
	Connections int64
	// Credentials refused: in WebSocket handshakes, and by handlers
	// (Conn.CredentialRefused).
	Credentials int64
}

// Refused returns what the loopback port refused so far.
func (s *Server) Refused() Refusals {
	s.refusals.mu.Lock()
	defer s.refusals.mu.Unlock()
	return s.refusals.total
}

// refusalLogEvery is how often at most refusals are logged: anyone on the
// machine, and any page its owner opens, can make the server refuse as
// fast as it answers, and must not fill its log.
var refusalLogEvery = 10 * time.Second

// refusals counts refusals, and logs them at warn at most once per
// refusalLogEvery: each line with the number refused since the line
// before, by the peer's uid, and the reason of the refusal that printed
// it.
type refusals struct {
	mu     sync.Mutex
	total  Refusals
	recent map[int]int64 // by peer since the last line
	last   time.Time     // of the last line
}

func (r *refusals) add(lg *slog.Logger, peer int, credential bool, reason string) {
	r.mu.Lock()
	if credential {
		r.total.Credentials++
	} else {
		r.total.Connections++
	}
	r.recent[peer]++
	now := time.Now()
	if now.Sub(r.last) < refusalLogEvery {
		r.mu.Unlock()
		return
	}
	r.last = now
	var n int64
	var by []string
	for _, p := range slices.Sorted(maps.Keys(r.recent)) {
		n += r.recent[p]
		by = append(by, fmt.Sprintf("%d:%d", p, r.recent[p]))
	}
	clear(r.recent)
	r.mu.Unlock()
	lg.Warn("rpc: loopback port refused connections or credentials", "refused", n, "by_uid", strings.Join(by, ","), "reason", reason)
}
