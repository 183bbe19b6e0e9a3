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

// An index kept current by Apply lists what SQLite lists, page and
// counts, with events out of time order: messages older than some
// already there, reads before their message, edits that move a message
// in the updated order (some back in time), deletes (edits and deletes
// come after their message), messages written as a user's proxy, and
// mentions of names, roles and groups in any mix
// (a group is resolved by the caller, so a change of its members is a
// change of the filter's mentions). So does the same index built from
// SQLite, and saved and loaded.
func TestAppliedIndexListsAsSQLite(t *testing.T) {
	for seed := range uint64(2) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			ctx := context.Background()
			r := rand.New(rand.NewPCG(seed, 17))
			lg, err := eventlog.Open(t.TempDir(), &eventlog.Options{NoSync: true})
			if err != nil {
				t.Fatal(err)
			}
			defer lg.Close()
			st, err := store.Open(filepath.Join(t.TempDir(), "p.db"), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			x := built(st) // empty: every message comes through Apply
			evs := shuffledEvents(r, 200)
			for len(evs) > 0 {
				batch := evs[:min(1+r.IntN(30), len(evs))]
				evs = evs[len(batch):]
				if err := lg.Append(ctx, batch...); err != nil {
					t.Fatal(err)
				}
				if err := st.Apply(ctx, batch); err != nil {
					t.Fatal(err)
				}
				x.Apply(batch)
				sameListings(t, x.List, st.MessageIDs, randomFilters(r, 5))
			}
			filters := randomFilters(r, 200)
			sameListings(t, x.List, st.MessageIDs, filters)
			// The others against x, which is quicker than SQLite.
			sameListings(t, built(st).List, x.List, filters)
			y := msgindex.New()
			if err := y.Load(ctx, saved(t, x), lg); err != nil {
				t.Fatal(err)
			}
			sameListings(t, y.List, x.List, filters)
			// And the loaded index keeps current as the applied one does.
			more := shuffledEvents(r, 50)
			if err := lg.Append(ctx, more...); err != nil {
				t.Fatal(err)
			}
			if err := st.Apply(ctx, more); err != nil {
				t.Fatal(err)
			}
			y.Apply(more)
			sameListings(t, y.List, st.MessageIDs, filters)
		})
	}
}

var (
	eqAgents   = []string{"ann", "bob", "cat", "dan"}
	eqMentions = []string{"bob", "reviewer", "cat", "everyone", "backend"}
)

// shuffledEvents makes about msgs messages and as many edits, deletes and
// reads, as several machines would sync them: created times out of log
// order and shared, reads of messages not yet there (or never), edits
// and deletes after their message, some edits dated before it.
func shuffledEvents(r *rand.Rand, msgs int) []*eventlog.Event {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func() time.Time { return base.Add(time.Duration(r.IntN(msgs/2)) * time.Second) }
	edited := "e"
	var ids, made []string // every message, and those created so far
	// A message's edits come in any time order, all from ann's shard: the
	// latest edit's time stands, however they arrive.
	for i := range msgs {
		ids = append(ids, fmt.Sprintf("msg_%d_%06d", r.IntN(1e6), i))
	}
	var evs []*eventlog.Event
	for len(made) < len(ids) {
		switch k := r.IntN(10); {
		case k < 5:
			id := ids[len(made)]
			made = append(made, id)
			from := eqAgents[r.IntN(len(eqAgents))]
			p := eventlog.MessageCreate{MessageID: id, AgentID: from, SessionID: "ses_" + from, Format: "markdown", Content: "x", Priority: "normal"}
			if r.IntN(3) == 0 {
				p.ThreadID = fmt.Sprintf("thr_%d", r.IntN(3))
			}
			if r.IntN(3) == 0 {
				p.Scopes = []eventlog.Pair{{Type: "module", Value: fmt.Sprintf("m%d", r.IntN(3))}}
			}
			if r.IntN(4) == 0 {
				p.Refs = append(p.Refs, eventlog.Pair{Type: "issue", Value: fmt.Sprint(r.IntN(3))})
			}
			for range r.IntN(4) { // sometimes one twice
				p.Refs = append(p.Refs, eventlog.Pair{Type: "mention", Value: eqMentions[r.IntN(len(eqMentions))]})
			}
			if r.IntN(8) == 0 {
				p.ActingAs = "user:leo"
			}
			evs = append(evs, &eventlog.Event{Type: eventlog.TypeMessageCreate, Shard: from, Time: at(), Payload: p})
		case k < 7 && len(made) > 0:
			id := made[r.IntN(len(made))]
			evs = append(evs, &eventlog.Event{Type: eventlog.TypeMessageEdit, Shard: "ann", Time: at(),
				Payload: eventlog.MessageEdit{MessageID: id, AgentID: "ann", Content: &edited}})
		case k < 8 && len(made) > 0:
			id := made[r.IntN(len(made))]
			evs = append(evs, &eventlog.Event{Type: eventlog.TypeMessageDelete, Shard: "ann", Time: at(),
				Payload: eventlog.MessageDelete{MessageID: id, AgentID: "ann"}})
		default:
			reader := eqAgents[r.IntN(len(eqAgents))]
			read := []string{ids[r.IntN(len(ids))], "msg_never"}
			if len(made) > 0 {
				read = append(read, made[r.IntN(len(made))])
			}
			evs = append(evs, &eventlog.Event{Type: eventlog.TypeMessageRead, Shard: reader, Time: at(),
				Payload: eventlog.MessageRead{AgentID: reader, SessionID: "ses_" + reader, MessageIDs: read}})
		}
	}
	return evs
}

// randomFilters returns n filters, each of several narrowings at once.
func randomFilters(r *rand.Rand, n int) []store.MessageFilter {
	pick := func(s []string) string { return s[r.IntN(len(s))] }
	var out []store.MessageFilter
	for range n {
		f := store.MessageFilter{Offset: r.IntN(4) * r.IntN(60), Limit: 1 + r.IntN(60), Asc: r.IntN(2) == 0, IncludeDeleted: r.IntN(4) == 0}
		if r.IntN(2) == 0 {
			f.SortBy = "updated_at"
		}
		if r.IntN(2) == 0 {
			f.Reader = pick(append(eqAgents, "nobody"))
			f.Unread = r.IntN(2) == 0
		}
		if r.IntN(4) == 0 {
			f.ThreadID = pick([]string{"thr_0", "thr_1", "thr_2", "thr_none"})
		}
		if r.IntN(4) == 0 {
			f.AuthorID = pick(append(eqAgents, "thr_0"))
		}
		if r.IntN(4) == 0 {
			f.Scope = &eventlog.Pair{Type: "module", Value: pick([]string{"m0", "m1", "m2", "m9"})}
		}
		if r.IntN(5) == 0 {
			f.Ref = &eventlog.Pair{Type: "issue", Value: pick([]string{"0", "1", "2"})}
		}
		if r.IntN(2) == 0 {
			f.Mentions = []string{}
			for range r.IntN(4) {
				f.Mentions = append(f.Mentions, pick(append(eqMentions, "nobody")))
			}
		}
		out = append(out, f)
	}
	return out
}
