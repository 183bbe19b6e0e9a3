package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/internal/thrumtest"
)

// loop is a test's review loop: an App and an MCP client session per
// agent, over in-memory transports, and every call made, for the audit.
type loop struct {
	t     *testing.T
	ctx   context.Context
	app   *App
	dir   string
	cs    map[string]*mcp.ClientSession
	calls []AuditRecord // agent, tool and outcome of each call made
}

func newLoop(t *testing.T, cfg Config) *loop {
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	t.Setenv("GIT_CONFIG_GLOBAL", os.DevNull)
	ctx := t.Context()
	dir := t.TempDir()
	app, err := OpenApp(ctx, dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { app.Close() })
	return &loop{t: t, ctx: ctx, app: app, dir: dir, cs: map[string]*mcp.ClientSession{}}
}

// connect joins an agent and connects an MCP client to its server.
func (l *loop) connect(agent, role, worktree string) {
	l.t.Helper()
	cs, stop, err := l.app.connect(l.ctx, agent, role, worktree)
	if err != nil {
		l.t.Fatal(err)
	}
	l.t.Cleanup(stop)
	l.cs[agent] = cs
}

// call calls a tool as agent; want is "ok" or the refusal's code.
func (l *loop) call(agent, tool string, args map[string]any, want string) map[string]any {
	l.t.Helper()
	r, err := l.cs[agent].CallTool(l.ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		l.t.Fatalf("%s %s: %v", agent, tool, err)
	}
	b, _ := json.Marshal(r.StructuredContent)
	var out map[string]any
	json.Unmarshal(b, &out)
	got := "ok"
	if r.IsError {
		got, _ = out["code"].(string)
	}
	if got != want {
		l.t.Fatalf("%s %s(%v) = %s %s, want %s", agent, tool, args, got, b, want)
	}
	sent, _ := json.Marshal(args)
	rec := AuditRecord{Agent: agent, Tool: tool, Args: string(sent), Outcome: "ok"}
	if r.IsError {
		rec.Outcome, rec.Code, rec.Message = "refused", got, fmt.Sprint(out["message"])
		if strings.HasSuffix(got, "_FAILED") { // git failed rather than the call being declined
			rec.Outcome = "error"
		}
		if out["tool_name"] != tool || out["agent_id"] != agent || out["message"] == "" {
			l.t.Errorf("%s %s: refusal lacks its tool, agent or message: %s", agent, tool, b)
		}
	}
	l.calls = append(l.calls, rec)
	return out
}

// worktree clones the remote for an agent, on a branch with one commit.
func worktree(t *testing.T, r *thrumtest.Remote, name, branch string) string {
	wt := r.Clone(name)
	thrumtest.Git(t, wt, "checkout", "-q", "-b", branch)
	if err := os.WriteFile(filepath.Join(wt, name+".go"), []byte("package "+name+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	thrumtest.Git(t, wt, "add", ".")
	thrumtest.Git(t, wt, "commit", "-q", "-m", "work by "+name)
	return wt
}

// TestReviewLoop drives the loop as two coders and two reviewers would,
// over MCP with real git: three iterations then REVIEW_LIMIT_EXCEEDED,
// each feedback a commit on the coder's branch and a message that wakes
// the coder's wait_for_message, the refusals by role and relationship, a
// pull request pushed to the bare remote, and an audit that lists every
// call, refusals included, and survives a restart.
func TestReviewLoop(t *testing.T) {
	l := newLoop(t, Config{MaxIterations: 3})
	remote := thrumtest.GitRemote(t)
	aliceWT := worktree(t, remote, "alice", "feature-a")
	carolWT := worktree(t, remote, "carol", "feature-c")
	l.connect("alice", "coder", aliceWT)
	l.connect("bob", "reviewer", "")
	l.connect("carol", "coder", carolWT)
	l.connect("dave", "reviewer", "")

	// Nothing to answer yet, and the roles are checked before anything.
	l.call("bob", "send_feedback", map[string]any{"coder": "alice", "feedback": "early", "feedback_type": "needs_work"}, "NOT_YOUR_REVIEW")
	l.call("bob", "request_review", nil, "NOT_CODING_AGENT")
	l.call("bob", "send_feedback", map[string]any{"coder": "alice", "feedback": "x", "feedback_type": "great"}, "INVALID_ARGUMENT")
	l.call("bob", "send_message", map[string]any{"to": "@nobody-here", "content": "hello?"}, "NOT_FOUND")

	types := []string{"needs_work", "suggestions", "approved"}
	for it := 1; it <= 3; it++ {
		got := l.call("alice", "request_review", map[string]any{"completion_message": fmt.Sprintf("round %d done", it)}, "ok")
		if got["iteration"] != float64(it) || got["max_iterations"] != float64(3) || got["reviewer"] != "bob" || got["branch_name"] != "feature-a" {
			t.Fatalf("request_review %d: %v", it, got)
		}
		l.call("alice", "request_review", nil, "REVIEW_IN_PROGRESS")
		// A coder may not answer its own review.
		l.call("alice", "send_feedback", map[string]any{"coder": "alice", "feedback": "lgtm", "feedback_type": "approved"}, "NOT_REVIEWER")

		if it == 1 { // the coder's own staged work stays out of the feedback commit
			os.WriteFile(filepath.Join(aliceWT, "alice.go"), []byte("package alice // staged\n"), 0o644)
			thrumtest.Git(t, aliceWT, "add", "alice.go")
		}
		fb := fmt.Sprintf("Round %d: handle the empty input.", it)
		sent := l.call("bob", "send_feedback", map[string]any{"feedback": fb, "feedback_type": types[it-1],
			"priority": "high", "actionable_items": []string{"add a test for empty input"}}, "ok")
		if sent["target_agent_id"] != "alice" || sent["iteration"] != float64(it) || sent["branch_name"] != "feature-a" {
			t.Fatalf("send_feedback %d: %v", it, sent)
		}
		l.call("bob", "send_feedback", map[string]any{"coder": "alice", "feedback": "again", "feedback_type": "needs_work"}, "NO_PENDING_REVIEW")
		if it == 1 { // a reviewer proposes only what it approved
			l.call("bob", "create_pull_request", map[string]any{"title": "x", "description": "y"}, "INVALID_ARGUMENT")
			l.call("bob", "create_pull_request", map[string]any{"coder": "alice", "title": "x", "description": "y"}, "NOT_APPROVED")
		}

		// The coder sees the feedback through git, on its own branch...
		commit, _ := sent["git_commit_hash"].(string)
		if head := thrumtest.Git(t, aliceWT, "rev-parse", "HEAD"); head != commit {
			t.Fatalf("feedback commit %s is not the head of alice's branch (%s)", commit, head)
		}
		if branch := thrumtest.Git(t, aliceWT, "branch", "--contains", commit, "--format=%(refname:short)"); branch != "feature-a" {
			t.Fatalf("feedback commit on branches %q", branch)
		}
		if show := thrumtest.Git(t, aliceWT, "show", "--format=%an|%s", "--name-only", commit); !strings.Contains(show, "bob|Review feedback (iteration "+fmt.Sprint(it)) ||
			!strings.HasSuffix(show, FeedbackFile) {
			t.Fatalf("feedback commit: %q", show)
		}
		if files := thrumtest.Git(t, aliceWT, "show", "--name-only", "--format=", commit); files != FeedbackFile {
			t.Fatalf("feedback commit holds %q", files)
		}
		if staged := thrumtest.Git(t, aliceWT, "diff", "--cached", "--name-only"); staged != "alice.go" {
			t.Fatalf("staged after the feedback commit: %q, want alice.go", staged)
		}
		b, err := os.ReadFile(filepath.Join(aliceWT, FeedbackFile))
		if err != nil || !bytes.Contains(b, []byte(fb)) || !bytes.Contains(b, []byte("- [ ] add a test for empty input")) {
			t.Fatalf("%s: %v\n%s", FeedbackFile, err, b)
		}
		// ...and as a message in the review thread that wakes its wait.
		w := l.call("alice", "wait_for_message", map[string]any{"timeout": 5}, "ok")
		msg, _ := w["message"].(map[string]any)
		if w["status"] != "message_received" || msg == nil || !strings.Contains(fmt.Sprint(msg["content"]), fb) || msg["from"] != "bob" {
			t.Fatalf("alice's wait_for_message: %v", w)
		}
	}

	limit := l.call("alice", "request_review", map[string]any{"completion_message": "one more?"}, "REVIEW_LIMIT_EXCEEDED")
	if limit["current_iteration"] != float64(3) || limit["max_iterations"] != float64(3) {
		t.Fatalf("limit refusal: %v", limit)
	}
	if s, _ := limit["suggestions"].([]any); len(s) == 0 || !strings.Contains(fmt.Sprint(s), "create_pull_request") {
		t.Fatalf("limit refusal suggests %v", limit["suggestions"])
	}

	// Carol's review goes to dave (bob holds one); bob may not answer it.
	got := l.call("carol", "request_review", nil, "ok")
	if got["reviewer"] != "dave" {
		t.Fatalf("carol's review is held by %v, want dave", got["reviewer"])
	}
	l.call("bob", "send_feedback", map[string]any{"coder": "carol", "feedback": "not mine", "feedback_type": "needs_work"}, "NOT_YOUR_REVIEW")

	// The coder at its limit proposes its branch, and so may the reviewer
	// that approved it; nobody else, and not another coder's branch.
	l.call("carol", "create_pull_request", map[string]any{"coder": "alice", "title": "x", "description": "y"}, "NOT_YOUR_BRANCH")
	l.call("dave", "create_pull_request", map[string]any{"coder": "alice", "title": "x", "description": "y"}, "NOT_YOUR_REVIEW")
	pr := l.call("alice", "create_pull_request", map[string]any{"title": "Feature A", "description": "three rounds"}, "ok")
	if ref := thrumtest.Git(t, aliceWT, "ls-remote", remote.Path, "refs/heads/feature-a"); !strings.HasPrefix(ref, fmt.Sprint(pr["commit"])) || pr["commits_ahead"] != float64(4) {
		t.Fatalf("pull request %v; remote has %q", pr, ref)
	}
	if again := l.call("bob", "create_pull_request", map[string]any{"title": "Feature A", "description": "approved"}, "ok"); again["commit"] != pr["commit"] {
		t.Fatalf("bob's pull request %v, alice's %v", again, pr)
	}

	st := l.call("alice", "review_status", nil, "ok")
	rs, _ := st["reviews"].([]any)
	if len(rs) != 1 {
		t.Fatalf("alice's review_status: %v", st)
	}
	r0 := rs[0].(map[string]any)
	lf, _ := r0["last_feedback"].(map[string]any)
	if r0["iteration"] != float64(3) || r0["state"] != "approved" || r0["reviewer"] != "bob" || lf == nil || lf["feedback_type"] != "approved" {
		t.Fatalf("alice's review: %v", r0)
	}
	if prs, _ := r0["pull_requests"].([]any); len(prs) != 2 {
		t.Fatalf("alice's review lists pull requests %v", r0["pull_requests"])
	}

	// The audit has every call above, in order, with its outcome.
	out := l.call("dave", "list_audit", nil, "ok")
	checkAudit(t, out["records"], l.calls[:len(l.calls)-1], 10)

	// It is in thrum's log: a fresh start rebuilds it, and `reviewloop
	// audit` (no hub running) prints it, refusals included.
	l.app.Close()
	var buf bytes.Buffer
	if err := run(l.ctx, []string{"audit", "--dir", l.dir, "--json"}, nil, &buf, io.Discard); err != nil {
		t.Fatal(err)
	}
	var recs []any
	for line := range strings.Lines(buf.String()) {
		var r any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	checkAudit(t, recs, l.calls, 10)
}

// checkAudit compares audit records with the calls made.
func checkAudit(t *testing.T, got any, want []AuditRecord, minRefusals int) {
	t.Helper()
	b, _ := json.Marshal(got)
	var recs []AuditRecord
	if err := json.Unmarshal(b, &recs); err != nil {
		t.Fatal(err)
	}
	if len(recs) != len(want) {
		t.Fatalf("audit has %d records, %d calls were made", len(recs), len(want))
	}
	refusals := 0
	for i, w := range want {
		r := recs[i]
		var args, sent any
		json.Unmarshal([]byte(r.Args), &args)
		json.Unmarshal([]byte(w.Args), &sent)
		if r.Agent != w.Agent || r.Tool != w.Tool || r.Outcome != w.Outcome || r.Code != w.Code || r.Message != w.Message ||
			!reflect.DeepEqual(args, sent) || len(r.ArgsSHA256) != 64 || r.EventID == "" {
			t.Errorf("audit record %d = %+v, want %+v", i, r, w)
		}
		if r.Outcome == "refused" {
			refusals++
		}
	}
	if refusals < minRefusals {
		t.Errorf("audit has %d refusals", refusals)
	}
}

// TestHub serves the hub on a Unix socket and connects an agent through
// the stdio bridge (`reviewloop mcp`), as an MCP host would.
func TestHub(t *testing.T) {
	l := newLoop(t, Config{})
	sock := filepath.Join(thrumtest.SocketDir(t), "hub.sock")
	ctx, cancel := context.WithCancel(l.ctx)
	defer cancel()
	ln, err := thrum.ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	hubDone := make(chan error, 1)
	go func() { hubDone <- l.app.ServeHub(ctx, ln) }()

	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	bridged := make(chan error, 1)
	go func() {
		bridged <- run(ctx, []string{"mcp", "--socket", sock, "--agent", "erin", "--role", "coder", "--worktree", t.TempDir()}, inR, outW, io.Discard)
		outW.Close()
	}()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "host"}, nil).Connect(ctx, &mcp.IOTransport{Reader: outR, Writer: inW}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, tl := range tools.Tools {
		names[tl.Name] = true
	}
	for _, want := range []string{"request_review", "send_feedback", "create_pull_request", "review_status", "list_audit", "wait_for_message"} {
		if !names[want] {
			t.Errorf("the bridged server lacks %s: %v", want, names)
		}
	}
	r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "send_feedback", Arguments: map[string]any{"feedback": "x", "feedback_type": "approved"}})
	if err != nil || !r.IsError {
		t.Fatalf("erin's send_feedback: %v %+v", err, r)
	}
	cs.Close()
	select {
	case err := <-bridged:
		if err != nil {
			t.Fatalf("bridge: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the bridge did not end with its host")
	}

	// While the hub runs, `reviewloop audit` asks it.
	var buf bytes.Buffer
	if err := run(ctx, []string{"audit", "--socket", sock, "--dir", l.dir}, nil, &buf, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "erin") || !strings.Contains(buf.String(), "NOT_REVIEWER") {
		t.Fatalf("audit from the hub:\n%s", buf.String())
	}
	cancel()
	if err := <-hubDone; err != nil {
		t.Fatal(err)
	}
}

// TestHelp: --help documents the commands, the tools and an agent's MCP
// configuration.
func TestHelp(t *testing.T) {
	var buf bytes.Buffer
	if err := run(context.Background(), []string{"--help"}, nil, &buf, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"reviewloop serve", "reviewloop mcp", "reviewloop audit", "reviewloop demo", "--max-iterations", "--remote",
		`"--role", "coder"`, "request_review", "send_feedback", "create_pull_request"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("--help lacks %q", want)
		}
	}
}

// TestDemo runs `reviewloop demo`, the walk-through the README points to,
// in a directory named relative to the current one (and like an option).
func TestDemo(t *testing.T) {
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	t.Setenv("GIT_CONFIG_GLOBAL", os.DevNull)
	t.Chdir(t.TempDir())
	var buf bytes.Buffer
	if err := run(t.Context(), []string{"demo", "--dir", "-demo"}, nil, &buf, io.Discard); err != nil {
		t.Fatalf("%v\n%s", err, buf.String())
	}
	out := buf.String()
	for _, want := range []string{`REFUSED: {"agent_id":"alice","code":"NOT_REVIEWER"`, `"code":"REVIEW_LIMIT_EXCEEDED","current_iteration":3,"max_iterations":3`,
		"bob: Review feedback (iteration 3, approved) from bob", "alice  coder     request_review       refused  REVIEW_LIMIT_EXCEEDED"} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "\n20"); n != 13 { // one audit line per call
		t.Errorf("demo audit has %d lines, want 13:\n%s", n, out)
	}
}
