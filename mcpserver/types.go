package mcpserver

import (
	"github.com/thrumhq/thrum/inbox"
	"github.com/thrumhq/thrum/rpc"
)

// The inputs and outputs of the 12 tools (the MCP contract's 11 and
// get_message; search_messages's are in search.go), as the contract names them. A message is
// an inbox.Message: framed, its text escaped. jsonschema tags are the
// descriptions agents see; schema.go adds enums and bounds. Where a tool
// takes or returns what an rpc method does (rpc.Recipient, rpc.GroupInfo,
// rpc.GroupMember, rpc.GroupMembership, rpc.CreateGroupParams,
// rpc.DeleteGroupParams), it uses the rpc type, whose tags describe it; the
// types here are the tools' own shapes.

// SendMessageInput is the input of send_message.
type SendMessageInput struct {
	To       string         `json:"to" jsonschema:"@role, an agent name, @group or @everyone"`
	Content  string         `json:"content" jsonschema:"message text (markdown)"`
	ReplyTo  string         `json:"reply_to,omitempty" jsonschema:"message ID this replies to"`
	Priority string         `json:"priority,omitempty" jsonschema:"message priority (default normal)"`
	Metadata map[string]any `json:"metadata,omitempty" jsonschema:"key-value data for the recipient"`
	// AckRequired and AckWithin ask for an acknowledgement, as message.send's do.
	AckRequired bool   `json:"ack_required,omitempty" jsonschema:"ask each recipient to acknowledge (a reply does); wait_for_message with acks returns it"`
	AckWithin   string `json:"ack_within,omitempty" jsonschema:"time to acknowledge, e.g. 30m"`
}

// SendMessageOutput is the result of send_message: the new message, whom
// its address reached, and each recipient's receipt. A sent message is
// queued for its recipients; a receipt says delivered only once a step
// put it before the recipient's model.
type SendMessageOutput struct {
	Status          string          `json:"status" jsonschema:"sent"`
	MessageID       string          `json:"message_id" jsonschema:"ID of the sent message"`
	RecipientStatus string          `json:"recipient_status" jsonschema:"active: a recipient was seen in the last 2 minutes; no_agents: nobody (but you) is addressed"`
	Recipients      []rpc.Recipient `json:"recipients" jsonschema:"whom the address reached"`
	Receipts        []rpc.Receipt   `json:"receipts" jsonschema:"each recipient's receipt: queued until a model saw it"`
}

// CheckMessagesInput is the input of check_messages.
type CheckMessagesInput struct {
	Limit *int `json:"limit,omitempty" jsonschema:"max messages to return (default 50)"`
}

// CheckMessagesOutput is the result of check_messages: the unread
// messages this call claimed.
type CheckMessagesOutput struct {
	Status    string          `json:"status" jsonschema:"messages or empty"`
	Messages  []inbox.Message `json:"messages" jsonschema:"your unread messages, oldest first, now marked read; each is returned to exactly one call"`
	Remaining int             `json:"remaining" jsonschema:"unread messages still waiting"`
}

// WaitForMessageInput is the input of wait_for_message.
type WaitForMessageInput struct {
	Timeout        *int   `json:"timeout,omitempty" jsonschema:"max seconds to wait (default 300)"`
	PriorityFilter string `json:"priority_filter,omitempty" jsonschema:"lowest priority to return (default all); others stay queued"`
	Acks           bool   `json:"acks,omitempty" jsonschema:"also return when a message you sent with ack_required is acknowledged"`
}

// WaitForMessageOutput is the result of wait_for_message: the message
// this wait claimed, or why it ended without one.
type WaitForMessageOutput struct {
	Status        string         `json:"status" jsonschema:"message_received, acknowledged (see ack), timeout, or shutdown (the server is stopping)"`
	Message       *inbox.Message `json:"message" jsonschema:"the message, now marked read; null otherwise"`
	Ack           *inbox.Ack     `json:"ack,omitempty"`
	WaitedSeconds int            `json:"waited_seconds" jsonschema:"how long the wait lasted"`
	QueueOverflow int            `json:"queue_overflow,omitempty" jsonschema:"queue overflow since the last wait: those messages are unread, for check_messages"`
}

// GetMessageInput is the input of get_message.
type GetMessageInput struct {
	MessageID string `json:"message_id" jsonschema:"the message to show"`
}

// GetMessageOutput is the result of get_message: a message with the
// conversation it belongs to.
type GetMessageOutput struct {
	MessageID    string          `json:"message_id" jsonschema:"the message asked for"`
	Conversation []inbox.Message `json:"conversation" jsonschema:"the message with its thread, or the replies it belongs to, oldest first; nothing is marked read"`
	More         bool            `json:"more,omitempty" jsonschema:"the conversation is longer than the 100 shown"`
}

// ListAgentsInput is the input of list_agents.
type ListAgentsInput struct {
	IncludeOffline *bool `json:"include_offline,omitempty" jsonschema:"include agents not seen in the last 2 minutes (default true)"`
}

// ListedAgent is one agent as list_agents returns it.
type ListedAgent struct {
	Name       string `json:"name" jsonschema:"agent name (its ID)"`
	Role       string `json:"role"`
	Module     string `json:"module"`
	Status     string `json:"status" jsonschema:"active or offline"`
	LastSeenAt string `json:"last_seen_at" jsonschema:"last activity, RFC 3339"`
}

// ListAgentsOutput is the result of list_agents.
type ListAgentsOutput struct {
	Agents []ListedAgent `json:"agents"`
	Count  int           `json:"count"`
}

// BroadcastFilter narrows the recipients of broadcast_message.
type BroadcastFilter struct {
	Status  string   `json:"status,omitempty" jsonschema:"all (default), or active: only agents seen in the last 2 minutes"`
	Exclude []string `json:"exclude,omitempty" jsonschema:"agent names or roles to leave out"`
}

// BroadcastMessageInput is the input of broadcast_message.
type BroadcastMessageInput struct {
	Content  string           `json:"content" jsonschema:"message text to broadcast"`
	Priority string           `json:"priority,omitempty" jsonschema:"message priority (default normal)"`
	Filter   *BroadcastFilter `json:"filter,omitempty" jsonschema:"optional recipient filters"`
}

// BroadcastMessageOutput is the result of broadcast_message: one send
// per recipient, and how each went.
type BroadcastMessageOutput struct {
	Status     string   `json:"status" jsonschema:"sent, partial (some sends failed) or no_recipients"`
	SentTo     []string `json:"sent_to" jsonschema:"agents that received the message"`
	FailedTo   []string `json:"failed_to" jsonschema:"agents the send failed for"`
	TotalSent  int      `json:"total_sent"`
	MessageIDs []string `json:"message_ids"`
}

// CreateGroupOutput is the result of create_group.
type CreateGroupOutput struct {
	Status string `json:"status" jsonschema:"created"`
	Name   string `json:"name" jsonschema:"the group's name"`
}

// DeleteGroupOutput is the result of delete_group.
type DeleteGroupOutput struct {
	Status string `json:"status" jsonschema:"deleted"`
	Name   string `json:"name" jsonschema:"the group's name"`
}

// GroupMemberOutput is the membership added or removed, with a status.
type GroupMemberOutput struct {
	Status string `json:"status" jsonschema:"added or removed"`
	rpc.GroupMembership
}

// ListGroupsInput is the (empty) input of list_groups.
type ListGroupsInput struct{}

// ListGroupsOutput is the result of list_groups.
type ListGroupsOutput struct {
	Groups []rpc.GroupInfo `json:"groups"`
}

// GetGroupInput is the input of get_group.
type GetGroupInput struct {
	Name   string `json:"name" jsonschema:"group name"`
	Expand bool   `json:"expand,omitempty" jsonschema:"resolve roles (and everyone) to agent IDs"`
}

// GetGroupOutput is the result of get_group: the group, its members and,
// with expand, the agents it reaches.
type GetGroupOutput struct {
	Name                string            `json:"name"`
	Description         string            `json:"description"`
	CreatedAt           string            `json:"created_at"`
	CreatedBy           string            `json:"created_by"`
	Members             []rpc.GroupMember `json:"members"`
	ExpandedAgents      []string          `json:"expanded_agents,omitzero" jsonschema:"with expand: the agent IDs the group reaches"`
	ExpandedAgentsCount *int              `json:"expanded_agents_count,omitempty" jsonschema:"with expand: how many"`
}

// Output descriptions kept in tools/list (schema.go's compact).
const (
	recipientStatusDoc = "active: a recipient was seen in the last 2 minutes; no_agents: nobody (but you) is addressed"
	receiptsDoc        = "each recipient's receipt: queued until a model saw it"
	queueOverflowDoc   = "queue overflow since the last wait: those messages are unread, for check_messages"
)

// ToolError is the structured content of a failed tool call (isError):
// a stable code, the message, and a hint naming the tool to use next.
type ToolError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Hint    string `json:"hint,omitempty"`
}

// Error returns the message, with the hint after it.
func (e *ToolError) Error() string {
	if e.Hint == "" {
		return e.Message
	}
	return e.Message + " (" + e.Hint + ")"
}
