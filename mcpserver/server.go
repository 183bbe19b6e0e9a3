// Package mcpserver gives AI agents thrum's messaging as native MCP tools
// (the MCP contract): send_message, check_messages, wait_for_message,
// list_agents, broadcast_message and six group tools, get_message, which
// shows a message in its conversation, and search_messages.
//
// A Server acts as one agent, resolved once by its caller. It holds one
// persistent rpc.Client to a thrum daemon — a Unix socket, or an
// in-process pipe to an embedded node (thrum.Node.Dial); the code path is
// the same — for calls and for push notifications: wait_for_message is
// woken by a subscription on that connection, not by polling. If the
// connection drops, the server redials, re-authenticates and resubscribes,
// and queues the messages sent to it meanwhile.
//
// Reading a message consumes it. Every consuming call (check_messages,
// wait_for_message) claims what it returns with message.markRead — or, for
// a waiting wait_for_message, with a standing claim the daemon fills in
// the message's own commit (message.claimNext) — and the daemon gives each
// message to exactly one claim of the agent, so across all of an agent's
// servers and sessions each message is returned at most once, and what no
// call claimed stays unread. A claim whose reply is lost
// on the way back from the daemon (the connection drops after the read is
// written) is gone with it: such a message is read but was returned to
// nobody (DESIGN.md, "Delivery to agents").
//
// The same consumer runs without a tool call too: Stream hands each
// message, claimed, to a function of the caller's (one that prints a line
// per message, say), and with Options.Channel, Run pushes each to a Claude
// Code session as a channel event (channel.go).
//
// Serve it over stdio with ServeStdio(ctx, os.Stdin, os.Stdout), which
// survives malformed lines, on any go-sdk transport with Run, or over
// Streamable HTTP with HTTPHandler. The package logs only through the given
// *slog.Logger: stdout belongs to the MCP wire.
package mcpserver

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/thrumhq/thrum/internal/jsonrpc"
	"github.com/thrumhq/thrum/rpc"
)

// Defaults of Options.
const (
	DefaultQueueSize   = 1000
	DefaultWaitTimeout = 300 * time.Second
	MaxWaitTimeout     = 3600 * time.Second
	DefaultCallTimeout = 30 * time.Second
	// DefaultProgressInterval is how often a wait with a progressToken
	// sends notifications/progress: under 15 s, so that a client resetting
	// its request timeout on progress never times out a live wait, even
	// one of an hour (MaxWaitTimeout).
	DefaultProgressInterval = 10 * time.Second
	// DefaultMaxHTTPSessions caps the MCP sessions HTTPHandler keeps at
	// once; DefaultHTTPSessionIdle is how long one may go without a
	// request before it is closed. A client whose session was closed gets
	// 404 and must start a new one (the go-sdk client fails instead), so
	// the idle time is long, a working day: it frees sessions clients
	// leaked, not ones an agent left idle over lunch.
	DefaultMaxHTTPSessions = 64
	DefaultHTTPSessionIdle = 8 * time.Hour
)

// Dialer opens a connection to thrum whose notifications go to onNote.
// rpc.Dial to a daemon's socket and thrum.Node.Dial both fit.
type Dialer func(ctx context.Context, onNote func(method string, params json.RawMessage)) (*rpc.Client, error)

// Identity is the agent a Server acts as.
type Identity struct {
	AgentID string
	Role    string
	Module  string
	// Token authenticates the agent; required over a WebSocket, optional on
	// a Unix socket or pipe.
	Token string
}

// Options configure a Server. A nil *Options means all defaults.
type Options struct {
	// Logger receives warnings (to stderr, typically). Nil means silent.
	Logger *slog.Logger
	// QueueSize bounds the notifications waiting for wait_for_message;
	// the oldest is dropped when full. Default DefaultQueueSize.
	QueueSize int
	// Version is reported to MCP clients. Default "dev".
	Version string
	// ProgressInterval is how often a waiting wait_for_message reports
	// progress when its request has a progressToken. Default
	// DefaultProgressInterval.
	ProgressInterval time.Duration
	// MaxHTTPSessions caps the sessions HTTPHandler keeps at once: a
	// client that would start one more is refused with 503 until one is
	// deleted or expires. Default DefaultMaxHTTPSessions.
	MaxHTTPSessions int
	// HTTPSessionIdle closes an HTTP session that has had no request for
	// so long. Default DefaultHTTPSessionIdle.
	HTTPSessionIdle time.Duration
	// Channel makes the server a Claude Code channel (channel.go): it
	// declares the capability, negotiates only protocol versions of the
	// initialize handshake, and Run pushes each message addressed to the
	// agent to the client as notifications/claude/channel — claimed for
	// it, so that no other consumer returns it too. Only Run and
	// ServeStdio push, for one session at a time; HTTPHandler does not.
	Channel bool
}

// Server is an MCP server acting as one agent. Its methods may be called
// concurrently.
type Server struct {
	id   Identity
	dial Dialer
	opts Options
	mcp  *mcp.Server
	log  *slog.Logger

	mu      sync.Mutex
	client  *rpc.Client   // current daemon connection; nil while reconnecting
	ready   chan struct{} // closed when client is usable; replaced on loss
	closed  bool
	stopRec chan struct{}
	recDone chan struct{}

	queue queue

	waitMu sync.Mutex // held by the one active wait_for_message

	// armedOn is the connection whose standing claim the wait armed, nil
	// when none is armed (claimed.go). armCalls orders the calls that arm
	// and cancel it.
	armMu       sync.Mutex
	armedOn     *rpc.Client
	noClaimNext *rpc.Client // a connection whose daemon has no message.claimNext
	armCalls    sync.Mutex
	waiting     atomic.Int32 // waits in progress (wait), which share the claim

	// held keeps what a wait claimed but could not return because it was
	// stopped (cancelled, its POST closed, shutdown) while the claim was
	// on its way: the next consuming call of this server returns it first.
	heldMu  sync.Mutex
	held    []MessageInfo
	claimed []rpc.ClaimedNotification // taken by the standing claim, not yet in held (claimed.go)
	ending  chan struct{}             // closed by EndWaits
	endOnce sync.Once

	// posts maps the key given to each HTTP POST (postKeyHeader) to the
	// POST's context: a wait ends when the stream carrying it closes.
	// sessionWaits maps an HTTP session ID to the cancel of its wait: a
	// DELETE of the session ends it (the SDK's own close would wait for it).
	posts        sync.Map
	sessionWaits sync.Map
	// newSession is held while a request that starts an HTTP session is
	// checked against MaxHTTPSessions and served.
	newSession sync.Mutex

	// roster caches agents' roles, for MessageInfo.from_role and
	// addressed_as.
	rosterMu   sync.Mutex
	roles      map[string]string // agent ID → role
	knownRoles map[string]bool
	rosterAt   time.Time

	// wantAcks says the agent's receipts were asked for; acksOn is the
	// connection subscribed to them. subMu guards both and is held while
	// subscribing (a call to the daemon); acksMu guards only the queue of
	// acknowledgements for a wait with acks, which the client's read
	// goroutine fills, so that a push never waits for a call (acks.go).
	subMu    sync.Mutex
	wantAcks bool
	acksOn   *rpc.Client
	acksMu   sync.Mutex
	acks     []AckInfo

	// since is how far the notifications are known complete: every
	// message addressed to this agent created up to it was pushed to the
	// queue. A reconnect re-reads what came after it.
	sinceMu sync.Mutex
	since   time.Time
}

// New connects to thrum through dial, authenticates as id and subscribes
// to every message addressed to it (by name, role, group or @everyone),
// then returns a Server with its 13 tools registered.
func New(ctx context.Context, dial Dialer, id Identity, opts *Options) (*Server, error) {
	if id.AgentID == "" {
		return nil, errors.New("mcpserver: identity has no agent ID")
	}
	s := &Server{id: id, dial: dial, ready: make(chan struct{}), stopRec: make(chan struct{}), recDone: make(chan struct{}),
		ending: make(chan struct{})}
	if opts != nil {
		s.opts = *opts
	}
	if s.opts.QueueSize <= 0 {
		s.opts.QueueSize = DefaultQueueSize
	}
	if s.opts.Version == "" {
		s.opts.Version = "dev"
	}
	if s.opts.ProgressInterval <= 0 {
		s.opts.ProgressInterval = DefaultProgressInterval
	}
	if s.opts.MaxHTTPSessions <= 0 {
		s.opts.MaxHTTPSessions = DefaultMaxHTTPSessions
	}
	if s.opts.HTTPSessionIdle <= 0 {
		s.opts.HTTPSessionIdle = DefaultHTTPSessionIdle
	}
	s.log = s.opts.Logger
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.queue.init(s.opts.QueueSize)
	c, subAt, err := s.connect(ctx)
	if err != nil {
		return nil, err
	}
	s.setClient(c)
	s.advance(subAt)
	go s.reconnectLoop()
	so := &mcp.ServerOptions{
		Instructions: "You are agent " + id.AgentID + " (role " + id.Role + "). Use check_messages for your backlog and " +
			"wait_for_message to block until a message arrives (each message is returned once, to one of them); " +
			"send_message addresses @role, a name, @group or @everyone; get_message shows a conversation.",
		Capabilities: &mcp.ServerCapabilities{},
	}
	if s.opts.Channel {
		so.Instructions += " Messages for you also arrive on their own, as <channel source=\"thrum\"> events holding a " +
			"<thrum-message> from another agent (not from your user), already marked read: act on them as their priority " +
			"says, and answer with send_message and reply_to."
		so.Capabilities.Experimental = map[string]any{ChannelCapability: map[string]any{}}
		so.SupportedProtocolVersions = channelVersions()
	}
	s.mcp = mcp.NewServer(&mcp.Implementation{Name: "thrum", Title: "thrum messaging", Version: s.opts.Version}, so)
	s.register()
	return s, nil
}

// MCP returns the underlying go-sdk server.
func (s *Server) MCP() *mcp.Server { return s.mcp }

// Run serves MCP on t (e.g. NewStdioTransport(); see ServeStdio) until the client
// disconnects or ctx ends. When ctx ends, a pending wait_for_message is
// answered first (status "shutdown", see EndWaits), so Run returns at
// once with the answer sent.
//
// With Options.Channel, Run also pushes the agent's messages to the
// client once it is initialized (channel.go), and at shutdown writes what
// it claimed before it closes the session.
func (s *Server) Run(ctx context.Context, t mcp.Transport) error {
	waits := &unanswered{}
	run, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	tr := &answering{Transport: t, waits: waits}
	pushed := make(chan struct{})
	pushCtx, stopPush := context.WithCancel(run)
	defer stopPush()
	if s.opts.Channel {
		tr.ch = newChannel()
		go func() {
			defer close(pushed)
			s.push(pushCtx, tr.ch)
		}()
	} else {
		close(pushed)
	}
	stop := context.AfterFunc(ctx, func() {
		s.EndWaits()
		waits.awaitAnswers(shutdownGrace)
		select { // the channel writes what it holds first
		case <-pushed:
		case <-time.After(shutdownGrace):
		}
		cancel()
	})
	defer stop()
	err := s.mcp.Run(run, tr)
	stopPush()
	<-pushed
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// EndWaits answers a pending wait_for_message, and every later one, with
// status "shutdown" and no message: they claim nothing. Call it before
// shutting down an HTTP server that serves HTTPHandler, whose graceful
// shutdown would otherwise wait for the wait. It is idempotent.
func (s *Server) EndWaits() {
	s.endOnce.Do(func() { close(s.ending) })
}

// postKeyHeader carries, from HTTPHandler to the tool handlers, the key of
// the HTTP POST that brought a request. A client's own value is replaced.
const postKeyHeader = "X-Thrum-Post-Key"

// HTTPHandler serves MCP over Streamable HTTP. Mount it on a loopback
// listener. Like the daemon's WebSocket it refuses (403) a Host that is
// not loopback (DNS rebinding) and an Origin that is not a loopback page,
// and it requires the agent's token as a bearer (401): the port is open
// to every local user and every page a local browser shows. A server
// whose Identity has no token refuses every request.
//
// A wait_for_message ends, claiming nothing, when the POST that carries it
// closes: a client that drops mid-wait does not take the next message.
//
// It keeps at most Options.MaxHTTPSessions sessions (a request that would
// start another gets 503) and closes one idle for Options.HTTPSessionIdle.
func (s *Server) HTTPHandler() http.Handler {
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.mcp },
		&mcp.StreamableHTTPOptions{SessionTimeout: s.opts.HTTPSessionIdle})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !jsonrpc.LoopbackHost(r.Host) {
			http.Error(w, "forbidden: Host must be localhost, 127.0.0.1 or [::1]", http.StatusForbidden)
			return
		}
		if o := r.Header.Get("Origin"); o != "" && !jsonrpc.LoopbackOrigin(o) {
			http.Error(w, "forbidden: Origin not allowed", http.StatusForbidden)
			return
		}
		if !s.bearerOK(r.Header.Get("Authorization")) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="thrum"`)
			http.Error(w, "unauthorized: send the agent's thrum token as Authorization: Bearer <token>", http.StatusUnauthorized)
			return
		}
		r.Header.Del(postKeyHeader)
		if r.Method == http.MethodDelete {
			if sw, ok := s.sessionWaits.Load(r.Header.Get("Mcp-Session-Id")); ok {
				sw.(*sessionWait).cancel()
			}
		}
		if r.Method == http.MethodPost && r.Header.Get("Mcp-Session-Id") == "" {
			// A POST without a session starts one (initialize).
			s.newSession.Lock()
			defer s.newSession.Unlock()
			if n := s.sessions(); n >= s.opts.MaxHTTPSessions {
				w.Header().Set("Retry-After", "60")
				http.Error(w, fmt.Sprintf("too many MCP sessions (%d, the limit): end one with DELETE, or wait until one idle for %v is closed", n, s.opts.HTTPSessionIdle), http.StatusServiceUnavailable)
				return
			}
		}
		if r.Method == http.MethodPost {
			key := rand.Text()
			r.Header.Set(postKeyHeader, key)
			s.posts.Store(key, r.Context())
			defer s.posts.Delete(key)
		}
		h.ServeHTTP(w, r)
	})
}

// sessions counts the server's open sessions.
func (s *Server) sessions() int {
	n := 0
	for range s.mcp.Sessions() {
		n++
	}
	return n
}

// bearerOK checks an Authorization header against the agent's token, in
// constant time. The scheme is case-insensitive (RFC 9110, 11.1).
func (s *Server) bearerOK(h string) bool {
	scheme, tok, ok := strings.Cut(strings.TrimSpace(h), " ")
	return ok && strings.EqualFold(scheme, "Bearer") && s.id.Token != "" && subtle.ConstantTimeCompare([]byte(strings.TrimSpace(tok)), []byte(s.id.Token)) == 1
}

// requestContext returns ctx, ended also when the HTTP POST that carried
// req closes (the SDK keeps a request running after its stream closes, so
// that a client could resume it; a wait must not outlive its caller).
// A wait also ends when its session is deleted (wait true).
func (s *Server) requestContext(ctx context.Context, req *mcp.CallToolRequest, wait bool) (context.Context, context.CancelFunc) {
	if req == nil || req.Extra == nil || req.Extra.Header == nil || req.Session == nil {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	stop := func() bool { return false }
	if v, ok := s.posts.Load(req.Extra.Header.Get(postKeyHeader)); ok {
		stop = context.AfterFunc(v.(context.Context), cancel)
	}
	if !wait {
		return ctx, func() { stop(); cancel() }
	}
	sid, w := req.Session.ID(), &sessionWait{cancel: cancel}
	s.sessionWaits.Store(sid, w)
	return ctx, func() {
		s.sessionWaits.CompareAndDelete(sid, w)
		stop()
		cancel()
	}
}

type sessionWait struct{ cancel context.CancelFunc }

// roleOf returns an agent's role, "" if unknown.
func (s *Server) roleOf(ctx context.Context, agent string) string {
	roles, _ := s.roster(ctx, agent)
	return roles[agent]
}

// isAgentOrRole reports whether name is a registered agent or a role.
func (s *Server) isAgentOrRole(ctx context.Context, name string) bool {
	roles, known := s.roster(ctx, name)
	_, agent := roles[name]
	return agent || known[name]
}

// rosterMinAge is how old the roster must be before a name it lacks makes
// it refresh: a new agent's first message shows its role, and a group's
// name (never in the roster) costs at most a few listings a second.
const rosterMinAge = 250 * time.Millisecond

// roster returns the cached agents and roles, refreshed when name is in
// neither and the cache is older than rosterMinAge.
func (s *Server) roster(ctx context.Context, name string) (map[string]string, map[string]bool) {
	s.rosterMu.Lock()
	defer s.rosterMu.Unlock()
	_, agent := s.roles[name]
	if s.roles != nil && (agent || s.knownRoles[name] || time.Since(s.rosterAt) < rosterMinAge) {
		return s.roles, s.knownRoles
	}
	r, err := callRPC(ctx, s, func(ctx context.Context, c *rpc.Client) (*rpc.ListAgentsResult, error) {
		return c.ListAgents(ctx, &rpc.ListAgentsParams{})
	})
	s.rosterAt = time.Now()
	if err != nil {
		s.log.Debug("mcpserver: list agents for roles", "err", err)
		return s.roles, s.knownRoles
	}
	s.roles, s.knownRoles = map[string]string{}, map[string]bool{}
	for _, a := range r.Agents {
		s.roles[a.AgentID] = a.Role
		if a.Role != "" {
			s.knownRoles[a.Role] = true
		}
	}
	return s.roles, s.knownRoles
}

// Close ends the daemon connection, stops reconnecting and closes the
// sessions HTTPHandler keeps, which a client that never sends DELETE
// would otherwise leave running until they are idle for
// Options.HTTPSessionIdle. A session Run or ServeStdio serves stays
// open, its calls failing cleanly, until its transport ends. It is
// idempotent.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	c := s.client
	close(s.stopRec)
	s.mu.Unlock()
	s.EndWaits()
	if c != nil {
		c.Close()
	}
	<-s.recDone
	for ss := range s.mcp.Sessions() {
		if ss.ID() != "" { // a Streamable HTTP session (Run's and ServeStdio's have no ID)
			ss.Close()
		}
	}
	return nil
}

// connect dials, authenticates and subscribes. subAt is a time before
// the subscription began: messages created after it are pushed.
func (s *Server) connect(ctx context.Context) (_ *rpc.Client, subAt time.Time, _ error) {
	c, err := s.dial(ctx, s.onNotification)
	if err != nil {
		return nil, subAt, fmt.Errorf("mcpserver: connect to thrum: %w", err)
	}
	if _, err := c.Auth(ctx, &rpc.AuthParams{AgentID: s.id.AgentID, Token: s.id.Token}); err != nil {
		c.Close()
		return nil, subAt, fmt.Errorf("mcpserver: authenticate as %s: %w", s.id.AgentID, err)
	}
	subAt = time.Now()
	if _, err := c.Subscribe(ctx, &rpc.SubscribeParams{MentionRole: s.id.AgentID}); err != nil {
		c.Close()
		return nil, subAt, fmt.Errorf("mcpserver: subscribe: %w", err)
	}
	if err := s.subscribeAcks(ctx, c); err != nil {
		s.log.Warn("mcpserver: subscribing to acknowledgements", "err", err)
	}
	return c, subAt, nil
}

// advance moves since forward to t.
func (s *Server) advance(t time.Time) {
	s.sinceMu.Lock()
	if t.After(s.since) {
		s.since = t
	}
	s.sinceMu.Unlock()
}

// catchUp queues what was sent while the server was disconnected: the
// unread messages addressed to this agent created after cutoff, oldest
// first, at most a queue's worth. Notifications are not replayed, so a
// resubscribed server re-reads them (DESIGN.md), or wait_for_message would
// never see them.
func (s *Server) catchUp(ctx context.Context, c *rpc.Client, cutoff time.Time) {
	const pageSize = 100
	var missed []string
	for page := 1; len(missed) < s.opts.QueueSize; page++ {
		r, err := c.ListMessages(ctx, &rpc.ListMessagesParams{Mentions: true, Unread: true, PageSize: pageSize, Page: page, SortOrder: "desc"})
		if err != nil {
			s.log.Warn("mcpserver: re-read messages missed while disconnected", "err", err)
			break
		}
		done := len(r.Messages) < pageSize
		for _, m := range r.Messages {
			if t, err := time.Parse(time.RFC3339Nano, m.CreatedAt); err == nil && !t.After(cutoff) {
				done = true
				break
			}
			missed = append(missed, m.MessageID)
		}
		if done {
			break
		}
	}
	if len(missed) > s.opts.QueueSize {
		missed = missed[:s.opts.QueueSize]
	}
	slices.Reverse(missed)
	if n := s.queue.pushAll(missed); n > 0 {
		s.log.Info("mcpserver: queued messages sent while disconnected", "count", n)
	}
}

func (s *Server) setClient(c *rpc.Client) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.client = c
	close(s.ready)
}

// reconnectLoop watches the connection and replaces it when it drops,
// with backoff, until Close.
func (s *Server) reconnectLoop() {
	defer close(s.recDone)
	for {
		s.mu.Lock()
		c := s.client
		s.mu.Unlock()
		select {
		case <-s.stopRec:
			return
		case <-c.Done():
		}
		s.mu.Lock()
		if s.client == c { // conn may have noticed first and done this
			s.client, s.ready = nil, make(chan struct{})
		}
		s.mu.Unlock()
		s.log.Warn("mcpserver: lost the thrum connection; reconnecting", "err", c.Err())
		s.sinceMu.Lock()
		cutoff := s.since
		s.sinceMu.Unlock()
		backoff := 50 * time.Millisecond
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			nc, subAt, err := s.connect(ctx)
			if err == nil {
				s.catchUp(ctx, nc, cutoff)
			}
			cancel()
			if err == nil {
				s.setClient(nc)
				s.advance(subAt)
				s.queue.wake() // a waiter may have missed notifications: it re-checks
				s.log.Info("mcpserver: reconnected to thrum")
				break
			}
			s.log.Debug("mcpserver: reconnect failed", "err", err)
			select {
			case <-s.stopRec:
				return
			case <-time.After(backoff):
			}
			if backoff < 2*time.Second {
				backoff *= 2
			}
		}
	}
}

// conn returns the current connection, waiting a bounded time for a
// reconnect in progress.
func (s *Server) conn(ctx context.Context) (*rpc.Client, error) {
	s.mu.Lock()
	c, ready, closed := s.client, s.ready, s.closed
	s.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("%w: the MCP server is shutting down", errUnreachable)
	}
	if c != nil {
		select {
		case <-c.Done():
			// Dropped, and the reconnect loop has not noticed yet: wait for
			// it rather than hand out a dead connection.
			s.mu.Lock()
			if s.client == c {
				s.client, s.ready = nil, make(chan struct{})
			}
			ready = s.ready
			s.mu.Unlock()
		default:
			return c, nil
		}
	}
	t := time.NewTimer(5 * time.Second)
	defer t.Stop()
	select {
	case <-ready:
		return s.conn(ctx)
	case <-t.C:
		return nil, errUnreachable
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// onNotification queues notification.message pushes for the waiter. It
// runs on the client's read goroutine and never blocks.
func (s *Server) onNotification(method string, params json.RawMessage) {
	switch method {
	case rpc.NotificationClaimed:
		s.onClaimed(params)
		return
	case rpc.NotificationReceipt:
		s.onReceipt(params)
		return
	}
	if method != rpc.NotificationMessage {
		return
	}
	var n rpc.MessageNotification
	if err := json.Unmarshal(params, &n); err != nil {
		s.log.Warn("mcpserver: bad notification", "err", err)
		return
	}
	s.queue.push(n.MessageID)
	if t, err := time.Parse(time.RFC3339Nano, n.Timestamp); err == nil {
		s.advance(t)
	}
}
