package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// demo runs one whole loop in root, in process, and prints each call, its
// answer, the coder's git log and the audit: a bare remote, alice (coder)
// on a branch of a clone, bob (reviewer), both speaking MCP to the app
// over in-memory transports.
func demo(ctx context.Context, root string, maxIt int, w io.Writer) error {
	root, err := filepath.Abs(root) // git runs in each directory (-C), so a relative path would not hold
	if err != nil {
		return err
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	remote, wt := filepath.Join(root, "remote.git"), filepath.Join(root, "alice")
	for _, step := range [][]string{
		{root, "init", "--quiet", "--bare", "-b", "main", "--", remote},
		{root, "clone", "--quiet", "--", remote, wt},
		{wt, "config", "user.name", "Alice"},
		{wt, "config", "user.email", "alice@example.com"},
		{wt, "config", "commit.gpgsign", "false"},
		{wt, "commit", "--quiet", "--allow-empty", "-m", "initial commit"},
		{wt, "push", "--quiet", "origin", "main"},
		{wt, "checkout", "--quiet", "-b", "feature/parser"},
	} {
		if _, err := git(ctx, step[0], step[1:]...); err != nil {
			return err
		}
	}
	app, err := OpenApp(ctx, filepath.Join(root, "data"), Config{MaxIterations: maxIt})
	if err != nil {
		return err
	}
	defer app.Close()
	sessions := map[string]*mcp.ClientSession{}
	for _, a := range []struct{ name, role, wt string }{{"alice", "coder", wt}, {"bob", "reviewer", ""}} {
		cs, stop, err := app.connect(ctx, a.name, a.role, a.wt)
		if err != nil {
			return err
		}
		defer stop()
		sessions[a.name] = cs
	}
	// Each step below does nothing once one has failed; err is checked
	// after the script.
	edit := func(n int) {
		if err == nil {
			err = os.WriteFile(filepath.Join(wt, "parser.go"), fmt.Appendf(nil, "package parser\n\n// revision %d\n", n), 0o644)
		}
		if err == nil {
			_, err = git(ctx, wt, "add", "--", "parser.go")
		}
		if err == nil {
			_, err = git(ctx, wt, "commit", "--quiet", "-m", fmt.Sprintf("parser: revision %d", n))
		}
	}
	call := func(agent, tool string, args map[string]any) {
		if err != nil {
			return
		}
		in, _ := json.Marshal(args)
		fmt.Fprintf(w, "\n%s -> %s %s\n", agent, tool, in)
		var r *mcp.CallToolResult
		if r, err = sessions[agent].CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args}); err != nil {
			return
		}
		b, _ := json.Marshal(r.StructuredContent)
		verdict := "ok"
		if r.IsError {
			verdict = "REFUSED"
		}
		fmt.Fprintf(w, "  %s: %s\n", verdict, b)
	}

	for it := 1; it <= maxIt+1; it++ {
		edit(it)
		call("alice", "request_review", map[string]any{"completion_message": fmt.Sprintf("Parser revision %d is ready.", it)})
		if it > maxIt {
			break
		}
		if it == 1 {
			call("alice", "send_feedback", map[string]any{"coder": "alice", "feedback": "Looks fine to me.", "feedback_type": "approved"})
		}
		fb := map[string]any{"feedback": fmt.Sprintf("Revision %d: the empty input still panics.", it), "feedback_type": "needs_work",
			"priority": "high", "actionable_items": []string{"reject empty input", "add a fuzz test"}}
		if it == maxIt {
			fb = map[string]any{"feedback": fmt.Sprintf("Revision %d handles every case I tried. Approved.", it), "feedback_type": "approved"}
		}
		call("bob", "send_feedback", fb)
		call("alice", "wait_for_message", map[string]any{"timeout": 5})
	}
	call("alice", "create_pull_request", map[string]any{"title": "Parser", "description": fmt.Sprintf("Reviewed in %d iterations.", maxIt)})
	call("alice", "review_status", map[string]any{})
	if err != nil {
		return err
	}

	log, err := git(ctx, wt, "log", "--format=%h %an: %s", "main..HEAD")
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "\nalice's branch (git log main..HEAD):\n  %s\n", strings.ReplaceAll(log, "\n", "\n  "))
	fmt.Fprintf(w, "\n%s in alice's worktree:\n", FeedbackFile)
	b, err := os.ReadFile(filepath.Join(wt, FeedbackFile))
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "  %s\n", strings.ReplaceAll(strings.TrimSpace(string(b)), "\n", "\n  "))
	fmt.Fprintf(w, "\naudit (%s events in the thrum log):\n", typeAudit)
	return printAudit(w, app.state.auditRecords("", "", 0), false)
}

// connect joins an agent and connects an MCP client to its server over
// in-memory transports, as the demo and the tests speak to the loop; stop
// ends the session.
func (a *App) connect(ctx context.Context, name, role, worktree string) (*mcp.ClientSession, func(), error) {
	if err := a.Join(ctx, name, role, worktree); err != nil {
		return nil, nil, err
	}
	s, err := a.Serve(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	st, ct := mcp.NewInMemoryTransports()
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); s.Run(sctx, st) }()
	stop := func() { cancel(); <-done; s.Close() }
	cs, err := mcp.NewClient(&mcp.Implementation{Name: name}, nil).Connect(ctx, ct, nil)
	if err != nil {
		stop()
		return nil, nil, err
	}
	return cs, func() { cs.Close(); stop() }, nil
}
