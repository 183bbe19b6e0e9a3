package main

import (
	"cmp"
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
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/internal/dirlock"
	"github.com/thrumhq/thrum/mcpserver"
	"github.com/thrumhq/thrum/rpc"
	"github.com/thrumhq/thrum/store"
)

// Config configures the review loop.
type Config struct {
	MaxIterations int    // review iterations per coder; default 3
	Remote        string // the git remote create_pull_request pushes to; default "origin"
}

// The roles the loop knows: coding agents request reviews and propose
// their branches; reviewers answer (review requests go to @reviewer).
var codingRoles = []string{"coder", "implementer"}

const reviewRole = "reviewer"

// module is the thrum module the agents register with.
const module = "review"

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
// thrum.New takes no lock, so OpenApp takes the directory's own, as
// thrum.Open would (a program outside this module flocks thrum.LockFile).
func OpenApp(ctx context.Context, dir string, cfg Config) (*App, error) {
	cfg.MaxIterations = cmp.Or(max(cfg.MaxIterations, 0), 3)
	cfg.Remote = cmp.Or(cfg.Remote, "origin")
	lock, err := dirlock.Lock(dir)
	if err != nil {
		return nil, err
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

// Join registers the agent with thrum (or finds it registered), starts
// its session, and records its role and, for a coding agent, its worktree
// (an absolute path), whose branch is the one reviewed.
func (a *App) Join(ctx context.Context, name, role, worktree string) error {
	if slices.Contains(codingRoles, role) && !filepath.IsAbs(worktree) {
		return fmt.Errorf("coding agent %s needs its worktree, as an absolute path; got %q", name, worktree)
	}
	r, err := a.node.RegisterAgent(ctx, &rpc.RegisterAgentParams{Name: name, Role: role, Module: module})
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
	CurrentIteration int      `json:"current_iteration,omitempty"`
	MaxIterations    int      `json:"max_iterations,omitempty"`
	Suggestions      []string `json:"suggestions,omitempty"`
	failed           bool     // not declined but failed (git, the node): audited as an error
}

func (r *Refusal) Error() string { return r.Code + ": " + r.Message }

func refuse(code, format string, args ...any) *Refusal {
	return &Refusal{Code: code, Message: fmt.Sprintf(format, args...)}
}

func fail(code string, err error) *Refusal {
	return &Refusal{Code: code, Message: err.Error(), failed: true}
}

// at adds the review's iteration and the limit to the refusal.
func (r *Refusal) at(iteration, limit int, suggestions ...string) *Refusal {
	r.CurrentIteration, r.MaxIterations, r.Suggestions = iteration, limit, suggestions
	return r
}

// Serve builds the MCP server of one joined agent: thrum's messaging
// tools (send_message, wait_for_message, …) on the embedded node, with
// the review tools added, every call audited.
func (a *App) Serve(ctx context.Context, name string) (*thrum.MCPServer, error) {
	j, ok := a.state.agent(name)
	if !ok {
		return nil, fmt.Errorf("agent %s has not joined", name)
	}
	s, err := a.node.MCPServer(ctx, mcpserver.Identity{AgentID: name, Role: j.Role}, nil)
	if err != nil {
		return nil, err
	}
	srv := s.MCP()
	me := func() join { j, _ := a.state.agent(name); return j }
	addTool(srv, me, &mcp.Tool{Name: "request_review", Description: fmt.Sprintf("Ask for a review of your branch (coding agents only): "+
		"opens or continues your review thread, addressed to @%s. At most %d iterations; refused while a review is pending.",
		reviewRole, a.cfg.MaxIterations)}, a.requestReview)
	fb, err := jsonschema.For[SendFeedbackIn](nil)
	if err != nil {
		return nil, err
	}
	fb.Properties["feedback_type"].Enum = []any{"needs_work", "suggestions", "clarification", "approved"}
	fb.Properties["priority"].Enum = []any{"critical", "high", "normal", "low"}
	addTool(srv, me, &mcp.Tool{Name: "send_feedback", InputSchema: fb, Description: "Send feedback on the review you hold (reviewers only): " +
		"posts it to the review thread and commits it as " + FeedbackFile + " on the coder's branch."}, a.sendFeedback)
	addTool(srv, me, &mcp.Tool{Name: "create_pull_request", Description: "Propose a branch for merging: a coding agent its own, " +
		"a reviewer the branch it approved. Pushes it to the repository's remote and records the request."}, a.createPullRequest)
	addTool(srv, me, &mcp.Tool{Name: "review_status", Description: "Your reviews (read-only): iterations, state, last feedback.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}, a.reviewStatus)
	addTool(srv, me, &mcp.Tool{Name: "list_audit", Description: "The audit trail (read-only): every tool call of every agent, " +
		"oldest first, with its arguments and outcome, refusals included.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, _ join, in ListAuditIn) (*ListAuditOut, error) {
			return &ListAuditOut{Records: a.state.auditRecords(in.Tool, in.Agent, in.Limit)}, nil
		})
	srv.AddReceivingMiddleware(a.audit(name))
	return s, nil
}

// addTool registers a tool whose handler gets the calling agent as it is
// now.
func addTool[In, Out any](srv *mcp.Server, me func() join, t *mcp.Tool, h func(context.Context, join, In) (Out, error)) {
	mcp.AddTool(srv, t, func(ctx context.Context, _ *mcp.CallToolRequest, in In) (*mcp.CallToolResult, Out, error) {
		out, err := h(ctx, me(), in)
		return nil, out, err
	})
}

// maxAuditArgs bounds the arguments an audit record keeps; its hash
// covers them whole.
const maxAuditArgs = 2 << 10

// audit is the outermost middleware of an agent's server: it records
// every tools/call, review tools and thrum's alike, with its arguments,
// as an audit event, and gives a refused call its Refusal as structured
// content.
func (a *App) audit(agent string) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			p, ok := req.GetParams().(*mcp.CallToolParamsRaw)
			if method != "tools/call" || !ok {
				return next(ctx, method, req)
			}
			start := time.Now()
			res, err := next(ctx, method, req)
			j, _ := a.state.agent(agent)
			sum := sha256.Sum256(p.Arguments)
			rec := AuditRecord{Tool: p.Name, Agent: agent, Role: j.Role, Args: string(p.Arguments), ArgsSHA256: hex.EncodeToString(sum[:]),
				Outcome: "ok", DurationMS: time.Since(start).Milliseconds()}
			if len(rec.Args) > maxAuditArgs {
				rec.Args = strings.ToValidUTF8(rec.Args[:maxAuditArgs], "") + "…"
			}
			r, _ := res.(*mcp.CallToolResult)
			switch {
			case err != nil:
				rec.Outcome, rec.Code, rec.Message = "error", "PROTOCOL_ERROR", err.Error()
			case r != nil && r.IsError:
				ref := refusalOf(r)
				ref.Tool, ref.Agent = p.Name, agent
				rec.Outcome, rec.Code, rec.Message = "refused", ref.Code, ref.Message
				if ref.failed {
					rec.Outcome = "error"
				}
				b, _ := json.Marshal(ref)
				r.StructuredContent, r.Content = ref, []mcp.Content{&mcp.TextContent{Text: string(b)}}
			}
			// The audit is written even if the call's own context ended.
			if _, aerr := a.node.AppendEvent(context.WithoutCancel(ctx), typeAudit, rec); aerr != nil && rec.Outcome == "ok" {
				// The call's effect stands (a commit, a message) but its
				// record is missing: the agent is told so, not told "ok".
				return nil, fmt.Errorf("the call succeeded but its audit record was not written: %w", aerr)
			}
			return res, err
		}
	}
}

// refusalOf is the Refusal of a failed call: a review tool's own, or the
// structured error of thrum's tools (mcpserver.ToolError, which also
// reports arguments that fail the input schema) in the same shape.
func refusalOf(r *mcp.CallToolResult) *Refusal {
	var ref *Refusal
	if errors.As(r.GetError(), &ref) {
		return ref
	}
	ref = &Refusal{Code: "INTERNAL", Message: "tool failed", failed: true}
	if te, ok := r.StructuredContent.(*mcpserver.ToolError); ok {
		ref.Code, ref.Message = strings.ToUpper(te.Code), te.Message
		if te.Hint != "" {
			ref.Suggestions = []string{te.Hint}
		}
		ref.failed = te.Code == "internal" || te.Code == "unavailable" // else declined: arguments, names, rights
	}
	return ref
}

// ---- tools ----

// RequestReviewIn are request_review's arguments.
type RequestReviewIn struct {
	CompletionMessage string `json:"completion_message,omitempty" jsonschema:"what you did since the last review"`
	ReviewerPrompt    string `json:"reviewer_prompt,omitempty" jsonschema:"what the reviewer should look at"`
}

func (a *App) requestReview(ctx context.Context, me join, in RequestReviewIn) (*ReviewRequest, error) {
	if !slices.Contains(codingRoles, me.Role) {
		return nil, refuse("NOT_CODING_AGENT", "only coding agents (roles %s) may request reviews; you are %s (%s)",
			strings.Join(codingRoles, ", "), me.Agent, me.Role)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	rv := a.state.review(me.Agent)
	if rv != nil && rv.State == "waiting_review" {
		return nil, refuse("REVIEW_IN_PROGRESS", "iteration %d of your review is waiting for %s's feedback", rv.Iteration, rv.Reviewer).
			at(rv.Iteration, a.cfg.MaxIterations, "wait_for_message until the feedback arrives", "review_status shows the review's state")
	}
	if rv != nil && rv.Iteration >= a.cfg.MaxIterations {
		return nil, refuse("REVIEW_LIMIT_EXCEEDED", "Maximum review iterations (%d) reached for agent %s", a.cfg.MaxIterations, me.Agent).
			at(rv.Iteration, a.cfg.MaxIterations, "Create pull request with current work (create_pull_request)",
				"Abandon this approach and try different solution",
				"Manually review and fix issues before requesting review")
	}
	branch, err := currentBranch(ctx, me.Worktree)
	if err != nil {
		return nil, fail("GIT_FAILED", err)
	}
	head, err := git(ctx, me.Worktree, "rev-parse", "HEAD")
	if err != nil {
		return nil, fail("GIT_FAILED", err)
	}
	req := ReviewRequest{Coder: me.Agent, Iteration: 1, MaxIterations: a.cfg.MaxIterations, Branch: branch, Head: head,
		Worktree: me.Worktree, CompletionMessage: in.CompletionMessage, ReviewerPrompt: in.ReviewerPrompt}
	if rv != nil { // the same reviewer sees every iteration, in one thread
		req.Iteration, req.Reviewer, req.ThreadID = rv.Iteration+1, rv.Reviewer, rv.ThreadID
	} else {
		req.Reviewer = a.state.pickReviewer()
	}
	if req.Reviewer == "" {
		return nil, refuse("NO_REVIEWER", "no agent with role %s has joined", reviewRole)
	}
	as := thrum.AsAgent(ctx, me.Agent)
	if req.ThreadID == "" {
		t, err := a.node.CreateThread(as, &rpc.CreateThreadParams{Title: fmt.Sprintf("Review of %s (%s)", branch, me.Agent)})
		if err != nil {
			return nil, fail("UNAVAILABLE", err)
		}
		req.ThreadID = t.ThreadID
	}
	body := fmt.Sprintf("Review request %d/%d for branch %s at %.12s, held by @%s.", req.Iteration, req.MaxIterations, branch, head, req.Reviewer)
	if in.CompletionMessage != "" {
		body += "\n\n" + in.CompletionMessage
	}
	if in.ReviewerPrompt != "" {
		body += "\n\nReviewer prompt: " + in.ReviewerPrompt
	}
	m, err := a.node.SendMessage(as, &rpc.SendMessageParams{Content: body, ThreadID: req.ThreadID,
		Mentions: []string{"@" + reviewRole}, Tags: []string{"review-request"}})
	if err != nil {
		return nil, fail("UNAVAILABLE", err)
	}
	req.MessageID = m.MessageID
	if _, err := a.node.AppendEvent(ctx, typeReview, req); err != nil {
		return nil, fail("UNAVAILABLE", err)
	}
	return &req, nil
}

// held is the review of coder that reviewer holds or, with coder "", the
// one review it holds in state want.
func (a *App) held(reviewer, coder, want string) (*Review, error) {
	if coder == "" {
		rs := a.state.reviewsHeldBy(reviewer, want)
		if len(rs) == 0 {
			return nil, refuse("INVALID_ARGUMENT", "you hold no review in state %s", want)
		}
		if len(rs) > 1 {
			var names []string
			for _, rv := range rs {
				names = append(names, rv.Coder)
			}
			return nil, refuse("INVALID_ARGUMENT", "name the coder: you hold %d reviews in state %s (%s)", len(rs), want, strings.Join(names, ", "))
		}
		return &rs[0], nil
	}
	if rv := a.state.review(coder); rv != nil && rv.Reviewer == reviewer {
		return rv, nil
	}
	r := refuse("NOT_YOUR_REVIEW", "you hold no review of %q; a reviewer answers and proposes only the branches of the coders whose reviews it holds", coder)
	r.Suggestions = []string{"review_status lists the reviews you hold"}
	return nil, r
}

// SendFeedbackIn are send_feedback's arguments.
type SendFeedbackIn struct {
	Coder           string   `json:"coder,omitempty" jsonschema:"the coding agent whose review you hold; may be left out when you hold one review waiting for feedback"`
	Feedback        string   `json:"feedback" jsonschema:"the feedback, in Markdown"`
	FeedbackType    string   `json:"feedback_type" jsonschema:"needs_work, suggestions, clarification or approved"`
	Priority        string   `json:"priority,omitempty" jsonschema:"critical, high, normal or low"`
	ActionableItems []string `json:"actionable_items,omitempty" jsonschema:"specific tasks for the coder"`
}

func (a *App) sendFeedback(ctx context.Context, me join, in SendFeedbackIn) (*Feedback, error) {
	if me.Role != reviewRole {
		return nil, refuse("NOT_REVIEWER", "only reviewers (role %s) may send feedback; you are %s (%s)", reviewRole, me.Agent, me.Role)
	}
	if strings.TrimSpace(in.Feedback) == "" {
		return nil, refuse("INVALID_ARGUMENT", "feedback is empty")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	rv, err := a.held(me.Agent, in.Coder, "waiting_review")
	if err != nil {
		return nil, err
	}
	if rv.State != "waiting_review" {
		return nil, refuse("NO_PENDING_REVIEW", "iteration %d of %s's review already has your feedback; wait for the next request_review", rv.Iteration, rv.Coder).
			at(rv.Iteration, a.cfg.MaxIterations)
	}
	cj, _ := a.state.agent(rv.Coder)
	if b, err := currentBranch(ctx, cj.Worktree); err != nil || b != rv.Branch {
		if err == nil {
			err = fmt.Errorf("%s's worktree is on %s now, not the reviewed branch %s", rv.Coder, b, rv.Branch)
		}
		return nil, fail("GIT_FAILED", err)
	}
	f := Feedback{Coder: rv.Coder, Reviewer: me.Agent, Branch: rv.Branch, Iteration: rv.Iteration, MaxIterations: a.cfg.MaxIterations,
		Type: in.FeedbackType, Priority: in.Priority, Feedback: in.Feedback, ActionableItems: in.ActionableItems}
	if f.Commit, err = commitFeedback(ctx, cj.Worktree, &f); err != nil {
		return nil, fail("GIT_FAILED", err)
	}
	body := fmt.Sprintf("Feedback on iteration %d/%d: %s (committed as %s %.12s on %s)\n\n%s",
		f.Iteration, f.MaxIterations, f.Type, FeedbackFile, f.Commit, f.Branch, f.Feedback)
	m, err := a.node.SendMessage(thrum.AsAgent(ctx, me.Agent), &rpc.SendMessageParams{Content: body, ThreadID: rv.ThreadID,
		Mentions: []string{"@" + f.Coder}, Tags: []string{"review-feedback", f.Type}, Priority: f.Priority})
	if err != nil {
		return nil, fail("UNAVAILABLE", err)
	}
	f.MessageID = m.MessageID
	e, err := a.node.AppendEvent(ctx, typeFeedback, f)
	if err != nil {
		return nil, fail("UNAVAILABLE", err)
	}
	f.ID = e.ID
	return &f, nil
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
	case slices.Contains(codingRoles, me.Role):
		if in.Coder != "" && in.Coder != me.Agent {
			return nil, refuse("NOT_YOUR_BRANCH", "a coding agent may propose only its own branch, not %q's", in.Coder)
		}
	case me.Role == reviewRole:
		rv, err := a.held(me.Agent, in.Coder, "approved")
		if err != nil {
			return nil, err
		}
		if rv.State != "approved" {
			return nil, refuse("NOT_APPROVED", "%s's review is %s, not approved: send_feedback with feedback_type approved first, or leave the pull request to %s",
				rv.Coder, rv.State, rv.Coder).at(rv.Iteration, a.cfg.MaxIterations)
		}
		coder, _ = a.state.agent(rv.Coder)
	default:
		return nil, refuse("NOT_AUTHORIZED", "only coding agents (roles %s) and reviewers (role %s) may propose a branch; you are %s (%s)",
			strings.Join(codingRoles, ", "), reviewRole, me.Agent, me.Role)
	}
	if strings.TrimSpace(in.Title) == "" {
		return nil, refuse("INVALID_ARGUMENT", "title is empty")
	}
	base := cmp.Or(in.BaseBranch, "main")
	if err := checkBranch(ctx, coder.Worktree, base); err != nil {
		return nil, refuse("INVALID_ARGUMENT", "base_branch: %v", err)
	}
	branch, err := currentBranch(ctx, coder.Worktree)
	if err != nil {
		return nil, fail("GIT_FAILED", err)
	}
	pr, err := push(ctx, coder.Worktree, a.cfg.Remote, branch, base)
	if err != nil {
		var r *Refusal
		if errors.As(err, &r) {
			return nil, r
		}
		return nil, fail("PUSH_FAILED", err)
	}
	pr.Coder, pr.By, pr.Title, pr.Description = coder.Agent, me.Agent, in.Title, in.Description
	if _, err := a.node.AppendEvent(ctx, typePR, pr); err != nil {
		return nil, fail("UNAVAILABLE", err)
	}
	return pr, nil
}

// ReviewStatus is review_status's result.
type ReviewStatus struct {
	Reviews []Review `json:"reviews" jsonschema:"your review as a coder, then the reviews you hold as a reviewer"`
}

func (a *App) reviewStatus(_ context.Context, me join, _ struct{}) (*ReviewStatus, error) {
	out := &ReviewStatus{Reviews: []Review{}}
	if rv := a.state.review(me.Agent); rv != nil {
		out.Reviews = append(out.Reviews, *rv)
	}
	out.Reviews = append(out.Reviews, a.state.reviewsHeldBy(me.Agent, "")...)
	return out, nil
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
