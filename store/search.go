package store

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/thrumhq/thrum/eventlog"
)

// SearchFilter selects messages by their words (Match) and the listing's
// filters. Zero fields do not filter.
type SearchFilter struct {
	// Match is an FTS5 query expression over messages_fts. The caller
	// builds it (the node parses a person's query into one whose every
	// term is a quoted string), so it holds no column filter.
	Match    string
	Scope    *eventlog.Pair
	Ref      *eventlog.Pair
	ThreadID string
	AuthorID string
	// Mentions, when non-nil, keeps messages with a mention ref whose
	// value is one of these (an empty non-nil slice matches nothing).
	Mentions []string
	// Since and Until bound created_at (inclusive), in
	// eventlog.TimeFormat; "" leaves that end open.
	Since, Until   string
	IncludeDeleted bool
	// ByTime orders newest first instead of by relevance.
	ByTime        bool
	Limit, Offset int
}

// SearchHit is one message a search found.
type SearchHit struct {
	MessageID string
	// Score is bm25's: lower is more relevant.
	Score float64
	// Snippet is the best excerpt of the matching column, at most about
	// SnippetTokens words, with each match between SnippetOpen and
	// SnippetClose and cut ends marked with SnippetEllipsis.
	Snippet string
}

// The snippet's markers: control characters no message is expected to
// hold (the node strips them from the text it returns).
const (
	SnippetOpen     = "\x01"
	SnippetClose    = "\x02"
	SnippetEllipsis = "…"
	SnippetTokens   = 24
)

// ErrBadQuery wraps SQLite's refusal of a Match expression.
var ErrBadQuery = errors.New("store: bad search query")

// Search returns one page of the messages matching f, most relevant
// first (or newest first with f.ByTime), with their snippets, and how
// many match in all. Ties in relevance go to the newer message.
func (s *Store) Search(ctx context.Context, f SearchFilter) ([]SearchHit, int, error) {
	if f.Mentions != nil && len(f.Mentions) == 0 {
		return nil, 0, nil
	}
	conds := []string{`messages_fts MATCH ?`}
	args := []any{f.Match}
	pairs := func(table, col, typ string, values ...string) {
		conds = append(conds, `m.message_id IN (SELECT message_id FROM `+table+` WHERE `+col+`_type = ? AND `+col+`_value IN (`+placeholders(len(values))+`))`)
		args = append(args, typ)
		for _, v := range values {
			args = append(args, v)
		}
	}
	if !f.IncludeDeleted {
		conds = append(conds, `COALESCE(m.deleted, 0) = 0`)
	}
	if f.ThreadID != "" {
		conds, args = append(conds, `m.thread_id = ?`), append(args, f.ThreadID)
	}
	if f.AuthorID != "" {
		conds, args = append(conds, `m.agent_id = ?`), append(args, f.AuthorID)
	}
	if f.Since != "" {
		conds, args = append(conds, `m.created_at >= ?`), append(args, f.Since)
	}
	if f.Until != "" {
		conds, args = append(conds, `m.created_at <= ?`), append(args, f.Until)
	}
	if f.Scope != nil {
		pairs("message_scopes", "scope", f.Scope.Type, f.Scope.Value)
	}
	if f.Ref != nil {
		pairs("message_refs", "ref", f.Ref.Type, f.Ref.Value)
	}
	if f.Mentions != nil {
		pairs("message_refs", "ref", "mention", f.Mentions...)
	}
	from := ` FROM messages_fts JOIN messages m ON m.rowid = messages_fts.rowid WHERE ` + strings.Join(conds, ` AND `)

	var total int
	if err := s.get(ctx, &total, `SELECT COUNT(*)`+from, args...); err != nil {
		return nil, 0, searchErr(err)
	}
	offset, limit := max(f.Offset, 0), max(f.Limit, 0)
	if limit == 0 || offset >= total {
		return nil, total, nil
	}
	order := ` ORDER BY score, m.created_at DESC, m.message_id DESC`
	if f.ByTime {
		order = ` ORDER BY m.created_at DESC, m.message_id DESC`
	}
	// The page first, with no snippet: SQLite would compute the result
	// columns of every match before sorting them.
	rows, err := s.query(ctx, `SELECT m.message_id, messages_fts.rowid, bm25(messages_fts) AS score`+from+order+` LIMIT ? OFFSET ?`,
		append(args, limit, offset)...)
	if err != nil {
		return nil, 0, searchErr(err)
	}
	var hits []SearchHit
	var rowids []any
	for rows.Next() {
		var h SearchHit
		var rowid int64
		if err := rows.Scan(&h.MessageID, &rowid, &h.Score); err != nil {
			rows.Close()
			return nil, 0, err
		}
		hits = append(hits, h)
		rowids = append(rowids, rowid)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, 0, searchErr(err)
	}
	if len(hits) == 0 {
		return nil, total, nil
	}
	// Then the page's snippets.
	q := `SELECT rowid, snippet(messages_fts, -1, ?, ?, ?, ?) FROM messages_fts WHERE messages_fts MATCH ? AND rowid IN (` + placeholders(len(rowids)) + `)`
	sargs := append([]any{SnippetOpen, SnippetClose, SnippetEllipsis, SnippetTokens, f.Match}, rowids...)
	srows, err := s.query(ctx, q, sargs...)
	if err != nil {
		return nil, 0, searchErr(err)
	}
	defer srows.Close()
	snippets := make(map[int64]string, len(hits))
	for srows.Next() {
		var rowid int64
		var snip *string
		if err := srows.Scan(&rowid, &snip); err != nil {
			return nil, 0, err
		}
		if snip != nil {
			snippets[rowid] = *snip
		}
	}
	if err := srows.Err(); err != nil {
		return nil, 0, searchErr(err)
	}
	for i := range hits {
		hits[i].Snippet = snippets[rowids[i].(int64)]
	}
	return hits, total, nil
}

// searchErr marks SQLite's errors about the query expression as
// ErrBadQuery, keeping SQLite's words ("fts5: syntax error near …").
func searchErr(err error) error {
	msg := err.Error()
	for _, s := range []string{"fts5:", "unterminated string", "no such column"} {
		if i := strings.Index(msg, s); i >= 0 {
			return fmt.Errorf("%w: %s", ErrBadQuery, strings.TrimSuffix(msg[i:], " (1)"))
		}
	}
	return fmt.Errorf("store: search: %w", err)
}

// CheckSearchIndex compares the full-text index with the messages it
// indexes, and returns an error if they differ.
func (s *Store) CheckSearchIndex(ctx context.Context) error {
	if _, err := s.w.ExecContext(ctx, `INSERT INTO messages_fts(messages_fts, rank) VALUES('integrity-check', 1)`); err != nil {
		return fmt.Errorf("store: the search index does not match the messages: %w", err)
	}
	return nil
}
