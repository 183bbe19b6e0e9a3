package natsync_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/eventlog/admit"
	"github.com/thrumhq/thrum/eventlog/natsync"
	"github.com/thrumhq/thrum/internal/thrumtest"
	"github.com/thrumhq/thrum/rpc"
)

// natsServer is an in-process nats-server with JetStream, its store in a
// test directory, on a port it keeps across restarts.
type natsServer struct {
	t    testing.TB
	dir  string
	port int
	opts func(*server.Options)
	s    *server.Server
}

func startServer(t testing.TB, opts func(*server.Options)) *natsServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	ns := &natsServer{t: t, dir: t.TempDir(), port: port, opts: opts}
	ns.start()
	t.Cleanup(ns.stop)
	return ns
}

func (ns *natsServer) start() {
	ns.t.Helper()
	o := &server.Options{Host: "127.0.0.1", Port: ns.port, JetStream: true, StoreDir: ns.dir, NoLog: true, NoSigs: true}
	if ns.opts != nil {
		ns.opts(o)
	}
	s, err := server.NewServer(o)
	if err != nil {
		ns.t.Fatal(err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		ns.t.Fatal("nats-server did not start")
	}
	ns.s = s
}

func (ns *natsServer) stop() {
	if ns.s != nil {
		ns.s.Shutdown()
		ns.s.WaitForShutdown()
		ns.s = nil
	}
}

func (ns *natsServer) url() string { return "nats://127.0.0.1:" + strconv.Itoa(ns.port) }

// machine is a thrum node with a natsync Syncer: one clone.
type machine struct {
	t     testing.TB
	name  string
	n     *thrum.Node
	s     *natsync.Syncer
	cfg   natsync.Config
	state string
	gate  *testGate
	mu    sync.Mutex
	cur   *natsync.Syncer // what OnCommit tells
	stop  func()
}

func newMachine(t testing.TB, name string, cfg natsync.Config) *machine {
	t.Helper()
	m := &machine{t: t, name: name, cfg: cfg, state: t.TempDir() + "/nats.json"}
	m.n = thrumtest.OpenNode(t, &thrum.Options{NoSync: true, OnCommit: func(batch []*eventlog.Event) {
		m.mu.Lock()
		s := m.cur
		m.mu.Unlock()
		if s != nil {
			s.Committed(batch)
		}
	}})
	m.gate = &testGate{g: m.n.Admission()}
	m.start(nil)
	return m
}

// start makes a Syncer and runs it until stopSync or the test's end.
func (m *machine) start(opts *natsync.Options) {
	m.t.Helper()
	var o natsync.Options
	if opts != nil {
		o = *opts
	}
	o.Machine, o.Admission, o.StateFile, o.Retry = m.name, m.gate, m.state, 100*time.Millisecond
	o.Local = m.n.WroteHere
	o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("machine", m.name)
	s, err := natsync.New(m.n.EventLog(), &m.cfg, &o)
	if err != nil {
		m.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := s.Run(ctx); err != nil {
			m.t.Errorf("%s: Run: %v", m.name, err)
		}
	}()
	m.mu.Lock()
	m.s, m.cur = s, s
	m.mu.Unlock()
	var once sync.Once
	m.stop = func() { once.Do(func() { cancel(); <-done }) }
	m.t.Cleanup(m.stop)
}

func (m *machine) stopSync() {
	m.stop()
	m.mu.Lock()
	m.cur = nil
	m.mu.Unlock()
}

func (m *machine) register(name string) {
	m.t.Helper()
	thrumtest.Register(m.t, m.n, name, "dev", "m")
}

func (m *machine) send(from, to, content string) string {
	m.t.Helper()
	r, err := m.n.SendMessage(thrum.AsAgent(context.Background(), from), &rpc.SendMessageParams{Content: content, Mentions: []string{"@" + to}})
	if err != nil {
		m.t.Fatalf("%s: send from %s: %v", m.name, from, err)
	}
	return r.MessageID
}

// testGate is the node's one admission, counting what it refused.
type testGate struct {
	g       *admit.Gate
	mu      sync.Mutex
	refused int
}

func (g *testGate) Admit(ctx context.Context, src admit.Source, shard string, lines [][]byte) (*admit.Result, error) {
	r, err := g.g.Admit(ctx, src, shard, lines)
	if r != nil {
		g.mu.Lock()
		g.refused += len(r.Refused)
		g.mu.Unlock()
	}
	return r, err
}

func (g *testGate) refusals() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.refused
}

// logIDs returns the event IDs of a log by shard path (the local shard
// left out), failing on an ID seen twice.
func logIDs(t testing.TB, l *eventlog.Log) map[string]map[string]bool {
	t.Helper()
	out := map[string]map[string]bool{}
	seen := map[string]bool{}
	_, err := l.Scan(context.Background(), nil, func(e *eventlog.Event) error {
		if e.Shard == eventlog.LocalShard {
			return nil
		}
		if os.Getenv("NATSYNC_DEBUG") != "" {
			t.Logf("%s %s", eventlog.ShardPath(e.Shard), e.Raw)
		}
		if seen[e.ID] {
			t.Errorf("event %s is in the log twice", e.ID)
		}
		seen[e.ID] = true
		p := eventlog.ShardPath(e.Shard)
		if out[p] == nil {
			out[p] = map[string]bool{}
		}
		out[p][e.ID] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// shardBytes returns the whole of a shard as its log holds it.
func shardBytes(t testing.TB, l *eventlog.Log, shard string) []byte {
	t.Helper()
	var b []byte
	_, err := l.Scan(context.Background(), nil, func(e *eventlog.Event) error {
		if e.Shard == shard {
			b = append(append(b, e.Raw...), '\n')
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sameLogs fails unless the machines hold the same event IDs per shard,
// and each agent's shard is byte-identical on every machine.
func sameLogs(t testing.TB, ms ...*machine) {
	t.Helper()
	ids := make([]map[string]map[string]bool, len(ms))
	for i, m := range ms {
		ids[i] = logIDs(t, m.n.EventLog())
	}
	for i := 1; i < len(ms); i++ {
		if d := diffIDs(ids[0], ids[i]); d != "" {
			t.Errorf("%s and %s: %s", ms[0].name, ms[i].name, d)
		}
	}
	for p := range ids[0] {
		shard, _, _ := eventlog.ParseSegmentPath(p)
		if shard == "" {
			continue
		}
		want := shardBytes(t, ms[0].n.EventLog(), shard)
		for _, m := range ms[1:] {
			if got := shardBytes(t, m.n.EventLog(), shard); string(got) != string(want) {
				t.Errorf("%s differs between %s (%d bytes) and %s (%d bytes)", p, ms[0].name, len(want), m.name, len(got))
			}
		}
	}
}

func diffIDs(a, b map[string]map[string]bool) string {
	for _, pair := range [][2]map[string]map[string]bool{{a, b}, {b, a}} {
		for p, ids := range pair[0] {
			for id := range ids {
				if !pair[1][p][id] {
					return fmt.Sprintf("%s holds %s on one side only", p, id)
				}
			}
		}
	}
	return ""
}

func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// has reports whether the machine's log holds a message.
func (m *machine) has(id string) bool {
	r, err := m.n.GetMessage(context.Background(), &rpc.GetMessageParams{MessageID: id})
	return err == nil && r.Message.MessageID == id
}

// knows reports whether the machine's directory has an agent.
func (m *machine) knows(agent string) bool {
	r, err := m.n.ListAgents(context.Background(), &rpc.ListAgentsParams{})
	if err != nil {
		m.t.Fatal(err)
	}
	for _, a := range r.Agents {
		if a.AgentID == agent {
			return true
		}
	}
	return false
}

// settle waits until every machine published what it wrote and
// imported what the stream holds, twice over (an import may lead to
// more writes, such as reads).
func settle(t testing.TB, ms ...*machine) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for range 2 {
		for _, m := range ms {
			// Refresh fails while the connection is not back yet.
			for err := m.s.Refresh(ctx); err != nil; err = m.s.Refresh(ctx) {
				if ctx.Err() != nil {
					t.Fatalf("%s: Refresh: %v (status %+v)", m.name, err, m.s.Status())
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
	}
}
