package rpc

import (
	"encoding/json"

	"github.com/thrumhq/thrum/eventlog"
)

// Method names of thrum's JSON-RPC API, and the notifications the server
// pushes: NotificationMessage, NotificationClaimed for a standing claim and
// NotificationReceipt for a subscription to receipts. Auth
// is thrum's own: it binds a connection to an identity. Method X takes
// XParams and returns XResult, as the Client method of the same name
// shows.
const (
	MethodHealth            = "health"
	MethodAuth              = "auth"
	MethodAgentRegister     = "agent.register"
	MethodAgentList         = "agent.list"
	MethodAgentWhoami       = "agent.whoami"
	MethodAgentListContext  = "agent.listContext"
	MethodAgentDelete       = "agent.delete"
	MethodAgentTrust        = "agent.trust"
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
	MethodMessageSearch     = "message.search"
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
	MethodWebLogin          = "web.login"
	NotificationMessage     = "notification.message"

	// The team keys that seal message bodies (extensions of the spec):
	// their state, a new one (sealing on, or a rotation), and moving
	// them between clones. Owner only, never over the WebSocket.
	MethodKeyStatus = "key.status"
	MethodKeyNew    = "key.new"
	MethodKeyExport = "key.export"
	MethodKeyImport = "key.import"
	MethodKeyGrant  = "key.grant"
	MethodKeyAccept = "key.accept"

	// MethodMessageClaimNext arms (or cancels) a standing claim: the next
	// message sent to the caller is claimed for it in the message's own
	// commit and pushed whole as NotificationClaimed (ClaimNextParams).
	MethodMessageClaimNext = "message.claimNext"
	NotificationClaimed    = "notification.claimed"

	// MethodMessageAck acknowledges a message addressed to the caller;
	// MethodMessageListSent lists the caller's messages with their
	// receipts; NotificationReceipt pushes a change of a receipt to a
	// subscription with Receipts set.
	MethodMessageAck      = "message.ack"
	MethodMessageListSent = "message.listSent"
	NotificationReceipt   = "notification.receipt"
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
//
// It is the event log's pair (eventlog.Pair), so that a scope or ref
// goes from a caller's params into the log's events, and from the
// projection into a result, with no conversion.
type Pair = eventlog.Pair

// Ref types with a meaning to thrum.
const (
	RefMention = "mention"
	RefReplyTo = "reply_to"
	// RefWorktree is a session ref whose value is a worktree path: a
	// heartbeat of such a session records the git work context there.
	RefWorktree = "worktree"
)

// ReplyTo returns the message refs reply to, "" if none.
func ReplyTo(refs []Pair) string {
	for _, r := range refs {
		if r.Type == RefReplyTo {
			return r.Value
		}
	}
	return ""
}

// ---- health and auth ----

// HealthParams are the params of health (MethodHealth): none. Like every
// params type without fields, it exists so that each method takes a params
// pointer and can gain a parameter without changing any signature.
type HealthParams struct{}

// HealthResult is the result of health: whether the node is well, and
// why not.
type HealthResult struct {
	Status    string `json:"status"` // "ok" or "degraded"
	UptimeMs  int64  `json:"uptime_ms"`
	Build            // the serving program's
	RepoID    string `json:"repo_id"`
	SyncState string `json:"sync_state"` // "synced", "pending" or "error"
	// Problems says what makes the status "degraded", one sentence each
	// (a full disk, writes waiting to be applied); empty when "ok".
	Problems []string `json:"problems,omitempty"`
	// Repairs lists what the node repaired when it opened (torn log tails
	// moved aside), one sentence each.
	Repairs []string `json:"repairs,omitempty"`
	// Refused counts what the server's loopback port refused since it
	// started; absent while nothing was.
	Refused *Refusals `json:"refused,omitempty"`
}

// Refusals count what a server's loopback port (its WebSocket) refused.
type Refusals struct {
	// Connections over a cap: another local user's over its share, a
	// user's WebSockets waiting to authenticate over theirs, handshakes
	// refused for their Host or Origin.
	Connections int64 `json:"connections"`
	// Credentials refused, in handshakes and by auth. Each cost its
	// connection a delay; none delayed anyone else's.
	Credentials int64 `json:"credentials"`
}

// Build identifies a build of a program: thrum's Version and what the go
// command stamped in the binary when it was built in a git checkout (the
// main module's commit, whether the tree had uncommitted changes, and the
// commit's time). A binary built elsewhere has only the version.
type Build struct {
	Version  string `json:"version"`
	Revision string `json:"revision"`
	Modified bool   `json:"modified"`
	VCSTime  string `json:"vcs_time"`
}

// AuthParams authenticate a connection: with an agent's or user's Token,
// or with the owner's secret (OwnerSecret), which makes the connection the
// owner's, as the Unix socket is; AgentID then optionally binds it to that
// agent. A browser signs in as the owner without the secret: once with a
// LoginCode from web.login, which auth exchanges for a web session
// (AuthResult.WebSession), then with that WebSession on each reconnect.
type AuthParams struct {
	AgentID     string `json:"agent_id,omitempty"`
	Token       string `json:"token,omitempty"`
	OwnerSecret string `json:"owner_secret,omitempty"`
	LoginCode   string `json:"login_code,omitempty"`
	WebSession  string `json:"web_session,omitempty"`
}

// AuthResult is the result of auth: the identity the connection is now
// bound to.
type AuthResult struct {
	AgentID string `json:"agent_id,omitempty"` // "" when the owner authenticated without naming an agent
	Kind    string `json:"kind,omitempty"`     // "agent" or "user"
	Owner   bool   `json:"owner,omitempty"`    // the owner's secret was presented: the connection acts for the owner
	// WebSession is the session credential a LoginCode was exchanged for
	// (empty otherwise), valid until WebSessionExpiresAt or until the
	// daemon stops, whichever comes first.
	WebSession          string `json:"web_session,omitempty"`
	WebSessionExpiresAt string `json:"web_session_expires_at,omitempty"`
}

// WebLoginParams are the params of web.login: none. See HealthParams.
type WebLoginParams struct{}

// WebLoginResult is the result of web.login: a one-time code that a
// browser page exchanges with auth (AuthParams.LoginCode) for an owner's
// web session. It works once, until ExpiresAt.
type WebLoginResult struct {
	Code      string `json:"code"`
	ExpiresAt string `json:"expires_at"`
}

// ---- agents ----

// RegisterAgentParams are the params of agent.register. Role and Module
// are required; Name is optional. Each is 1 to 64 of a-z, 0-9 and _ (so
// "claude_1", not "claude-1"), and a name is none of identity.Reserved.
// The agent's ID is its Name, or without one is derived from the
// repository, Role and Module. Force takes over a registration held by a
// different agent; ReRegister is the same agent returning (after losing
// its identity file).
type RegisterAgentParams struct {
	Name       string `json:"name,omitempty"`
	Role       string `json:"role"`   // required
	Module     string `json:"module"` // required
	Display    string `json:"display,omitempty"`
	Force      bool   `json:"force,omitempty"`
	ReRegister bool   `json:"re_register,omitempty"`
}

// RegisterAgentResult is the result of agent.register. With Status
// "conflict", nothing was registered and Conflict names the holder.
type RegisterAgentResult struct {
	AgentID  string         `json:"agent_id"`
	Status   string         `json:"status"` // "registered", "updated" or "conflict"
	Conflict *AgentConflict `json:"conflict,omitempty"`
	// Token is the agent's secret, issued when the registration succeeds.
	// It is returned once; keep it in the identity file.
	Token string `json:"token,omitempty"`
}

// AgentConflict describes the agent that already holds a registration.
type AgentConflict struct {
	ExistingAgentID string `json:"existing_agent_id"`
	RegisteredAt    string `json:"registered_at"`
	LastSeenAt      string `json:"last_seen_at"`
}

// ListAgentsParams are the params of agent.list: optional filters.
type ListAgentsParams struct {
	Role   string `json:"role,omitempty"`
	Module string `json:"module,omitempty"`
}

// ListAgentsResult is the result of agent.list.
type ListAgentsResult struct {
	Agents []AgentInfo `json:"agents"`
}

// Identity kinds (AgentInfo.Kind, AuthResult.Kind).
const (
	KindAgent = "agent"
	KindUser  = "user"
)

// AgentInfo is one registered identity: an agent, or a user (Kind "user").
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
	// Local says the identity was registered on this machine (it has a
	// credential here), so its messages were written here: a frame shows
	// its sender as local.
	Local bool `json:"local,omitempty"`
}

// WhoamiParams are the params of agent.whoami: none (the caller is the
// connection's identity or caller_agent_id). See HealthParams.
type WhoamiParams struct{}

// WhoamiResult is the result of agent.whoami: the caller and its current
// session, if any (SessionID and SessionStart empty if none). Source says
// where the identity came from: "environment", "flags" or "identity_file".
type WhoamiResult struct {
	AgentID      string `json:"agent_id"`
	Role         string `json:"role"`
	Module       string `json:"module"`
	Display      string `json:"display"`
	Source       string `json:"source"`
	SessionID    string `json:"session_id"`
	SessionStart string `json:"session_start"`
}

// ListContextParams are the params of agent.listContext: optional filters;
// File matches changed or uncommitted files.
type ListContextParams struct {
	AgentID string `json:"agent_id,omitempty"`
	Branch  string `json:"branch,omitempty"`
	File    string `json:"file,omitempty"`
}

// ListContextResult is the result of agent.listContext.
type ListContextResult struct {
	Contexts []WorkContext `json:"contexts"`
}

// WorkContext is what one session is working on: its git state (from the
// worktree its heartbeat names), task and intent. Empty strings mean
// unknown or not set.
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

// CommitSummary is one commit of a branch not yet on main.
type CommitSummary struct {
	Hash    string `json:"hash"`
	Subject string `json:"subject"`
}

// DeleteAgentParams are the params of agent.delete: the agent's name.
type DeleteAgentParams struct {
	Name string `json:"name"`
}

// DeleteAgentResult is the result of agent.delete.
type DeleteAgentResult struct {
	AgentID string `json:"agent_id"`
	Deleted bool   `json:"deleted"`
	Message string `json:"message"`
}

// TrustAgentParams are the params of agent.trust (an extension of the
// spec): the identity whose new key the owner vouches for, and the key
// (EncodeKey form), which may be left out when exactly one new key of
// the identity waits (a registration refused for bringing it).
type TrustAgentParams struct {
	Name string `json:"name"`
	Key  string `json:"key,omitempty"`
}

// TrustAgentResult is the result of agent.trust: the key now trusted
// here, how many refused events it let in, and the new keys of the
// identity that still wait.
type TrustAgentResult struct {
	AgentID  string       `json:"agent_id"`
	Key      string       `json:"key"`
	Imported int          `json:"imported"`
	Pending  []PendingKey `json:"pending"`
}

// PendingKey is a new key of an identity that this clone refused for
// want of the owner's word: from the registration that brought it.
type PendingKey struct {
	Key     string `json:"key"`
	Machine string `json:"machine"` // the machine that registered it
	At      string `json:"at"`      // when the registration was refused
}

// CleanupAgentsParams are the params of agent.cleanup. Without Force or
// with DryRun, orphans are listed and none deleted.
type CleanupAgentsParams struct {
	DryRun    bool `json:"dry_run,omitempty"`
	Force     bool `json:"force,omitempty"`
	Threshold int  `json:"threshold,omitempty"` // days; default 30
}

// CleanupAgentsResult is the result of agent.cleanup: the orphans found
// and the IDs deleted (none in a dry run).
type CleanupAgentsResult struct {
	Orphans []OrphanAgent `json:"orphans"`
	Deleted []string      `json:"deleted"`
	DryRun  bool          `json:"dry_run"`
	Message string        `json:"message"`
}

// OrphanAgent is an agent agent.cleanup considers abandoned: its worktree
// or branch is gone, or it has been idle past the threshold.
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

// StartSessionParams are the params of session.start: the agent, and the
// session's initial scopes and refs.
type StartSessionParams struct {
	AgentID string `json:"agent_id"`
	Scopes  []Pair `json:"scopes,omitempty"`
	Refs    []Pair `json:"refs,omitempty"`
}

// StartSessionResult is the result of session.start. Over the Unix socket
// or a pipe, a connection not yet bound to an agent is bound to this one,
// with the new session pinned for its later calls.
type StartSessionResult struct {
	SessionID string `json:"session_id"`
	AgentID   string `json:"agent_id"`
	StartedAt string `json:"started_at"`
}

// EndSessionParams are the params of session.end.
type EndSessionParams struct {
	SessionID string `json:"session_id"`
	Reason    string `json:"reason,omitempty"` // "normal" (default), "crash" or "superseded"
}

// EndSessionResult is the result of session.end.
type EndSessionResult struct {
	SessionID  string `json:"session_id"`
	EndedAt    string `json:"ended_at"`
	DurationMs int64  `json:"duration_ms"`
}

// HeartbeatParams are the params of session.heartbeat: the session, and
// scopes and refs to add or remove. A ref of type "worktree"
// (RefWorktree) names the worktree whose git state the node reads
// into the session's WorkContext, if it is a worktree of the node's
// repository.
type HeartbeatParams struct {
	SessionID    string `json:"session_id"`
	AddScopes    []Pair `json:"add_scopes,omitempty"`
	RemoveScopes []Pair `json:"remove_scopes,omitempty"`
	AddRefs      []Pair `json:"add_refs,omitempty"`
	RemoveRefs   []Pair `json:"remove_refs,omitempty"`
}

// HeartbeatResult is the result of session.heartbeat.
type HeartbeatResult struct {
	SessionID  string `json:"session_id"`
	LastSeenAt string `json:"last_seen_at"`
}

// SetIntentParams are the params of session.setIntent. Intent is
// required, as the spec says: nil (absent on the wire) is an
// invalid-params error, and a pointer to "" clears it.
type SetIntentParams struct {
	SessionID string  `json:"session_id"`
	Intent    *string `json:"intent,omitempty"`
}

// SetIntentResult is the result of session.setIntent.
type SetIntentResult struct {
	SessionID       string `json:"session_id"`
	Intent          string `json:"intent"`
	IntentUpdatedAt string `json:"intent_updated_at"`
}

// SetTaskParams are the params of session.setTask. CurrentTask is
// required, as the spec says: nil (absent on the wire) is an
// invalid-params error, and a pointer to "" clears it.
type SetTaskParams struct {
	SessionID   string  `json:"session_id"`
	CurrentTask *string `json:"current_task,omitempty"`
}

// SetTaskResult is the result of session.setTask.
type SetTaskResult struct {
	SessionID     string `json:"session_id"`
	CurrentTask   string `json:"current_task"`
	TaskUpdatedAt string `json:"task_updated_at"`
}

// ListSessionsParams are the params of session.list: optional filters.
type ListSessionsParams struct {
	AgentID    string `json:"agent_id,omitempty"`
	ActiveOnly bool   `json:"active_only,omitempty"`
}

// ListSessionsResult is the result of session.list.
type ListSessionsResult struct {
	Sessions []SessionInfo `json:"sessions"`
}

// SessionInfo is one session of an agent. EndedAt and EndReason are empty
// while it is active.
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

// SendMessageParams are the params of message.send. Content is required
// (Format FormatMarkdown by default); Structured, if set, must be a JSON
// object, a typed payload beside the text. Mentions are addresses without "@": an agent, a
// role, a group or "everyone". ActingAs (users only) sends as another
// agent, with a "[via user:X]" tag if Disclose.
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
	// AckRequired asks each recipient to acknowledge the message
	// (message.ack, or a reply). AckWithin, a duration such as "30m"
	// (1s to MaxAckWithin), gives them that long; it implies AckRequired.
	AckRequired bool   `json:"ack_required,omitempty"`
	AckWithin   string `json:"ack_within,omitempty"`
}

// MaxAckWithin is the longest AckWithin a send may give.
const MaxAckWithin = "720h"

// SendMessageResult is the result of message.send.
type SendMessageResult struct {
	MessageID string `json:"message_id"`
	ThreadID  string `json:"thread_id,omitempty"`
	CreatedAt string `json:"created_at"`
	// Recipients says, for each mention, whom it reached at send time.
	Recipients []Recipient `json:"recipients,omitempty"`
}

// Recipient is one resolved address of a sent message. Its jsonschema
// tags describe it to MCP clients: mcpserver's send_message returns it.
type Recipient struct {
	Address string   `json:"address" jsonschema:"the address as resolved, without @"`
	Kind    string   `json:"kind" jsonschema:"agent, role, group or everyone"`
	Agents  []string `json:"agents" jsonschema:"agent IDs it reaches"`
	Active  []string `json:"active" jsonschema:"those seen in the last 2 minutes"` // of Agents
}

// GetMessageParams are the params of message.get.
type GetMessageParams struct {
	MessageID string `json:"message_id"`
}

// GetMessageResult is the result of message.get.
type GetMessageResult struct {
	Message MessageDetail `json:"message"`
}

// Author is who wrote a message: the agent and the session it wrote in.
type Author struct {
	AgentID   string `json:"agent_id"`
	SessionID string `json:"session_id"`
}

// Body is a message's content. Structured is the structured payload as
// JSON text, empty if none.
type Body struct {
	Format     string `json:"format"`
	Content    string `json:"content"`
	Structured string `json:"structured"` // JSON text, empty if none
	// Sealed is the ID of the team key the body is sealed with when this
	// clone holds no key that opens it: Content then says so, and the
	// message is not delivered until the key is imported. An extension.
	Sealed string `json:"sealed,omitempty"`
}

// MessageMetadata is a message's deletion record, empty if it is not
// deleted.
type MessageMetadata struct {
	DeletedAt    string `json:"deleted_at"`
	DeleteReason string `json:"delete_reason"`
}

// MessageDetail is one message in full, as message.get returns it. It is
// a different shape from MessageSummary (author as an object, deletion
// metadata), as the spec has it.
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
	// DisclosedVia is set when a user sent the message as this agent with
	// disclose on: the user's ID, for a "[via user:X]" tag.
	DisclosedVia string `json:"disclosed_via,omitempty"`
	// AckRequired says the sender asked for an acknowledgement, due by
	// AckDue if it gave a time.
	AckRequired bool   `json:"ack_required,omitempty"`
	AckDue      string `json:"ack_due,omitempty"`
	// Receipts say where the message stands with each recipient resolved
	// at send, in that order (message.get only; empty for a message
	// addressed to no one).
	Receipts []Receipt `json:"receipts,omitempty"`
	// Sender says how far the message is known to be its author's:
	// SenderLocal, SenderVerified or SenderUnverified.
	Sender string `json:"sender"`
}

// Values of Sender: how far a message is known to be its author's.
const (
	// SenderLocal: written on this machine, by an identity registered
	// here.
	SenderLocal = "local"
	// SenderVerified: written on another machine and signed by a key
	// this clone trusts for its author (the first seen for it, the
	// team's thrum-keys, or one the owner trusted): that machine's
	// thrum wrote it for its author.
	SenderVerified = "verified"
	// SenderUnverified: an unsigned message from another machine,
	// written before its author had a key (its legacy), or one another
	// identity sent as its author (acting_as), whose key is not the
	// author's: nothing proves its author wrote it.
	SenderUnverified = "unverified"
)

// Receipt states, in the order a receipt moves through them.
const (
	ReceiptQueued       = "queued"
	ReceiptDelivered    = "delivered"
	ReceiptAcknowledged = "acknowledged"
)

// Delivery paths (Receipt.Via, MarkReadParams.Via, ClaimNextParams.Via):
// how a message was handed to its recipient. Only a step that puts the
// message before the agent's model claims it; a channel push and a
// monitor's line only announce it, so ViaChannel is found in older logs
// only, and a new claim may not name it.
const (
	ViaWaitForMessage = "wait_for_message" // the MCP tool
	ViaCheckMessages  = "check_messages"   // the MCP tool
	ViaChannel        = "channel"          // a Claude Code channel push (older logs)
	ViaHook           = "hook"             // a host hook's context
	ViaStream         = "stream"           // a one-shot wait's output (a script's, or a tool call's)
	ViaMarkRead       = "mark_read"        // message.markRead itself (the default)
	ViaReply          = "reply"            // marked read by the recipient's reply
	ViaAck            = "ack"              // marked read by the recipient's acknowledgement
)

// Receipt is where a message stands with one recipient: queued, then
// delivered (Via says how, At when), then acknowledged (AckedAt, with
// the recipient's Note, or ReplyID when a reply acknowledged it). A
// state never goes back. A recipient may acknowledge what no path
// delivered to it (it saw the message some other way): Via and At are
// then empty.
type Receipt struct {
	AgentID string `json:"agent_id"`
	State   string `json:"state"`
	Via     string `json:"via,omitempty"`
	At      string `json:"at,omitempty"`
	AckedAt string `json:"acked_at,omitempty"`
	Note    string `json:"note,omitempty"`
	ReplyID string `json:"reply_id,omitempty"`
}

// ListMessagesParams are the params of message.list: filters, all
// optional, and a page. Mentions and Unread are for the caller; MentionRole
// and UnreadForAgent name whom explicitly (for callers acting for another,
// such as the MCP server). SortBy is "created_at" (default) or
// "updated_at"; SortOrder "desc" (default) or "asc". Pages count from 1;
// PageSize defaults to 10.
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

// ListMessagesResult is one page of message.list, with the totals of the
// whole list.
type ListMessagesResult struct {
	Messages   []MessageSummary `json:"messages"`
	Total      int              `json:"total"`
	Unread     int              `json:"unread"`
	Page       int              `json:"page"`
	PageSize   int              `json:"page_size"`
	TotalPages int              `json:"total_pages"`
}

// SearchMessagesParams are the params of message.search. Query is
// required: plain words (all must appear; stemmed, so "tokens" finds
// "token"), "a phrase", prefix* and the operators AND, OR, NOT (upper
// case) with parentheses. The filters are message.list's, plus a time
// range (Since and Until, RFC 3339, inclusive).
type SearchMessagesParams struct {
	Query          string `json:"query"`
	AuthorID       string `json:"author_id,omitempty"`
	Scope          *Pair  `json:"scope,omitempty"`
	Ref            *Pair  `json:"ref,omitempty"`
	ThreadID       string `json:"thread_id,omitempty"`
	Mentions       bool   `json:"mentions,omitempty"`
	MentionRole    string `json:"mention_role,omitempty"`
	Since          string `json:"since,omitempty"`
	Until          string `json:"until,omitempty"`
	IncludeDeleted bool   `json:"include_deleted,omitempty"`
	// SortBy is "relevance" (the default) or "created_at" (newest first).
	SortBy   string `json:"sort_by,omitempty"`
	PageSize int    `json:"page_size,omitempty"`
	Page     int    `json:"page,omitempty"`
}

// SearchMessagesResult is one page of message.search, with the number of
// matches in all.
type SearchMessagesResult struct {
	Results    []SearchResult `json:"results"`
	Total      int            `json:"total"`
	Page       int            `json:"page"`
	PageSize   int            `json:"page_size"`
	TotalPages int            `json:"total_pages"`
	// SortBy is the order of Results: "relevance", or "created_at"
	// (newest first) when asked or when more than 2,000 messages match
	// (ranking every match of so common a query would be slow and say
	// little).
	SortBy string `json:"sort_by"`
}

// SearchResult is one message a search found: the message as a listing
// shows it, and the excerpt that matched.
type SearchResult struct {
	MessageSummary
	// Snippet is the best-matching excerpt of the content (or of the
	// structured payload's JSON), "…" where it was cut.
	Snippet string `json:"snippet"`
	// Highlights are the matched words in Snippet, each [start, end) in
	// characters (Unicode code points), in order.
	Highlights [][2]int `json:"highlights"`
}

// MessageSummary is one message in a list (message.list, thread.get).
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
	// AckRequired says the sender asked for an acknowledgement.
	AckRequired bool `json:"ack_required,omitempty"`
	// Sender says how far the message is known to be its author's (as
	// in MessageDetail).
	Sender string `json:"sender"`
}

// EditMessageParams are the params of message.edit: a new Content, a new
// Structured payload, or both; at least one.
type EditMessageParams struct {
	MessageID  string          `json:"message_id"`
	Content    *string         `json:"content,omitempty"`
	Structured json.RawMessage `json:"structured,omitempty"`
}

// EditMessageResult is the result of message.edit.
type EditMessageResult struct {
	MessageID string `json:"message_id"`
	UpdatedAt string `json:"updated_at"`
	Version   int    `json:"version"`
}

// DeleteMessageParams are the params of message.delete. Deletion is soft:
// the message stays, marked deleted.
type DeleteMessageParams struct {
	MessageID string `json:"message_id"`
	Reason    string `json:"reason,omitempty"`
}

// DeleteMessageResult is the result of message.delete.
type DeleteMessageResult struct {
	MessageID string `json:"message_id"`
	DeletedAt string `json:"deleted_at"`
}

// MarkReadParams are the params of message.markRead. WithMessages asks
// for the claimed messages in the result too, so that a consumer gets
// what it claimed in one round trip.
type MarkReadParams struct {
	MessageIDs   []string `json:"message_ids"`
	WithMessages bool     `json:"with_messages,omitempty"`
	// Via names the path that hands the messages to the agent, for their
	// receipts (one of the Via constants; default ViaMarkRead).
	Via string `json:"via,omitempty"`
	// Deadline (RFC 3339), if set, is when the caller stops waiting for
	// the answer: a claim whose read is not queued for writing by then is
	// refused (CodeDeadlinePassed) and marks nothing, so that a caller
	// that gave up has claimed nothing it could not show.
	Deadline string `json:"deadline,omitempty"`
}

// MarkReadResult says what one message.markRead call did. MarkedIDs are
// the messages this call newly marked read for the caller — its claim:
// no other call for the same agent gets them — and MarkedCount is their
// number. Messages read already are in neither. AlsoReadBy says who else
// has read each (omitted if nobody). Messages, given with_messages, are
// the claimed messages as message.get returns them (read, now), in the
// order of MarkedIDs; one that cannot be fetched is left out (the claim
// stands: fetch it with message.get).
type MarkReadResult struct {
	MarkedCount int                 `json:"marked_count"`
	MarkedIDs   []string            `json:"marked_ids"`
	AlsoReadBy  map[string][]string `json:"also_read_by,omitempty"`
	Messages    []MessageDetail     `json:"messages,omitempty"`
}

// ClaimNextParams are the params of message.claimNext. Without Cancel
// it arms the connection's standing claim (one per connection; arming
// again replaces its floor): the next message sent to the caller at or
// above MinPriority (default low: any) is marked read for it in the same
// commit as the message itself, and pushed to the connection as
// NotificationClaimed, once. A message is claimed for one standing claim
// of its recipient (the one armed first). A connection that holds a
// standing claim is not sent NotificationMessage for the message claimed
// for it. With Cancel it disarms the standing claim; a claim being made
// for it at that moment is finished first.
type ClaimNextParams struct {
	MinPriority string `json:"min_priority,omitempty"`
	Cancel      bool   `json:"cancel,omitempty"`
	// Via names the consumer that waits, for the receipt of what the
	// claim takes (as in MarkReadParams; default ViaWaitForMessage).
	Via string `json:"via,omitempty"`
}

// ClaimNextResult is the result of message.claimNext. Armed says whether
// the standing claim is armed now. ClaimedID, on a cancel, is the message
// the standing claim took since it was last armed ("" if none): its
// NotificationClaimed was pushed before this result.
type ClaimNextResult struct {
	Armed     bool   `json:"armed"`
	ClaimedID string `json:"claimed_id,omitempty"`
}

// ClaimedNotification is the params of a NotificationClaimed push: the
// message a standing claim took, read now, as message.get returns it.
// Message is nil only if it could not be fetched with the claim (the
// claim stands: fetch it with message.get).
type ClaimedNotification struct {
	MessageID string         `json:"message_id"`
	Message   *MessageDetail `json:"message,omitempty"`
}

// AckMessageParams are the params of message.ack: the message to
// acknowledge, which must be addressed to the caller, and an optional
// short note for the sender.
type AckMessageParams struct {
	MessageID string `json:"message_id"`
	Note      string `json:"note,omitempty"`
}

// AckMessageResult is the result of message.ack: the acknowledgement
// that stands. Already says it was acknowledged before (by an ack or a
// reply), which this call changed nothing of.
type AckMessageResult struct {
	MessageID string  `json:"message_id"`
	Receipt   Receipt `json:"receipt"`
	Already   bool    `json:"already,omitempty"`
}

// ListSentParams are the params of message.listSent: the caller's
// messages, newest first. Unacked keeps those that ask for an
// acknowledgement some recipient has not given; Overdue those of them
// whose time to acknowledge is up.
type ListSentParams struct {
	Unacked  bool `json:"unacked,omitempty"`
	Overdue  bool `json:"overdue,omitempty"`
	PageSize int  `json:"page_size,omitempty"`
	Page     int  `json:"page,omitempty"`
}

// ListSentResult is one page of message.listSent.
type ListSentResult struct {
	Messages   []SentMessage `json:"messages"`
	Total      int           `json:"total"`
	Page       int           `json:"page"`
	PageSize   int           `json:"page_size"`
	TotalPages int           `json:"total_pages"`
}

// SentMessage is one of the caller's messages with its receipts and their
// counts: of Recipients, how many were Delivered (or acknowledged) and
// how many Acknowledged. Overdue says an acknowledgement is missing past
// AckDue.
type SentMessage struct {
	MessageID    string    `json:"message_id"`
	ThreadID     string    `json:"thread_id"`
	CreatedAt    string    `json:"created_at"`
	Preview      string    `json:"preview"`
	Priority     string    `json:"priority"`
	AckRequired  bool      `json:"ack_required"`
	AckDue       string    `json:"ack_due,omitempty"`
	Overdue      bool      `json:"overdue,omitempty"`
	Recipients   int       `json:"recipients"`
	Delivered    int       `json:"delivered"`
	Acknowledged int       `json:"acknowledged"`
	Receipts     []Receipt `json:"receipts"`
}

// ---- threads ----

// ThreadMessage is the first message of a thread made by thread.create.
type ThreadMessage struct {
	Content    string          `json:"content"`
	Format     string          `json:"format,omitempty"`
	Structured json.RawMessage `json:"structured,omitempty"`
}

// CreateThreadParams are the params of thread.create. Message and
// Recipient go together: the thread starts with that message, sent to
// that agent.
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

// CreateThreadResult is the result of thread.create; MessageID is set when
// a first message was sent.
type CreateThreadResult struct {
	ThreadID  string `json:"thread_id"`
	CreatedAt string `json:"created_at"`
	MessageID string `json:"message_id,omitempty"`
}

// ListThreadsParams are the params of thread.list: an optional scope
// filter and a page.
type ListThreadsParams struct {
	Scope    *Pair `json:"scope,omitempty"`
	PageSize int   `json:"page_size,omitempty"`
	Page     int   `json:"page,omitempty"`
}

// ListThreadsResult is one page of thread.list.
type ListThreadsResult struct {
	Threads    []ThreadSummary `json:"threads"`
	Total      int             `json:"total"`
	Page       int             `json:"page"`
	PageSize   int             `json:"page_size"`
	TotalPages int             `json:"total_pages"`
}

// ThreadSummary is one thread in thread.list, with its activity as the
// caller sees it (UnreadCount). Preview is the start of the latest
// message, null if there is none.
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

// GetThreadParams are the params of thread.get: the thread and a page of
// its messages.
type GetThreadParams struct {
	ThreadID string `json:"thread_id"`
	PageSize int    `json:"page_size,omitempty"`
	Page     int    `json:"page,omitempty"`
}

// ThreadInfo is a thread's own record, in thread.get.
type ThreadInfo struct {
	ThreadID  string `json:"thread_id"`
	Title     string `json:"title"`
	CreatedBy string `json:"created_by"`
	CreatedAt string `json:"created_at"`
}

// GetThreadResult is the result of thread.get: the thread and one page of
// its messages.
type GetThreadResult struct {
	Thread     ThreadInfo       `json:"thread"`
	Messages   []MessageSummary `json:"messages"`
	Total      int              `json:"total"`
	Page       int              `json:"page"`
	PageSize   int              `json:"page_size"`
	TotalPages int              `json:"total_pages"`
}

// ---- subscriptions and push ----

// SubscribeParams are the params of subscribe: exactly one of Scope,
// MentionRole, All or Receipts. Matching messages are pushed to the
// connection as NotificationMessage until it closes. Receipts subscribes
// to receipts instead, pushed as NotificationReceipt when a message is
// delivered to or acknowledged by a recipient: ReceiptsSent those of the
// caller's own messages, ReceiptsAll those of every message.
type SubscribeParams struct {
	Scope       *Pair  `json:"scope,omitempty"`
	MentionRole string `json:"mention_role,omitempty"`
	All         bool   `json:"all,omitempty"`
	Receipts    string `json:"receipts,omitempty"`
}

// Receipt subscriptions (SubscribeParams.Receipts).
const (
	ReceiptsSent = "sent"
	ReceiptsAll  = "all"
)

// SubscribeResult is the result of subscribe.
type SubscribeResult struct {
	SubscriptionID int64  `json:"subscription_id"`
	SessionID      string `json:"session_id"`
	CreatedAt      string `json:"created_at"`
}

// UnsubscribeParams are the params of unsubscribe.
type UnsubscribeParams struct {
	SubscriptionID int64 `json:"subscription_id"`
}

// UnsubscribeResult is the result of unsubscribe; Removed is false if the
// subscription did not exist.
type UnsubscribeResult struct {
	Removed bool `json:"removed"`
}

// ListSubscriptionsParams are the params of subscriptions.list: none (the
// caller's subscriptions are listed). See HealthParams.
type ListSubscriptionsParams struct{}

// ListSubscriptionsResult is the result of subscriptions.list.
type ListSubscriptionsResult struct {
	Subscriptions []SubscriptionInfo `json:"subscriptions"`
}

// SubscriptionInfo is one subscription; ScopeType and ScopeValue are empty
// unless it is a scope subscription.
type SubscriptionInfo struct {
	ID          int64  `json:"id"`
	ScopeType   string `json:"scope_type"`
	ScopeValue  string `json:"scope_value"`
	MentionRole string `json:"mention_role"`
	All         bool   `json:"all"`
	Receipts    string `json:"receipts,omitempty"`
	CreatedAt   string `json:"created_at"`
}

// Match types of a notification (MatchedSubscription.MatchType).
const (
	MatchScope   = "scope"
	MatchMention = "mention"
	MatchAll     = "all"
)

// MessageNotification is the params of a NotificationMessage push: a
// message that matched one of the connection's subscriptions.
type MessageNotification struct {
	MessageID           string              `json:"message_id"`
	ThreadID            string              `json:"thread_id"`
	Author              NotificationAuthor  `json:"author"`
	Preview             string              `json:"preview"`
	Scopes              []Pair              `json:"scopes"`
	MatchedSubscription MatchedSubscription `json:"matched_subscription"`
	Timestamp           string              `json:"timestamp"`
}

// ReceiptNotification is the params of a NotificationReceipt push: a
// receipt of a message that changed, for the subscription
// SubscriptionID. Change is what happened (ReceiptDelivered or
// ReceiptAcknowledged); Receipt is the recipient's state after it, which
// may say more: a delivery that comes after a reply acknowledged the
// message is pushed with Change "delivered" and State "acknowledged".
type ReceiptNotification struct {
	MessageID      string  `json:"message_id"`
	AuthorID       string  `json:"author_id"`
	AckRequired    bool    `json:"ack_required,omitempty"`
	Change         string  `json:"change"`
	Receipt        Receipt `json:"receipt"`
	SubscriptionID int64   `json:"subscription_id"`
}

// NotificationAuthor is the author of a pushed message, with the role and
// module a subscriber filters on.
type NotificationAuthor struct {
	AgentID string `json:"agent_id"`
	Role    string `json:"role"`
	Module  string `json:"module"`
}

// MatchedSubscription says which of the subscriber's subscriptions a
// pushed message matched, and how (MatchScope, MatchMention or MatchAll).
type MatchedSubscription struct {
	SubscriptionID int64  `json:"subscription_id"`
	MatchType      string `json:"match_type"`
}

// ---- users ----

// RegisterUserParams are the params of user.register (WebSocket only, for
// the owner).
type RegisterUserParams struct {
	Username string `json:"username"`
	Display  string `json:"display,omitempty"`
}

// RegisterUserResult is the result of user.register: the user's identity
// and token (Status "existing" if the user was registered before).
type RegisterUserResult struct {
	UserID      string `json:"user_id"`
	Username    string `json:"username"`
	DisplayName string `json:"display_name"`
	Token       string `json:"token"`
	Status      string `json:"status"` // "registered" or "existing"
}

// IdentifyUserParams are the params of user.identify: none. See
// HealthParams.
type IdentifyUserParams struct{}

// IdentifyUserResult is the result of user.identify: the person at this
// repository, from git config user.name and user.email, with Username
// derived from the name.
type IdentifyUserResult struct {
	Username string `json:"username"`
	Email    string `json:"email"`
	Display  string `json:"display"`
}

// ---- groups ----

// CreateGroupParams are the params of group.create.
type CreateGroupParams struct {
	Name        string `json:"name" jsonschema:"group name (a-z, 0-9, _), e.g. reviewers"`
	Description string `json:"description,omitempty" jsonschema:"what the group is for"`
}

// CreateGroupResult is the result of group.create.
type CreateGroupResult struct {
	Name      string `json:"name"`
	CreatedAt string `json:"created_at"`
}

// DeleteGroupParams are the params of group.delete.
type DeleteGroupParams struct {
	Name string `json:"name" jsonschema:"group to delete (not everyone)"`
}

// DeleteGroupResult is the result of group.delete.
type DeleteGroupResult struct {
	Name    string `json:"name"`
	Deleted bool   `json:"deleted"`
}

// Group member types (GroupMember.Type, GroupMembership.MemberType).
const (
	MemberAgent = "agent"
	MemberRole  = "role"
)

// GroupMembership is one member of one group: the params of
// group.member.add and group.member.remove, and their result. MemberType
// is MemberAgent or MemberRole (every agent with that role).
type GroupMembership struct {
	Group      string `json:"group" jsonschema:"group name"`
	MemberType string `json:"member_type" jsonschema:"agent or role"`
	MemberID   string `json:"member_id" jsonschema:"agent name or role name"`
}

// ListGroupsParams are the params of group.list: none. See HealthParams.
type ListGroupsParams struct{}

// ListGroupsResult is the result of group.list.
type ListGroupsResult struct {
	Groups []GroupInfo `json:"groups"`
}

// GroupInfo is one group in group.list.
type GroupInfo struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	CreatedAt   string `json:"created_at"`
	CreatedBy   string `json:"created_by"`
	MemberCount int    `json:"member_count" jsonschema:"direct members"`
}

// GroupMember is one member of a group: Type MemberAgent with an agent ID,
// or MemberRole with a role.
type GroupMember struct {
	Type string `json:"type" jsonschema:"agent or role"`
	ID   string `json:"id" jsonschema:"agent name or role name"`
}

// GroupInfoParams are the params of group.info.
type GroupInfoParams struct {
	Name string `json:"name"`
}

// GroupInfoResult is the result of group.info: the group and its direct
// members.
type GroupInfoResult struct {
	Name        string        `json:"name"`
	Description string        `json:"description"`
	CreatedAt   string        `json:"created_at"`
	CreatedBy   string        `json:"created_by"`
	Members     []GroupMember `json:"members"`
}

// GroupMembersParams are the params of group.members; Expand also
// resolves the members to the agent IDs they reach now.
type GroupMembersParams struct {
	Name   string `json:"name"`
	Expand bool   `json:"expand,omitempty"`
}

// GroupMembersResult is the result of group.members.
type GroupMembersResult struct {
	Members        []GroupMember `json:"members"`
	ExpandedAgents []string      `json:"expanded_agents,omitempty"`
}

// ---- sync ----

// SyncStatusParams are the params of sync.status: none. See HealthParams.
type SyncStatusParams struct{}

// SyncStatusResult is the result of sync.status: the state of syncing
// the log with the git remote.
type SyncStatusResult struct {
	Running    bool   `json:"running"`
	LastSyncAt string `json:"last_sync_at"`
	LastError  string `json:"last_error"`
	SyncState  string `json:"sync_state"` // "stopped", "idle", "synced" or "error"
	// IntervalMs is how often a git round runs without new events, and
	// NextSyncAt when the next one is due (RFC 3339); both extend the spec.
	IntervalMs int64  `json:"interval_ms,omitempty"`
	NextSyncAt string `json:"next_sync_at,omitempty"`
	// NATS is the live transport's state when the daemon has one (an
	// extension of the spec); with NATS alone, the fields above are its.
	NATS *SyncNATS `json:"nats,omitempty"`
	// Refused counts the remote's events that sync kept out of the log
	// (quarantined, never applied); Refusals says why, by remote file and
	// reason, the most recent first. Both extend the spec.
	Refused  int           `json:"refused"`
	Refusals []SyncRefusal `json:"refusals"`
	// Waiting counts the remote's events that wait for their author's
	// key (its registration has not arrived): kept, neither imported nor
	// refused, and judged again when keys arrive. An extension.
	Waiting int `json:"waiting"`
	// Keyring is the team's thrum-keys as sync reads it (nil without
	// one): an extension of the spec.
	Keyring *KeyringStatus `json:"keyring,omitempty"`
}

// KeyringStatus is what the team's keyring (a thrum-keys file on the
// repository's default branch) holds: whose keys it lists are theirs,
// over the keys first seen.
type KeyringStatus struct {
	Present  bool           `json:"present"`           // the default branch has the file
	Version  string         `json:"version"`           // what was read (a blob or commit ID)
	Entries  int            `json:"entries"`           // keys listed
	Problems []string       `json:"problems"`          // lines skipped, and why
	Changed  *KeyringChange `json:"changed,omitempty"` // its last change while this node ran
	// Overrides names the keys, first seen for an identity the keyring
	// lists, that the keyring does not: this clone refuses what they
	// sign.
	Overrides []string `json:"overrides"`
}

// KeyringChange is a change of the keyring a node saw.
type KeyringChange struct {
	From string `json:"from"` // the version before ("" if there was no file)
	To   string `json:"to"`
	At   string `json:"at"` // when the node saw it
}

// SyncNATS is the state of live delivery through a NATS stream.
type SyncNATS struct {
	Server    string `json:"server"`     // the URL connected to, credentials hidden
	Stream    string `json:"stream"`     // the stream's name
	State     string `json:"state"`      // "connecting", "live", "error" or "stopped"
	LastError string `json:"last_error"` // empty when the last step worked
	MaxAgeMs  int64  `json:"max_age_ms"` // how long the stream keeps an event
	// Published counts messages (runs of events) published since the
	// daemon started; UnpublishedBytes is what of this machine's
	// shards waits to be.
	Published        int   `json:"published"`
	UnpublishedBytes int64 `json:"unpublished_bytes"`
	// Imported counts events taken from the stream since the daemon
	// started; Lag is how many stream messages wait to be read.
	Imported int    `json:"imported"`
	Lag      uint64 `json:"lag"`
	// TooLarge counts events over the server's max_payload (left to
	// git); Gaps, messages that began past the end of their shard here
	// (left to git); Missed, stream messages gone before they were read,
	// with no git remote to bring their events.
	TooLarge int    `json:"too_large"`
	Gaps     int    `json:"gaps"`
	Missed   uint64 `json:"missed"`
}

// SyncRefusal is why sync refused events of one remote file.
type SyncRefusal struct {
	File   string `json:"file"`    // the remote file, relative to the log directory
	Reason string `json:"reason"`  // what was wrong
	Count  int    `json:"count"`   // how many events
	LastAt string `json:"last_at"` // when the latest was refused (RFC 3339)
}

// SyncForceParams are the params of sync.force. Wait (an extension of
// the spec, which has none) makes the call return only once a round that
// started after it has finished, so that the remote's events as of the
// call are in the log and the local ones are pushed.
type SyncForceParams struct {
	Wait bool `json:"wait,omitempty"`
}

// SyncForceResult is the result of sync.force: whether a sync round was
// started, and the state so far.
type SyncForceResult struct {
	Triggered  bool   `json:"triggered"`
	LastSyncAt string `json:"last_sync_at"`
	SyncState  string `json:"sync_state"`
	// LastError is the round's error, with Wait (an extension).
	LastError string `json:"last_error,omitempty"`
}

// KeyStatusParams are key.status's (none).
type KeyStatusParams struct{}

// KeyStatus is the team keys' state on this clone: the key that seals
// ("" while bodies leave in clear), every key held, and the messages
// that wait for a key this clone does not hold.
type KeyStatus struct {
	Sealing string        `json:"sealing"`
	Keys    []TeamKeyInfo `json:"keys"`
	// Waiting counts the messages whose body no held key opens: shown as
	// sealed, neither delivered nor claimable until a key opens them.
	Waiting    int          `json:"waiting"`
	WaitingFor []KeyWaiting `json:"waiting_for"`
	// Machine is this machine's ID, which key.grant on another machine
	// names; Grants are the grants made to it that bring keys it does
	// not hold, for key.accept.
	Machine string     `json:"machine"`
	Grants  []KeyOffer `json:"grants"`
}

// KeyOffer is a grant of team keys to this machine that waits for the
// owner's word (key.accept): the machine that made it, when, and the IDs
// of the keys it brings that are not held here.
type KeyOffer struct {
	From string   `json:"from"`
	At   string   `json:"at"`
	Keys []string `json:"keys"`
}

// TeamKeyInfo is a team key held here: its ID and when it was made.
type TeamKeyInfo struct {
	ID   string `json:"id"`
	Made string `json:"made"`
}

// KeyWaiting counts the messages that wait for one team key.
type KeyWaiting struct {
	Key      string `json:"key"`
	Messages int    `json:"messages"`
}

// KeyNewParams are key.new's: without Rotate, a team key is made only if
// none is held (sealing turned on); with it, always (a rotation: the
// new key seals, the old ones still open).
type KeyNewParams struct {
	Rotate bool `json:"rotate,omitempty"`
}

// KeyNewResult is key.new's: whether a key was made, and the state.
type KeyNewResult struct {
	Made string `json:"made"` // the new key's ID, "" if none was made
	KeyStatus
}

// KeyExportParams are key.export's (none).
type KeyExportParams struct{}

// KeyExportResult holds every team key's secret, oldest first: what
// key.import takes on another clone.
type KeyExportResult struct {
	Keys []TeamSecret `json:"keys"`
}

// TeamSecret is a team key's secret (32 bytes, base64url) and when it was
// made (RFC 3339): the newest seals.
type TeamSecret struct {
	Secret string `json:"secret"`
	Made   string `json:"made"`
}

// KeyImportParams are key.import's: the keys to add.
type KeyImportParams struct {
	Keys []TeamSecret `json:"keys"`
}

// KeyImportResult says which keys were new here, how many messages they
// opened (applied again, and pushed as if they had just arrived), and
// the state.
type KeyImportResult struct {
	Added    []string `json:"added"`
	Reopened int      `json:"reopened"`
	KeyStatus
}

// KeyGrantParams are key.grant's: the machine to give the team keys to,
// by its ID or by an identity registered there.
type KeyGrantParams struct {
	To string `json:"to"`
}

// KeyGrantResult says which machine the keys were wrapped to, and how
// many.
type KeyGrantResult struct {
	To   string `json:"to"`
	Keys int    `json:"keys"`
}

// KeyAcceptParams are key.accept's: the machine whose grant to take
// ("" when grants from one machine wait).
type KeyAcceptParams struct {
	From string `json:"from,omitempty"`
}
