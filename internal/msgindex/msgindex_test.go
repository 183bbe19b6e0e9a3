package msgindex_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/thrumhq/thrum/internal/msgindex"
	"github.com/thrumhq/thrum/store"
)

// Close of a node cancels the index build through its context: a build
// whose context is cancelled stops, and listings report why.
func TestBuildStopsWhenItsContextIsCancelled(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "x.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	x := msgindex.New()
	x.Build(ctx, st)
	if _, _, _, err := x.List(context.Background(), store.MessageFilter{Limit: 10}); !errors.Is(err, context.Canceled) {
		t.Fatalf("List after a cancelled build: %v, want context.Canceled", err)
	}
}

func TestListAfterCloseIsErrClosed(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "x.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	x := msgindex.New()
	x.Build(context.Background(), st)
	if _, _, _, err := x.List(context.Background(), store.MessageFilter{Limit: 10}); err != nil {
		t.Fatalf("List of a built index: %v", err)
	}
	x.Close()
	if _, _, _, err := x.List(context.Background(), store.MessageFilter{Limit: 10}); !errors.Is(err, msgindex.ErrClosed) {
		t.Fatalf("List after Close: %v, want ErrClosed", err)
	}
}
