package thrum

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/thrumhq/thrum/identity"
	"github.com/thrumhq/thrum/internal/jsonrpc"
	"github.com/thrumhq/thrum/rpc"
	"github.com/thrumhq/thrum/store"
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
// boundary", has the whole model.
type RPCServer struct {
	eng     *jsonrpc.Server
	n       *Node
	secret  []byte
	anyPeer bool
	uid     int
	web     *webLogins // browser logins (weblogin.go)
	// authLimit limits failed credential checks on WebSockets (authlimit.go).
	authLimit authLimit
}

// ErrServerClosed is returned by RPCServer.Serve after Shutdown or Close.
var ErrServerClosed = jsonrpc.ErrServerClosed

// Defaults of RPCOptions: the engine's, named here for embedders.
const (
	DefaultMaxRequestBytes = jsonrpc.DefaultMaxLineBytes    // 1 MiB
	DefaultMaxBatch        = jsonrpc.DefaultMaxBatch        // 100
	DefaultMaxConns        = jsonrpc.DefaultMaxConns        // 256
	DefaultMaxUnauthConns  = jsonrpc.DefaultMaxUnauthConns  // 16
	DefaultAuthTimeout     = jsonrpc.DefaultAuthTimeout     // 5 s
	DefaultRequestTimeout  = jsonrpc.DefaultLineTimeout     // 10 s
	DefaultMaxPendingBytes = jsonrpc.DefaultMaxPendingBytes // 16 MiB
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
	// (see NewOwnerSecret). Empty: no WebSocket can act for the owner.
	OwnerSecret string

	// AllowedOrigins lists extra Origin hosts ("app.example:8080", or with
	// a scheme, "https://app.example") a browser page may open a WebSocket
	// from, besides loopback origins. Default none. A WebSocket whose Host
	// is not loopback is refused whatever its origin (DNS rebinding).
	AllowedOrigins []string

	// Sync, if set, answers sync.status and sync.force; without it those
	// methods do not exist (-32601), as on a node that does not sync.
	Sync Syncer

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

	// MaxUnauthConns caps WebSockets that have not authenticated yet: a
	// small pool of their own, so that connections which present no
	// credential never crowd out those that did, nor the Unix socket. Over
	// it a WebSocket handshake is answered with HTTP 503, unless it
	// carries a credential (rpc.ClientOptions.Credential), which puts it in
	// the authenticated pool at once. Default DefaultMaxUnauthConns.
	MaxUnauthConns int

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

// A Syncer reports on and triggers syncing of the node's log with a
// remote, for the sync.status and sync.force methods (RPCOptions.Sync).
// Its methods may be called concurrently.
type Syncer interface {
	SyncStatus(ctx context.Context, p *rpc.SyncStatusParams) (*rpc.SyncStatusResult, error)
	SyncForce(ctx context.Context, p *rpc.SyncForceParams) (*rpc.SyncForceResult, error)
}

// engineOptions are the engine's options for o; the engine fills in the
// defaults (the Default… constants above are its own).
func (o *RPCOptions) engineOptions() *jsonrpc.ServerOptions {
	return &jsonrpc.ServerOptions{
		Logger:          o.Logger,
		AllowedOrigins:  o.AllowedOrigins,
		MaxLineBytes:    o.MaxRequestBytes,
		MaxBatch:        o.MaxBatch,
		MaxConns:        o.MaxConns,
		MaxUnauthConns:  o.MaxUnauthConns,
		AuthTimeout:     o.AuthTimeout,
		LineTimeout:     o.RequestTimeout,
		MaxPendingBytes: o.MaxPendingBytes,
	}
}

// RPCServer returns a new server for the node's API. Each call returns a
// new server; the caller serves it and shuts it down. opts may be nil.
func (n *Node) RPCServer(opts *RPCOptions) *RPCServer {
	var o RPCOptions
	if opts != nil {
		o = *opts
	}
	s := &RPCServer{n: n, anyPeer: o.AllowAnyPeer, uid: os.Getuid(), web: newWebLogins()}
	if o.OwnerSecret != "" {
		s.secret = []byte(o.OwnerSecret)
	}
	eo := o.engineOptions()
	eo.Authorize = limitHandshake(&s.authLimit, s.handshake)
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

// access is what a method needs from its caller.
type access int

const (
	open  access = iota // no credential: health and auth only
	read                // needs a credential on a WebSocket; an identity is optional
	write               // acts as an agent: needs an identity
)

// connState is the identity bound to one connection.
type connState struct {
	mu        sync.Mutex
	agentID   string     // bound identity, "" if none
	token     bool       // bound by a token
	owner     bool       // a WebSocket that presented the owner's secret
	exchanged *exchanged // the login code its handshake traded, until auth takes it
	sessionID string     // pinned by session.start on this connection
	listener  *Subscription
}

type connStateKey struct{}

func stateOf(c *jsonrpc.Conn) *connState {
	if c == nil {
		return &connState{}
	}
	if st, ok := c.Value(connStateKey{}).(*connState); ok {
		return st
	}
	// Requests of one connection run one at a time, so no other handler
	// can be creating the state concurrently.
	st := &connState{}
	c.SetValue(connStateKey{}, st)
	return st
}

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

// decodeParams unmarshals params into p: absent or null means all
// defaults; anything but an object, or a field of the wrong type, is an
// invalid-params error naming the field.
func decodeParams(raw json.RawMessage, p any) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil
	}
	if raw[0] != '{' {
		return rpc.Errorf(rpc.CodeInvalidParams, "params must be an object with named fields")
	}
	if err := json.Unmarshal(raw, p); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return rpc.Errorf(rpc.CodeInvalidParams, "invalid params: %s must be %s, not %s", te.Field, jsonKind(te.Type.Kind().String()), te.Value)
		}
		return rpc.Errorf(rpc.CodeInvalidParams, "invalid params: %v", err)
	}
	return nil
}

func jsonKind(k string) string {
	switch k {
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "int", "int64", "int32", "uint", "uint64", "float64":
		return "a number"
	case "slice":
		return "an array"
	case "struct", "map", "ptr":
		return "an object"
	}
	return k
}

// isOwner reports whether a request acts for the owner: it came over the
// Unix socket or a pipe (whose peer was checked), or over a WebSocket that
// presented the owner's secret.
func isOwner(ctx context.Context) bool {
	c := jsonrpc.ConnFromContext(ctx)
	if c == nil || c.Transport() != jsonrpc.TransportWebSocket {
		return true
	}
	st := stateOf(c)
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.owner
}

// callerOf works out who a request acts as, and checks the method's
// access on this transport.
func (s *RPCServer) callerOf(ctx context.Context, method string, acc access, raw json.RawMessage) (context.Context, error) {
	c := jsonrpc.ConnFromContext(ctx)
	st := stateOf(c)
	var named struct {
		CallerAgentID string `json:"caller_agent_id"`
	}
	if len(raw) > 0 && raw[0] == '{' {
		if err := json.Unmarshal(raw, &named); err != nil {
			return ctx, rpc.Errorf(rpc.CodeInvalidParams, "invalid params: caller_agent_id must be a string")
		}
	}
	ws := c != nil && c.Transport() == jsonrpc.TransportWebSocket
	st.mu.Lock()
	bound, byToken, owner, sid := st.agentID, st.token, st.owner, st.sessionID
	st.mu.Unlock()
	caller := identity.NormalizeAgentID(named.CallerAgentID)
	if ws && !owner {
		if acc == open {
			return ctx, nil
		}
		if !byToken {
			return ctx, rpc.Errorf(rpc.CodeUnauthenticated, "%s needs a credential on a WebSocket: call auth with your token (from your identity file) or the owner's secret first", method)
		}
		if caller != "" && caller != bound {
			return ctx, rpc.Errorf(rpc.CodeForbidden, "this connection is authenticated as %s and cannot act as %s", bound, caller)
		}
		caller = bound
	} else if caller == "" {
		caller = bound
	}
	if caller == "" {
		return ctx, nil
	}
	cl := Caller{AgentID: caller}
	if caller == bound {
		cl.SessionID = sid
	}
	return WithCaller(ctx, cl), nil
}

// bind registers one method: decode params into P, identify the caller,
// run op.
func bind[P, R any](s *RPCServer, method string, acc access, op func(context.Context, *P) (*R, error)) {
	s.eng.Handle(method, func(ctx context.Context, raw json.RawMessage) (any, error) {
		if err := s.peerOK(jsonrpc.ConnFromContext(ctx)); err != nil {
			return nil, err
		}
		var p P
		if err := decodeParams(raw, &p); err != nil {
			return nil, err
		}
		ctx, err := s.callerOf(ctx, method, acc, raw)
		if err != nil {
			return nil, err
		}
		return op(ctx, &p)
	})
}

// peerOK refuses a Unix-socket peer that runs as another user.
func (s *RPCServer) peerOK(c *jsonrpc.Conn) error {
	if s.anyPeer || c == nil || c.Transport() != jsonrpc.TransportUnix {
		return nil
	}
	if peer, ok := c.PeerUID(); ok && peer != s.uid {
		return rpc.Errorf(rpc.CodeForbidden, "connection refused: the daemon serves only its own user")
	}
	return nil
}

// bindAll registers every method with the access it needs; sync.status
// and sync.force only with a Syncer.
func (s *RPCServer) bindAll(sy Syncer) {
	n := s.n
	bind(s, rpc.MethodHealth, open, n.Health)
	bind(s, rpc.MethodAuth, open, limitAuth(&s.authLimit, s.auth))
	bind(s, rpc.MethodAgentRegister, read, s.registerAgent)
	bind(s, rpc.MethodAgentList, read, n.ListAgents)
	bind(s, rpc.MethodAgentWhoami, read, n.Whoami)
	bind(s, rpc.MethodAgentListContext, read, n.ListContext)
	bind(s, rpc.MethodAgentDelete, write, s.deleteAgent)
	bind(s, rpc.MethodAgentCleanup, write, s.cleanupAgents)
	bind(s, rpc.MethodSessionStart, write, s.startSession)
	bind(s, rpc.MethodSessionEnd, write, s.endSession)
	bind(s, rpc.MethodSessionHeartbeat, write, n.Heartbeat)
	bind(s, rpc.MethodSessionSetIntent, write, n.SetIntent)
	bind(s, rpc.MethodSessionSetTask, write, n.SetTask)
	bind(s, rpc.MethodSessionList, read, n.ListSessions)
	bind(s, rpc.MethodMessageSend, write, s.sendMessage)
	bind(s, rpc.MethodMessageGet, read, n.GetMessage)
	bind(s, rpc.MethodMessageList, read, n.ListMessages)
	bind(s, rpc.MethodMessageSearch, read, n.SearchMessages)
	bind(s, rpc.MethodMessageEdit, write, n.EditMessage)
	bind(s, rpc.MethodMessageDelete, write, n.DeleteMessage)
	bind(s, rpc.MethodMessageMarkRead, write, n.MarkRead)
	bind(s, rpc.MethodMessageClaimNext, write, s.claimNext)
	bind(s, rpc.MethodMessageAck, write, n.AckMessage)
	bind(s, rpc.MethodMessageListSent, read, n.ListSent)
	bind(s, rpc.MethodThreadCreate, write, s.createThread)
	bind(s, rpc.MethodThreadList, read, n.ListThreads)
	bind(s, rpc.MethodThreadGet, read, n.GetThread)
	bind(s, rpc.MethodSubscribe, write, s.subscribe)
	bind(s, rpc.MethodUnsubscribe, write, n.Unsubscribe)
	bind(s, rpc.MethodSubscriptionsList, write, n.ListSubscriptions)
	bind(s, rpc.MethodUserRegister, read, s.registerUser)
	bind(s, rpc.MethodUserIdentify, read, n.IdentifyUser)
	bind(s, rpc.MethodGroupCreate, write, n.CreateGroup)
	bind(s, rpc.MethodGroupDelete, write, n.DeleteGroup)
	bind(s, rpc.MethodGroupMemberAdd, write, n.AddGroupMember)
	bind(s, rpc.MethodGroupMemberRemove, write, n.RemoveGroupMember)
	bind(s, rpc.MethodGroupList, read, n.ListGroups)
	bind(s, rpc.MethodGroupInfo, read, n.GroupInfo)
	bind(s, rpc.MethodGroupMembers, read, n.GroupMembers)
	bind(s, rpc.MethodWebLogin, read, s.webLogin)
	if sy != nil {
		bind(s, rpc.MethodSyncStatus, read, sy.SyncStatus)
		bind(s, rpc.MethodSyncForce, write, sy.SyncForce)
	}
}

// auth authenticates the connection and binds it to an identity. A token
// proves an identity; the owner's secret makes the connection the owner's
// and, with agent_id, binds it to that agent; on a Unix socket or pipe
// (the owner's already) naming a registered agent is enough.
func (s *RPCServer) auth(ctx context.Context, p *rpc.AuthParams) (*rpc.AuthResult, error) {
	c := jsonrpc.ConnFromContext(ctx)
	ws := c != nil && c.Transport() == jsonrpc.TransportWebSocket
	id := identity.NormalizeAgentID(p.AgentID)
	byToken, owner := false, false
	var web rpc.AuthResult
	switch {
	case p.LoginCode != "" || p.WebSession != "":
		var err error
		if web.WebSession, web.WebSessionExpiresAt, err = s.webAuth(c, p); err != nil {
			return nil, err
		}
		owner = true
	case p.OwnerSecret != "":
		if !s.ownerSecret(p.OwnerSecret) {
			return nil, rpc.Errorf(rpc.CodeUnauthenticated, "wrong owner secret")
		}
		owner = true
		if p.Token != "" {
			return nil, invalid("give a token or the owner's secret, not both")
		}
	case p.Token != "":
		tid, err := s.n.Authenticate(ctx, p.Token)
		if err != nil {
			return nil, err
		}
		if id != "" && id != tid {
			return nil, rpc.Errorf(rpc.CodeUnauthenticated, "this token belongs to %s, not %s", tid, id)
		}
		id, byToken = tid, true
	case ws:
		return nil, rpc.Errorf(rpc.CodeUnauthenticated, "a credential is required on a WebSocket: the token in your identity file, or the owner's secret")
	case id == "":
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "agent_id or token is required")
	}
	res := &rpc.AuthResult{AgentID: id, Owner: owner, WebSession: web.WebSession, WebSessionExpiresAt: web.WebSessionExpiresAt}
	if id != "" {
		a, err := s.registered(id)
		if err != nil {
			return nil, err
		}
		res.Kind = a.Kind
	}
	if c != nil {
		if err := c.Authenticate(); err != nil {
			return nil, err
		}
	}
	s.bindAs(c, id, byToken, owner) // a token binds the connection to that identity alone
	return res, nil
}

// registered returns the registered agent or user id.
func (s *RPCServer) registered(id string) (store.Agent, error) {
	a, ok := s.n.dirc.Agent(id)
	if !ok {
		return a, rpc.Errorf(rpc.CodeNotFound, "agent not found: %s is not registered", id)
	}
	return a, nil
}

// bindAs binds c to identity id (proved by a token or not) and sets
// whether it has the owner's standing, as auth or a credential in the
// handshake does.
func (s *RPCServer) bindAs(c *jsonrpc.Conn, id string, byToken, owner bool) {
	s.bindConn(c, id, byToken)
	st := stateOf(c)
	st.mu.Lock()
	st.owner = owner
	st.mu.Unlock()
}

// handshake authorizes a WebSocket by the credential its handshake
// carries (an Authorization: Bearer header; rpc.ClientOptions.Credential):
// an agent's or user's token binds it to that identity, the owner's
// secret or a web session makes it the owner's, as auth does, and so does
// a login code, traded here for a web session that the connection's auth
// with the code returns. It then starts authenticated, so strangers who
// fill the small pool of connections waiting to authenticate cannot keep
// it out, not even from its first sign-in.
func (s *RPCServer) handshake(r *http.Request, cred string) (func(*jsonrpc.Conn), error) {
	if s.ownerSecret(cred) || s.webSession(cred) {
		return func(c *jsonrpc.Conn) { s.bindAs(c, "", false, true) }, nil
	}
	if session, expires, ok := s.exchangeCode(cred); ok {
		x := &exchanged{code: sha256.Sum256([]byte(cred)), session: session, expires: expires}
		return func(c *jsonrpc.Conn) {
			s.bindAs(c, "", false, true)
			st := stateOf(c)
			st.mu.Lock()
			st.exchanged = x
			st.mu.Unlock()
		}, nil
	}
	id, err := s.n.Authenticate(r.Context(), cred)
	if rpc.Reason(err) == rpc.ReasonInvalidToken {
		// Not only no token: none of the four it could have been.
		return nil, rpc.Errorf(rpc.CodeUnauthenticated, "credential not accepted: it is no agent's or user's token, nor the owner's secret, nor a live web session or login code (a login code works once)")
	}
	if err != nil {
		return nil, err
	}
	if _, err := s.registered(id); err != nil {
		return nil, err
	}
	return func(c *jsonrpc.Conn) { s.bindAs(c, id, true, false) }, nil
}

// ownerSecret reports whether secret is the owner's, in constant time.
func (s *RPCServer) ownerSecret(secret string) bool {
	return len(s.secret) > 0 && subtle.ConstantTimeCompare([]byte(secret), s.secret) == 1
}

func (s *RPCServer) bindConn(c *jsonrpc.Conn, id string, byToken bool) {
	st := stateOf(c)
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.agentID != id {
		st.sessionID = ""
	}
	st.agentID, st.token = id, byToken
}

// startSession starts a session and, on a connection not yet bound, binds
// it to the agent with the new session pinned.
func (s *RPCServer) startSession(ctx context.Context, p *rpc.StartSessionParams) (*rpc.StartSessionResult, error) {
	r, err := s.n.StartSession(ctx, p)
	if err != nil {
		return nil, err
	}
	c := jsonrpc.ConnFromContext(ctx)
	st := stateOf(c)
	st.mu.Lock()
	if st.agentID == "" && c != nil && c.Transport() != jsonrpc.TransportWebSocket {
		st.agentID = r.AgentID
	}
	if st.agentID == r.AgentID {
		st.sessionID = r.SessionID
	}
	st.mu.Unlock()
	return r, nil
}

// boundAs returns the identity a token bound the connection to, "" if none.
func boundAs(ctx context.Context) string {
	st := stateOf(jsonrpc.ConnFromContext(ctx))
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.token {
		return ""
	}
	return st.agentID
}

// registerAgent is agent.register. Re-registering an existing agent
// issues a new token for it, so it needs the owner or that agent's token.
func (s *RPCServer) registerAgent(ctx context.Context, p *rpc.RegisterAgentParams) (*rpc.RegisterAgentResult, error) {
	if !isOwner(ctx) {
		id := identity.AgentID(s.n.opts.RepoID, p.Role, p.Module, p.Name)
		if _, exists := s.n.dirc.Agent(id); exists && boundAs(ctx) != id {
			return nil, rpc.Errorf(rpc.CodeForbidden, "agent %s exists: re-registering it needs its own token or the owner's secret", id)
		}
	}
	return s.n.RegisterAgent(ctx, p)
}

// deleteAgent is agent.delete: only the agent itself or the owner.
func (s *RPCServer) deleteAgent(ctx context.Context, p *rpc.DeleteAgentParams) (*rpc.DeleteAgentResult, error) {
	if !isOwner(ctx) {
		me, target := boundAs(ctx), identity.NormalizeAgentID(p.Name)
		if t, ok := s.n.dirc.Agent(target); ok && t.Kind == KindAgent && target != me {
			return nil, rpc.Errorf(rpc.CodeForbidden, "%s may not delete agent %s: only the agent itself or the owner may", me, p.Name)
		}
	}
	return s.n.DeleteAgent(ctx, p)
}

// cleanupAgents is agent.cleanup: deleting needs the owner (a dry run is
// open to any authenticated caller).
func (s *RPCServer) cleanupAgents(ctx context.Context, p *rpc.CleanupAgentsParams) (*rpc.CleanupAgentsResult, error) {
	if !isOwner(ctx) && p.Force && !p.DryRun {
		return nil, rpc.Errorf(rpc.CodeForbidden, "agent.cleanup deletes agents only for the owner: use dry_run, the Unix socket or the owner's secret")
	}
	return s.n.CleanupAgents(ctx, p)
}

// endSession is session.end: only the session's agent or the owner.
func (s *RPCServer) endSession(ctx context.Context, p *rpc.EndSessionParams) (*rpc.EndSessionResult, error) {
	// The node refuses an agent ending another's session, but lets a user
	// end any: over a WebSocket, only an owner-authenticated one.
	me := boundAs(ctx)
	if a, ok := s.n.dirc.Agent(me); ok && a.Kind == KindUser && !isOwner(ctx) && p.SessionID != "" {
		if ss, err := s.n.store.Session(ctx, p.SessionID); err == nil && ss.AgentID != me {
			return nil, rpc.Errorf(rpc.CodeForbidden, "session %s belongs to %s: only that agent or the owner may end it", p.SessionID, ss.AgentID)
		}
	}
	return s.n.EndSession(ctx, p)
}

// actingAs checks that a request acting as another agent comes from the
// owner.
func (s *RPCServer) actingAs(ctx context.Context, target string) error {
	if target == "" || isOwner(ctx) {
		return nil
	}
	if a, ok := s.n.dirc.Agent(boundAs(ctx)); !ok || a.Kind != KindUser {
		return nil // an agent may not act as another at all: the node says so
	}
	return rpc.Errorf(rpc.CodeForbidden, "acting_as %s needs the owner: the Unix socket, or a WebSocket authenticated with the owner's secret", target)
}

func (s *RPCServer) sendMessage(ctx context.Context, p *rpc.SendMessageParams) (*rpc.SendMessageResult, error) {
	if err := s.actingAs(ctx, p.ActingAs); err != nil {
		return nil, err
	}
	return s.n.SendMessage(ctx, p)
}

func (s *RPCServer) createThread(ctx context.Context, p *rpc.CreateThreadParams) (*rpc.CreateThreadResult, error) {
	if err := s.actingAs(ctx, p.ActingAs); err != nil {
		return nil, err
	}
	return s.n.CreateThread(ctx, p)
}

// registerUser is user.register: WebSocket only, for the owner (a user is
// a person at the owner's browser), and it binds the connection to the
// user.
func (s *RPCServer) registerUser(ctx context.Context, p *rpc.RegisterUserParams) (*rpc.RegisterUserResult, error) {
	c := jsonrpc.ConnFromContext(ctx)
	if c == nil || c.Transport() != jsonrpc.TransportWebSocket {
		return nil, rpc.Errorf(rpc.CodeTransport, "user.register is only available over WebSocket")
	}
	if !isOwner(ctx) {
		return nil, rpc.Errorf(rpc.CodeForbidden, "user.register needs the owner's secret: call auth with owner_secret first")
	}
	r, err := s.n.RegisterUser(ctx, p)
	if err != nil {
		return nil, err
	}
	s.bindConn(c, r.UserID, true)
	return r, nil
}

// subscribe attaches a subscription to this connection: its notifications
// are pushed as notification.message. The connection's listener is made
// on the first subscribe and closed with the connection.
func (s *RPCServer) subscribe(ctx context.Context, p *rpc.SubscribeParams) (*rpc.SubscribeResult, error) {
	c := jsonrpc.ConnFromContext(ctx)
	if c == nil {
		return nil, rpc.Errorf(rpc.CodeInvalidRequest, "subscribe needs a connection")
	}
	st := stateOf(c)
	st.mu.Lock()
	l := st.listener
	if l == nil {
		// Notifications go straight onto the connection's queue (which
		// never blocks: a full one closes the connection as a slow
		// consumer, and the client catches up with message.list).
		l = s.n.ListenFunc(func(nt *rpc.MessageNotification) bool {
			if s.n.standing.claimedFor(nt.MessageID, c) {
				return true // claimed for this connection: pushed whole (claims.go)
			}
			if nt.Frame != nil {
				return c.NotifyEncoded(nt.Frame) == nil // encoded once by the notifier
			}
			return c.Notify(rpc.NotificationMessage, nt) == nil
		})
		l.deliverReceipt = func(nt *rpc.ReceiptNotification) bool { return c.Notify(rpc.NotificationReceipt, nt) == nil }
		st.listener = l
		c.OnClose(l.Close)
	}
	st.mu.Unlock()
	return s.n.Subscribe(ctx, l, p)
}
