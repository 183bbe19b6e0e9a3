// Package frame writes a message from one agent into another agent's
// context — a Claude Code channel event, a host hook's context, a
// monitor's stream line — as one <thrum-message> element that names its
// sender and ID, is cut to a size with a pointer to get_message, and
// whose body cannot close the element or forge any markup around it:
// every "<", ">" and "&" of the body is written as an entity, and so are
// the control and direction characters a terminal or a model could take
// for structure. Parse reads a frame back; the fuzz test holds that any
// body gives exactly one frame that parses back to it.
//
// Every path that puts a message in a host's context calls Frame, so the
// rules live here once.
package frame

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Tag is the element's name.
const Tag = "thrum-message"

// DefaultMax is Options.Max when it is 0.
const DefaultMax = 4000

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
	Ack  bool
	Body string
}

// Options say how to write a frame. The zero value is a multi-line frame
// of at most DefaultMax body characters.
type Options struct {
	// Max bounds the body as written (escaped), in characters. A longer
	// body is cut at a character boundary and followed by a note saying
	// how long it is and that get_message shows all of it. 0 means
	// DefaultMax.
	Max int
	// OneLine writes the frame on one line, newlines of the body
	// escaped: for a stream whose reader takes each line as one event.
	OneLine bool
}

// Frame writes m as one <thrum-message> element:
//
//	<thrum-message id="msg_…" from="alice" priority="high" thread_id="…" reply_to="…" ack="requested">
//	body
//	</thrum-message>
//
// (thread_id, reply_to and ack only when set). A body cut to Options.Max has
// the attribute cut="N", N its full length in characters, and ends with
// the note that CutNote writes.
func Frame(m Message, o Options) string {
	max := o.Max
	if max <= 0 {
		max = DefaultMax
	}
	body, total, cut := escapeBody(m.Body, max, o.OneLine)
	var b strings.Builder
	b.Grow(len(body) + 160)
	b.WriteString("<" + Tag)
	attr(&b, "id", m.ID, true)
	attr(&b, "from", m.From, true)
	attr(&b, "priority", m.Priority, true)
	attr(&b, "thread_id", m.ThreadID, false)
	attr(&b, "reply_to", m.ReplyTo, false)
	if m.Ack {
		attr(&b, "ack", ackRequested, true)
	}
	if cut {
		attr(&b, "cut", strconv.Itoa(total), true)
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
	return b.String()
}

// ackRequested is the ack attribute's value.
const ackRequested = "requested"

// CutNote is the note that ends a cut body: its full length and where to
// read all of it.
func CutNote(id string, total int) string {
	return fmt.Sprintf(`[cut: the message has %d characters; get_message with message_id "%s" shows all of it]`, total, escapeText(id, true))
}

func attr(b *strings.Builder, name, value string, always bool) {
	if value == "" && !always {
		return
	}
	b.WriteString(" " + name + `="` + escapeText(value, true) + `"`)
}

// escapeBody escapes s and cuts it so that what is written has at most
// max characters; it returns the escaped text, the length of s in
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
		n := 1
		if e != "" {
			n = len(e) // entities are ASCII: bytes are characters
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
	case r == '\n':
		if escapeNewline {
			return "&#xA;"
		}
		return ""
	case r == '\t':
		if attr {
			return "&#x9;"
		}
		return ""
	case hidden(r):
		return fmt.Sprintf("&#x%X;", r)
	}
	return ""
}

// hidden reports whether r is a character that shows as nothing, or
// moves or reorders what follows, rather than as itself: C0 and C1
// controls (carriage return and escape included), DEL, line and paragraph
// separators, bidirectional controls, zero-width characters and the byte
// order mark.
func hidden(r rune) bool {
	switch {
	case r < 0x20, r >= 0x7F && r <= 0x9F:
		return true
	case r >= 0x200B && r <= 0x200F, r >= 0x2028 && r <= 0x202E, r >= 0x2060 && r <= 0x2069, r == 0xFEFF:
		return true
	}
	return false
}

// Parse reads s, which must be exactly one frame and nothing else, back
// into the message it shows: the body as it was (the part shown, if it
// was cut) and its full length in characters.
func Parse(s string) (m Message, total int, err error) {
	open := "<" + Tag
	if !strings.HasPrefix(s, open) {
		return m, 0, errors.New("frame: does not start with <" + Tag)
	}
	end := strings.IndexByte(s, '>')
	if end < 0 {
		return m, 0, errors.New("frame: open tag does not end")
	}
	attrs, err := parseAttrs(s[len(open):end])
	if err != nil {
		return m, 0, err
	}
	rest := s[end+1:]
	closeTag := "</" + Tag + ">"
	if !strings.HasSuffix(rest, closeTag) {
		return m, 0, errors.New("frame: does not end with " + closeTag)
	}
	rest = strings.TrimSuffix(rest, closeTag)
	if strings.ContainsAny(rest, "<>") {
		return m, 0, errors.New("frame: markup inside the body")
	}
	oneLine := !strings.HasPrefix(rest, "\n")
	if !oneLine {
		if len(rest) < 2 || !strings.HasSuffix(rest, "\n") {
			return m, 0, errors.New("frame: multi-line body is not between newlines")
		}
		rest = rest[1 : len(rest)-1]
	} else if strings.Contains(rest, "\n") {
		return m, 0, errors.New("frame: raw newline in a one-line frame")
	}
	m = Message{ID: attrs["id"], From: attrs["from"], Priority: attrs["priority"], ThreadID: attrs["thread_id"], ReplyTo: attrs["reply_to"]}
	if a, ok := attrs["ack"]; ok {
		if a != ackRequested {
			return m, 0, fmt.Errorf("frame: ack=%q is not %q", a, ackRequested)
		}
		m.Ack = true
	}
	if c, ok := attrs["cut"]; ok {
		total, err = strconv.Atoi(c)
		if err != nil || total < 0 {
			return m, 0, fmt.Errorf("frame: cut=%q is not a length", c)
		}
		sep := "\n"
		if oneLine {
			sep = " "
		}
		note := sep + CutNote(m.ID, total)
		if !strings.HasSuffix(rest, note) {
			return m, 0, errors.New("frame: cut body without its note")
		}
		rest = strings.TrimSuffix(rest, note)
	}
	m.Body, err = unescape(rest)
	if err != nil {
		return m, 0, err
	}
	if _, ok := attrs["cut"]; !ok {
		total = utf8.RuneCountInString(m.Body)
	}
	return m, total, nil
}

// parseAttrs reads ` name="value"` pairs.
func parseAttrs(s string) (map[string]string, error) {
	out := map[string]string{}
	for s != "" {
		if s[0] != ' ' {
			return nil, fmt.Errorf("frame: unexpected %q in the open tag", s)
		}
		s = s[1:]
		eq := strings.Index(s, `="`)
		if eq <= 0 {
			return nil, errors.New("frame: attribute without a value")
		}
		name := s[:eq]
		s = s[eq+2:]
		q := strings.IndexByte(s, '"')
		if q < 0 {
			return nil, errors.New("frame: attribute value does not end")
		}
		v, err := unescape(s[:q])
		if err != nil {
			return nil, err
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("frame: attribute %s twice", name)
		}
		out[name] = v
		s = s[q+1:]
	}
	return out, nil
}

// unescape decodes the entities escapeRune writes, and only those.
func unescape(s string) (string, error) {
	if !strings.Contains(s, "&") {
		return s, nil
	}
	var b strings.Builder
	for {
		i := strings.IndexByte(s, '&')
		if i < 0 {
			b.WriteString(s)
			return b.String(), nil
		}
		b.WriteString(s[:i])
		s = s[i:]
		semi := strings.IndexByte(s, ';')
		if semi < 0 {
			return "", errors.New("frame: entity does not end")
		}
		ent := s[1:semi]
		s = s[semi+1:]
		switch ent {
		case "amp":
			b.WriteByte('&')
		case "lt":
			b.WriteByte('<')
		case "gt":
			b.WriteByte('>')
		case "quot":
			b.WriteByte('"')
		default:
			hex, ok := strings.CutPrefix(ent, "#x")
			v, err := strconv.ParseUint(hex, 16, 32)
			if !ok || err != nil || v > utf8.MaxRune {
				return "", fmt.Errorf("frame: unknown entity &%s;", ent)
			}
			b.WriteRune(rune(v))
		}
	}
}
