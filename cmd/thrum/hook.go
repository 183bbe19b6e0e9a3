package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/thrumhq/thrum/inbox"
	"github.com/thrumhq/thrum/internal/frame"
	"github.com/thrumhq/thrum/internal/private"
	"github.com/thrumhq/thrum/rpc"
)

// HookCmd answers one hook of a coding agent's host (Claude Code, Codex,
// Cursor, Gemini CLI): it reads the host's JSON on stdin and prints the
// host's documented output (DESIGN.md, "Reaching agents in their
// hosts"). Hooks run on the host's critical path, so whatever goes wrong
// (no daemon, no identity, bad input, a slow daemon) it prints "{}" and
// exits 0: within hookBudget, unless it has sent a claim, whose answer it
// waits for up to the host's own timeout for the hook (hookTimeout),
// since what a claim took must be printed or it is lost.
type HookCmd struct {
	Host  string `arg:"" optional:"" help:"The host: claude, codex, cursor or gemini."`
	Event string `arg:"" optional:"" help:"The host's event, in kebab case (see the pairs above)."`
}

// What a hook does. A hook claims only where its output goes to the model
// with a request (DESIGN.md's table of the ways in); elsewhere it
// announces.
const (
	// contextHook claims the agent's unread messages and adds them to the
	// context, which goes out with the request it runs for.
	contextHook = iota
	// firstTurnHook is a contextHook at a session's start that runs with
	// its first turn (Codex): it says nothing of what is left, which the
	// prompt's hook of the same request shows.
	firstTurnHook
	// announceHook rings the doorbell in the context and claims nothing:
	// a session's start in a host that runs it at launch, which may never
	// come to a prompt (Claude Code, Gemini CLI, Cursor).
	announceHook
	// stopHook names the unread messages in a stop's block and claims
	// nothing, since a block's reason may be dropped.
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
	{"claude", "session-start", "SessionStart", announceHook},
	{"claude", "user-prompt-submit", "UserPromptSubmit", contextHook},
	{"claude", "post-tool-use", "PostToolUse", contextHook},
	{"claude", "stop", "Stop", stopHook},
	{"codex", "session-start", "SessionStart", firstTurnHook},
	{"codex", "user-prompt-submit", "UserPromptSubmit", contextHook},
	{"codex", "stop", "Stop", stopHook},
	{"cursor", "session-start", "sessionStart", announceHook},
	{"cursor", "stop", "stop", stopHook},
	{"gemini", "session-start", "SessionStart", announceHook},
	{"gemini", "before-agent", "BeforeAgent", contextHook},
	{"gemini", "after-agent", "AfterAgent", stopHook},
}

// hookTimeout is how long each host lets one run of thrum hook take
// before it gives up on it: thrum setup writes it into the host's hook
// entries (Claude Code and Codex take seconds, Gemini CLI milliseconds),
// so a hook may rely on that long. Cursor is not listed: setup writes no
// timeout there, and Cursor's own applies; its hooks claim nothing. A hook
// that has sent a claim waits for its answer until hookTimeoutMargin
// before it: what the daemon claimed must be printed, or it is lost.
var hookTimeout = map[string]time.Duration{
	"claude": 5 * time.Second,
	"codex":  5 * time.Second,
	"gemini": 5 * time.Second,
}

const (
	// hookBudget bounds what a hook does before it claims, and the
	// claim's deadline: a daemon that cannot queue the claim's read by
	// then refuses it, and the hook prints {} having claimed nothing.
	hookBudget = 500 * time.Millisecond
	// hookTimeoutMargin is how long before the host's timeout a hook
	// stops waiting for a claim's answer, to print and exit.
	hookTimeoutMargin = time.Second
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
output. At a prompt or a tool use (and at Codex's session start, which runs
with the first turn), the agent's unread messages (up to 5, each in a
<thrum-message> frame) become the hook's additional context, marked read so
that they are shown once. At a session's start in Claude Code, Gemini CLI
and Cursor, which may never reach a prompt, it announces them and marks
nothing read. At a stop, if unread messages wait, the stop is blocked
(Cursor: a follow-up message) with a reason naming them, once for the same
messages. Whatever fails — no daemon, no identity, bad input, a daemon that
does not answer within half a second — it prints {} and exits 0: a hook
never blocks its host. Once it has claimed messages it waits for the
daemon's answer up to the host's timeout for the hook (5 s, as thrum setup
writes it), so that what it claimed is what it prints.

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
	SessionID      string   `json:"session_id"`
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
		h := hookEvents[i]
		wait := hookBudget // a host with no timeout of ours gets no claim
		if t, ok := hookTimeout[h.host]; ok {
			wait = t - hookTimeoutMargin
		}
		ctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		var err error
		if out, err = h.answer(ctx, time.Now().Add(hookBudget), g, os.Stdin); err != nil {
			g.debugf("hook %s %s: %v", c.Host, c.Event, err)
			out = hookOutput{}
			// Recorded where the repository is known (the input's cwd
			// may have named it); a hook outside one has nowhere to.
			if l, lerr := resolveLayout(ctx, g); lerr == nil {
				if rerr := recordHookFailure(l, c.Host+" "+c.Event, err); rerr != nil {
					g.debugf("hook: recording the failure: %v", rerr)
				}
			}
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
// to say. What it does before a claim ends by budget; ctx bounds the wait
// for a claim's answer.
func (h hookSpec) answer(ctx context.Context, budget time.Time, g *Globals, stdin io.Reader) (hookOutput, error) {
	var none hookOutput
	pre, cancel := context.WithDeadline(ctx, budget)
	defer cancel()
	in, err := readHookInput(pre, stdin)
	if err != nil {
		return none, err
	}
	if h.kind == stopHook && h.host == "cursor" && in.Status != "" && in.Status != "completed" {
		return none, nil // aborted or failed: no follow-up
	}
	if !g.repoFlag && in.dir() != "" {
		g.Repo = in.dir()
	}
	a, err := resolveAgent(pre, g, false)
	if err != nil {
		return none, err
	}
	if h.host == "codex" && h.name == "SessionStart" && in.SessionID != "" {
		// The thread the agent's MCP server wakes (mcp serve --wake codex).
		if err := registerCodexThread(a.l, a.f.AgentID, in.SessionID); err != nil {
			return none, fmt.Errorf("registering the Codex session to wake: %w", err)
		}
	}
	a.logger = slog.New(slog.DiscardHandler)
	ib, err := inbox.New(pre, a.dial, a.id(), &inbox.Options{Logger: a.logger, NoPush: true}) // it claims or counts once
	if err != nil {
		return none, a.failed(err)
	}
	defer ib.Close()
	var text string
	switch h.kind {
	case contextHook, firstTurnHook:
		// Gemini CLI writes < and > as entities before it counts.
		shape := inbox.Shape{BodyMax: hookBodyMax, AngleEntities: h.host == "gemini"}
		text, err = hookContext(ctx, budget, ib, shape, h.kind == contextHook)
	case announceHook:
		text, err = hookAnnounce(pre, ib, slices.ContainsFunc(hookEvents, func(o hookSpec) bool {
			return o.host == h.host && o.kind == contextHook
		}))
	default:
		reason, err := hookStop(pre, ib, a.l)
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
	if err != nil || text == "" {
		return none, err
	}
	if h.host == "cursor" {
		return hookOutput{AdditionalContext: text}, nil
	}
	return hookOutput{HookSpecificOutput: &hookContextOutput{HookEventName: h.name, AdditionalContext: text}}, nil
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
// in the host's limit as shape counts it, and returns them framed under a
// line that says what they are; "" if there are none. A message that
// cannot be shown (a field too long to frame) is left unread; the others
// are shown. The claim is bound to this hook: the daemon refuses it if it
// could not queue it by budget, and the hook waits for its answer while
// ctx lasts. more adds how many are left.
func hookContext(ctx context.Context, budget time.Time, ib *inbox.Inbox, shape inbox.Shape, more bool) (string, error) {
	const slack = 400 // the header and the line on what is left
	r, err := ib.Check(ctx, inbox.CheckParams{Limit: hookMessages, Via: rpc.ViaHook, Shape: shape,
		TotalMax: hookContextMax - slack, Deadline: budget})
	if err != nil || len(r.Messages) == 0 {
		return "", err // none, or another consumer of the agent took them
	}
	var b strings.Builder
	fmt.Fprintf(&b, "thrum: messages from other agents for you (%s), now marked read. They are not from your user: "+
		"weigh each as its priority says; to answer, call send_message with the sender and reply_to set to the message's id.\n", ib.ID().AgentID)
	for _, m := range r.Messages { // oldest first
		b.WriteString(m.Content + "\n")
	}
	if more && r.Remaining > 0 {
		fmt.Fprintf(&b, "thrum: %d more unread: call check_messages to read them.\n", r.Remaining)
	}
	return strings.TrimSuffix(b.String(), "\n"), nil
}

// hookAnnounce rings the agent's doorbell: how many messages wait and the
// newest by subject, claiming nothing; "" if none wait. Where a prompt's
// hook claims (prompted), it names them without their subjects and says
// the prompt brings them: in Claude Code and Gemini CLI the start's
// context goes out with the first prompt's, which shows them in the same
// request, once.
func hookAnnounce(ctx context.Context, ib *inbox.Inbox, prompted bool) (string, error) {
	d, err := ib.Doorbell(ctx, hookMessages, nil)
	if err != nil || d.Unread == 0 {
		return "", err
	}
	if !prompted {
		return d.Text(ib.ID().AgentID, false), nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "thrum: %d unread %s from other agents %s for you (%s), not from your user",
		d.Unread, plural(d.Unread, "message", "messages"), plural(d.Unread, "waits", "wait"), ib.ID().AgentID)
	if names := hookNames(d); len(names) > 0 {
		b.WriteString(": " + strings.Join(names, ", "))
	}
	fmt.Fprintf(&b, ". Not shown here: your prompt brings %s.", plural(d.Unread, "it", "them"))
	return b.String(), nil
}

// hookNames names d's messages, newest first, by fields from the log
// escaped as a frame's; one that cannot be shown is left out.
func hookNames(d *inbox.Doorbell) []string {
	var names []string
	for _, m := range slices.Backward(d.New) {
		id, err1 := frame.Field(m.MessageID)
		from, err2 := frame.Field(m.From)
		priority, err3 := frame.Field(m.Priority)
		if err1 == nil && err2 == nil && err3 == nil {
			names = append(names, id+" from "+from+" ("+priority+")")
		}
	}
	return names
}

// hookStop names the agent's unread messages, newest first, unless it
// named the same ones at its last stop: a stop is blocked once for them,
// never again in a row (so an agent continuing because of it, with
// stop_hook_active, is not stopped again for them). It claims nothing.
func hookStop(ctx context.Context, ib *inbox.Inbox, l *layout) (string, error) {
	d, err := ib.Doorbell(ctx, hookNamed, nil)
	if err != nil {
		return "", err
	}
	agent := ib.ID().AgentID
	state := filepath.Join(filepath.Dir(l.Socket), "hook-stop-"+agent)
	var ids []string
	for _, m := range slices.Backward(d.New) {
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
	names := hookNames(d)
	var b strings.Builder
	fmt.Fprintf(&b, "thrum: %d unread %s from other agents %s waiting for you (%s)", d.Unread,
		plural(d.Unread, "message", "messages"), plural(d.Unread, "is", "are"), agent)
	if len(names) > 0 {
		b.WriteString(": " + strings.Join(names, ", "))
	}
	if more := d.Unread - len(names); more > 0 && len(names) > 0 {
		fmt.Fprintf(&b, " and %d more", more)
	}
	fmt.Fprintf(&b, ". Read %s with check_messages before you finish; %s not from your user.",
		plural(d.Unread, "it", "them"), plural(d.Unread, "it is", "they are"))
	return b.String(), nil
}

// Hook failures. A hook says nothing to its host when it fails ({} and exit
// 0), so each failure is a line in a bounded log in the repository's var
// directory, which thrum daemon status and thrum doctor summarise.

const (
	hookFailuresFile = "hook-failures.log"
	// hookFailuresMax bounds the log: past it, the older half goes.
	hookFailuresMax = 64 << 10
)

// hookFailure is one line of the log.
type hookFailure struct {
	At    time.Time `json:"at"`
	Hook  string    `json:"hook"` // HOST EVENT
	Error string    `json:"error"`
}

func hookFailuresPath(l *layout) string {
	return filepath.Join(filepath.Dir(l.PIDFile), hookFailuresFile)
}

// recordHookFailure appends a failure to l's log, keeping it under
// hookFailuresMax by dropping its older half.
func recordHookFailure(l *layout, hook string, failure error) error {
	if err := private.Dir(filepath.Dir(l.PIDFile)); err != nil {
		return err
	}
	line, _ := json.Marshal(hookFailure{At: time.Now().UTC(), Hook: hook, Error: failure.Error()})
	path := hookFailuresPath(l)
	f, err := private.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND)
	if err != nil {
		return err
	}
	_, err = f.Write(append(line, '\n'))
	st, serr := f.Stat()
	f.Close()
	if err != nil || serr != nil || st.Size() <= hookFailuresMax {
		return errors.Join(err, serr)
	}
	b, err := readCapped(path, 2*hookFailuresMax)
	if err != nil {
		return err
	}
	b = b[len(b)/2:]
	if i := strings.IndexByte(string(b), '\n'); i >= 0 {
		b = b[i+1:]
	}
	return private.WriteFile(path, b)
}

// hookFailures summarises l's log: how many failures it holds, and the
// last (nil if none).
func hookFailures(l *layout) (int, *hookFailure) {
	b, err := readCapped(hookFailuresPath(l), 2*hookFailuresMax)
	if err != nil {
		return 0, nil
	}
	var n int
	var last *hookFailure
	for line := range strings.Lines(string(b)) {
		var h hookFailure
		if json.Unmarshal([]byte(line), &h) == nil {
			n, last = n+1, &h
		}
	}
	return n, last
}

// hookFailuresLine is the summary's line for status and doctor ("" when
// the log holds none).
func hookFailuresLine(l *layout) string {
	n, last := hookFailures(l)
	if n == 0 {
		return ""
	}
	return shown(fmt.Sprintf("hooks: %d %s recorded in %s; the last, %s at %s: %s", n, plural(n, "failure", "failures"),
		hookFailuresPath(l), last.Hook, last.At.Local().Format(time.DateTime), last.Error))
}

// hookFailuresJSON is the summary for --json: the count and the last.
func hookFailuresJSON(l *layout) map[string]any {
	n, last := hookFailures(l)
	return map[string]any{"count": n, "last": last, "log": hookFailuresPath(l)}
}

// readCapped reads at most max bytes of the file at path.
func readCapped(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, max))
}
