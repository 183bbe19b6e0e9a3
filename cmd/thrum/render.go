package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/rivo/uniseg"

	"github.com/thrumhq/thrum/internal/frame"
	"github.com/thrumhq/thrum/rpc"
)

// boxWidth is the inner width of the inbox box, in characters.
const boxWidth = 76

// inboxView is what the inbox needs beyond the page itself.
type inboxView struct {
	Filter      []string  // active filters, e.g. "scope=module:auth"
	FilterFlags string    // the same, as flags, for the empty state
	AllTotal    int       // messages without filters (for the empty state)
	Now         time.Time // for relative times
	Me          string
	// NextCmd is the command the next-page hint shows before --page N,
	// with the same filters; "thrum inbox" when empty.
	NextCmd string
	// Quiet leaves out the next-page hint.
	Quiet bool
	// Originals are the messages that replies on the page answer but
	// that are not on the page themselves (another page, or left out by
	// a filter), by ID: such a reply is shown under its original, as
	// context. A reply whose original is missing here, or deleted, says
	// so instead.
	Originals map[string]rpc.MessageSummary
}

// renderInbox prints a page of messages: a box of entries, replies under
// their original, then the footer.
func renderInbox(w io.Writer, r *rpc.ListMessagesResult, v inboxView) {
	if r.Total == 0 {
		if len(v.Filter) == 0 {
			fmt.Fprintln(w, "No messages in inbox.")
			return
		}
		fmt.Fprintf(w, "No messages matching filter %s\n", v.FilterFlags)
		fmt.Fprintf(w, "Showing 0 of %d total %s (filter: %s)\n", v.AllTotal, plural(v.AllTotal, "message", "messages"), strings.Join(v.Filter, ", "))
		return
	}
	if len(r.Messages) == 0 {
		fmt.Fprintf(w, "No messages on page %d: there %s %d %s.\n", r.Page,
			plural(r.TotalPages, "is", "are"), r.TotalPages, plural(r.TotalPages, "page", "pages"))
		return
	}
	onPage := map[string]bool{}
	for _, m := range r.Messages {
		onPage[m.MessageID] = true
	}
	parent := map[string]string{}
	for _, m := range r.Messages {
		if p := rpc.ReplyTo(m.Refs); p != "" && onPage[p] {
			parent[m.MessageID] = p
		}
	}
	// root is the on-page original a reply is shown under, following
	// replies to replies up, so that none is left out; ok is false for a
	// message with no on-page parent, or in a cycle of replies.
	root := func(id string) (_ string, ok bool) {
		seen := map[string]bool{id: true}
		for parent[id] != "" {
			id = parent[id]
			if seen[id] {
				return "", false
			}
			seen[id] = true
		}
		return id, len(seen) > 1
	}
	replies := map[string][]rpc.MessageSummary{}
	var top []rpc.MessageSummary
	asContext := map[string]bool{} // IDs in top that are off-page originals
	for _, m := range r.Messages {
		if p, ok := root(m.MessageID); ok {
			replies[p] = append(replies[p], m)
			continue
		}
		// A reply whose original is off the page goes under that
		// original, shown as context where the first such reply is.
		if p := rpc.ReplyTo(m.Refs); p != "" {
			if o, ok := v.Originals[p]; ok && !onPage[p] && !o.Deleted {
				if !asContext[p] {
					asContext[p] = true
					top = append(top, o)
				}
				replies[p] = append(replies[p], m)
				continue
			}
		}
		top = append(top, m)
	}
	// The replies grouped under a reply that went under an off-page
	// original go there too, so that none is left out.
	for p := range asContext {
		for _, m := range append([]rpc.MessageSummary(nil), replies[p]...) {
			replies[p] = append(replies[p], replies[m.MessageID]...)
			delete(replies, m.MessageID)
		}
	}
	fmt.Fprintln(w, "┌"+strings.Repeat("─", boxWidth+2)+"┐")
	for i, m := range top {
		if i > 0 {
			fmt.Fprintln(w, "├"+strings.Repeat("─", boxWidth+2)+"┤")
		}
		lead := "○ "
		if !m.IsRead {
			lead = "● "
		}
		note := ""
		switch p := rpc.ReplyTo(m.Refs); {
		case asContext[m.MessageID]:
			note = "(the original: not in this list)"
		case p != "":
			lead = "↳ " + lead // a reply whose original is not on this page
			switch {
			case onPage[p]: // in a cycle of replies
			case v.Originals[p].Deleted:
				note = "(in reply to a deleted message)"
			default:
				note = "(in reply to " + shown(p) + ", not in this list)"
			}
		}
		entry(w, lead, m, v.Now, "  ", note)
		rs := replies[m.MessageID]
		sort.Slice(rs, func(a, b int) bool { return rs[a].CreatedAt < rs[b].CreatedAt })
		for _, rep := range rs {
			mark := "○ "
			if !rep.IsRead {
				mark = "● "
			}
			entry(w, "↳ "+mark, rep, v.Now, "    ", "")
		}
	}
	fmt.Fprintln(w, "└"+strings.Repeat("─", boxWidth+2)+"┘")
	first := (r.Page-1)*r.PageSize + 1
	last := first + len(r.Messages) - 1
	fmt.Fprintf(w, "Showing %d-%d of %d %s (%d unread)\n", first, last, r.Total, plural(r.Total, "message", "messages"), r.Unread)
	if r.Page < r.TotalPages && !v.Quiet {
		next := v.NextCmd
		if next == "" {
			next = "thrum inbox"
		}
		fmt.Fprintf(w, "Next page: %s --page %d\n", next, r.Page+1)
	}
}

// entry prints one message: a header line, the preview of its content,
// wrapped, and the note if there is one.
func entry(w io.Writer, lead string, m rpc.MessageSummary, now time.Time, indent, note string) {
	head := fmt.Sprintf("%s%s  @%s  %s", lead, shown(m.MessageID), shown(m.AgentID), ago(m.CreatedAt, now))
	if m.Priority != "" && m.Priority != rpc.PriorityNormal {
		head += "  [" + shown(m.Priority) + "]"
	}
	if m.UpdatedAt != "" {
		head += "  (edited)"
	}
	if m.AckRequired {
		head += "  [ack asked]"
	}
	if lead[0] == ' ' {
		head = strings.TrimLeft(head, " ")
	}
	line(w, strings.Repeat(" ", len(indent)-2)+head)
	text := preview(m.Body.Content, m.MessageID)
	if note != "" {
		text += "\n" + note
	}
	for _, l := range wrap(text, boxWidth-len(indent)) {
		line(w, indent+l)
	}
}

// A list shows of a body its first previewLines lines or previewChars
// characters, whichever is shorter; message get shows all of it.
const (
	previewLines = 3
	previewChars = 300
)

// preview is what a list shows of body: its start, as shown (escaped),
// cut at a grapheme cluster's end, and then, if that is not all of it, a
// line saying how many characters more there are and where to read them.
func preview(body, id string) string {
	s := shown(strings.TrimRight(strings.ReplaceAll(body, "\r\n", "\n"), " \t\n"))
	head := s
	if i := indexNth(s, '\n', previewLines); i >= 0 {
		head = s[:i]
	}
	head = graphemePrefix(head, previewChars)
	if len(head) == len(s) {
		return s
	}
	more := utf8.RuneCountInString(s[len(head):])
	return fmt.Sprintf("%s\n… %d more %s: thrum message get %s", head, more, plural(more, "character", "characters"), shown(id))
}

// indexNth is the index of the nth c in s, or -1 if s has fewer.
func indexNth(s string, c byte, n int) int {
	at := -1
	for range n {
		i := strings.IndexByte(s[at+1:], c)
		if i < 0 {
			return -1
		}
		at += i + 1
	}
	return at
}

// graphemePrefix is the longest start of s of at most n characters that
// ends where a grapheme cluster (what a reader sees as one character: a
// letter and its accents, a flag, a Hangul syllable of jamo) ends.
func graphemePrefix(s string, n int) string {
	at, count, state := 0, 0, -1
	for at < len(s) {
		c, _, _, next := uniseg.FirstGraphemeClusterInString(s[at:], state)
		k := utf8.RuneCountInString(c)
		if count+k > n {
			break
		}
		at, count, state = at+len(c), count+k, next
	}
	return s[:at]
}

// shown is s as human output writes it, to a terminal or a pipe: each
// character that would act on a terminal or hide itself — C0 controls
// but newline and tab, DEL, C1 controls, and the bidirectional, invisible
// and joining characters frame.Hidden names — as a Go escape (\x1b,
// \u202e, \U000e0041), and each byte that is not UTF-8 as \xff. Only
// --json output is exact.
func shown(s string) string {
	if !strings.ContainsFunc(s, escapes) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n' || r == '\t' || !frame.Hidden(r):
			b.WriteString(s[i : i+n])
		case r < 0x80:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r <= 0xFFFF:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
		i += n
	}
	return b.String()
}

// escapes reports whether shown may write r otherwise than as itself:
// utf8.RuneError stands for a byte that is not UTF-8 too.
func escapes(r rune) bool {
	return r == utf8.RuneError || r != '\n' && r != '\t' && frame.Hidden(r)
}

// textWriter is the writer of human output: what goes through it is
// written as shown.
type textWriter struct{ w io.Writer }

func (t textWriter) Write(p []byte) (int, error) {
	if _, err := io.WriteString(t.w, shown(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// line prints s inside the box's borders, padded or cut to its width.
func line(w io.Writer, s string) {
	n := utf8.RuneCountInString(s)
	if n > boxWidth {
		r := []rune(s)
		s, n = string(r[:boxWidth-1])+"…", boxWidth
	}
	fmt.Fprintf(w, "│ %s%s │\n", s, strings.Repeat(" ", boxWidth-n))
}

// wrap splits text into lines of at most width characters, breaking at
// spaces where it can and keeping the text's own line breaks.
func wrap(text string, width int) []string {
	var out []string
	for _, para := range strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n") {
		words := strings.Fields(para)
		if len(words) == 0 {
			out = append(out, "")
			continue
		}
		cur := ""
		for _, wd := range words {
			for utf8.RuneCountInString(wd) > width { // a word longer than a line
				r := []rune(wd)
				if cur != "" {
					out = append(out, cur)
					cur = ""
				}
				out = append(out, string(r[:width]))
				wd = string(r[width:])
			}
			switch {
			case cur == "":
				cur = wd
			case utf8.RuneCountInString(cur)+1+utf8.RuneCountInString(wd) <= width:
				cur += " " + wd
			default:
				out = append(out, cur)
				cur = wd
			}
		}
		out = append(out, cur)
	}
	for len(out) > 1 && out[len(out)-1] == "" {
		out = out[:len(out)-1]
	}
	return out
}

// ago renders a timestamp relative to now: "just now", "5m ago", "3h ago",
// "2d ago".
func ago(ts string, now time.Time) string {
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return ts
	}
	d := now.Sub(t)
	switch {
	case d < time.Minute:
		return "just now"
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d/time.Minute))
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh ago", int(d/time.Hour))
	default:
		return fmt.Sprintf("%dd ago", int(d/(24*time.Hour)))
	}
}

func pairs(ps []rpc.Pair) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.Type + ":" + p.Value
	}
	return strings.Join(s, ", ")
}

// renderMessage prints message get's view.
func renderMessage(w io.Writer, m *rpc.MessageDetail, now time.Time) {
	fmt.Fprintf(w, "Message: %s\n", m.MessageID)
	if m.Deleted {
		fmt.Fprintf(w, "  Status:  DELETED %s", ago(m.Metadata.DeletedAt, now))
		if m.Metadata.DeleteReason != "" {
			fmt.Fprintf(w, " (%s)", m.Metadata.DeleteReason)
		}
		fmt.Fprintln(w)
	}
	from := "@" + m.Author.AgentID
	if m.DisclosedVia != "" {
		from += " [via " + m.DisclosedVia + "]"
	}
	fmt.Fprintf(w, "  From:    %s\n", from)
	fmt.Fprintf(w, "  Time:    %s\n", ago(m.CreatedAt, now))
	if m.IsRead {
		fmt.Fprintln(w, "  Read:    yes")
	} else {
		fmt.Fprintln(w, "  Read:    no (unread)")
	}
	if m.ThreadID != "" {
		fmt.Fprintf(w, "  Thread:  %s\n", m.ThreadID)
	}
	if m.Priority != "" && m.Priority != rpc.PriorityNormal {
		fmt.Fprintf(w, "  Priority: %s\n", m.Priority)
	}
	if len(m.Scopes) > 0 {
		fmt.Fprintf(w, "  Scopes:  %s\n", pairs(m.Scopes))
	}
	if len(m.Refs) > 0 {
		fmt.Fprintf(w, "  Refs:    %s\n", pairs(m.Refs))
	}
	if len(m.Tags) > 0 {
		fmt.Fprintf(w, "  Tags:    %s\n", strings.Join(m.Tags, ", "))
	}
	if m.UpdatedAt != "" {
		fmt.Fprintf(w, "  Edited:  %s (version %d)\n", ago(m.UpdatedAt, now), m.Version)
	}
	renderReceipts(w, m, now)
	fmt.Fprintf(w, "\n%s\n", m.Body.Content)
	if m.Body.Structured != "" {
		fmt.Fprintf(w, "\nStructured: %s\n", m.Body.Structured)
	}
}
