package thrum_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/internal/thrumtest"
	"github.com/thrumhq/thrum/rpc"
)

// FuzzListParams calls ListMessages, ListThreads and GetThread with
// arbitrary paging, sorting and filter parameters on one small node, and
// checks that none panics, every error is an invalid-params or not-found
// *rpc.Error, a page never holds more than page_size items, and a page past
// the last one is empty.
func FuzzListParams(f *testing.F) {
	ctx := context.Background()
	n := thrumtest.OpenNode(f, &thrum.Options{NoSync: true})
	thrumtest.Register(f, n, "alice", "dev", "m")
	thrumtest.Register(f, n, "bob", "dev", "m")
	alice := thrum.AsAgent(ctx, "alice")
	th, err := n.CreateThread(alice, &rpc.CreateThreadParams{Title: "t", Recipient: "@bob", Message: &rpc.ThreadMessage{Content: "first"}})
	if err != nil {
		f.Fatal(err)
	}
	for i := range 25 {
		p := &rpc.SendMessageParams{Content: fmt.Sprintf("m%d", i), Mentions: []string{"@bob"}}
		if i%3 == 0 {
			p.ThreadID = th.ThreadID
		}
		if _, err := n.SendMessage(alice, p); err != nil {
			f.Fatal(err)
		}
	}
	f.Add(math.MaxInt, 2, "updated_at", "", uint8(0))
	f.Add(math.MaxInt, 2, "", "", uint8(0))
	f.Add(math.MinInt, 0, "created_at", "asc", uint8(1))
	f.Add(3, 10, "updated_at", "asc", uint8(6))
	f.Add(1<<62, 100, "", "desc", uint8(9))
	f.Add(0, math.MaxInt, "", "", uint8(0))
	f.Fuzz(func(t *testing.T, page, size int, sortBy, order string, flags uint8) {
		check := func(what string, err error, items, total, pageSize int) {
			if err != nil {
				var re *rpc.Error
				if !errors.As(err, &re) || re.Code != rpc.CodeInvalidParams && re.Code != rpc.CodeNotFound {
					t.Fatalf("%s page=%d size=%d: %v", what, page, size, err)
				}
				return
			}
			if items > pageSize {
				t.Fatalf("%s page=%d size=%d: %d items on a page of %d", what, page, size, items, pageSize)
			}
			if page > 0 && (page-1) >= (total+pageSize-1)/pageSize && items != 0 {
				t.Fatalf("%s page=%d size=%d: %d items past the last page (total %d)", what, page, size, items, total)
			}
		}
		p := &rpc.ListMessagesParams{Page: page, PageSize: size, SortBy: sortBy, SortOrder: order,
			Unread: flags&1 != 0, Mentions: flags&2 != 0, IncludeDeleted: flags&4 != 0}
		if flags&8 != 0 {
			p.ThreadID = th.ThreadID
		}
		as := alice
		if flags&16 != 0 {
			as = thrum.AsAgent(ctx, "bob")
		}
		if r, err := n.ListMessages(as, p); err != nil {
			check("ListMessages", err, 0, 0, 0)
		} else {
			check("ListMessages", nil, len(r.Messages), r.Total, r.PageSize)
		}
		if r, err := n.ListThreads(as, &rpc.ListThreadsParams{Page: page, PageSize: size}); err != nil {
			check("ListThreads", err, 0, 0, 0)
		} else {
			check("ListThreads", nil, len(r.Threads), r.Total, r.PageSize)
		}
		if r, err := n.GetThread(as, &rpc.GetThreadParams{ThreadID: th.ThreadID, Page: page, PageSize: size}); err != nil {
			check("GetThread", err, 0, 0, 0)
		} else {
			check("GetThread", nil, len(r.Messages), r.Total, r.PageSize)
		}
	})
}
