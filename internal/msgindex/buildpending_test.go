package msgindex_test

import (
	"context"
	"testing"

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
	x := msgindex.New()
	tl := newTail(t, 7, lg, built(st))
	// Before the build starts: some events the build will read too, and
	// some it will not (their store apply comes after its read): both
	// wait in pending, positions taken.
	tl.commit(5, st, x)
	late := tl.commit(5, nil, x)
	done := make(chan struct{})
	go func() {
		defer close(done)
		x.Build(ctx, st)
	}()
	for range 30 {
		tl.commit(5, st, x)
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
		tl.commit(5, st, nil)
	}
	y := msgindex.New()
	if err := y.Load(ctx, path, lg); err != nil {
		t.Fatal(err)
	}
	sameListings(t, y.List, built(st).List, filters)
}
