package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

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
		if p := replyTo(m.Refs); p != "" && onPage[p] {
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
		if p := replyTo(m.Refs); p != "" {
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
		switch p := replyTo(m.Refs); {
		case asContext[m.MessageID]:
			m.Body.Content += "\n(the original: not in this list)"
		case p != "":
			lead = "↳ " + lead // a reply whose original is not on this page
			switch {
			case onPage[p]: // in a cycle of replies
			case v.Originals[p].Deleted:
				m.Body.Content += "\n(in reply to a deleted message)"
			default:
				m.Body.Content += "\n(in reply to " + p + ", not in this list)"
			}
		}
		entry(w, lead, m, v.Now, "  ")
		rs := replies[m.MessageID]
		sort.Slice(rs, func(a, b int) bool { return rs[a].CreatedAt < rs[b].CreatedAt })
		for _, rep := range rs {
			mark := "○ "
			if !rep.IsRead {
				mark = "● "
			}
			entry(w, "↳ "+mark, rep, v.Now, "    ")
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

// entry prints one message: a header line and its wrapped content.
func entry(w io.Writer, lead string, m rpc.MessageSummary, now time.Time, indent string) {
	head := fmt.Sprintf("%s%s  @%s  %s", lead, m.MessageID, m.AgentID, ago(m.CreatedAt, now))
	if m.Priority != "" && m.Priority != rpc.PriorityNormal {
		head += "  [" + m.Priority + "]"
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
	for _, l := range wrap(m.Body.Content, boxWidth-len(indent)) {
		line(w, indent+l)
	}
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

func replyTo(refs []rpc.Pair) string {
	for _, r := range refs {
		if r.Type == rpc.RefReplyTo {
			return r.Value
		}
	}
	return ""
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
