package rpc

import "encoding/json"

// Method names of thrum's JSON-RPC API (spec/rpc-api.md, and the group.*
// shapes of DESIGN.md). Auth is thrum's own: it binds a connection to an
// identity.
const (
	MethodHealth            = "health"
	MethodAuth              = "auth"
	MethodAgentRegister     = "agent.register"
	MethodAgentList         = "agent.list"
	MethodAgentWhoami       = "agent.whoami"
	MethodAgentListContext  = "agent.listContext"
	MethodAgentDelete       = "agent.delete"
	MethodAgentCleanup      = "agent.cleanup"
	MethodSessionStart      = "session.start"
	MethodSessionEnd        = "session.end"
	MethodSessionHeartbeat  = "session.heartbeat"
	MethodSessionSetIntent  = "session.setIntent"
	MethodSessionSetTask    = "session.setTask"
	MethodSessionList       = "session.list"
	MethodMessageSend       = "message.send"
	MethodMessageGet        = "message.get"
	MethodMessageList       = "message.list"
	MethodMessageEdit       = "message.edit"
	MethodMessageDelete     = "message.delete"
	MethodMessageMarkRead   = "message.markRead"
	MethodThreadCreate      = "thread.create"
	MethodThreadList        = "thread.list"
	MethodThreadGet         = "thread.get"
	MethodSubscribe         = "subscribe"
	MethodUnsubscribe       = "unsubscribe"
	MethodSubscriptionsList = "subscriptions.list"
	MethodUserRegister      = "user.register"
	MethodUserIdentify      = "user.identify"
	MethodGroupCreate       = "group.create"
	MethodGroupDelete       = "group.delete"
	MethodGroupMemberAdd    = "group.member.add"
	MethodGroupMemberRemove = "group.member.remove"
	MethodGroupList         = "group.list"
	MethodGroupInfo         = "group.info"
	MethodGroupMembers      = "group.members"
	MethodSyncStatus        = "sync.status"
	MethodSyncForce         = "sync.force"
	NotificationMessage     = "notification.message"
)

// Message body formats.
const (
	FormatMarkdown = "markdown"
	FormatPlain    = "plain"
	FormatJSON     = "json"
)

// Message priorities, lowest first.
const (
	PriorityLow      = "low"
	PriorityNormal   = "normal"
	PriorityHigh     = "high"
	PriorityCritical = "critical"
)

// Pair is a {"type", "value"} pair, the one shape of two concepts: a
// scope, what a message or session is about ({"type":"module","value":
// "auth"}), and a ref, a link to something else ({"type":"issue",
// "value":"beads-42"}). Mentions are refs of type RefMention; a reply
// carries a RefReplyTo ref.
type Pair struct {
	Type  string `json:"type"`
	Value string `json:"value"`
}

// Ref types with a meaning to thrum.
const (
	RefMention = "mention"
	RefReplyTo = "reply_to"
)

// ---- health and auth ----

type HealthParams struct{}

type HealthResult struct {
	Status    string `json:"status"` // "ok" or "degraded"
	UptimeMs  int64  `json:"uptime_ms"`
	Version   string `json:"version"`
	RepoID    string `json:"repo_id"`
	SyncState string `json:"sync_state"` // "synced", "pending" or "error"
	// Problems says what makes the status "degraded", one sentence each
	// (a full disk, writes waiting to be applied); empty when "ok".
	Problems []string `json:"problems,omitempty"`
	// Repairs lists what the node repaired when it opened (torn log tails
	// moved aside), one sentence each.
	Repairs []string `json:"repairs,omitempty"`
}

// AuthParams binds the connection to an identity: an agent (by agent_id
// and, where required, its token) or a user (by token).
// AuthParams authenticate a connection: with an agent's or user's Token,
// or with the owner's secret (OwnerSecret), which makes the connection the
// owner's, as the Unix socket is; AgentID then optionally binds it to that
// agent.
type AuthParams struct {
	AgentID     string `json:"agent_id,omitempty"`
	Token       string `json:"token,omitempty"`
	OwnerSecret string `json:"owner_secret,omitempty"`
}

type AuthResult struct {
	AgentID string `json:"agent_id,omitempty"` // "" when the owner authenticated without naming an agent
	Kind    string `json:"kind,omitempty"`     // "agent" or "user"
	Owner   bool   `json:"owner,omitempty"`    // the owner's secret was presented: the connection acts for the owner
}

// ---- agents ----

type RegisterAgentParams struct {
	Name       string `json:"name,omitempty"`
	Role       string `json:"role"`
	Module     string `json:"module"`
	Display    string `json:"display,omitempty"`
	Force      bool   `json:"force,omitempty"`
	ReRegister bool   `json:"re_register,omitempty"`
}

type RegisterAgentResult struct {
	AgentID  string         `json:"agent_id"`
	Status   string         `json:"status"` // "registered", "updated" or "conflict"
	Conflict *AgentConflict `json:"conflict,omitempty"`
	// Token is the agent's secret, issued when the registration succeeds.
	// It is returned once; keep it in the identity file.
	Token string `json:"token,omitempty"`
}

type AgentConflict struct {
	ExistingAgentID string `json:"existing_agent_id"`
	RegisteredAt    string `json:"registered_at"`
	LastSeenAt      string `json:"last_seen_at"`
}

type ListAgentsParams struct {
	Role   string `json:"role,omitempty"`
	Module string `json:"module,omitempty"`
}

type ListAgentsResult struct {
	Agents []AgentInfo `json:"agents"`
}

type AgentInfo struct {
	AgentID      string `json:"agent_id"`
	Kind         string `json:"kind"` // "agent" or "user"
	Name         string `json:"name"`
	Role         string `json:"role"`
	Module       string `json:"module"`
	Display      string `json:"display"`
	RegisteredAt string `json:"registered_at"`
	LastSeenAt   string `json:"last_seen_at"`
	Status       string `json:"status"` // "active" (seen in the last 2 minutes) or "offline"
}

type WhoamiParams struct{}

type WhoamiResult struct {
	AgentID      string `json:"agent_id"`
	Role         string `json:"role"`
	Module       string `json:"module"`
	Display      string `json:"display"`
	Source       string `json:"source"`
	SessionID    string `json:"session_id"`
	SessionStart string `json:"session_start"`
}

type ListContextParams struct {
	AgentID string `json:"agent_id,omitempty"`
	Branch  string `json:"branch,omitempty"`
	File    string `json:"file,omitempty"`
}

type ListContextResult struct {
	Contexts []WorkContext `json:"contexts"`
}

type WorkContext struct {
	SessionID        string          `json:"session_id"`
	AgentID          string          `json:"agent_id"`
	Branch           string          `json:"branch"`
	WorktreePath     string          `json:"worktree_path"`
	UnmergedCommits  []CommitSummary `json:"unmerged_commits"`
	UncommittedFiles []string        `json:"uncommitted_files"`
	ChangedFiles     []string        `json:"changed_files"`
	GitUpdatedAt     string          `json:"git_updated_at"`
	CurrentTask      string          `json:"current_task"`
	TaskUpdatedAt    string          `json:"task_updated_at"`
	Intent           string          `json:"intent"`
	IntentUpdatedAt  string          `json:"intent_updated_at"`
}

type CommitSummary struct {
	Hash    string `json:"hash"`
	Subject string `json:"subject"`
}

type DeleteAgentParams struct {
	Name string `json:"name"`
}

type DeleteAgentResult struct {
	AgentID string `json:"agent_id"`
	Deleted bool   `json:"deleted"`
	Message string `json:"message"`
}

type CleanupAgentsParams struct {
	DryRun    bool `json:"dry_run,omitempty"`
	Force     bool `json:"force,omitempty"`
	Threshold int  `json:"threshold,omitempty"` // days; default 30
}

type CleanupAgentsResult struct {
	Orphans []OrphanAgent `json:"orphans"`
	Deleted []string      `json:"deleted"`
	DryRun  bool          `json:"dry_run"`
	Message string        `json:"message"`
}

type OrphanAgent struct {
	AgentID           string `json:"agent_id"`
	Role              string `json:"role"`
	Module            string `json:"module"`
	Worktree          string `json:"worktree"`
	Branch            string `json:"branch"`
	LastSeenAt        string `json:"last_seen_at"`
	WorktreeMissing   bool   `json:"worktree_missing"`
	BranchMissing     bool   `json:"branch_missing"`
	DaysSinceLastSeen int    `json:"days_since_last_seen"`
	MessageCount      int    `json:"message_count"`
	// Reason says why the agent is an orphan, as "no identity file in
	// any worktree; idle 34 days".
	Reason string `json:"reason"`
}

// ---- sessions ----

type StartSessionParams struct {
	AgentID string `json:"agent_id"`
	Scopes  []Pair `json:"scopes,omitempty"`
	Refs    []Pair `json:"refs,omitempty"`
}

type StartSessionResult struct {
	SessionID string `json:"session_id"`
	AgentID   string `json:"agent_id"`
	StartedAt string `json:"started_at"`
}

type EndSessionParams struct {
	SessionID string `json:"session_id"`
	Reason    string `json:"reason,omitempty"` // "normal" (default), "crash" or "superseded"
}

type EndSessionResult struct {
	SessionID  string `json:"session_id"`
	EndedAt    string `json:"ended_at"`
	DurationMs int64  `json:"duration_ms"`
}

type HeartbeatParams struct {
	SessionID    string `json:"session_id"`
	AddScopes    []Pair `json:"add_scopes,omitempty"`
	RemoveScopes []Pair `json:"remove_scopes,omitempty"`
	AddRefs      []Pair `json:"add_refs,omitempty"`
	RemoveRefs   []Pair `json:"remove_refs,omitempty"`
}

type HeartbeatResult struct {
	SessionID  string `json:"session_id"`
	LastSeenAt string `json:"last_seen_at"`
}

// SetIntentParams: Intent is required, as the spec says; nil (absent on
// the wire) is an invalid-params error, and a pointer to "" clears it.
type SetIntentParams struct {
	SessionID string  `json:"session_id"`
	Intent    *string `json:"intent,omitempty"`
}

type SetIntentResult struct {
	SessionID       string `json:"session_id"`
	Intent          string `json:"intent"`
	IntentUpdatedAt string `json:"intent_updated_at"`
}

// SetTaskParams: CurrentTask is required, as the spec says; nil (absent
// on the wire) is an invalid-params error, and a pointer to "" clears it.
type SetTaskParams struct {
	SessionID   string  `json:"session_id"`
	CurrentTask *string `json:"current_task,omitempty"`
}

type SetTaskResult struct {
	SessionID     string `json:"session_id"`
	CurrentTask   string `json:"current_task"`
	TaskUpdatedAt string `json:"task_updated_at"`
}

type ListSessionsParams struct {
	AgentID    string `json:"agent_id,omitempty"`
	ActiveOnly bool   `json:"active_only,omitempty"`
}

type ListSessionsResult struct {
	Sessions []SessionInfo `json:"sessions"`
}

type SessionInfo struct {
	SessionID  string `json:"session_id"`
	AgentID    string `json:"agent_id"`
	StartedAt  string `json:"started_at"`
	EndedAt    string `json:"ended_at"`
	EndReason  string `json:"end_reason"`
	LastSeenAt string `json:"last_seen_at"`
	Intent     string `json:"intent"`
	Status     string `json:"status"` // "active" or "ended"
}

// ---- messages ----

type SendMessageParams struct {
	Content    string          `json:"content"`
	Format     string          `json:"format,omitempty"`
	Structured json.RawMessage `json:"structured,omitempty"`
	ThreadID   string          `json:"thread_id,omitempty"`
	Scopes     []Pair          `json:"scopes,omitempty"`
	Refs       []Pair          `json:"refs,omitempty"`
	Mentions   []string        `json:"mentions,omitempty"`
	Tags       []string        `json:"tags,omitempty"`
	Priority   string          `json:"priority,omitempty"`
	ActingAs   string          `json:"acting_as,omitempty"`
	Disclose   bool            `json:"disclose,omitempty"`
	// IdempotencyKey, if set, makes a retry safe: a send that repeats the
	// key of an earlier send by the same author (within the daemon's
	// idempotency window) returns the first send's result instead of
	// storing a second message.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
}

type SendMessageResult struct {
	MessageID string `json:"message_id"`
	ThreadID  string `json:"thread_id,omitempty"`
	CreatedAt string `json:"created_at"`
	// Recipients says, for each mention, whom it reached at send time.
	Recipients []Recipient `json:"recipients,omitempty"`
}

// Recipient is one resolved address of a sent message.
type Recipient struct {
	Address string   `json:"address"` // the mention as given, without "@"
	Kind    string   `json:"kind"`    // "agent", "role", "group" or "everyone"
	Agents  []string `json:"agents"`  // agent IDs it reaches now
	Active  []string `json:"active"`  // those of Agents seen in the last 2 minutes
}

type GetMessageParams struct {
	MessageID string `json:"message_id"`
}

type GetMessageResult struct {
	Message MessageDetail `json:"message"`
}

type Author struct {
	AgentID   string `json:"agent_id"`
	SessionID string `json:"session_id"`
}

type Body struct {
	Format     string `json:"format"`
	Content    string `json:"content"`
	Structured string `json:"structured"` // JSON text, empty if none
}

type MessageMetadata struct {
	DeletedAt    string `json:"deleted_at"`
	DeleteReason string `json:"delete_reason"`
}

type MessageDetail struct {
	MessageID string          `json:"message_id"`
	ThreadID  string          `json:"thread_id"`
	Author    Author          `json:"author"`
	Body      Body            `json:"body"`
	Scopes    []Pair          `json:"scopes"`
	Refs      []Pair          `json:"refs"`
	Metadata  MessageMetadata `json:"metadata"`
	CreatedAt string          `json:"created_at"`
	UpdatedAt string          `json:"updated_at"`
	Deleted   bool            `json:"deleted"`
	Priority  string          `json:"priority"`
	Tags      []string        `json:"tags"`
	Version   int             `json:"version"` // number of edits
	IsRead    bool            `json:"is_read"`
	// ActingAs is set when a user sent the message as this agent with
	// disclose on: the user's ID, for a "[via user:X]" tag.
	DisclosedVia string `json:"disclosed_via,omitempty"`
}

type ListMessagesParams struct {
	Scope          *Pair  `json:"scope,omitempty"`
	Ref            *Pair  `json:"ref,omitempty"`
	ThreadID       string `json:"thread_id,omitempty"`
	AuthorID       string `json:"author_id,omitempty"`
	Mentions       bool   `json:"mentions,omitempty"`
	Unread         bool   `json:"unread,omitempty"`
	MentionRole    string `json:"mention_role,omitempty"`
	UnreadForAgent string `json:"unread_for_agent,omitempty"`
	PageSize       int    `json:"page_size,omitempty"`
	Page           int    `json:"page,omitempty"`
	SortBy         string `json:"sort_by,omitempty"`
	SortOrder      string `json:"sort_order,omitempty"`
	// IncludeDeleted lists soft-deleted messages too (excluded by default).
	IncludeDeleted bool `json:"include_deleted,omitempty"`
}

type ListMessagesResult struct {
	Messages   []MessageSummary `json:"messages"`
	Total      int              `json:"total"`
	Unread     int              `json:"unread"`
	Page       int              `json:"page"`
	PageSize   int              `json:"page_size"`
	TotalPages int              `json:"total_pages"`
}

type MessageSummary struct {
	MessageID string   `json:"message_id"`
	ThreadID  string   `json:"thread_id"`
	AgentID   string   `json:"agent_id"`
	Body      Body     `json:"body"`
	CreatedAt string   `json:"created_at"`
	UpdatedAt string   `json:"updated_at"`
	Deleted   bool     `json:"deleted"`
	IsRead    bool     `json:"is_read"`
	Priority  string   `json:"priority"`
	Scopes    []Pair   `json:"scopes"`
	Refs      []Pair   `json:"refs"`
	Tags      []string `json:"tags"`
	Version   int      `json:"version"`
}

type EditMessageParams struct {
	MessageID  string          `json:"message_id"`
	Content    *string         `json:"content,omitempty"`
	Structured json.RawMessage `json:"structured,omitempty"`
}

type EditMessageResult struct {
	MessageID string `json:"message_id"`
	UpdatedAt string `json:"updated_at"`
	Version   int    `json:"version"`
}

type DeleteMessageParams struct {
	MessageID string `json:"message_id"`
	Reason    string `json:"reason,omitempty"`
}

type DeleteMessageResult struct {
	MessageID string `json:"message_id"`
	DeletedAt string `json:"deleted_at"`
}

type MarkReadParams struct {
	MessageIDs []string `json:"message_ids"`
}

type MarkReadResult struct {
	MarkedCount int                 `json:"marked_count"`
	AlsoReadBy  map[string][]string `json:"also_read_by,omitempty"`
}

// ---- threads ----

type ThreadMessage struct {
	Content    string          `json:"content"`
	Format     string          `json:"format,omitempty"`
	Structured json.RawMessage `json:"structured,omitempty"`
}

type CreateThreadParams struct {
	Title     string         `json:"title"`
	Scopes    []Pair         `json:"scopes,omitempty"`
	Recipient string         `json:"recipient,omitempty"`
	Message   *ThreadMessage `json:"message,omitempty"`
	ActingAs  string         `json:"acting_as,omitempty"`
	Disclose  bool           `json:"disclose,omitempty"`
	// IdempotencyKey makes a retry safe, as for SendMessageParams.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
}

type CreateThreadResult struct {
	ThreadID  string `json:"thread_id"`
	CreatedAt string `json:"created_at"`
	MessageID string `json:"message_id,omitempty"`
}

type ListThreadsParams struct {
	Scope    *Pair `json:"scope,omitempty"`
	PageSize int   `json:"page_size,omitempty"`
	Page     int   `json:"page,omitempty"`
}

type ListThreadsResult struct {
	Threads    []ThreadSummary `json:"threads"`
	Total      int             `json:"total"`
	Page       int             `json:"page"`
	PageSize   int             `json:"page_size"`
	TotalPages int             `json:"total_pages"`
}

type ThreadSummary struct {
	ThreadID     string  `json:"thread_id"`
	Title        string  `json:"title"`
	MessageCount int     `json:"message_count"`
	UnreadCount  int     `json:"unread_count"`
	LastActivity string  `json:"last_activity"`
	LastSender   string  `json:"last_sender"`
	Preview      *string `json:"preview"`
	CreatedBy    string  `json:"created_by"`
	CreatedAt    string  `json:"created_at"`
}

type GetThreadParams struct {
	ThreadID string `json:"thread_id"`
	PageSize int    `json:"page_size,omitempty"`
	Page     int    `json:"page,omitempty"`
}

type ThreadInfo struct {
	ThreadID  string `json:"thread_id"`
	Title     string `json:"title"`
	CreatedBy string `json:"created_by"`
	CreatedAt string `json:"created_at"`
}

type GetThreadResult struct {
	Thread     ThreadInfo       `json:"thread"`
	Messages   []MessageSummary `json:"messages"`
	Total      int              `json:"total"`
	Page       int              `json:"page"`
	PageSize   int              `json:"page_size"`
	TotalPages int              `json:"total_pages"`
}

// ---- subscriptions and push ----

type SubscribeParams struct {
	Scope       *Pair  `json:"scope,omitempty"`
	MentionRole string `json:"mention_role,omitempty"`
	All         bool   `json:"all,omitempty"`
}

type SubscribeResult struct {
	SubscriptionID int64  `json:"subscription_id"`
	SessionID      string `json:"session_id"`
	CreatedAt      string `json:"created_at"`
}

type UnsubscribeParams struct {
	SubscriptionID int64 `json:"subscription_id"`
}

type UnsubscribeResult struct {
	Removed bool `json:"removed"`
}

type ListSubscriptionsParams struct{}

type ListSubscriptionsResult struct {
	Subscriptions []SubscriptionInfo `json:"subscriptions"`
}

type SubscriptionInfo struct {
	ID          int64  `json:"id"`
	ScopeType   string `json:"scope_type"`
	ScopeValue  string `json:"scope_value"`
	MentionRole string `json:"mention_role"`
	All         bool   `json:"all"`
	CreatedAt   string `json:"created_at"`
}

// Match types of a notification.
const (
	MatchScope   = "scope"
	MatchMention = "mention"
	MatchAll     = "all"
)

// MessageNotification is the params of a notification.message push.
type MessageNotification struct {
	MessageID           string              `json:"message_id"`
	ThreadID            string              `json:"thread_id"`
	Author              NotificationAuthor  `json:"author"`
	Preview             string              `json:"preview"`
	Scopes              []Pair              `json:"scopes"`
	MatchedSubscription MatchedSubscription `json:"matched_subscription"`
	Timestamp           string              `json:"timestamp"`

	// Frame, if set, is this whole notification.message as JSON-RPC, for
	// Conn.NotifyEncoded: the node encodes a message's notification once
	// and splices in each subscriber's match, instead of encoding it again
	// per subscriber. It is not part of the JSON and must not be modified.
	Frame []byte `json:"-"`
}

type NotificationAuthor struct {
	AgentID string `json:"agent_id"`
	Role    string `json:"role"`
	Module  string `json:"module"`
}

type MatchedSubscription struct {
	SubscriptionID int64  `json:"subscription_id"`
	MatchType      string `json:"match_type"`
}

// ---- users ----

type RegisterUserParams struct {
	Username string `json:"username"`
	Display  string `json:"display,omitempty"`
}

type RegisterUserResult struct {
	UserID      string `json:"user_id"`
	Username    string `json:"username"`
	DisplayName string `json:"display_name"`
	Token       string `json:"token"`
	Status      string `json:"status"` // "registered" or "existing"
}

type IdentifyUserParams struct{}

type IdentifyUserResult struct {
	Username string `json:"username"`
	Email    string `json:"email"`
	Display  string `json:"display"`
}

// ---- groups ----

type CreateGroupParams struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
}

type CreateGroupResult struct {
	Name      string `json:"name"`
	CreatedAt string `json:"created_at"`
}

type DeleteGroupParams struct {
	Name string `json:"name"`
}

type DeleteGroupResult struct {
	Name    string `json:"name"`
	Deleted bool   `json:"deleted"`
}

// Group member types.
const (
	MemberAgent = "agent"
	MemberRole  = "role"
)

type GroupMemberParams struct {
	Group      string `json:"group"`
	MemberType string `json:"member_type"` // "agent" or "role"
	MemberID   string `json:"member_id"`
}

type GroupMemberResult struct {
	Group      string `json:"group"`
	MemberType string `json:"member_type"`
	MemberID   string `json:"member_id"`
}

type ListGroupsParams struct{}

type ListGroupsResult struct {
	Groups []GroupInfo `json:"groups"`
}

type GroupInfo struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	CreatedAt   string `json:"created_at"`
	CreatedBy   string `json:"created_by"`
	MemberCount int    `json:"member_count"`
}

type GroupMember struct {
	Type string `json:"type"`
	ID   string `json:"id"`
}

type GroupInfoParams struct {
	Name string `json:"name"`
}

type GroupInfoResult struct {
	Name        string        `json:"name"`
	Description string        `json:"description"`
	CreatedAt   string        `json:"created_at"`
	CreatedBy   string        `json:"created_by"`
	Members     []GroupMember `json:"members"`
}

type GroupMembersParams struct {
	Name   string `json:"name"`
	Expand bool   `json:"expand,omitempty"`
}

type GroupMembersResult struct {
	Members        []GroupMember `json:"members"`
	ExpandedAgents []string      `json:"expanded_agents,omitempty"`
}

// ---- sync ----

type SyncStatusParams struct{}

type SyncStatusResult struct {
	Running    bool   `json:"running"`
	LastSyncAt string `json:"last_sync_at"`
	LastError  string `json:"last_error"`
	SyncState  string `json:"sync_state"` // "stopped", "idle", "synced" or "error"
}

type SyncForceParams struct{}

type SyncForceResult struct {
	Triggered  bool   `json:"triggered"`
	LastSyncAt string `json:"last_sync_at"`
	SyncState  string `json:"sync_state"`
}
