package main

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/thrumhq/thrum/eventlog"
)

// The example's own events, appended with Node.AppendEvent. The log is
// their only home: the read model below is rebuilt from it at every start.
const (
	typeJoin     = "app.reviewloop.join"         // join: an agent connected, with its role and worktree
	typeReview   = "app.reviewloop.review"       // reviewRequest: a coder asked for iteration N
	typeFeedback = "app.reviewloop.feedback"     // feedback: a reviewer answered it
	typePR       = "app.reviewloop.pull_request" // pullRequestEvent: a branch was pushed for merging
	typeAudit    = "app.reviewloop.audit"        // AuditRecord: one tool call, whatever its outcome
)

type join struct {
	Agent    string `json:"agent"`
	Role     string `json:"role"`
	Worktree string `json:"worktree,omitempty"`
}

type reviewRequest struct {
	Coder             string `json:"coder"`
	Reviewer          string `json:"reviewer"`
	Iteration         int    `json:"iteration"`
	Branch            string `json:"branch"`
	Head              string `json:"head"`
	ThreadID          string `json:"thread_id"`
	MessageID         string `json:"message_id"`
	CompletionMessage string `json:"completion_message,omitempty"`
	ReviewerPrompt    string `json:"reviewer_prompt,omitempty"`
}

type feedback struct {
	Coder           string   `json:"coder"`
	Reviewer        string   `json:"reviewer"`
	Iteration       int      `json:"iteration"`
	Type            string   `json:"feedback_type"`
	Priority        string   `json:"priority,omitempty"`
	Feedback        string   `json:"feedback"`
	ActionableItems []string `json:"actionable_items,omitempty"`
	Commit          string   `json:"git_commit_hash"`
	MessageID       string   `json:"message_id"`
}

type pullRequestEvent struct {
	Agent       string `json:"agent"` // the coder whose branch it is
	By          string `json:"by"`    // who asked: the coder, or its reviewer`
	Title       string `json:"title"`
	Description string `json:"description"`
	PullRequest
}

// AuditRecord is one tool call as the log keeps it.
type AuditRecord struct {
	EventID    string `json:"event_id,omitempty" jsonschema:"the audit event's ID in the log"`
	At         string `json:"at,omitempty" jsonschema:"when the call ended (RFC 3339, UTC)"`
	Tool       string `json:"tool" jsonschema:"the tool called"`
	Agent      string `json:"agent" jsonschema:"the calling agent"`
	Role       string `json:"role" jsonschema:"the calling agent's role"`
	ArgsSHA256 string `json:"args_sha256" jsonschema:"SHA-256 of the call's arguments as sent"`
	Outcome    string `json:"outcome" jsonschema:"ok; refused (declined: role, relationship, review state, arguments); or error (git, push or storage failed)"`
	Code       string `json:"code,omitempty" jsonschema:"the error code of a refusal or error"`
	Message    string `json:"message,omitempty" jsonschema:"the error message of a refusal or error"`
	DurationMS int64  `json:"duration_ms" jsonschema:"how long the call took"`
}

// review is one coder's review loop, as the events built it.
type review struct {
	Coder        string
	Reviewer     string
	Branch       string
	ThreadID     string
	Iteration    int    // iterations requested so far
	State        string // waiting_review, then the last feedback's type
	LastFeedback *feedback
	LastFeedAt   time.Time
	PullRequests []pullRequestEvent
}

// state is the example's read model: a thrum Projection fed every
// committed batch of the log, in order (and the whole log at start).
type state struct {
	mu      sync.Mutex
	seen    map[string]bool    // event IDs applied (Apply must be idempotent)
	agents  map[string]join    // by agent name
	reviews map[string]*review // by coder
	audit   []AuditRecord
}

func newState() *state {
	return &state{seen: map[string]bool{}, agents: map[string]join{}, reviews: map[string]*review{}}
}

func (s *state) Apply(_ context.Context, batch []*eventlog.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range batch {
		switch e.Type {
		case typeJoin, typeReview, typeFeedback, typePR, typeAudit:
		default:
			continue
		}
		if s.seen[e.ID] {
			continue
		}
		if err := s.apply(e); err != nil {
			return err
		}
		s.seen[e.ID] = true
	}
	return nil
}

func (s *state) apply(e *eventlog.Event) error {
	switch e.Type {
	case typeJoin:
		j, err := eventlog.PayloadAs[join](e)
		if err != nil {
			return err
		}
		s.agents[j.Agent] = j
	case typeReview:
		r, err := eventlog.PayloadAs[reviewRequest](e)
		if err != nil {
			return err
		}
		rv := s.reviews[r.Coder]
		if rv == nil {
			rv = &review{Coder: r.Coder}
			s.reviews[r.Coder] = rv
		}
		rv.Reviewer, rv.Branch, rv.ThreadID = r.Reviewer, r.Branch, r.ThreadID
		rv.Iteration, rv.State = r.Iteration, "waiting_review"
	case typeFeedback:
		f, err := eventlog.PayloadAs[feedback](e)
		if err != nil {
			return err
		}
		if rv := s.reviews[f.Coder]; rv != nil {
			rv.State, rv.LastFeedback, rv.LastFeedAt = f.Type, &f, e.Time
		}
	case typePR:
		p, err := eventlog.PayloadAs[pullRequestEvent](e)
		if err != nil {
			return err
		}
		if rv := s.reviews[p.Agent]; rv != nil {
			rv.PullRequests = append(rv.PullRequests, p)
		}
	case typeAudit:
		a, err := eventlog.PayloadAs[AuditRecord](e)
		if err != nil {
			return err
		}
		a.EventID, a.At = e.ID, e.Timestamp()
		s.audit = append(s.audit, a)
	}
	return nil
}

func (s *state) agent(name string) (join, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j, ok := s.agents[name]
	return j, ok
}

// review returns a copy of coder's review, or nil.
func (s *state) review(coder string) *review {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rv := s.reviews[coder]; rv != nil {
		c := *rv
		return &c
	}
	return nil
}

// reviewsHeldBy returns copies of the reviews reviewer holds, by coder.
func (s *state) reviewsHeldBy(reviewer string) []review {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []review
	for _, rv := range s.reviews {
		if rv.Reviewer == reviewer {
			out = append(out, *rv)
		}
	}
	slices.SortFunc(out, func(a, b review) int { return strings.Compare(a.Coder, b.Coder) })
	return out
}

// pickReviewer returns the joined agent with one of roles that holds the
// fewest reviews (by name on a tie), or "".
func (s *state) pickReviewer(isReviewer func(role string) bool) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	held := map[string]int{}
	for _, rv := range s.reviews {
		held[rv.Reviewer]++
	}
	best := ""
	for name, j := range s.agents {
		if !isReviewer(j.Role) {
			continue
		}
		if best == "" || held[name] < held[best] || held[name] == held[best] && name < best {
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
	return slices.Clone(out)
}
