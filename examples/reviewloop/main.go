// Command reviewloop is a review loop for coding agents built on thrum as
// a library: it embeds a thrum node in process and serves each agent an
// MCP server with thrum's messaging tools and its own review tools, with
// an iteration limit, authorization by role and relationship, and an audit
// of every tool call kept in thrum's log. Run it with --help for usage.
package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/thrumhq/thrum"
)

const usage = `reviewloop: a review loop for coding agents, on an embedded thrum node.

A coding agent asks for reviews, a reviewer answers; every call is audited.
One hub process holds the node; each agent's MCP host starts the stdio
bridge, which connects the agent to the hub.

Usage:
  reviewloop serve [--dir DIR] [--socket PATH] [--max-iterations N] [--remote NAME]
        run the hub: DIR holds the thrum log and projection [.reviewloop],
        PATH is its Unix socket [DIR/hub.sock], N the review iterations per
        coder [3], NAME the git remote create_pull_request pushes to [origin]
  reviewloop mcp --agent NAME --role ROLE [--worktree DIR] [--dir DIR] [--socket PATH]
        serve one agent's MCP over stdio; ROLE is coder or implementer (coding
        agents) or reviewer; DIR is its git worktree [the current directory]
  reviewloop audit [--json] [--dir DIR] [--socket PATH]
        print the audit (from the hub if it runs, else from DIR)
  reviewloop demo [--dir DIR] [--max-iterations N]
        run one whole loop in a scratch repository (kept in DIR if given) and
        print every call, the coder's git log and the audit

Agents get thrum's messaging tools and request_review, send_feedback,
create_pull_request, review_status and list_audit. An agent's MCP host
runs the bridge, e.g. in .mcp.json:

  {"mcpServers": {"review": {"command": "reviewloop",
    "args": ["mcp", "--dir", "/path/to/repo/.reviewloop", "--agent", "alice", "--role", "coder"]}}}
`

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "reviewloop:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, usage)
		if len(args) == 0 {
			return errors.New("no command: serve, mcp, audit or demo")
		}
		return nil
	}
	fs := flag.NewFlagSet("reviewloop "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stdout, usage) }
	dir := fs.String("dir", ".reviewloop", "")
	sock := fs.String("socket", "", "")
	socket := func() string { return cmp.Or(*sock, filepath.Join(*dir, "hub.sock")) }
	switch args[0] {
	case "serve":
		maxIt := fs.Int("max-iterations", 3, "")
		remote := fs.String("remote", "origin", "")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
		defer stop()
		app, err := OpenApp(ctx, *dir, Config{MaxIterations: *maxIt, Remote: *remote})
		if err != nil {
			return err
		}
		defer app.Close()
		l, err := thrum.ListenUnix(socket())
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "reviewloop: serving %s on %s\n", *dir, l.Addr())
		return app.ServeHub(ctx, l)
	case "mcp":
		agent, role := fs.String("agent", "", ""), fs.String("role", "", "")
		worktree := fs.String("worktree", ".", "")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if *agent == "" || *role == "" {
			return errors.New("mcp needs --agent and --role")
		}
		wt, err := filepath.Abs(*worktree) // the hub runs elsewhere
		if err != nil {
			return err
		}
		return bridge(ctx, socket(), hello{Agent: *agent, Role: *role, Worktree: wt}, stdin, stdout)
	case "audit":
		asJSON := fs.Bool("json", false, "")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		recs, err := readAudit(ctx, *dir, socket())
		if err != nil {
			return err
		}
		return printAudit(stdout, recs, *asJSON)
	case "demo":
		maxIt := fs.Int("max-iterations", 3, "")
		*dir = ""
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if *dir == "" {
			tmp, err := os.MkdirTemp("", "reviewloop-demo")
			if err != nil {
				return err
			}
			defer os.RemoveAll(tmp)
			*dir = tmp
		}
		return demo(ctx, *dir, max(*maxIt, 1), stdout)
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q: serve, mcp, audit or demo", args[0])
}

// hello is the first line a bridge sends the hub: who it serves, or that
// it asks for the audit. The hub answers with one helloReply line; MCP
// follows on the same connection.
type hello struct {
	Agent    string `json:"agent,omitempty"`
	Role     string `json:"role,omitempty"`
	Worktree string `json:"worktree,omitempty"`
	Audit    bool   `json:"audit,omitempty"`
}

type helloReply struct {
	OK    bool          `json:"ok"`
	Error string        `json:"error,omitempty"`
	Audit []AuditRecord `json:"audit,omitempty"`
}

// ServeHub serves agents on l until ctx ends: each connection is one
// agent's MCP session. The socket is the owner's (thrum.ListenUnix), so
// whoever connects is trusted to say which agent it is.
func (a *App) ServeHub(ctx context.Context, l net.Listener) error {
	go func() { <-ctx.Done(); l.Close() }()
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		go a.serveConn(ctx, c)
	}
}

func (a *App) serveConn(ctx context.Context, c net.Conn) {
	defer c.Close()
	// The hello is one bounded line, sent at once.
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReaderSize(c, 64<<10)
	line, err := br.ReadSlice('\n')
	if err != nil {
		return
	}
	c.SetReadDeadline(time.Time{})
	var h hello
	reply := func(r helloReply) { b, _ := json.Marshal(r); c.Write(append(b, '\n')) }
	if err := json.Unmarshal(line, &h); err != nil {
		reply(helloReply{Error: "bad hello: " + err.Error()})
		return
	}
	if h.Audit {
		reply(helloReply{OK: true, Audit: a.state.auditRecords("", "", 0)})
		return
	}
	if err := a.Join(ctx, h.Agent, h.Role, h.Worktree); err != nil {
		reply(helloReply{Error: err.Error()})
		return
	}
	s, err := a.Serve(ctx, h.Agent)
	if err != nil {
		reply(helloReply{Error: err.Error()})
		return
	}
	defer s.Close()
	reply(helloReply{OK: true})
	s.ServeStdio(ctx, struct {
		io.Reader
		io.Closer
	}{br, c}, c)
}

// dialHub connects to the hub and says hello; it returns the connection,
// read from after the hub's reply, and the reply.
func dialHub(sock string, h hello) (net.Conn, *bufio.Reader, *helloReply, error) {
	c, err := net.Dial("unix", sock)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("no reviewloop hub at %s (start one with: reviewloop serve): %w", sock, err)
	}
	b, _ := json.Marshal(h)
	_, err = c.Write(append(b, '\n'))
	br := bufio.NewReader(c)
	var r helloReply
	if err == nil {
		b, err = br.ReadBytes('\n')
	}
	if err == nil {
		err = json.Unmarshal(b, &r)
	}
	if err == nil && !r.OK {
		err = errors.New(r.Error)
	}
	if err != nil {
		c.Close()
		return nil, nil, nil, fmt.Errorf("hub at %s: %w", sock, err)
	}
	return c, br, &r, nil
}

// bridge connects stdin and stdout to the hub as one agent.
func bridge(ctx context.Context, sock string, h hello, stdin io.Reader, stdout io.Writer) error {
	c, br, _, err := dialHub(sock, h)
	if err != nil {
		return err
	}
	defer c.Close()
	done := make(chan error, 1)
	go func() {
		_, err := io.Copy(stdout, br)
		done <- err
	}()
	go func() {
		io.Copy(c, stdin)
		c.(*net.UnixConn).CloseWrite() // the hub ends the session; its last answers still come back
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// readAudit asks the hub for the audit, or reads it from dir when no hub
// runs.
func readAudit(ctx context.Context, dir, sock string) ([]AuditRecord, error) {
	c, _, r, hubErr := dialHub(sock, hello{Audit: true})
	if hubErr == nil {
		c.Close()
		return r.Audit, nil
	}
	if _, err := os.Stat(filepath.Join(dir, thrum.DefaultDBName)); err != nil {
		return nil, fmt.Errorf("no reviewloop data in %s: %w", dir, err)
	}
	app, err := OpenApp(ctx, dir, Config{})
	if err != nil {
		return nil, errors.Join(hubErr, err) // e.g. a hub holds dir but did not answer
	}
	defer app.Close()
	return app.state.auditRecords("", "", 0), nil
}

// printAudit prints the records as JSON lines or as a table. The table
// shows what agents sent, so it replaces the characters a terminal would
// act on, and cuts the arguments short.
func printAudit(w io.Writer, recs []AuditRecord, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		for _, r := range recs {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
		return nil
	}
	shown := func(s string, n int) string {
		s = strings.Map(func(r rune) rune {
			if unicode.IsGraphic(r) {
				return r
			}
			return unicode.ReplacementChar
		}, s)
		if r := []rune(s); len(r) > n {
			s = string(r[:n-1]) + "…"
		}
		return s
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "AT\tAGENT\tROLE\tTOOL\tOUTCOME\tCODE\tARGS")
	for _, r := range recs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.At, r.Agent, r.Role, shown(r.Tool, 40), r.Outcome, r.Code, shown(r.Args, 60))
	}
	return tw.Flush()
}
