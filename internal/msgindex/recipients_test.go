package msgindex_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/thrumhq/thrum/store"
)

// EXPERIMENT: SQLite alone (store.ListMessageIDs over the recipients
// tables) gives the index's answer, written at apply time and filled
// into a projection made without them.
func TestRecipientsListingEqualsIndex(t *testing.T) {
	ctx := context.Background()
	plain, lg, x, filters := listingFixture(t, 300)
	applied, err := store.Open(filepath.Join(t.TempDir(), "r.db"), &store.Options{Recipients: true})
	if err != nil {
		t.Fatal(err)
	}
	defer applied.Close()
	if _, err := applied.CatchUp(ctx, lg); err != nil {
		t.Fatal(err)
	}
	sameListings(t, applied.ListMessageIDs, x.List, filters)
	path := plain.Path()
	plain.Close()
	filled, err := store.Open(path, &store.Options{Recipients: true})
	if err != nil {
		t.Fatal(err)
	}
	defer filled.Close()
	sameListings(t, filled.ListMessageIDs, x.List, filters)
}
