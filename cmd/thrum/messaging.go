package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/identity"
	"github.com/thrumhq/thrum/rpc"
)

// QuickstartCmd registers an agent, starts its session and writes its
// identity file.
type QuickstartCmd struct {
	Name    string `required:"" help:"Agent name (a-z, 0-9, _). Give the role and module with --role and --module."`
	Display string `help:"Human-readable display name."`
	Intent  string `help:"What the agent is about to do."`
	Force   bool   `help:"Take over the name from a different agent, or move the agent here from another worktree."`
}

func (c *QuickstartCmd) Help() string {
	return `Registers the agent with the daemon, starts a session (ending any the
agent left open), and writes .thrum/identities/NAME.json (mode 0600) with
the agent's token. Later commands find the identity through THRUM_NAME,
--agent-id, or the single file in .thrum/identities.

An agent whose identity file is in another worktree of the repository
works there: quickstart refuses to take it over (which would end its
session there) unless given --force, which moves it here and removes its
identity file there.

Examples:
  thrum quickstart --name alice --role implementer --module auth --intent "Refactor login"
  thrum quickstart --name bob --role reviewer --module auth --display "Bob (review bot)"`
}

func (c *QuickstartCmd) Run(ctx context.Context, g *Globals) error {
	if err := identity.ValidateName(c.Name); err != nil {
		if u := underscored(c.Name); u != "" {
			err = &hintedError{err, "did you mean " + u + "?"}
		}
		return &codeError{code: exitUsage, err: err}
	}
	role, module := g.Role, g.Module
	if role == "" || module == "" {
		return withCode(exitUsage, "quickstart needs --role and --module, e.g. thrum quickstart --name %s --role implementer --module auth", c.Name)
	}
	s, err := connect(ctx, g)
	if err != nil {
		return err
	}
	defer s.close()
	elsewhere, err := identityElsewhere(ctx, s.l, c.Name)
	if err != nil {
		return err
	}
	if len(elsewhere) > 0 && !c.Force {
		return fmt.Errorf("%s works in another worktree (its identity file is %s): a quickstart here would end its session there; give this worktree's agent another name, or pass --force to move %s here",
			c.Name, elsewhere[0], c.Name)
	}
	reg, err := s.c.RegisterAgent(ctx, &rpc.RegisterAgentParams{Name: c.Name, Role: role, Module: module, Display: c.Display, Force: c.Force})
	if err != nil {
		return err
	}
	if reg.Status == "conflict" {
		return fmt.Errorf("the name %s is registered to a different agent (since %s): choose another name, or pass --force to take it over",
			reg.AgentID, reg.Conflict.RegisteredAt)
	}
	if _, err := s.c.Auth(ctx, &rpc.AuthParams{Token: reg.Token}); err != nil {
		return err
	}
	sp := &rpc.StartSessionParams{AgentID: reg.AgentID}
	if s.l.Git { // the session names its worktree: heartbeats record the branch and changes
		sp.Refs = []rpc.Pair{{Type: rpc.RefWorktree, Value: s.l.Root}}
	}
	ses, err := s.c.StartSession(ctx, sp)
	if err != nil {
		return err
	}
	if s.l.Git {
		if _, err := s.c.Heartbeat(ctx, &rpc.HeartbeatParams{SessionID: ses.SessionID}); err != nil {
			return err
		}
	}
	if c.Intent != "" {
		if _, err := s.c.SetIntent(ctx, &rpc.SetIntentParams{SessionID: ses.SessionID, Intent: &c.Intent}); err != nil {
			return err
		}
	}
	f := &identity.File{Name: c.Name, AgentID: reg.AgentID, Role: role, Module: module, Display: c.Display,
		RepoID: s.l.RepoID(ctx), Token: reg.Token, SessionID: ses.SessionID, UpdatedAt: time.Now().UTC().Format(time.RFC3339)}
	if err := identity.Save(s.l.IDs, f); err != nil {
		return fmt.Errorf("write identity file: %w", err)
	}
	// Moved here: the agent no longer works in the other worktrees.
	for _, p := range elsewhere {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("moved %s here, but its identity file in another worktree remains: %w", c.Name, err)
		}
	}
	res := map[string]any{"agent_id": reg.AgentID, "status": reg.Status, "session_id": ses.SessionID,
		"identity_file": identity.Path(s.l.IDs, c.Name), "moved_from": elsewhere}
	return g.out(res, func(w io.Writer) {
		fmt.Fprintf(w, "> Agent %s %s (role %s, module %s)\n", reg.AgentID, reg.Status, role, module)
		fmt.Fprintf(w, "  Session: %s\n  Identity: %s\n", ses.SessionID, identity.Path(s.l.IDs, c.Name))
		for _, p := range elsewhere {
			fmt.Fprintf(w, "  Moved here: removed %s\n", p)
		}
		if files, err := identity.List(s.l.IDs); err == nil && len(files) > 1 {
			g.hint("Tip: %d agents live here: select this one with THRUM_NAME=%s", len(files), c.Name)
		}
	})
}

// identityElsewhere returns the identity files of the agent name in the
// repository's other worktrees than l's.
func identityElsewhere(ctx context.Context, l *layout, name string) ([]string, error) {
	dirs, err := worktreeIdentityDirs(l)(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, d := range dirs {
		if filepath.Clean(d) == filepath.Clean(l.IDs) {
			continue
		}
		p := identity.Path(d, name)
		if _, err := os.Stat(p); err == nil {
			out = append(out, p)
		}
	}
	return out, nil
}

// parsePair parses "type:value" for --scope and --ref.
func parsePair(flag, s string) (rpc.Pair, error) {
	t, v, ok := strings.Cut(s, ":")
	if !ok || t == "" || v == "" {
		return rpc.Pair{}, withCode(exitUsage, "%s %q: use type:value, e.g. %s module:auth", flag, s, flag)
	}
	return rpc.Pair{Type: t, Value: v}, nil
}

func parsePairs(flag string, in []string) ([]rpc.Pair, error) {
	var out []rpc.Pair
	for _, s := range in {
		p, err := parsePair(flag, s)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// SendCmd sends a message.
type SendCmd struct {
	Message    string   `arg:"" optional:"" help:"Message text; - reads it from stdin."`
	File       string   `short:"F" type:"path" help:"Read the message text from this file."`
	To         []string `help:"Recipient: @name, @role, @group or @everyone (repeatable; adds a mention)."`
	Scope      []string `help:"Scope as type:value, e.g. module:auth (repeatable)."`
	Ref        []string `help:"Reference as type:value, e.g. issue:beads-42 (repeatable)."`
	Mention    []string `help:"Mention @name, @role or @group (repeatable)."`
	Format     string   `default:"markdown" enum:"markdown,plain,json" help:"Content format: markdown, plain or json."`
	Priority   string   `default:"normal" enum:"low,normal,high,critical" help:"Priority: low, normal, high or critical."`
	Structured string   `help:"Typed JSON payload, e.g. '{\"type\":\"test_result\",\"passed\":45}'."`
	Thread     string   `help:"Thread ID to send in."`
	Broadcast  bool     `hidden:"" help:"Deprecated: use --to @everyone."`
	Key        string   `name:"idempotency-key" help:"Key that makes retries safe: a send repeating the key of one in the last 24h returns the first (default: a random key, reused when send retries after a lost connection)."`
	Ack        bool     `help:"Ask each recipient to acknowledge the message (thrum ack, or a reply); thrum sent --unacked lists it until they all have."`
	AckWithin  string   `name:"ack-within" placeholder:"DURATION" help:"Give the recipients this long to acknowledge, e.g. 30m or 2h (implies --ack); thrum sent --overdue lists it after."`
}

func (c *SendCmd) Help() string {
	return `--to (or --mention) addresses the message: to an agent by name, a role, a
group, or @everyone; send says whom each address reaches. Without one the
message is addressed to no one: thrum inbox --all and the web console list it,
but no agent is notified or gets it from its MCP tools
(check_messages, wait_for_message). Use --to @everyone to reach every agent.

Examples:
  thrum send "Test suite is green, ready for review" --to @reviewer
  thrum send "Auth module complete" --to @reviewer --scope module:auth --ref issue:beads-42
  thrum send "Deploy complete" --to @everyone --priority high
  thrum send "Test results" --structured '{"type":"test_result","passed":45,"failed":2}'
  thrum send "Please review #42" --to @reviewer --ack --ack-within 30m
  MSG=$(thrum send "Ready for review" --to @reviewer --quiet)   # --quiet prints just the ID`
}

func (c *SendCmd) Run(ctx context.Context, g *Globals) error {
	content, err := messageText(c.Message, c.File)
	if err != nil {
		return err
	}
	scopes, err := parsePairs("--scope", c.Scope)
	if err != nil {
		return err
	}
	refs, err := parsePairs("--ref", c.Ref)
	if err != nil {
		return err
	}
	p := &rpc.SendMessageParams{Content: content, Format: c.Format, Priority: c.Priority, ThreadID: c.Thread,
		Scopes: scopes, Refs: refs, Mentions: append(append([]string{}, c.To...), c.Mention...),
		AckRequired: c.Ack, AckWithin: c.AckWithin}
	if c.Broadcast {
		g.hint("--broadcast is deprecated: use --to @everyone")
		p.Mentions = append(p.Mentions, "@everyone")
	}
	if c.Structured != "" {
		if !json.Valid([]byte(c.Structured)) {
			return withCode(exitUsage, "--structured is not valid JSON")
		}
		p.Structured = json.RawMessage(c.Structured)
	}
	p.IdempotencyKey = c.Key
	if p.IdempotencyKey == "" {
		p.IdempotencyKey = newIdempotencyKey()
	}
	r, err := sendRetrying(ctx, g, p)
	if rpc.Reason(err) == rpc.ReasonUnknownRecipient {
		return recipientHint(ctx, g, p.Mentions, err)
	}
	if err != nil {
		return err
	}
	return g.out(r, func(w io.Writer) {
		if g.Quiet { // just the ID, for MSG=$(thrum send ... --quiet)
			fmt.Fprintln(w, r.MessageID)
			return
		}
		fmt.Fprintf(w, "> Message sent: %s\n", r.MessageID)
		if len(r.Recipients) == 0 {
			fmt.Fprintln(w, "  To no one: no agent is notified; thrum inbox --all lists it (--to @everyone reaches every agent)")
		}
		for _, rc := range r.Recipients {
			fmt.Fprintf(w, "  To @%s (%s): %s\n", rc.Address, rc.Kind, reach(rc))
		}
		if c.Ack || c.AckWithin != "" {
			fmt.Fprintf(w, "  Acknowledgement asked: thrum sent --unacked lists it until every recipient has acknowledged\n")
		}
	})
}

// recipientHint is err, a send refused for an unknown recipient, with
// the nearest address the daemon knows to the first of mentions that is
// none: an agent, a role or a group.
func recipientHint(ctx context.Context, g *Globals, mentions []string, err error) error {
	s, cerr := connect(ctx, g)
	if cerr != nil {
		return err
	}
	defer s.close()
	known := []string{"everyone"}
	if r, err := s.c.ListAgents(ctx, &rpc.ListAgentsParams{}); err == nil {
		for _, a := range r.Agents {
			known = append(known, a.AgentID, a.Role)
		}
	}
	if r, err := s.c.ListGroups(ctx, &rpc.ListGroupsParams{}); err == nil {
		for _, gr := range r.Groups {
			known = append(known, gr.Name)
		}
	}
	for _, m := range mentions {
		addr := identity.NormalizeAgentID(m)
		if slices.Contains(known, addr) {
			continue
		}
		if near := didYouMean(addr, known); near != "" {
			return &hintedError{err, "did you mean @" + near + "?"}
		}
		break
	}
	return err
}

// messageText is a message's text: arg, or stdin when arg is "-", or
// the file path; one of them, at most thrum.DefaultMaxContentBytes (the
// daemon's limit), so a long text never meets the shell's limit on
// arguments nor is refused only after it was sent.
func messageText(arg, path string) (string, error) {
	var r io.Reader
	switch {
	case path != "" && arg != "":
		return "", withCode(exitUsage, "give the text once: as an argument, - for stdin, or --file")
	case path != "":
		f, err := os.Open(path)
		if err != nil {
			return "", withCode(exitUsage, "--file: %v", err)
		}
		defer f.Close()
		r = f
	case arg == "-":
		r = os.Stdin
	case arg == "":
		return "", withCode(exitUsage, "no message text: give it as an argument, - to read it from stdin, or --file PATH")
	default:
		r = strings.NewReader(arg)
	}
	b, err := io.ReadAll(io.LimitReader(r, thrum.DefaultMaxContentBytes+1))
	if err != nil {
		return "", err
	}
	if len(b) > thrum.DefaultMaxContentBytes {
		return "", withCode(exitUsage, "the message text is over the limit of %d bytes (%d KiB): send a shorter one, or put the rest in a file the message names",
			thrum.DefaultMaxContentBytes, thrum.DefaultMaxContentBytes>>10)
	}
	return string(b), nil
}

func reach(rc rpc.Recipient) string {
	switch len(rc.Agents) {
	case 0:
		return "no agents yet"
	case 1:
		if len(rc.Active) == 1 {
			return rc.Agents[0] + " (active)"
		}
		return rc.Agents[0] + " (offline)"
	}
	return fmt.Sprintf("%d agents, %d active", len(rc.Agents), len(rc.Active))
}

// ReplyCmd replies to a message.
type ReplyCmd struct {
	MessageID string `arg:"" name:"msg-id" help:"Message to reply to."`
	Text      string `arg:"" optional:"" help:"Reply text; - reads it from stdin."`
	File      string `short:"F" type:"path" help:"Read the reply text from this file."`
	Format    string `default:"markdown" enum:"markdown,plain,json" help:"Content format: markdown, plain or json."`
}

func (c *ReplyCmd) Help() string {
	return `Sends a message with a reply_to ref to the original, addressed to its
author and in its thread, and marks the original read. The reply
acknowledges the original for you, if it was addressed to you.

With --quiet it prints just the reply's ID.

Examples:
  thrum reply msg_01HXE... "Looks good, merging now"
  thrum reply "$MSG" "On it" --quiet`
}

func (c *ReplyCmd) Run(ctx context.Context, g *Globals) error {
	content, err := messageText(c.Text, c.File)
	if err != nil {
		return err
	}
	s, err := connectAs(ctx, g)
	if err != nil {
		return err
	}
	defer s.close()
	orig, err := s.c.GetMessage(ctx, &rpc.GetMessageParams{MessageID: c.MessageID})
	if err != nil {
		return err
	}
	p := &rpc.SendMessageParams{Content: content, Format: c.Format, ThreadID: orig.Message.ThreadID,
		Refs: []rpc.Pair{{Type: rpc.RefReplyTo, Value: c.MessageID}}}
	if orig.Message.Author.AgentID != s.id.AgentID {
		p.Mentions = []string{"@" + orig.Message.Author.AgentID}
	}
	p.IdempotencyKey = newIdempotencyKey()
	r, err := sendRetrying(ctx, g, p)
	if err != nil {
		return err
	}
	_, _ = s.c.MarkRead(ctx, &rpc.MarkReadParams{MessageIDs: []string{c.MessageID}, Via: rpc.ViaReply}) // best effort
	return g.out(map[string]any{"message_id": r.MessageID, "reply_to": c.MessageID, "thread_id": r.ThreadID, "created_at": r.CreatedAt}, func(w io.Writer) {
		if g.Quiet {
			fmt.Fprintln(w, r.MessageID)
			return
		}
		fmt.Fprintf(w, "> Reply sent: %s\n  In reply to: %s\n", r.MessageID, c.MessageID)
	})
}

// InboxCmd lists messages.
type InboxCmd struct {
	All      bool   `help:"Every message: the whole feed, not only those addressed to you."`
	Mentions bool   `help:"Only messages addressed to you (the default; overrides --all)."`
	Scope    string `help:"Only messages with this scope (type:value)."`
	Unread   bool   `help:"Only unread messages."`
	MarkRead bool   `name:"mark-read" help:"Mark the unread messages shown read for you, as an agent's MCP tools do, and say how many."`
	PageSize int    `default:"10" help:"Messages per page (1-100)."`
	Page     int    `default:"1" help:"Page number."`
}

func (c *InboxCmd) Help() string {
	return `Lists the messages addressed to you: by name, role, group or @everyone.
--all lists every message, the whole feed, and needs no identity.

Shows ● for unread and ○ for read messages, replies grouped under their
original with ↳ (an original that is not in the list, e.g. your own
message, is shown above them for context), and (edited) on edited
messages.

Looking marks nothing read: an agent's messages are consumed by its own
delivery (the MCP tools check_messages and wait_for_message take each
message once), so a look at its inbox never takes a message from it.
--mark-read marks the unread messages shown read for you, by the same
claim those tools make, and says how many it marked.

Examples:
  thrum inbox
  thrum inbox --all
  thrum inbox --unread --mark-read
  thrum inbox --scope module:auth --page 2`
}

func (c *InboxCmd) Run(ctx context.Context, g *Globals) error {
	if c.PageSize < 1 || c.PageSize > 100 {
		return withCode(exitUsage, "--page-size %d: use 1 to 100", c.PageSize)
	}
	if c.Page < 1 {
		return withCode(exitUsage, "--page %d: pages start at 1", c.Page)
	}
	mine := c.Mentions || !c.All
	p := &rpc.ListMessagesParams{Mentions: mine, Unread: c.Unread, PageSize: c.PageSize, Page: c.Page}
	var filter []string
	if c.Scope != "" {
		sc, err := parsePair("--scope", c.Scope)
		if err != nil {
			return err
		}
		p.Scope = &sc
		filter = append(filter, "scope="+c.Scope)
	}
	if mine {
		filter = append(filter, "to you")
	}
	if c.Unread {
		filter = append(filter, "unread")
	}
	s, err := c.connect(ctx, g, mine)
	if err != nil {
		return err
	}
	defer s.close()
	r, err := s.c.ListMessages(ctx, p)
	if err != nil {
		return err
	}
	all := r.Total
	if len(filter) > 0 && r.Total == 0 {
		if t, err := s.c.ListMessages(ctx, &rpc.ListMessagesParams{PageSize: 1}); err == nil {
			all = t.Total
		}
	}
	me := ""
	if s.id != nil {
		me = s.id.AgentID
	}
	if mine && r.Total == 0 && c.Scope == "" && !c.Unread {
		return g.out(r, func(w io.Writer) {
			fmt.Fprintf(w, "No messages addressed to @%s; thrum inbox --all lists all %d %s\n", me, all, plural(all, "message", "messages"))
		})
	}
	view := inboxView{Originals: originals(ctx, s, r.Messages), Quiet: g.Quiet, Filter: filter, FilterFlags: c.flags(), AllTotal: all, Now: time.Now(), Me: me,
		NextCmd: strings.TrimSpace("thrum inbox "+c.flags()) + pageSizeFlag(c.PageSize)}
	if !c.MarkRead {
		return g.out(r, func(w io.Writer) { renderInbox(w, r, view) })
	}
	var ids []string
	for _, m := range r.Messages {
		if !m.IsRead {
			ids = append(ids, m.MessageID)
		}
	}
	marked := &rpc.MarkReadResult{MarkedIDs: []string{}}
	if len(ids) > 0 {
		if marked, err = s.c.MarkRead(ctx, &rpc.MarkReadParams{MessageIDs: ids}); err != nil {
			return err
		}
	}
	r.Unread = max(0, r.Unread-marked.MarkedCount) // what is unread now; the page still shows what was

	out := struct {
		*rpc.ListMessagesResult
		MarkedIDs   []string `json:"marked_ids"`
		MarkedCount int      `json:"marked_count"`
	}{r, marked.MarkedIDs, marked.MarkedCount}
	return g.out(out, func(w io.Writer) {
		renderInbox(w, r, view)
		fmt.Fprintf(w, "> Marked %d %s as read", marked.MarkedCount, plural(marked.MarkedCount, "message", "messages"))
		if taken := len(ids) - marked.MarkedCount; taken > 0 {
			fmt.Fprintf(w, " (%d taken meanwhile by another of your readers)", taken)
		}
		fmt.Fprintln(w)
	})
}

// originals fetches the messages that replies in ms answer but that ms
// does not hold, so the inbox can show a reply under its original (or say
// it was deleted). One that cannot be fetched is left out: the inbox then
// says the reply's original is not in the list. Fetching does not mark
// them read.
func originals(ctx context.Context, s *session, ms []rpc.MessageSummary) map[string]rpc.MessageSummary {
	have := map[string]bool{}
	for _, m := range ms {
		have[m.MessageID] = true
	}
	out := map[string]rpc.MessageSummary{}
	for _, m := range ms {
		p := rpc.ReplyTo(m.Refs)
		if p == "" || have[p] {
			continue
		}
		have[p] = true
		r, err := s.c.GetMessage(ctx, &rpc.GetMessageParams{MessageID: p})
		if err != nil {
			s.g.debugf("original %s of %s: %v", p, m.MessageID, err)
			continue
		}
		o := r.Message
		out[p] = rpc.MessageSummary{MessageID: o.MessageID, ThreadID: o.ThreadID, AgentID: o.Author.AgentID, Body: o.Body,
			CreatedAt: o.CreatedAt, UpdatedAt: o.UpdatedAt, Deleted: o.Deleted, IsRead: o.IsRead, Priority: o.Priority,
			Scopes: o.Scopes, Refs: o.Refs, Tags: o.Tags, Version: o.Version}
	}
	return out
}

// pageSizeFlag is " --page-size N" for a size other than the default.
func pageSizeFlag(n int) string {
	if n == 10 {
		return ""
	}
	return fmt.Sprintf(" --page-size %d", n)
}

// connect connects as the agent whose inbox it is; the whole feed needs
// no agent, so --all goes on without one.
func (c *InboxCmd) connect(ctx context.Context, g *Globals, mine bool) (*session, error) {
	s, err := connect(ctx, g)
	if err != nil {
		return nil, err
	}
	err = s.identify(ctx)
	switch {
	case err == nil || !mine && errors.Is(err, identity.ErrNoIdentity) && g.AgentID == "" && g.Role == "":
		return s, nil
	case errors.Is(err, identity.ErrNoIdentity) && hintFor(g, err) != "":
		err = &hintedError{err, hintFor(g, err) + "; thrum inbox --all lists every message"}
	}
	s.close()
	return nil, err
}

func (c *InboxCmd) flags() string {
	var f []string
	if c.All && !c.Mentions {
		f = append(f, "--all")
	}
	if c.Scope != "" {
		f = append(f, "--scope "+c.Scope)
	}
	if c.Unread {
		f = append(f, "--unread")
	}
	return strings.Join(f, " ")
}

// MessageCmd groups single-message operations.
type MessageCmd struct {
	Get    MessageGetCmd    `cmd:"" help:"Show one message in full (marks nothing read)."`
	Edit   MessageEditCmd   `cmd:"" help:"Replace a message's content (author only)."`
	Delete MessageDeleteCmd `cmd:"" help:"Soft-delete a message (author only; needs --force)."`
	Read   MessageReadCmd   `cmd:"" help:"Mark messages read."`
}

type MessageGetCmd struct {
	MessageID string `arg:"" name:"msg-id" help:"Message ID."`
}

func (c *MessageGetCmd) Help() string {
	return "Shows the message and whether you have read it, and marks nothing read:\n" +
		"mark it with thrum message read. Receipts say, for each recipient resolved\n" +
		"at send, whether it is queued, delivered (how and when) or acknowledged.\n\n" +
		"Examples:\n  thrum message get msg_01HXE...\n  thrum message get msg_01HXE... --json"
}

func (c *MessageGetCmd) Run(ctx context.Context, g *Globals) error {
	s, err := connectAs(ctx, g)
	if err != nil {
		return err
	}
	defer s.close()
	r, err := s.c.GetMessage(ctx, &rpc.GetMessageParams{MessageID: c.MessageID})
	if err != nil {
		return err
	}
	return g.out(r, func(w io.Writer) { renderMessage(w, &r.Message, time.Now()) })
}

type MessageEditCmd struct {
	MessageID string `arg:"" name:"msg-id" help:"Message ID."`
	Text      string `arg:"" help:"New content."`
}

func (c *MessageEditCmd) Help() string {
	return "Examples:\n  thrum message edit msg_01HXE... \"Updated: auth module complete with rate limiting\"\n  thrum message edit \"$MSG\" \"Fixed a typo\" --json"
}

func (c *MessageEditCmd) Run(ctx context.Context, g *Globals) error {
	s, err := connectAs(ctx, g)
	if err != nil {
		return err
	}
	defer s.close()
	r, err := s.c.EditMessage(ctx, &rpc.EditMessageParams{MessageID: c.MessageID, Content: &c.Text})
	if err != nil {
		return err
	}
	return g.out(r, func(w io.Writer) { fmt.Fprintf(w, "> Message edited: %s (version %d)\n", r.MessageID, r.Version) })
}

type MessageDeleteCmd struct {
	MessageID string `arg:"" name:"msg-id" help:"Message ID."`
	Force     bool   `help:"Confirm the deletion."`
	Reason    string `help:"Why it is deleted."`
}

func (c *MessageDeleteCmd) Help() string {
	return "Deleted messages stay in the log and in message get, marked DELETED.\n\nExamples:\n  thrum message delete msg_01HXE... --force\n  thrum message delete msg_01HXE... --force --reason \"sent to the wrong group\""
}

func (c *MessageDeleteCmd) Run(ctx context.Context, g *Globals) error {
	if !c.Force {
		return withCode(exitUsage, "refusing to delete %s without --force", c.MessageID)
	}
	s, err := connectAs(ctx, g)
	if err != nil {
		return err
	}
	defer s.close()
	r, err := s.c.DeleteMessage(ctx, &rpc.DeleteMessageParams{MessageID: c.MessageID, Reason: c.Reason})
	if err != nil {
		return err
	}
	return g.out(r, func(w io.Writer) { fmt.Fprintf(w, "> Message deleted: %s\n", r.MessageID) })
}

type MessageReadCmd struct {
	MessageIDs []string `arg:"" optional:"" name:"msg-id" help:"Message IDs."`
	All        bool     `help:"Mark every unread message read."`
}

func (c *MessageReadCmd) Help() string {
	return "Marks messages read for you. The count says how many this command newly marked;\n" +
		"an unknown ID is an error (exit 1) naming it, and then nothing is marked.\n\n" +
		"Examples:\n  thrum message read msg_01 msg_02\n  thrum message read --all"
}

func (c *MessageReadCmd) Run(ctx context.Context, g *Globals) error {
	if len(c.MessageIDs) == 0 && !c.All {
		return withCode(exitUsage, "name message IDs, or pass --all")
	}
	s, err := connectAs(ctx, g)
	if err != nil {
		return err
	}
	defer s.close()
	if c.All {
		// Mark page by page until nothing is unread; count what this
		// command newly marked (another reader may take some meanwhile).
		res := &rpc.MarkReadResult{MarkedIDs: []string{}}
		for {
			r, err := s.c.ListMessages(ctx, &rpc.ListMessagesParams{Unread: true, PageSize: 100})
			if err != nil {
				return err
			}
			if len(r.Messages) == 0 {
				break
			}
			var page []string
			for _, m := range r.Messages {
				page = append(page, m.MessageID)
			}
			mr, err := s.c.MarkRead(ctx, &rpc.MarkReadParams{MessageIDs: page})
			if err != nil {
				return err
			}
			res.MarkedIDs = append(res.MarkedIDs, mr.MarkedIDs...)
		}
		res.MarkedCount = len(res.MarkedIDs)
		if res.MarkedCount == 0 {
			return g.out(res, func(w io.Writer) { fmt.Fprintln(w, "> No unread messages") })
		}
		return g.out(res, func(w io.Writer) {
			fmt.Fprintf(w, "> Marked %d %s as read\n", res.MarkedCount, plural(res.MarkedCount, "message", "messages"))
		})
	}
	// An unknown ID is an error naming it (exit 1), and nothing is marked.
	r, err := s.c.MarkRead(ctx, &rpc.MarkReadParams{MessageIDs: c.MessageIDs})
	if err != nil {
		return err
	}
	return g.out(r, func(w io.Writer) {
		fmt.Fprintf(w, "> Marked %d %s as read", r.MarkedCount, plural(r.MarkedCount, "message", "messages"))
		if already := len(slices.Compact(slices.Sorted(slices.Values(c.MessageIDs)))) - r.MarkedCount; already > 0 {
			fmt.Fprintf(w, " (%d read already)", already)
		}
		fmt.Fprintln(w)
	})
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// newIdempotencyKey returns a random key for one send.
func newIdempotencyKey() string {
	b := make([]byte, 12)
	rand.Read(b)
	return "cli-" + hex.EncodeToString(b)
}

// sendRetrying sends p, and if the connection to the daemon fails before
// an answer arrives (a restart, say), reconnects and sends again with the
// same idempotency key, so the message is stored once however often it
// is tried. An answer from the daemon, error or not, is final.
func sendRetrying(ctx context.Context, g *Globals, p *rpc.SendMessageParams) (*rpc.SendMessageResult, error) {
	const attempts = 4
	delay := 250 * time.Millisecond
	connected := false // a daemon that is not running at first is not waited for
	for try := 1; ; try++ {
		s, err := connectAs(ctx, g)
		if err == nil {
			connected = true
			var r *rpc.SendMessageResult
			r, err = s.c.SendMessage(ctx, p)
			s.close()
			var re *rpc.Error
			if err == nil || errors.As(err, &re) {
				return r, err
			}
		}
		var ce *codeError
		if errors.As(err, &ce) && (ce.code != exitNoDaemon || !connected) || try == attempts || ctx.Err() != nil {
			return nil, err
		}
		g.debugf("send: %v; retrying with idempotency key %s", err, p.IdempotencyKey)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(delay):
		}
		delay *= 2
	}
}
