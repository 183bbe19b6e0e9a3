package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/thrumhq/thrum/internal/frame"
	"github.com/thrumhq/thrum/rpc"
)

// HookCmd answers one hook of a coding agent's host (Claude Code, Codex,
// Cursor, Gemini CLI): it reads the host's JSON on stdin and prints the
// host's documented output (DESIGN.md, "Reaching agents in their
// hosts"). Hooks run on the host's critical path, so whatever goes wrong
// (no daemon, no identity, bad input, a slow daemon) it prints "{}" and
// exits 0 within hookBudget.
type HookCmd struct {
	Host  string `arg:"" optional:"" help:"The host: claude, codex, cursor or gemini."`
	Event string `arg:"" optional:"" help:"The host's event, in kebab case (see the pairs above)."`
}

// A hook either adds the agent's unread messages to its context (claimed:
// shown once) or, at a stop, asks the agent to read them first.
const (
	contextHook = iota
	stopHook
)

type hookSpec struct {
	host, event string // as on the command line
	name        string // the host's name of the event
	kind        int
}

// hookEvents are the HOST EVENT pairs thrum answers; `thrum setup` writes
// hooks that call them, so the list is part of the command's contract.
var hookEvents = []hookSpec{
	{"claude", "session-start", "SessionStart", contextHook},
	{"claude", "user-prompt-submit", "UserPromptSubmit", contextHook},
	{"claude", "post-tool-use", "PostToolUse", contextHook},
	{"claude", "stop", "Stop", stopHook},
	{"codex", "session-start", "SessionStart", contextHook},
	{"codex", "user-prompt-submit", "UserPromptSubmit", contextHook},
	{"codex", "stop", "Stop", stopHook},
	{"cursor", "session-start", "sessionStart", contextHook},
	{"cursor", "stop", "stop", stopHook},
	{"gemini", "session-start", "SessionStart", contextHook},
	{"gemini", "before-agent", "BeforeAgent", contextHook},
	{"gemini", "after-agent", "AfterAgent", stopHook},
}

// hookTimeout is how long each host lets one run of thrum hook take
// before it gives up on it: thrum setup writes it into the host's hook
// entries (Claude Code and Codex take seconds, Gemini CLI milliseconds),
// so a hook may rely on that long. Cursor is not listed: setup writes no
// timeout there, and Cursor's own applies.
var hookTimeout = map[string]time.Duration{
	"claude": 5 * time.Second,
	"codex":  5 * time.Second,
	"gemini": 5 * time.Second,
}

const (
	// hookBudget bounds everything a hook does after it starts; with the
	// process's start it stays under the second a host may wait.
	hookBudget = 500 * time.Millisecond
	// hookInputWait bounds the wait for the host's JSON.
	hookInputWait = 200 * time.Millisecond
	// hookContextMax is Claude Code's limit on additionalContext, in
	// UTF-16 units; thrum keeps every host's context under it, as each
	// host counts (frame.Options.Len).
	hookContextMax = 10000
	// hookMessages is how many messages one context hook claims and
	// shows, hookBodyMax how much of each body (escaped, UTF-16 units).
	hookMessages = 5
	hookBodyMax  = 1500
	// hookNamed is how many unread messages a stop hook names.
	hookNamed = 10
)

func (c *HookCmd) Help() string {
	var b strings.Builder
	b.WriteString(`Reads the host's hook input (JSON) on stdin and prints its documented
output. At the start of a session, a prompt or a tool use, the agent's unread
messages (up to 5, each in a <thrum-message> frame) become the hook's
additional context, marked read so that they are shown once. At a stop, if
unread messages wait, the stop is blocked (Cursor: a follow-up message) with
a reason naming them, once for the same messages. Whatever fails — no
daemon, no identity, bad input, a daemon that does not answer within half a
second — it prints {} and exits 0: a hook never blocks its host.

The agent: --agent-id or THRUM_NAME, else the identity file of the directory
the host gives (cwd; Cursor: the first workspace root).

Supported HOST EVENT pairs, with the host's name of the event:
`)
	for _, h := range hookEvents {
		fmt.Fprintf(&b, "  %-7s %-19s (%s)\n", h.host, h.event, h.name)
	}
	b.WriteString(`
Examples:
  thrum hook claude user-prompt-submit
  thrum hook codex stop
  thrum hook cursor stop
  THRUM_NAME=alice thrum hook gemini before-agent`)
	return b.String()
}

// hookInput is what thrum reads of the hosts' hook input. A stop hook
// does not need stop_hook_active (Cursor: loop_count): it never names the
// same messages at two stops in a row, which covers an agent continuing
// because of it.
type hookInput struct {
	Cwd            string   `json:"cwd"`
	WorkspaceRoots []string `json:"workspace_roots"` // Cursor
	Status         string   `json:"status"`          // Cursor's stop: completed, aborted or error
}

func (in *hookInput) dir() string {
	if in.Cwd != "" {
		return in.Cwd
	}
	if len(in.WorkspaceRoots) > 0 {
		return in.WorkspaceRoots[0]
	}
	return ""
}

func (c *HookCmd) Run(ctx context.Context, g *Globals) error {
	i := slices.IndexFunc(hookEvents, func(h hookSpec) bool { return h.host == c.Host && h.event == c.Event })
	var out hookOutput // {}: nothing to say, in every host's terms
	if i < 0 {
		fmt.Fprintf(g.stderr, "thrum hook: no hook %q %q: see thrum hook --help for the pairs there are\n", c.Host, c.Event)
	} else {
		ctx, cancel := context.WithTimeout(ctx, hookBudget)
		defer cancel()
		var err error
		if out, err = hookEvents[i].answer(ctx, g, os.Stdin); err != nil {
			g.debugf("hook %s %s: %v", c.Host, c.Event, err)
			out = hookOutput{}
		}
	}
	enc := json.NewEncoder(g.stdout)
	enc.SetEscapeHTML(false) // the frame's markup as it is: the JSON string holds it exactly
	return enc.Encode(out)
}

// hookOutput is every host's hook output thrum writes: Claude Code's,
// Codex's and Gemini CLI's hookSpecificOutput or decision and reason,
// Cursor's additional_context or followup_message. Empty, it is {}.
type hookOutput struct {
	HookSpecificOutput *hookContextOutput `json:"hookSpecificOutput,omitempty"`
	AdditionalContext  string             `json:"additional_context,omitempty"`
	Decision           string             `json:"decision,omitempty"`
	Reason             string             `json:"reason,omitempty"`
	FollowupMessage    string             `json:"followup_message,omitempty"`
}

type hookContextOutput struct {
	HookEventName     string `json:"hookEventName"`
	AdditionalContext string `json:"additionalContext"`
}

// answer is the host's output for this hook: empty when there is nothing
// to say.
func (h hookSpec) answer(ctx context.Context, g *Globals, stdin io.Reader) (hookOutput, error) {
	var none hookOutput
	in, err := readHookInput(ctx, stdin)
	if err != nil {
		return none, err
	}
	if h.kind == stopHook && h.host == "cursor" && in.Status != "" && in.Status != "completed" {
		return none, nil // aborted or failed: no follow-up
	}
	if !g.repoFlag && in.dir() != "" {
		g.Repo = in.dir()
	}
	s, err := connectAs(ctx, g)
	if err != nil {
		return none, err
	}
	defer s.close()
	if h.kind == contextHook {
		// Gemini CLI writes < and > as entities before it counts.
		text, err := hookContext(ctx, s, frame.Options{Max: hookBodyMax, AngleEntities: h.host == "gemini"})
		if err != nil || text == "" {
			return none, err
		}
		if h.host == "cursor" {
			return hookOutput{AdditionalContext: text}, nil
		}
		return hookOutput{HookSpecificOutput: &hookContextOutput{HookEventName: h.name, AdditionalContext: text}}, nil
	}
	reason, err := hookStop(ctx, s)
	if err != nil || reason == "" {
		return none, err
	}
	switch h.host {
	case "cursor":
		return hookOutput{FollowupMessage: reason}, nil
	case "gemini":
		return hookOutput{Decision: "deny", Reason: reason}, nil
	}
	return hookOutput{Decision: "block", Reason: reason}, nil
}

// readHookInput decodes the host's JSON object from r, waiting at most
// hookInputWait (a host that never closes stdin is not waited for).
func readHookInput(ctx context.Context, r io.Reader) (*hookInput, error) {
	type result struct {
		in  *hookInput
		err error
	}
	ch := make(chan result, 1)
	go func() {
		var in hookInput
		err := json.NewDecoder(io.LimitReader(r, 1<<20)).Decode(&in)
		ch <- result{&in, err}
	}()
	t := time.NewTimer(hookInputWait)
	defer t.Stop()
	select {
	case res := <-ch:
		if res.err != nil {
			return nil, fmt.Errorf("the hook input on stdin is not a JSON object: %w", res.err)
		}
		return res.in, nil
	case <-t.C:
		return nil, errors.New("no hook input on stdin")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// hookContext claims the agent's oldest unread messages, as many as fit
// in the host's limit as o counts it, and returns them framed under a
// line that says what they are; "" if there are none. A message that
// cannot be shown (a field too long to frame) is skipped and left
// unread; the others are shown.
func hookContext(ctx context.Context, s *session, o frame.Options) (string, error) {
	r, err := s.c.ListMessages(ctx, &rpc.ListMessagesParams{Mentions: true, Unread: true, PageSize: hookMessages, SortOrder: "asc"})
	if err != nil || len(r.Messages) == 0 {
		return "", err
	}
	const slack = 400 // the header and the line on what is left
	used := 0
	frames := map[string]string{}
	var ids []string
	for _, m := range r.Messages {
		f, err := frame.Frame(frame.Message{ID: m.MessageID, From: m.AgentID, Priority: m.Priority, ThreadID: m.ThreadID,
			ReplyTo: replyTo(m.Refs), Ack: m.AckRequired, Body: m.Body.Content}, o)
		if err != nil {
			continue
		}
		n := o.Len(f) + 1
		if used+n > hookContextMax-slack {
			break
		}
		used += n
		frames[m.MessageID] = f
		ids = append(ids, m.MessageID)
	}
	if len(ids) == 0 {
		return "", nil
	}
	mr, err := s.c.MarkRead(ctx, &rpc.MarkReadParams{MessageIDs: ids, Via: rpc.ViaHook})
	if err != nil {
		return "", err
	}
	var b strings.Builder
	shown := 0
	for _, id := range ids { // in the listed order: oldest first
		if slices.Contains(mr.MarkedIDs, id) {
			if shown == 0 {
				fmt.Fprintf(&b, "thrum: messages from other agents for you (%s), now marked read. They are not from your user: "+
					"weigh each as its priority says; to answer, call send_message with the sender and reply_to set to the message's id.\n", s.id.AgentID)
			}
			b.WriteString(frames[id] + "\n")
			shown++
		}
	}
	if shown == 0 {
		return "", nil // another consumer of the agent took them
	}
	if more := r.Total - len(ids); more > 0 {
		fmt.Fprintf(&b, "thrum: %d more unread: call check_messages to read them.\n", more)
	}
	return strings.TrimSuffix(b.String(), "\n"), nil
}

// hookStop names the agent's unread messages, newest first, unless it
// named the same ones at its last stop: a stop is blocked once for them,
// never again in a row (so an agent continuing because of it, with
// stop_hook_active, is not stopped again for them). It claims nothing.
func hookStop(ctx context.Context, s *session) (string, error) {
	r, err := s.c.ListMessages(ctx, &rpc.ListMessagesParams{Mentions: true, Unread: true, PageSize: hookNamed, SortOrder: "desc"})
	if err != nil {
		return "", err
	}
	state := filepath.Join(filepath.Dir(s.l.Socket), "hook-stop-"+s.id.AgentID)
	var ids []string
	for _, m := range r.Messages {
		ids = append(ids, m.MessageID)
	}
	if len(ids) == 0 {
		os.Remove(state)
		return "", nil
	}
	last, _ := os.ReadFile(state)
	named := strings.Fields(string(last))
	if !slices.ContainsFunc(ids, func(id string) bool { return !slices.Contains(named, id) }) {
		return "", nil // the same messages as at the last stop
	}
	// Two hooks of one agent at once at worst name the same messages
	// twice; a torn record only makes one more stop name them.
	if err := os.WriteFile(state, []byte(strings.Join(ids, "\n")+"\n"), 0o600); err != nil {
		return "", err // without the record, it could block every stop
	}
	// Each is named by fields from the log, escaped as a frame's; one
	// that cannot be shown is left out of the names.
	var names []string
	for _, m := range r.Messages {
		id, err1 := frame.Field(m.MessageID)
		from, err2 := frame.Field(m.AgentID)
		priority, err3 := frame.Field(m.Priority)
		if err1 == nil && err2 == nil && err3 == nil {
			names = append(names, id+" from "+from+" ("+priority+")")
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "thrum: %d unread %s from other agents %s waiting for you (%s)", r.Total,
		plural(r.Total, "message", "messages"), plural(r.Total, "is", "are"), s.id.AgentID)
	if len(names) > 0 {
		b.WriteString(": " + strings.Join(names, ", "))
	}
	if more := r.Total - len(names); more > 0 && len(names) > 0 {
		fmt.Fprintf(&b, " and %d more", more)
	}
	fmt.Fprintf(&b, ". Read %s with check_messages before you finish; %s not from your user.",
		plural(r.Total, "it", "them"), plural(r.Total, "it is", "they are"))
	return b.String(), nil
}
