// Command reviewloop is a review loop for coding agents built on thrum as
// a library: it embeds a thrum node in process and serves each agent an
// MCP server with thrum's messaging tools and its own review tools, with
// an iteration limit, authorization by role and relationship, and an audit
// of every tool call kept in thrum's log. Run it with --help for usage.
package main

import (
	"bufio"
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

	"github.com/thrumhq/thrum"
)

const usage = `reviewloop: a review loop for coding agents, on an embedded thrum node.

A coding agent asks for reviews, a reviewer answers; every call is audited.
One hub process holds the node; each agent's MCP host starts the stdio
bridge, which connects the agent to the hub.

Usage:
  reviewloop serve [flags]                   run the hub (holds the node)
  reviewloop mcp --agent NAME --role ROLE    serve one agent's MCP over stdio
  reviewloop audit [flags]                   print the audit trail
  reviewloop demo [--dir DIR]                run one whole loop in a scratch repository
                                             and print every call, the git log and the audit

serve flags:
  --dir DIR              data directory (thrum log + projection) [.reviewloop]
  --socket PATH          the hub's Unix socket [DIR/hub.sock]
  --max-iterations N     review iterations per coder [3]
  --coding-roles LIST    roles that may request_review and create_pull_request [coder,implementer]
  --review-roles LIST    roles that may send_feedback; the first is the address
                         of review requests (@reviewer) [reviewer]
  --remote NAME          the git remote create_pull_request pushes to [origin]

mcp flags:
  --agent NAME           the agent's name (required)
  --role ROLE            its role, e.g. coder or reviewer (required)
  --worktree DIR         its git worktree (the branch under review) [the current directory]
  --dir, --socket        as for serve

audit flags:
  --dir, --socket        as for serve (asks the hub if it runs, else reads DIR)
  --json                 one JSON record per line

demo flags:
  --dir DIR              keep the repository and data here [a temporary directory, removed]
  --max-iterations N     as for serve [3]

Tools every agent gets (besides thrum's send_message, wait_for_message, ...):
  request_review {completion_message?, reviewer_prompt?}      coding roles
  send_feedback {coder?, feedback, feedback_type, priority?, actionable_items?}
        feedback_type: needs_work|suggestions|clarification|approved;
        reviewers, only for the coder whose review they hold; commits
        REVIEW_FEEDBACK.md on the coder's branch in its worktree
  create_pull_request {title, description, base_branch?, coder?}
        a coding agent its own branch, a reviewer the branch it approved;
        pushes it to the remote and records the request
  review_status {}                                           read-only
  list_audit {tool?, agent?, limit?}                         read-only
Refusals are structured: {code, message, tool_name, agent_id, ...};
REVIEW_LIMIT_EXCEEDED adds current_iteration, max_iterations, suggestions.

MCP configuration (e.g. .mcp.json in each agent's worktree), after
"go build -o ~/bin/reviewloop ./examples/reviewloop" and, in the
repository, "reviewloop serve --dir /path/to/repo/.reviewloop &":

  coding agent:
    {"mcpServers": {"review": {"command": "reviewloop",
      "args": ["mcp", "--dir", "/path/to/repo/.reviewloop", "--agent", "alice", "--role", "coder"]}}}
  review agent:
    {"mcpServers": {"review": {"command": "reviewloop",
      "args": ["mcp", "--dir", "/path/to/repo/.reviewloop", "--agent", "bob", "--role", "reviewer"]}}}
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
	switch args[0] {
	case "serve":
		maxIt := fs.Int("max-iterations", 3, "")
		coding := fs.String("coding-roles", "coder,implementer", "")
		review := fs.String("review-roles", "reviewer", "")
		remote := fs.String("remote", "origin", "")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
		defer stop()
		cfg := Config{MaxIterations: *maxIt, CodingRoles: list(*coding), ReviewRoles: list(*review), PR: GitPush{Remote: *remote}}
		app, err := OpenApp(ctx, *dir, cfg)
		if err != nil {
			return err
		}
		defer app.Close()
		l, err := thrum.ListenUnix(socketPath(*dir, *sock))
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "reviewloop: serving %s on %s\n", *dir, l.Addr())
		return app.ServeHub(ctx, l)
	case "mcp":
		agent := fs.String("agent", "", "")
		role := fs.String("role", "", "")
		wd, _ := os.Getwd()
		worktree := fs.String("worktree", wd, "")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if *agent == "" || *role == "" {
			return errors.New("mcp needs --agent and --role")
		}
		return bridge(ctx, socketPath(*dir, *sock), hello{Agent: *agent, Role: *role, Worktree: *worktree}, stdin, stdout)
	case "audit":
		asJSON := fs.Bool("json", false, "")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		recs, err := readAudit(ctx, *dir, socketPath(*dir, *sock))
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
		} else if err := os.MkdirAll(*dir, 0o755); err != nil {
			return err
		}
		return demo(ctx, *dir, max(*maxIt, 1), stdout)
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q: serve, mcp, audit or demo", args[0])
}

func list(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func socketPath(dir, sock string) string {
	if sock != "" {
		return sock
	}
	return filepath.Join(dir, "hub.sock")
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

// bridge connects stdin and stdout to the hub as one agent.
func bridge(ctx context.Context, sock string, h hello, stdin io.Reader, stdout io.Writer) error {
	c, br, err := dialHub(sock, h)
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
		if uc, ok := c.(*net.UnixConn); ok {
			uc.CloseWrite() // the hub ends the session; its last answers still come back
		}
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func dialHub(sock string, h hello) (net.Conn, *bufio.Reader, error) {
	c, err := net.Dial("unix", sock)
	if err != nil {
		return nil, nil, fmt.Errorf("no reviewloop hub at %s (start one with: reviewloop serve): %w", sock, err)
	}
	b, _ := json.Marshal(h)
	if _, err := c.Write(append(b, '\n')); err != nil {
		c.Close()
		return nil, nil, err
	}
	br := bufio.NewReader(c)
	line, err := br.ReadBytes('\n')
	var r helloReply
	if err == nil {
		err = json.Unmarshal(line, &r)
	}
	if err == nil && !r.OK {
		err = errors.New(r.Error)
	}
	if err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("hub at %s: %w", sock, err)
	}
	if h.Audit {
		c.Close()
		return nil, nil, &auditReply{r.Audit}
	}
	return c, br, nil
}

// auditReply carries the hub's audit out of dialHub.
type auditReply struct{ recs []AuditRecord }

func (*auditReply) Error() string { return "audit" }

// readAudit asks the hub for the audit, or reads it from dir when no hub
// runs.
func readAudit(ctx context.Context, dir, sock string) ([]AuditRecord, error) {
	_, _, err := dialHub(sock, hello{Audit: true})
	var ar *auditReply
	if errors.As(err, &ar) {
		return ar.recs, nil
	}
	hubErr := err
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
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "AT\tAGENT\tROLE\tTOOL\tOUTCOME\tCODE\tARGS")
	for _, r := range recs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.At, r.Agent, r.Role, r.Tool, r.Outcome, r.Code, r.ArgsSHA256[:12])
	}
	return tw.Flush()
}
