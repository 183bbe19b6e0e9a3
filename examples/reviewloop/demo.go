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
	remote, wt := filepath.Join(root, "remote.git"), filepath.Join(root, "alice")
	for _, step := range [][]string{
		{root, "init", "--quiet", "--bare", "-b", "main", remote},
		{root, "clone", "--quiet", remote, wt},
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
	edit := func(n int) error {
		if err := os.WriteFile(filepath.Join(wt, "parser.go"), []byte(fmt.Sprintf("package parser\n\n// revision %d\n", n)), 0o644); err != nil {
			return err
		}
		if _, err := git(ctx, wt, "add", "parser.go"); err != nil {
			return err
		}
		_, err := git(ctx, wt, "commit", "--quiet", "-m", fmt.Sprintf("parser: revision %d", n))
		return err
	}

	app, err := OpenApp(ctx, filepath.Join(root, "data"), Config{MaxIterations: maxIt})
	if err != nil {
		return err
	}
	defer app.Close()
	sessions := map[string]*mcp.ClientSession{}
	for _, a := range []struct{ name, role, wt string }{{"alice", "coder", wt}, {"bob", "reviewer", ""}} {
		if err := app.Join(ctx, a.name, a.role, a.wt); err != nil {
			return err
		}
		s, err := app.Serve(ctx, a.name)
		if err != nil {
			return err
		}
		defer s.Close()
		st, ct := mcp.NewInMemoryTransports()
		sctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); s.Run(sctx, st) }()
		defer func() { cancel(); <-done }()
		cs, err := mcp.NewClient(&mcp.Implementation{Name: a.name}, nil).Connect(ctx, ct, nil)
		if err != nil {
			return err
		}
		defer cs.Close()
		sessions[a.name] = cs
	}
	call := func(agent, tool string, args map[string]any) (map[string]any, error) {
		in, _ := json.Marshal(args)
		if args == nil {
			in = []byte("{}")
		}
		fmt.Fprintf(w, "\n%s -> %s %s\n", agent, tool, in)
		r, err := sessions[agent].CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
		if err != nil {
			return nil, err
		}
		b, _ := json.Marshal(r.StructuredContent)
		verdict := "ok"
		if r.IsError {
			verdict = "REFUSED"
		}
		fmt.Fprintf(w, "  %s: %s\n", verdict, b)
		var out map[string]any
		json.Unmarshal(b, &out)
		return out, nil
	}

	for it := 1; it <= maxIt+1; it++ {
		if err := edit(it); err != nil {
			return err
		}
		if _, err := call("alice", "request_review", map[string]any{"completion_message": fmt.Sprintf("Parser revision %d is ready.", it)}); err != nil {
			return err
		}
		if it > maxIt {
			break
		}
		if it == 1 {
			if _, err := call("alice", "send_feedback", map[string]any{"coder": "alice", "feedback": "Looks fine to me.", "feedback_type": "approved"}); err != nil {
				return err
			}
		}
		kind, items := "needs_work", []string{"reject empty input", "add a fuzz test"}
		if it == maxIt {
			kind, items = "approved", nil
		}
		args := map[string]any{"feedback": fmt.Sprintf("Revision %d: the empty input still panics.", it), "feedback_type": kind, "priority": "high"}
		if kind == "approved" {
			args["feedback"] = fmt.Sprintf("Revision %d handles every case I tried. Approved.", it)
		}
		if items != nil {
			args["actionable_items"] = items
		}
		if _, err := call("bob", "send_feedback", args); err != nil {
			return err
		}
		if _, err := call("alice", "wait_for_message", map[string]any{"timeout": 5}); err != nil {
			return err
		}
	}
	if _, err := call("alice", "create_pull_request", map[string]any{"title": "Parser", "description": "Reviewed in " + fmt.Sprint(maxIt) + " iterations."}); err != nil {
		return err
	}
	if _, err := call("alice", "review_status", nil); err != nil {
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
