package thrum

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/identity"
	"github.com/thrumhq/thrum/rpc"
	"github.com/thrumhq/thrum/store"
)

// SearchMessages finds messages by their words: the query's terms in the
// content or the structured payload, with message.list's filters, ranked
// by relevance (bm25; ties newest first) or by time; by time also when
// more than store.RelevanceLimit messages match or the query gives
// nothing to rank by (the result's sort_by says which); the query
// language is the store's (store.SearchFilter). A search shows what
// a listing with the same filters shows: deleted messages only with
// include_deleted, and read state for the caller.
func (n *Node) SearchMessages(ctx context.Context, p *rpc.SearchMessagesParams) (*rpc.SearchMessagesResult, error) {
	page, size, offset, err := pageParams(p.Page, p.PageSize)
	if err != nil {
		return nil, err
	}
	f := store.SearchFilter{
		Query: p.Query, ThreadID: p.ThreadID, AuthorID: identity.NormalizeAgentID(p.AuthorID),
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
	f.Scope, f.Ref = p.Scope, p.Ref
	reader := readerOf(ctx)
	if f.Mentions, err = n.mentionFilter(ctx, p.MentionRole, p.Mentions); err != nil {
		return nil, err
	}
	hits, total, byTime, err := n.store.Search(ctx, f)
	if errors.Is(err, store.ErrBadQuery) {
		return nil, invalid("%s", err.Error())
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
	local, err := n.localIdentities(ctx)
	if err != nil {
		return nil, err
	}
	for _, h := range hits {
		m := byID[h.MessageID]
		if m == nil {
			continue // cannot happen: both reads see messages, which rows never leave
		}
		r := rpc.SearchResult{MessageSummary: n.summary(m, local)}
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
