package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/mcpserver"
	"github.com/thrumhq/thrum/rpc"
	"github.com/thrumhq/thrum/store"
)

// Config configures the review loop.
type Config struct {
	MaxIterations int           // review iterations per coder; default 3
	CodingRoles   []string      // roles that may request reviews; default coder, implementer
	ReviewRoles   []string      // roles that may send feedback; default reviewer
	PR            PullRequester // default GitPush{}
	Module        string        // the thrum module agents register with; default "review"
}

func (c *Config) fill() {
	if c.MaxIterations <= 0 {
		c.MaxIterations = 3
	}
	if len(c.CodingRoles) == 0 {
		c.CodingRoles = []string{"coder", "implementer"}
	}
	if len(c.ReviewRoles) == 0 {
		c.ReviewRoles = []string{"reviewer"}
	}
	if c.PR == nil {
		c.PR = GitPush{}
	}
	if c.Module == "" {
		c.Module = "review"
	}
}

// App is the review loop: an embedded thrum node, the example's read model
// of its own events, and the MCP servers of the agents it serves.
type App struct {
	node  *thrum.Node
	state *state
	cfg   Config
	lock  *os.File
	mu    sync.Mutex // serializes the tools that check state and then write
}

// OpenApp opens (creating) the data directory dir: a thrum node built from
// its parts, so that the example's read model is one of its projections.
// thrum.New takes no lock, so OpenApp takes the directory's own.
func OpenApp(ctx context.Context, dir string, cfg Config) (*App, error) {
	cfg.fill()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	lock, err := os.OpenFile(filepath.Join(dir, thrum.LockFile), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("%s: %w", dir, thrum.ErrLocked)
	}
	st, err := store.Open(filepath.Join(dir, thrum.DefaultDBName), nil)
	if err != nil {
		lock.Close()
		return nil, err
	}
	s := newState()
	p := thrum.NewProjector(st, s)
	lg, err := eventlog.Open(dir, &eventlog.Options{OnCommit: p.Commit})
	if err != nil {
		st.Close()
		lock.Close()
		return nil, err
	}
	n, err := thrum.New(ctx, lg, p, nil) // owns lg and st from here
	if err != nil {
		lock.Close()
		return nil, err
	}
	return &App{node: n, state: s, cfg: cfg, lock: lock}, nil
}

// Close closes the node and releases the directory.
func (a *App) Close() error {
	err := a.node.Close()
	a.lock.Close()
	return err
}

func (a *App) isCoder(role string) bool    { return slices.Contains(a.cfg.CodingRoles, role) }
func (a *App) isReviewer(role string) bool { return slices.Contains(a.cfg.ReviewRoles, role) }

// Join registers the agent with thrum (or finds it registered), starts
// its session, and records its role and worktree for the review tools.
func (a *App) Join(ctx context.Context, name, role, worktree string) error {
	if worktree != "" {
		abs, err := filepath.Abs(worktree)
		if err != nil {
			return err
		}
		worktree = abs
	}
	r, err := a.node.RegisterAgent(ctx, &rpc.RegisterAgentParams{Name: name, Role: role, Module: a.cfg.Module})
	if err != nil {
		return err
	}
	if r.Status == "conflict" {
		return fmt.Errorf("agent %s is registered with another role or module", name)
	}
	if _, err := a.node.StartSession(ctx, &rpc.StartSessionParams{AgentID: r.AgentID}); err != nil {
		return err
	}
	if j, ok := a.state.agent(name); ok && j.Role == role && j.Worktree == worktree {
		return nil
	}
	_, err = a.node.AppendEvent(ctx, typeJoin, join{Agent: name, Role: role, Worktree: worktree})
	return err
}

// Refusal is a structured tool error: the agent may not do this now, and
// the code says why. It is the structuredContent of the failed call.
type Refusal struct {
	Code             string   `json:"code"`
	Message          string   `json:"message"`
	Tool             string   `json:"tool_name"`
	Agent            string   `json:"agent_id"`
	CurrentIteration *int     `json:"current_iteration,omitempty"`
	MaxIterations    *int     `json:"max_iterations,omitempty"`
	Suggestions      []string `json:"suggestions,omitempty"`
}

func (r *Refusal) Error() string { return r.Code + ": " + r.Message }

// failure is an error that is not a refusal (git failed, the node is
// unavailable): audited as an error rather than a refusal.
type failure struct{ Refusal }

func refuse(code, format string, args ...any) *Refusal {
	return &Refusal{Code: code, Message: fmt.Sprintf(format, args...)}
}

func fail(code string, err error) *failure {
	return &failure{Refusal{Code: code, Message: err.Error()}}
}

// Serve builds the MCP server of one joined agent: thrum's messaging
// tools (send_message, wait_for_message, …) on the embedded node, with
// the review tools added, every call audited.
func (a *App) Serve(ctx context.Context, name string) (*thrum.MCPServer, error) {
	j, ok := a.state.agent(name)
	if !ok {
		return nil, fmt.Errorf("agent %s has not joined", name)
	}
	s, err := a.node.MCPServer(ctx, mcpserver.Identity{AgentID: name, Role: j.Role, Module: a.cfg.Module}, nil)
	if err != nil {
		return nil, err
	}
	srv := s.MCP()
	caller := func() join { j, _ := a.state.agent(name); return j }
	addTool(srv, &mcp.Tool{Name: "request_review", Description: "Ask for a review of your branch (coding agents only): " +
		"opens or continues your review thread, addressed to @" + a.cfg.ReviewRoles[0] + ". At most " +
		fmt.Sprint(a.cfg.MaxIterations) + " iterations; refused while a review is pending."},
		nil, func(ctx context.Context, in RequestReviewIn) (*RequestReviewOut, error) {
			return a.requestReview(ctx, caller(), in)
		})
	addTool(srv, &mcp.Tool{Name: "send_feedback", Description: "Send feedback on the review you hold (reviewers only): " +
		"posts it to the review thread and commits it as " + FeedbackFile + " on the coder's branch."},
		func(s *jsonschema.Schema) {
			s.Properties["feedback_type"].Enum = []any{"needs_work", "suggestions", "clarification", "approved"}
			s.Properties["priority"].Enum = []any{"critical", "high", "normal", "low"}
		},
		func(ctx context.Context, in SendFeedbackIn) (*SendFeedbackOut, error) {
			return a.sendFeedback(ctx, caller(), in)
		})
	addTool(srv, &mcp.Tool{Name: "create_pull_request", Description: "Propose a branch for merging: a coding agent its own, " +
		"a reviewer the branch it approved. Pushes it to the repository's remote and records the request."},
		nil, func(ctx context.Context, in CreatePullRequestIn) (*PullRequest, error) {
			return a.createPullRequest(ctx, caller(), in)
		})
	addTool(srv, &mcp.Tool{Name: "review_status", Description: "Your reviews (read-only): iterations, state, last feedback.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		nil, func(ctx context.Context, _ struct{}) (*ReviewStatusOut, error) { return a.reviewStatus(caller()), nil })
	addTool(srv, &mcp.Tool{Name: "list_audit", Description: "The audit trail (read-only): every tool call of every agent, " +
		"oldest first, with its outcome, refusals included.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		nil, func(ctx context.Context, in ListAuditIn) (*ListAuditOut, error) {
			return &ListAuditOut{Records: a.state.auditRecords(in.Tool, in.Agent, in.Limit)}, nil
		})
	srv.AddReceivingMiddleware(a.audit(name))
	return s, nil
}

// addTool registers a tool whose handler returns its output or an error.
func addTool[In, Out any](srv *mcp.Server, t *mcp.Tool, edit func(*jsonschema.Schema), h func(context.Context, In) (*Out, error)) {
	in, err := jsonschema.For[In](nil)
	if err != nil {
		panic(err)
	}
	if edit != nil {
		edit(in)
	}
	t.InputSchema = in
	mcp.AddTool(srv, t, func(ctx context.Context, _ *mcp.CallToolRequest, args In) (*mcp.CallToolResult, Out, error) {
		out, err := h(ctx, args)
		if err != nil {
			var zero Out
			return nil, zero, err
		}
		return nil, *out, nil
	})
}

// audit is the outermost middleware of an agent's server: it records
// every tools/call, review tools and thrum's alike, as an audit event,
// and gives a refused call its Refusal as structured content.
func (a *App) audit(agent string) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			p, ok := req.GetParams().(*mcp.CallToolParamsRaw)
			if method != "tools/call" || !ok {
				return next(ctx, method, req)
			}
			start := time.Now()
			res, err := next(ctx, method, req)
			sum := sha256.Sum256(p.Arguments)
			j, _ := a.state.agent(agent)
			rec := AuditRecord{Tool: p.Name, Agent: agent, Role: j.Role, ArgsSHA256: hex.EncodeToString(sum[:]),
				Outcome: "ok", DurationMS: time.Since(start).Milliseconds()}
			r, _ := res.(*mcp.CallToolResult)
			switch {
			case err != nil:
				rec.Outcome, rec.Code, rec.Message = "error", "PROTOCOL_ERROR", err.Error()
			case r != nil && r.IsError:
				var ref *Refusal
				var fl *failure
				switch e := r.GetError(); {
				case errors.As(e, &fl):
					ref, rec.Outcome = &fl.Refusal, "error"
				case errors.As(e, &ref):
					rec.Outcome = "refused"
				default:
					// Arguments that fail the schema, and thrum's own tools'
					// errors: mcpserver's structured error, given the same
					// shape as a refusal.
					ref, rec.Outcome = &Refusal{Code: "INTERNAL", Message: "tool failed"}, "error"
					if te, ok := r.StructuredContent.(*mcpserver.ToolError); ok {
						ref.Code, ref.Message = strings.ToUpper(te.Code), te.Message
						if te.Hint != "" {
							ref.Suggestions = []string{te.Hint}
						}
						if te.Code != "internal" && te.Code != "unavailable" {
							rec.Outcome = "refused" // declined (arguments, names, rights), not failed
						}
					}
				}
				if ref != nil {
					ref.Tool, ref.Agent = p.Name, agent
					rec.Code, rec.Message = ref.Code, ref.Message
					b, _ := json.Marshal(ref)
					r.StructuredContent = ref
					r.Content = []mcp.Content{&mcp.TextContent{Text: string(b)}}
				}
			}
			// The audit is written even if the call's own context ended.
			if _, aerr := a.node.AppendEvent(context.WithoutCancel(ctx), typeAudit, rec); aerr != nil && err == nil && r != nil && !r.IsError {
				// The call's effect stands (a commit, a message) but its
				// record is missing: the agent is told so, not told "ok".
				return nil, fmt.Errorf("the call succeeded but its audit record was not written: %w", aerr)
			}
			return res, err
		}
	}
}

// ---- tools ----

// RequestReviewIn are request_review's arguments.
type RequestReviewIn struct {
	CompletionMessage string `json:"completion_message,omitempty" jsonschema:"what you did since the last review"`
	ReviewerPrompt    string `json:"reviewer_prompt,omitempty" jsonschema:"what the reviewer should look at"`
}

// RequestReviewOut is request_review's result.
type RequestReviewOut struct {
	Iteration     int    `json:"iteration" jsonschema:"this review's iteration, from 1"`
	MaxIterations int    `json:"max_iterations" jsonschema:"the most iterations a coder gets"`
	Reviewer      string `json:"reviewer" jsonschema:"the reviewer holding your review"`
	Branch        string `json:"branch_name" jsonschema:"the branch under review"`
	Head          string `json:"head" jsonschema:"the commit under review"`
	Worktree      string `json:"worktree_path" jsonschema:"your worktree"`
	ThreadID      string `json:"thread_id" jsonschema:"the review thread; feedback arrives there (wait_for_message)"`
	MessageID     string `json:"message_id" jsonschema:"the review request message"`
}

func (a *App) requestReview(ctx context.Context, me join, in RequestReviewIn) (*RequestReviewOut, error) {
	if !a.isCoder(me.Role) {
		return nil, refuse("NOT_CODING_AGENT", "only coding agents (roles %s) may request reviews; you are %s (%s)",
			strings.Join(a.cfg.CodingRoles, ", "), me.Agent, me.Role)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	rv := a.state.review(me.Agent)
	if rv != nil && rv.State == "waiting_review" {
		r := refuse("REVIEW_IN_PROGRESS", "iteration %d of your review is waiting for %s's feedback", rv.Iteration, rv.Reviewer)
		r.CurrentIteration, r.MaxIterations = &rv.Iteration, &a.cfg.MaxIterations
		r.Suggestions = []string{"wait_for_message until the feedback arrives", "review_status shows the review's state"}
		return nil, r
	}
	if rv != nil && rv.Iteration >= a.cfg.MaxIterations {
		r := refuse("REVIEW_LIMIT_EXCEEDED", "Maximum review iterations (%d) reached for agent %s", a.cfg.MaxIterations, me.Agent)
		r.CurrentIteration, r.MaxIterations = &rv.Iteration, &a.cfg.MaxIterations
		r.Suggestions = []string{
			"Create pull request with current work (create_pull_request)",
			"Abandon this approach and try different solution",
			"Manually review and fix issues before requesting review",
		}
		return nil, r
	}
	if me.Worktree == "" {
		return nil, refuse("NO_WORKTREE", "you joined without a worktree, so there is no branch to review")
	}
	branch, err := currentBranch(ctx, me.Worktree)
	if err != nil {
		return nil, fail("GIT_FAILED", err)
	}
	head, err := git(ctx, me.Worktree, "rev-parse", "HEAD")
	if err != nil {
		return nil, fail("GIT_FAILED", err)
	}
	reviewer := ""
	if rv != nil {
		if j, ok := a.state.agent(rv.Reviewer); ok && a.isReviewer(j.Role) {
			reviewer = rv.Reviewer // the same reviewer sees every iteration
		}
	}
	if reviewer == "" {
		reviewer = a.state.pickReviewer(a.isReviewer)
	}
	if reviewer == "" {
		return nil, refuse("NO_REVIEWER", "no agent with role %s has joined", strings.Join(a.cfg.ReviewRoles, " or "))
	}
	it := 1
	threadID := ""
	if rv != nil {
		it, threadID = rv.Iteration+1, rv.ThreadID
	}
	as := thrum.AsAgent(ctx, me.Agent)
	if threadID == "" {
		t, err := a.node.CreateThread(as, &rpc.CreateThreadParams{Title: fmt.Sprintf("Review of %s (%s)", branch, me.Agent)})
		if err != nil {
			return nil, fail("UNAVAILABLE", err)
		}
		threadID = t.ThreadID
	}
	body := fmt.Sprintf("Review request %d/%d for branch %s at %s, held by @%s.", it, a.cfg.MaxIterations, branch, head[:min(12, len(head))], reviewer)
	if in.CompletionMessage != "" {
		body += "\n\n" + in.CompletionMessage
	}
	if in.ReviewerPrompt != "" {
		body += "\n\nReviewer prompt: " + in.ReviewerPrompt
	}
	m, err := a.node.SendMessage(as, &rpc.SendMessageParams{Content: body, ThreadID: threadID,
		Mentions: []string{"@" + a.cfg.ReviewRoles[0]}, Tags: []string{"review-request"}})
	if err != nil {
		return nil, fail("UNAVAILABLE", err)
	}
	req := reviewRequest{Coder: me.Agent, Reviewer: reviewer, Iteration: it, Branch: branch, Head: head, ThreadID: threadID,
		MessageID: m.MessageID, CompletionMessage: in.CompletionMessage, ReviewerPrompt: in.ReviewerPrompt}
	if _, err := a.node.AppendEvent(ctx, typeReview, req); err != nil {
		return nil, fail("UNAVAILABLE", err)
	}
	return &RequestReviewOut{Iteration: it, MaxIterations: a.cfg.MaxIterations, Reviewer: reviewer, Branch: branch, Head: head,
		Worktree: me.Worktree, ThreadID: threadID, MessageID: m.MessageID}, nil
}

// SendFeedbackIn are send_feedback's arguments.
type SendFeedbackIn struct {
	Coder           string   `json:"coder,omitempty" jsonschema:"the coding agent whose review you hold; may be left out when you hold one review waiting for feedback"`
	Feedback        string   `json:"feedback" jsonschema:"the feedback, in Markdown"`
	FeedbackType    string   `json:"feedback_type" jsonschema:"needs_work, suggestions, clarification or approved"`
	Priority        string   `json:"priority,omitempty" jsonschema:"critical, high, normal or low"`
	ActionableItems []string `json:"actionable_items,omitempty" jsonschema:"specific tasks for the coder"`
}

// SendFeedbackOut is send_feedback's result.
type SendFeedbackOut struct {
	FeedbackID    string `json:"feedback_id" jsonschema:"the feedback's event ID in the log"`
	Commit        string `json:"git_commit_hash" jsonschema:"the commit of REVIEW_FEEDBACK.md on the coder's branch"`
	Target        string `json:"target_agent_id" jsonschema:"the coding agent that received the feedback"`
	Branch        string `json:"branch_name" jsonschema:"the coder's branch"`
	Iteration     int    `json:"iteration" jsonschema:"the iteration answered"`
	MaxIterations int    `json:"max_iterations" jsonschema:"the most iterations a coder gets"`
	MessageID     string `json:"message_id" jsonschema:"the feedback message in the review thread"`
}

var feedbackTypes = []string{"needs_work", "suggestions", "clarification", "approved"}

func (a *App) sendFeedback(ctx context.Context, me join, in SendFeedbackIn) (*SendFeedbackOut, error) {
	if !a.isReviewer(me.Role) {
		return nil, refuse("NOT_REVIEWER", "only reviewers (roles %s) may send feedback; you are %s (%s)",
			strings.Join(a.cfg.ReviewRoles, ", "), me.Agent, me.Role)
	}
	if !slices.Contains(feedbackTypes, in.FeedbackType) {
		return nil, refuse("INVALID_ARGUMENT", "feedback_type must be one of %s", strings.Join(feedbackTypes, ", "))
	}
	if strings.TrimSpace(in.Feedback) == "" {
		return nil, refuse("INVALID_ARGUMENT", "feedback is empty")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	coder := in.Coder
	if coder == "" {
		var waiting []string
		for _, rv := range a.state.reviewsHeldBy(me.Agent) {
			if rv.State == "waiting_review" {
				waiting = append(waiting, rv.Coder)
			}
		}
		if len(waiting) != 1 {
			return nil, refuse("INVALID_ARGUMENT", "name the coder: you hold %d reviews waiting for feedback (%s)", len(waiting), strings.Join(waiting, ", "))
		}
		coder = waiting[0]
	}
	rv := a.state.review(coder)
	if rv == nil || rv.Reviewer != me.Agent {
		holder := "nobody: it has requested no review"
		if rv != nil {
			holder = rv.Reviewer
		}
		r := refuse("NOT_YOUR_REVIEW", "you hold no review of %s (its review is held by %s); you may send feedback only to the coders whose reviews you hold", coder, holder)
		r.Suggestions = []string{"review_status lists the reviews you hold"}
		return nil, r
	}
	if rv.State != "waiting_review" {
		r := refuse("NO_PENDING_REVIEW", "iteration %d of %s's review already has your feedback; wait for the next request_review", rv.Iteration, coder)
		r.CurrentIteration, r.MaxIterations = &rv.Iteration, &a.cfg.MaxIterations
		return nil, r
	}
	cj, _ := a.state.agent(coder)
	f := feedback{Coder: coder, Reviewer: me.Agent, Iteration: rv.Iteration, Type: in.FeedbackType, Priority: in.Priority,
		Feedback: in.Feedback, ActionableItems: in.ActionableItems}
	if cj.Worktree == "" {
		return nil, fail("GIT_FAILED", fmt.Errorf("%s joined without a worktree", coder))
	}
	if b, err := currentBranch(ctx, cj.Worktree); err != nil || b != rv.Branch {
		if err == nil {
			err = fmt.Errorf("%s's worktree is on %s now, not the reviewed branch %s", coder, b, rv.Branch)
		}
		return nil, fail("GIT_FAILED", err)
	}
	commit, err := commitFeedback(ctx, cj.Worktree, &f)
	if err != nil {
		return nil, fail("GIT_FAILED", err)
	}
	f.Commit = commit
	body := fmt.Sprintf("Feedback on iteration %d/%d: %s (committed as %s %s on %s)\n\n%s",
		rv.Iteration, a.cfg.MaxIterations, in.FeedbackType, FeedbackFile, commit[:min(12, len(commit))], rv.Branch, in.Feedback)
	m, err := a.node.SendMessage(thrum.AsAgent(ctx, me.Agent), &rpc.SendMessageParams{Content: body, ThreadID: rv.ThreadID,
		Mentions: []string{"@" + coder}, Tags: []string{"review-feedback", in.FeedbackType}, Priority: in.Priority})
	if err != nil {
		return nil, fail("UNAVAILABLE", err)
	}
	f.MessageID = m.MessageID
	e, err := a.node.AppendEvent(ctx, typeFeedback, f)
	if err != nil {
		return nil, fail("UNAVAILABLE", err)
	}
	return &SendFeedbackOut{FeedbackID: e.ID, Commit: commit, Target: coder, Branch: rv.Branch, Iteration: rv.Iteration,
		MaxIterations: a.cfg.MaxIterations, MessageID: m.MessageID}, nil
}

// CreatePullRequestIn are create_pull_request's arguments.
type CreatePullRequestIn struct {
	Title       string `json:"title" jsonschema:"the pull request's title"`
	Description string `json:"description" jsonschema:"the pull request's body"`
	BaseBranch  string `json:"base_branch,omitempty" jsonschema:"the branch to merge into; default main"`
	Coder       string `json:"coder,omitempty" jsonschema:"reviewers only: the coder whose approved branch to propose; may be left out when you hold one approved review"`
}

// createPullRequest proposes a coder's branch: a coding agent its own, a
// reviewer the branch of a coder whose review it holds and approved.
func (a *App) createPullRequest(ctx context.Context, me join, in CreatePullRequestIn) (*PullRequest, error) {
	coder := me
	switch {
	case a.isCoder(me.Role):
		if in.Coder != "" && in.Coder != me.Agent {
			return nil, refuse("NOT_YOUR_BRANCH", "a coding agent may propose only its own branch, not %s's", in.Coder)
		}
	case a.isReviewer(me.Role):
		name := in.Coder
		if name == "" {
			var approved []string
			for _, rv := range a.state.reviewsHeldBy(me.Agent) {
				if rv.State == "approved" {
					approved = append(approved, rv.Coder)
				}
			}
			if len(approved) != 1 {
				return nil, refuse("INVALID_ARGUMENT", "name the coder: you hold %d approved reviews (%s)", len(approved), strings.Join(approved, ", "))
			}
			name = approved[0]
		}
		rv := a.state.review(name)
		if rv == nil || rv.Reviewer != me.Agent {
			return nil, refuse("NOT_YOUR_REVIEW", "you hold no review of %s; a reviewer may propose only the branches it approved", name)
		}
		if rv.State != "approved" {
			r := refuse("NOT_APPROVED", "%s's review is %s, not approved: send_feedback with feedback_type approved first, or leave the pull request to %s", name, rv.State, name)
			r.CurrentIteration, r.MaxIterations = &rv.Iteration, &a.cfg.MaxIterations
			return nil, r
		}
		coder, _ = a.state.agent(name)
	default:
		return nil, refuse("NOT_AUTHORIZED", "only coding agents (roles %s) and their reviewers (roles %s) may propose a branch; you are %s (%s)",
			strings.Join(a.cfg.CodingRoles, ", "), strings.Join(a.cfg.ReviewRoles, ", "), me.Agent, me.Role)
	}
	if strings.TrimSpace(in.Title) == "" {
		return nil, refuse("INVALID_ARGUMENT", "title is empty")
	}
	if coder.Worktree == "" {
		return nil, refuse("NO_WORKTREE", "%s joined without a worktree, so there is no branch to propose", coder.Agent)
	}
	branch, err := currentBranch(ctx, coder.Worktree)
	if err != nil {
		return nil, fail("GIT_FAILED", err)
	}
	base := in.BaseBranch
	if base == "" {
		base = "main"
	}
	pr, err := a.cfg.PR.OpenPullRequest(ctx, PullRequestSpec{Worktree: coder.Worktree, Branch: branch, Base: base, Title: in.Title, Description: in.Description})
	if err != nil {
		var r *Refusal
		if errors.As(err, &r) {
			return nil, r
		}
		return nil, fail("PUSH_FAILED", err)
	}
	ev := pullRequestEvent{Agent: coder.Agent, By: me.Agent, Title: in.Title, Description: in.Description, PullRequest: *pr}
	if _, err := a.node.AppendEvent(ctx, typePR, ev); err != nil {
		return nil, fail("UNAVAILABLE", err)
	}
	return pr, nil
}

// ReviewStatusOut is review_status's result.
type ReviewStatusOut struct {
	Reviews []ReviewInfo `json:"reviews" jsonschema:"your review as a coder, or the reviews you hold as a reviewer"`
}

// ReviewInfo is one review loop.
type ReviewInfo struct {
	Coder         string        `json:"coder"`
	Reviewer      string        `json:"reviewer"`
	Branch        string        `json:"branch_name"`
	ThreadID      string        `json:"thread_id"`
	Iteration     int           `json:"iteration" jsonschema:"iterations requested so far"`
	MaxIterations int           `json:"max_iterations"`
	State         string        `json:"state" jsonschema:"waiting_review, or the last feedback's type"`
	LastFeedback  *FeedbackInfo `json:"last_feedback,omitempty"`
	PullRequests  []PullRequest `json:"pull_requests,omitempty"`
}

// FeedbackInfo is the last feedback of a review.
type FeedbackInfo struct {
	Type            string   `json:"feedback_type"`
	Priority        string   `json:"priority,omitempty"`
	Feedback        string   `json:"feedback"`
	ActionableItems []string `json:"actionable_items,omitempty"`
	Commit          string   `json:"git_commit_hash"`
	At              string   `json:"at"`
}

func (a *App) reviewStatus(me join) *ReviewStatusOut {
	var rs []review
	if rv := a.state.review(me.Agent); rv != nil {
		rs = append(rs, *rv)
	}
	rs = append(rs, a.state.reviewsHeldBy(me.Agent)...)
	out := &ReviewStatusOut{Reviews: []ReviewInfo{}}
	for _, rv := range rs {
		ri := ReviewInfo{Coder: rv.Coder, Reviewer: rv.Reviewer, Branch: rv.Branch, ThreadID: rv.ThreadID, Iteration: rv.Iteration,
			MaxIterations: a.cfg.MaxIterations, State: rv.State}
		if f := rv.LastFeedback; f != nil {
			ri.LastFeedback = &FeedbackInfo{Type: f.Type, Priority: f.Priority, Feedback: f.Feedback, ActionableItems: f.ActionableItems,
				Commit: f.Commit, At: eventlog.FormatTime(rv.LastFeedAt)}
		}
		for _, p := range rv.PullRequests {
			ri.PullRequests = append(ri.PullRequests, p.PullRequest)
		}
		out.Reviews = append(out.Reviews, ri)
	}
	return out
}

// ListAuditIn are list_audit's arguments.
type ListAuditIn struct {
	Tool  string `json:"tool,omitempty" jsonschema:"only calls of this tool"`
	Agent string `json:"agent,omitempty" jsonschema:"only calls by this agent"`
	Limit int    `json:"limit,omitempty" jsonschema:"only the last N records; default all"`
}

// ListAuditOut is list_audit's result.
type ListAuditOut struct {
	Records []AuditRecord `json:"records"`
}
