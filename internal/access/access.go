// Package access is the access policy of thrum's RPC server: whom a
// request acts as, and whether it may. It binds connections to
// identities (by auth, by a credential in a WebSocket's handshake, or by
// session.start), checks credentials (an agent's or user's token, the
// owner's secret, a browser's login code or web session), and holds each
// method's rules: what a method needs
// from its caller on each transport (Level), and who may act for whom.
// It runs no operation: the root's RPCServer binds each method to the
// node behind these checks. A wrong credential on a WebSocket is refused
// with -32002 (401 in a handshake), which the server (internal/jsonrpc)
// makes the failing connection pay for with a delay; a right one is
// accepted whatever others do. DESIGN.md, "Trust boundary", has the
// model.
//
// A Unix socket or pipe is the owner's: a request may name its agent
// with "caller_agent_id" in its params, or the connection is bound once,
// by auth or session.start, and later calls act as that agent. A
// WebSocket, reachable by any local user and any page on a localhost
// origin, may call nothing but Open methods until it presents a
// credential: a token binds it to that identity alone; the owner's
// secret or a web session gives it the owner's standing.
package access

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/thrumhq/thrum/identity"
	"github.com/thrumhq/thrum/internal/jsonrpc"
	"github.com/thrumhq/thrum/rpc"
)

// Level is what a method needs from its caller.
type Level int

const (
	Open  Level = iota // no credential: health and auth only
	Read               // needs a credential on a WebSocket; an identity is optional
	Write              // acts as an agent: needs an identity
)

// Identities is what the policy asks of the node about identities. Its
// methods may be called concurrently.
type Identities interface {
	// Kind returns a registered identity's kind (rpc.KindAgent or
	// rpc.KindUser); ok is false if id is not registered.
	Kind(id string) (kind string, ok bool)
	// Authenticate returns the identity token belongs to, or the
	// node's error (rpc.ReasonInvalidToken for an unknown token).
	Authenticate(ctx context.Context, token string) (string, error)
	// SessionAgent returns the agent whose session id is, or an error if
	// there is no such session.
	SessionAgent(ctx context.Context, id string) (string, error)
}

// Options configure a Policy.
type Options struct {
	// OwnerSecret, if set, gives a WebSocket that presents it the
	// owner's standing. Empty: no WebSocket can act for the owner, and
	// web login is off.
	OwnerSecret string
	// AllowAnyPeer skips the check that a Unix-socket peer runs as this
	// process's user.
	AllowAnyPeer bool
	// RepoID is the node's repository, with which agent IDs are made.
	RepoID string
	// Now is the clock of login codes and web sessions. Default
	// time.Now.
	Now func() time.Time
	// WebSessionFile, if set, keeps the web sessions (each as its hash
	// and expiry, mode 0600), so that a browser stays signed in across a
	// restart of the server. Empty: in memory only.
	WebSessionFile string
	// Logger reports what the policy could not do (keep web sessions).
	// Nil: silent.
	Logger *slog.Logger
}

// Policy is one RPC server's access policy: its web logins are its own.
// Its methods may be called concurrently.
type Policy struct {
	ids     Identities
	secret  []byte
	anyPeer bool
	uid     int
	repoID  string
	now     func() time.Time
	log     *slog.Logger
	web     *webLogins // browser logins (weblogin.go)
}

// New returns the policy of one server over the node's identities.
func New(ids Identities, o Options) *Policy {
	p := &Policy{ids: ids, anyPeer: o.AllowAnyPeer, uid: os.Getuid(), repoID: o.RepoID, now: o.Now, log: o.Logger}
	if o.OwnerSecret != "" {
		p.secret = []byte(o.OwnerSecret)
	}
	if p.now == nil {
		p.now = time.Now
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	p.web = newWebLogins(o.WebSessionFile, p.now())
	return p
}

// connState is the identity bound to one connection.
type connState struct {
	mu        sync.Mutex
	agentID   string     // bound identity, "" if none
	token     bool       // bound by a token
	owner     bool       // a WebSocket that presented the owner's secret
	exchanged *exchanged // the login code its handshake traded, until auth takes it
	sessionID string     // pinned by session.start on this connection
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

// Peer refuses a Unix-socket peer that runs as another user.
func (p *Policy) Peer(ctx context.Context) error {
	c := jsonrpc.ConnFromContext(ctx)
	if p.anyPeer || c == nil || c.Transport() != jsonrpc.TransportUnix {
		return nil
	}
	if peer, ok := c.PeerUID(); ok && peer != p.uid {
		return rpc.Errorf(rpc.CodeForbidden, "connection refused: the daemon serves only its own user")
	}
	return nil
}

// Caller works out whom a request of method acts as, from its
// connection and its params' "caller_agent_id", and checks the method's
// access on this transport. agent is "" when the request names no one
// and its connection is bound to no one; session is the session pinned
// on the connection for that agent, if any.
func (p *Policy) Caller(ctx context.Context, method string, lvl Level, raw json.RawMessage) (agent, session string, err error) {
	c := jsonrpc.ConnFromContext(ctx)
	st := stateOf(c)
	var named struct {
		CallerAgentID string `json:"caller_agent_id"`
	}
	if len(raw) > 0 && raw[0] == '{' {
		if err := json.Unmarshal(raw, &named); err != nil {
			return "", "", rpc.Errorf(rpc.CodeInvalidParams, "invalid params: caller_agent_id must be a string")
		}
	}
	ws := c != nil && c.Transport() == jsonrpc.TransportWebSocket
	st.mu.Lock()
	bound, byToken, owner, sid := st.agentID, st.token, st.owner, st.sessionID
	st.mu.Unlock()
	caller := identity.NormalizeAgentID(named.CallerAgentID)
	if ws && !owner {
		if lvl == Open {
			return "", "", nil
		}
		if !byToken {
			return "", "", rpc.Errorf(rpc.CodeUnauthenticated, "%s needs a credential on a WebSocket: call auth with your token (from your identity file) or the owner's secret first", method)
		}
		if caller != "" && caller != bound {
			return "", "", rpc.Errorf(rpc.CodeForbidden, "this connection is authenticated as %s and cannot act as %s", bound, caller)
		}
		caller = bound
	} else if caller == "" {
		caller = bound
	}
	if caller == bound {
		return caller, sid, nil
	}
	return caller, "", nil
}

// Auth is the auth method: it authenticates the connection and binds it
// to an identity. A token proves an identity; the owner's secret makes
// the connection the owner's and, with agent_id, binds it to that agent;
// on a Unix socket or pipe (the owner's already) naming a registered
// agent is enough. A credential refused on a WebSocket costs the
// connection a delay (jsonrpc.Conn.CredentialRefused).
func (p *Policy) Auth(ctx context.Context, a *rpc.AuthParams) (*rpc.AuthResult, error) {
	r, err := p.auth(ctx, a)
	var e *rpc.Error
	if c := jsonrpc.ConnFromContext(ctx); c != nil && errors.As(err, &e) && e.Code == rpc.CodeUnauthenticated &&
		(a.Token != "" || a.OwnerSecret != "" || a.LoginCode != "" || a.WebSession != "") {
		c.CredentialRefused(e.Message)
	}
	return r, err
}

func (p *Policy) auth(ctx context.Context, a *rpc.AuthParams) (*rpc.AuthResult, error) {
	c := jsonrpc.ConnFromContext(ctx)
	ws := c != nil && c.Transport() == jsonrpc.TransportWebSocket
	id := identity.NormalizeAgentID(a.AgentID)
	byToken, owner := false, false
	var web rpc.AuthResult
	switch {
	case a.LoginCode != "" || a.WebSession != "":
		var err error
		if web.WebSession, web.WebSessionExpiresAt, err = p.webAuth(c, a); err != nil {
			return nil, err
		}
		owner = true
	case a.OwnerSecret != "":
		if !p.ownerSecret(a.OwnerSecret) {
			return nil, rpc.Errorf(rpc.CodeUnauthenticated, "wrong owner secret")
		}
		owner = true
		if a.Token != "" {
			return nil, rpc.Errorf(rpc.CodeInvalidParams, "give a token or the owner's secret, not both")
		}
	case a.Token != "":
		tid, err := p.ids.Authenticate(ctx, a.Token)
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
		kind, err := p.registered(id)
		if err != nil {
			return nil, err
		}
		res.Kind = kind
	}
	if c != nil {
		if err := c.Authenticate(); err != nil {
			return nil, err
		}
	}
	bindAs(c, id, byToken, owner) // a token binds the connection to that identity alone
	return res, nil
}

// registered returns the kind of the registered agent or user id.
func (p *Policy) registered(id string) (string, error) {
	kind, ok := p.ids.Kind(id)
	if !ok {
		return "", rpc.Errorf(rpc.CodeNotFound, "agent not found: %s is not registered", id)
	}
	return kind, nil
}

// bindAs binds c to identity id (proved by a token or not) and sets
// whether it has the owner's standing, as auth or a credential in the
// handshake does.
func bindAs(c *jsonrpc.Conn, id string, byToken, owner bool) {
	bindConn(c, id, byToken)
	st := stateOf(c)
	st.mu.Lock()
	st.owner = owner
	st.mu.Unlock()
}

func bindConn(c *jsonrpc.Conn, id string, byToken bool) {
	st := stateOf(c)
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.agentID != id {
		st.sessionID = ""
	}
	st.agentID, st.token = id, byToken
}

// Handshake authorizes a WebSocket by the credential its handshake
// carries (jsonrpc.ServerOptions.Authorize): an agent's or user's token
// binds it to that identity, the owner's secret or a web session makes
// it the owner's, as auth does, and so does a login code, traded here
// for a web session that the connection's auth with the code returns. It
// then starts authenticated, so strangers who fill the small pool of
// connections waiting to authenticate cannot keep it out, not even from
// its first sign-in.
func (p *Policy) Handshake(r *http.Request, cred string) (func(*jsonrpc.Conn), error) {
	if p.ownerSecret(cred) || p.webSession(cred) {
		return func(c *jsonrpc.Conn) { bindAs(c, "", false, true) }, nil
	}
	if session, expires, ok := p.exchangeCode(cred); ok {
		x := &exchanged{code: sha256.Sum256([]byte(cred)), session: session, expires: expires}
		return func(c *jsonrpc.Conn) {
			bindAs(c, "", false, true)
			st := stateOf(c)
			st.mu.Lock()
			st.exchanged = x
			st.mu.Unlock()
		}, nil
	}
	id, err := p.ids.Authenticate(r.Context(), cred)
	if rpc.Reason(err) == rpc.ReasonInvalidToken {
		// Not only no token: none of the four it could have been.
		return nil, rpc.Errorf(rpc.CodeUnauthenticated, "credential not accepted: it is no agent's or user's token, nor the owner's secret, nor a live web session or login code (a login code works once)")
	}
	if err != nil {
		return nil, err
	}
	if _, err := p.registered(id); err != nil {
		return nil, err
	}
	return func(c *jsonrpc.Conn) { bindAs(c, id, true, false) }, nil
}

// ownerSecret reports whether secret is the owner's, in constant time.
func (p *Policy) ownerSecret(secret string) bool {
	return len(p.secret) > 0 && subtle.ConstantTimeCompare([]byte(secret), p.secret) == 1
}

// SessionStarted pins a session that session.start started for agent: a
// connection not bound yet (on the owner's transports) is bound to the
// agent, and one bound to it now acts in that session.
func (p *Policy) SessionStarted(ctx context.Context, agent, session string) {
	c := jsonrpc.ConnFromContext(ctx)
	st := stateOf(c)
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.agentID == "" && c != nil && c.Transport() != jsonrpc.TransportWebSocket {
		st.agentID = agent
	}
	if st.agentID == agent {
		st.sessionID = session
	}
}

// ---- the rules of single methods ----

// RegisterAgent is agent.register's rule: re-registering an existing
// agent issues a new token for it, so it needs the owner or that agent's
// token.
func (p *Policy) RegisterAgent(ctx context.Context, a *rpc.RegisterAgentParams) error {
	if isOwner(ctx) {
		return nil
	}
	id := identity.AgentID(p.repoID, a.Role, a.Module, a.Name)
	if _, exists := p.ids.Kind(id); exists && boundAs(ctx) != id {
		return rpc.Errorf(rpc.CodeForbidden, "agent %s exists: re-registering it needs its own token or the owner's secret", id)
	}
	return nil
}

// DeleteAgent is agent.delete's rule: only the agent itself or the owner.
func (p *Policy) DeleteAgent(ctx context.Context, a *rpc.DeleteAgentParams) error {
	if isOwner(ctx) {
		return nil
	}
	me, target := boundAs(ctx), identity.NormalizeAgentID(a.Name)
	if kind, ok := p.ids.Kind(target); ok && kind == rpc.KindAgent && target != me {
		return rpc.Errorf(rpc.CodeForbidden, "%s may not delete agent %s: only the agent itself or the owner may", me, a.Name)
	}
	return nil
}

// CleanupAgents is agent.cleanup's rule: deleting needs the owner (a dry
// run is open to any authenticated caller).
func (p *Policy) CleanupAgents(ctx context.Context, a *rpc.CleanupAgentsParams) error {
	if !isOwner(ctx) && a.Force && !a.DryRun {
		return rpc.Errorf(rpc.CodeForbidden, "agent.cleanup deletes agents only for the owner: use dry_run, the Unix socket or the owner's secret")
	}
	return nil
}

// TrustAgent is agent.trust's rule: whose key is whose is the owner's
// word alone.
func (p *Policy) TrustAgent(ctx context.Context, _ *rpc.TrustAgentParams) error {
	if !isOwner(ctx) {
		return rpc.Errorf(rpc.CodeForbidden, "agent.trust needs the owner: the Unix socket, or a WebSocket authenticated with the owner's secret")
	}
	return nil
}

// TeamKeys is the rule of the key.* methods that change or hand out the
// team keys: the owner's, over the Unix socket or the in-process pipe
// only. A team key opens every sealed body; it never crosses the
// loopback port, whatever credential the WebSocket holds.
func (p *Policy) TeamKeys(ctx context.Context, method string) error {
	if c := jsonrpc.ConnFromContext(ctx); c != nil && c.Transport() == jsonrpc.TransportWebSocket {
		return rpc.Errorf(rpc.CodeForbidden, "%s is only for the owner over the Unix socket: team keys never cross the WebSocket", method)
	}
	return nil
}

// EndSession is session.end's rule: only the session's agent or the
// owner. (The node refuses an agent ending another's session, but lets a
// user end any: over a WebSocket, only an owner-authenticated one.)
func (p *Policy) EndSession(ctx context.Context, a *rpc.EndSessionParams) error {
	me := boundAs(ctx)
	if kind, ok := p.ids.Kind(me); ok && kind == rpc.KindUser && !isOwner(ctx) && a.SessionID != "" {
		if agent, err := p.ids.SessionAgent(ctx, a.SessionID); err == nil && agent != me {
			return rpc.Errorf(rpc.CodeForbidden, "session %s belongs to %s: only that agent or the owner may end it", a.SessionID, agent)
		}
	}
	return nil
}

// SendMessage is message.send's rule: acting as another agent needs the
// owner.
func (p *Policy) SendMessage(ctx context.Context, a *rpc.SendMessageParams) error {
	return p.actingAs(ctx, a.ActingAs)
}

// CreateThread is thread.create's rule: acting as another agent needs the
// owner.
func (p *Policy) CreateThread(ctx context.Context, a *rpc.CreateThreadParams) error {
	return p.actingAs(ctx, a.ActingAs)
}

// actingAs checks that a request acting as another agent comes from the
// owner.
func (p *Policy) actingAs(ctx context.Context, target string) error {
	if target == "" || isOwner(ctx) {
		return nil
	}
	if kind, ok := p.ids.Kind(boundAs(ctx)); !ok || kind != rpc.KindUser {
		return nil // an agent may not act as another at all: the node says so
	}
	return rpc.Errorf(rpc.CodeForbidden, "acting_as %s needs the owner: the Unix socket, or a WebSocket authenticated with the owner's secret", target)
}

// RegisterUser is user.register's rule: WebSocket only, for the owner (a
// user is a person at the owner's browser).
func (p *Policy) RegisterUser(ctx context.Context, _ *rpc.RegisterUserParams) error {
	c := jsonrpc.ConnFromContext(ctx)
	if c == nil || c.Transport() != jsonrpc.TransportWebSocket {
		return rpc.Errorf(rpc.CodeTransport, "user.register is only available over WebSocket")
	}
	if !isOwner(ctx) {
		return rpc.Errorf(rpc.CodeForbidden, "user.register needs the owner's secret: call auth with owner_secret first")
	}
	return nil
}

// UserRegistered binds the connection that registered a user to it, as
// its token would.
func (p *Policy) UserRegistered(ctx context.Context, id string) {
	bindConn(jsonrpc.ConnFromContext(ctx), id, true)
}

// Subscribe is subscribe's rule: receipts of every message (receipts:
// "all", which the web console takes) only for the owner. An agent's
// token gets those of its own messages ("sent").
func (p *Policy) Subscribe(ctx context.Context, a *rpc.SubscribeParams) error {
	if a.Receipts == rpc.ReceiptsAll && !isOwner(ctx) {
		return rpc.Errorf(rpc.CodeForbidden, `receipts "all" needs the owner: the Unix socket, or a WebSocket authenticated with the owner's secret; a token may subscribe to receipts "sent", those of its own messages`)
	}
	return nil
}

// Receipts is what of a message's receipts (rs, of a message author
// sent) the caller may see: the owner and the author see them all, with
// the recipients' notes; anyone else only their own. Who read what when,
// and what a recipient wrote back, are the sender's business.
func (p *Policy) Receipts(ctx context.Context, author string, rs []rpc.Receipt) []rpc.Receipt {
	me := boundAs(ctx)
	if isOwner(ctx) || me == author {
		return rs
	}
	var mine []rpc.Receipt
	for _, r := range rs {
		if r.AgentID == me {
			mine = append(mine, r)
		}
	}
	return mine
}
