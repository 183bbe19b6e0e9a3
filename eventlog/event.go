package eventlog

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// TimeFormat is the timestamp format of every event and of every time
// thrum stores: RFC 3339 in UTC with a fixed nine-digit fraction, so that
// timestamps sort as strings.
const TimeFormat = "2006-01-02T15:04:05.000000000Z"

// FormatTime renders t in TimeFormat.
func FormatTime(t time.Time) string { return t.UTC().Format(TimeFormat) }

// ParseTime parses any RFC 3339 timestamp, including TimeFormat.
func ParseTime(s string) (time.Time, error) { return time.Parse(time.RFC3339Nano, s) }

// Event is one immutable change. On the wire it is one JSON line:
//
//	{"event_id":"01J…","type":"message.create","timestamp":"…",<payload fields>}
//
// To append, set Type, Shard and Payload; Append fills ID and Time. The
// events that Scan reads and that OnCommit receives carry Raw (the whole
// line) instead of Payload; for the known types the log has decoded Raw
// once into the type's payload struct, which PayloadAs returns.
type Event struct {
	ID    string    // ULID; assigned by Append when empty
	Type  string    // e.g. TypeMessageCreate
	Time  time.Time // assigned by Append when zero
	Shard string    // "" for events.jsonl, else the agent whose messages/<Shard>.jsonl holds it

	Payload any    // appended: marshalled as the payload fields (a struct or pointer to one)
	Raw     []byte // committed or scanned: the line without its newline

	// Sign, if set, signs the event as Append writes it: the committer
	// encodes the line once, calls Sign with it and ends the line with
	// the signature it returns (see ParseSig). An error fails the
	// event's Append call.
	Sign func(unsigned []byte) (Sig, error)

	// Offset is the byte offset just past this event's line in its shard
	// file, set by Append and Scan: a projection records it as its
	// checkpoint.
	Offset int64

	imported bool // Raw is written as is (Import)
	decoded  any  // the payload struct decoded from Raw once (decodePayload), or nil
}

// Decode unmarshals the event's payload fields into v. Events appended
// in this process decode from the very line written to the log, so a
// projection applies the same bytes live as it does on replay.
func (e *Event) Decode(v any) error {
	if e.Raw == nil {
		b, err := json.Marshal(e.Payload)
		if err != nil {
			return err
		}
		return json.Unmarshal(b, v)
	}
	return json.Unmarshal(e.Raw, v)
}

// decodePayload decodes Raw once, for the known types, for PayloadAs,
// opening its sealed fields with keys (if any). A payload that does not
// decode is left for PayloadAs to report.
func (e *Event) decodePayload(keys TeamKeys) {
	if e.decoded != nil || e.Raw == nil {
		return
	}
	if dec := decoders[e.Type]; dec != nil {
		if p, err := dec(e.Raw); err == nil {
			if keys != nil && Sealable(e.Type) {
				p = openPayload(e, p, keys)
			}
			e.decoded = p
		}
	}
}

// Open opens the event's sealed fields with keys, as the log does when it
// decodes a line with the keys it holds, for an event decoded before a
// key that opens it was held. It reports whether the payload is readable
// now: false while a field stays sealed.
func (e *Event) Open(keys TeamKeys) bool {
	e.decodePayload(nil)
	if Sealable(e.Type) && e.decoded != nil {
		e.decoded = openPayload(e, e.decoded, keys)
	}
	switch p := e.decoded.(type) {
	case MessageCreate:
		return p.Sealed == nil
	case MessageEdit:
		return p.Sealed == nil
	}
	return true
}

// PayloadAs returns the event's payload as T, its type's payload struct:
// the value decoded once from the line when the log committed or scanned
// the event, the Payload of one not appended yet, or else decoded now
// (reporting the error of a payload that does not decode).
func PayloadAs[T any](e *Event) (T, error) {
	if p, ok := e.decoded.(T); ok {
		return p, nil
	}
	if p, ok := e.Payload.(T); ok && e.Raw == nil {
		return p, nil // appended in this process, not written yet
	}
	var p T
	err := e.Decode(&p)
	return p, err
}

// Imported reports whether the event came from another log through
// Import (a sync), rather than from this process.
func (e *Event) Imported() bool { return e.imported }

// Timestamp is the event's time in TimeFormat.
func (e *Event) Timestamp() string { return FormatTime(e.Time) }

// MaxLineBytes bounds one event line. Larger lines are refused by Append
// and reported as corruption by Scan.
const MaxLineBytes = 4 << 20

// ErrTooLarge is returned by Append for an event whose line would exceed
// MaxLineBytes.
var ErrTooLarge = errors.New("event too large")

// encode renders the event as one line with payload, newline included.
func (e *Event) encode(buf *bytes.Buffer, payload any) error {
	if y := e.Time.UTC().Year(); y < 1 || y > 9999 {
		return fmt.Errorf("encode %s: time %v is outside years 1-9999", e.Type, e.Time)
	}
	start := buf.Len()
	buf.WriteString(`{"event_id":`)
	writeJSONString(buf, e.ID)
	buf.WriteString(`,"type":`)
	writeJSONString(buf, e.Type)
	buf.WriteString(`,"timestamp":"`)
	buf.WriteString(e.Timestamp())
	buf.WriteByte('"')
	if payload != nil {
		p, err := json.Marshal(payload)
		if err != nil {
			buf.Truncate(start)
			return fmt.Errorf("encode %s payload: %w", e.Type, err)
		}
		if len(p) < 2 || p[0] != '{' || p[len(p)-1] != '}' {
			buf.Truncate(start)
			return fmt.Errorf("encode %s payload: not a JSON object", e.Type)
		}
		if len(p) > 2 {
			buf.WriteByte(',')
			buf.Write(p[1 : len(p)-1])
		}
	}
	buf.WriteString("}\n")
	if buf.Len()-start > MaxLineBytes {
		buf.Truncate(start)
		return fmt.Errorf("%w: %s event is over %d bytes", ErrTooLarge, e.Type, MaxLineBytes)
	}
	return nil
}

func writeJSONString(buf *bytes.Buffer, s string) {
	b, _ := json.Marshal(s) // a string always marshals
	buf.Write(b)
}

// envelope is the part of a line every event has.
type envelope struct {
	EventID   string `json:"event_id"`
	Type      string `json:"type"`
	Timestamp string `json:"timestamp"`
}

// DecodeLine parses one log line (without its newline) into an Event with
// Raw set. It checks the envelope: a non-empty event_id and type and a valid
// timestamp. It never panics on any input.
func DecodeLine(line []byte) (*Event, error) {
	env, err := parseEnvelope(line)
	if err != nil {
		return nil, err
	}
	if env.EventID == "" {
		return nil, errors.New("event has no event_id")
	}
	if env.Type == "" {
		return nil, errors.New("event has no type")
	}
	t, err := ParseTime(env.Timestamp)
	if err != nil {
		return nil, fmt.Errorf("event %s has a bad timestamp %q", env.EventID, env.Timestamp)
	}
	return &Event{ID: env.EventID, Type: env.Type, Time: t, Raw: line}, nil
}

// parseEnvelope reads the envelope from the fixed prefix that encode writes,
// and falls back to a full JSON decode for lines written any other way.
// The fast path still validates the whole line as JSON.
func parseEnvelope(line []byte) (envelope, error) {
	var env envelope
	if !json.Valid(line) {
		return env, errors.New("line is not valid JSON")
	}
	if line[0] != '{' {
		return env, errors.New("line is not a JSON object")
	}
	if id, rest, ok := cutString(line, `{"event_id":"`); ok {
		if typ, rest, ok := cutString(rest, `,"type":"`); ok {
			if ts, _, ok := cutString(rest, `,"timestamp":"`); ok {
				return envelope{EventID: id, Type: typ, Timestamp: ts}, nil
			}
		}
	}
	if err := json.Unmarshal(line, &env); err != nil {
		return env, fmt.Errorf("envelope: %w", err)
	}
	return env, nil
}

// cutString expects b to start with prefix followed by a JSON string body
// with no escapes, and returns that string and what follows its closing
// quote.
func cutString(b []byte, prefix string) (string, []byte, bool) {
	if !bytes.HasPrefix(b, []byte(prefix)) {
		return "", nil, false
	}
	b = b[len(prefix):]
	i := bytes.IndexByte(b, '"')
	if i < 0 || bytes.IndexByte(b[:i], '\\') >= 0 {
		return "", nil, false
	}
	return string(b[:i]), b[i+1:], true
}
