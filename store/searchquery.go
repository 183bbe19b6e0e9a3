package store

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// A search query's bounds: a query longer, or with more terms, is refused.
const (
	maxQueryBytes = 1024
	maxQueryTerms = 32
)

// ErrBadQuery matches (errors.Is) every search query Search refuses. The
// error's message is for the person who typed the query: it says what
// is wrong and where, by character position counted from 1.
var ErrBadQuery = errors.New("store: bad search query")

type queryError struct{ msg string }

func (e *queryError) Error() string        { return e.msg }
func (e *queryError) Is(target error) bool { return target == ErrBadQuery }

func badQuery(format string, args ...any) error {
	return &queryError{msg: fmt.Sprintf(format, args...)}
}

// A queryNode is a parsed search query: a term, or an operator joining
// two queries.
type queryNode struct {
	op          tokKind // tokTerm, tokAnd, tokOr or tokNot
	text        string  // tokTerm: the word or the phrase's words
	prefix      bool    // tokTerm: followed by *
	left, right *queryNode
}

// parseQuery reads a person's search query, in the language
// SearchFilter.Query describes. An error matches ErrBadQuery and says
// what is wrong and where.
func parseQuery(q string) (*queryNode, error) {
	if strings.TrimSpace(q) == "" {
		return nil, badQuery("query is required: give one or more words to search for")
	}
	if len(q) > maxQueryBytes {
		at := 0 // the character holding the first byte past the limit
		for i := range q {
			if i > maxQueryBytes {
				break
			}
			at++
		}
		return nil, badQuery("query is %d bytes, at most %d: it runs past the limit at character %d", len(q), maxQueryBytes, at)
	}
	for i, r := range q {
		if r == utf8.RuneError && !strings.HasPrefix(q[i:], string(utf8.RuneError)) {
			return nil, badQuery("query is not valid UTF-8: byte %d (character %d) is not part of a character", i+1, utf8.RuneCountInString(q[:i])+1)
		}
		if r == 0 {
			// SQLite's FTS5 would read the expression only up to it.
			return nil, badQuery("query: character %d is a NUL (a zero byte): remove it", utf8.RuneCountInString(q[:i])+1)
		}
	}
	toks, err := lexQuery(q)
	if err != nil {
		return nil, err
	}
	terms := 0
	for _, t := range toks {
		if t.kind != tokTerm {
			continue
		}
		if terms++; terms > maxQueryTerms {
			return nil, badQuery("query has more than %d words and phrases: the one at character %d is past the limit", maxQueryTerms, t.at)
		}
	}
	if terms == 0 {
		return nil, badQuery("query %q has no words to search for", q)
	}
	p := &queryParser{toks: toks}
	n, err := p.or()
	if err != nil {
		return nil, err
	}
	if t := p.peek(); t.kind != tokEnd {
		if t.kind == tokClose {
			return nil, badQuery("query: ) at character %d has no ( before it", t.at)
		}
		return nil, badQuery("query: unexpected %s at character %d", t, t.at) // unreachable: or() consumes terms
	}
	return n, nil
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
				return nil, badQuery("query: the phrase opened by the quote at character %d is not closed: add a closing \"", i+1)
			}
			t := queryTok{kind: tokTerm, text: string(rs[i+1 : end]), at: i + 1}
			i = end + 1
			if i < len(rs) && rs[i] == '*' {
				t.prefix = true
				for i < len(rs) && rs[i] == '*' {
					i++
				}
			}
			if !hasWord(t.text) {
				return nil, badQuery("query: the phrase at character %d has no words", t.at)
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
			if !hasWord(t.text) {
				if t.prefix {
					return nil, badQuery("query: * at character %d must follow a word, as in auth*", start+1+utf8.RuneCountInString(t.text))
				}
				continue // punctuation only: not a word
			}
			toks = append(toks, t)
		}
	}
	return toks, nil
}

// hasWord reports whether s holds a letter or a digit: something the
// index's tokenizer keeps.
func hasWord(s string) bool {
	return strings.ContainsFunc(s, func(r rune) bool { return unicode.IsLetter(r) || unicode.IsNumber(r) })
}

// queryParser builds the tree of a query's tokens.
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

func (p *queryParser) or() (*queryNode, error) {
	left, err := p.and()
	if err != nil {
		return nil, err
	}
	for p.peek().kind == tokOr {
		op := p.next()
		right, err := p.operand(op, p.and)
		if err != nil {
			return nil, err
		}
		left = &queryNode{op: tokOr, left: left, right: right}
	}
	return left, nil
}

func (p *queryParser) and() (*queryNode, error) {
	left, err := p.not()
	if err != nil {
		return nil, err
	}
	for {
		op := p.peek()
		switch op.kind {
		case tokAnd:
			p.next()
		case tokTerm, tokOpen:
		default:
			return left, nil
		}
		right, err := p.operand(op, p.not)
		if err != nil {
			return nil, err
		}
		left = &queryNode{op: tokAnd, left: left, right: right}
	}
}

func (p *queryParser) not() (*queryNode, error) {
	left, err := p.primary()
	if err != nil {
		return nil, err
	}
	for p.peek().kind == tokNot {
		op := p.next()
		right, err := p.operand(op, p.primary)
		if err != nil {
			return nil, err
		}
		left = &queryNode{op: tokNot, left: left, right: right}
	}
	return left, nil
}

// operand reads what follows the operator op, saying where op is when
// the query ends instead.
func (p *queryParser) operand(op queryTok, read func() (*queryNode, error)) (*queryNode, error) {
	if p.peek().kind == tokEnd {
		return nil, badQuery("query ends after %s at character %d: a word or phrase must follow it", op, op.at)
	}
	return read()
}

func (p *queryParser) primary() (*queryNode, error) {
	t := p.next()
	switch t.kind {
	case tokTerm:
		return &queryNode{op: tokTerm, text: t.text, prefix: t.prefix}, nil
	case tokOpen:
		if p.peek().kind == tokEnd {
			return nil, badQuery("query ends after the ( at character %d: a word or phrase must follow it", t.at)
		}
		inner, err := p.or()
		if err != nil {
			return nil, err
		}
		if c := p.next(); c.kind != tokClose {
			return nil, badQuery("query: the ( at character %d is not closed: add a )", t.at)
		}
		return inner, nil
	case tokNot:
		return nil, badQuery("query: NOT at character %d needs a word before it: NOT excludes from what comes first, as in token NOT jwt", t.at)
	default:
		// tokEnd cannot come here: the callers check for it.
		return nil, badQuery("query: %s at character %d needs a word or phrase before it", t, t.at)
	}
}

// The two full-text indexes of messages (schema.go): whole words and
// phrases are matched in the stemmed one, where "tokens" finds "token";
// prefixes in the plain one, which holds the words as written, so that
// deploy* finds "deployment" (stemmed "deploy") as well as "deploying"
// (stemmed "deploi").
const (
	stemmedIndex = "messages_fts"
	plainIndex   = "messages_fts_plain"
)

// index returns the index that answers n alone, or "" when n has both
// whole words and prefixes.
func (n *queryNode) index() string {
	if n.op == tokTerm {
		if n.prefix {
			return plainIndex
		}
		return stemmedIndex
	}
	if l := n.left.index(); l == n.right.index() {
		return l
	}
	return ""
}

// fts renders n as an FTS5 expression in which every word and phrase is
// a quoted string, so nothing in the query can name a column, reach SQL,
// or trip FTS5's syntax with punctuation, and every operation is in
// parentheses.
func (n *queryNode) fts() string {
	switch n.op {
	case tokTerm:
		s := `"` + strings.ReplaceAll(n.text, `"`, `""`) + `"`
		if n.prefix {
			s += "*"
		}
		return s
	case tokAnd:
		return "(" + n.left.fts() + " AND " + n.right.fts() + ")"
	case tokOr:
		return "(" + n.left.fts() + " OR " + n.right.fts() + ")"
	default:
		return "(" + n.left.fts() + " NOT " + n.right.fts() + ")"
	}
}

// A searchPlan is how Search finds a query's messages.
type searchPlan struct {
	// index, unless "", drives the search: its MATCH of match finds the
	// candidates, counts them and ranks them (bm25).
	index, match string
	// conds are conditions on m.rowid (m a messages row) for the parts
	// of the query the driving index cannot answer, each through a
	// subquery of the index that can, with their args in order.
	conds []string
	args  []any
	// snippets are where a page's snippets are read from, in order,
	// until each message has one.
	snippets []snippetSource
}

type snippetSource struct{ index, match string }

// planSearch plans the search of a parsed query. A query of one kind of
// term is one MATCH of its index. A query with both whole words and
// prefixes is split at its top-level ANDs and NOTs: the positive parts
// of one kind drive (the stemmed index's when there are any), and every
// other part is a condition answered by subqueries of the two indexes,
// so the set found is exactly the query's. With no part of one kind to
// drive (`deploy* OR release`), there is nothing to rank by: the results
// come newest first.
func planSearch(q *queryNode) searchPlan {
	if ix := q.index(); ix != "" {
		m := q.fts()
		return searchPlan{index: ix, match: m, snippets: []snippetSource{{ix, m}}}
	}
	var pos, neg []*queryNode
	var split func(n *queryNode)
	split = func(n *queryNode) {
		switch n.op {
		case tokAnd:
			split(n.left)
			split(n.right)
		case tokNot:
			split(n.left)
			neg = append(neg, n.right)
		default:
			pos = append(pos, n)
		}
	}
	split(q)
	byIndex := map[string][]string{}
	var p searchPlan
	for _, n := range pos {
		if ix := n.index(); ix != "" {
			byIndex[ix] = append(byIndex[ix], n.fts())
		} else {
			p.cond(n, false)
		}
	}
	for _, ix := range []string{stemmedIndex, plainIndex} {
		if len(byIndex[ix]) == 0 {
			continue
		}
		m := strings.Join(byIndex[ix], " AND ")
		if p.index == "" {
			p.index, p.match = ix, m
		} else {
			p.conds = append(p.conds, `m.rowid IN (SELECT rowid FROM `+ix+` WHERE `+ix+` MATCH ?)`)
			p.args = append(p.args, m)
		}
	}
	for _, n := range neg {
		if p.index != "" && n.index() == p.index {
			p.match = "(" + p.match + ") NOT " + n.fts()
		} else {
			p.cond(n, true)
		}
	}
	// Snippets: the plain index highlights prefixes, and whole words as
	// typed; a message it finds none in has its whole words' other forms,
	// which the stemmed index highlights.
	var plain, stemmed []string
	var leaves func(n *queryNode)
	leaves = func(n *queryNode) {
		switch n.op {
		case tokTerm:
			plain = append(plain, n.fts())
			if !n.prefix {
				stemmed = append(stemmed, n.fts())
			}
		case tokNot:
			leaves(n.left) // what follows NOT is in no message found
		default:
			leaves(n.left)
			leaves(n.right)
		}
	}
	leaves(q)
	p.snippets = append(p.snippets, snippetSource{plainIndex, strings.Join(plain, " OR ")})
	if len(stemmed) > 0 {
		p.snippets = append(p.snippets, snippetSource{stemmedIndex, strings.Join(stemmed, " OR ")})
	}
	return p
}

// cond adds the condition that a message matches n (or, with not, that
// it does not).
func (p *searchPlan) cond(n *queryNode, not bool) {
	c := p.sql(n)
	if not {
		c = "NOT " + c
	}
	p.conds = append(p.conds, c)
}

// sql renders n as a condition on m.rowid, each part of one kind a
// subquery of its index.
func (p *searchPlan) sql(n *queryNode) string {
	if ix := n.index(); ix != "" {
		p.args = append(p.args, n.fts())
		return `m.rowid IN (SELECT rowid FROM ` + ix + ` WHERE ` + ix + ` MATCH ?)`
	}
	l := p.sql(n.left)
	r := p.sql(n.right)
	switch n.op {
	case tokAnd:
		return "(" + l + " AND " + r + ")"
	case tokOr:
		return "(" + l + " OR " + r + ")"
	default:
		return "(" + l + " AND NOT " + r + ")"
	}
}
