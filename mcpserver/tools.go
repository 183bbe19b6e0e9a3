package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/thrumhq/thrum/identity"
	"github.com/thrumhq/thrum/rpc"
)

// ToolNames lists the tools a Server registers, in order.
var ToolNames = []string{
	"send_message", "check_messages", "wait_for_message", "list_agents", "broadcast_message",
	"create_group", "delete_group", "add_group_member", "remove_group_member", "list_groups", "get_group",
}

func ptr[T any](v T) *T { return &v }

// annotations: every tool works on thrum's own closed world.
func annotate(title string, readOnly, destructive, idempotent bool) *mcp.ToolAnnotations {
	return &mcp.ToolAnnotations{Title: title, ReadOnlyHint: readOnly, DestructiveHint: ptr(destructive),
		IdempotentHint: idempotent, OpenWorldHint: ptr(false)}
}

func (s *Server) register() {
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "send_message", Annotations: annotate("Send a message", false, false, false),
		Description: "Send a message to another agent, a role (@reviewer), a group (@backend) or @everyone. " +
			"recipient_status says whether anyone it reached is active."}, s.sendMessage)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "check_messages", Annotations: annotate("Check messages", false, false, false),
		Description: "Return your unread messages (addressed to you by name, role, group or @everyone) and mark them read."}, s.checkMessages)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "wait_for_message", Annotations: annotate("Wait for a message", false, false, false),
		Description: "Block until a message addressed to you arrives (pushed, not polled) or the timeout passes; " +
			"returns it and marks it read. One wait at a time."}, s.waitForMessage)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "list_agents", Annotations: annotate("List agents", true, false, true),
		Description: "List registered agents with their role, module and active/offline status."}, s.listAgents)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "broadcast_message", Annotations: annotate("Broadcast a message", false, false, false),
		Description: "Send a message to every other agent, one message each, optionally only active ones or excluding names or roles."}, s.broadcastMessage)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "create_group", Annotations: annotate("Create a group", false, false, false),
		Description: "Create a named group to address with @name."}, s.createGroup)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "delete_group", Annotations: annotate("Delete a group", false, true, false),
		Description: "Delete a group (everyone is protected)."}, s.deleteGroup)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "add_group_member", Annotations: annotate("Add a group member", false, false, false),
		Description: "Add an agent (by name) or a role (all its agents, now and later) to a group."}, s.addGroupMember)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "remove_group_member", Annotations: annotate("Remove a group member", false, true, false),
		Description: "Remove an agent or a role from a group."}, s.removeGroupMember)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "list_groups", Annotations: annotate("List groups", true, false, true),
		Description: "List all groups with their direct member counts."}, s.listGroups)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "get_group", Annotations: annotate("Get a group", true, false, true),
		Description: "Show a group's members; with expand, the agent IDs it reaches now."}, s.getGroup)
}

// toolError turns an RPC error into the message an agent reads.
func toolError(err error) error {
	var re *rpc.Error
	if errors.As(err, &re) {
		return errors.New(re.Message)
	}
	return err
}

// callRPC runs one call on the current connection with a timeout.
func callRPC[R any](ctx context.Context, s *Server, f func(context.Context, *rpc.Client) (*R, error)) (*R, error) {
	c, err := s.conn(ctx)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, DefaultCallTimeout)
	defer cancel()
	r, err := f(ctx, c)
	return r, toolError(err)
}

var priorities = map[string]int{rpc.PriorityLow: 0, rpc.PriorityNormal: 1, rpc.PriorityHigh: 2, rpc.PriorityCritical: 3}

func checkPriority(p string) (string, error) {
	if p == "" {
		return rpc.PriorityNormal, nil
	}
	if _, ok := priorities[p]; !ok {
		return "", fmt.Errorf("invalid priority %q: use critical, high, normal or low", p)
	}
	return p, nil
}

// address turns a tool's "to" into a mention: "@ops" and "ops" name an
// agent, role or group; a legacy "agent:role:hash" names that agent, or
// its role when no such agent exists (the daemon resolves both).
func address(to string) (string, error) {
	to = strings.TrimSpace(to)
	if to == "" || to == "@" {
		return "", errors.New("to is required: @role, an agent name, @group or @everyone")
	}
	return to, nil
}

func recipientStatus(rs []rpc.Recipient) (string, []RecipientInfo) {
	out := make([]RecipientInfo, 0, len(rs))
	agents, active := 0, 0
	for _, r := range rs {
		out = append(out, RecipientInfo{Address: r.Address, Kind: r.Kind, Agents: r.Agents, Active: r.Active})
		agents += len(r.Agents)
		active += len(r.Active)
	}
	switch {
	case active > 0:
		return "active", out
	case agents > 0:
		return "offline", out
	}
	return "no_agents", out
}

func (s *Server) sendMessage(ctx context.Context, _ *mcp.CallToolRequest, in SendMessageInput) (*mcp.CallToolResult, SendMessageOutput, error) {
	var out SendMessageOutput
	to, err := address(in.To)
	if err != nil {
		return nil, out, err
	}
	if in.Content == "" {
		return nil, out, errors.New("content is required")
	}
	pri, err := checkPriority(in.Priority)
	if err != nil {
		return nil, out, err
	}
	p := &rpc.SendMessageParams{Content: in.Content, Priority: pri, Mentions: []string{to}}
	if in.ReplyTo != "" {
		p.Refs = []rpc.Pair{{Type: rpc.RefReplyTo, Value: in.ReplyTo}}
	}
	if len(in.Metadata) > 0 {
		b, err := json.Marshal(in.Metadata)
		if err != nil {
			return nil, out, fmt.Errorf("metadata: %v", err)
		}
		p.Structured = b
	}
	r, err := callRPC(ctx, s, func(ctx context.Context, c *rpc.Client) (*rpc.SendMessageResult, error) { return c.SendMessage(ctx, p) })
	if err != nil {
		return nil, out, err
	}
	out.Status, out.MessageID = "delivered", r.MessageID
	out.RecipientStatus, out.Recipients = recipientStatus(r.Recipients)
	return nil, out, nil
}

func info(m *rpc.MessageSummary) MessageInfo {
	return MessageInfo{MessageID: m.MessageID, From: m.AgentID, Content: m.Body.Content, Priority: m.Priority, Timestamp: m.CreatedAt}
}

func (s *Server) checkMessages(ctx context.Context, _ *mcp.CallToolRequest, in CheckMessagesInput) (*mcp.CallToolResult, CheckMessagesOutput, error) {
	out := CheckMessagesOutput{Messages: []MessageInfo{}}
	limit := in.Limit
	if limit == 0 {
		limit = 50
	}
	if limit < 1 || limit > 100 {
		return nil, out, fmt.Errorf("invalid limit %d: use 1 to 100", in.Limit)
	}
	r, err := callRPC(ctx, s, func(ctx context.Context, c *rpc.Client) (*rpc.ListMessagesResult, error) {
		return c.ListMessages(ctx, &rpc.ListMessagesParams{Mentions: true, Unread: true, PageSize: limit, SortOrder: "asc"})
	})
	if err != nil {
		return nil, out, err
	}
	ids := make([]string, 0, len(r.Messages))
	for i := range r.Messages {
		out.Messages = append(out.Messages, info(&r.Messages[i]))
		ids = append(ids, r.Messages[i].MessageID)
	}
	if len(ids) > 0 {
		if _, err := callRPC(ctx, s, func(ctx context.Context, c *rpc.Client) (*rpc.MarkReadResult, error) {
			return c.MarkRead(ctx, &rpc.MarkReadParams{MessageIDs: ids})
		}); err != nil {
			s.log.Warn("mcpserver: mark read", "err", err) // best effort, as the spec says
		}
		out.Status = "messages"
	} else {
		out.Status = "empty"
	}
	out.Remaining = max(r.Total-len(ids), 0)
	return nil, out, nil
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
	return 0, fmt.Errorf("invalid priority_filter %q: use all, critical, high_and_above or normal_and_above", filter)
}

// ErrWaitInProgress is the error of a second concurrent wait_for_message.
var ErrWaitInProgress = errors.New("another wait_for_message is already waiting: only one may wait at a time")

func (s *Server) waitForMessage(ctx context.Context, _ *mcp.CallToolRequest, in WaitForMessageInput) (*mcp.CallToolResult, WaitForMessageOutput, error) {
	var out WaitForMessageOutput
	timeout := DefaultWaitTimeout
	if in.Timeout < 0 {
		return nil, out, fmt.Errorf("invalid timeout %d: use 1 to %d seconds", in.Timeout, int(MaxWaitTimeout/time.Second))
	}
	if in.Timeout > 0 {
		timeout = time.Duration(in.Timeout) * time.Second
	}
	if timeout > MaxWaitTimeout {
		timeout = MaxWaitTimeout
	}
	floor, err := priorityFloor(in.PriorityFilter)
	if err != nil {
		return nil, out, err
	}
	if !s.waitMu.TryLock() {
		return nil, out, ErrWaitInProgress
	}
	defer s.waitMu.Unlock()
	start := time.Now()
	m, err := s.wait(ctx, time.NewTimer(timeout), floor)
	out.WaitedSeconds = int(time.Since(start).Round(time.Second) / time.Second)
	if err != nil {
		return nil, out, err
	}
	if m == nil {
		out.Status = "timeout"
		return nil, out, nil
	}
	out.Status, out.Message = "message_received", m
	return nil, out, nil
}

// wait takes queued notifications until one passes the filter: it fetches
// the message, skips what was deleted or is already read (check_messages
// may have consumed it), marks it read and returns it. nil means timeout.
func (s *Server) wait(ctx context.Context, timer *time.Timer, floor int) (*MessageInfo, error) {
	defer timer.Stop()
	for {
		for {
			n, ok := s.queue.pop()
			if !ok {
				break
			}
			g, err := callRPC(ctx, s, func(ctx context.Context, c *rpc.Client) (*rpc.GetMessageResult, error) {
				return c.GetMessage(ctx, &rpc.GetMessageParams{MessageID: n.MessageID})
			})
			if err != nil {
				s.log.Warn("mcpserver: fetch notified message", "id", n.MessageID, "err", err)
				continue
			}
			m := &g.Message
			if m.Deleted || m.IsRead || priorities[m.Priority] < floor {
				continue // filtered out: it stays unread for check_messages
			}
			// Mark it read without waiting for the write: a JSON-RPC
			// notification on the same connection, which the daemon runs
			// before any later call of ours, so check_messages cannot
			// return it again. Best effort, as the spec has it.
			s.noteDelivered(m.MessageID)
			if c, err := s.conn(ctx); err == nil {
				if err := c.Notify(ctx, rpc.MethodMessageMarkRead, &rpc.MarkReadParams{MessageIDs: []string{m.MessageID}}); err != nil {
					s.log.Warn("mcpserver: mark read", "err", err)
				}
			}
			return &MessageInfo{MessageID: m.MessageID, From: m.Author.AgentID, Content: m.Body.Content, Priority: m.Priority, Timestamp: m.CreatedAt}, nil
		}
		select {
		case <-s.queue.signal:
		case <-timer.C:
			return nil, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-s.stopRec:
			return nil, errors.New("the MCP server is shutting down")
		}
	}
}

func (s *Server) listAgents(ctx context.Context, _ *mcp.CallToolRequest, in ListAgentsInput) (*mcp.CallToolResult, ListAgentsOutput, error) {
	out := ListAgentsOutput{Agents: []AgentInfo{}}
	r, err := callRPC(ctx, s, func(ctx context.Context, c *rpc.Client) (*rpc.ListAgentsResult, error) {
		return c.ListAgents(ctx, &rpc.ListAgentsParams{})
	})
	if err != nil {
		return nil, out, err
	}
	withOffline := in.IncludeOffline == nil || *in.IncludeOffline
	for _, a := range r.Agents {
		if a.Kind != "agent" || (!withOffline && a.Status != "active") {
			continue
		}
		out.Agents = append(out.Agents, AgentInfo{Name: a.AgentID, Role: a.Role, Module: a.Module, Status: a.Status, LastSeenAt: a.LastSeenAt})
	}
	out.Count = len(out.Agents)
	return nil, out, nil
}

func (s *Server) broadcastMessage(ctx context.Context, _ *mcp.CallToolRequest, in BroadcastMessageInput) (*mcp.CallToolResult, BroadcastMessageOutput, error) {
	out := BroadcastMessageOutput{SentTo: []string{}, FailedTo: []string{}, MessageIDs: []string{}}
	if in.Content == "" {
		return nil, out, errors.New("content is required")
	}
	pri, err := checkPriority(in.Priority)
	if err != nil {
		return nil, out, err
	}
	f := BroadcastFilter{}
	if in.Filter != nil {
		f = *in.Filter
	}
	if f.Status != "" && f.Status != "all" && f.Status != "active" {
		return nil, out, fmt.Errorf("invalid filter.status %q: use all or active", f.Status)
	}
	exclude := map[string]bool{}
	for _, x := range f.Exclude {
		exclude[identity.NormalizeAgentID(x)] = true
	}
	r, err := callRPC(ctx, s, func(ctx context.Context, c *rpc.Client) (*rpc.ListAgentsResult, error) {
		return c.ListAgents(ctx, &rpc.ListAgentsParams{})
	})
	if err != nil {
		return nil, out, err
	}
	for _, a := range r.Agents {
		if a.Kind != "agent" || a.AgentID == s.id.AgentID || exclude[a.AgentID] || exclude[a.Role] || (a.Display != "" && exclude[a.Display]) {
			continue
		}
		if f.Status == "active" && a.Status != "active" {
			continue
		}
		sent, err := callRPC(ctx, s, func(ctx context.Context, c *rpc.Client) (*rpc.SendMessageResult, error) {
			return c.SendMessage(ctx, &rpc.SendMessageParams{Content: in.Content, Priority: pri, Mentions: []string{a.AgentID},
				Tags: []string{"broadcast"}})
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
	return nil, out, nil
}

func (s *Server) createGroup(ctx context.Context, _ *mcp.CallToolRequest, in CreateGroupInput) (*mcp.CallToolResult, GroupNameOutput, error) {
	r, err := callRPC(ctx, s, func(ctx context.Context, c *rpc.Client) (*rpc.CreateGroupResult, error) {
		return c.CreateGroup(ctx, &rpc.CreateGroupParams{Name: in.Name, Description: in.Description})
	})
	if err != nil {
		return nil, GroupNameOutput{}, err
	}
	return nil, GroupNameOutput{Status: "created", Name: r.Name}, nil
}

func (s *Server) deleteGroup(ctx context.Context, _ *mcp.CallToolRequest, in DeleteGroupInput) (*mcp.CallToolResult, GroupNameOutput, error) {
	r, err := callRPC(ctx, s, func(ctx context.Context, c *rpc.Client) (*rpc.DeleteGroupResult, error) {
		return c.DeleteGroup(ctx, &rpc.DeleteGroupParams{Name: in.Name})
	})
	if err != nil {
		return nil, GroupNameOutput{}, err
	}
	return nil, GroupNameOutput{Status: "deleted", Name: r.Name}, nil
}

func (s *Server) member(ctx context.Context, in GroupMemberInput, add bool) (*mcp.CallToolResult, GroupMemberOutput, error) {
	if in.MemberType != rpc.MemberAgent && in.MemberType != rpc.MemberRole {
		return nil, GroupMemberOutput{}, fmt.Errorf("invalid member_type %q: use agent or role", in.MemberType)
	}
	p := &rpc.GroupMembership{Group: in.Group, MemberType: in.MemberType, MemberID: in.MemberID}
	r, err := callRPC(ctx, s, func(ctx context.Context, c *rpc.Client) (*rpc.GroupMembership, error) {
		if add {
			return c.AddGroupMember(ctx, p)
		}
		return c.RemoveGroupMember(ctx, p)
	})
	if err != nil {
		return nil, GroupMemberOutput{}, err
	}
	status := "removed"
	if add {
		status = "added"
	}
	return nil, GroupMemberOutput{Status: status, Group: r.Group, MemberType: r.MemberType, MemberID: r.MemberID}, nil
}

func (s *Server) addGroupMember(ctx context.Context, _ *mcp.CallToolRequest, in GroupMemberInput) (*mcp.CallToolResult, GroupMemberOutput, error) {
	return s.member(ctx, in, true)
}

func (s *Server) removeGroupMember(ctx context.Context, _ *mcp.CallToolRequest, in GroupMemberInput) (*mcp.CallToolResult, GroupMemberOutput, error) {
	return s.member(ctx, in, false)
}

func (s *Server) listGroups(ctx context.Context, _ *mcp.CallToolRequest, _ ListGroupsInput) (*mcp.CallToolResult, ListGroupsOutput, error) {
	out := ListGroupsOutput{Groups: []GroupInfo{}}
	r, err := callRPC(ctx, s, func(ctx context.Context, c *rpc.Client) (*rpc.ListGroupsResult, error) {
		return c.ListGroups(ctx, &rpc.ListGroupsParams{})
	})
	if err != nil {
		return nil, out, err
	}
	for _, g := range r.Groups {
		out.Groups = append(out.Groups, GroupInfo(g))
	}
	return nil, out, nil
}

func (s *Server) getGroup(ctx context.Context, _ *mcp.CallToolRequest, in GetGroupInput) (*mcp.CallToolResult, GetGroupOutput, error) {
	var out GetGroupOutput
	info, err := callRPC(ctx, s, func(ctx context.Context, c *rpc.Client) (*rpc.GroupInfoResult, error) {
		return c.GroupInfo(ctx, &rpc.GroupInfoParams{Name: in.Name})
	})
	if err != nil {
		return nil, out, err
	}
	out = GetGroupOutput{Name: info.Name, Description: info.Description, CreatedAt: info.CreatedAt, CreatedBy: info.CreatedBy, Members: []GroupMember{}}
	for _, m := range info.Members {
		out.Members = append(out.Members, GroupMember(m))
	}
	if in.Expand {
		ms, err := callRPC(ctx, s, func(ctx context.Context, c *rpc.Client) (*rpc.GroupMembersResult, error) {
			return c.GroupMembers(ctx, &rpc.GroupMembersParams{Name: in.Name, Expand: true})
		})
		if err != nil {
			return nil, out, err
		}
		out.ExpandedAgents = ms.ExpandedAgents
		if out.ExpandedAgents == nil {
			out.ExpandedAgents = []string{}
		}
		out.ExpandedAgentsCount = ptr(len(out.ExpandedAgents))
	}
	return nil, out, nil
}
