package msgindex_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/thrumhq/thrum/internal/msgindex"
	"github.com/thrumhq/thrum/store"
)

// A node closed while it starts may close its index before a Load or a
// Build ever ran (newNode's goroutine gives up on the build when the
// node's context ends before the projection caught up). A listing then
// must fail at once with ErrClosed, not wait for a build that will never
// come (List waits up to a minute for a load).
func TestListOfIndexClosedBeforeBuiltIsErrClosed(t *testing.T) {
	x := msgindex.New()
	x.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, _, _, err := x.List(ctx, store.MessageFilter{Limit: 10}); !errors.Is(err, msgindex.ErrClosed) {
		t.Fatalf("List of an index closed before it was built: %v, want ErrClosed at once", err)
	}
}

// Settled says when listings stop waiting for the index: not before a
// Load, a Build or Close; at once after each.
func TestSettled(t *testing.T) {
	settled := func(x *msgindex.Index) bool {
		select {
		case <-x.Settled():
			return true
		default:
			return false
		}
	}
	st, lg, x, _ := listingFixture(t, 50)
	path := saved(t, x)

	loaded := msgindex.New()
	if settled(loaded) {
		t.Fatal("a new index is settled before any Load or Build")
	}
	if err := loaded.Load(context.Background(), path, lg); err != nil {
		t.Fatal(err)
	}
	if !settled(loaded) {
		t.Fatal("not settled after Load")
	}

	// Build settles the index as it starts, before it has read anything:
	// a cancelled one reads nothing at all.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	building := msgindex.New()
	building.Build(ctx, st)
	if !settled(building) {
		t.Fatal("not settled by a Build")
	}

	closed := msgindex.New()
	closed.Close()
	if !settled(closed) {
		t.Fatal("not settled by Close")
	}
}
