package thrum_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/internal/keystore"
	"github.com/thrumhq/thrum/internal/thrumtest"
	"github.com/thrumhq/thrum/rpc"
	"github.com/thrumhq/thrum/store"
)

// Benchmarks of the performance budget in DESIGN.md. Run them with
//
//	go test -run '^$' -bench . -benchtime 2000x .
//
// The 100k-message fixtures are built once per process (a few seconds)
// and copied for each benchmark.

const benchAgents = 20

var benchRoles = []string{"implementer", "reviewer", "planner", "tester", "ops"}

func benchAgentName(i int) string { return fmt.Sprintf("agent_%02d", i) }

// seedNode registers benchAgents agents with sessions, a group and a
// thread through the node, then appends msgs message events (with a
// realistic mix of mentions of names, roles, the group and everyone,
// scopes, refs, thread replies and reads by agent_01) straight to the log,
// and reopens the node so that it catches up: the same state as sending
// them one by one, built in seconds instead of minutes.
func seedNode(tb testing.TB, dir string, msgs int) {
	ctx := context.Background()
	n := thrumtest.OpenNodeIn(tb, dir, &thrum.Options{NoSync: true})
	for i := 0; i < benchAgents; i++ {
		thrumtest.Register(tb, n, benchAgentName(i), benchRoles[i%len(benchRoles)], "m")
	}
	a0 := thrum.AsAgent(ctx, benchAgentName(0))
	n.CreateGroup(a0, &rpc.CreateGroupParams{Name: "backend"})
	n.AddGroupMember(a0, &rpc.GroupMembership{Group: "backend", MemberType: "role", MemberID: "reviewer"})
	th, _ := n.CreateThread(a0, &rpc.CreateThreadParams{Title: "bench"})
	sessions := map[string]string{}
	for i := 0; i < benchAgents; i++ {
		r, _ := n.ListSessions(ctx, &rpc.ListSessionsParams{AgentID: benchAgentName(i), ActiveOnly: true})
		sessions[benchAgentName(i)] = r.Sessions[0].SessionID
	}
	n.Close()

	lg, err := eventlog.Open(dir, &eventlog.Options{NoSync: true})
	if err != nil {
		tb.Fatal(err)
	}
	r := rand.New(rand.NewPCG(3, 7))
	reader := benchAgentName(1)
	var batch, reads []*eventlog.Event
	var readIDs []string
	for i := 0; i < msgs; i++ {
		from := benchAgentName(r.IntN(benchAgents))
		p := benchMessage(r, i, th.ThreadID)
		refs := make([]eventlog.Pair, 0, len(p.Refs)+len(p.Mentions))
		refs = append(refs, p.Refs...)
		for _, m := range p.Mentions {
			refs = append(refs, eventlog.Pair{Type: "mention", Value: m[1:]})
		}
		id := "msg_" + eventlog.NewID()
		batch = append(batch, &eventlog.Event{Type: eventlog.TypeMessageCreate, Shard: from, Payload: eventlog.MessageCreate{
			MessageID: id, AgentID: from, SessionID: sessions[from], ThreadID: p.ThreadID, Format: "markdown",
			Content: p.Content, Scopes: p.Scopes, Refs: refs, Priority: "normal"}})
		if i%3 == 0 {
			readIDs = append(readIDs, id)
		}
		if len(readIDs) == 100 {
			reads = append(reads, &eventlog.Event{Type: eventlog.TypeMessageRead, Shard: reader, Payload: eventlog.MessageRead{
				AgentID: reader, SessionID: sessions[reader], MessageIDs: readIDs}})
			readIDs = nil
		}
		if len(batch) >= 2000 {
			if err := lg.Append(ctx, append(batch, reads...)...); err != nil {
				tb.Fatal(err)
			}
			batch, reads = batch[:0], reads[:0]
		}
	}
	if err := lg.Append(ctx, append(batch, reads...)...); err != nil {
		tb.Fatal(err)
	}
	lg.Close()
	thrumtest.OpenNodeIn(tb, dir, nil).Close() // catches up
}

func benchMessage(r *rand.Rand, i int, thread string) *rpc.SendMessageParams {
	p := &rpc.SendMessageParams{Content: fmt.Sprintf("message %d: the quick brown fox jumps over the lazy dog, status update and review request", i)}
	switch r.IntN(10) {
	case 0, 1, 2:
		p.Mentions = []string{"@" + benchAgentName(r.IntN(benchAgents))}
	case 3, 4:
		p.Mentions = []string{"@" + benchRoles[r.IntN(len(benchRoles))]}
	case 5:
		p.Mentions = []string{"@backend"}
	case 6:
		p.Mentions = []string{"@everyone"}
	}
	if r.IntN(4) == 0 {
		p.Scopes = []rpc.Pair{{Type: "module", Value: fmt.Sprintf("mod%d", r.IntN(50))}}
	}
	if r.IntN(8) == 0 {
		p.Refs = []rpc.Pair{{Type: "issue", Value: fmt.Sprintf("beads-%d", r.IntN(500))}}
	}
	if r.IntN(20) == 0 {
		p.ThreadID = thread
	}
	return p
}

var (
	fixtureMu   sync.Mutex
	fixtureDirs = map[int]string{}
)

// benchDir returns a fresh copy of a data directory seeded with msgs
// messages.
func benchDir(b *testing.B, msgs int) string {
	b.Helper()
	fixtureMu.Lock()
	src, ok := fixtureDirs[msgs]
	if !ok {
		if cache := os.Getenv("THRUM_BENCH_CACHE"); cache != "" {
			src = filepath.Join(cache, fmt.Sprintf("fixture-%d", msgs))
			if _, err := os.Stat(filepath.Join(src, "complete")); err == nil {
				ok = true
			} else {
				os.RemoveAll(src)
				os.MkdirAll(src, 0o755)
			}
		} else {
			var err error
			if src, err = os.MkdirTemp("", fmt.Sprintf("thrum-bench-%d-", msgs)); err != nil {
				b.Fatal(err)
			}
		}
		if !ok {
			start := time.Now()
			seedNode(b, src, msgs)
			os.WriteFile(filepath.Join(src, "complete"), nil, 0o644)
			b.Logf("seeded %d messages in %v", msgs, time.Since(start).Round(time.Millisecond))
		}
		fixtureDirs[msgs] = src
	}
	fixtureMu.Unlock()
	dst := b.TempDir()
	if err := copyTree(src, dst); err != nil {
		b.Fatal(err)
	}
	return dst
}

func copyTree(src, dst string) error {
	return filepath.Walk(src, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		if rel == "complete" || rel == thrum.LockFile {
			return nil
		}
		target := filepath.Join(dst, rel)
		if info.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		in, err := os.Open(path)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(target)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
}

// latencies records per-operation durations and reports percentiles.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

// report adds the p50 and p99 in milliseconds to the benchmark's line.
func (l *latencies) report(b *testing.B) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.d) == 0 {
		return
	}
	sort.Slice(l.d, func(i, j int) bool { return l.d[i] < l.d[j] })
	pct := func(p float64) float64 {
		return float64(l.d[int(p*float64(len(l.d)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}

func BenchmarkSend(b *testing.B) {
	for _, stored := range []int{0, 100_000} {
		for _, senders := range []int{1, 8} {
			b.Run(fmt.Sprintf("stored=%d/senders=%d", stored, senders), func(b *testing.B) {
				dir := benchDir(b, stored)
				n := thrumtest.OpenNodeIn(b, dir, nil) // durable
				ctx := context.Background()
				if stored == 0 {
					for i := 0; i < benchAgents; i++ {
						thrumtest.Register(b, n, benchAgentName(i), benchRoles[i%len(benchRoles)], "m")
					}
				}
				var lat latencies
				var next atomic.Int64
				b.ResetTimer()
				start := time.Now()
				var wg sync.WaitGroup
				for w := 0; w < senders; w++ {
					wg.Add(1)
					go func(w int) {
						defer wg.Done()
						r := rand.New(rand.NewPCG(uint64(w), 9))
						me := thrum.AsAgent(ctx, benchAgentName(w%benchAgents))
						for next.Add(1) <= int64(b.N) {
							p := benchMessage(r, w, "")
							t0 := time.Now()
							if _, err := n.SendMessage(me, p); err != nil {
								b.Error(err)
								return
							}
							lat.add(time.Since(t0))
						}
					}(w)
				}
				wg.Wait()
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "sends/s")
				lat.report(b)
			})
		}
	}
}

// BenchmarkInbox lists a page of 50 with each filter at 100,000 stored
// messages, and at 1,000,000 with THRUM_BENCH_1M=1.
func BenchmarkInbox(b *testing.B) {
	sizes := []int{100_000}
	if os.Getenv("THRUM_BENCH_1M") != "" {
		sizes = append(sizes, 1_000_000)
	}
	for _, stored := range sizes {
		b.Run(fmt.Sprintf("stored=%d", stored), func(b *testing.B) { benchInbox(b, stored) })
	}
}

func benchInbox(b *testing.B, stored int) {
	dir := benchDir(b, stored)
	n := thrumtest.OpenNodeIn(b, dir, nil)
	ctx := context.Background()
	me := thrum.AsAgent(ctx, benchAgentName(1)) // a reviewer, in @backend
	filters := []struct {
		name string
		ctx  context.Context
		p    rpc.ListMessagesParams
	}{
		{"all", ctx, rpc.ListMessagesParams{}},
		{"all-as-agent", me, rpc.ListMessagesParams{}},
		{"scope", ctx, rpc.ListMessagesParams{Scope: &rpc.Pair{Type: "module", Value: "mod7"}}},
		{"ref", ctx, rpc.ListMessagesParams{Ref: &rpc.Pair{Type: "issue", Value: "beads-42"}}},
		{"author", ctx, rpc.ListMessagesParams{AuthorID: benchAgentName(3)}},
		{"mentions", me, rpc.ListMessagesParams{Mentions: true}},
		{"mentions-unread", me, rpc.ListMessagesParams{Mentions: true, Unread: true}},
		{"mentions-unread-asc", me, rpc.ListMessagesParams{Mentions: true, Unread: true, SortOrder: "asc"}}, // check_messages
		{"unread", me, rpc.ListMessagesParams{Unread: true}},
		{"mention_role", ctx, rpc.ListMessagesParams{MentionRole: "reviewer"}},
		{"unread_for_agent", ctx, rpc.ListMessagesParams{UnreadForAgent: benchAgentName(1), MentionRole: benchAgentName(1)}},
		{"sort-updated-asc", ctx, rpc.ListMessagesParams{SortBy: "updated_at", SortOrder: "asc"}},
		{"page-20", ctx, rpc.ListMessagesParams{Page: 20}},
	}
	// Listings wait for the index's snapshot to load; one built instead
	// (no snapshot) takes about a second per 100,000 messages, during
	// which SQLite answers: let that pass.
	time.Sleep(time.Duration(stored/100_000) * time.Second)
	for _, f := range filters {
		b.Run(f.name, func(b *testing.B) {
			p := f.p
			p.PageSize = 50
			if p.Page == 0 {
				p.Page = 1
			}
			var lat latencies
			var total int
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				r, err := n.ListMessages(f.ctx, &p)
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

// BenchmarkRebuild1M rebuilds a projection from a log of one million
// events. It reports the peak heap growth to show memory stays flat.
func BenchmarkRebuild1M(b *testing.B) {
	if testing.Short() {
		b.Skip("long benchmark")
	}
	const events = 1_000_000
	for _, sealed := range []bool{false, true} {
		b.Run(fmt.Sprintf("sealed=%v", sealed), func(b *testing.B) {
			var keys eventlog.TeamKeys
			if sealed { // every body sealed, and opened by the rebuild
				ks, err := keystore.Open(b.TempDir())
				if err != nil {
					b.Fatal(err)
				}
				if _, err := ks.NewTeamKey(); err != nil {
					b.Fatal(err)
				}
				keys = ks
			}
			dir := b.TempDir()
			writeSyntheticLog(b, dir, events, keys)
			for i := 0; i < b.N; i++ {
				var peak atomic.Uint64
				stop := make(chan struct{})
				go sampleHeap(&peak, stop)
				elapsed := rebuildOnce(b, dir, filepath.Join(b.TempDir(), "rebuilt.db"), keys)
				close(stop)
				b.ReportMetric(elapsed.Seconds(), "rebuild-s")
				b.ReportMetric(float64(events)/elapsed.Seconds(), "events/s")
				b.ReportMetric(float64(peak.Load())/(1<<20), "peak-heap-MiB")
			}
		})
	}
}

// rebuildOnce rebuilds the projection of the log in dir into the new
// database db, opening sealed bodies with keys, and returns how long
// store.Rebuild took.
func rebuildOnce(b *testing.B, dir, db string, keys eventlog.TeamKeys) time.Duration {
	b.Helper()
	lg, err := eventlog.Open(dir, &eventlog.Options{NoSync: true, TeamKeys: keys})
	if err != nil {
		b.Fatal(err)
	}
	defer lg.Close()
	start := time.Now()
	st, err := store.Rebuild(context.Background(), lg, db, nil)
	elapsed := time.Since(start)
	if err != nil {
		b.Fatal(err)
	}
	st.Close()
	return elapsed
}

func sampleHeap(peak *atomic.Uint64, stop chan struct{}) {
	var ms runtime.MemStats
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
		}
	}
}

// writeSyntheticLog writes a log of n events: registrations, sessions,
// and mostly messages with mentions, scopes, reads and some edits, their
// bodies sealed if keys seal.
func writeSyntheticLog(tb testing.TB, dir string, n int, keys eventlog.TeamKeys) {
	lg, err := eventlog.Open(dir, &eventlog.Options{NoSync: true, TeamKeys: keys})
	if err != nil {
		tb.Fatal(err)
	}
	defer lg.Close()
	ctx := context.Background()
	var batch []*eventlog.Event
	flush := func() {
		if err := lg.Append(ctx, batch...); err != nil {
			tb.Fatal(err)
		}
		batch = batch[:0]
	}
	for i := 0; i < benchAgents; i++ {
		id := benchAgentName(i)
		batch = append(batch,
			&eventlog.Event{Type: eventlog.TypeAgentRegister, Payload: eventlog.AgentRegister{AgentID: id, Kind: "agent", Name: id, Role: benchRoles[i%len(benchRoles)], Module: "m"}},
			&eventlog.Event{Type: eventlog.TypeSessionStart, Payload: eventlog.SessionStart{SessionID: "ses_" + id, AgentID: id}})
	}
	r := rand.New(rand.NewPCG(1, 2))
	var last []string
	for i := len(batch); i < n; i++ {
		author := benchAgentName(r.IntN(benchAgents))
		switch k := r.IntN(20); {
		case k == 0 && len(last) > 0:
			reader := benchAgentName(r.IntN(benchAgents))
			batch = append(batch, &eventlog.Event{Type: eventlog.TypeMessageRead, Shard: reader, Payload: eventlog.MessageRead{
				AgentID: reader, SessionID: "ses_" + reader, MessageIDs: last}})
		default:
			id := "msg_" + eventlog.NewID()
			p := eventlog.MessageCreate{MessageID: id, AgentID: author, SessionID: "ses_" + author, Format: "markdown",
				Content: fmt.Sprintf("message %d: the quick brown fox jumps over the lazy dog", i), Priority: "normal",
				Refs: []eventlog.Pair{{Type: "mention", Value: benchRoles[r.IntN(len(benchRoles))]}}}
			if r.IntN(4) == 0 {
				p.Scopes = []eventlog.Pair{{Type: "module", Value: fmt.Sprintf("mod%d", r.IntN(50))}}
			}
			batch = append(batch, &eventlog.Event{Type: eventlog.TypeMessageCreate, Shard: author, Payload: p})
			if len(last) == 5 {
				last = last[1:]
			}
			last = append(last, id)
		}
		if len(batch) >= 5000 {
			flush()
		}
	}
	flush()
}

// BenchmarkDaemonColdStart starts the real binary's daemon on an empty
// data directory and on one holding 100,000 messages, and reports the
// time from exec to the first answered health, from exec to the first
// answered role-filtered message.list (on a second daemon start, asked
// as soon as the socket answers; and again on a restart after a clean
// stop, which loads the index that stop saved), from SIGTERM to exit when the signal
// comes as soon as the socket answers (shutdown during start-up), and
// the daemon's resident memory idle and after a burst of inbox queries:
// on that restart (rss-*), as a daemon usually starts, and on a start
// that may still be building its index from SQLite (build-rss-*), as
// the first start after an upgrade does.
func BenchmarkDaemonColdStart(b *testing.B) {
	bin := buildThrum(b)
	for _, stored := range []int{0, 100_000} {
		b.Run(fmt.Sprintf("stored=%d", stored), func(b *testing.B) {
			src := benchDir(b, stored)
			var startMs, listMs, restartListMs, crashListMs, stopMs, idleMiB, busyMiB, buildIdleMiB, buildBusyMiB float64
			role := benchRoles[1]
			if stored == 0 {
				role = "reviewer"
			}
			// roleList asks the first role-filtered listing of a daemon
			// just started, and returns the time from its exec.
			roleList := func(c *rpc.Client, start time.Time) float64 {
				if _, err := c.ListMessages(context.Background(), &rpc.ListMessagesParams{MentionRole: role, PageSize: 50}); err != nil {
					b.Fatal(err)
				}
				return float64(time.Since(start).Microseconds()) / 1000
			}
			for i := 0; i < b.N; i++ {
				root := b.TempDir() // a plain directory: log in .thrum/log
				if err := copyTree(src, filepath.Join(root, ".thrum", "log")); err != nil {
					b.Fatal(err)
				}
				os.MkdirAll(filepath.Join(root, ".thrum", "var"), 0o700)
				for _, f := range []string{thrum.DefaultDBName, thrum.DefaultDBName + "-wal", thrum.DefaultDBName + "-shm"} {
					os.Rename(filepath.Join(root, ".thrum", "log", f), filepath.Join(root, ".thrum", "var", f))
				}
				os.Remove(filepath.Join(root, ".thrum", "log", thrum.DefaultDBName+".index")) // the seeding node's
				sock := filepath.Join(root, ".thrum", "var", "thrum.sock")
				snap := filepath.Join(root, ".thrum", "var", thrum.DefaultDBName+".index")

				// Shutdown during start-up: SIGTERM as soon as the
				// socket answers, while the daemon is still warming up.
				cmd, c, _ := startColdDaemon(b, bin, root, sock)
				t0 := time.Now()
				cmd.Process.Signal(syscall.SIGTERM)
				cmd.Wait()
				stopMs += float64(time.Since(t0).Microseconds()) / 1000
				c.Close()

				// The first start with no saved index at all (the first
				// start after an upgrade): listings are answered by SQLite
				// while the index builds.
				os.Remove(snap)
				cmd, c, start := startColdDaemon(b, bin, root, sock)
				listMs += roleList(c, start)
				c.Close()
				cmd.Process.Signal(syscall.SIGTERM)
				cmd.Wait()

				os.Remove(snap) // if the stop above saved one: this start builds
				cmd, c, start = startColdDaemon(b, bin, root, sock)
				startMs += float64(time.Since(start).Microseconds()) / 1000
				idle, busy := burstRSS(c, cmd.Process.Pid, stored)
				buildIdleMiB, buildBusyMiB = buildIdleMiB+idle, buildBusyMiB+busy
				c.Close()
				cmd.Process.Signal(os.Interrupt)
				cmd.Wait()

				// A restart after a clean stop: the index the stop saved
				// is loaded, not rebuilt. (A stop saves it only once it is
				// built: give the build time if that stop came too soon.)
				for try := 0; try < 5; try++ {
					if _, err := os.Stat(snap); err == nil {
						break
					}
					cmd, c, _ = startColdDaemon(b, bin, root, sock)
					time.Sleep(time.Second)
					c.Close()
					cmd.Process.Signal(os.Interrupt)
					cmd.Wait()
				}
				cmd, c, start = startColdDaemon(b, bin, root, sock)
				restartListMs += roleList(c, start)
				idle, busy = burstRSS(c, cmd.Process.Pid, stored)
				idleMiB, busyMiB = idleMiB+idle, busyMiB+busy

				// A restart after kill -9, 500 sends after the snapshot
				// was saved: it is loaded and the log's tail applied.
				if stored > 0 {
					c.Auth(context.Background(), &rpc.AuthParams{AgentID: benchAgentName(2)})
					for j := range 500 {
						p := &rpc.SendMessageParams{Content: fmt.Sprintf("after the snapshot %d", j), Mentions: []string{"@" + role}}
						if _, err := c.SendMessage(context.Background(), p); err != nil {
							b.Fatal(err)
						}
					}
				}
				c.Close()
				cmd.Process.Kill()
				cmd.Wait()
				cmd, c, start = startColdDaemon(b, bin, root, sock)
				crashListMs += roleList(c, start)
				c.Close()
				cmd.Process.Signal(syscall.SIGTERM)
				cmd.Wait()
			}
			b.ReportMetric(startMs/float64(b.N), "start-to-health-ms")
			b.ReportMetric(listMs/float64(b.N), "nosnapshot-start-to-role-list-ms")
			b.ReportMetric(restartListMs/float64(b.N), "restart-to-role-list-ms")
			b.ReportMetric(crashListMs/float64(b.N), "kill9-restart-to-role-list-ms")
			b.ReportMetric(stopMs/float64(b.N), "sigterm-in-startup-to-exit-ms")
			b.ReportMetric(idleMiB/float64(b.N), "rss-idle-MiB")
			b.ReportMetric(busyMiB/float64(b.N), "rss-after-queries-MiB")
			b.ReportMetric(buildIdleMiB/float64(b.N), "build-rss-idle-MiB")
			b.ReportMetric(buildBusyMiB/float64(b.N), "build-rss-after-queries-MiB")
		})
	}
}

// burstRSS returns a daemon's resident memory 300 ms after its start (an
// index build settles) and after 50 inbox listings as an agent.
func burstRSS(c *rpc.Client, pid, stored int) (idle, busy float64) {
	time.Sleep(300 * time.Millisecond)
	idle = rssMiB(pid)
	c.Auth(context.Background(), &rpc.AuthParams{AgentID: benchAgentName(1)})
	for j := range 50 {
		c.ListMessages(context.Background(), &rpc.ListMessagesParams{Mentions: stored > 0, PageSize: 50, Page: 1 + j%5})
	}
	return idle, rssMiB(pid)
}

// buildThrum builds cmd/thrum into the benchmark's temporary directory.
func buildThrum(b *testing.B) string {
	bin := filepath.Join(b.TempDir(), "thrum")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/thrum").CombinedOutput(); err != nil {
		b.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

// startColdDaemon execs the daemon on root (daemon run, with args) and
// returns it with a client whose health call answered first, and the
// time of the exec.
func startColdDaemon(b *testing.B, bin, root, sock string, args ...string) (*exec.Cmd, *rpc.Client, time.Time) {
	os.Remove(sock)
	cmd := exec.Command(bin, append([]string{"--repo", root, "daemon", "run"}, args...)...)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	for {
		if cl, err := rpc.Dial(context.Background(), sock, nil); err == nil {
			if _, err := cl.Health(context.Background(), &rpc.HealthParams{}); err == nil {
				return cmd, cl, start
			}
			cl.Close()
		}
		if time.Since(start) > time.Minute {
			cmd.Process.Kill()
			b.Fatal("daemon never answered")
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// rssMiB reads a process's resident set size.
func rssMiB(pid int) float64 { return statusMiB(pid, "VmRSS:") }

// statusMiB reads a field of /proc/PID/status in MiB (0 if unknown).
func statusMiB(pid int, field string) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == field {
			kb, _ := strconv.Atoi(f[1])
			return float64(kb) / 1024
		}
	}
	return 0
}
