package msgindex_test

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/internal/msgindex"
)

// Events committed while Build reads the projection wait in pending,
// and their positions are taken as they arrive; the build's own
// positions are the projection's checkpoints. A snapshot of the result,
// loaded and replayed, must list as an index built from the whole
// projection: no event counted by a position without being applied.
func TestSnapshotAfterBuildWithPendingEvents(t *testing.T) {
	ctx := context.Background()
	st, lg, _, filters := listingFixture(t, 300)
	r := rand.New(rand.NewPCG(7, 8))
	x := msgindex.New()
	built0 := built(st)
	old := ids(t, built0)
	commit := func(storeToo bool) []*eventlog.Event {
		evs := tailEvents(r, old, 5)
		if err := lg.Append(ctx, evs...); err != nil {
			t.Fatal(err)
		}
		if storeToo {
			if err := st.Apply(ctx, evs); err != nil {
				t.Fatal(err)
			}
		}
		x.Apply(evs)
		for _, e := range evs {
			if e.Type == eventlog.TypeMessageCreate {
				p, _ := eventlog.PayloadAs[eventlog.MessageCreate](e)
				old = append(old, p.MessageID)
			}
		}
		return evs
	}
	// Before the build starts: some events the build will read too, and
	// some it will not (their store apply comes after its read): both
	// wait in pending, positions taken.
	commit(true)
	late := commit(false)
	done := make(chan struct{})
	go func() {
		defer close(done)
		x.Build(ctx, st)
	}()
	for range 30 {
		evs := tailEvents(r, old, 5)
		if err := lg.Append(ctx, evs...); err != nil {
			t.Fatal(err)
		}
		if err := st.Apply(ctx, evs); err != nil { // as the projector does: the store, then the index
			t.Fatal(err)
		}
		x.Apply(evs)
		for _, e := range evs {
			if e.Type == eventlog.TypeMessageCreate {
				p, _ := eventlog.PayloadAs[eventlog.MessageCreate](e)
				old = append(old, p.MessageID)
			}
		}
	}
	<-done
	if err := st.Apply(ctx, late); err != nil {
		t.Fatal(err)
	}
	want := built(st)
	sameListings(t, x.List, want.List, filters)
	path := saved(t, x)
	// More events past the snapshot, then a load that replays them.
	for range 10 {
		evs := tailEvents(r, old, 5)
		if err := lg.Append(ctx, evs...); err != nil {
			t.Fatal(err)
		}
		if err := st.Apply(ctx, evs); err != nil {
			t.Fatal(err)
		}
	}
	y := msgindex.New()
	if err := y.Load(ctx, path, lg); err != nil {
		t.Fatal(err)
	}
	sameListings(t, y.List, built(st).List, filters)
}
