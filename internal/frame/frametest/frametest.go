// Package frametest reads frames back, for tests: what a frame shows is
// checked by parsing it, never by thrum itself, which only writes them.
package frametest

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/thrumhq/thrum/internal/frame"
)

// Parse reads s, which must be exactly one frame and nothing else, back
// into the message it shows: the body as it was (the part shown, if it
// was cut) and its full length in characters. It accepts what Frame
// writes and nothing else.
func Parse(s string) (m frame.Message, total int, err error) {
	open := "<" + frame.Tag
	if !strings.HasPrefix(s, open) {
		return m, 0, errors.New("frame: does not start with <" + frame.Tag)
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
	closeTag := "</" + frame.Tag + ">"
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
	m = frame.Message{ID: attrs["id"], From: attrs["from"], Priority: attrs["priority"], ThreadID: attrs["thread_id"], ReplyTo: attrs["reply_to"],
		Sender: attrs["sender"]}
	if a, ok := attrs["ack"]; ok {
		if a != "requested" {
			return m, 0, fmt.Errorf("frame: ack=%q is not \"requested\"", a)
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
		note := sep + frame.CutNote(m.ID, total)
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

// unescape decodes the entities the frame writes, and only those.
func unescape(s string) (string, error) {
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
