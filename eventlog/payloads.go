package eventlog

import "encoding/json"

// Event types. The envelope's "type" names one of these; the payload
// struct beside it lists the fields that type carries.
const (
	TypeAgentRegister    = "agent.register"          // AgentRegister
	TypeAgentUpdate      = "agent.update"            // AgentRegister (the new state)
	TypeAgentCleanup     = "agent.cleanup"           // AgentCleanup
	TypeSessionStart     = "agent.session.start"     // SessionStart
	TypeSessionEnd       = "agent.session.end"       // SessionEnd
	TypeSessionHeartbeat = "agent.session.heartbeat" // SessionHeartbeat
	TypeSessionIntent    = "agent.session.intent"    // SessionIntent
	TypeSessionTask      = "agent.session.task"      // SessionTask
	TypeSessionContext   = "agent.session.context"   // SessionContext
	TypeMessageCreate    = "message.create"          // MessageCreate
	TypeMessageEdit      = "message.edit"            // MessageEdit
	TypeMessageDelete    = "message.delete"          // MessageDelete
	TypeMessageRead      = "message.read"            // MessageRead
	TypeMessageAck       = "message.ack"             // MessageAck
	TypeThreadCreate     = "thread.create"           // ThreadCreate
	TypeGroupCreate      = "group.create"            // GroupCreate
	TypeGroupDelete      = "group.delete"            // GroupDelete
	TypeGroupMemberAdd   = "group.member.add"        // GroupMember
	TypeGroupMemberDel   = "group.member.remove"     // GroupMember
	TypeCredentialAdd    = "credential.add"          // Credential (the local shard only)
	TypeMachine          = "machine.id"              // Machine (the local shard only)
	TypeAgentSeal        = "agent.seal"              // AgentSeal
	TypeKeyTrust         = "key.trust"               // KeyTrust (the local shard only)
	TypeKeyGrant         = "key.grant"               // KeyGrant
)

// Pair is a {type, value} scope or ref, in events as in the RPC
// contract (rpc.Pair is this type).
type Pair struct {
	Type  string `json:"type"`
	Value string `json:"value"`
}

// AgentRegister records an agent (or user) and its current role, module
// and display name. It carries no credential: a log written before
// credentials were local has token_hash and revoke_tokens fields here,
// which are ignored (see Credential).
//
// Key is the identity's public key (EncodeKey), with which it signs its
// events, and Machine the machine that registered it there: the event is
// signed by that machine's key, which binds the two. Both are empty in
// registrations written before events were signed.
type AgentRegister struct {
	AgentID string `json:"agent_id"`
	Kind    string `json:"kind"` // "agent" or "user"
	Name    string `json:"name,omitempty"`
	Role    string `json:"role,omitempty"`
	Module  string `json:"module,omitempty"`
	Display string `json:"display,omitempty"`
	RepoID  string `json:"repo_id,omitempty"`
	Key     string `json:"key,omitempty"`
	Machine string `json:"machine,omitempty"`
	// KEM is the registering machine's X25519 key (EncodeKEM), to which
	// other machines wrap the team keys they grant it (KeyGrant); the
	// machine's signature binds it to the machine. Empty in
	// registrations written before team keys.
	KEM string `json:"kem,omitempty"`
}

// AgentSeal seals an identity's legacy: the unsigned events it wrote
// before it had a key, each named by its LegacyHash. Written, signed by
// the identity's key, right after the registration that brings the key
// (in pieces of at most MaxListLen); once the key is pinned, an unsigned
// event of the identity is taken only if a seal names it.
type AgentSeal struct {
	AgentID string   `json:"agent_id"`
	Hashes  []string `json:"hashes"`
}

// KeyTrust records the owner's word that Key is AgentID's (thrum agent
// trust): a key other than the one first seen for it, which admission
// then takes. It lives in the local shard: trust is each clone's own.
type KeyTrust struct {
	AgentID string `json:"agent_id"`
	Key     string `json:"key"`
}

// KeyGrant gives the team keys to another machine, on the granting
// machine's owner's word: Wrapped is the keys (as keystore's team file
// holds them) sealed with HPKE to the KEM key To published, bound to
// both machines (WrapKeys). Written and signed by Machine, the granting
// machine.
type KeyGrant struct {
	Machine string `json:"machine"`
	To      string `json:"to"`
	KEM     string `json:"kem"`
	Wrapped string `json:"wrapped"`
}

// Credential adds a token that authenticates as an identity on this
// machine (tokens are never stored, only their hashes). It lives in the
// local shard, which never syncs: a credential works only where it was
// issued.
type Credential struct {
	AgentID   string `json:"agent_id"`
	TokenHash string `json:"token_hash"`
	// RevokeTokens drops every earlier token of the identity first: a
	// forced takeover must lock the previous holder out.
	RevokeTokens bool `json:"revoke_tokens,omitempty"`
}

// AgentCleanup removes an agent from the projection (agent.delete and
// agent.cleanup). Its messages stay.
type AgentCleanup struct {
	AgentID string `json:"agent_id"`
	Reason  string `json:"reason,omitempty"`
}

// SessionStart starts a session of an agent, with its scopes and refs.
type SessionStart struct {
	SessionID string `json:"session_id"`
	AgentID   string `json:"agent_id"`
	Scopes    []Pair `json:"scopes,omitempty"`
	Refs      []Pair `json:"refs,omitempty"`
}

// SessionEnd ends a session, saying why.
type SessionEnd struct {
	SessionID string `json:"session_id"`
	AgentID   string `json:"agent_id"`
	Reason    string `json:"reason"`
}

// SessionHeartbeat is a heartbeat that changed a session's scopes or
// refs (heartbeats that change nothing are not logged).
type SessionHeartbeat struct {
	SessionID    string `json:"session_id"`
	AgentID      string `json:"agent_id"`
	AddScopes    []Pair `json:"add_scopes,omitempty"`
	RemoveScopes []Pair `json:"remove_scopes,omitempty"`
	AddRefs      []Pair `json:"add_refs,omitempty"`
	RemoveRefs   []Pair `json:"remove_refs,omitempty"`
}

// SessionIntent sets (or, empty, clears) what a session intends to do.
type SessionIntent struct {
	SessionID string `json:"session_id"`
	AgentID   string `json:"agent_id"`
	Intent    string `json:"intent"`
}

// SessionTask sets (or, empty, clears) the task a session works on.
type SessionTask struct {
	SessionID string `json:"session_id"`
	AgentID   string `json:"agent_id"`
	Task      string `json:"current_task"`
}

// Commit is one commit of a work context.
type Commit struct {
	Hash    string `json:"hash"`
	Subject string `json:"subject"`
}

// SessionContext is the git work context extracted at a heartbeat.
type SessionContext struct {
	SessionID        string   `json:"session_id"`
	AgentID          string   `json:"agent_id"`
	Branch           string   `json:"branch"`
	WorktreePath     string   `json:"worktree_path"`
	UnmergedCommits  []Commit `json:"unmerged_commits"`
	UncommittedFiles []string `json:"uncommitted_files"`
	ChangedFiles     []string `json:"changed_files"`
}

// MessageCreate is a new message. Mentions are refs of type "mention".
type MessageCreate struct {
	MessageID  string          `json:"message_id"`
	AgentID    string          `json:"agent_id"`
	SessionID  string          `json:"session_id"`
	ThreadID   string          `json:"thread_id,omitempty"`
	Format     string          `json:"format"`
	Content    string          `json:"content"`
	Structured json.RawMessage `json:"structured,omitempty"`
	Scopes     []Pair          `json:"scopes,omitempty"`
	Refs       []Pair          `json:"refs,omitempty"`
	Tags       []string        `json:"tags,omitempty"`
	Priority   string          `json:"priority"`
	// ActingAs is the user who sent this message as AgentID; Disclose asks
	// readers to show it.
	ActingAs string `json:"acting_as,omitempty"`
	Disclose bool   `json:"disclose,omitempty"`
	// IdempotencyKey is the sender's key for safe retries: kept in the
	// log so that deduplication survives restarts and rebuilds.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// Recipients are the agents the mentions reached when it was sent
	// (never its author): whose receipts it has.
	Recipients []string `json:"recipients,omitempty"`
	// AckRequired asks each recipient to acknowledge it, within
	// AckWithin (a Go duration, "" for no deadline) if set.
	AckRequired bool   `json:"ack_required,omitempty"`
	AckWithin   string `json:"ack_within,omitempty"`
	// Sealed holds Content and Structured sealed with a team key, which
	// are then empty (seal.go); nil in a clear or opened payload.
	Sealed *Sealed `json:"sealed,omitempty"`
}

// MessageEdit replaces a message's content and/or structured data.
type MessageEdit struct {
	MessageID  string          `json:"message_id"`
	AgentID    string          `json:"agent_id"`
	SessionID  string          `json:"session_id"`
	Content    *string         `json:"content,omitempty"`
	Structured json.RawMessage `json:"structured,omitempty"`
	Sealed     *Sealed         `json:"sealed,omitempty"` // as in MessageCreate
}

// MessageDelete soft-deletes a message: it stays in the log, marked
// deleted in the projection.
type MessageDelete struct {
	MessageID string `json:"message_id"`
	AgentID   string `json:"agent_id"`
	Reason    string `json:"reason,omitempty"`
}

// MessageRead marks messages read by an agent in a session: they are
// delivered to it, by the path Via names ("" in events written before
// receipts).
type MessageRead struct {
	AgentID    string   `json:"agent_id"`
	SessionID  string   `json:"session_id"`
	MessageIDs []string `json:"message_ids"`
	Via        string   `json:"via,omitempty"`
}

// MessageAck is an agent's acknowledgement of a message addressed to it,
// with an optional note. A reply acknowledges too, with no event of its
// own: its message.create is the record.
type MessageAck struct {
	AgentID   string `json:"agent_id"`
	SessionID string `json:"session_id"`
	MessageID string `json:"message_id"`
	Note      string `json:"note,omitempty"`
}

// ThreadCreate opens a thread.
type ThreadCreate struct {
	ThreadID       string `json:"thread_id"`
	Title          string `json:"title"`
	Scopes         []Pair `json:"scopes,omitempty"`
	CreatedBy      string `json:"created_by"`
	IdempotencyKey string `json:"idempotency_key,omitempty"` // as in MessageCreate
}

// GroupCreate creates a group. Machine is the machine that created it
// (see Machine), which alone changes it; "" in events written before
// machines were recorded.
type GroupCreate struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	CreatedBy   string `json:"created_by"`
	Machine     string `json:"machine,omitempty"`
}

// GroupDelete deletes a group and its memberships, on the machine that
// created it (Machine).
type GroupDelete struct {
	Name    string `json:"name"`
	AgentID string `json:"agent_id"`
	Machine string `json:"machine,omitempty"`
}

// GroupMember adds or removes one member (TypeGroupMemberAdd/Del), on
// the machine that created the group (Machine).
type GroupMember struct {
	Group      string `json:"group"`
	MemberType string `json:"member_type"` // "agent" or "role"
	MemberID   string `json:"member_id"`
	AgentID    string `json:"agent_id"` // who changed the membership
	Machine    string `json:"machine,omitempty"`
}

// Machine names the machine a log belongs to, in the local shard: the
// encoded public key of its machine key (MachineID), or in a log from
// before machine keys a random ID, which a key-derived one supersedes.
// A group records the machine that created it, and only events signed
// by that machine's key change it.
type Machine struct {
	MachineID string `json:"machine_id"`
}

// decodeAs decodes raw into a T and returns it as any.
func decodeAs[T any](raw []byte) (any, error) {
	var p T
	err := json.Unmarshal(raw, &p)
	return p, err
}

// decoders maps each event type to the decoder of its payload struct.
var decoders = map[string]func([]byte) (any, error){
	TypeAgentRegister:    decodeAs[AgentRegister],
	TypeAgentUpdate:      decodeAs[AgentRegister],
	TypeAgentCleanup:     decodeAs[AgentCleanup],
	TypeSessionStart:     decodeAs[SessionStart],
	TypeSessionEnd:       decodeAs[SessionEnd],
	TypeSessionHeartbeat: decodeAs[SessionHeartbeat],
	TypeSessionIntent:    decodeAs[SessionIntent],
	TypeSessionTask:      decodeAs[SessionTask],
	TypeSessionContext:   decodeAs[SessionContext],
	TypeMessageCreate:    decodeAs[MessageCreate],
	TypeMessageEdit:      decodeAs[MessageEdit],
	TypeMessageDelete:    decodeAs[MessageDelete],
	TypeMessageRead:      decodeAs[MessageRead],
	TypeMessageAck:       decodeAs[MessageAck],
	TypeThreadCreate:     decodeAs[ThreadCreate],
	TypeGroupCreate:      decodeAs[GroupCreate],
	TypeGroupDelete:      decodeAs[GroupDelete],
	TypeGroupMemberAdd:   decodeAs[GroupMember],
	TypeGroupMemberDel:   decodeAs[GroupMember],
	TypeCredentialAdd:    decodeAs[Credential],
	TypeMachine:          decodeAs[Machine],
	TypeAgentSeal:        decodeAs[AgentSeal],
	TypeKeyTrust:         decodeAs[KeyTrust],
	TypeKeyGrant:         decodeAs[KeyGrant],
}

// MachineSigned returns the machine whose key signs an event of a type
// that the machine writes in its own name: a group's changes (the
// machine that created the group alone changes it) and a registration
// (which binds an identity's key, and the machine's KEM key, to the
// machine), and the team keys it grants. ok is false for every
// other type, which its author's key signs (see Signer). machine is ""
// in such an event written before machines had keys.
func MachineSigned(e *Event) (machine string, ok bool) {
	switch p, _ := typedPayload(e); p := p.(type) {
	case AgentRegister:
		return p.Machine, true
	case GroupCreate:
		return p.Machine, true
	case GroupDelete:
		return p.Machine, true
	case GroupMember:
		return p.Machine, true
	case KeyGrant:
		return p.Machine, true
	}
	return "", false
}

// BringsKeys reports whether an event brings keys or seals (a
// registration, a seal): what another machine's events may wait for.
func BringsKeys(e *Event) bool {
	switch e.Type {
	case TypeAgentRegister, TypeAgentUpdate, TypeAgentSeal:
		return true
	}
	return false
}

// Signer returns the identity whose key signs an event that no machine
// signs in its own name (see MachineSigned): the user a message was
// sent as an agent by, else its author. "" for an event that names no
// one (an application's event), which its machine's key signs.
func Signer(e *Event) string {
	if e.Raw == nil { // being appended: its payload says, with no JSON
		switch p := e.Payload.(type) {
		case MessageCreate:
			if p.ActingAs != "" {
				return p.ActingAs
			}
			return p.AgentID
		case MessageRead:
			return p.AgentID
		case MessageAck:
			return p.AgentID
		case SessionHeartbeat:
			return p.AgentID
		}
	}
	// acting_as means something in a message.create alone: in any
	// other event the projection acts for the author, whose key signs it.
	if a := e.actors(); a.ActingAs != "" && e.Type == TypeMessageCreate {
		return a.ActingAs
	}
	return Author(e)
}
