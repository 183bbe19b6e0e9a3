package thrum

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/identity"
	"github.com/thrumhq/thrum/rpc"
	"github.com/thrumhq/thrum/store"
)

// Search query bounds: a query longer, or with more terms, is refused.
const (
	MaxSearchQueryBytes = 1024
	MaxSearchTerms      = 32
)

// SearchMessages finds messages by their words: the query's terms in the
// content or the structured payload, with message.list's filters, ranked
// by relevance (bm25; ties newest first) or by time; by time also when
// more than store.RelevanceLimit messages match (the result's sort_by
// says which). A search shows what
// a listing with the same filters shows: deleted messages only with
// include_deleted, and read state for the caller.
func (n *Node) SearchMessages(ctx context.Context, p *rpc.SearchMessagesParams) (*rpc.SearchMessagesResult, error) {
	match, err := ParseSearchQuery(p.Query)
	if err != nil {
		return nil, err
	}
	page, size, offset, err := pageParams(p.Page, p.PageSize)
	if err != nil {
		return nil, err
	}
	f := store.SearchFilter{
		Match: match, ThreadID: p.ThreadID, AuthorID: identity.NormalizeAgentID(p.AuthorID),
		IncludeDeleted: p.IncludeDeleted, Limit: size, Offset: offset,
	}
	switch p.SortBy {
	case "", "relevance":
	case "created_at":
		f.ByTime = true
	default:
		return nil, invalid("invalid sort_by %q: must be \"relevance\" or \"created_at\"", p.SortBy)
	}
	if f.Since, err = searchTime("since", p.Since); err != nil {
		return nil, err
	}
	if f.Until, err = searchTime("until", p.Until); err != nil {
		return nil, err
	}
	if f.Since != "" && f.Until != "" && f.Since > f.Until {
		return nil, invalid("since (%s) is after until (%s)", p.Since, p.Until)
	}
	if p.Scope != nil {
		f.Scope = &eventlog.Pair{Type: p.Scope.Type, Value: p.Scope.Value}
	}
	if p.Ref != nil {
		f.Ref = &eventlog.Pair{Type: p.Ref.Type, Value: p.Ref.Value}
	}
	reader := readerOf(ctx)
	if f.Mentions, err = n.mentionFilter(ctx, p.MentionRole, p.Mentions); err != nil {
		return nil, err
	}
	hits, total, byTime, err := n.store.Search(ctx, f)
	if errors.Is(err, store.ErrBadQuery) {
		// ParseSearchQuery's output always parses; this is SQLite's word
		// on anything it still refuses.
		return nil, invalid("invalid query: %s", strings.TrimPrefix(err.Error(), store.ErrBadQuery.Error()+": "))
	}
	if err != nil {
		return nil, internal("search messages", err)
	}
	ids := make([]string, len(hits))
	for i, h := range hits {
		ids[i] = h.MessageID
	}
	rows, err := n.store.MessagesByID(ctx, ids, reader)
	if err != nil {
		return nil, internal("search messages", err)
	}
	byID := make(map[string]*store.Message, len(rows))
	for _, m := range rows {
		byID[m.MessageID] = m
	}
	out := &rpc.SearchMessagesResult{Results: make([]rpc.SearchResult, 0, len(hits)), Total: total,
		Page: page, PageSize: size, TotalPages: totalPages(total, size), SortBy: "relevance"}
	if byTime {
		out.SortBy = "created_at"
	}
	for _, h := range hits {
		m := byID[h.MessageID]
		if m == nil {
			continue // cannot happen: both reads see messages, which rows never leave
		}
		r := rpc.SearchResult{MessageSummary: summary(m)}
		r.Snippet, r.Highlights = splitSnippet(h.Snippet)
		out.Results = append(out.Results, r)
	}
	return out, nil
}

// searchTime turns an RFC 3339 bound into the projection's time format.
func searchTime(name, s string) (string, error) {
	if s == "" {
		return "", nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return "", invalid("invalid %s %q: use RFC 3339 time, such as 2026-11-24T09:00:00Z", name, s)
	}
	return t.UTC().Format(eventlog.TimeFormat), nil
}

// splitSnippet turns the store's marked snippet into plain text and the
// ranges of its matches, in characters. Marker characters in the text
// itself are dropped, never reported as ranges they do not close.
func splitSnippet(marked string) (string, [][2]int) {
	var b strings.Builder
	hl := [][2]int{}
	pos, start := 0, -1
	for _, r := range marked {
		switch string(r) {
		case store.SnippetOpen:
			start = pos
		case store.SnippetClose:
			if start >= 0 && pos > start {
				hl = append(hl, [2]int{start, pos})
			}
			start = -1
		default:
			b.WriteRune(r)
			pos++
		}
	}
	return b.String(), hl
}

// ParseSearchQuery checks a person's search query and returns it as an
// FTS5 expression in which every word and phrase is a quoted string, so
// nothing in the query can name a column, reach SQL, or trip FTS5's
// syntax with punctuation.
//
// The language: words separated by spaces must all appear; "a phrase"
// must appear as written; a word or phrase followed by * matches as a
// prefix (auth* finds authentication); AND, OR and NOT (upper case) and
// parentheses combine them, NOT binding tightest and OR loosest, as in
// FTS5: `token NOT jwt`, `(review OR reviewer) auth*`. NOT excludes from
// what stands before it, so a query cannot start with it. Punctuation
// inside a word splits it into a phrase ("user_id" is "user id"); a word
// of punctuation only is ignored. An error is an *rpc.Error with
// CodeInvalidParams saying what is wrong and where.
func ParseSearchQuery(q string) (string, error) {
	if strings.TrimSpace(q) == "" {
		return "", invalid("query is required: give one or more words to search for")
	}
	if len(q) > MaxSearchQueryBytes {
		return "", invalid("query is %d bytes: at most %d", len(q), MaxSearchQueryBytes)
	}
	if !utf8.ValidString(q) {
		return "", invalid("query is not valid UTF-8")
	}
	toks, err := lexQuery(q)
	if err != nil {
		return "", err
	}
	terms := 0
	for _, t := range toks {
		if t.kind == tokTerm {
			terms++
		}
	}
	if terms == 0 {
		return "", invalid("query %q has no words to search for", q)
	}
	if terms > MaxSearchTerms {
		return "", invalid("query has %d words and phrases: at most %d", terms, MaxSearchTerms)
	}
	p := &queryParser{toks: toks}
	out, err := p.or()
	if err != nil {
		return "", err
	}
	if t := p.peek(); t.kind != tokEnd {
		if t.kind == tokClose {
			return "", invalid("query: ) at character %d has no ( before it", t.at)
		}
		return "", invalid("query: unexpected %s at character %d", t, t.at) // unreachable: or() consumes terms
	}
	return out, nil
}

type tokKind int

const (
	tokEnd tokKind = iota
	tokTerm
	tokAnd
	tokOr
	tokNot
	tokOpen
	tokClose
)

type queryTok struct {
	kind   tokKind
	text   string // tokTerm: the words
	prefix bool   // tokTerm: followed by *
	at     int    // 1-based character position
}

func (t queryTok) String() string {
	switch t.kind {
	case tokTerm:
		return fmt.Sprintf("%q", t.text)
	case tokAnd:
		return "AND"
	case tokOr:
		return "OR"
	case tokNot:
		return "NOT"
	case tokOpen:
		return "("
	case tokClose:
		return ")"
	}
	return "the end of the query"
}

// lexQuery splits a query into terms, operators and parentheses.
func lexQuery(q string) ([]queryTok, error) {
	rs := []rune(q)
	var toks []queryTok
	for i := 0; i < len(rs); {
		r := rs[i]
		switch {
		case unicode.IsSpace(r):
			i++
		case r == '(':
			toks = append(toks, queryTok{kind: tokOpen, at: i + 1})
			i++
		case r == ')':
			toks = append(toks, queryTok{kind: tokClose, at: i + 1})
			i++
		case r == '"':
			end := i + 1
			for end < len(rs) && rs[end] != '"' {
				end++
			}
			if end == len(rs) {
				return nil, invalid("query: the phrase opened by the quote at character %d is not closed: add a closing \"", i+1)
			}
			t := queryTok{kind: tokTerm, text: string(rs[i+1 : end]), at: i + 1}
			i = end + 1
			if i < len(rs) && rs[i] == '*' {
				t.prefix = true
				for i < len(rs) && rs[i] == '*' {
					i++
				}
			}
			if strings.TrimSpace(t.text) == "" {
				return nil, invalid("query: the phrase at character %d is empty", t.at)
			}
			toks = append(toks, t)
		default:
			start := i
			for i < len(rs) && !unicode.IsSpace(rs[i]) && rs[i] != '(' && rs[i] != ')' {
				i++
			}
			w := string(rs[start:i])
			switch w {
			case "AND":
				toks = append(toks, queryTok{kind: tokAnd, at: start + 1})
				continue
			case "OR":
				toks = append(toks, queryTok{kind: tokOr, at: start + 1})
				continue
			case "NOT":
				toks = append(toks, queryTok{kind: tokNot, at: start + 1})
				continue
			}
			t := queryTok{kind: tokTerm, at: start + 1}
			t.text = strings.TrimRight(w, "*")
			t.prefix = len(t.text) < len(w)
			if !strings.ContainsFunc(t.text, func(r rune) bool { return unicode.IsLetter(r) || unicode.IsNumber(r) }) {
				if t.prefix {
					return nil, invalid("query: * at character %d must follow a word, as in auth*", start+1+utf8.RuneCountInString(t.text))
				}
				continue // punctuation only: not a word
			}
			toks = append(toks, t)
		}
	}
	return toks, nil
}

// queryParser renders tokens as an FTS5 expression, every operation in
// parentheses.
type queryParser struct {
	toks []queryTok
	i    int
}

func (p *queryParser) peek() queryTok {
	if p.i < len(p.toks) {
		return p.toks[p.i]
	}
	end := 1
	if len(p.toks) > 0 {
		end = p.toks[len(p.toks)-1].at + 1
	}
	return queryTok{kind: tokEnd, at: end}
}

func (p *queryParser) next() queryTok { t := p.peek(); p.i++; return t }

func (p *queryParser) or() (string, error) {
	left, err := p.and()
	if err != nil {
		return "", err
	}
	for p.peek().kind == tokOr {
		p.next()
		right, err := p.and()
		if err != nil {
			return "", err
		}
		left = "(" + left + " OR " + right + ")"
	}
	return left, nil
}

func (p *queryParser) and() (string, error) {
	left, err := p.not()
	if err != nil {
		return "", err
	}
	for {
		switch p.peek().kind {
		case tokAnd:
			p.next()
		case tokTerm, tokOpen:
		default:
			return left, nil
		}
		right, err := p.not()
		if err != nil {
			return "", err
		}
		left = "(" + left + " AND " + right + ")"
	}
}

func (p *queryParser) not() (string, error) {
	left, err := p.primary()
	if err != nil {
		return "", err
	}
	for p.peek().kind == tokNot {
		p.next()
		right, err := p.primary()
		if err != nil {
			return "", err
		}
		left = "(" + left + " NOT " + right + ")"
	}
	return left, nil
}

func (p *queryParser) primary() (string, error) {
	t := p.next()
	switch t.kind {
	case tokTerm:
		s := `"` + strings.ReplaceAll(t.text, `"`, `""`) + `"`
		if t.prefix {
			s += "*"
		}
		return s, nil
	case tokOpen:
		inner, err := p.or()
		if err != nil {
			return "", err
		}
		if c := p.next(); c.kind != tokClose {
			return "", invalid("query: the ( at character %d is not closed: add a )", t.at)
		}
		return inner, nil
	case tokNot:
		return "", invalid("query: NOT at character %d needs a word before it: NOT excludes from what comes first, as in token NOT jwt", t.at)
	case tokEnd:
		return "", invalid("query ends where a word or phrase is needed (after an operator or an open parenthesis)")
	default:
		return "", invalid("query: %s at character %d needs a word or phrase before it", t, t.at)
	}
}
