package thrum

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"

	"github.com/thrumhq/thrum/eventlog"
)

// AppEventPrefix begins the type of every application event. thrum
// defines no event type under it, so an application's events never
// collide with the node's own, now or later.
const AppEventPrefix = "app."

// maxAppEventType bounds an application event's type.
const maxAppEventType = 128

// AppendEvent appends an application's own event to the node's log: an
// audit record, a workflow step, anything a program embedding the node
// wants kept, ordered and synced with the messages. typ must begin with
// AppEventPrefix (for instance "app.review.audit"); payload must marshal
// to a JSON object, whose fields become the event's, and may not use the
// envelope's fields (event_id, type, timestamp, sig). The event goes to the
// log's shared shard (events.jsonl).
//
// Like every write of the node, it returns once the event is durable and
// applied: a Projection given to NewProjector has seen it, so reading a
// read model built from such events right after AppendEvent sees the
// event. thrum's own read models ignore application events. The returned
// event carries the assigned ID and Time. Errors are as for any write
// (ErrInvalidParams for a bad type or payload, ErrUnavailable while the
// node cannot apply, ErrStorageFull).
func (n *Node) AppendEvent(ctx context.Context, typ string, payload any) (*eventlog.Event, error) {
	name := strings.TrimPrefix(typ, AppEventPrefix)
	if name == typ || name == "" || len(typ) > maxAppEventType || strings.ContainsAny(typ, " \t\r\n\"\\") {
		return nil, invalid("an application event's type must be %q followed by a name, at most %d bytes, with no spaces or quotes; got %q",
			AppEventPrefix, maxAppEventType, typ)
	}
	b, err := json.Marshal(payload)
	if err != nil {
		return nil, invalid("event %s: payload: %v", typ, err)
	}
	var fields map[string]json.RawMessage
	if !bytes.HasPrefix(bytes.TrimSpace(b), []byte("{")) || json.Unmarshal(b, &fields) != nil {
		return nil, invalid("event %s: payload must be a JSON object", typ)
	}
	for _, k := range []string{"event_id", "type", "timestamp", "sig"} {
		if _, ok := fields[k]; ok {
			return nil, invalid("event %s: payload field %q is the envelope's", typ, k)
		}
	}
	e := &eventlog.Event{Type: typ, Payload: json.RawMessage(b)}
	if err := n.append(ctx, e); err != nil {
		return nil, err
	}
	return e, nil
}
