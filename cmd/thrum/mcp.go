package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/identity"
	"github.com/thrumhq/thrum/inbox"
	"github.com/thrumhq/thrum/mcpserver"
	"github.com/thrumhq/thrum/rpc"
)

// McpCmd groups the MCP server.
type McpCmd struct {
	Serve McpServeCmd `cmd:"" help:"Serve the thrum tools to an agent over stdio (or Streamable HTTP)."`
}

// McpServeCmd runs the MCP server for one agent.
type McpServeCmd struct {
	HTTP    string `name:"http" placeholder:"ADDR" help:"Serve Streamable HTTP on this loopback address (e.g. 127.0.0.1:8765) instead of stdio."`
	Channel bool   `help:"Be a Claude Code channel: push each message to the session as it arrives (or THRUM_CHANNEL=1). Stdio only."`
}

func (c *McpServeCmd) Help() string {
	return `Resolves the agent once at start: --agent-id, then THRUM_NAME, then the
single identity file in .thrum/identities. Talks to the daemon over one
Unix-socket connection, which also carries the push notifications that
wake wait_for_message; reconnects if the daemon restarts. Logs go to
stderr only: stdout is the MCP wire. A malformed line on stdin is answered
with a JSON-RPC error; the server stays up.

Each message reaches the agent once: check_messages and wait_for_message
return only what they claimed from the daemon, across every server of the
agent. On SIGTERM a pending wait is answered (status "shutdown") and the
server exits.

With --http, every request must carry the agent's token (the "token" of
its identity file in .thrum/identities) as "Authorization: Bearer <token>";
requests from non-loopback Hosts or foreign Origins are refused.

With --channel, the server is a Claude Code channel: when messages for
the agent arrive (and when the session starts, if some wait) it announces
them in the session (notifications/claude/channel): how many are unread
and the newest by sender and subject, at most once a second. It marks
nothing read, since a session that did not load the channel (claude
--dangerously-load-development-channels server:thrum) drops it unseen:
check_messages or the next prompt's hook reads them.

Claude Code (.mcp.json or .claude/settings.json):
  {"mcpServers": {"thrum": {"type": "stdio", "command": "thrum", "args": ["mcp", "serve"]}}}

Examples:
  thrum mcp serve
  thrum mcp serve --agent-id alice
  thrum mcp serve --channel
  thrum mcp serve --http 127.0.0.1:8765`
}

func (c *McpServeCmd) Run(ctx context.Context, g *Globals) error {
	if c.Channel && c.HTTP != "" {
		return withCode(exitUsage, "--channel works over stdio only: drop --http")
	}
	srv, f, logger, err := agentServer(ctx, g, &mcpserver.Options{Channel: c.Channel})
	if err != nil {
		return err
	}
	defer srv.Close()
	if c.HTTP == "" {
		err := srv.ServeStdio(ctx, os.Stdin, g.stdout)
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	host, _, err := net.SplitHostPort(c.HTTP)
	if ip := net.ParseIP(host); err != nil || (host != "localhost" && (ip == nil || !ip.IsLoopback())) {
		return withCode(exitUsage, "--http %q: use a loopback address such as 127.0.0.1:8765", c.HTTP)
	}
	ln, err := net.Listen("tcp", c.HTTP)
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: srv.HTTPHandler(), ReadHeaderTimeout: 10 * time.Second}
	logger.Warn("thrum MCP server on Streamable HTTP", "url", fmt.Sprintf("http://%s/", ln.Addr()), "agent", f.AgentID)
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case <-ctx.Done():
		// Answer a pending wait first: graceful shutdown waits for it.
		srv.EndWaits()
		sctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		if err := hs.Shutdown(sctx); err != nil {
			return hs.Close() // streams a client keeps open (GET) end here
		}
		return nil
	case err := <-errc:
		return err
	}
}

// agentServer resolves the agent (see resolveAgent) and connects an MCP
// server acting as it to the daemon, with the logger it logs to (stderr:
// stdout may be a wire).
func agentServer(ctx context.Context, g *Globals, opts *mcpserver.Options) (*mcpserver.Server, *identity.File, *slog.Logger, error) {
	a, err := resolveAgent(ctx, g, true)
	if err != nil {
		return nil, nil, nil, err
	}
	o := *opts
	o.Logger, o.Version = a.logger, thrum.Version
	srv, err := mcpserver.New(ctx, a.dial, a.id(), &o)
	if err != nil {
		return nil, nil, nil, a.failed(err)
	}
	return srv, a.f, a.logger, nil
}

// agentInbox resolves the agent (see resolveAgent) and opens its inbox on
// the daemon. checkHealth first asks the daemon whether it runs, for a clear
// error when it does not (a hook, which says nothing, saves the call).
func agentInbox(ctx context.Context, g *Globals, checkHealth bool, logger *slog.Logger) (*inbox.Inbox, *agent, error) {
	a, err := resolveAgent(ctx, g, checkHealth)
	if err != nil {
		return nil, nil, err
	}
	if logger != nil {
		a.logger = logger
	}
	ib, err := inbox.New(ctx, a.dial, a.id(), &inbox.Options{Logger: a.logger})
	if err != nil {
		return nil, nil, a.failed(err)
	}
	return ib, a, nil
}

// agent is the agent a command acts as, and how to reach its daemon.
type agent struct {
	l      *layout
	f      *identity.File
	logger *slog.Logger
	dial   inbox.Dialer
}

func (a *agent) id() inbox.Identity {
	return inbox.Identity{AgentID: a.f.AgentID, Role: a.f.Role, Module: a.f.Module, Token: a.f.Token}
}

// failed is err, the error of connecting as a, with the command that
// mends it when the daemon does not know the agent.
func (a *agent) failed(err error) error {
	var re *rpc.Error
	if errors.As(err, &re) && (re.Code == rpc.CodeNotFound || re.Code == rpc.CodeUnauthenticated) {
		return withCode(exitNoIdentity, "%v: run `thrum quickstart --name %s --role %s --module %s`", err, a.f.AgentID, a.f.Role, a.f.Module)
	}
	return err
}

// resolveAgent resolves the agent — --agent-id or THRUM_NAME, --role,
// else the single identity file of the repository — and the daemon's
// socket, checking (with checkHealth) that a daemon answers there. Its logger
// writes warnings to stderr: stdout may be a wire.
func resolveAgent(ctx context.Context, g *Globals, checkHealth bool) (*agent, error) {
	l, err := resolveLayout(ctx, g)
	if err != nil {
		return nil, err
	}
	if checkHealth {
		if _, err := health(ctx, l); err != nil {
			return nil, withCode(exitNoDaemon, "no daemon is running for %s: start it with `thrum daemon start`", l.Root)
		}
	}
	f, _, err := identity.Resolve(l.IDs, g.selector())
	if err != nil {
		return nil, err
	}
	level := slog.LevelWarn
	if g.Verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(g.stderr, &slog.HandlerOptions{Level: level}))
	a := &agent{l: l, f: f, logger: logger}
	a.dial = func(ctx context.Context, onNote func(string, json.RawMessage)) (*rpc.Client, error) {
		return rpc.Dial(ctx, l.Socket, &rpc.ClientOptions{Logger: a.logger, OnNotification: onNote})
	}
	return a, nil
}
