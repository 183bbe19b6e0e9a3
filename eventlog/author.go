package eventlog

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Authorship. Every event says who did it: its author (see Author). An
// agent's message events (message.create, .edit, .delete, .read, .ack) live in
// that agent's shard, messages/<agent>.jsonl, which only the agent's own
// machine appends to; everything else (agent, session, thread and group
// lifecycle, application events) lives in events.jsonl, which every
// machine appends to; the local shard never leaves its machine.
// CheckShard holds a peer's event to these rules.

// AgentShard returns the shard of an agent's message events.
func AgentShard(agentID string) string { return strings.ReplaceAll(agentID, ":", "_") }

// messageTypes are the types that live in their author's shard.
var messageTypes = map[string]bool{
	TypeMessageCreate: true, TypeMessageEdit: true, TypeMessageDelete: true, TypeMessageRead: true, TypeMessageAck: true,
}

// actors are the fields in which an event names who acted.
type actors struct {
	AgentID   string `json:"agent_id"`
	CreatedBy string `json:"created_by"`
	ActingAs  string `json:"acting_as"`
}

func (e *Event) actors() actors {
	var a actors
	if e.Raw != nil {
		_ = json.Unmarshal(e.Raw, &a) // a line that does not decode names no one
	} else if e.Payload != nil {
		_ = e.Decode(&a)
	}
	return a
}

// Author returns the identity an event says did it: created_by for
// thread.create and group.create, agent_id for every other type (for an
// unknown type, its agent_id field if it has one). "" if it names none.
func Author(e *Event) string {
	a := e.actors()
	if e.Type == TypeThreadCreate || e.Type == TypeGroupCreate {
		return a.CreatedBy
	}
	return a.AgentID
}

// Claims returns every identity an event says acted: its Author and, for
// a message a user sent as an agent, that user.
func Claims(e *Event) []string {
	a := e.actors()
	var out []string
	if author := Author(e); author != "" {
		out = append(out, author)
	}
	if a.ActingAs != "" {
		out = append(out, a.ActingAs)
	}
	return out
}

var errLocalShard = errors.New("the local shard belongs to this machine: no event enters it from another")

// CheckShard reports whether an event that another machine wrote may
// enter shard, and if not, why: nothing enters the local shard, no
// credential is taken from another machine (it works only where it was
// issued), and the event must be where CheckPlace says it belongs.
//
// Sync proves only where a line was found, not who wrote it: anyone who
// can push to the remote can write a line into any shard there, so a
// line that passes says what its author's machine would say, and nothing
// more.
func CheckShard(shard string, e *Event) error {
	switch {
	case shard == LocalShard:
		return errLocalShard
	case e.Type == TypeCredentialAdd:
		return fmt.Errorf("a %s in %s: credentials are local to the machine that issued them", e.Type, ShardPath(shard))
	case e.Type == TypeMachine:
		return fmt.Errorf("a %s in %s: a machine's ID is its own, never synced", e.Type, ShardPath(shard))
	case e.Type == TypeKeyTrust:
		return fmt.Errorf("a %s in %s: the owner's trust in a key is its own clone's, never synced", e.Type, ShardPath(shard))
	}
	return CheckPlace(shard, e)
}

// CheckPlace reports whether an event is where the log keeps events of
// its type and author, and if not, why:
//
//   - An agent's message events belong in that agent's shard, and an
//     agent's shard holds only its own events: message events of a known
//     type, or events of a type this version does not know whose
//     agent_id is the agent.
//   - events.jsonl holds no message event.
//   - Credentials, the machine's ID and the owner's trust in keys belong in the local shard, which
//     holds only what this machine wrote.
func CheckPlace(shard string, e *Event) error {
	file := ShardPath(shard)
	author := Author(e)
	switch {
	case shard == LocalShard:
		return nil
	case e.Type == TypeCredentialAdd:
		return fmt.Errorf("a %s in %s: credentials belong in the local shard, %s", e.Type, file, LocalFile)
	case e.Type == TypeMachine:
		return fmt.Errorf("a %s in %s: a machine's ID belongs in its local shard, %s", e.Type, file, LocalFile)
	case e.Type == TypeKeyTrust:
		return fmt.Errorf("a %s in %s: the owner's trust belongs in the local shard, %s", e.Type, file, LocalFile)
	case shard == "":
		if messageTypes[e.Type] {
			return fmt.Errorf("a %s by %q in %s: message events belong in their author's shard, %s", e.Type, author, file, ShardPath(AgentShard(author)))
		}
		return nil
	}
	if _, known := decoders[e.Type]; known && !messageTypes[e.Type] {
		return fmt.Errorf("a %s by %q in %s: only message events belong in an agent's shard", e.Type, author, file)
	}
	if author == "" || AgentShard(author) != shard {
		return fmt.Errorf("a %s by %q in %s: an agent's shard holds only its own events", e.Type, author, file)
	}
	return nil
}
