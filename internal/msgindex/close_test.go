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
