package thrum_test

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/internal/thrumtest"
	"github.com/thrumhq/thrum/rpc"
	"github.com/thrumhq/thrum/store"
)

// Search benchmarks. Run them with
//
//	go test -run '^$' -bench 'Search' -benchtime 200x .
//	THRUM_BENCH_1M=1 go test -run '^$' -bench 'SearchLatency' -benchtime 200x .
//
// The corpus: messages of 8 to 24 words drawn from a 20,000-word
// vocabulary with a Zipf distribution (as words are in text), plus a few
// planted words so that each kind of query has a known selectivity:
// "zanzibar" in 1 message of 5,000 (selective), the vocabulary's most
// frequent word (common), the phrase "token expired" in 1 message of 100,
// and words starting "deplo" (deploy, deployed, deployment) in 1 of 50
// (prefix; their stems are "deploi" and "deploy").
//
// How it is seeded, honestly: the messages are applied to the SQLite
// store directly (store.Apply of message.create events, 5,000 a batch,
// through the same triggers a live commit fires), with no event log; the
// node is then opened on that store. Building 1M this way takes about a
// minute; sending 1M through the node would take hours.

var searchVocab = func() []string {
	syl := []string{"ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ba", "de", "fu", "go", "hi", "ju", "pe", "qu", "xe", "ya", "wo", "cy"}
	out := make([]string, 20_000)
	for i := range out {
		// Three syllables from i, so every word is distinct and
		// pronounceable; "ka…" words are many, for no query in particular.
		out[i] = syl[i%20] + syl[(i/20)%20] + syl[(i/400)%20] + strings.Repeat("n", i/8000)
	}
	return out
}()

func searchContent(r *rand.Rand, z *rand.Zipf, i int) string {
	n := 8 + r.IntN(17)
	words := make([]string, 0, n+3)
	for j := 0; j < n; j++ {
		words = append(words, searchVocab[z.Uint64()])
	}
	if i%5000 == 17 {
		words = append(words, "zanzibar")
	}
	if i%100 == 3 {
		words = slices.Insert(words, r.IntN(len(words)), "token", "expired")
	}
	if i%50 == 7 {
		words = append(words, []string{"deploy", "deployed", "deployment"}[r.IntN(3)])
	}
	return strings.Join(words, " ")
}

// seedSearchStore writes msgs messages by benchAgents agents into a new
// store at path (see the comment above for how).
func seedSearchStore(tb testing.TB, path string, msgs int) {
	st, err := store.Open(path, nil)
	if err != nil {
		tb.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	var batch []*eventlog.Event
	for i := 0; i < benchAgents; i++ {
		id := benchAgentName(i)
		batch = append(batch,
			&eventlog.Event{ID: eventlog.NewID(), Type: eventlog.TypeAgentRegister, Payload: eventlog.AgentRegister{AgentID: id, Kind: "agent", Name: id, Role: benchRoles[i%len(benchRoles)], Module: "m"}},
			&eventlog.Event{ID: eventlog.NewID(), Type: eventlog.TypeSessionStart, Payload: eventlog.SessionStart{SessionID: "ses_" + id, AgentID: id}})
	}
	r := rand.New(rand.NewPCG(5, 15))
	z := rand.NewZipf(r, 1.07, 2, uint64(len(searchVocab)-1))
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := 0; i < msgs; i++ {
		author := benchAgentName(r.IntN(benchAgents))
		at := t0.Add(time.Duration(i) * time.Second)
		p := eventlog.MessageCreate{MessageID: "msg_" + eventlog.NewID(), AgentID: author, SessionID: "ses_" + author,
			Format: "markdown", Content: searchContent(r, z, i), Priority: "normal",
			Refs: []eventlog.Pair{{Type: "mention", Value: benchRoles[r.IntN(len(benchRoles))]}}}
		batch = append(batch, &eventlog.Event{ID: eventlog.NewID(), Time: at, Type: eventlog.TypeMessageCreate, Shard: author, Payload: p})
		if len(batch) >= 5000 {
			if err := st.Apply(ctx, batch); err != nil {
				tb.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	if err := st.Apply(ctx, batch); err != nil {
		tb.Fatal(err)
	}
}

var (
	searchFixtureMu sync.Mutex
	searchFixtures  = map[int]string{}
)

// searchNode opens a node on a copy of a store seeded with msgs messages
// (built once per process, or kept in THRUM_BENCH_CACHE).
func searchNode(b *testing.B, msgs int) *thrum.Node {
	b.Helper()
	searchFixtureMu.Lock()
	src, ok := searchFixtures[msgs]
	if !ok {
		dir := ""
		if cache := os.Getenv("THRUM_BENCH_CACHE"); cache != "" {
			dir = filepath.Join(cache, fmt.Sprintf("search-%d", msgs))
		} else {
			d, err := os.MkdirTemp("", fmt.Sprintf("thrum-search-%d-", msgs))
			if err != nil {
				b.Fatal(err)
			}
			dir = d
			fixtureDirs[-msgs] = d // removed by TestMain, as benchDir's are
		}
		src = filepath.Join(dir, "messages.db")
		if _, err := os.Stat(filepath.Join(dir, "complete")); err != nil {
			os.MkdirAll(dir, 0o755)
			start := time.Now()
			seedSearchStore(b, src, msgs)
			os.WriteFile(filepath.Join(dir, "complete"), nil, 0o644)
			b.Logf("seeded %d messages into the store in %v", msgs, time.Since(start).Round(time.Millisecond))
		}
		searchFixtures[msgs] = src
	}
	searchFixtureMu.Unlock()
	dir := b.TempDir()
	db := filepath.Join(dir, "messages.db")
	if err := copyTree(filepath.Dir(src), dir); err != nil {
		b.Fatal(err)
	}
	return thrumtest.OpenNodeIn(b, dir, &thrum.Options{DBPath: db})
}

// BenchmarkSearchLatency reports p50 and p99 of message.search through
// the node (parse, FTS5 match and count, page, snippets, rows) at 100k
// stored messages, and at 1M with THRUM_BENCH_1M=1.
func BenchmarkSearchLatency(b *testing.B) {
	sizes := []int{100_000}
	if os.Getenv("THRUM_BENCH_1M") != "" {
		sizes = append(sizes, 1_000_000)
	}
	queries := []struct{ name, q string }{
		{"selective", "zanzibar"},
		{"common", searchVocab[0]},
		{"phrase", `"token expired"`},
		{"prefix", "deplo*"},
		{"two-words", searchVocab[0] + " " + searchVocab[40]},
		// Both kinds of term: a word drives and the prefix is a subquery
		// of the plain index; with OR, nothing drives.
		{"word-and-prefix", searchVocab[40] + " deplo*"},
		{"prefix-or-word", "deplo* OR zanzibar"},
	}
	for _, size := range sizes {
		for _, q := range queries {
			for _, sort := range []string{"relevance", "created_at"} {
				b.Run(fmt.Sprintf("stored=%d/%s/%s", size, q.name, sort), func(b *testing.B) {
					n := searchNode(b, size)
					ctx := thrum.AsAgent(context.Background(), benchAgentName(1))
					p := &rpc.SearchMessagesParams{Query: q.q, SortBy: sort}
					// Let the node's start-up work (the in-memory index
					// build, about 1 s per 100k) finish, and warm the cache.
					time.Sleep(time.Duration(size/100_000) * time.Second)
					for i := 0; i < 5; i++ {
						if _, err := n.SearchMessages(ctx, p); err != nil {
							b.Fatal(err)
						}
					}
					var lat latencies
					var total int
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						t0 := time.Now()
						r, err := n.SearchMessages(ctx, p)
						if err != nil {
							b.Fatal(err)
						}
						lat.add(time.Since(t0))
						total = r.Total
					}
					b.ReportMetric(float64(total), "matches")
					lat.report(b)
				})
			}
		}
	}
}

// disableSearchIndex stops a store file's search index through a second
// connection: the indexed mark is set past any message, so nothing is
// ever indexed: the baseline the index's cost is measured against.
func disableSearchIndex(tb testing.TB, db string) {
	c, err := sql.Open("sqlite", "file:"+db+"?_pragma=busy_timeout(10000)")
	if err != nil {
		tb.Fatal(err)
	}
	defer c.Close()
	for _, q := range []string{`UPDATE meta SET value = '4611686018427387904' WHERE key = 'search_indexed'`} {
		if _, err := c.Exec(q); err != nil {
			tb.Fatal(err)
		}
	}
}

// BenchmarkSendSearchIndex measures what maintaining the search index
// costs a send: two nodes on copies of a 100k-message store, one as
// built and one with the index disabled, take turns (rounds of
// 200 sends from 1 or 8 senders), so that the machine's other load falls
// on both alike. Durable, and with NoSync (where the CPU cost is not
// hidden behind fsync); one sender commits one message a transaction,
// eight share commits. It reports each node's sends/s and the index's
// cost: how much faster the node without it sends, in percent.
//
//	go test -run '^$' -bench SendSearchIndex -benchtime 4000x .
func BenchmarkSendSearchIndex(b *testing.B) {
	for _, c := range []struct {
		durable bool
		senders int
	}{{true, 1}, {true, 8}, {false, 1}, {false, 8}} {
		durable, senders := c.durable, c.senders
		b.Run(fmt.Sprintf("durable=%v/senders=%d", durable, senders), func(b *testing.B) {
			open := func(index bool) *thrum.Node {
				n := searchNode(b, 100_000)
				dir := n.Dir()
				db := filepath.Join(dir, thrum.DefaultDBName)
				n.Close()
				if !index {
					disableSearchIndex(b, db)
				}
				n = thrumtest.OpenNodeIn(b, dir, &thrum.Options{DBPath: db, NoSync: !durable})
				for i := 0; i < benchAgents; i++ {
					thrumtest.Register(b, n, benchAgentName(i)+"_s", benchRoles[i%len(benchRoles)], "m")
				}
				return n
			}
			nodes := []*thrum.Node{open(true), open(false)}
			// Each node builds its in-memory message index in the
			// background after opening (about 1 s at 100k): let both
			// finish, or their CPU falls on whichever round runs then.
			time.Sleep(3 * time.Second)
			var spent, cpu [2]time.Duration
			var sent [2]int
			const round = 200
			ctx := context.Background()
			b.ResetTimer()
			for done := 0; done < b.N; done += round {
				for k, n := range nodes {
					var next atomic.Int64
					var wg sync.WaitGroup
					c0, _ := processCPU()
					t0 := time.Now()
					for w := 0; w < senders; w++ {
						wg.Add(1)
						go func(w int) {
							defer wg.Done()
							r := rand.New(rand.NewPCG(uint64(w), uint64(done)))
							z := rand.NewZipf(r, 1.07, 2, uint64(len(searchVocab)-1))
							me := thrum.AsAgent(ctx, benchAgentName(w)+"_s")
							for i := next.Add(1); i <= round; i = next.Add(1) {
								if _, err := n.SendMessage(me, &rpc.SendMessageParams{Content: searchContent(r, z, done+int(i))}); err != nil {
									b.Error(err)
									return
								}
							}
						}(w)
					}
					wg.Wait()
					spent[k] += time.Since(t0)
					c1, _ := processCPU()
					cpu[k] += c1 - c0
					sent[k] += round
				}
			}
			on, off := float64(sent[0])/spent[0].Seconds(), float64(sent[1])/spent[1].Seconds()
			b.ReportMetric(on, "sends/s-index")
			b.ReportMetric(off, "sends/s-noindex")
			b.ReportMetric(100*(off/on-1), "index-cost-%")
			// CPU per send is steadier than the rate on a shared machine:
			// other processes' load does not count in it.
			con, coff := cpu[0].Seconds()*1e6/float64(sent[0]), cpu[1].Seconds()*1e6/float64(sent[1])
			b.ReportMetric(con, "cpu-µs/send-index")
			b.ReportMetric(coff, "cpu-µs/send-noindex")
			b.ReportMetric(100*(con/coff-1), "index-cpu-cost-%")
		})
	}
}

// BenchmarkSearchIndexBuild builds each full-text index of a store of
// 100k messages from empty, in turn, and reports the CPU time each took
// per message: what each costs to keep up, apart from the sends around
// it, and steadier on a shared machine than a rate (other processes'
// time is not counted).
//
//	go test -run '^$' -bench SearchIndexBuild -benchtime 3x .
func BenchmarkSearchIndexBuild(b *testing.B) {
	n := searchNode(b, 100_000)
	db := filepath.Join(n.Dir(), thrum.DefaultDBName)
	n.Close()
	c, err := sql.Open("sqlite", "file:"+db)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	indexes := []string{"messages_fts", "messages_fts_plain"}
	spent := make([]time.Duration, len(indexes))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for k, ix := range indexes {
			if _, err := c.Exec(`INSERT INTO ` + ix + `(` + ix + `) VALUES('delete-all')`); err != nil {
				b.Fatal(err)
			}
			c0, _ := processCPU()
			if _, err := c.Exec(`INSERT INTO ` + ix + `(` + ix + `) VALUES('rebuild')`); err != nil {
				b.Fatal(err)
			}
			c1, _ := processCPU()
			spent[k] += c1 - c0
		}
	}
	for k, ix := range indexes {
		b.ReportMetric(spent[k].Seconds()*1e6/float64(b.N)/100_000, "cpu-µs/msg-"+ix)
	}
}

// BenchmarkRebuildSearchIndex1M rebuilds a projection from a log of one
// million events (writeSyntheticLog, as BenchmarkRebuild1M) and then
// builds the search indexes of the result again from empty, timing that
// alone: Rebuild loads without the indexes and builds them once at the
// end, so their share of a rebuild is fts-s / (rebuild-s - fts-s).
//
//	go test -run '^$' -bench RebuildSearchIndex1M -benchtime 1x -count 3 .
func BenchmarkRebuildSearchIndex1M(b *testing.B) {
	if testing.Short() {
		b.Skip("long benchmark")
	}
	const events = 1_000_000
	dir := b.TempDir()
	writeSyntheticLog(b, dir, events, nil)
	for i := 0; i < b.N; i++ {
		db := filepath.Join(b.TempDir(), "rebuilt.db")
		total := rebuildOnce(b, dir, db, nil)
		c, err := sql.Open("sqlite", "file:"+db)
		if err != nil {
			b.Fatal(err)
		}
		var fts time.Duration
		for _, ix := range []string{"messages_fts", "messages_fts_plain"} {
			if _, err := c.Exec(`INSERT INTO ` + ix + `(` + ix + `) VALUES('delete-all')`); err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			if _, err := c.Exec(`INSERT INTO ` + ix + `(` + ix + `) VALUES('rebuild')`); err != nil {
				b.Fatal(err)
			}
			fts += time.Since(start)
		}
		c.Close()
		b.ReportMetric(total.Seconds(), "rebuild-s")
		b.ReportMetric(fts.Seconds(), "fts-s")
		b.ReportMetric(100*fts.Seconds()/(total-fts).Seconds(), "fts-%")
	}
}
