package mcpserver

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/thrumhq/thrum/identity"
	"github.com/thrumhq/thrum/rpc"
)

// ToolNames lists the tools a Server registers, in order.
var ToolNames = []string{
	"send_message", "check_messages", "wait_for_message", "get_message", "list_agents", "broadcast_message",
	"create_group", "delete_group", "add_group_member", "remove_group_member", "list_groups", "get_group",
	"search_messages",
}

func ptr[T any](v T) *T { return &v }

// annotations: every tool works on thrum's own closed world.
func annotate(title string, readOnly, destructive, idempotent bool) *mcp.ToolAnnotations {
	return &mcp.ToolAnnotations{Title: title, ReadOnlyHint: readOnly, DestructiveHint: ptr(destructive),
		IdempotentHint: idempotent, OpenWorldHint: ptr(false)}
}

type edits = map[string]func(*jsonschema.Schema)

// add registers a tool whose handler returns its output or an error; the
// error becomes a structured tool error (see structuredErrors).
func add[In, Out any](s *Server, t *mcp.Tool, in, out edits, h func(context.Context, *mcp.CallToolRequest, In) (Out, error)) {
	t.InputSchema = schemaFor[In](in)
	t.OutputSchema = outputSchemaFor[Out](out)
	mcp.AddTool(s.mcp, t, func(ctx context.Context, req *mcp.CallToolRequest, args In) (*mcp.CallToolResult, Out, error) {
		o, err := h(ctx, req, args)
		if err != nil {
			return nil, o, toolError(t.Name, err)
		}
		return nil, o, nil
	})
}

func (s *Server) register() {
	add(s, &mcp.Tool{Name: "send_message", Annotations: annotate("Send a message", false, false, false),
		Description: "Send a message to an agent, a role, a group or @everyone."},
		edits{"priority": enum(priorityEnum)},
		edits{"status": constant("delivered"), "recipient_status": enum([]any{"active", "offline", "no_agents"}),
			"recipients[].kind": enum(addressKindEnum)},
		s.sendMessage)
	add(s, &mcp.Tool{Name: "check_messages", Annotations: annotate("Check messages", false, false, false),
		Description: "Return your unread messages, oldest first, and mark them read. Each message is returned by one call only."},
		edits{"limit": bounds(1, 100)},
		messageInfoEdits("messages[].", edits{"status": enum([]any{"messages", "empty"})}),
		s.checkMessages)
	add(s, &mcp.Tool{Name: "wait_for_message", Annotations: annotate("Wait for a message", false, false, false),
		Description: "Block until a message for you arrives, then return it and mark it read " +
			"(oldest first, or the oldest passing priority_filter). One wait at a time."},
		edits{"timeout": bounds(1, int(MaxWaitTimeout/time.Second)),
			"priority_filter": enum(priorityFilterEnum)},
		messageInfoEdits("message.", edits{"status": enum([]any{"message_received", statusAcknowledged, "timeout", "shutdown"})}),
		s.waitForMessage)
	add(s, &mcp.Tool{Name: "get_message", Annotations: annotate("Get a conversation", true, false, true),
		Description: "Show a message in its conversation (thread or reply chain), oldest first. Marks nothing read."},
		nil, messageInfoEdits("conversation[].", edits{}),
		s.getMessage)
	add(s, &mcp.Tool{Name: "list_agents", Annotations: annotate("List agents", true, false, true),
		Description: "List registered agents with their role, module and active/offline status."},
		nil, edits{"agents[].status": enum(agentStatusEnum)},
		s.listAgents)
	add(s, &mcp.Tool{Name: "broadcast_message", Annotations: annotate("Broadcast a message", false, false, false),
		Description: "Send one message to each other agent (filter: only active ones, or leave some out)."},
		edits{"priority": enum(priorityEnum), "filter.status": enum([]any{"all", "active"})},
		edits{"status": enum([]any{"sent", "partial", "no_recipients"})},
		s.broadcastMessage)
	add(s, &mcp.Tool{Name: "create_group", Annotations: annotate("Create a group", false, false, false),
		Description: "Create a named group to address with @name."},
		nil, edits{"status": constant("created")}, s.createGroup)
	add(s, &mcp.Tool{Name: "delete_group", Annotations: annotate("Delete a group", false, true, false),
		Description: "Delete a group (everyone is protected)."},
		nil, edits{"status": constant("deleted")}, s.deleteGroup)
	add(s, &mcp.Tool{Name: "add_group_member", Annotations: annotate("Add a group member", false, false, true),
		Description: "Add an agent (by name) or a role (all its agents, now and later) to a group."},
		edits{"member_type": enum(memberTypeEnum)}, edits{"status": constant("added"), "member_type": enum(memberTypeEnum)},
		s.addGroupMember)
	add(s, &mcp.Tool{Name: "remove_group_member", Annotations: annotate("Remove a group member", false, true, true),
		Description: "Remove an agent or a role from a group."},
		edits{"member_type": enum(memberTypeEnum)}, edits{"status": constant("removed"), "member_type": enum(memberTypeEnum)},
		s.removeGroupMember)
	add(s, &mcp.Tool{Name: "list_groups", Annotations: annotate("List groups", true, false, true),
		Description: "List all groups with their direct member counts."},
		nil, nil, s.listGroups)
	add(s, &mcp.Tool{Name: "get_group", Annotations: annotate("Get a group", true, false, true),
		Description: "Show a group's members; with expand, the agent IDs it reaches now."},
		nil, edits{"members[].type": enum(memberTypeEnum)}, s.getGroup)
	s.addSearchTool()
	s.mcp.AddReceivingMiddleware(structuredErrors)
}

// ---- errors ----

// errWaitInProgress is the error of a second concurrent wait_for_message.
var errWaitInProgress = &ToolError{Code: "wait_in_progress",
	Message: "another wait_for_message is already waiting: only one may wait at a time",
	Hint:    "use check_messages meanwhile, or wait for the other call to return"}

// ErrWaitInProgress is the error of a second concurrent wait_for_message.
var ErrWaitInProgress error = errWaitInProgress

// invalidArg is a bad argument the handler caught itself.
func invalidArg(tool, format string, args ...any) *ToolError {
	return &ToolError{Code: "invalid_argument", Message: fmt.Sprintf(format, args...), Hint: "see the input schema of " + tool}
}

var codeNames = map[int]string{
	rpc.CodeInvalidParams: "invalid_argument", rpc.CodeNotFound: "not_found", rpc.CodeConflict: "conflict",
	rpc.CodeForbidden: "forbidden", rpc.CodeUnauthenticated: "unauthenticated", rpc.CodeLimitExceeded: "limit_exceeded",
	rpc.CodeUnavailable: "unavailable",
}

// cliAdvice matches the parts of the daemon's messages that advise a
// thrum command; an agent is told which tool to use instead.
var cliAdvice = regexp.MustCompile("\\s*\\((?:see |run )?`?thrum [^)]*\\)|[:;,]?\\s*(?:run|start it with|use)\\s+`?thrum [^`]*`?")

// hints say which tool helps, per tool and error code.
var hints = map[string]string{
	"send_message/not_found":        "call list_agents and list_groups for the names you can address",
	"broadcast_message/not_found":   "call list_agents for the agents there are",
	"get_message/not_found":         "check the ID: check_messages and wait_for_message return message IDs",
	"create_group/conflict":         "call list_groups for the groups there are",
	"delete_group/not_found":        "call list_groups for the groups there are",
	"get_group/not_found":           "call list_groups for the groups there are",
	"add_group_member/not_found":    "call list_groups for groups, list_agents for agents and roles",
	"remove_group_member/not_found": "call get_group for the group's members",
	"remove_group_member/conflict":  "call get_group for the group's members",
	"add_group_member/conflict":     "call get_group for the group's members",
	"*/unavailable":                 "the thrum daemon is not reachable: retry the call in a few seconds",
	"*/unauthenticated":             "this MCP server's agent is not registered with the thrum daemon",
	"*/forbidden":                   "call list_groups or get_group to see who owns what",
	"*/limit_exceeded":              "send less at once",
	"*/invalid_argument":            "",
}

// toolError turns a handler's error into a *ToolError.
func toolError(tool string, err error) *ToolError {
	var te *ToolError
	if errors.As(err, &te) {
		return te
	}
	e := &ToolError{Code: "internal", Message: err.Error()}
	var re *rpc.Error
	switch {
	case errors.As(err, &re):
		if name, ok := codeNames[re.Code]; ok {
			e.Code = name
		}
		e.Message = strings.TrimSpace(cliAdvice.ReplaceAllString(re.Message, ""))
	case errors.Is(err, rpc.ErrConnClosed), errors.Is(err, errUnreachable):
		e.Code = "unavailable"
		if !strings.Contains(e.Message, "shutting down") {
			e.Message = errUnreachable.Error()
		}
	case errors.Is(err, context.DeadlineExceeded):
		e.Code, e.Message = "unavailable", "the thrum daemon did not answer in time"
	}
	if h, ok := hints[tool+"/"+e.Code]; ok {
		e.Hint = h
	} else if h := hints["*/"+e.Code]; h != "" {
		e.Hint = h
	} else if e.Code == "invalid_argument" {
		e.Hint = "see the input schema of " + tool
	}
	return e
}

// structuredErrors gives every failed tools/call its ToolError as
// structuredContent, with a text copy: errors from handlers, and from the
// SDK's validation of the arguments against the input schema.
func structuredErrors(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		r, ok := res.(*mcp.CallToolResult)
		if method != "tools/call" || err != nil || !ok || !r.IsError {
			return res, err
		}
		tool := ""
		if p, ok := req.GetParams().(*mcp.CallToolParamsRaw); ok {
			tool = p.Name
		}
		var te *ToolError
		if e := r.GetError(); !errors.As(e, &te) {
			msg := "tool failed"
			if e != nil {
				msg = e.Error()
			} else if len(r.Content) > 0 {
				if t, ok := r.Content[0].(*mcp.TextContent); ok {
					msg = t.Text
				}
			}
			te = &ToolError{Code: "internal", Message: msg}
			if strings.Contains(msg, "validating") || strings.Contains(msg, "unmarshal") || strings.Contains(msg, "json:") {
				te.Code, te.Message, te.Hint = "invalid_argument", schemaMessage(msg), "see the input schema of "+tool
			}
		}
		r.StructuredContent = te
		r.Content = []mcp.Content{&mcp.TextContent{Text: te.Error()}}
		return r, nil
	}
}

var (
	schemaPrefix   = regexp.MustCompile(`^validating "arguments": (validating root: )?`)
	schemaProperty = regexp.MustCompile(`validating /properties/([\w/]+?): (?:validating /properties/[\w/]+: )*`)
	schemaMissing  = regexp.MustCompile(`required: missing properties: \[(.*)\]`)
)

// schemaMessage rewords the SDK's schema validation error for an agent:
// "invalid filter.status: enum: idle does not equal any of: [all active]".
func schemaMessage(msg string) string {
	msg = schemaPrefix.ReplaceAllString(msg, "")
	msg = schemaProperty.ReplaceAllStringFunc(msg, func(m string) string {
		parts := strings.Split(m, "validating /properties/")
		last := strings.TrimSuffix(strings.TrimSpace(parts[len(parts)-1]), ":")
		return "invalid " + strings.ReplaceAll(last, "/properties/", ".") + ": "
	})
	return schemaMissing.ReplaceAllString(msg, "missing required argument $1")
}

// ---- calls to the daemon ----

var errUnreachable = errors.New("the thrum daemon is not reachable")

// callRPC runs one call on the current connection with a timeout.
func callRPC[R any](ctx context.Context, s *Server, f func(context.Context, *rpc.Client) (*R, error)) (*R, error) {
	c, err := s.conn(ctx)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, DefaultCallTimeout)
	defer cancel()
	return f(ctx, c)
}

// unknownIDs returns the IDs a message.markRead error names as unknown.
func unknownIDs(err error) []string {
	var re *rpc.Error
	if !errors.As(err, &re) || re.Code != rpc.CodeNotFound {
		return nil
	}
	d, ok := re.Data.(map[string]any)
	if !ok {
		return nil
	}
	var out []string
	switch v := d["unknown_ids"].(type) {
	case []string:
		out = v
	case []any:
		for _, x := range v {
			if s, ok := x.(string); ok {
				out = append(out, s)
			}
		}
	}
	return out
}

// claim marks ids read and returns those this call claimed: the daemon
// gives each message to exactly one claim of this agent, across every
// server and connection. A message that vanished meanwhile (an unknown
// ID) is left out. The claim runs to its end even if ctx is cancelled
// meanwhile: a claim made must reach its caller, who returns it.
func (s *Server) claim(ctx context.Context, ids []string, via string) ([]string, error) {
	ctx = context.WithoutCancel(ctx)
	for len(ids) > 0 {
		r, err := callRPC(ctx, s, func(ctx context.Context, c *rpc.Client) (*rpc.MarkReadResult, error) {
			return c.MarkRead(ctx, &rpc.MarkReadParams{MessageIDs: ids, Via: via})
		})
		if err == nil {
			s.queue.remove(r.MarkedIDs...)
			return r.MarkedIDs, nil
		}
		gone := unknownIDs(err)
		if len(gone) == 0 {
			return nil, err
		}
		s.queue.remove(gone...)
		ids = slices.DeleteFunc(ids, func(id string) bool { return slices.Contains(gone, id) })
	}
	return nil, nil
}

// claimOne claims one message, as claim does, and returns it as the
// claim found it: one round trip where fetching it first would take two.
// m is nil if the message is gone; claimed is false if this call did not
// claim it (it is read, or another call is claiming it). An error after
// the claim leaves the message read and returned to nobody, as a lost
// reply to a claim does (DESIGN.md, "Delivery to agents").
func (s *Server) claimOne(ctx context.Context, id, via string) (m *rpc.MessageDetail, claimed bool, err error) {
	ctx = context.WithoutCancel(ctx) // as in claim: a claim made must reach its caller
	r, err := callRPC(ctx, s, func(ctx context.Context, c *rpc.Client) (*rpc.MarkReadResult, error) {
		return c.MarkRead(ctx, &rpc.MarkReadParams{MessageIDs: []string{id}, WithMessages: true, Via: via})
	})
	if len(unknownIDs(err)) > 0 {
		s.queue.remove(id)
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	s.queue.remove(r.MarkedIDs...)
	if len(r.MarkedIDs) == 0 {
		return nil, false, nil
	}
	for i := range r.Messages {
		if r.Messages[i].MessageID == id {
			return &r.Messages[i], true, nil
		}
	}
	// Claimed, but the daemon could not fetch it with the claim.
	g, err := callRPC(ctx, s, func(ctx context.Context, c *rpc.Client) (*rpc.GetMessageResult, error) {
		return c.GetMessage(ctx, &rpc.GetMessageParams{MessageID: id})
	})
	if errors.Is(err, rpc.ErrNotFound) {
		return nil, true, nil
	}
	if err != nil {
		return nil, true, err
	}
	return &g.Message, true, nil
}

// ---- tools ----

var priorities = map[string]int{rpc.PriorityLow: 0, rpc.PriorityNormal: 1, rpc.PriorityHigh: 2, rpc.PriorityCritical: 3}

func checkPriority(tool, p string) (string, error) {
	if p == "" {
		return rpc.PriorityNormal, nil
	}
	if _, ok := priorities[p]; !ok {
		return "", invalidArg(tool, "invalid priority %q: use critical, high, normal or low", p)
	}
	return p, nil
}

// address turns a tool's "to" into a mention: "@ops" and "ops" name an
// agent, role or group; a legacy "agent:role:hash" names that agent, or
// its role when no such agent exists (the daemon resolves both).
func address(to string) (string, error) {
	to = strings.TrimSpace(to)
	if to == "" || to == "@" {
		return "", invalidArg("send_message", "to is required: @role, an agent name, @group or @everyone")
	}
	return to, nil
}

// recipientStatus summarizes whom a send reached, leaving out the sender:
// sending to your own role or group does not reach you.
func (s *Server) recipientStatus(rs []rpc.Recipient) (string, []rpc.Recipient) {
	out := make([]rpc.Recipient, 0, len(rs))
	agents, active := 0, 0
	notMe := func(ids []string) []string {
		kept := make([]string, 0, len(ids))
		for _, id := range ids {
			if id != s.id.AgentID {
				kept = append(kept, id)
			}
		}
		return kept
	}
	for _, r := range rs {
		ri := rpc.Recipient{Address: r.Address, Kind: r.Kind, Agents: notMe(r.Agents), Active: notMe(r.Active)}
		out = append(out, ri)
		agents += len(ri.Agents)
		active += len(ri.Active)
	}
	switch {
	case active > 0:
		return "active", out
	case agents > 0:
		return "offline", out
	}
	return "no_agents", out
}

// newKey returns a fresh idempotency key.
func newKey() string { return "mcp_" + rand.Text() }

func (s *Server) sendMessage(ctx context.Context, _ *mcp.CallToolRequest, in SendMessageInput) (SendMessageOutput, error) {
	var out SendMessageOutput
	to, err := address(in.To)
	if err != nil {
		return out, err
	}
	if in.Content == "" {
		return out, invalidArg("send_message", "content is required")
	}
	pri, err := checkPriority("send_message", in.Priority)
	if err != nil {
		return out, err
	}
	// One key per tool call: a retry after a dropped connection cannot
	// send the message twice.
	p := &rpc.SendMessageParams{Content: in.Content, Priority: pri, Mentions: []string{to}, IdempotencyKey: newKey(),
		AckRequired: in.AckRequired, AckWithin: in.AckWithin}
	if p.AckRequired || p.AckWithin != "" {
		s.watchAcks(ctx) // before the send: its acknowledgement may come at once
	}
	if in.ReplyTo != "" {
		p.Refs = []rpc.Pair{{Type: rpc.RefReplyTo, Value: in.ReplyTo}}
	}
	if len(in.Metadata) > 0 {
		b, err := json.Marshal(in.Metadata)
		if err != nil {
			return out, invalidArg("send_message", "metadata: %v", err)
		}
		p.Structured = b
	}
	r, err := s.retrying(ctx, func(ctx context.Context, c *rpc.Client) (*rpc.SendMessageResult, error) { return c.SendMessage(ctx, p) })
	if err != nil {
		return out, err
	}
	out.Status, out.MessageID = "delivered", r.MessageID
	out.RecipientStatus, out.Recipients = s.recipientStatus(r.Recipients)
	return out, nil
}

// retrying runs an idempotent call, once more on the next connection if
// the connection drops under it.
func (s *Server) retrying(ctx context.Context, f func(context.Context, *rpc.Client) (*rpc.SendMessageResult, error)) (*rpc.SendMessageResult, error) {
	r, err := callRPC(ctx, s, f)
	if errors.Is(err, rpc.ErrConnClosed) {
		r, err = callRPC(ctx, s, f)
	}
	return r, err
}

func (s *Server) checkMessages(ctx context.Context, req *mcp.CallToolRequest, in CheckMessagesInput) (CheckMessagesOutput, error) {
	out := CheckMessagesOutput{Messages: []MessageInfo{}}
	ctx, stop := s.requestContext(ctx, req, false)
	defer stop()
	limit := 50
	if in.Limit != nil {
		limit = *in.Limit
	}
	if limit < 1 || limit > 100 {
		return out, invalidArg("check_messages", "limit %d is out of range: use 1 to 100", limit)
	}
	// What a stopped wait claimed comes first.
	out.Messages = append(out.Messages, s.unhold(ctx, limit, 0)...)
	if len(out.Messages) == limit {
		out.Status = "messages"
		return out, nil
	}
	r, err := callRPC(ctx, s, func(ctx context.Context, c *rpc.Client) (*rpc.ListMessagesResult, error) {
		return c.ListMessages(ctx, &rpc.ListMessagesParams{Mentions: true, Unread: true, PageSize: limit - len(out.Messages), SortOrder: "asc"})
	})
	if err != nil {
		return s.heldOr(out, err)
	}
	ids := make([]string, 0, len(r.Messages))
	for i := range r.Messages {
		ids = append(ids, r.Messages[i].MessageID)
	}
	var claimed []string
	if len(ids) > 0 {
		if claimed, err = s.claim(ctx, ids, rpc.ViaCheckMessages); err != nil {
			return s.heldOr(out, err)
		}
	}
	for i := range r.Messages {
		if m := &r.Messages[i]; slices.Contains(claimed, m.MessageID) {
			out.Messages = append(out.Messages, s.info(ctx, m.MessageID, m.ThreadID, m.AgentID, m.Body, m.Refs, m.Priority, m.CreatedAt, m.AckRequired, nil))
		}
	}
	if ctx.Err() != nil {
		// The caller is gone: what this call claimed goes to the next one.
		for _, m := range out.Messages {
			s.hold(m)
		}
		return CheckMessagesOutput{}, ctx.Err()
	}
	out.Status = "empty"
	if len(out.Messages) > 0 {
		out.Status = "messages"
	}
	// The others listed were taken by another consumer: no longer unread.
	out.Remaining = max(r.Total-len(ids), 0)
	return out, nil
}

// heldOr returns the held messages check_messages took already, rather
// than lose them to err; err if there are none.
func (s *Server) heldOr(out CheckMessagesOutput, err error) (CheckMessagesOutput, error) {
	if len(out.Messages) == 0 {
		return out, err
	}
	s.log.Warn("mcpserver: check_messages returns held messages only", "err", err)
	out.Status = "messages"
	return out, nil
}

// priorityFloor maps a priority_filter to the lowest priority it lets
// through.
func priorityFloor(filter string) (int, error) {
	switch filter {
	case "", "all":
		return 0, nil
	case "normal_and_above":
		return priorities[rpc.PriorityNormal], nil
	case "high_and_above":
		return priorities[rpc.PriorityHigh], nil
	case "critical":
		return priorities[rpc.PriorityCritical], nil
	}
	return 0, invalidArg("wait_for_message", "invalid priority_filter %q: use all, critical, high_and_above or normal_and_above", filter)
}

func (s *Server) waitForMessage(ctx context.Context, req *mcp.CallToolRequest, in WaitForMessageInput) (WaitForMessageOutput, error) {
	var out WaitForMessageOutput
	timeout := DefaultWaitTimeout
	if in.Timeout != nil {
		t := time.Duration(*in.Timeout) * time.Second
		if t < time.Second || t > MaxWaitTimeout {
			return out, invalidArg("wait_for_message", "timeout %d is out of range: use 1 to %d seconds (default %d)",
				*in.Timeout, int(MaxWaitTimeout/time.Second), int(DefaultWaitTimeout/time.Second))
		}
		timeout = t
	}
	floor, err := priorityFloor(in.PriorityFilter)
	if err != nil {
		return out, err
	}
	if !s.waitMu.TryLock() {
		return out, errWaitInProgress
	}
	defer s.waitMu.Unlock()
	ctx, stop := s.requestContext(ctx, req, true)
	defer stop()
	start := time.Now()
	if in.Acks {
		s.watchAcks(ctx)
	}
	m, status, err := s.wait(ctx, timeout, floor, s.progress(ctx, req, start, timeout), rpc.ViaWaitForMessage, in.Acks)
	out.WaitedSeconds = int(time.Since(start).Round(time.Second) / time.Second)
	out.QueueOverflow = s.queue.takeDropped()
	if err != nil {
		return out, err
	}
	out.Status, out.Message = status, m
	if status == statusAcknowledged {
		out.Ack = s.takeAck()
	}
	return out, nil
}

// progress returns what a wait calls every Options.ProgressInterval: a
// notifications/progress for the request's progressToken, so that a
// client that resets its timeout on progress keeps the call alive; nil
// when the request has no token.
func (s *Server) progress(ctx context.Context, req *mcp.CallToolRequest, start time.Time, timeout time.Duration) func() {
	if req == nil || req.Session == nil || req.Params == nil {
		return nil
	}
	tok := req.Params.GetProgressToken()
	if tok == nil {
		return nil
	}
	return func() {
		waited := time.Since(start)
		err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok,
			Progress: waited.Seconds(), Total: timeout.Seconds(),
			Message: fmt.Sprintf("waiting for a message: %ds of %ds", int(waited/time.Second), int(timeout/time.Second))})
		if err != nil {
			s.log.Debug("mcpserver: progress notification", "err", err)
		}
	}
}

// wait blocks until a queued message passes the filter and is claimed
// (for delivery via), the timeout passes ("timeout"), the server ends its
// waits ("shutdown"), or, with acks, an acknowledgement of a message the
// agent sent is queued (statusAcknowledged: takeAck has it). A cancelled
// ctx returns its error and claims nothing.
func (s *Server) wait(ctx context.Context, timeout time.Duration, floor int, tick func(), via string, acks bool) (*MessageInfo, string, error) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var ticks <-chan time.Time
	if tick != nil {
		t := time.NewTicker(s.opts.ProgressInterval)
		defer t.Stop()
		ticks = t.C
	}
	// While it waits, the daemon holds a standing claim for it: the next
	// message at or above the floor is claimed in its own commit and
	// pushed whole (claimed.go). Whatever way the last of the server's
	// waits (a tool call, a channel's stream) ends, the claim is
	// cancelled; what it took meanwhile is held for the next call.
	s.waiting.Add(1)
	defer func() {
		if s.waiting.Add(-1) == 0 {
			s.disarmLater()
		}
	}()
	for {
		changed := s.queue.changed() // before looking: a wake after the look ends the select
		// An acknowledgement first: it is pushed before the reply that
		// made it is handed over, which the next call then returns.
		if acks && s.hasAck() {
			return nil, statusAcknowledged, nil
		}
		m, err := s.takeQueued(ctx, floor, via)
		if err != nil || m != nil {
			return m, "message_received", err
		}
		if s.arm(ctx, floor, via) {
			continue // a message may have been queued just before
		}
		select {
		case <-changed:
		case <-ticks:
			tick()
		case <-timer.C:
			return s.lastLook(ctx, floor, "timeout", DefaultCallTimeout)
		case <-ctx.Done():
			return nil, "", ctx.Err()
		case <-s.ending:
			// Bounded: the server ends within a second even if the daemon
			// does not answer (a claim it makes later is then lost, as a
			// lost reply is).
			return s.lastLook(ctx, floor, "shutdown", shutdownGrace/2)
		}
	}
}

// lastLook ends a wait that is not cancelled: the standing claim is
// cancelled (waiting at most within) unless another wait goes on, and a
// message it took meanwhile is the answer.
func (s *Server) lastLook(ctx context.Context, floor int, status string, within time.Duration) (*MessageInfo, string, error) {
	if s.waiting.Load() == 1 { // another wait keeps the claim, and takes what it holds
		s.disarm(within)
	}
	if m := s.unhold(ctx, 1, floor); len(m) > 0 {
		return &m[0], "message_received", nil
	}
	return nil, status, nil
}

// stopped reports whether the wait should give up without claiming.
func (s *Server) stopped(ctx context.Context) bool {
	select {
	case <-s.ending:
		return true
	default:
		return ctx.Err() != nil
	}
}

// takeQueued claims the oldest queued message that passes the filter, and
// returns it; nil if there is none (or the wait was stopped). Messages
// below the filter stay queued, in order; read or deleted ones leave.
func (s *Server) takeQueued(ctx context.Context, floor int, via string) (*MessageInfo, error) {
	if m := s.unhold(ctx, 1, floor); len(m) > 0 {
		return &m[0], nil
	}
	for _, it := range s.queue.snapshot() {
		if s.stopped(ctx) {
			return nil, nil
		}
		if it.priority != "" && priorities[it.priority] < floor {
			continue
		}
		if floor == 0 {
			// Every message passes: claim it and get it in one call.
			m, claimed, err := s.claimOne(ctx, it.id, via)
			if err != nil {
				return nil, err
			}
			if !claimed {
				// Read already, or being claimed by another call: look
				// at it the long way, which drops what is read.
				if m, err := s.takeOne(ctx, it, floor, via); m != nil || err != nil {
					return m, err
				}
				continue
			}
			if m == nil || m.Deleted {
				continue // gone or deleted: nothing to return (it is read now)
			}
			if m := s.claimedInfo(ctx, m); m != nil {
				return m, nil
			}
			return nil, nil
		}
		if m, err := s.takeOne(ctx, it, floor, via); m != nil || err != nil {
			return m, err
		}
	}
	return nil, nil
}

// takeOne fetches one queued message, and claims and returns it if it
// passes the filter and is unread. nil if not, or the wait was stopped.
func (s *Server) takeOne(ctx context.Context, it queued, floor int, via string) (*MessageInfo, error) {
	g, err := callRPC(ctx, s, func(ctx context.Context, c *rpc.Client) (*rpc.GetMessageResult, error) {
		return c.GetMessage(ctx, &rpc.GetMessageParams{MessageID: it.id})
	})
	if errors.Is(err, rpc.ErrNotFound) {
		s.queue.remove(it.id)
		return nil, nil
	}
	if err != nil {
		if s.stopped(ctx) {
			return nil, nil
		}
		return nil, err
	}
	m := &g.Message
	s.queue.setPriority(it.id, m.Priority)
	if m.Deleted || m.IsRead {
		s.queue.remove(it.id)
		return nil, nil
	}
	if priorities[m.Priority] < floor {
		return nil, nil
	}
	if s.stopped(ctx) {
		return nil, nil // a stopped wait claims nothing
	}
	claimed, err := s.claim(ctx, []string{it.id}, via)
	if err != nil {
		return nil, err
	}
	if len(claimed) == 0 {
		return nil, nil // another consumer of this agent took it
	}
	return s.claimedInfo(ctx, m), nil
}

// claimedInfo is the result of a wait that claimed m; nil if its caller
// left meanwhile: the next call of this server returns it. (A server that
// is ending answers with it instead: no later call would come.)
func (s *Server) claimedInfo(ctx context.Context, m *rpc.MessageDetail) *MessageInfo {
	info := s.info(ctx, m.MessageID, m.ThreadID, m.Author.AgentID, m.Body, m.Refs, m.Priority, m.CreatedAt, m.AckRequired, nil)
	if ctx.Err() != nil {
		s.hold(info)
		return nil
	}
	return &info
}

func (s *Server) hold(m MessageInfo) {
	s.heldMu.Lock()
	s.held = append(s.held, m)
	s.heldMu.Unlock()
	s.queue.wake()
}

// unhold takes up to n held messages at or above floor, oldest first.
func (s *Server) unhold(ctx context.Context, n, floor int) []MessageInfo {
	s.adoptClaimed(ctx)
	s.heldMu.Lock()
	defer s.heldMu.Unlock()
	var out []MessageInfo
	s.held = slices.DeleteFunc(s.held, func(m MessageInfo) bool {
		if len(out) < n && priorities[m.Priority] >= floor {
			out = append(out, m)
			return true
		}
		return false
	})
	return out
}

// info builds a MessageInfo. inGroup says whether this agent is in a
// group; nil means the message is known to have reached the agent (it was
// pushed to it or is in its inbox), so a mention of a group is one it is in.
func (s *Server) info(ctx context.Context, id, thread, from string, body rpc.Body, refs []rpc.Pair, priority, at string, ack bool, inGroup func(string) bool) MessageInfo {
	mi := MessageInfo{MessageID: id, ThreadID: thread, From: from, FromRole: s.roleOf(ctx, from),
		Content: body.Content, Priority: priority, Timestamp: at, AckRequired: ack}
	if body.Structured != "" && json.Valid([]byte(body.Structured)) {
		mi.Metadata = json.RawMessage(body.Structured)
	}
	var mentions []string
	for _, r := range refs {
		switch r.Type {
		case rpc.RefReplyTo:
			mi.ReplyTo = r.Value
		case rpc.RefMention:
			mentions = append(mentions, r.Value)
		}
	}
	mi.AddressedAs = s.addressedAs(ctx, mentions, inGroup)
	return mi
}

// addressedAs says how a message with these mentions reached this agent:
// by its name, its role, a group, or everyone, the most specific first.
// nil if none reaches it. inGroup is as for info.
func (s *Server) addressedAs(ctx context.Context, mentions []string, inGroup func(string) bool) *Addressed {
	rank := map[string]int{"agent": 4, "role": 3, "group": 2, "everyone": 1}
	var best *Addressed
	for _, m := range mentions {
		a := &Addressed{Name: m}
		switch {
		case m == s.id.AgentID:
			a.Kind = "agent"
		case m == s.id.Role:
			a.Kind = "role"
		case m == "everyone":
			a.Kind = "everyone"
		case !s.isAgentOrRole(ctx, m) && (inGroup == nil || inGroup(m)):
			a.Kind = "group" // a group this agent is in
		default:
			continue // another agent or role
		}
		if best == nil || rank[a.Kind] > rank[best.Kind] {
			best = a
		}
	}
	return best
}

// conversationMax bounds get_message's conversation.
const conversationMax = 100

func (s *Server) getMessage(ctx context.Context, _ *mcp.CallToolRequest, in GetMessageInput) (GetMessageOutput, error) {
	out := GetMessageOutput{Conversation: []MessageInfo{}}
	if strings.TrimSpace(in.MessageID) == "" {
		return out, invalidArg("get_message", "message_id is required")
	}
	get := func(id string) (*rpc.MessageDetail, error) {
		g, err := callRPC(ctx, s, func(ctx context.Context, c *rpc.Client) (*rpc.GetMessageResult, error) {
			return c.GetMessage(ctx, &rpc.GetMessageParams{MessageID: id})
		})
		if err != nil {
			return nil, err
		}
		return &g.Message, nil
	}
	m, err := get(in.MessageID)
	if err != nil {
		return out, err
	}
	out.MessageID = m.MessageID
	list := func(p *rpc.ListMessagesParams) ([]rpc.MessageSummary, int, error) {
		p.PageSize, p.SortOrder = conversationMax, "asc"
		r, err := callRPC(ctx, s, func(ctx context.Context, c *rpc.Client) (*rpc.ListMessagesResult, error) {
			return c.ListMessages(ctx, p)
		})
		if err != nil {
			return nil, 0, err
		}
		return r.Messages, r.Total, nil
	}
	var conv []rpc.MessageSummary
	if m.ThreadID != "" {
		ms, total, err := list(&rpc.ListMessagesParams{ThreadID: m.ThreadID})
		if err != nil {
			return out, err
		}
		conv, out.More = ms, total > len(ms)
	} else {
		// The reply chain: up to its root, then every reply under it.
		root := m
		for hops := 0; hops < conversationMax; hops++ {
			parent := replyTo(root.Refs)
			if parent == "" {
				break
			}
			p, err := get(parent)
			if err != nil {
				break // the chain goes on outside what can be read
			}
			root = p
		}
		conv = append(conv, rpc.MessageSummary{MessageID: root.MessageID, ThreadID: root.ThreadID, AgentID: root.Author.AgentID,
			Body: root.Body, CreatedAt: root.CreatedAt, Priority: root.Priority, Refs: root.Refs})
		for next := []string{root.MessageID}; len(next) > 0 && !out.More; {
			id := next[0]
			next = next[1:]
			ms, total, err := list(&rpc.ListMessagesParams{Ref: &rpc.Pair{Type: rpc.RefReplyTo, Value: id}})
			if err != nil {
				return out, err
			}
			for _, r := range ms {
				if len(conv) == conversationMax {
					out.More = true
					break
				}
				conv = append(conv, r)
				next = append(next, r.MessageID)
			}
			out.More = out.More || total > len(ms)
		}
		sort.SliceStable(conv, func(i, j int) bool { return conv[i].CreatedAt < conv[j].CreatedAt })
	}
	// A conversation holds messages that never reached this agent: a
	// group is named in addressed_as only if the agent is in it.
	member := map[string]bool{}
	inGroup := func(g string) bool {
		in, ok := member[g]
		if !ok {
			r, err := callRPC(ctx, s, func(ctx context.Context, c *rpc.Client) (*rpc.GroupMembersResult, error) {
				return c.GroupMembers(ctx, &rpc.GroupMembersParams{Name: g, Expand: true})
			})
			in = err == nil && slices.Contains(r.ExpandedAgents, s.id.AgentID)
			member[g] = in
		}
		return in
	}
	for i := range conv {
		c := &conv[i]
		out.Conversation = append(out.Conversation, s.info(ctx, c.MessageID, c.ThreadID, c.AgentID, c.Body, c.Refs, c.Priority, c.CreatedAt, c.AckRequired, inGroup))
	}
	return out, nil
}

func replyTo(refs []rpc.Pair) string {
	for _, r := range refs {
		if r.Type == rpc.RefReplyTo {
			return r.Value
		}
	}
	return ""
}

func (s *Server) listAgents(ctx context.Context, _ *mcp.CallToolRequest, in ListAgentsInput) (ListAgentsOutput, error) {
	out := ListAgentsOutput{Agents: []ListedAgent{}}
	r, err := callRPC(ctx, s, func(ctx context.Context, c *rpc.Client) (*rpc.ListAgentsResult, error) {
		return c.ListAgents(ctx, &rpc.ListAgentsParams{})
	})
	if err != nil {
		return out, err
	}
	withOffline := in.IncludeOffline == nil || *in.IncludeOffline
	for _, a := range r.Agents {
		if a.Kind != "agent" || (!withOffline && a.Status != "active") {
			continue
		}
		out.Agents = append(out.Agents, ListedAgent{Name: a.AgentID, Role: a.Role, Module: a.Module, Status: a.Status, LastSeenAt: a.LastSeenAt})
	}
	out.Count = len(out.Agents)
	return out, nil
}

func (s *Server) broadcastMessage(ctx context.Context, _ *mcp.CallToolRequest, in BroadcastMessageInput) (BroadcastMessageOutput, error) {
	out := BroadcastMessageOutput{SentTo: []string{}, FailedTo: []string{}, MessageIDs: []string{}}
	if in.Content == "" {
		return out, invalidArg("broadcast_message", "content is required")
	}
	pri, err := checkPriority("broadcast_message", in.Priority)
	if err != nil {
		return out, err
	}
	f := BroadcastFilter{}
	if in.Filter != nil {
		f = *in.Filter
	}
	if f.Status != "" && f.Status != "all" && f.Status != "active" {
		return out, invalidArg("broadcast_message", "invalid filter.status %q: use all or active", f.Status)
	}
	exclude := map[string]bool{}
	for _, x := range f.Exclude {
		exclude[identity.NormalizeAgentID(x)] = true
	}
	r, err := callRPC(ctx, s, func(ctx context.Context, c *rpc.Client) (*rpc.ListAgentsResult, error) {
		return c.ListAgents(ctx, &rpc.ListAgentsParams{})
	})
	if err != nil {
		return out, err
	}
	for _, a := range r.Agents {
		if a.Kind != "agent" || a.AgentID == s.id.AgentID || exclude[a.AgentID] || exclude[a.Role] || (a.Display != "" && exclude[a.Display]) {
			continue
		}
		if f.Status == "active" && a.Status != "active" {
			continue
		}
		p := &rpc.SendMessageParams{Content: in.Content, Priority: pri, Mentions: []string{a.AgentID},
			Tags: []string{"broadcast"}, IdempotencyKey: newKey()}
		sent, err := s.retrying(ctx, func(ctx context.Context, c *rpc.Client) (*rpc.SendMessageResult, error) {
			return c.SendMessage(ctx, p)
		})
		if err != nil {
			s.log.Warn("mcpserver: broadcast", "to", a.AgentID, "err", err)
			out.FailedTo = append(out.FailedTo, a.AgentID)
			continue
		}
		out.SentTo = append(out.SentTo, a.AgentID)
		out.MessageIDs = append(out.MessageIDs, sent.MessageID)
	}
	out.TotalSent = len(out.SentTo)
	switch {
	case len(out.SentTo) == 0 && len(out.FailedTo) == 0:
		out.Status = "no_recipients"
	case len(out.FailedTo) > 0:
		out.Status = "partial"
	default:
		out.Status = "sent"
	}
	return out, nil
}

func (s *Server) createGroup(ctx context.Context, _ *mcp.CallToolRequest, in rpc.CreateGroupParams) (CreateGroupOutput, error) {
	r, err := callRPC(ctx, s, func(ctx context.Context, c *rpc.Client) (*rpc.CreateGroupResult, error) {
		return c.CreateGroup(ctx, &in)
	})
	if err != nil {
		return CreateGroupOutput{}, err
	}
	return CreateGroupOutput{Status: "created", Name: r.Name}, nil
}

func (s *Server) deleteGroup(ctx context.Context, _ *mcp.CallToolRequest, in rpc.DeleteGroupParams) (DeleteGroupOutput, error) {
	r, err := callRPC(ctx, s, func(ctx context.Context, c *rpc.Client) (*rpc.DeleteGroupResult, error) {
		return c.DeleteGroup(ctx, &in)
	})
	if err != nil {
		return DeleteGroupOutput{}, err
	}
	return DeleteGroupOutput{Status: "deleted", Name: r.Name}, nil
}

func (s *Server) member(ctx context.Context, in rpc.GroupMembership, add bool) (GroupMemberOutput, error) {
	if in.MemberType != rpc.MemberAgent && in.MemberType != rpc.MemberRole {
		tool := "remove_group_member"
		if add {
			tool = "add_group_member"
		}
		return GroupMemberOutput{}, invalidArg(tool, "invalid member_type %q: use agent or role", in.MemberType)
	}
	p := &in
	r, err := callRPC(ctx, s, func(ctx context.Context, c *rpc.Client) (*rpc.GroupMembership, error) {
		if add {
			return c.AddGroupMember(ctx, p)
		}
		return c.RemoveGroupMember(ctx, p)
	})
	if err != nil {
		return GroupMemberOutput{}, err
	}
	status := "removed"
	if add {
		status = "added"
	}
	return GroupMemberOutput{Status: status, GroupMembership: *r}, nil
}

func (s *Server) addGroupMember(ctx context.Context, _ *mcp.CallToolRequest, in rpc.GroupMembership) (GroupMemberOutput, error) {
	return s.member(ctx, in, true)
}

func (s *Server) removeGroupMember(ctx context.Context, _ *mcp.CallToolRequest, in rpc.GroupMembership) (GroupMemberOutput, error) {
	return s.member(ctx, in, false)
}

func (s *Server) listGroups(ctx context.Context, _ *mcp.CallToolRequest, _ ListGroupsInput) (ListGroupsOutput, error) {
	out := ListGroupsOutput{Groups: []rpc.GroupInfo{}}
	r, err := callRPC(ctx, s, func(ctx context.Context, c *rpc.Client) (*rpc.ListGroupsResult, error) {
		return c.ListGroups(ctx, &rpc.ListGroupsParams{})
	})
	if err != nil {
		return out, err
	}
	out.Groups = append(out.Groups, r.Groups...)
	return out, nil
}

func (s *Server) getGroup(ctx context.Context, _ *mcp.CallToolRequest, in GetGroupInput) (GetGroupOutput, error) {
	var out GetGroupOutput
	info, err := callRPC(ctx, s, func(ctx context.Context, c *rpc.Client) (*rpc.GroupInfoResult, error) {
		return c.GroupInfo(ctx, &rpc.GroupInfoParams{Name: in.Name})
	})
	if err != nil {
		return out, err
	}
	out = GetGroupOutput{Name: info.Name, Description: info.Description, CreatedAt: info.CreatedAt, CreatedBy: info.CreatedBy, Members: []rpc.GroupMember{}}
	out.Members = append(out.Members, info.Members...)
	if in.Expand {
		ms, err := callRPC(ctx, s, func(ctx context.Context, c *rpc.Client) (*rpc.GroupMembersResult, error) {
			return c.GroupMembers(ctx, &rpc.GroupMembersParams{Name: in.Name, Expand: true})
		})
		if err != nil {
			return out, err
		}
		out.ExpandedAgents = ms.ExpandedAgents
		if out.ExpandedAgents == nil {
			out.ExpandedAgents = []string{}
		}
		out.ExpandedAgentsCount = ptr(len(out.ExpandedAgents))
	}
	return out, nil
}
