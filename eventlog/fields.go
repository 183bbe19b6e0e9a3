package eventlog

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// Field rules. CheckFields holds an event's fields to the log's grammar,
// and runs twice on every path into the log: at admission, for each line
// another machine wrote, and at the local API (thrum's Node checks what
// it appends), so that a local sender cannot write what another
// machine's sync would refuse. The projection does not run it: events an
// older thrum admitted stay applied as they stand, and doctor lists
// those that break it.

// Limits of CheckFields.
const (
	// MaxFuture is how far ahead of the checking machine's clock an
	// event may be dated: clocks of machines differ, so a message from
	// one that runs ahead is taken, up to this.
	MaxFuture = 24 * time.Hour
	// MaxIDLen bounds an identity (agent, user) ID.
	MaxIDLen = 128
	// MaxRefLen bounds the ID of a message, thread or event, and a
	// group, role or module name. A session's ID is held to MaxIDLen
	// (a user's reads without a session name the user).
	MaxRefLen = 64
	// MaxPairs and MaxPairLen bound the scopes, refs and tags of an
	// event, as the API does.
	MaxPairs   = 100
	MaxPairLen = 1024
	// MaxTextLen bounds the short free texts: a group's description, an
	// acknowledgement's note, a reason, a display name.
	MaxTextLen = 1024
	// MaxListLen bounds the message IDs of a read and the recipients of
	// a message.
	MaxListLen = 10000
	// MaxGrantLen bounds a key grant's wrapped keys, encoded: some
	// hundreds of rotations.
	MaxGrantLen = 64 << 10
)

// Priorities are the priorities a message may have, lowest first.
var Priorities = []string{"low", "normal", "high", "critical"}

// Vias are the delivery paths a message.read may name ("" is a read
// written before receipts).
var Vias = []string{"wait_for_message", "check_messages", "channel", "hook", "stream", "mark_read", "reply", "ack"}

// FieldError is a field that breaks the log's rules.
type FieldError struct {
	Field string // the payload's JSON name ("message_id"), or "timestamp"
	Value string // as found, cut to 80 bytes
	Rule  string // what it must be
}

// Error says which field is wrong and what it must be.
func (e *FieldError) Error() string {
	return fmt.Sprintf("%s %q is invalid: %s", e.Field, e.Value, e.Rule)
}

func fieldErr(field, value, rule string) error {
	if len(value) > 80 {
		value = value[:80] + "…"
	}
	return &FieldError{Field: field, Value: value, Rule: rule}
}

// Grammars, by what they name.
const (
	ruleID   = "use 1 to 128 of A-Z, a-z, 0-9, _, - and :, starting with a letter, a digit or _"
	ruleRef  = "use 1 to 64 of A-Z, a-z, 0-9, _ and -"
	ruleName = "use 1 to 64 of a-z, 0-9 and _"
)

// identityID reports whether s is an agent or user ID as the log keeps
// one: a name, user:<name>, or an older agent:<role>:<hash>.
func identityID(s string) bool {
	return token(s, MaxIDLen, func(c byte) bool { return alnum(c) || c == '_' || c == '-' || c == ':' }) && s[0] != '-' && s[0] != ':'
}

// refID reports whether s is the ID of a message, session, thread or
// event.
func refID(s string) bool {
	return token(s, MaxRefLen, func(c byte) bool { return alnum(c) || c == '_' || c == '-' })
}

// name reports whether s is a group, role or module name.
func name(s string) bool {
	return token(s, MaxRefLen, func(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' })
}

// token reports whether s has 1 to max bytes, each one ok allows.
func token(s string, max int, ok func(byte) bool) bool {
	if s == "" || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !ok(s[i]) {
			return false
		}
	}
	return true
}

func alnum(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' }

// fieldCheck accumulates the first broken rule of an event.
type fieldCheck struct{ err error }

func (c *fieldCheck) rule(ok bool, field, value, rule string) {
	if c.err == nil && !ok {
		c.err = fieldErr(field, value, rule)
	}
}

func (c *fieldCheck) id(field, v string)  { c.rule(identityID(v), field, v, ruleID) }
func (c *fieldCheck) ref(field, v string) { c.rule(refID(v), field, v, ruleRef) }

// message holds a reference to a message (what a read, an
// acknowledgement, an edit or a delete acts on) to a length alone: the
// message may be one an older thrum admitted with an ID the grammar now
// refuses, and an agent must still be able to read it.
func (c *fieldCheck) message(field, v string) {
	c.rule(v != "" && len(v) <= MaxIDLen, field, v, fmt.Sprintf("1 to %d bytes", MaxIDLen))
}

// optional checks v with check unless it is empty.
func (c *fieldCheck) optional(check func(string, string), field, v string) {
	if v != "" {
		check(field, v)
	}
}

func (c *fieldCheck) name(field, v string) { c.rule(name(v), field, v, ruleName) }

func (c *fieldCheck) key(field, v string) {
	_, err := DecodeKey(v)
	c.rule(err == nil, field, v, "an Ed25519 public key: 43 characters of base64url")
}

func (c *fieldCheck) kem(field, v string) {
	_, err := DecodeKEM(v)
	c.rule(err == nil, field, v, "an X25519 public key: 43 characters of base64url")
}

func (c *fieldCheck) text(field, v string) {
	c.rule(len(v) <= MaxTextLen, field, v, fmt.Sprintf("at most %d bytes", MaxTextLen))
}

func (c *fieldCheck) pairs(field string, ps []Pair) {
	c.rule(len(ps) <= MaxPairs, field, fmt.Sprintf("%d entries", len(ps)), fmt.Sprintf("at most %d entries", MaxPairs))
	for _, p := range ps {
		c.rule(p.Type != "" && len(p.Type) <= MaxPairLen, field+".type", p.Type, fmt.Sprintf("1 to %d bytes", MaxPairLen))
		c.rule(len(p.Value) <= MaxPairLen, field+".value", p.Value, fmt.Sprintf("at most %d bytes", MaxPairLen))
	}
}

func (c *fieldCheck) list(field string, n int) {
	c.rule(n <= MaxListLen, field, fmt.Sprintf("%d entries", n), fmt.Sprintf("at most %d entries", MaxListLen))
}

// CheckFields reports the first field of an event that breaks the log's
// rules (a *FieldError), nil if none: IDs and names by their grammar and
// length, priority and via by their enums, lists and texts by their
// bounds, and, for an event that has its time (one another machine
// wrote), a time at most MaxFuture ahead of now. A reference to a
// message (a read's, an acknowledgement's) is held to a length only (see
// fieldCheck.message). Whether a receipt is
// dated after its message is the node's to check: the log does not know
// the message. A payload that does not decode is an error; an event type
// this version does not know has only the IDs of who acted checked.
func CheckFields(e *Event, now time.Time) error {
	c := &fieldCheck{}
	if !e.Time.IsZero() && e.Time.After(now.Add(MaxFuture)) {
		return fieldErr("timestamp", FormatTime(e.Time), fmt.Sprintf("dated more than %v ahead of this machine's clock (%s)", MaxFuture, FormatTime(now)))
	}
	if e.ID != "" {
		c.ref("event_id", e.ID)
	}
	p, err := typedPayload(e)
	if err != nil {
		return fmt.Errorf("the %s payload does not decode: %w", e.Type, err)
	}
	switch p := p.(type) {
	case AgentRegister:
		c.id("agent_id", p.AgentID)
		c.rule(p.Kind == "" || p.Kind == "agent" || p.Kind == "user", "kind", p.Kind, "use agent or user")
		c.optional(c.id, "name", p.Name)
		c.optional(c.name, "role", p.Role)
		c.optional(c.name, "module", p.Module)
		c.text("display", p.Display)
		c.optional(c.ref, "repo_id", p.RepoID)
		c.optional(c.key, "key", p.Key)
		c.optional(c.ref, "machine", p.Machine)
		c.optional(c.kem, "kem", p.KEM)
	case AgentSeal:
		c.id("agent_id", p.AgentID)
		c.list("hashes", len(p.Hashes))
		for _, h := range p.Hashes {
			c.rule(len(h) == b64.EncodedLen(16) && refID(h), "hashes", h, "use LegacyHash: 22 characters of base64url")
		}
	case KeyTrust:
		c.id("agent_id", p.AgentID)
		c.key("key", p.Key)
	case KeyGrant:
		c.ref("machine", p.Machine)
		c.ref("to", p.To)
		c.kem("kem", p.KEM)
		_, err := b64.DecodeString(p.Wrapped)
		c.rule(err == nil && len(p.Wrapped) > 0 && len(p.Wrapped) <= MaxGrantLen, "wrapped", p.Wrapped, fmt.Sprintf("base64url, at most %d characters", MaxGrantLen))
	case Credential:
		c.id("agent_id", p.AgentID)
	case AgentCleanup:
		c.id("agent_id", p.AgentID)
		c.text("reason", p.Reason)
	case SessionStart:
		c.id("session_id", p.SessionID)
		c.id("agent_id", p.AgentID)
		c.pairs("scopes", p.Scopes)
		c.pairs("refs", p.Refs)
	case SessionEnd:
		c.id("session_id", p.SessionID)
		c.id("agent_id", p.AgentID)
		c.text("reason", p.Reason)
	case SessionHeartbeat:
		c.id("session_id", p.SessionID)
		c.id("agent_id", p.AgentID)
		c.pairs("add_scopes", p.AddScopes)
		c.pairs("remove_scopes", p.RemoveScopes)
		c.pairs("add_refs", p.AddRefs)
		c.pairs("remove_refs", p.RemoveRefs)
	case SessionIntent:
		c.id("session_id", p.SessionID)
		c.id("agent_id", p.AgentID)
	case SessionTask:
		c.id("session_id", p.SessionID)
		c.id("agent_id", p.AgentID)
	case SessionContext:
		c.id("session_id", p.SessionID)
		c.id("agent_id", p.AgentID)
	case MessageCreate:
		c.ref("message_id", p.MessageID)
		c.id("agent_id", p.AgentID)
		c.optional(c.id, "session_id", p.SessionID)
		c.optional(c.ref, "thread_id", p.ThreadID)
		c.rule(slices.Contains(Priorities, p.Priority), "priority", p.Priority, "use low, normal, high or critical")
		c.pairs("scopes", p.Scopes)
		c.pairs("refs", p.Refs)
		c.rule(len(p.Tags) <= MaxPairs, "tags", fmt.Sprintf("%d tags", len(p.Tags)), fmt.Sprintf("at most %d tags", MaxPairs))
		for _, t := range p.Tags {
			c.rule(len(t) <= MaxPairLen, "tags", t, fmt.Sprintf("at most %d bytes each", MaxPairLen))
		}
		c.optional(c.id, "acting_as", p.ActingAs)
		c.rule(len(p.IdempotencyKey) <= MaxPairLen, "idempotency_key", p.IdempotencyKey, fmt.Sprintf("at most %d bytes", MaxPairLen))
		c.list("recipients", len(p.Recipients))
		for _, r := range p.Recipients {
			c.id("recipients", r)
		}
		if p.AckWithin != "" {
			d, err := time.ParseDuration(p.AckWithin)
			c.rule(err == nil && d > 0, "ack_within", p.AckWithin, "use a positive duration such as 30m")
		}
		c.sealed(p.Sealed, p.Content == "" && len(p.Structured) == 0)
	case MessageEdit:
		c.message("message_id", p.MessageID)
		c.id("agent_id", p.AgentID)
		c.optional(c.id, "session_id", p.SessionID)
		c.sealed(p.Sealed, p.Content == nil && len(p.Structured) == 0)
	case MessageDelete:
		c.message("message_id", p.MessageID)
		c.id("agent_id", p.AgentID)
		c.text("reason", p.Reason)
	case MessageRead:
		c.id("agent_id", p.AgentID)
		c.optional(c.id, "session_id", p.SessionID)
		c.list("message_ids", len(p.MessageIDs))
		for _, id := range p.MessageIDs {
			c.message("message_ids", id)
		}
		c.rule(p.Via == "" || slices.Contains(Vias, p.Via), "via", p.Via, "use one of the delivery paths: wait_for_message, check_messages, channel, hook, stream, mark_read, reply or ack")
	case MessageAck:
		c.id("agent_id", p.AgentID)
		c.optional(c.id, "session_id", p.SessionID)
		c.message("message_id", p.MessageID)
		c.text("note", p.Note)
	case ThreadCreate:
		c.ref("thread_id", p.ThreadID)
		c.id("created_by", p.CreatedBy)
		c.text("title", p.Title)
		c.pairs("scopes", p.Scopes)
	case GroupCreate:
		c.name("name", p.Name)
		c.id("created_by", p.CreatedBy)
		c.text("description", p.Description)
		c.optional(c.ref, "machine", p.Machine)
	case GroupDelete:
		c.name("name", p.Name)
		c.id("agent_id", p.AgentID)
		c.optional(c.ref, "machine", p.Machine)
	case GroupMember:
		c.name("group", p.Group)
		c.rule(p.MemberType == "agent" || p.MemberType == "role", "member_type", p.MemberType, "use agent or role")
		c.id("member_id", p.MemberID)
		c.id("agent_id", p.AgentID)
		c.optional(c.ref, "machine", p.Machine)
	case Machine:
		c.ref("machine_id", p.MachineID)
	default: // a type this version does not know: who acted, if it says
		a := e.actors()
		c.optional(c.id, "agent_id", a.AgentID)
		c.optional(c.id, "created_by", a.CreatedBy)
		c.optional(c.id, "acting_as", a.ActingAs)
	}
	return c.err
}

// typedPayload returns the payload struct of an event of a known type (nil
// for another type): the one Append was given, or the one decoded from
// Raw.
func typedPayload(e *Event) (any, error) {
	dec := decoders[e.Type]
	if dec == nil {
		return nil, nil
	}
	if e.Raw == nil {
		switch p := e.Payload.(type) {
		case AgentRegister, Credential, AgentCleanup, SessionStart, SessionEnd, SessionHeartbeat, SessionIntent, SessionTask,
			SessionContext, MessageCreate, MessageEdit, MessageDelete, MessageRead, MessageAck, ThreadCreate, GroupCreate,
			GroupDelete, GroupMember, Machine, AgentSeal, KeyTrust, KeyGrant:
			return p, nil
		}
		b, err := json.Marshal(e.Payload)
		if err != nil {
			return nil, err
		}
		return dec(b)
	}
	if e.decoded != nil {
		return e.decoded, nil
	}
	return dec(e.Raw)
}
