package main

import (
	"context"
	"slices"
	"strings"
	"sync"

	"github.com/thrumhq/thrum/eventlog"
)

// The example's own events, appended with Node.AppendEvent. The log is
// their only home: the read model below is rebuilt from it at every start.
// Each payload is also what the tool that made it returns.
const (
	typeJoin     = "app.reviewloop.join"         // join: an agent connected, with its role and worktree
	typeReview   = "app.reviewloop.review"       // ReviewRequest: a coder asked for iteration N
	typeFeedback = "app.reviewloop.feedback"     // Feedback: a reviewer answered it
	typePR       = "app.reviewloop.pull_request" // PullRequest: a branch was pushed for merging
	typeAudit    = "app.reviewloop.audit"        // AuditRecord: one tool call, whatever its outcome
)

type join struct {
	Agent    string `json:"agent"`
	Role     string `json:"role"`
	Worktree string `json:"worktree,omitempty"`
}

// ReviewRequest is one iteration a coder asked for.
type ReviewRequest struct {
	Coder             string `json:"coder"`
	Reviewer          string `json:"reviewer" jsonschema:"the reviewer holding the review"`
	Iteration         int    `json:"iteration" jsonschema:"this review's iteration, from 1"`
	MaxIterations     int    `json:"max_iterations" jsonschema:"the most iterations a coder gets"`
	Branch            string `json:"branch_name" jsonschema:"the branch under review"`
	Head              string `json:"head" jsonschema:"the commit under review"`
	Worktree          string `json:"worktree_path"`
	ThreadID          string `json:"thread_id" jsonschema:"the review thread; feedback arrives there (wait_for_message)"`
	MessageID         string `json:"message_id" jsonschema:"the review request message"`
	CompletionMessage string `json:"completion_message,omitempty"`
	ReviewerPrompt    string `json:"reviewer_prompt,omitempty"`
}

// Feedback is a reviewer's answer to an iteration.
type Feedback struct {
	ID              string   `json:"feedback_id,omitempty" jsonschema:"the feedback's event ID in the log"`
	At              string   `json:"at,omitempty"`
	Coder           string   `json:"target_agent_id" jsonschema:"the coding agent that received the feedback"`
	Reviewer        string   `json:"reviewer"`
	Branch          string   `json:"branch_name"`
	Iteration       int      `json:"iteration" jsonschema:"the iteration answered"`
	MaxIterations   int      `json:"max_iterations"`
	Type            string   `json:"feedback_type"`
	Priority        string   `json:"priority,omitempty"`
	Feedback        string   `json:"feedback"`
	ActionableItems []string `json:"actionable_items,omitempty"`
	Commit          string   `json:"git_commit_hash" jsonschema:"the commit of REVIEW_FEEDBACK.md on the coder's branch"`
	MessageID       string   `json:"message_id" jsonschema:"the feedback message in the review thread"`
}

// PullRequest is a branch pushed to the remote for merging.
type PullRequest struct {
	Coder       string `json:"coder" jsonschema:"the coding agent whose branch it is"`
	By          string `json:"by" jsonschema:"who proposed it: the coder, or the reviewer that approved it"`
	Title       string `json:"title"`
	Description string `json:"description"`
	Branch      string `json:"branch_name" jsonschema:"the branch proposed for merging"`
	Base        string `json:"base_branch" jsonschema:"the branch to merge into"`
	Remote      string `json:"remote" jsonschema:"where the branch was pushed"`
	Commit      string `json:"commit" jsonschema:"the commit pushed"`
	Ahead       int    `json:"commits_ahead" jsonschema:"commits on the branch that the remote's base lacks"`
}

// AuditRecord is one tool call as the log keeps it.
type AuditRecord struct {
	EventID    string `json:"event_id,omitempty" jsonschema:"the audit event's ID in the log"`
	At         string `json:"at,omitempty" jsonschema:"when the call ended (RFC 3339, UTC)"`
	Tool       string `json:"tool" jsonschema:"the tool called"`
	Agent      string `json:"agent" jsonschema:"the calling agent"`
	Role       string `json:"role" jsonschema:"the calling agent's role"`
	Args       string `json:"args" jsonschema:"the call's arguments as sent (JSON), cut after 2 KiB"`
	ArgsSHA256 string `json:"args_sha256" jsonschema:"SHA-256 of the call's arguments as sent, whole"`
	Outcome    string `json:"outcome" jsonschema:"ok; refused (declined: role, relationship, review state, arguments); or error (git, push or storage failed)"`
	Code       string `json:"code,omitempty" jsonschema:"the error code of a refusal or error"`
	Message    string `json:"message,omitempty" jsonschema:"why it was refused or failed"`
	DurationMS int64  `json:"duration_ms" jsonschema:"how long the call took"`
}

// Review is one coder's review loop, as the events built it: its last
// request, and what came of it.
type Review struct {
	ReviewRequest
	State        string        `json:"state" jsonschema:"waiting_review, or the last feedback's type"`
	LastFeedback *Feedback     `json:"last_feedback,omitempty"`
	PullRequests []PullRequest `json:"pull_requests,omitempty"`
}

// state is the example's read model: a thrum Projection fed every
// committed batch of the log, in order (and the whole log at start).
type state struct {
	mu      sync.Mutex
	seen    map[string]bool    // event IDs applied (Apply must be idempotent)
	agents  map[string]join    // by agent name
	reviews map[string]*Review // by coder
	audit   []AuditRecord
}

func newState() *state {
	return &state{seen: map[string]bool{}, agents: map[string]join{}, reviews: map[string]*Review{}}
}

func (s *state) Apply(_ context.Context, batch []*eventlog.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range batch {
		if !strings.HasPrefix(e.Type, "app.reviewloop.") || s.seen[e.ID] {
			continue
		}
		var err error
		switch e.Type {
		case typeJoin:
			err = applyAs(e, func(j join) { s.agents[j.Agent] = j })
		case typeReview:
			err = applyAs(e, func(r ReviewRequest) {
				if s.reviews[r.Coder] == nil {
					s.reviews[r.Coder] = &Review{}
				}
				s.reviews[r.Coder].ReviewRequest, s.reviews[r.Coder].State = r, "waiting_review"
			})
		case typeFeedback:
			err = applyAs(e, func(f Feedback) {
				f.ID, f.At = e.ID, e.Timestamp()
				if rv := s.reviews[f.Coder]; rv != nil {
					rv.State, rv.LastFeedback = f.Type, &f
				}
			})
		case typePR:
			err = applyAs(e, func(p PullRequest) {
				if rv := s.reviews[p.Coder]; rv != nil {
					rv.PullRequests = append(rv.PullRequests, p)
				}
			})
		case typeAudit:
			err = applyAs(e, func(a AuditRecord) {
				a.EventID, a.At = e.ID, e.Timestamp()
				s.audit = append(s.audit, a)
			})
		}
		if err != nil {
			return err
		}
		s.seen[e.ID] = true
	}
	return nil
}

// applyAs gives f the event's payload as a T.
func applyAs[T any](e *eventlog.Event, f func(T)) error {
	v, err := eventlog.PayloadAs[T](e)
	if err == nil {
		f(v)
	}
	return err
}

func (s *state) agent(name string) (join, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j, ok := s.agents[name]
	return j, ok
}

// review returns a copy of coder's review, or nil.
func (s *state) review(coder string) *Review {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rv := s.reviews[coder]; rv != nil {
		c := *rv
		return &c
	}
	return nil
}

// reviewsHeldBy returns copies of the reviews reviewer holds in state
// want (any state if ""), by coder.
func (s *state) reviewsHeldBy(reviewer, want string) []Review {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Review
	for _, rv := range s.reviews {
		if rv.Reviewer == reviewer && (want == "" || rv.State == want) {
			out = append(out, *rv)
		}
	}
	slices.SortFunc(out, func(a, b Review) int { return strings.Compare(a.Coder, b.Coder) })
	return out
}

// pickReviewer returns the joined reviewer that holds the fewest reviews
// (by name on a tie), or "".
func (s *state) pickReviewer() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	held := map[string]int{}
	for _, rv := range s.reviews {
		held[rv.Reviewer]++
	}
	best := ""
	for name, j := range s.agents {
		if j.Role == reviewRole && (best == "" || held[name] < held[best] || held[name] == held[best] && name < best) {
			best = name
		}
	}
	return best
}

// auditRecords returns the audit, oldest first, filtered by tool and
// agent when set, the last limit records when limit > 0.
func (s *state) auditRecords(tool, agent string, limit int) []AuditRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []AuditRecord
	for _, a := range s.audit {
		if (tool == "" || a.Tool == tool) && (agent == "" || a.Agent == agent) {
			out = append(out, a)
		}
	}
	if limit > 0 && len(out) > limit {
		out = out[len(out)-limit:]
	}
	return out
}
