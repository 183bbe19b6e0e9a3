package eventlog

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestCheckFields(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	msg := func(edit func(*MessageCreate)) *Event {
		p := MessageCreate{MessageID: "msg_01J", AgentID: "alice", SessionID: "ses_1", Format: "markdown", Content: "hi", Priority: "normal"}
		edit(&p)
		return &Event{Type: TypeMessageCreate, Payload: p}
	}
	at := func(e *Event, t time.Time) *Event { e.ID, e.Time = NewID(), t; return e }
	tests := []struct {
		name string
		e    *Event
		want string // "" for none, else a part of the error
	}{
		{"a message", msg(func(*MessageCreate) {}), ""},
		{"a user's message as an agent", msg(func(p *MessageCreate) { p.ActingAs = "user:Ann-K" }), ""},
		{"an older agent ID", msg(func(p *MessageCreate) { p.AgentID = "agent:dev:ABC123" }), ""},
		{"a message 23 hours ahead", at(msg(func(*MessageCreate) {}), now.Add(23*time.Hour)), ""},
		{"a message 25 hours ahead", at(msg(func(*MessageCreate) {}), now.Add(25*time.Hour)), "timestamp"},
		{"a priority no enum has", msg(func(p *MessageCreate) { p.Priority = "urgent" }), `priority "urgent" is invalid`},
		{"a 20,000-character thread ID", msg(func(p *MessageCreate) { p.ThreadID = strings.Repeat("x", 20000) }), "thread_id"},
		{"markup in a message ID", msg(func(p *MessageCreate) { p.MessageID = "</system-reminder>" }), "message_id"},
		{"a newline in an author", msg(func(p *MessageCreate) { p.AgentID = "alice\nbob" }), "agent_id"},
		{"an author starting with a hyphen", msg(func(p *MessageCreate) { p.AgentID = "-alice" }), "agent_id"},
		{"a colon in a message ID", msg(func(p *MessageCreate) { p.MessageID = "msg:1" }), "message_id"},
		{"a 65-byte role", &Event{Type: TypeAgentRegister, Payload: AgentRegister{AgentID: "alice", Role: strings.Repeat("r", 65)}}, "role"},
		{"a recipient with a space", msg(func(p *MessageCreate) { p.Recipients = []string{"bob smith"} }), "recipients"},
		{"a bad ack_within", msg(func(p *MessageCreate) { p.AckWithin = "soon" }), "ack_within"},
		{"a read by a user without a session", &Event{Type: TypeMessageRead, Payload: MessageRead{AgentID: "user:ann", SessionID: "user:ann", MessageIDs: []string{"msg_1"}, Via: "hook"}}, ""},
		{"a read with a script as via", &Event{Type: TypeMessageRead, Payload: MessageRead{AgentID: "bob", MessageIDs: []string{"msg_1"}, Via: "<script>"}}, "via"},
		{"an ack with a long note", &Event{Type: TypeMessageAck, Payload: MessageAck{AgentID: "bob", MessageID: "msg_1", Note: strings.Repeat("n", 2000)}}, "note"},
		{"a group", &Event{Type: TypeGroupCreate, Payload: GroupCreate{Name: "backend", CreatedBy: "owner"}}, ""},
		{"a group name with capitals", &Event{Type: TypeGroupCreate, Payload: GroupCreate{Name: "Backend", CreatedBy: "owner"}}, "name"},
		{"a member type no enum has", &Event{Type: TypeGroupMemberAdd, Payload: GroupMember{Group: "backend", MemberType: "team", MemberID: "bob", AgentID: "owner"}}, "member_type"},
		{"an application event", &Event{Type: "app.note", Payload: map[string]string{"agent_id": "alice"}}, ""},
		{"an application event by no valid ID", &Event{Type: "app.note", Payload: map[string]string{"agent_id": "<b>"}}, "agent_id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckFields(tt.e, now)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("CheckFields: %v, want none", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("CheckFields: %v, want an error about %s", err, tt.want)
			}
		})
	}
	// A line decodes to the same answer as the event appended.
	e := at(msg(func(p *MessageCreate) { p.Priority = "urgent" }), now)
	var buf bytes.Buffer
	if err := e.encode(&buf, e.Payload); err != nil {
		t.Fatal(err)
	}
	d, err := DecodeLine(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckFields(d, now); err == nil || !strings.Contains(err.Error(), "priority") {
		t.Errorf("CheckFields of the line: %v, want the priority refused", err)
	}
}
