package msgindex_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/internal/msgindex"
	"github.com/thrumhq/thrum/store"
)

// While the index builds after start, listings are answered by
// store.MessageIDs: it must give the index's answer, page and counts,
// for every filter, sort and page. Messages share timestamps (ties),
// are edited, deleted, read, proxied, threaded, scoped and mentioned.
func TestSQLiteListingEqualsIndex(t *testing.T) {
	st, _, x, filters := listingFixture(t, 300)
	if len(filters) < 500 {
		t.Fatalf("only %d filters to check", len(filters))
	}
	sameListings(t, st.MessageIDs, x.List, filters)
}

// listingFixture is a log of msgs messages and msgs/5 edits, deletes and
// reads, its projection, its built index, and over 500 filters to list
// with.
func listingFixture(t testing.TB, msgs int) (*store.Store, *eventlog.Log, *msgindex.Index, []store.MessageFilter) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	lg, err := eventlog.Open(dir, &eventlog.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lg.Close() })
	r := rand.New(rand.NewPCG(1, 2))
	agents := []string{"ann", "bob", "cat", "dan"}
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var ids []string
	edited := "y"
	var evs []*eventlog.Event
	for i := range msgs {
		from := agents[r.IntN(len(agents))]
		p := eventlog.MessageCreate{MessageID: fmt.Sprintf("msg_%03d", r.IntN(1000)*1000+i), AgentID: from, SessionID: "ses_" + from,
			Format: "markdown", Content: "x", Priority: "normal"}
		if r.IntN(3) == 0 {
			p.ThreadID = fmt.Sprintf("thr_%d", r.IntN(3))
		}
		if r.IntN(4) == 0 {
			p.Scopes = []eventlog.Pair{{Type: "module", Value: fmt.Sprintf("m%d", r.IntN(3))}}
		}
		if r.IntN(5) == 0 {
			p.Refs = append(p.Refs, eventlog.Pair{Type: "issue", Value: fmt.Sprintf("%d", r.IntN(3))})
		}
		for range r.IntN(3) {
			p.Refs = append(p.Refs, eventlog.Pair{Type: "mention", Value: []string{"bob", "reviewer", "cat", "everyone"}[r.IntN(4)]})
		}
		if r.IntN(10) == 0 {
			p.ActingAs = "user:leo"
		}
		evs = append(evs, &eventlog.Event{Type: eventlog.TypeMessageCreate, Shard: from, Time: base.Add(time.Duration(i/3) * time.Second), Payload: p})
		ids = append(ids, p.MessageID)
	}
	for i := range msgs / 5 {
		id := ids[r.IntN(len(ids))]
		at := base.Add(time.Duration(100+i/2) * time.Second)
		switch r.IntN(3) {
		case 0:
			evs = append(evs, &eventlog.Event{Type: eventlog.TypeMessageEdit, Shard: "ann", Time: at,
				Payload: eventlog.MessageEdit{MessageID: id, AgentID: "ann", Content: &edited}})
		case 1:
			evs = append(evs, &eventlog.Event{Type: eventlog.TypeMessageDelete, Shard: "ann", Time: at,
				Payload: eventlog.MessageDelete{MessageID: id, AgentID: "ann"}})
		default:
			reader := agents[r.IntN(len(agents))]
			evs = append(evs, &eventlog.Event{Type: eventlog.TypeMessageRead, Shard: reader, Time: at,
				Payload: eventlog.MessageRead{AgentID: reader, SessionID: "ses_" + reader, MessageIDs: []string{id, ids[r.IntN(len(ids))]}}})
		}
	}
	if err := lg.Append(ctx, evs...); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(filepath.Join(t.TempDir(), "p.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := st.CatchUp(ctx, lg); err != nil {
		t.Fatal(err)
	}
	x := msgindex.New()
	x.Build(ctx, st)

	return st, lg, x, listingFilters()
}

// listingFilters returns over 500 filters of the fixtures' agents,
// threads, scopes, refs and mentions, with every sort, and pages at the
// start, the middle and past the end.
func listingFilters() []store.MessageFilter {
	var filters []store.MessageFilter
	for _, reader := range []string{"", "bob", "nobody"} {
		for _, unread := range []bool{false, true} {
			if unread && reader == "" {
				continue
			}
			for _, sortBy := range []string{"", "updated_at"} {
				for _, asc := range []bool{false, true} {
					for _, page := range [][2]int{{0, 10}, {25, 50}, {0, 1000}, {290, 10}} {
						f := store.MessageFilter{Reader: reader, Unread: unread, SortBy: sortBy, Asc: asc, Offset: page[0], Limit: page[1]}
						filters = append(filters, f)
					}
				}
			}
		}
	}
	narrow := func(f store.MessageFilter, i int) store.MessageFilter {
		switch i % 9 {
		case 0:
			f.ThreadID = "thr_1"
		case 1:
			f.AuthorID = "cat"
		case 2:
			f.Scope = &eventlog.Pair{Type: "module", Value: "m2"}
		case 3:
			f.Ref = &eventlog.Pair{Type: "issue", Value: "1"}
		case 4:
			f.Mentions = []string{"bob", "reviewer"}
		case 5:
			f.Mentions = []string{}
		case 6:
			f.Mentions = []string{"nobody"}
		case 7:
			f.IncludeDeleted = true
		}
		return f
	}
	var all []store.MessageFilter
	for i, f := range filters {
		for j := range 9 {
			all = append(all, narrow(f, i+j))
		}
	}
	return all
}
