// Package frame writes a message from one agent into another agent's
// context — a Claude Code channel event, a host hook's context, a
// monitor's stream line — as one <thrum-message> element that names its
// sender and ID, is cut to a size with a pointer to get_message, and
// whose text cannot close the element or forge any markup around it:
// every "<", ">" and "&" is written as an entity, and so is every
// character that Hidden reports, which a terminal or a model could take
// for structure or not see at all. Field escapes the same way the text a
// host shows outside a frame (a stop hook's reason, a channel's meta).
//
// Lengths are counted as hosts count them: in UTF-16 code units (Claude
// Code's limits are JavaScript string lengths), after the host's own
// rewrite where it has one (Options.AngleEntities).
//
// An item with a field longer than MaxField as written cannot be shown:
// Frame and Field return an error for it, and every consumer skips such
// an item and shows the rest, so one bad message never takes the place
// of the others.
//
// Every path that puts a message in a host's context calls Frame, so the
// rules live here once.
package frame

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
)

// Tag is the element's name.
const Tag = "thrum-message"

// DefaultMax is Options.Max when it is 0.
const DefaultMax = 4000

// MaxField is the longest field (an ID, a name, a priority) a frame or a
// host's text shows, in UTF-16 code units as written (escaped). IDs and
// names are far shorter; a longer one is not a field thrum wrote.
const MaxField = 256

// Message is what a frame shows of a message. Every field is text from
// outside (the sender chose the body; IDs and names come from the log),
// so all of them are escaped.
type Message struct {
	ID       string
	From     string
	Priority string
	ThreadID string
	ReplyTo  string
	// Ack says the sender asks for an acknowledgement: the frame says
	// ack="requested".
	Ack bool
	// Sender says how far the sender is known to be who From says
	// (Verified, Unverified or Local); empty writes no attribute.
	Sender string
	Body   string
}

// Values of Message.Sender, the frame's sender attribute, as the node
// says them of a message (rpc.MessageDetail.Sender): Local is an
// identity registered on this machine, whose events sync never brings in;
// Verified a message from another machine signed by a key the clone
// trusts for its author; Unverified one from before its author signed.
const (
	Verified   = "verified"
	Unverified = "unverified"
	Local      = "local"
)

// Options say how to write a frame and how the host counts it. The zero
// value is a multi-line frame of at most DefaultMax body units.
type Options struct {
	// Max bounds the body as written (escaped), in UTF-16 code units. A
	// longer body is cut at a character boundary and followed by a note
	// saying how long it is and that get_message shows all of it. 0
	// means DefaultMax.
	Max int
	// OneLine writes the frame on one line, newlines of the body
	// escaped: for a stream whose reader takes each line as one event.
	OneLine bool
	// AngleEntities says the host writes each "<" and ">" as an entity
	// before it counts (Gemini CLI does): Len counts them so.
	AngleEntities bool
}

// Len is the length of s as the host counts it: UTF-16 code units, after
// the host's rewrite.
func (o Options) Len(s string) int {
	n := 0
	for _, r := range s {
		switch {
		case o.AngleEntities && (r == '<' || r == '>'):
			n += len("&lt;")
		case r >= 0x10000:
			n += 2
		default:
			n++
		}
	}
	return n
}

// Frame writes m as one <thrum-message> element:
//
//	<thrum-message id="msg_…" from="alice" priority="high" thread_id="…" reply_to="…" ack="requested" sender="local">
//	body
//	</thrum-message>
//
// (thread_id, reply_to, ack and sender only when set). A body cut to Options.Max has
// the attribute cut="N", N its full length in characters, and ends with
// the note that CutNote writes. It fails, writing nothing, when a field
// is longer than MaxField as written.
func Frame(m Message, o Options) (string, error) {
	max := o.Max
	if max <= 0 {
		max = DefaultMax
	}
	var b strings.Builder
	b.WriteString("<" + Tag)
	for _, a := range [...]struct {
		name, value string
		always      bool
	}{{"id", m.ID, true}, {"from", m.From, true}, {"priority", m.Priority, true}, {"thread_id", m.ThreadID, false}, {"reply_to", m.ReplyTo, false}} {
		if a.value == "" && !a.always {
			continue
		}
		v, err := Field(a.value)
		if err != nil {
			return "", fmt.Errorf("%s: %w", a.name, err)
		}
		b.WriteString(" " + a.name + `="` + v + `"`)
	}
	if m.Ack {
		b.WriteString(` ack="` + ackRequested + `"`)
	}
	if m.Sender != "" {
		b.WriteString(` sender="` + escapeText(m.Sender, true) + `"`)
	}
	body, total, cut := escapeBody(m.Body, max, o.OneLine)
	if cut {
		b.WriteString(` cut="` + strconv.Itoa(total) + `"`)
	}
	b.WriteString(">")
	sep := "\n"
	if o.OneLine {
		sep = ""
	}
	b.WriteString(sep)
	b.WriteString(body)
	if cut {
		if o.OneLine {
			b.WriteString(" ")
		} else {
			b.WriteString("\n")
		}
		b.WriteString(CutNote(m.ID, total))
	}
	b.WriteString(sep)
	b.WriteString("</" + Tag + ">")
	return b.String(), nil
}

// ackRequested is the ack attribute's value.
const ackRequested = "requested"

// CutNote is the note that ends a cut body: its full length and where to
// read all of it. Frame calls it only with an ID Field accepts.
func CutNote(id string, total int) string {
	return fmt.Sprintf(`[cut: the message has %d characters; get_message with message_id "%s" shows all of it]`, total, escapeText(id, true))
}

// Field escapes s as the frame writes an attribute's value: for a field
// a host shows, in a frame or outside one (a stop hook's reason, a
// channel event's meta). It fails when s, escaped, is longer than
// MaxField UTF-16 code units: the item it belongs to cannot be shown.
func Field(s string) (string, error) {
	e := escapeText(s, true)
	if n := (Options{}).Len(e); n > MaxField {
		return "", fmt.Errorf("frame: a field of %d UTF-16 units (escaped) cannot be shown: at most %d are", n, MaxField)
	}
	return e, nil
}

// Escape writes s with every "<", ">", "&", line break and hidden
// character as an entity, as a one-line frame writes its text, however
// long: for text from another agent shown beside a frame rather than in
// one (a message's structured data in a tool result).
func Escape(s string) string { return escapeText(s, false) }

// escapeBody escapes s and cuts it so that what is written has at most
// max UTF-16 units; it returns the escaped text, the length of s in
// characters, and whether it was cut.
func escapeBody(s string, max int, oneLine bool) (string, int, bool) {
	var b strings.Builder
	written, total, cut := 0, 0, false
	for _, r := range s {
		total++
		if cut {
			continue
		}
		e := escapeRune(r, oneLine, false)
		n := utf16.RuneLen(r) // a string's runes are valid: 1 or 2
		if e != "" {
			n = len(e) // entities are ASCII: one unit a byte
		}
		if written+n > max {
			cut = true
			continue
		}
		written += n
		if e != "" {
			b.WriteString(e)
		} else {
			b.WriteRune(r)
		}
	}
	return b.String(), total, cut
}

// escapeText escapes an attribute value (attr true: quotes and every
// line break too) or a note.
func escapeText(s string, attr bool) string {
	var b strings.Builder
	for _, r := range s {
		if e := escapeRune(r, true, attr); e != "" {
			b.WriteString(e)
		} else {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// escapeRune returns the entity r is written as, or "" if it is written
// as itself. Invalid UTF-8 reaches here as utf8.RuneError and is written
// as U+FFFD.
func escapeRune(r rune, escapeNewline, attr bool) string {
	switch {
	case r == '&':
		return "&amp;"
	case r == '<':
		return "&lt;"
	case r == '>':
		return "&gt;"
	case r == '"' && attr:
		return "&quot;"
	case r == '\n' && !escapeNewline, r == '\t' && !attr:
		return ""
	case Hidden(r):
		return fmt.Sprintf("&#x%X;", r)
	}
	return ""
}

// Hidden reports whether r shows as nothing, or moves, reorders, joins or
// changes what is around it, rather than showing as itself: every code
// point of the general categories Cc (C0 and C1 controls, DEL), Cf
// (format: bidirectional controls, zero-width characters, the byte order
// mark, soft hyphen, Unicode tags, interlinear annotation), Zl and Zp
// (line and paragraph separators), and of the properties
// Other_Default_Ignorable_Code_Point (Hangul fillers, reserved ignorable
// ranges), Variation_Selector and Bidi_Control. The frame writes each as
// a numeric entity; the CLI writes each as an escape.
func Hidden(r rune) bool {
	if r >= 0x20 && r < 0x7F {
		return false // printable ASCII: the common case, in no table
	}
	return unicode.In(r, hiddenTables...)
}

var hiddenTables = []*unicode.RangeTable{unicode.Cc, unicode.Cf, unicode.Zl, unicode.Zp,
	unicode.Other_Default_Ignorable_Code_Point, unicode.Variation_Selector, unicode.Bidi_Control}
