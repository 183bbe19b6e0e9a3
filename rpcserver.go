package thrum

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/thrumhq/thrum/internal/access"
	"github.com/thrumhq/thrum/internal/jsonrpc"
	"github.com/thrumhq/thrum/internal/push"
	"github.com/thrumhq/thrum/internal/unixsock"
	"github.com/thrumhq/thrum/rpc"
)

// RPCServer serves a node's API as JSON-RPC 2.0: newline-delimited JSON
// on stream listeners (Serve, for a Unix socket), one message per frame on
// WebSockets (ServeHTTP), and single stream connections (ServeConn, as
// Node.Dial does with an in-process pipe). Its methods are thrum's API
// (package rpc) and are fixed when it is made. It has the shape of an
// http.Server: Serve returns ErrServerClosed after Shutdown or Close. Its
// methods may be called concurrently.
//
// Callers identify explicitly, never by guess. A Unix socket or pipe is
// the owner's: a request may name its agent with "caller_agent_id" in its
// params, or the connection is bound once, by auth or session.start, and
// later calls act as that agent. A WebSocket, reachable by any local user
// and any page on a localhost origin, may call nothing but health and auth
// until it presents a credential with auth: an agent's or user's token,
// after which it acts only as that identity, or the owner's secret
// (RPCOptions.OwnerSecret) or a browser's web session (from a one-time
// login code, web.login), after which it may do what the socket may.
// Only the owner registers users, acts as another agent (acting_as),
// ends another agent's session or deletes another agent. DESIGN.md, "Trust
// boundary", has the whole model; package internal/access enforces it.
type RPCServer struct {
	eng    *jsonrpc.Server
	n      *Node
	pol    *access.Policy
	pushes push.Encoder // its notification.message pushes
}

// ErrServerClosed is returned by RPCServer.Serve after Shutdown or Close.
var ErrServerClosed = jsonrpc.ErrServerClosed

// Defaults of RPCOptions: the engine's, named here for embedders.
const (
	DefaultMaxRequestBytes  = jsonrpc.DefaultMaxLineBytes     // 2 MiB: a message at DefaultMaxContentBytes fits with every byte escaped (six bytes in JSON)
	DefaultMaxBatch         = jsonrpc.DefaultMaxBatch         // 100
	DefaultMaxConns         = jsonrpc.DefaultMaxConns         // 256
	DefaultMaxUnauthConns   = jsonrpc.DefaultMaxUnauthConns   // 16
	DefaultMaxStrangerConns = jsonrpc.DefaultMaxStrangerConns // 16
	DefaultAuthFailureDelay = jsonrpc.DefaultAuthFailureDelay // 1 s
	DefaultAuthTimeout      = jsonrpc.DefaultAuthTimeout      // 5 s
	DefaultRequestTimeout   = jsonrpc.DefaultLineTimeout      // 10 s
	DefaultMaxPendingBytes  = jsonrpc.DefaultMaxPendingBytes  // 16 MiB
)

// RPCOptions configure an RPCServer. A nil *RPCOptions means defaults;
// zero or negative limits mean their default too. The options are copied.
type RPCOptions struct {
	// Logger receives connection events, refusals and handler faults. Nil
	// is silent.
	Logger *slog.Logger

	// AllowAnyPeer skips the check that a Unix-socket peer runs as the
	// same user as this process. Default false: other users are refused.
	AllowAnyPeer bool

	// OwnerSecret, if set, is the owner's secret: a WebSocket that presents
	// it to auth acts for the owner, as the Unix socket does. The daemon
	// keeps it in a 0600 file that only the owner's processes can read
	// (identity.LoadOwnerSecret). Empty: no WebSocket can act for the owner.
	OwnerSecret string

	// WebSessionFile, if set, is where the web sessions browsers sign in
	// to (with a login code from web.login) are kept, each as a SHA-256
	// hash and an expiry in a 0600 file, so that an open console stays
	// signed in across a restart. Empty: in this server's memory only.
	WebSessionFile string

	// AllowedOrigins lists extra Origin hosts ("app.example:8080", or with
	// a scheme, "https://app.example") a browser page may open a WebSocket
	// from, besides loopback origins. Default none. A WebSocket whose Host
	// is not loopback is refused whatever its origin (DNS rebinding).
	AllowedOrigins []string

	// Sync, if set, answers sync.status and sync.force; without it those
	// methods do not exist (-32601), as on a node that does not sync.
	Sync SyncControl

	// MaxRequestBytes caps one request: a line on a stream, a message on a
	// WebSocket. A longer line is answered with -32600 and its connection
	// closed, as the stream cannot be resynchronised; a longer WebSocket
	// message closes the connection with status 1009. Default
	// DefaultMaxRequestBytes.
	MaxRequestBytes int

	// MaxBatch caps the requests of one batch. Default DefaultMaxBatch.
	MaxBatch int

	// MaxConns caps concurrent stream connections (Unix socket, pipes),
	// and separately WebSockets that authenticated. Over it a stream
	// connection gets one -32006 error line and is closed, and auth on a
	// WebSocket fails with -32006. Default DefaultMaxConns.
	MaxConns int

	// MaxUnauthConns caps the WebSockets of each local user (the owner
	// of the peer's socket, on Linux) that have not authenticated yet: a
	// small pool per user, so that connections which present no
	// credential never crowd out those that did, nor the Unix socket, nor
	// another user's. Over it a WebSocket handshake is answered with HTTP
	// 503, unless it carries a credential (rpc.ClientOptions.Credential),
	// which puts it in the authenticated pool at once. Default
	// DefaultMaxUnauthConns.
	MaxUnauthConns int

	// MaxStrangerConns caps the loopback TCP connections of each local
	// user other than this process's, on a listener from LimitListener.
	// Default DefaultMaxStrangerConns.
	MaxStrangerConns int

	// AuthFailureDelay is what a wrong credential on a WebSocket costs
	// the connection that presented it: its refusal (HTTP 401 in the
	// handshake, -32002 from auth) comes this much later, the connection
	// held meanwhile. A right credential is never delayed, whatever other
	// connections do. Default DefaultAuthFailureDelay.
	AuthFailureDelay time.Duration

	// AuthTimeout is how long a WebSocket may stay unauthenticated before
	// it is closed. Default DefaultAuthTimeout.
	AuthTimeout time.Duration

	// RequestTimeout is how long the rest of a request may take to arrive
	// once its first byte has: a line or frame left half sent for longer
	// closes its connection. An idle connection is not timed. Default
	// DefaultRequestTimeout.
	RequestTimeout time.Duration

	// MaxPendingBytes is the server-wide budget of bytes held for requests
	// being read or handled (a request is charged its size while read and
	// a few times its size while handled). A request that would exceed it
	// is refused with -32006, so memory stays bounded however many
	// connections send at once. Default DefaultMaxPendingBytes.
	MaxPendingBytes int64
}

// A SyncControl reports on and triggers syncing of the node's log with a
// remote, for the sync.status and sync.force methods (RPCOptions.Sync).
// Its methods may be called concurrently.
type SyncControl interface {
	SyncStatus(ctx context.Context, p *rpc.SyncStatusParams) (*rpc.SyncStatusResult, error)
	SyncForce(ctx context.Context, p *rpc.SyncForceParams) (*rpc.SyncForceResult, error)
}

// engineOptions are the engine's options for o; the engine fills in the
// defaults (the Default… constants above are its own).
func (o *RPCOptions) engineOptions() *jsonrpc.ServerOptions {
	return &jsonrpc.ServerOptions{
		Logger:           o.Logger,
		AllowedOrigins:   o.AllowedOrigins,
		MaxLineBytes:     o.MaxRequestBytes,
		MaxBatch:         o.MaxBatch,
		MaxConns:         o.MaxConns,
		MaxUnauthConns:   o.MaxUnauthConns,
		MaxStrangerConns: o.MaxStrangerConns,
		AuthFailureDelay: o.AuthFailureDelay,
		AuthTimeout:      o.AuthTimeout,
		LineTimeout:      o.RequestTimeout,
		MaxPendingBytes:  o.MaxPendingBytes,
	}
}

// RPCServer returns a new server for the node's API. Each call returns a
// new server; the caller serves it and shuts it down. opts may be nil.
func (n *Node) RPCServer(opts *RPCOptions) *RPCServer {
	var o RPCOptions
	if opts != nil {
		o = *opts
	}
	s := &RPCServer{n: n, pol: access.New(identities{n}, access.Options{
		OwnerSecret: o.OwnerSecret, AllowAnyPeer: o.AllowAnyPeer, RepoID: n.opts.RepoID, Now: n.now,
		WebSessionFile: o.WebSessionFile, Logger: o.Logger,
	})}
	eo := o.engineOptions()
	eo.Authorize = s.pol.Handshake
	s.eng = jsonrpc.NewServer(eo)
	s.bindAll(o.Sync)
	return s
}

// Serve accepts connections on l (a Unix socket, from ListenUnix) and
// serves each in its own goroutine, until Shutdown or Close, when it
// returns ErrServerClosed. Serve closes l when it returns. A Unix socket's
// peer must run as this process's user (see RPCOptions.AllowAnyPeer).
func (s *RPCServer) Serve(l net.Listener) error { return s.eng.Serve(l) }

// ServeConn serves one stream connection of newline-delimited JSON, such
// as one end of a net.Pipe, and blocks until it ends. The connection is the
// owner's, as the Unix socket is (a *net.UnixConn has its peer checked).
// Cancelling ctx closes the connection.
func (s *RPCServer) ServeConn(ctx context.Context, nc net.Conn) {
	transport := jsonrpc.TransportPipe
	if _, ok := nc.(*net.UnixConn); ok {
		transport = jsonrpc.TransportUnix
	}
	s.eng.ServeConn(ctx, nc, transport)
}

// LimitListener wraps a TCP listener for the http.Server that serves
// ServeHTTP on a loopback port: it accepts at most MaxConns +
// MaxUnauthConns + 64 connections at once (room for handshakes), and of
// each local user other than this process's at most MaxStrangerConns,
// closing the rest as soon as accepted; refusals count in health
// (rpc.HealthResult.Refused).
func (s *RPCServer) LimitListener(l net.Listener) net.Listener {
	return s.eng.LimitListener(l)
}

// ServeHTTP serves the WebSocket endpoint: one JSON-RPC message (or
// batch) per frame. It refuses with 403 a request whose Host is not
// loopback or whose Origin is neither loopback nor allowed
// (RPCOptions.AllowedOrigins), and with 503 one over
// RPCOptions.MaxUnauthConns. It blocks until the connection ends.
func (s *RPCServer) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.eng.ServeHTTP(w, r) }

// Shutdown stops the server gracefully: it closes the listeners, lets calls
// in flight finish and their replies go out, then closes every connection
// (WebSockets with status 1001) and waits until each has ended. If ctx
// ends first, Shutdown closes everything at once, as Close does, and
// returns ctx's error.
func (s *RPCServer) Shutdown(ctx context.Context) error { return s.eng.Shutdown(ctx) }

// Close closes the listeners and every connection at once; calls in
// flight have their contexts cancelled. It does not wait for them. Close is
// idempotent.
func (s *RPCServer) Close() error { return s.eng.Close() }

// ListenUnix listens on a Unix socket at path for an RPCServer: the
// socket is created mode 0600, so only this user can connect (and the
// server checks each peer's user ID besides). A missing directory is
// made 0700; an existing one is never changed. A stale socket file left
// by a crashed process is replaced; a live one is an error, and so is
// any other kind of file at path (it is never removed).
func ListenUnix(path string) (net.Listener, error) { return unixsock.Listen(path) }

// Dial returns a client connected to the node in process, through a pipe
// served by a fresh RPCServer: the same API, codes and notifications as
// over a socket, with no socket. Closing the client ends the pipe.
func (n *Node) Dial(opts *rpc.ClientOptions) *rpc.Client {
	srv := n.RPCServer(nil)
	a, b := net.Pipe()
	go func() {
		srv.ServeConn(context.Background(), a)
		srv.Close()
	}()
	return rpc.NewClient(b, opts)
}

// bindAll registers every method with the access it needs (and, where
// the policy has a rule for it, behind that rule); sync.status and
// sync.force only with a SyncControl.
func (s *RPCServer) bindAll(sy SyncControl) {
	n, pol := s.n, s.pol
	bind(s, rpc.MethodHealth, access.Open, s.health)
	bind(s, rpc.MethodAuth, access.Open, pol.Auth)
	bind(s, rpc.MethodAgentRegister, access.Read, guarded(pol.RegisterAgent, n.RegisterAgent))
	bind(s, rpc.MethodAgentList, access.Read, n.ListAgents)
	bind(s, rpc.MethodAgentWhoami, access.Read, n.Whoami)
	bind(s, rpc.MethodAgentListContext, access.Read, n.ListContext)
	bind(s, rpc.MethodAgentDelete, access.Write, guarded(pol.DeleteAgent, n.DeleteAgent))
	bind(s, rpc.MethodAgentCleanup, access.Write, guarded(pol.CleanupAgents, n.CleanupAgents))
	bind(s, rpc.MethodAgentTrust, access.Read, guarded(pol.TrustAgent, n.TrustAgent))
	bind(s, rpc.MethodSessionStart, access.Write, s.startSession)
	bind(s, rpc.MethodSessionEnd, access.Write, guarded(pol.EndSession, n.EndSession))
	bind(s, rpc.MethodSessionHeartbeat, access.Write, n.Heartbeat)
	bind(s, rpc.MethodSessionSetIntent, access.Write, n.SetIntent)
	bind(s, rpc.MethodSessionSetTask, access.Write, n.SetTask)
	bind(s, rpc.MethodSessionList, access.Read, n.ListSessions)
	bind(s, rpc.MethodMessageSend, access.Write, guarded(pol.SendMessage, n.SendMessage))
	bind(s, rpc.MethodMessageGet, access.Read, s.getMessage)
	bind(s, rpc.MethodMessageList, access.Read, n.ListMessages)
	bind(s, rpc.MethodMessageSearch, access.Read, n.SearchMessages)
	bind(s, rpc.MethodMessageEdit, access.Write, n.EditMessage)
	bind(s, rpc.MethodMessageDelete, access.Write, n.DeleteMessage)
	bind(s, rpc.MethodMessageMarkRead, access.Write, n.MarkRead)
	bind(s, rpc.MethodMessageClaimNext, access.Write, s.claimNext)
	bind(s, rpc.MethodMessageAck, access.Write, n.AckMessage)
	bind(s, rpc.MethodMessageListSent, access.Read, n.ListSent)
	bind(s, rpc.MethodThreadCreate, access.Write, guarded(pol.CreateThread, n.CreateThread))
	bind(s, rpc.MethodThreadList, access.Read, n.ListThreads)
	bind(s, rpc.MethodThreadGet, access.Read, n.GetThread)
	bind(s, rpc.MethodSubscribe, access.Write, guarded(pol.Subscribe, s.subscribe))
	bind(s, rpc.MethodUnsubscribe, access.Write, n.Unsubscribe)
	bind(s, rpc.MethodSubscriptionsList, access.Write, n.ListSubscriptions)
	bind(s, rpc.MethodUserRegister, access.Read, s.registerUser)
	bind(s, rpc.MethodUserIdentify, access.Read, n.IdentifyUser)
	bind(s, rpc.MethodGroupCreate, access.Write, n.CreateGroup)
	bind(s, rpc.MethodGroupDelete, access.Write, n.DeleteGroup)
	bind(s, rpc.MethodGroupMemberAdd, access.Write, n.AddGroupMember)
	bind(s, rpc.MethodGroupMemberRemove, access.Write, n.RemoveGroupMember)
	bind(s, rpc.MethodGroupList, access.Read, n.ListGroups)
	bind(s, rpc.MethodGroupInfo, access.Read, n.GroupInfo)
	bind(s, rpc.MethodGroupMembers, access.Read, n.GroupMembers)
	bind(s, rpc.MethodWebLogin, access.Read, pol.WebLogin)
	bind(s, rpc.MethodKeyStatus, access.Read, n.KeyStatus)
	bind(s, rpc.MethodKeyNew, access.Read, guarded(teamKeysRule[rpc.KeyNewParams](pol, rpc.MethodKeyNew), n.NewKey))
	bind(s, rpc.MethodKeyExport, access.Read, guarded(teamKeysRule[rpc.KeyExportParams](pol, rpc.MethodKeyExport), n.ExportKeys))
	bind(s, rpc.MethodKeyImport, access.Read, guarded(teamKeysRule[rpc.KeyImportParams](pol, rpc.MethodKeyImport), n.ImportKeys))
	bind(s, rpc.MethodKeyGrant, access.Read, guarded(teamKeysRule[rpc.KeyGrantParams](pol, rpc.MethodKeyGrant), n.GrantKeys))
	bind(s, rpc.MethodKeyAccept, access.Read, guarded(teamKeysRule[rpc.KeyAcceptParams](pol, rpc.MethodKeyAccept), n.AcceptKeys))
	if sy != nil {
		bind(s, rpc.MethodSyncStatus, access.Read, sy.SyncStatus)
		bind(s, rpc.MethodSyncForce, access.Write, sy.SyncForce)
	}
}

// bind registers one method: check the peer, decode params into P,
// identify the caller and check the method's access, run op.
func bind[P, R any](s *RPCServer, method string, lvl access.Level, op func(context.Context, *P) (*R, error)) {
	s.eng.Handle(method, func(ctx context.Context, raw json.RawMessage) (any, error) {
		if err := s.pol.Peer(ctx); err != nil {
			return nil, err
		}
		var p P
		if err := jsonrpc.DecodeParams(raw, &p); err != nil {
			return nil, err
		}
		agent, session, err := s.pol.Caller(ctx, method, lvl, raw)
		if err != nil {
			return nil, err
		}
		if agent != "" {
			ctx = WithCaller(ctx, Caller{AgentID: agent, SessionID: session})
		}
		return op(ctx, &p)
	})
}

// teamKeysRule is access.Policy.TeamKeys as a method's check.
func teamKeysRule[P any](pol *access.Policy, method string) func(context.Context, *P) error {
	return func(ctx context.Context, _ *P) error { return pol.TeamKeys(ctx, method) }
}

// guarded is op behind check, a rule of the access policy.
func guarded[P, R any](check func(context.Context, *P) error, op func(context.Context, *P) (*R, error)) func(context.Context, *P) (*R, error) {
	return func(ctx context.Context, p *P) (*R, error) {
		if err := check(ctx, p); err != nil {
			return nil, err
		}
		return op(ctx, p)
	}
}

// identities is what the access policy asks of the node.
type identities struct{ n *Node }

func (d identities) Kind(id string) (string, bool) {
	a, ok := d.n.dirc.Agent(id)
	return a.Kind, ok
}

func (d identities) Authenticate(ctx context.Context, token string) (string, error) {
	return d.n.Authenticate(ctx, token)
}

func (d identities) SessionAgent(ctx context.Context, id string) (string, error) {
	ss, err := d.n.store.Session(ctx, id)
	if err != nil {
		return "", err
	}
	return ss.AgentID, nil
}

// startSession starts a session and, on a connection not yet bound, binds
// it to the agent with the new session pinned.
func (s *RPCServer) startSession(ctx context.Context, p *rpc.StartSessionParams) (*rpc.StartSessionResult, error) {
	r, err := s.n.StartSession(ctx, p)
	if err != nil {
		return nil, err
	}
	s.pol.SessionStarted(ctx, r.AgentID, r.SessionID)
	return r, nil
}

// registerUser is user.register, which binds the connection to the user.
func (s *RPCServer) registerUser(ctx context.Context, p *rpc.RegisterUserParams) (*rpc.RegisterUserResult, error) {
	if err := s.pol.RegisterUser(ctx, p); err != nil {
		return nil, err
	}
	r, err := s.n.RegisterUser(ctx, p)
	if err != nil {
		return nil, err
	}
	s.pol.UserRegistered(ctx, r.UserID)
	return r, nil
}

// health is the node's health with what this server refused.
func (s *RPCServer) health(ctx context.Context, p *rpc.HealthParams) (*rpc.HealthResult, error) {
	h, err := s.n.Health(ctx, p)
	if r := s.eng.Refused(); err == nil && r != (jsonrpc.Refusals{}) {
		h.Refused = &rpc.Refusals{Connections: r.Connections, Credentials: r.Credentials}
	}
	return h, err
}

// getMessage is message.get with the receipts the caller may see.
func (s *RPCServer) getMessage(ctx context.Context, p *rpc.GetMessageParams) (*rpc.GetMessageResult, error) {
	r, err := s.n.GetMessage(ctx, p)
	if err != nil {
		return nil, err
	}
	r.Message.Receipts = s.pol.Receipts(ctx, r.Message.Author.AgentID, r.Message.Receipts)
	return r, nil
}

// listenerKey keys a connection's Subscription (jsonrpc.Conn.Value).
type listenerKey struct{}

// subscribe attaches a subscription to this connection: its notifications
// are pushed as notification.message (notification.receipt for
// receipts). The connection's listener is made on the first
// subscribe and closed with the connection.
func (s *RPCServer) subscribe(ctx context.Context, p *rpc.SubscribeParams) (*rpc.SubscribeResult, error) {
	c := jsonrpc.ConnFromContext(ctx)
	if c == nil {
		return nil, rpc.Errorf(rpc.CodeInvalidRequest, "subscribe needs a connection")
	}
	// Requests of one connection run one at a time: no other subscribe
	// can be making its listener concurrently.
	l, _ := c.Value(listenerKey{}).(*Subscription)
	if l == nil {
		l = s.n.listen(0, &connSink{c: c, s: s})
		c.SetValue(listenerKey{}, l)
		c.OnClose(l.Close)
	}
	return s.n.Subscribe(ctx, l, p)
}

// connSink is where a connection's Subscription delivers: straight onto
// the connection's outgoing queue, on the commit path, with no goroutine
// in between. The queue never blocks: a full one closes the connection as
// a slow consumer, and its client catches up with message.list.
type connSink struct {
	c *jsonrpc.Conn
	s *RPCServer
}

// notify pushes nt with the match m, encoded once per message for every
// connection of the server (push.Encoder); it reports false when the
// connection cannot take it.
func (k *connSink) notify(nt *rpc.MessageNotification, m rpc.MatchedSubscription) bool {
	if k.s.n.standing.claimedFor(nt.MessageID, k.c) {
		return true // claimed for this connection: pushed whole (claims.go)
	}
	b, err := k.s.pushes.Encode(nt, m)
	return err == nil && k.c.NotifyEncoded(b) == nil
}

// notifyReceipt pushes a receipt; it reports false when the connection
// cannot take it.
func (k *connSink) notifyReceipt(nt *rpc.ReceiptNotification) bool {
	return k.c.Notify(rpc.NotificationReceipt, nt) == nil
}
