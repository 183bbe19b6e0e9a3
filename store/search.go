package store

import (
	"context"
	"fmt"
	"strings"

	"github.com/thrumhq/thrum/eventlog"
)

// SearchFilter selects messages by their words (Query) and the
// listing's filters. Zero fields do not filter.
type SearchFilter struct {
	// Query is a person's search query. Words separated by spaces must
	// all appear, each also in its other forms ("tokens" finds
	// "token"); "a phrase" must appear as written, word for word in any
	// of their forms; a word or phrase followed by * is a prefix, which
	// matches the beginnings of the words as written (deploy* finds
	// "deployment"; "auth tok"* finds "auth token", its words before
	// the last exactly). AND, OR and NOT (upper case) and parentheses
	// combine them, NOT binding tightest and OR loosest: `token NOT
	// jwt`, `(review OR reviewer) auth*`. NOT excludes from what stands
	// before it, so a query cannot start with it. Punctuation inside a
	// word splits it into a phrase ("user_id" is "user id"); a word of
	// punctuation only is ignored.
	Query    string
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

// RelevanceLimit is how many matches a search ranks by relevance at
// most: bm25 must score every match, which costs about 5-10 µs each, so
// past this a search returns the newest matches first instead (and says
// so). A query matching that many messages is a common word, whose
// relevance ranking says little.
const RelevanceLimit = 2000

// Search returns one page of the messages matching f, most relevant
// first (ties to the newer message), or newest first with f.ByTime,
// when more than RelevanceLimit match, or when the query has nothing to
// rank by (see planSearch); byTime then is true. It also returns how
// many match in all. A query Search refuses is an error matching
// ErrBadQuery.
func (s *Store) Search(ctx context.Context, f SearchFilter) (hits []SearchHit, total int, byTime bool, err error) {
	q, err := parseQuery(f.Query)
	if err != nil {
		return nil, 0, false, err
	}
	if f.Mentions != nil && len(f.Mentions) == 0 {
		return nil, 0, f.ByTime, nil
	}
	// Every message committed before the search is found: index what the
	// last batch left. If that fails (a full disk), search what is indexed.
	_ = s.IndexPending(ctx)
	plan := planSearch(q)
	conds, args := plan.conds, plan.args
	pairs := func(table, col, typ string, values ...string) {
		conds = append(conds, `m.message_id IN (SELECT message_id FROM `+table+` WHERE `+col+`_type = ? AND `+col+`_value IN (`+placeholders(len(values))+`))`)
		args = append(args, typ)
		for _, v := range values {
			args = append(args, v)
		}
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
	filtered := len(conds) > 0
	if !f.IncludeDeleted {
		conds = append(conds, `COALESCE(m.deleted, 0) = 0`)
	}
	ix := plan.index
	var where, join string
	if ix != "" {
		conds = append([]string{ix + ` MATCH ?`}, conds...)
		args = append([]any{plan.match}, args...)
		join = ` FROM ` + ix + ` JOIN messages m ON m.rowid = ` + ix + `.rowid`
	} else {
		join = ` FROM messages m`
	}
	where = ` WHERE ` + strings.Join(conds, ` AND `)
	join += where

	// The total. With no filter but the deleted flag, the index counts
	// alone and the few deleted matches are taken off (the join would
	// read a messages row per match).
	if filtered || ix == "" {
		err = s.get(ctx, &total, `SELECT COUNT(*)`+join, args...)
	} else {
		err = s.get(ctx, &total, `SELECT COUNT(*) FROM `+ix+` WHERE `+ix+` MATCH ?`, plan.match)
		if err == nil && !f.IncludeDeleted {
			var deleted int
			err = s.get(ctx, &deleted, `SELECT COUNT(*) FROM `+ix+` WHERE `+ix+` MATCH ?
				AND rowid IN (SELECT rowid FROM messages WHERE deleted = 1)`, plan.match)
			total -= deleted
		}
	}
	if err != nil {
		return nil, 0, false, searchErr(err)
	}
	byTime = f.ByTime || total > RelevanceLimit || ix == ""
	offset, limit := max(f.Offset, 0), max(f.Limit, 0)
	if limit == 0 || offset >= total {
		return nil, total, byTime, nil
	}
	const newest = ` ORDER BY m.created_at DESC, m.message_id DESC LIMIT ? OFFSET ?`
	var sq string
	switch {
	case !byTime:
		// The page first, with no snippet: SQLite would compute the
		// result columns of every match before sorting them.
		sq = `SELECT m.message_id, m.rowid, bm25(` + ix + `) AS score` + join +
			` ORDER BY score, m.created_at DESC, m.message_id DESC LIMIT ? OFFSET ?`
	case ix != "" && s.probeNewest(ctx, total, offset+limit):
		// Many matches and an early page: walk messages newest first and
		// ask the index about each, stopping at the page's end.
		sq = `SELECT m.message_id, m.rowid, 0 FROM messages m CROSS JOIN ` + ix + ` ON ` + ix + `.rowid = m.rowid` +
			where + newest
	default:
		sq = `SELECT m.message_id, m.rowid, 0` + join + newest
	}
	rows, err := s.query(ctx, sq, append(args, limit, offset)...)
	if err != nil {
		return nil, 0, false, searchErr(err)
	}
	var rowids []int64
	for rows.Next() {
		var h SearchHit
		var rowid int64
		if err := rows.Scan(&h.MessageID, &rowid, &h.Score); err != nil {
			rows.Close()
			return nil, 0, false, err
		}
		hits = append(hits, h)
		rowids = append(rowids, rowid)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, 0, false, searchErr(err)
	}
	if len(hits) == 0 {
		return nil, total, byTime, nil
	}
	// Then the page's snippets.
	snippets := make(map[int64]string, len(hits))
	for _, src := range plan.snippets {
		var missing []any
		for _, r := range rowids {
			if _, ok := snippets[r]; !ok {
				missing = append(missing, r)
			}
		}
		if len(missing) == 0 {
			break
		}
		if err := s.snippets(ctx, src, missing, snippets); err != nil {
			return nil, 0, false, searchErr(err)
		}
	}
	for i := range hits {
		hits[i].Snippet = snippets[rowids[i]]
	}
	return hits, total, byTime, nil
}

// snippets adds to out the snippets src gives of the messages rowids.
func (s *Store) snippets(ctx context.Context, src snippetSource, rowids []any, out map[int64]string) error {
	q := `SELECT rowid, snippet(` + src.index + `, -1, ?, ?, ?, ?) FROM ` + src.index + ` WHERE ` + src.index + ` MATCH ? AND rowid IN (` + placeholders(len(rowids)) + `)`
	args := append([]any{SnippetOpen, SnippetClose, SnippetEllipsis, SnippetTokens, src.match}, rowids...)
	rows, err := s.query(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var rowid int64
		var snip *string
		if err := rows.Scan(&rowid, &snip); err != nil {
			return err
		}
		if snip != nil {
			out[rowid] = *snip
		}
	}
	return rows.Err()
}

// probeNewest reports whether a page ending at end of the newest of
// total matches is found faster by walking messages newest first and
// probing the index for each (about 300 µs a probe, and about
// end*messages/total probes) than by reading every match through the
// index and sorting them (about 3 µs each).
func (s *Store) probeNewest(ctx context.Context, total, end int) bool {
	var n int64
	if err := s.get(ctx, &n, `SELECT COALESCE(MAX(rowid), 0) FROM messages`); err != nil || total == 0 {
		return false
	}
	return 100*int64(end)*n < int64(total)*int64(total)
}

// searchErr marks SQLite's errors about a match expression as
// ErrBadQuery, keeping SQLite's words ("fts5: syntax error near …").
// parseQuery's queries always parse (FuzzSearchQuery), so this is only
// SQLite's word on anything it still refuses.
func searchErr(err error) error {
	msg := err.Error()
	for _, s := range []string{"fts5:", "unterminated string", "no such column"} {
		if i := strings.Index(msg, s); i >= 0 {
			return badQuery("query: the search index refused it: %s", strings.TrimSuffix(msg[i:], " (1)"))
		}
	}
	return fmt.Errorf("store: search: %w", err)
}

// IndexPending adds the messages applied since the last call to the
// search index, in one transaction: a send's commit does not pay for the
// index (FTS5 writes a segment per transaction), the store indexes every
// checkpoint tick (250 ms) and before every search, so a search finds
// every message committed before it.
func (s *Store) IndexPending(ctx context.Context) error {
	s.searchMu.Lock()
	defer s.searchMu.Unlock()
	if !s.searchDirty.Swap(false) {
		return nil
	}
	err := s.indexPending(ctx)
	if err != nil {
		s.searchDirty.Store(true)
	}
	return err
}

func (s *Store) indexPending(ctx context.Context) error {
	s.ap.mu.Lock() // the writer connection is the applier's
	defer s.ap.mu.Unlock()
	tx, err := s.w.BeginTxx(ctx, nil)
	if err != nil {
		return fmt.Errorf("store: index for search: %w", err)
	}
	defer tx.Rollback()
	var mark, top int64
	if err := tx.GetContext(ctx, &mark, `SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'search_indexed'`); err != nil {
		return fmt.Errorf("store: index for search: %w", err)
	}
	if err := tx.GetContext(ctx, &top, `SELECT COALESCE(MAX(rowid), 0) FROM messages`); err != nil {
		return fmt.Errorf("store: index for search: %w", err)
	}
	if top <= mark {
		return nil
	}
	for _, ix := range []string{stemmedIndex, plainIndex} {
		if _, err := tx.ExecContext(ctx, `INSERT INTO `+ix+`(rowid, body_content, body_structured)
			SELECT rowid, body_content, body_structured FROM messages WHERE rowid > ? AND rowid <= ? ORDER BY rowid`, mark, top); err != nil {
			return fmt.Errorf("store: index for search: %w", err)
		}
	}
	if _, err := tx.ExecContext(ctx, `UPDATE meta SET value = ? WHERE key = 'search_indexed'`, top); err != nil {
		return fmt.Errorf("store: index for search: %w", err)
	}
	return tx.Commit()
}

// CheckSearchIndex compares the full-text indexes with the messages they
// index, and returns an error if they differ.
func (s *Store) CheckSearchIndex(ctx context.Context) error {
	if err := s.IndexPending(ctx); err != nil {
		return err
	}
	for _, ix := range []string{stemmedIndex, plainIndex} {
		if _, err := s.w.ExecContext(ctx, `INSERT INTO `+ix+`(`+ix+`, rank) VALUES('integrity-check', 1)`); err != nil {
			return fmt.Errorf("store: the search index does not match the messages (%s): %w", ix, err)
		}
	}
	return nil
}
