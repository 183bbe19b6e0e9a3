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
	"os/exec"
	"strings"
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
	HTTP        string `name:"http" placeholder:"ADDR" help:"Serve Streamable HTTP on this loopback address (e.g. 127.0.0.1:8765) instead of stdio."`
	Channel     bool   `help:"Be a Claude Code channel: push each message to the session as it arrives (or THRUM_CHANNEL=1). Stdio only."`
	Wake        string `placeholder:"HOST" help:"Wake the idle session of this host when mail comes: claude (its messaging socket) or codex (codex queue). thrum setup writes it. Stdio only."`
	NoAutostart bool   `name:"no-autostart" help:"Do not start the daemon when none runs: wait for one."`
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

It does not exit while the host needs it. With no daemon running, it
starts one where thrum init has run (not with --no-autostart), so the
daemon comes back after a reboot with the first session; such a daemon
syncs only to the remote thrum init told you of. Else
it waits for one, and its tools answer "unavailable" until it comes.
With no identity to act as (two identity files and no THRUM_NAME, or
none), it stays up and every tool says which identities there are and
how to name one.

With --wake claude or --wake codex (thrum setup writes it), the server
wakes the agent's idle session when mail comes, with a line of its own
as the next prompt — "thrum: 2 new messages (newest msg_… from bob); call
check_messages" — once per batch of mail; it claims nothing, and the
messages arrive through the prompt's hook or check_messages. Claude Code:
the session's messaging socket (CLAUDE_CODE_MESSAGING_SOCKET and _TOKEN,
which the session gives the server). Codex: codex queue --thread=SESSION,
the session named by thrum's SessionStart hook, while its TUI is open. A
ring that fails ends the waking; the mail waits for the next session.

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
  thrum mcp serve --wake claude
  thrum mcp serve --agent-id alice
  thrum mcp serve --channel
  thrum mcp serve --http 127.0.0.1:8765`
}

func (c *McpServeCmd) Run(ctx context.Context, g *Globals) error {
	if c.Channel && c.HTTP != "" {
		return withCode(exitUsage, "--channel works over stdio only: drop --http")
	}
	if c.Wake != "" && c.HTTP != "" {
		return withCode(exitUsage, "--wake works over stdio only: drop --http")
	}
	if c.Wake != "" && c.Wake != "claude" && c.Wake != "codex" {
		return withCode(exitUsage, "--wake %q: give claude or codex", c.Wake)
	}
	srv, f, logger, err := c.server(ctx, g)
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
	logger.Warn("thrum MCP server on Streamable HTTP", "url", fmt.Sprintf("http://%s/", ln.Addr()), "agent", f)
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

// server makes the MCP server: acting as the agent resolved (see
// resolveAgent) and connecting to its daemon in the background — starting
// it first, unless told not to, where none runs — or, with no agent to
// act as, one whose every tool says why. It returns the agent's name ("":
// none) and the logger it logs to (stderr: stdout may be a wire).
func (c *McpServeCmd) server(ctx context.Context, g *Globals) (*mcpserver.Server, string, *slog.Logger, error) {
	o := &mcpserver.Options{Channel: c.Channel, Lazy: true, Version: thrum.Version, Logger: agentLogger(g)}
	a, err := resolveAgent(ctx, g, false)
	if err != nil {
		o.Logger.Warn("thrum mcp serve: no agent to act as; every tool says why until the server is restarted with one", "err", err)
		o.Refuse = func() error { return noAgent(ctx, g) }
		srv, err := mcpserver.New(ctx, nil, mcpserver.Identity{}, o)
		return srv, "", o.Logger, err
	}
	switch c.Wake {
	case "claude":
		o.Wake = claudeWaker(g.env, a.logger)
	case "codex":
		o.Wake = codexWaker(a, time.Now())
	}
	c.ensureDaemon(ctx, g, a)
	srv, err := mcpserver.New(ctx, a.dial, a.id(), o)
	if err != nil {
		return nil, "", nil, err
	}
	return srv, a.f.AgentID, a.logger, nil
}

// noAgent is the error of every tool of a server with no agent to act as:
// why, the identities there are, and how to name one.
func noAgent(ctx context.Context, g *Globals) error {
	msg := "thrum has no agent to act as here"
	l, err := resolveLayout(ctx, g)
	if err == nil {
		_, _, err = identity.Resolve(l.IDs, g.selector())
	}
	if err != nil {
		msg += ": " + err.Error()
	}
	var names []string
	if l != nil {
		if fs, err := identity.List(l.IDs); err == nil {
			for _, f := range fs {
				names = append(names, f.AgentID)
			}
		}
	}
	hint := "set THRUM_NAME to one of them in this MCP server's environment, or add --agent-id NAME to its arguments, then restart the server"
	switch {
	case len(names) > 0:
		if list := strings.Join(names, ", "); !strings.Contains(msg, list) {
			msg += " (identities here: " + list + ")"
		}
	default:
		hint = "register an agent in this repository (thrum quickstart --name NAME --role ROLE --module MODULE), then restart the server; with several, set THRUM_NAME or --agent-id NAME"
	}
	return &mcpserver.ToolError{Code: "no_identity", Message: msg, Hint: hint}
}

// ensureDaemon starts the daemon of a's repository in the background when
// none answers, where thrum init has run, unless --no-autostart; the
// server's inbox connects when it answers. Otherwise the inbox waits for
// one. Init is never run from here.
func (c *McpServeCmd) ensureDaemon(ctx context.Context, g *Globals, a *agent) {
	if _, err := health(ctx, a.l); err == nil {
		return
	}
	if c.NoAutostart {
		a.logger.Warn("no thrum daemon is running; waiting for one (start it with `thrum daemon start`)", "repo", a.l.Root)
		return
	}
	if _, err := os.Stat(a.l.LogDir); err != nil {
		a.logger.Warn("no thrum daemon is running and thrum init has not run here; waiting for a daemon (run `thrum init`, then `thrum daemon start`)", "repo", a.l.Root)
		return
	}
	exe, err := os.Executable()
	if err != nil {
		a.logger.Warn("no thrum daemon is running, and it cannot be started from here; waiting for one", "err", err)
		return
	}
	args := []string{"--repo", a.l.Root, "daemon", "start", "--autostarted"}
	if g.Home != "" {
		args = append([]string{"--home", g.Home}, args...)
	}
	cmd := exec.Command(exe, args...)
	cmd.Stdout, cmd.Stderr = g.stderr, g.stderr // never stdout: it is the MCP wire
	cmd.Dir = a.l.Root
	a.logger.Warn("no thrum daemon is running; starting it", "repo", a.l.Root)
	if err := cmd.Start(); err != nil {
		a.logger.Warn("could not start the thrum daemon; waiting for one", "err", err)
		return
	}
	go func() {
		if err := cmd.Wait(); err != nil {
			a.logger.Warn("starting the thrum daemon failed; waiting for one (`thrum daemon start` says why)", "err", err)
		}
	}()
}

// agentLogger writes warnings (with --verbose, debug lines) to stderr.
func agentLogger(g *Globals) *slog.Logger {
	level := slog.LevelWarn
	if g.Verbose {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(g.stderr, &slog.HandlerOptions{Level: level}))
}

// agentInbox resolves the agent (see resolveAgent), first asking the
// daemon whether it runs for a clear error when it does not, and opens
// the agent's inbox on it.
func agentInbox(ctx context.Context, g *Globals) (*inbox.Inbox, *agent, error) {
	a, err := resolveAgent(ctx, g, true)
	if err != nil {
		return nil, nil, err
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
	return inbox.Identity{AgentID: a.f.AgentID, Role: a.f.Role, Token: a.f.Token}
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
	a := &agent{l: l, f: f, logger: agentLogger(g)}
	a.dial = func(ctx context.Context, onNote func(string, json.RawMessage)) (*rpc.Client, error) {
		return rpc.Dial(ctx, l.Socket, &rpc.ClientOptions{Logger: a.logger, OnNotification: onNote})
	}
	return a, nil
}
