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

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/identity"
	"github.com/thrumhq/thrum/inbox"
	"github.com/thrumhq/thrum/internal/frame"
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
		if s.opts.Refuse != nil {
			var o Out
			return nil, o, toolError(t.Name, s.opts.Refuse())
		}
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
		edits{"status": constant("sent"), "recipient_status": enum([]any{"active", "offline", "no_agents"}),
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
		messageInfoEdits("message.", edits{"status": enum([]any{inbox.StatusReceived, inbox.StatusAcknowledged, inbox.StatusTimeout, inbox.StatusShutdown})}),
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
	case errors.Is(err, inbox.ErrWaitInProgress):
		return errWaitInProgress
	case errors.Is(err, inbox.ErrUnreachable):
		e.Code = "unavailable" // with why the last connect failed
	case errors.Is(err, rpc.ErrConnClosed):
		e.Code, e.Message = "unavailable", inbox.ErrUnreachable.Error()
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

// ---- tools ----

func checkPriority(tool, p string) (string, error) {
	if p == "" {
		return rpc.PriorityNormal, nil
	}
	if !slices.Contains(eventlog.Priorities, p) {
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
			if id != s.ib.ID().AgentID {
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
		s.ib.WatchAcks(ctx) // before the send: its acknowledgement may come at once
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
	out.Status, out.MessageID = "sent", r.MessageID
	out.RecipientStatus, out.Recipients = s.recipientStatus(r.Recipients)
	out.Receipts = s.receipts(ctx, r)
	return out, nil
}

// receipts are a sent message's receipts as message.get has them (a
// waiting recipient's standing claim may have taken it in the send's own
// commit); if it cannot say, queued for each recipient, as a send leaves
// them.
func (s *Server) receipts(ctx context.Context, r *rpc.SendMessageResult) []rpc.Receipt {
	if g, err := inbox.Call(ctx, s.ib, func(ctx context.Context, c *rpc.Client) (*rpc.GetMessageResult, error) {
		return c.GetMessage(ctx, &rpc.GetMessageParams{MessageID: r.MessageID})
	}); err == nil && g.Message.Receipts != nil {
		return g.Message.Receipts
	}
	out := []rpc.Receipt{}
	seen := map[string]bool{s.ib.ID().AgentID: true}
	for _, rc := range r.Recipients {
		for _, a := range rc.Agents {
			if !seen[a] {
				seen[a] = true
				out = append(out, rpc.Receipt{AgentID: a, State: rpc.ReceiptQueued})
			}
		}
	}
	return out
}

// retrying runs an idempotent call, once more on the next connection if
// the connection drops under it.
func (s *Server) retrying(ctx context.Context, f func(context.Context, *rpc.Client) (*rpc.SendMessageResult, error)) (*rpc.SendMessageResult, error) {
	r, err := inbox.Call(ctx, s.ib, f)
	if errors.Is(err, rpc.ErrConnClosed) {
		r, err = inbox.Call(ctx, s.ib, f)
	}
	return r, err
}

// A consuming tool's result must fit what its host shows the model, or
// it claims what the model never sees: Codex cuts a tool's output past
// 10,000 bytes (for a model it has no metadata for; fewer tokens for
// others), dropping its middle. So a message's text is cut at the frame's
// 4,000 units, with a pointer to get_message, and check_messages claims
// no more messages than fit in toolResultMax bytes of JSON; the rest stay
// unread, counted in remaining.
var toolShape = inbox.Shape{BodyMax: frame.DefaultMax}

const toolResultMax = 8000

func (s *Server) checkMessages(ctx context.Context, req *mcp.CallToolRequest, in CheckMessagesInput) (CheckMessagesOutput, error) {
	out := CheckMessagesOutput{Messages: []inbox.Message{}}
	ctx, stop := s.requestContext(ctx, req, false)
	defer stop()
	limit := 50
	if in.Limit != nil {
		limit = *in.Limit
	}
	if limit < 1 || limit > 100 {
		return out, invalidArg("check_messages", "limit %d is out of range: use 1 to 100", limit)
	}
	r, err := s.ib.Check(ctx, inbox.CheckParams{Limit: limit, Via: rpc.ViaCheckMessages, Shape: toolShape, ResultMax: toolResultMax})
	if err != nil {
		return out, err
	}
	out.Messages = append(out.Messages, r.Messages...)
	out.Remaining = r.Remaining
	out.Status = "empty"
	if len(out.Messages) > 0 {
		out.Status = "messages"
	}
	return out, nil
}

// priorityFloor maps a priority_filter to the lowest priority it lets
// through.
func priorityFloor(filter string) (string, error) {
	switch filter {
	case "", "all":
		return "", nil
	case "normal_and_above":
		return rpc.PriorityNormal, nil
	case "high_and_above":
		return rpc.PriorityHigh, nil
	case "critical":
		return rpc.PriorityCritical, nil
	}
	return "", invalidArg("wait_for_message", "invalid priority_filter %q: use all, critical, high_and_above or normal_and_above", filter)
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
	ctx, stop := s.requestContext(ctx, req, true)
	defer stop()
	start := time.Now()
	if in.Acks {
		s.ib.WatchAcks(ctx)
	}
	r, err := s.ib.Wait(ctx, inbox.WaitParams{Timeout: timeout, MinPriority: floor, Via: rpc.ViaWaitForMessage,
		Shape: toolShape, Acks: in.Acks, Tick: s.progress(ctx, req, start, timeout), TickEvery: s.opts.ProgressInterval})
	out.WaitedSeconds = int(time.Since(start).Round(time.Second) / time.Second)
	if err != nil {
		return out, err
	}
	out.Status, out.Message, out.Ack, out.QueueOverflow = r.Status, r.Message, r.Ack, r.Overflow
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

// conversationMax bounds get_message's conversation.
const conversationMax = 100

func (s *Server) getMessage(ctx context.Context, _ *mcp.CallToolRequest, in GetMessageInput) (GetMessageOutput, error) {
	out := GetMessageOutput{Conversation: []inbox.Message{}}
	if strings.TrimSpace(in.MessageID) == "" {
		return out, invalidArg("get_message", "message_id is required")
	}
	get := func(id string) (*rpc.MessageDetail, error) {
		g, err := inbox.Call(ctx, s.ib, func(ctx context.Context, c *rpc.Client) (*rpc.GetMessageResult, error) {
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
		r, err := inbox.Call(ctx, s.ib, func(ctx context.Context, c *rpc.Client) (*rpc.ListMessagesResult, error) {
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
			parent := rpc.ReplyTo(root.Refs)
			if parent == "" {
				break
			}
			p, err := get(parent)
			if err != nil {
				break // the chain goes on outside what can be read
			}
			root = p
		}
		conv = append(conv, *inbox.Summary(root))
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
			r, err := inbox.Call(ctx, s.ib, func(ctx context.Context, c *rpc.Client) (*rpc.GroupMembersResult, error) {
				return c.GroupMembers(ctx, &rpc.GroupMembersParams{Name: g, Expand: true})
			})
			in = err == nil && slices.Contains(r.ExpandedAgents, s.ib.ID().AgentID)
			member[g] = in
		}
		return in
	}
	for i := range conv {
		// One that cannot be shown (a field too long to frame) is left
		// out; the others are shown.
		if m, err := s.ib.Show(ctx, &conv[i], inGroup, inbox.Shape{BodyMax: inbox.Whole}); err == nil {
			out.Conversation = append(out.Conversation, m)
		}
	}
	return out, nil
}

func (s *Server) listAgents(ctx context.Context, _ *mcp.CallToolRequest, in ListAgentsInput) (ListAgentsOutput, error) {
	out := ListAgentsOutput{Agents: []ListedAgent{}}
	r, err := inbox.Call(ctx, s.ib, func(ctx context.Context, c *rpc.Client) (*rpc.ListAgentsResult, error) {
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
	r, err := inbox.Call(ctx, s.ib, func(ctx context.Context, c *rpc.Client) (*rpc.ListAgentsResult, error) {
		return c.ListAgents(ctx, &rpc.ListAgentsParams{})
	})
	if err != nil {
		return out, err
	}
	for _, a := range r.Agents {
		if a.Kind != "agent" || a.AgentID == s.ib.ID().AgentID || exclude[a.AgentID] || exclude[a.Role] || (a.Display != "" && exclude[a.Display]) {
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
	r, err := inbox.Call(ctx, s.ib, func(ctx context.Context, c *rpc.Client) (*rpc.CreateGroupResult, error) {
		return c.CreateGroup(ctx, &in)
	})
	if err != nil {
		return CreateGroupOutput{}, err
	}
	return CreateGroupOutput{Status: "created", Name: r.Name}, nil
}

func (s *Server) deleteGroup(ctx context.Context, _ *mcp.CallToolRequest, in rpc.DeleteGroupParams) (DeleteGroupOutput, error) {
	r, err := inbox.Call(ctx, s.ib, func(ctx context.Context, c *rpc.Client) (*rpc.DeleteGroupResult, error) {
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
	r, err := inbox.Call(ctx, s.ib, func(ctx context.Context, c *rpc.Client) (*rpc.GroupMembership, error) {
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
	r, err := inbox.Call(ctx, s.ib, func(ctx context.Context, c *rpc.Client) (*rpc.ListGroupsResult, error) {
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
	info, err := inbox.Call(ctx, s.ib, func(ctx context.Context, c *rpc.Client) (*rpc.GroupInfoResult, error) {
		return c.GroupInfo(ctx, &rpc.GroupInfoParams{Name: in.Name})
	})
	if err != nil {
		return out, err
	}
	out = GetGroupOutput{Name: info.Name, Description: info.Description, CreatedAt: info.CreatedAt, CreatedBy: info.CreatedBy, Members: []rpc.GroupMember{}}
	out.Members = append(out.Members, info.Members...)
	if in.Expand {
		ms, err := inbox.Call(ctx, s.ib, func(ctx context.Context, c *rpc.Client) (*rpc.GroupMembersResult, error) {
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
