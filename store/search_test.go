package store_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/store"
)

// TestSearchManyMatches covers the plans of a query matching more than
// RelevanceLimit messages: newest first (said by byTime), by probing
// messages newest first for an early page and by sorting every match for
// a deep one, the same answer either way; the total counted by the index
// alone (deleted matches taken off) and through the join (with a filter).
func TestSearchManyMatches(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(filepath.Join(t.TempDir(), "p.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	n := store.RelevanceLimit * 2
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var evs []*eventlog.Event
	var newestFirst []string // live messages with "common", newest first
	deleted := map[string]bool{}
	byAuthor := 0
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("msg_%05d", i)
		author := []string{"alice", "bob", "carol"}[i%3]
		content := "common words here"
		if i%2 == 0 {
			content = "common and rare"
		}
		// Insertion order is not time order (as after a sync): every
		// tenth message is an hour older than its neighbours.
		at := t0.Add(time.Duration(i) * time.Second)
		if i%10 == 0 {
			at = at.Add(-time.Hour)
		}
		evs = append(evs, &eventlog.Event{ID: eventlog.NewID(), Time: at, Type: eventlog.TypeMessageCreate, Shard: author,
			Payload: eventlog.MessageCreate{MessageID: id, AgentID: author, SessionID: "ses", Format: "markdown", Content: content, Priority: "normal"}})
		if i%7 == 0 {
			evs = append(evs, &eventlog.Event{ID: eventlog.NewID(), Time: at, Type: eventlog.TypeMessageDelete, Shard: author,
				Payload: eventlog.MessageDelete{MessageID: id, AgentID: author}})
			deleted[id] = true
		}
	}
	if err := st.Apply(ctx, evs); err != nil {
		t.Fatal(err)
	}
	type row struct {
		id string
		at time.Time
	}
	var live []row
	for _, e := range evs {
		if p, ok := e.Payload.(eventlog.MessageCreate); ok && !deleted[p.MessageID] {
			live = append(live, row{p.MessageID, e.Time})
			if p.AgentID == "bob" {
				byAuthor++
			}
		}
	}
	slices.SortFunc(live, func(a, b row) int {
		if c := b.at.Compare(a.at); c != 0 {
			return c
		}
		if a.id > b.id {
			return -1
		}
		return 1
	})
	for _, r := range live {
		newestFirst = append(newestFirst, r.id)
	}

	for _, tc := range []struct {
		name          string
		offset, limit int
	}{{"early page (probe)", 0, 10}, {"deep page (sort)", 1500, 10}, {"last page", len(newestFirst) - 5, 10}} {
		t.Run(tc.name, func(t *testing.T) {
			hits, total, byTime, err := st.Search(ctx, store.SearchFilter{Query: "common", Offset: tc.offset, Limit: tc.limit})
			if err != nil {
				t.Fatal(err)
			}
			if total != len(newestFirst) || !byTime {
				t.Fatalf("total %d (want %d), byTime %v (want true past %d)", total, len(newestFirst), byTime, store.RelevanceLimit)
			}
			var ids []string
			for _, h := range hits {
				ids = append(ids, h.MessageID)
				if h.Snippet == "" {
					t.Fatalf("no snippet for %s", h.MessageID)
				}
			}
			want := newestFirst[tc.offset:min(tc.offset+tc.limit, len(newestFirst))]
			if !slices.Equal(ids, want) {
				t.Fatalf("page %v, want %v", ids, want)
			}
		})
	}
	_, total, _, err := st.Search(ctx, store.SearchFilter{Query: "common", IncludeDeleted: true, Limit: 1})
	if err != nil || total != n {
		t.Fatalf("with deleted: %d %v, want %d", total, err, n)
	}
	_, total, byTime, err := st.Search(ctx, store.SearchFilter{Query: "common", AuthorID: "bob", Limit: 1})
	if err != nil || total != byAuthor || byTime {
		t.Fatalf("by bob: %d byTime %v %v, want %d ranked by relevance", total, byTime, err, byAuthor)
	}
	if _, _, _, err := st.Search(ctx, store.SearchFilter{Query: "common AND"}); !errors.Is(err, store.ErrBadQuery) {
		t.Fatalf("bad match: %v", err)
	}
	if err := st.CheckSearchIndex(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestRebuildCutShortFinishesSearchIndex: a Rebuild loads messages
// without the search triggers and builds the index at the end; if it is
// cut short, the next open builds it.
func TestRebuildCutShortFinishesSearchIndex(t *testing.T) {
	ctx := context.Background()
	_, evs := events(t)
	path := filepath.Join(t.TempDir(), "p.db")
	bulk, err := store.OpenBulk(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := bulk.Apply(ctx, evs); err != nil { // loaded, the index not built: then a crash
		t.Fatal(err)
	}
	bulk.Close()
	st, err := store.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.CheckSearchIndex(ctx); err != nil {
		t.Fatal(err)
	}
	hits, total, _, err := st.Search(ctx, store.SearchFilter{Query: "edited", IncludeDeleted: true, Limit: 10})
	if err != nil || total != 1 || len(hits) != 1 || hits[0].MessageID != "msg_1" {
		t.Fatalf("search after the cut-short rebuild: %+v %d %v", hits, total, err)
	}
}
