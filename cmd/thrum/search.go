package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/thrumhq/thrum/rpc"
)

// SearchCmd is `thrum search`.
type SearchCmd struct {
	Query          []string `arg:"" help:"What to search for: words, \"a phrase\", prefix*, AND, OR, NOT, ( )."`
	Author         string   `help:"Only messages by this agent."`
	Scope          string   `help:"Only messages with this scope (type:value)."`
	Ref            string   `help:"Only messages with this ref (type:value)."`
	Thread         string   `help:"Only messages in this thread."`
	Mentions       bool     `help:"Only messages addressed to you: by name, role, group or @everyone."`
	Mention        string   `help:"Only messages addressed to this agent name or role."`
	Since          string   `help:"Only messages at or after: RFC 3339 time, a date (2026-11-24), or an age (90m, 36h, 7d)."`
	Until          string   `help:"Only messages at or before (same forms as --since)."`
	IncludeDeleted bool     `help:"Search deleted messages too."`
	Sort           string   `default:"relevance" enum:"relevance,time" help:"Order: relevance, or time (newest first)."`
	PageSize       int      `default:"10" help:"Results per page (1-100)."`
	Page           int      `default:"1" help:"Page number."`
}

func (c *SearchCmd) Help() string {
	return `Finds messages by their words, in the content and in structured payloads.
All words must appear (stemmed: "tokens" finds "token"); "a phrase" must
appear as written; auth* matches words that start with auth; AND, OR and
NOT (upper case) and parentheses combine them. Matches are highlighted.
Searching does not mark messages read.

Examples:
  thrum search auth token
  thrum search '"token expired"' --author reviewer_1
  thrum search 'deploy* NOT staging' --since 7d --sort time
  thrum search '(jwt OR oauth) review' --scope module:auth --json`
}

func (c *SearchCmd) Run(ctx context.Context, g *Globals) error {
	if c.PageSize < 1 || c.PageSize > 100 {
		return withCode(exitUsage, "--page-size %d: use 1 to 100", c.PageSize)
	}
	if c.Page < 1 {
		return withCode(exitUsage, "--page %d: pages start at 1", c.Page)
	}
	now := time.Now()
	p := &rpc.SearchMessagesParams{Query: strings.Join(c.Query, " "), AuthorID: c.Author, ThreadID: c.Thread,
		Mentions: c.Mentions, MentionRole: c.Mention, IncludeDeleted: c.IncludeDeleted, PageSize: c.PageSize, Page: c.Page}
	if c.Sort == "time" {
		p.SortBy = "created_at"
	}
	for _, f := range []struct {
		flag, in string
		out      *string
	}{{"--since", c.Since, &p.Since}, {"--until", c.Until, &p.Until}} {
		if f.in == "" {
			continue
		}
		t, err := parseWhen(f.in, now)
		if err != nil {
			return withCode(exitUsage, "%s %q: %v", f.flag, f.in, err)
		}
		*f.out = t
	}
	for _, f := range []struct {
		flag, in string
		out      **rpc.Pair
	}{{"--scope", c.Scope, &p.Scope}, {"--ref", c.Ref, &p.Ref}} {
		if f.in == "" {
			continue
		}
		pr, err := parsePair(f.flag, f.in)
		if err != nil {
			return err
		}
		*f.out = &pr
	}
	s, err := connect(ctx, g)
	if err != nil {
		return err
	}
	defer s.close()
	// An identity gives read state and --mentions; without one, search
	// still works (read state is nobody's).
	if err := s.identify(ctx); err != nil {
		if c.Mentions {
			return err
		}
		g.debugf("searching with no identity: %v", err)
	}
	r, err := s.c.SearchMessages(ctx, p)
	if err != nil {
		return err
	}
	return g.out(r, func(w io.Writer) {
		v := searchView{Now: now, Color: colorful(g.stdout, g.env), Quiet: g.Quiet, Next: c.nextCmd()}
		if v.Color {
			// renderSearch shows its data escaped itself: only the
			// highlight's own escape sequences reach the terminal.
			w = g.stdout
		}
		renderSearch(w, r, v)
	})
}

// nextCmd is the command for the next page, as typed minus --page.
func (c *SearchCmd) nextCmd() string {
	args := []string{"thrum search", shellQuote(strings.Join(c.Query, " "))}
	add := func(flag, v string) {
		if v != "" {
			args = append(args, flag+" "+shellQuote(v))
		}
	}
	add("--author", c.Author)
	add("--scope", c.Scope)
	add("--ref", c.Ref)
	add("--thread", c.Thread)
	add("--mention", c.Mention)
	add("--since", c.Since)
	add("--until", c.Until)
	if c.Mentions {
		args = append(args, "--mentions")
	}
	if c.IncludeDeleted {
		args = append(args, "--include-deleted")
	}
	if c.Sort != "relevance" {
		add("--sort", c.Sort)
	}
	if c.PageSize != 10 {
		add("--page-size", strconv.Itoa(c.PageSize))
	}
	return strings.Join(args, " ")
}

// shellQuote quotes s for a POSIX shell unless it needs no quoting.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.:/@", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// parseWhen reads a time bound: RFC 3339, a date (midnight UTC), or an
// age before now (90m, 36h, 7d).
func parseWhen(s string, now time.Time) (string, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UTC().Format(time.RFC3339Nano), nil
	}
	if t, err := time.Parse("2006-01-02", s); err == nil {
		return t.UTC().Format(time.RFC3339Nano), nil
	}
	if n, ok := strings.CutSuffix(s, "d"); ok {
		if days, err := strconv.Atoi(n); err == nil && days >= 0 {
			return now.Add(-time.Duration(days) * 24 * time.Hour).UTC().Format(time.RFC3339Nano), nil
		}
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d).UTC().Format(time.RFC3339Nano), nil
	}
	return "", fmt.Errorf("use RFC 3339 (2026-11-24T09:00:00Z), a date (2026-11-24) or an age (90m, 36h, 7d)")
}

// colorful reports whether w is a terminal that takes ANSI colours
// (NO_COLOR unset).
func colorful(w io.Writer, env func(string) string) bool {
	f, ok := w.(*os.File)
	if !ok || env("NO_COLOR") != "" || env("TERM") == "dumb" {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

type searchView struct {
	Now   time.Time
	Color bool // highlight with ANSI bold yellow; else plain text
	Quiet bool
	Next  string
}

// renderSearch prints each result's header and its snippet with the
// matches highlighted, then the count and the next page's command. It
// escapes what it shows of the results itself (shown), since a
// terminal's highlight is written as it is.
func renderSearch(w io.Writer, r *rpc.SearchMessagesResult, v searchView) {
	if r.Total == 0 {
		fmt.Fprintln(w, "No messages match.")
		return
	}
	for _, m := range r.Results {
		head := fmt.Sprintf("%s  @%s  %s", shown(m.MessageID), shown(m.AgentID), ago(m.CreatedAt, v.Now))
		if m.ThreadID != "" {
			head += "  thread " + shown(m.ThreadID)
		}
		if !m.IsRead {
			head += "  (unread)"
		}
		if m.Deleted {
			head += "  (deleted)"
		}
		fmt.Fprintln(w, head)
		fmt.Fprintln(w, "    "+highlight(m.Snippet, m.Highlights, v.Color))
	}
	first := (r.Page-1)*r.PageSize + 1
	fmt.Fprintf(w, "Showing %d-%d of %d %s\n", first, first+len(r.Results)-1, r.Total, plural(r.Total, "match", "matches"))
	if r.Page < r.TotalPages && !v.Quiet {
		fmt.Fprintf(w, "Next page: %s --page %d\n", shown(v.Next), r.Page+1)
	}
}

// highlight shows s on one line, escaped, its ranges (in characters of
// s) in bold yellow when color is set; plain text otherwise, for a pipe.
func highlight(s string, ranges [][2]int, color bool) string {
	open, close := "", ""
	if color {
		open, close = "\x1b[1;33m", "\x1b[0m"
	}
	// One line: line breaks become spaces, which keeps the offsets.
	rs := []rune(strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' || r == '\t' {
			return ' '
		}
		return r
	}, s))
	var b strings.Builder
	at := 0
	for _, h := range ranges {
		if h[0] < at || h[1] > len(rs) || h[0] >= h[1] {
			continue
		}
		b.WriteString(shown(string(rs[at:h[0]])))
		b.WriteString(open + shown(string(rs[h[0]:h[1]])) + close)
		at = h[1]
	}
	b.WriteString(shown(string(rs[at:])))
	return b.String()
}
