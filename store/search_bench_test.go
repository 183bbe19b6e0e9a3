package store_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/store"
)

// BenchmarkApplySearchIndex is the search index's cost where it is paid:
// the apply of a send's commit (one message.create in one transaction,
// synchronous=NORMAL as live) and the indexing of new messages, which a
// store does every 250 ms (here every 50 messages, about a tick's worth
// at 200 sends/s). Two stores, one with the index disabled (its indexed
// mark past every message), apply the same
// messages in turn; it reports µs per message for each and the index's
// share in percent. On a shared machine it swings widely: two stores
// both without the index have measured 3% and 68% apart, so take
// several runs and an idle machine.
//
//	go test -run '^$' -bench ApplySearchIndex -benchtime 20000x ./store/
func BenchmarkApplySearchIndex(b *testing.B) {
	ctx := context.Background()
	var stores [2]*store.Store
	for k := range stores {
		path := filepath.Join(b.TempDir(), "p.db")
		st, err := store.Open(path, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer st.Close()
		if k == 1 {
			c, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
			if err != nil {
				b.Fatal(err)
			}
			for _, q := range []string{`UPDATE meta SET value = '4611686018427387904' WHERE key = 'search_indexed'`} {
				if _, err := c.Exec(q); err != nil {
					b.Fatal(err)
				}
			}
			c.Close()
		}
		stores[k] = st
	}
	words := strings.Fields("the reviewer said auth token must rotate before deploy of service build tests pass fail " +
		"review merge branch commit config schema index query update status done blocked waiting plan")
	var spent [2]time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var c []string
		for j := 0; j < 16; j++ {
			c = append(c, words[(i*7+j*13)%len(words)])
		}
		for j := range stores {
			k := (i + j) % 2 // each goes first every other time
			st := stores[k]
			e := &eventlog.Event{ID: eventlog.NewID(), Time: time.Now(), Type: eventlog.TypeMessageCreate, Shard: "alice",
				Payload: eventlog.MessageCreate{MessageID: fmt.Sprintf("msg_%d", i), AgentID: "alice", SessionID: "ses",
					Format: "markdown", Content: strings.Join(c, " "), Priority: "normal"}}
			t0 := time.Now()
			if err := st.Apply(ctx, []*eventlog.Event{e}); err != nil {
				b.Fatal(err)
			}
			if i%50 == 49 {
				if err := st.IndexPending(ctx); err != nil {
					b.Fatal(err)
				}
			}
			spent[k] += time.Since(t0)
		}
	}
	on, off := spent[0].Seconds()*1e6/float64(b.N), spent[1].Seconds()*1e6/float64(b.N)
	b.ReportMetric(on, "µs/msg-index")
	b.ReportMetric(off, "µs/msg-noindex")
	b.ReportMetric(100*(on-off)/off, "index-cost-%")
}
