// Package mcpserver is thrum's MCP face: an agent's messaging as native
// MCP tools (the MCP contract): send_message, check_messages,
// wait_for_message, list_agents, broadcast_message and six group tools,
// get_message, which shows a message in its conversation, and
// search_messages.
//
// A Server acts as one agent, resolved once by its caller, through an
// inbox.Inbox: the agent's persistent connection to thrum, the claims
// that hand it a message and the doorbells that announce one (package
// inbox). The tools that consume (check_messages, wait_for_message)
// return only what their claim took, each message to exactly one
// consumer of the agent; every message a tool returns is framed
// (internal/frame), its text escaped, in the text content and in
// structuredContent alike.
//
// With Options.Channel, Run is also a Claude Code channel (channel.go):
// it rings the agent's doorbell in the session — who sent what, and how
// many wait — and claims nothing, since a host may drop what it is sent.
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
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/thrumhq/thrum/inbox"
	"github.com/thrumhq/thrum/internal/jsonrpc"
)

// Defaults of Options.
const (
	DefaultQueueSize   = inbox.DefaultQueueSize
	DefaultWaitTimeout = 300 * time.Second
	MaxWaitTimeout     = 3600 * time.Second
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

// Dialer opens a connection to thrum (inbox.Dialer).
type Dialer = inbox.Dialer

// Identity is the agent a Server acts as (inbox.Identity).
type Identity = inbox.Identity

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
	// AuthFailureDelay is what a wrong bearer token costs the HTTP
	// request that presented it: its 401 comes this much later, the
	// connection held, as on the daemon's loopback port. Default
	// jsonrpc.DefaultAuthFailureDelay.
	AuthFailureDelay time.Duration
	// Lazy starts the server without a connection to thrum
	// (inbox.Options.Lazy): it serves at once, and its tools fail with
	// "unavailable" until a daemon answers.
	Lazy bool
	// Channel makes the server a Claude Code channel (channel.go): it
	// declares the capability, negotiates only protocol versions of the
	// initialize handshake, and Run rings the agent's doorbell in the
	// session as notifications/claude/channel. It claims nothing. Only
	// Run and ServeStdio ring, for one session at a time; HTTPHandler
	// does not.
	Channel bool
	// Wake rings an idle session of the agent's host awake (wake.go):
	// once the client has spoken, Run and ServeStdio call it with
	// inbox.Doorbell.Wake's line for each batch of new mail. It claims
	// nothing. Its error ends the waking: the session is gone or refuses
	// the ring, and the mail waits for the next session.
	Wake func(ctx context.Context, text string) error
	// Refuse, if set, makes a server that acts as no agent: New connects
	// to nothing and every tool call fails with Refuse's error, for a
	// server that stays up to say why it cannot act (an identity it
	// could not resolve).
	Refuse func() error
}

// Server is an MCP server acting as one agent. Its methods may be called
// concurrently.
type Server struct {
	ib   *inbox.Inbox
	opts Options
	mcp  *mcp.Server
	log  *slog.Logger

	// mu guards the bookkeeping of sessions and requests below and each
	// Run's unanswered waits (answer.go). It is taken after no other lock
	// and held across no call: to the inbox, the SDK's sessions or a
	// write (DESIGN.md, "Reaching agents in their hosts").
	mu sync.Mutex
	// posts maps the key given to each HTTP POST (postKeyHeader) to the
	// POST's context: a wait ends when the stream carrying it closes.
	posts map[string]context.Context
	// sessionWaits maps an HTTP session ID to the cancel of its wait: a
	// DELETE of the session ends it (the SDK's own close would wait for it).
	sessionWaits map[string]*sessionWait
	// starting counts the requests that start an HTTP session being
	// served, so that MaxHTTPSessions holds while they are.
	starting int
}

// New connects to thrum through dial as id (inbox.New) and returns a
// Server with its 13 tools registered. With Options.Refuse it connects to
// nothing; dial and id are not used.
func New(ctx context.Context, dial Dialer, id Identity, opts *Options) (*Server, error) {
	s := &Server{posts: map[string]context.Context{}, sessionWaits: map[string]*sessionWait{}}
	if opts != nil {
		s.opts = *opts
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
	if s.opts.AuthFailureDelay <= 0 {
		s.opts.AuthFailureDelay = jsonrpc.DefaultAuthFailureDelay
	}
	s.log = s.opts.Logger
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.opts.Refuse != nil {
		s.opts.Channel, s.opts.Wake = false, nil
		s.mcp = mcp.NewServer(&mcp.Implementation{Name: "thrum", Title: "thrum messaging", Version: s.opts.Version},
			&mcp.ServerOptions{Instructions: "thrum cannot act as an agent here: every tool says why.", Capabilities: &mcp.ServerCapabilities{}})
		s.register()
		return s, nil
	}
	if id.AgentID == "" {
		return nil, errors.New("mcpserver: identity has no agent ID")
	}
	ib, err := inbox.New(ctx, dial, id, &inbox.Options{Logger: s.opts.Logger, QueueSize: s.opts.QueueSize, Lazy: s.opts.Lazy})
	if err != nil {
		return nil, fmt.Errorf("mcpserver: %w", err)
	}
	s.ib = ib
	so := &mcp.ServerOptions{
		Instructions: "You are agent " + id.AgentID + " (role " + id.Role + "). Use check_messages for your backlog and " +
			"wait_for_message to block until a message arrives (each message is returned once, to one of them); " +
			"send_message addresses @role, a name, @group or @everyone; get_message shows a conversation.",
		Capabilities: &mcp.ServerCapabilities{},
	}
	if s.opts.Channel {
		so.Instructions += " When messages for you arrive, a <channel source=\"thrum\"> event announces them: who sent " +
			"what, and how many wait. It marks nothing read: call check_messages to read them."
		so.Capabilities.Experimental = map[string]any{ChannelCapability: map[string]any{}}
		so.SupportedProtocolVersions = channelVersions()
	}
	s.mcp = mcp.NewServer(&mcp.Implementation{Name: "thrum", Title: "thrum messaging", Version: s.opts.Version}, so)
	s.register()
	return s, nil
}

// MCP returns the underlying go-sdk server.
func (s *Server) MCP() *mcp.Server { return s.mcp }

// Run serves MCP on t (see ServeStdio) until the client disconnects or
// ctx ends. When ctx ends, a pending wait_for_message is answered first
// (status "shutdown", see EndWaits), so Run returns at once with the
// answer sent.
//
// With Options.Channel, Run also rings the agent's doorbell in the
// session once the client is initialized (channel.go).
func (s *Server) Run(ctx context.Context, t mcp.Transport) error {
	run, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	tr := newAnswering(t, s)
	var rung []chan struct{} // closed as each ringer ends
	ringCtx, stopRing := context.WithCancel(run)
	defer stopRing()
	ringer := func(f func()) {
		done := make(chan struct{})
		rung = append(rung, done)
		go func() {
			defer close(done)
			f()
		}()
	}
	if s.opts.Channel {
		tr.ch = newChannel()
		ringer(func() { s.ring(ringCtx, tr.ch) })
	}
	if s.opts.Wake != nil {
		ringer(func() { s.wake(ringCtx, tr.heard) })
	}
	stop := context.AfterFunc(ctx, func() {
		s.EndWaits()
		tr.awaitAnswers(shutdownGrace)
		cancel()
	})
	defer stop()
	err := s.mcp.Run(run, tr)
	stopRing()
	for _, done := range rung {
		<-done
	}
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
	if s.ib != nil {
		s.ib.End()
	}
}

// postKeyHeader carries, from HTTPHandler to the tool handlers, the key of
// the HTTP POST that brought a request. A client's own value is replaced.
const postKeyHeader = "X-Thrum-Post-Key"

// HTTPHandler serves MCP over Streamable HTTP. Mount it on a loopback
// listener. Like the daemon's WebSocket it refuses (403) a Host that is
// not loopback (DNS rebinding) and an Origin that is not a loopback page,
// and it requires the agent's token as a bearer (401, after
// Options.AuthFailureDelay): the port is open to every local user and
// every page a local browser shows. A server
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
			// Guessing costs the guesser: the answer waits, even if it
			// hangs up, while every right token is answered at once.
			time.Sleep(s.opts.AuthFailureDelay)
			w.Header().Set("WWW-Authenticate", `Bearer realm="thrum"`)
			http.Error(w, "unauthorized: send the agent's thrum token as Authorization: Bearer <token>", http.StatusUnauthorized)
			return
		}
		r.Header.Del(postKeyHeader)
		if r.Method == http.MethodDelete {
			s.mu.Lock()
			sw := s.sessionWaits[r.Header.Get("Mcp-Session-Id")]
			s.mu.Unlock()
			if sw != nil {
				sw.cancel()
			}
		}
		if r.Method == http.MethodPost && r.Header.Get("Mcp-Session-Id") == "" {
			// A POST without a session starts one (initialize).
			n := s.sessions()
			s.mu.Lock()
			if n+s.starting >= s.opts.MaxHTTPSessions {
				s.mu.Unlock()
				w.Header().Set("Retry-After", "60")
				http.Error(w, fmt.Sprintf("too many MCP sessions (%d, the limit): end one with DELETE, or wait until one idle for %v is closed", n, s.opts.HTTPSessionIdle), http.StatusServiceUnavailable)
				return
			}
			s.starting++
			s.mu.Unlock()
			// The session exists once the SDK answers: from its first
			// byte the session counts itself, and a client that has read
			// the answer may start the next one before this handler ends.
			started := false
			release := func() {
				s.mu.Lock()
				if !started {
					started = true
					s.starting--
				}
				s.mu.Unlock()
			}
			defer release()
			w = &answerHook{ResponseWriter: w, answer: release}
		}
		if r.Method == http.MethodPost {
			key := rand.Text()
			r.Header.Set(postKeyHeader, key)
			s.mu.Lock()
			s.posts[key] = r.Context()
			s.mu.Unlock()
			defer func() {
				s.mu.Lock()
				delete(s.posts, key)
				s.mu.Unlock()
			}()
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
	if s.ib == nil {
		return false
	}
	token := s.ib.ID().Token
	return ok && strings.EqualFold(scheme, "Bearer") && token != "" && subtle.ConstantTimeCompare([]byte(strings.TrimSpace(tok)), []byte(token)) == 1
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
	s.mu.Lock()
	post := s.posts[req.Extra.Header.Get(postKeyHeader)]
	s.mu.Unlock()
	if post != nil {
		stop = context.AfterFunc(post, cancel)
	}
	if !wait {
		return ctx, func() { stop(); cancel() }
	}
	sid, w := req.Session.ID(), &sessionWait{cancel: cancel}
	s.mu.Lock()
	s.sessionWaits[sid] = w
	s.mu.Unlock()
	return ctx, func() {
		s.mu.Lock()
		if s.sessionWaits[sid] == w {
			delete(s.sessionWaits, sid)
		}
		s.mu.Unlock()
		stop()
		cancel()
	}
}

type sessionWait struct{ cancel context.CancelFunc }

// Close ends the daemon connection, stops reconnecting and closes the
// sessions HTTPHandler keeps, which a client that never sends DELETE
// would otherwise leave running until they are idle for
// Options.HTTPSessionIdle. A session Run or ServeStdio serves stays
// open, its calls failing cleanly, until its transport ends. It is
// idempotent.
func (s *Server) Close() error {
	if s.ib != nil {
		s.ib.Close()
	}
	for ss := range s.mcp.Sessions() {
		if ss.ID() != "" { // a Streamable HTTP session (Run's and ServeStdio's have no ID)
			ss.Close()
		}
	}
	return nil
}

// answerHook calls answer before the first byte of a response is
// written.
type answerHook struct {
	http.ResponseWriter
	answer func()
}

func (w *answerHook) WriteHeader(code int) {
	w.answer()
	w.ResponseWriter.WriteHeader(code)
}

func (w *answerHook) Write(b []byte) (int, error) {
	w.answer()
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the writer's Flush.
func (w *answerHook) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush keeps a streamed answer streaming.
func (w *answerHook) Flush() {
	w.answer()
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
