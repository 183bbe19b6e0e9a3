package thrum

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"net"
	"os"
	"sync"

	"github.com/thrumhq/thrum/identity"
	"github.com/thrumhq/thrum/rpc"
)

// RPCServer serves a node's API as JSON-RPC 2.0: newline-delimited JSON
// on stream listeners (Serve, for a Unix socket), one message per frame on
// WebSockets (ServeHTTP), and in-process pipes (Node.Dial). It is an
// *rpc.Server with thrum's methods bound, so Serve, ServeHTTP, Shutdown
// and Close are those of rpc.Server. Its methods may be called
// concurrently.
//
// Callers identify explicitly, never by guess. A Unix socket or pipe is
// the owner's: a request may name its agent with "caller_agent_id" in its
// params, or the connection is bound once, by auth or session.start, and
// later calls act as that agent. A WebSocket, reachable by any local user
// and any page on a localhost origin, may call nothing but health and auth
// until it presents a credential with auth: an agent's or user's token,
// after which it acts only as that identity, or the owner's secret
// (RPCOptions.OwnerSecret), after which it may do what the socket may.
// Only the owner registers users, acts as another agent (acting_as),
// ends another agent's session or deletes another agent. DESIGN.md, "Trust
// boundary", has the whole model.
type RPCServer struct {
	*rpc.Server
	n      *Node
	secret []byte

	syncMu sync.Mutex
}

// RPCOptions configure an RPCServer. A nil *RPCOptions means defaults.
type RPCOptions struct {
	// Server are the engine's options (limits, logger, origins).
	Server rpc.ServerOptions
	// AllowAnyPeer skips the check that a Unix-socket peer runs as the
	// same user as this process. Default false: other users are refused.
	AllowAnyPeer bool
	// OwnerSecret, if set, is the owner's secret: a WebSocket that presents
	// it to auth acts for the owner, as the Unix socket does. The daemon
	// keeps it in a 0600 file that only the owner's processes can read
	// (see NewOwnerSecret). Empty: no WebSocket can act for the owner.
	OwnerSecret string
}

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
	agentID   string // bound identity, "" if none
	token     bool   // bound by a token
	owner     bool   // a WebSocket that presented the owner's secret
	sessionID string // pinned by session.start on this connection
	listener  *Subscription
}

type connStateKey struct{}

func stateOf(c *rpc.Conn) *connState {
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

// RPCServer returns a new server for the node's API. Each call returns a
// new server; the caller serves it and shuts it down.
func (n *Node) RPCServer(opts *RPCOptions) *RPCServer {
	var o RPCOptions
	if opts != nil {
		o = *opts
	}
	s := &RPCServer{Server: rpc.NewServer(&o.Server), n: n}
	if o.OwnerSecret != "" {
		s.secret = []byte(o.OwnerSecret)
	}
	uid := os.Getuid()
	s.bindAll(func(c *rpc.Conn) error {
		if o.AllowAnyPeer || c == nil || c.Transport() != rpc.TransportUnix {
			return nil
		}
		if peer, ok := c.PeerUID(); ok && peer != uid {
			return rpc.Errorf(rpc.CodeForbidden, "connection refused: the daemon serves only its own user")
		}
		return nil
	})
	return s
}

// Dial returns a client connected to the node in process, through a pipe
// served by a fresh RPCServer: the same API, codes and notifications as
// over a socket, with no socket. Closing the client ends the pipe.
func (n *Node) Dial(opts *rpc.ClientOptions) *rpc.Client {
	srv := n.RPCServer(nil)
	a, b := net.Pipe()
	go func() {
		srv.ServeConn(context.Background(), a, rpc.TransportPipe)
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
	c := rpc.ConnFromContext(ctx)
	if c == nil || c.Transport() != rpc.TransportWebSocket {
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
	c := rpc.ConnFromContext(ctx)
	st := stateOf(c)
	var named struct {
		CallerAgentID string `json:"caller_agent_id"`
	}
	if len(raw) > 0 && raw[0] == '{' {
		if err := json.Unmarshal(raw, &named); err != nil {
			return ctx, rpc.Errorf(rpc.CodeInvalidParams, "invalid params: caller_agent_id must be a string")
		}
	}
	ws := c != nil && c.Transport() == rpc.TransportWebSocket
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
func bind[P, R any](s *RPCServer, method string, acc access, peerOK func(*rpc.Conn) error, op func(context.Context, *P) (*R, error)) {
	s.Handle(method, func(ctx context.Context, raw json.RawMessage) (any, error) {
		if err := peerOK(rpc.ConnFromContext(ctx)); err != nil {
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

func (s *RPCServer) bindAll(peer func(*rpc.Conn) error) {
	n := s.n
	bind(s, rpc.MethodHealth, open, peer, n.Health)
	bind(s, rpc.MethodAuth, open, peer, s.auth)
	bind(s, rpc.MethodAgentRegister, read, peer, s.registerAgent)
	bind(s, rpc.MethodAgentList, read, peer, n.ListAgents)
	bind(s, rpc.MethodAgentWhoami, read, peer, n.Whoami)
	bind(s, rpc.MethodAgentListContext, read, peer, n.ListContext)
	bind(s, rpc.MethodAgentDelete, write, peer, s.deleteAgent)
	bind(s, rpc.MethodAgentCleanup, write, peer, s.cleanupAgents)
	bind(s, rpc.MethodSessionStart, write, peer, s.startSession)
	bind(s, rpc.MethodSessionEnd, write, peer, s.endSession)
	bind(s, rpc.MethodSessionHeartbeat, write, peer, n.Heartbeat)
	bind(s, rpc.MethodSessionSetIntent, write, peer, n.SetIntent)
	bind(s, rpc.MethodSessionSetTask, write, peer, n.SetTask)
	bind(s, rpc.MethodSessionList, read, peer, n.ListSessions)
	bind(s, rpc.MethodMessageSend, write, peer, s.sendMessage)
	bind(s, rpc.MethodMessageGet, read, peer, n.GetMessage)
	bind(s, rpc.MethodMessageList, read, peer, n.ListMessages)
	bind(s, rpc.MethodMessageEdit, write, peer, n.EditMessage)
	bind(s, rpc.MethodMessageDelete, write, peer, n.DeleteMessage)
	bind(s, rpc.MethodMessageMarkRead, write, peer, n.MarkRead)
	bind(s, rpc.MethodThreadCreate, write, peer, s.createThread)
	bind(s, rpc.MethodThreadList, read, peer, n.ListThreads)
	bind(s, rpc.MethodThreadGet, read, peer, n.GetThread)
	bind(s, rpc.MethodSubscribe, write, peer, s.subscribe)
	bind(s, rpc.MethodUnsubscribe, write, peer, n.Unsubscribe)
	bind(s, rpc.MethodSubscriptionsList, write, peer, n.ListSubscriptions)
	bind(s, rpc.MethodUserRegister, read, peer, s.registerUser)
	bind(s, rpc.MethodUserIdentify, read, peer, n.IdentifyUser)
	bind(s, rpc.MethodGroupCreate, write, peer, n.CreateGroup)
	bind(s, rpc.MethodGroupDelete, write, peer, n.DeleteGroup)
	bind(s, rpc.MethodGroupMemberAdd, write, peer, n.AddGroupMember)
	bind(s, rpc.MethodGroupMemberRemove, write, peer, n.RemoveGroupMember)
	bind(s, rpc.MethodGroupList, read, peer, n.ListGroups)
	bind(s, rpc.MethodGroupInfo, read, peer, n.GroupInfo)
	bind(s, rpc.MethodGroupMembers, read, peer, n.GroupMembers)
}

// auth authenticates the connection and binds it to an identity. A token
// proves an identity; the owner's secret makes the connection the owner's
// and, with agent_id, binds it to that agent; on a Unix socket or pipe
// (the owner's already) naming a registered agent is enough.
func (s *RPCServer) auth(ctx context.Context, p *rpc.AuthParams) (*rpc.AuthResult, error) {
	c := rpc.ConnFromContext(ctx)
	ws := c != nil && c.Transport() == rpc.TransportWebSocket
	id := identity.NormalizeAgentID(p.AgentID)
	byToken, owner := false, false
	switch {
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
	res := &rpc.AuthResult{AgentID: id, Owner: owner}
	if id != "" {
		a, ok := s.n.dirc.Agent(id)
		if !ok {
			return nil, rpc.Errorf(rpc.CodeNotFound, "agent not found: %s is not registered", id)
		}
		res.Kind = a.Kind
	}
	if c != nil {
		if err := c.Authenticate(); err != nil {
			return nil, err
		}
	}
	s.bindConn(c, id, byToken)
	st := stateOf(c)
	st.mu.Lock()
	st.owner = owner // a token binds the connection to that identity alone
	st.mu.Unlock()
	return res, nil
}

// ownerSecret reports whether secret is the owner's, in constant time.
func (s *RPCServer) ownerSecret(secret string) bool {
	return len(s.secret) > 0 && subtle.ConstantTimeCompare([]byte(secret), s.secret) == 1
}

func (s *RPCServer) bindConn(c *rpc.Conn, id string, byToken bool) {
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
	c := rpc.ConnFromContext(ctx)
	st := stateOf(c)
	st.mu.Lock()
	if st.agentID == "" && c != nil && c.Transport() != rpc.TransportWebSocket {
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
	st := stateOf(rpc.ConnFromContext(ctx))
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
	c := rpc.ConnFromContext(ctx)
	if c == nil || c.Transport() != rpc.TransportWebSocket {
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
	c := rpc.ConnFromContext(ctx)
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
			if nt.Frame != nil {
				return c.NotifyEncoded(nt.Frame) == nil // encoded once by the notifier
			}
			return c.Notify(rpc.NotificationMessage, nt) == nil
		})
		st.listener = l
		c.OnClose(l.Close)
	}
	st.mu.Unlock()
	return s.n.Subscribe(ctx, l, p)
}

// HandleSync registers sync.status and sync.force, which exist only when
// the node syncs with a remote.
func (s *RPCServer) HandleSync(status func(context.Context) (*rpc.SyncStatusResult, error), force func(context.Context) (*rpc.SyncForceResult, error)) {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	peer := func(*rpc.Conn) error { return nil }
	bind(s, rpc.MethodSyncStatus, read, peer, func(ctx context.Context, _ *rpc.SyncStatusParams) (*rpc.SyncStatusResult, error) {
		return status(ctx)
	})
	bind(s, rpc.MethodSyncForce, write, peer, func(ctx context.Context, _ *rpc.SyncForceParams) (*rpc.SyncForceResult, error) {
		return force(ctx)
	})
}
