package thrum_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/internal/gitwork"
	"github.com/thrumhq/thrum/internal/thrumtest"
	"github.com/thrumhq/thrum/rpc"
	"github.com/thrumhq/thrum/store"
)

// TestRebuildEqualsLive drives a node through thousands of random
// operations — every kind of write, valid and invalid, first from one
// goroutine and then from several — and checks the projection's contract
// (DESIGN.md, "The write path"):
//
//   - every failure is an *rpc.Error with a sensible code, never internal;
//   - a projection rebuilt from the log equals the live one, table by table;
//   - so does the projection after Close and Open, the one caught up from a
//     snapshot taken halfway, and one caught up from nothing;
//   - applying the whole log again to a rebuilt projection changes nothing.
//
// The run is seeded; set THRUM_SEED to replay one (the sequential half
// replays exactly, the concurrent half approximately).
func TestRebuildEqualsLive(t *testing.T) {
	t.Parallel() // its own directories and Nodes
	seed := thrumtest.Seed(t)

	const (
		sequentialOps = 1800
		workers       = 4
		opsPerWorker  = 350
	)
	ctx := context.Background()
	tmp := t.TempDir()
	logDir := filepath.Join(tmp, "log")
	liveDB := filepath.Join(tmp, "db", "live.db")

	w := &propWorld{t: t, stats: map[string]*opStats{}, current: map[string]string{}}
	w.repo = propGitRepo(t)
	open := func(dbPath string) *thrum.Node {
		t.Helper()
		return thrumtest.OpenNodeIn(t, logDir, &thrum.Options{
			DBPath:          dbPath,
			GitRepo:         gitwork.New(w.repo), // the node runs git only in its own repository's worktrees
			NoSync:          true,                // durability is TestCrashLosesNoAcknowledgedMessage's job
			MaxContentBytes: 2048,                // so that the limit is reachable
			Now:             func() time.Time { return time.Now().Add(time.Duration(w.skew.Load())) },
		})
	}

	// Phase 1: one goroutine, where state-dependent outcomes can be checked.
	w.n = open(liveDB)
	for _, u := range []string{"ann", "Bob-K"} {
		if _, err := w.n.RegisterUser(ctx, &rpc.RegisterUserParams{Username: u}); err != nil {
			t.Fatalf("register user %s: %v", u, err)
		}
	}
	for i, name := range propNames {
		p := &rpc.RegisterAgentParams{Name: name, Role: propRoles[i%len(propRoles)], Module: propModules[i%len(propModules)]}
		if _, err := w.n.RegisterAgent(ctx, p); err != nil {
			t.Fatalf("register %s: %v", name, err)
		}
		res, err := w.n.StartSession(thrum.AsAgent(ctx, name), &rpc.StartSessionParams{AgentID: name})
		if err != nil {
			t.Fatalf("start session of %s: %v", name, err)
		}
		w.addSession(propSession{id: res.SessionID, agent: name})
	}
	g := &propGen{w: w, r: rand.New(rand.NewPCG(seed, 0)), exact: true}
	for i := 0; i < sequentialOps && !w.stop(); i++ {
		g.step(ctx)
	}

	// Close, keep a copy of the projection as it is halfway, reopen.
	before := dumpProjection(t, thrum.ProjectionOf(w.n))
	if err := w.n.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	snapDB := filepath.Join(tmp, "snap", "snap.db")
	copyProjection(t, liveDB, snapDB)
	w.n = open(liveDB)
	if d := diffDumps(before, dumpProjection(t, thrum.ProjectionOf(w.n))); d != "" {
		t.Fatalf("projection changed across Close and Open:\n%s", d)
	}

	// Phase 2: several goroutines at once.
	w.concurrent.Store(true)
	var wg sync.WaitGroup
	for i := 1; i <= workers; i++ {
		g := &propGen{w: w, r: rand.New(rand.NewPCG(seed, uint64(i)))}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < opsPerWorker && !w.stop(); j++ {
				g.step(ctx)
			}
		}()
	}
	wg.Wait()
	w.logStats()
	if !w.stop() {
		w.checkCoverage()
	}
	// Even after failures above, compare the projections: a divergence
	// there usually explains them.

	// The live projection has applied the whole log.
	logPos := w.n.EventLog().Positions()
	projPos, err := thrum.ProjectionOf(w.n).Positions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for shard, off := range logPos {
		if off > 0 && projPos[shard] != off {
			t.Errorf("checkpoint of %s is %d, log ends at %d", shard, projPos[shard], off)
		}
	}

	live := dumpProjection(t, thrum.ProjectionOf(w.n))
	t.Logf("live projection: %s", propRowCounts(live))

	rebuilt, err := w.n.Rebuild(ctx, filepath.Join(tmp, "rebuilt.db"))
	if err != nil {
		t.Fatalf("rebuild: %v", err)
	}
	defer rebuilt.Close()
	rebuiltDump := dumpProjection(t, rebuilt)
	if d := diffDumps(live, rebuiltDump); d != "" {
		t.Errorf("rebuilt projection differs from the live one (first = live, second = rebuilt):\n%s", d)
	}

	// The full-text indexes: each agrees with its messages, and searches
	// for the indexes' own terms answer alike (the dumps compared the
	// terms' counts above).
	compareSearches(t, thrum.ProjectionOf(w.n), rebuilt, live["messages_fts_terms"], live["messages_fts_plain_terms"])

	// Applying the whole log again, in batches that cut it at other
	// places than the commits did, changes nothing.
	applied := reapplyLog(t, w.n.EventLog(), rebuilt, 7)
	if d := diffDumps(rebuiltDump, dumpProjection(t, rebuilt)); d != "" {
		t.Errorf("applying the log (%d events) a second time changed the rebuilt projection (first = before, second = after):\n%s", applied, d)
	}

	if err := w.n.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	for _, c := range []struct{ name, db string }{
		{"reopened", liveDB},
		{"caught up from the halfway snapshot", snapDB},
		{"caught up from nothing", filepath.Join(tmp, "fresh", "fresh.db")},
	} {
		n := open(c.db)
		if d := diffDumps(live, dumpProjection(t, thrum.ProjectionOf(n))); d != "" {
			t.Errorf("%s projection differs from the live one (first = live, second = %s):\n%s", c.name, c.name, d)
		}
		if err := n.Close(); err != nil {
			t.Errorf("close %s: %v", c.name, err)
		}
	}
}

// compareSearches checks both stores' full-text indexes against their
// messages, and that searching each of up to 40 of the stems (rows of
// the messages_fts_terms dump) as words and of the words (rows of the
// messages_fts_plain_terms dump) as prefixes finds the same page, in the
// same order, with the same snippets, in both.
func compareSearches(t *testing.T, live, rebuilt *store.Store, stems, words []string) {
	t.Helper()
	ctx := context.Background()
	for name, s := range map[string]*store.Store{"live": live, "rebuilt": rebuilt} {
		if err := s.CheckSearchIndex(ctx); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if len(stems) == 0 || len(words) == 0 {
		t.Errorf("a search index has no terms (%d stems, %d words): the generator's messages have words", len(stems), len(words))
	}
	var queries []string
	for _, terms := range []struct {
		rows   []string
		suffix string
	}{{stems, ""}, {words, "*"}} {
		step := max(1, len(terms.rows)/40)
		for i := 0; i < len(terms.rows); i += step {
			term, _, _ := strings.Cut(strings.TrimPrefix(terms.rows[i], `["`), `"`)
			queries = append(queries, `"`+term+`"`+terms.suffix)
		}
	}
	for i, q := range queries {
		f := store.SearchFilter{Query: q, IncludeDeleted: i%2 == 0, Limit: 20}
		a, at, _, err := live.Search(ctx, f)
		if err != nil {
			t.Fatalf("search %s: %v", q, err)
		}
		b, bt, _, err := rebuilt.Search(ctx, f)
		if err != nil {
			t.Fatalf("search %s in the rebuilt projection: %v", q, err)
		}
		if at != bt || !slices.EqualFunc(a, b, func(x, y store.SearchHit) bool { return x.MessageID == y.MessageID && x.Snippet == y.Snippet }) {
			t.Errorf("search %s: live found %d %+v, rebuilt %d %+v", q, at, a, bt, b)
		}
	}
}

// ---- the world the generators act on ----

type propWorld struct {
	t    *testing.T
	n    *thrum.Node // replaced only while no generator runs
	repo string      // a git worktree for heartbeat work contexts, or ""
	skew atomic.Int64

	mu       sync.Mutex
	unnamed  []string          // IDs of unnamed agents registered
	sessions []propSession     // every session started
	current  map[string]string // agent → its latest session
	messages []propMsg
	threads  []string

	statsMu sync.Mutex
	stats   map[string]*opStats
	nerr    atomic.Int32
	// concurrent is set for the second phase, where one caller's calls
	// may run at once: a message one of them claimed is not the other's.
	concurrent atomic.Bool
}

type propSession struct{ id, agent string }

// propMsg is a message that exists; author and actingAs may edit it.
type propMsg struct{ id, author, actingAs string }

type opStats struct {
	ok, mustFail int
	codes        map[int]int
}

const maxReported = 25

func (w *propWorld) stop() bool { return w.nerr.Load() >= maxReported }

func (w *propWorld) errorf(format string, args ...any) {
	if w.nerr.Add(1) <= maxReported {
		w.t.Errorf(format, args...)
	}
}

// outcome records an operation's result and checks a failure: an
// *rpc.Error (errors.As) whose code is one of allowed, never internal.
// It reports whether the operation succeeded.
func (w *propWorld) outcome(op string, err error, allowed ...int) bool {
	w.statsMu.Lock()
	s := w.stats[op]
	if s == nil {
		s = &opStats{codes: map[int]int{}}
		w.stats[op] = s
	}
	if err == nil {
		s.ok++
	}
	w.statsMu.Unlock()
	if err == nil {
		return true
	}
	var re *rpc.Error
	if !errors.As(err, &re) {
		w.errorf("%s: error %v (%T) is not an *rpc.Error", op, err, err)
		return false
	}
	w.statsMu.Lock()
	s.codes[re.Code]++
	w.statsMu.Unlock()
	if re.Code == rpc.CodeInternal {
		w.errorf("%s: internal error: %v", op, err)
		return false
	}
	for _, c := range allowed {
		if re.Code == c {
			return false
		}
	}
	w.errorf("%s: unexpected error code %d: %v (allowed %v)", op, re.Code, err, allowed)
	return false
}

// mustFail checks an operation that has to fail with code.
func (w *propWorld) mustFail(op string, err error, code int) {
	w.statsMu.Lock()
	s := w.stats[op]
	if s == nil {
		s = &opStats{codes: map[int]int{}}
		w.stats[op] = s
	}
	s.mustFail++
	w.statsMu.Unlock()
	if err == nil {
		w.errorf("%s: succeeded, want error code %d", op, code)
		return
	}
	var re *rpc.Error
	if !errors.As(err, &re) {
		w.errorf("%s: error %v (%T) is not an *rpc.Error", op, err, err)
		return
	}
	if re.Code != code {
		w.errorf("%s: error code %d (%v), want %d", op, re.Code, err, code)
	}
}

func (w *propWorld) logStats() {
	w.statsMu.Lock()
	defer w.statsMu.Unlock()
	names := make([]string, 0, len(w.stats))
	total := 0
	for k, s := range w.stats {
		names = append(names, k)
		total += s.ok + s.mustFail
		for _, c := range s.codes {
			total += c
		}
	}
	sort.Strings(names)
	var b strings.Builder
	for _, k := range names {
		s := w.stats[k]
		fmt.Fprintf(&b, "\n  %-16s ok %4d  must-fail %3d  errors %v", k, s.ok, s.mustFail, s.codes)
	}
	w.t.Logf("%d operations:%s", total, b.String())
}

// checkCoverage asserts that every kind of write succeeded at least once,
// so that a generator gone stale cannot make the comparison vacuous.
func (w *propWorld) checkCoverage() {
	w.statsMu.Lock()
	defer w.statsMu.Unlock()
	for _, op := range propWrites {
		if s := w.stats[op]; s == nil || s.ok == 0 {
			w.t.Errorf("operation %s never succeeded: the generator does not exercise it", op)
		}
	}
}

var propWrites = []string{
	"agent.register", "user.register", "session.start", "session.end", "session.heartbeat",
	"session.intent", "session.task", "message.send", "message.reply", "thread.create",
	"thread.create+msg", "message.edit", "message.delete", "message.markRead", "group.create",
	"group.delete", "group.member.add", "group.member.remove", "agent.delete", "agent.cleanup",
}

func (w *propWorld) addSession(s propSession) {
	w.mu.Lock()
	w.sessions = append(w.sessions, s)
	w.current[s.agent] = s.id
	w.mu.Unlock()
}

func (w *propWorld) addMessage(m propMsg) {
	w.mu.Lock()
	w.messages = append(w.messages, m)
	w.mu.Unlock()
}

// ---- the generator ----

var (
	propNames   = []string{"alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi"}
	propRoles   = []string{"dev", "qa", "ops", "reviewer"}
	propModules = []string{"core", "web", "cli"}
	propGroups  = []string{"backend", "frontend", "oncall", "grace", "dev"} // grace is a name, dev a role
	propUsers   = []string{"user:ann", "user:Bob-K", "user:carl"}
	propTags    = []string{"bug", "urgent", "idea", "needs review"}
	propScopeT  = []string{"module", "file", "feature"}
	propScopeV  = []string{"auth", "db", "ui", "main.go"}
	propRefT    = []string{"issue", "pr", "commit"}
	propBits    = []string{
		"hello", "héllo wörld", "line\nbreak", `quote " and \ backslash`, "tab\there", "emoji 🎉",
		"<b>html</b> & co", "line\u2028separator", "nul\x00byte", "ünïcode", "{\"looks\":\"like json\"}",
	}
	propStructured = []string{
		`{"k":1}`, `{"list": [1, 2, 3]}`, `{"s":"just a string"}`, `null`, `{"html":"<b>&amp;</b>"}`,
		` {"a": {"b": [true, null, 1.5e3]}} `, `{"unicode":"\u00e9\ud83c\udf89"}`,
	}
)

type propGen struct {
	w     *propWorld
	r     *rand.Rand
	exact bool // one goroutine: outcomes that depend on state can be checked
	seq   int
}

func propPick[T any](r *rand.Rand, xs []T) T { return xs[r.IntN(len(xs))] }

type propOp struct {
	weight int
	fn     func(g *propGen, ctx context.Context)
}

var propOps = []propOp{
	{8, (*propGen).register},
	{1, (*propGen).registerUser},
	{7, (*propGen).startSession},
	{3, (*propGen).endSession},
	{6, (*propGen).heartbeat},
	{2, (*propGen).intent},
	{2, (*propGen).task},
	{26, (*propGen).send},
	{6, (*propGen).reply},
	{5, (*propGen).thread},
	{6, (*propGen).edit},
	{4, (*propGen).del},
	{7, (*propGen).markRead},
	{2, (*propGen).groupCreate},
	{1, (*propGen).groupDelete},
	{4, (*propGen).memberAdd},
	{2, (*propGen).memberRemove},
	{1, (*propGen).agentDelete},
	{1, (*propGen).cleanup},
	{8, (*propGen).read},
	{8, (*propGen).invalid},
}

var propTotalWeight = func() int {
	n := 0
	for _, o := range propOps {
		n += o.weight
	}
	return n
}()

func (g *propGen) step(ctx context.Context) {
	x := g.r.IntN(propTotalWeight)
	for _, o := range propOps {
		if x < o.weight {
			o.fn(g, ctx)
			return
		}
		x -= o.weight
	}
}

// agentID picks an agent ID that is, or was, or may become registered.
func (g *propGen) agentID() string {
	g.w.mu.Lock()
	defer g.w.mu.Unlock()
	if len(g.w.unnamed) > 0 && g.r.IntN(8) == 0 {
		return propPick(g.r, g.w.unnamed)
	}
	return propPick(g.r, propNames)
}

// caller returns ctx acting as someone: mostly an agent, sometimes a user,
// a pinned session, an "@"-spelled ID, a stranger, or nobody.
func (g *propGen) caller(ctx context.Context) (context.Context, string) {
	switch p := g.r.IntN(100); {
	case p < 70:
		id := g.agentID()
		return thrum.AsAgent(ctx, id), id
	case p < 80:
		id := propPick(g.r, propUsers)
		return thrum.AsAgent(ctx, id), id
	case p < 87:
		if s, ok := g.session(); ok {
			return thrum.WithCaller(ctx, thrum.Caller{AgentID: s.agent, SessionID: s.id}), s.agent
		}
		id := g.agentID()
		return thrum.AsAgent(ctx, id), id
	case p < 93:
		id := g.agentID()
		return thrum.AsAgent(ctx, "@"+id), id
	case p < 97:
		return thrum.AsAgent(ctx, "zed"), "zed"
	default:
		return ctx, ""
	}
}

func (g *propGen) session() (propSession, bool) {
	g.w.mu.Lock()
	defer g.w.mu.Unlock()
	if len(g.w.sessions) == 0 {
		return propSession{}, false
	}
	// Favour an agent's latest session: older ones have ended.
	if g.r.IntN(5) > 0 {
		a := propPick(g.r, propNames)
		if id, ok := g.w.current[a]; ok {
			return propSession{id: id, agent: a}, true
		}
	}
	return g.w.sessions[g.r.IntN(len(g.w.sessions))], true
}

func (g *propGen) message() (propMsg, bool) {
	g.w.mu.Lock()
	defer g.w.mu.Unlock()
	if len(g.w.messages) == 0 {
		return propMsg{}, false
	}
	return g.w.messages[g.r.IntN(len(g.w.messages))], true
}

func (g *propGen) threadID() string {
	g.w.mu.Lock()
	defer g.w.mu.Unlock()
	if len(g.w.threads) == 0 || g.r.IntN(20) == 0 {
		return "thr_nope"
	}
	return g.w.threads[g.r.IntN(len(g.w.threads))]
}

func (g *propGen) content() string {
	g.seq++
	parts := []string{}
	for i := g.r.IntN(3); i >= 0; i-- {
		parts = append(parts, propPick(g.r, propBits))
	}
	if g.r.IntN(50) == 0 {
		parts = append(parts, "bad\xffutf8")
	}
	return strings.Join(parts, " ") + fmt.Sprintf(" #%d", g.seq)
}

func (g *propGen) scopes(max int) []rpc.Pair {
	var out []rpc.Pair
	for i := g.r.IntN(max + 1); i > 0; i-- {
		out = append(out, rpc.Pair{Type: propPick(g.r, propScopeT), Value: propPick(g.r, propScopeV)})
	}
	return out
}

func (g *propGen) refs(max int) []rpc.Pair {
	var out []rpc.Pair
	for i := g.r.IntN(max + 1); i > 0; i-- {
		out = append(out, rpc.Pair{Type: propPick(g.r, propRefT), Value: strconv.Itoa(g.r.IntN(5))})
	}
	return out
}

func (g *propGen) mention() string {
	switch p := g.r.IntN(100); {
	case p < 40:
		return g.agentID()
	case p < 55:
		return "@" + propPick(g.r, propRoles)
	case p < 70:
		return propPick(g.r, propGroups)
	case p < 78:
		return "@everyone"
	case p < 86:
		return propPick(g.r, propUsers)
	case p < 92:
		return "agent:" + propPick(g.r, propRoles) + ":abc123" // legacy form: resolves as its role
	default:
		return "nobody_here"
	}
}

func (g *propGen) mentions() []string {
	var out []string
	for i := g.r.IntN(4) - 1; i > 0; i-- {
		out = append(out, g.mention())
	}
	return out
}

func (g *propGen) tags() []string {
	var out []string
	for i := g.r.IntN(4) - 1; i > 0; i-- {
		out = append(out, propPick(g.r, propTags))
	}
	return out
}

func (g *propGen) structured() json.RawMessage {
	if g.r.IntN(3) > 0 {
		return nil
	}
	return json.RawMessage(propPick(g.r, propStructured))
}

// ---- writes ----

func (g *propGen) register(ctx context.Context) {
	p := &rpc.RegisterAgentParams{
		Role: propPick(g.r, propRoles), Module: propPick(g.r, propModules),
		Force: g.r.IntN(8) == 0, ReRegister: g.r.IntN(8) == 0,
	}
	switch x := g.r.IntN(100); {
	case x < 85:
		p.Name = propPick(g.r, propNames)
	case x < 93:
		p.Name = "" // an unnamed agent: role_<hash>
	default:
		p.Name = propPick(g.r, propGroups) // may collide with a group or equal the role
	}
	if g.r.IntN(4) == 0 {
		p.Display = "Agent " + p.Name
	}
	res, err := g.w.n.RegisterAgent(ctx, p)
	if !g.w.outcome("agent.register", err, rpc.CodeConflict, rpc.CodeInvalidParams) {
		return
	}
	switch res.Status {
	case "conflict":
		if res.Conflict == nil || res.Token != "" {
			g.w.errorf("agent.register %+v: conflict %+v with token %q", p, res.Conflict, res.Token)
		}
		return
	case "registered", "updated":
	default:
		g.w.errorf("agent.register %+v: status %q", p, res.Status)
		return
	}
	if p.Name != "" && res.AgentID != p.Name {
		g.w.errorf("agent.register %+v: agent_id %q", p, res.AgentID)
	}
	if p.Name == "" {
		g.w.mu.Lock()
		if !propContains(g.w.unnamed, res.AgentID) {
			g.w.unnamed = append(g.w.unnamed, res.AgentID)
		}
		g.w.mu.Unlock()
	}
	if g.exact {
		id, err := g.w.n.Authenticate(ctx, res.Token)
		if err != nil || id != res.AgentID {
			g.w.errorf("agent.register %+v: its token authenticates as %q, %v; want %q", p, id, err, res.AgentID)
		}
	}
}

func (g *propGen) registerUser(ctx context.Context) {
	u := strings.TrimPrefix(propPick(g.r, propUsers), "user:")
	res, err := g.w.n.RegisterUser(ctx, &rpc.RegisterUserParams{Username: u, Display: "Display " + u})
	if g.w.outcome("user.register", err) && res.UserID != "user:"+u {
		g.w.errorf("user.register %s: user_id %q", u, res.UserID)
	}
}

func (g *propGen) startSession(ctx context.Context) {
	id := g.agentID()
	switch x := g.r.IntN(100); {
	case x < 75:
		ctx = thrum.AsAgent(ctx, id)
	case x < 85:
		ctx = thrum.AsAgent(ctx, propPick(g.r, propUsers)) // users may start agents' sessions
	case x < 90:
		ctx = thrum.AsAgent(ctx, g.agentID()) // someone else, usually forbidden
	}
	p := &rpc.StartSessionParams{AgentID: id, Scopes: g.scopes(2), Refs: g.refs(2)}
	if g.w.repo != "" && g.r.IntN(25) == 0 {
		p.Refs = append(p.Refs, rpc.Pair{Type: rpc.RefWorktree, Value: g.w.repo})
	}
	res, err := g.w.n.StartSession(ctx, p)
	if g.w.outcome("session.start", err, rpc.CodeForbidden, rpc.CodeNotFound) {
		if res.AgentID != id || !strings.HasPrefix(res.SessionID, "ses_") {
			g.w.errorf("session.start %s: %+v", id, res)
		}
		g.w.addSession(propSession{id: res.SessionID, agent: id})
	}
}

// sessionCaller returns a session (or a bogus one) and a ctx acting,
// mostly, as its agent.
func (g *propGen) sessionCaller(ctx context.Context) (context.Context, string) {
	s, ok := g.session()
	if !ok || g.r.IntN(30) == 0 {
		s = propSession{id: "ses_nope", agent: g.agentID()}
	}
	switch x := g.r.IntN(100); {
	case x < 80:
		ctx = thrum.AsAgent(ctx, s.agent)
	case x < 88:
		ctx = thrum.AsAgent(ctx, propPick(g.r, propUsers))
	case x < 95:
		ctx = thrum.AsAgent(ctx, g.agentID())
	}
	return ctx, s.id
}

var sessionErrs = []int{rpc.CodeNotFound, rpc.CodeForbidden, rpc.CodeConflict}

func (g *propGen) endSession(ctx context.Context) {
	ctx, sid := g.sessionCaller(ctx)
	reason := propPick(g.r, []string{"", "normal", "crash", "superseded"})
	res, err := g.w.n.EndSession(ctx, &rpc.EndSessionParams{SessionID: sid, Reason: reason})
	if g.w.outcome("session.end", err, sessionErrs...) && res.SessionID != sid {
		g.w.errorf("session.end %s: %+v", sid, res)
	}
}

func (g *propGen) heartbeat(ctx context.Context) {
	ctx, sid := g.sessionCaller(ctx)
	p := &rpc.HeartbeatParams{
		SessionID: sid, AddScopes: g.scopes(2), RemoveScopes: g.scopes(2), AddRefs: g.refs(2), RemoveRefs: g.refs(1),
	}
	if g.w.repo != "" && g.r.IntN(15) == 0 {
		p.AddRefs = append(p.AddRefs, rpc.Pair{Type: rpc.RefWorktree, Value: g.w.repo})
	}
	if g.w.repo != "" && g.r.IntN(8) == 0 {
		p.RemoveRefs = append(p.RemoveRefs, rpc.Pair{Type: rpc.RefWorktree, Value: g.w.repo})
	}
	_, err := g.w.n.Heartbeat(ctx, p)
	g.w.outcome("session.heartbeat", err, sessionErrs...)
}

func (g *propGen) intent(ctx context.Context) {
	ctx, sid := g.sessionCaller(ctx)
	intent := ""
	if g.r.IntN(4) > 0 {
		intent = g.content()
	}
	res, err := g.w.n.SetIntent(ctx, &rpc.SetIntentParams{SessionID: sid, Intent: &intent})
	if g.w.outcome("session.intent", err, sessionErrs...) && res.Intent != intent {
		g.w.errorf("session.intent: %+v, want intent %q", res, intent)
	}
}

func (g *propGen) task(ctx context.Context) {
	ctx, sid := g.sessionCaller(ctx)
	task := ""
	if g.r.IntN(4) > 0 {
		task = "task " + strconv.Itoa(g.r.IntN(100))
	}
	_, err := g.w.n.SetTask(ctx, &rpc.SetTaskParams{SessionID: sid, CurrentTask: &task})
	g.w.outcome("session.task", err, sessionErrs...)
}

// sendErrs are the ways a well-formed send can fail: the caller is
// nobody, unknown, has no session or may not act as someone; a mention,
// thread or reply target does not exist.
var sendErrs = []int{rpc.CodeUnauthenticated, rpc.CodeNotFound, rpc.CodeConflict, rpc.CodeForbidden}

func (g *propGen) sendParams() *rpc.SendMessageParams {
	p := &rpc.SendMessageParams{
		Content: g.content(), Format: propPick(g.r, []string{"", rpc.FormatMarkdown, rpc.FormatPlain, rpc.FormatJSON}),
		Structured: g.structured(), Scopes: g.scopes(3), Refs: g.refs(2), Mentions: g.mentions(), Tags: g.tags(),
		Priority: propPick(g.r, []string{"", rpc.PriorityLow, rpc.PriorityNormal, rpc.PriorityHigh, rpc.PriorityCritical}),
	}
	if g.r.IntN(10) == 0 {
		p.Refs = append(p.Refs, rpc.Pair{Type: rpc.RefMention, Value: g.mention()}) // a mention given as a ref
	}
	return p
}

func (g *propGen) send(ctx context.Context) {
	ctx, who := g.caller(ctx)
	p := g.sendParams()
	if g.r.IntN(8) == 0 {
		p.ThreadID = g.threadID()
	}
	if strings.HasPrefix(who, "user:") && g.r.IntN(3) == 0 {
		p.ActingAs = g.agentID()
		p.Disclose = g.r.IntN(2) == 0
	} else if g.r.IntN(40) == 0 {
		p.ActingAs = g.agentID() // an agent may not: forbidden
	}
	g.doSend(ctx, "message.send", who, p)
}

func (g *propGen) reply(ctx context.Context) {
	ctx, who := g.caller(ctx)
	p := g.sendParams()
	if m, ok := g.message(); ok && g.r.IntN(20) > 0 {
		p.Refs = append(p.Refs, rpc.Pair{Type: rpc.RefReplyTo, Value: m.id})
	} else {
		p.Refs = append(p.Refs, rpc.Pair{Type: rpc.RefReplyTo, Value: "msg_nope"})
	}
	g.doSend(ctx, "message.reply", who, p)
}

func (g *propGen) doSend(ctx context.Context, op, who string, p *rpc.SendMessageParams) {
	res, err := g.w.n.SendMessage(ctx, p)
	if !g.w.outcome(op, err, sendErrs...) {
		return
	}
	author, actingAs := who, ""
	if p.ActingAs != "" {
		author, actingAs = p.ActingAs, who
	}
	g.w.addMessage(propMsg{id: res.MessageID, author: author, actingAs: actingAs})
	g.checkSent(ctx, op, p, res, author)
}

// checkSent reads a message back right after its send returned
// (read-your-writes) and compares it with what was sent.
func (g *propGen) checkSent(ctx context.Context, op string, p *rpc.SendMessageParams, res *rpc.SendMessageResult, author string) {
	got, err := g.w.n.GetMessage(ctx, &rpc.GetMessageParams{MessageID: res.MessageID})
	if err != nil {
		g.w.errorf("%s: message %s not readable right after the send: %v", op, res.MessageID, err)
		return
	}
	m := got.Message
	mentions := 0
	for _, r := range m.Refs {
		if r.Type == rpc.RefMention {
			mentions++
		}
	}
	wantPriority := p.Priority
	if wantPriority == "" {
		wantPriority = rpc.PriorityNormal
	}
	wantTags := p.Tags
	if wantTags == nil {
		wantTags = []string{}
	}
	switch {
	case m.Author.AgentID != author:
		g.w.errorf("%s: %s has author %q, want %q", op, res.MessageID, m.Author.AgentID, author)
	case m.ThreadID != p.ThreadID:
		g.w.errorf("%s: %s has thread %q, want %q", op, res.MessageID, m.ThreadID, p.ThreadID)
	case m.Priority != wantPriority:
		g.w.errorf("%s: %s has priority %q, want %q", op, res.MessageID, m.Priority, wantPriority)
	case !reflect.DeepEqual(m.Tags, wantTags):
		g.w.errorf("%s: %s has tags %q, want %q", op, res.MessageID, m.Tags, wantTags)
	case mentions != len(res.Recipients):
		g.w.errorf("%s: %s has %d mention refs, the send reported %d recipients", op, res.MessageID, mentions, len(res.Recipients))
	case !propSameJSON(m.Body.Structured, p.Structured):
		g.w.errorf("%s: %s has structured %q, want %q", op, res.MessageID, m.Body.Structured, p.Structured)
	case g.exact && m.Body.Content != strings.ToValidUTF8(p.Content, "\uFFFD"):
		// Invalid UTF-8 cannot travel in a JSON log line: it reads back
		// with U+FFFD, as it would after crossing the JSON-RPC wire, and
		// as a projection rebuilt from the log has it.
		g.w.errorf("%s: %s has content %q, want %q", op, res.MessageID, m.Body.Content, strings.ToValidUTF8(p.Content, "\uFFFD"))
	}
}

// sameJSON compares stored structured data with what was sent: the
// same JSON value, and "" for none or null.
func propSameJSON(got string, sent json.RawMessage) bool {
	s := strings.TrimSpace(string(sent))
	if s == "" || s == "null" {
		return got == ""
	}
	var a, b any
	if json.Unmarshal([]byte(got), &a) != nil || json.Unmarshal(sent, &b) != nil {
		return false
	}
	return reflect.DeepEqual(a, b)
}

func (g *propGen) thread(ctx context.Context) {
	ctx, who := g.caller(ctx)
	p := &rpc.CreateThreadParams{Title: "thread " + g.content(), Scopes: g.scopes(2)}
	op := "thread.create"
	if g.r.IntN(2) == 0 {
		op = "thread.create+msg"
		p.Recipient = g.mention()
		p.Message = &rpc.ThreadMessage{Content: g.content(), Format: rpc.FormatPlain, Structured: g.structured()}
		if strings.HasPrefix(who, "user:") && g.r.IntN(3) == 0 {
			p.ActingAs = g.agentID()
		}
	}
	res, err := g.w.n.CreateThread(ctx, p)
	if !g.w.outcome(op, err, sendErrs...) {
		return
	}
	g.w.mu.Lock()
	g.w.threads = append(g.w.threads, res.ThreadID)
	g.w.mu.Unlock()
	if (res.MessageID != "") != (p.Message != nil) {
		g.w.errorf("%s: message_id %q with message %v", op, res.MessageID, p.Message)
	}
	if res.MessageID != "" {
		author, actingAs := who, ""
		if p.ActingAs != "" {
			author, actingAs = p.ActingAs, who
		}
		g.w.addMessage(propMsg{id: res.MessageID, author: author, actingAs: actingAs})
		got, err := g.w.n.GetMessage(ctx, &rpc.GetMessageParams{MessageID: res.MessageID})
		if err != nil || got.Message.ThreadID != res.ThreadID {
			g.w.errorf("%s: first message %s: %+v, %v; want it in thread %s", op, res.MessageID, got, err, res.ThreadID)
		}
	}
}

// editor returns a ctx for changing m: mostly its author (or the user who
// wrote it as the author), sometimes someone else or nobody.
func (g *propGen) editor(ctx context.Context, m propMsg) (context.Context, string) {
	switch x := g.r.IntN(100); {
	case x < 65:
		return thrum.AsAgent(ctx, m.author), m.author
	case x < 80 && m.actingAs != "":
		return thrum.AsAgent(ctx, m.actingAs), m.actingAs
	case x < 95:
		return g.caller(ctx)
	default:
		return ctx, ""
	}
}

var changeErrs = []int{rpc.CodeUnauthenticated, rpc.CodeForbidden, rpc.CodeConflict, rpc.CodeNotFound}

func (g *propGen) edit(ctx context.Context) {
	m, ok := g.message()
	if !ok {
		return
	}
	ctx, _ = g.editor(ctx, m)
	p := &rpc.EditMessageParams{MessageID: m.id}
	if g.r.IntN(4) > 0 {
		c := "edited " + g.content()
		p.Content = &c
	}
	if p.Content == nil || g.r.IntN(3) == 0 {
		p.Structured = json.RawMessage(propPick(g.r, propStructured[:3]))
	}
	res, err := g.w.n.EditMessage(ctx, p)
	if !g.w.outcome("message.edit", err, changeErrs...) || !g.exact {
		return
	}
	got, err := g.w.n.GetMessage(ctx, &rpc.GetMessageParams{MessageID: m.id})
	switch {
	case err != nil:
		g.w.errorf("message.edit %s: read back: %v", m.id, err)
	case got.Message.Version != res.Version:
		g.w.errorf("message.edit %s: version %d, the edit reported %d", m.id, got.Message.Version, res.Version)
	case p.Content != nil && got.Message.Body.Content != strings.ToValidUTF8(*p.Content, "\uFFFD"):
		g.w.errorf("message.edit %s: content %q, want %q", m.id, got.Message.Body.Content, strings.ToValidUTF8(*p.Content, "\uFFFD"))
	case len(p.Structured) > 0 && !propSameJSON(got.Message.Body.Structured, p.Structured):
		g.w.errorf("message.edit %s: structured %q, want %s", m.id, got.Message.Body.Structured, p.Structured)
	}
}

func (g *propGen) del(ctx context.Context) {
	m, ok := g.message()
	if !ok {
		return
	}
	ctx, _ = g.editor(ctx, m)
	_, err := g.w.n.DeleteMessage(ctx, &rpc.DeleteMessageParams{MessageID: m.id, Reason: propPick(g.r, []string{"", "oops"})})
	if !g.w.outcome("message.delete", err, changeErrs...) {
		return
	}
	got, err := g.w.n.GetMessage(ctx, &rpc.GetMessageParams{MessageID: m.id})
	if err != nil || !got.Message.Deleted {
		g.w.errorf("message.delete %s: read back %+v, %v; want deleted", m.id, got, err)
	}
}

func (g *propGen) markRead(ctx context.Context) {
	ctx, who := g.caller(ctx)
	var ids []string
	known := map[string]bool{}
	for i := 1 + g.r.IntN(5); i > 0; i-- {
		if m, ok := g.message(); ok && g.r.IntN(10) > 0 {
			ids = append(ids, m.id)
			known[m.id] = true
		} else {
			ids = append(ids, "msg_nope")
		}
	}
	if g.r.IntN(5) == 0 {
		ids = append(ids, ids[0]) // duplicates count once
	}
	// What this call should newly mark: the known messages the caller has
	// not read yet (its own count as read). An unknown ID fails the call.
	unread := map[string]bool{}
	for id := range known {
		if got, err := g.w.n.GetMessage(ctx, &rpc.GetMessageParams{MessageID: id}); err == nil && !got.Message.IsRead {
			unread[id] = true
		}
	}
	res, err := g.w.n.MarkRead(ctx, &rpc.MarkReadParams{MessageIDs: ids})
	if slices.Contains(ids, "msg_nope") && err == nil {
		g.w.errorf("message.markRead %v as %q: no error for an unknown ID", ids, who)
		return
	}
	if !g.w.outcome("message.markRead", err, rpc.CodeUnauthenticated, rpc.CodeConflict, rpc.CodeNotFound) {
		return
	}
	// A message the same caller's concurrent call claimed is that call's
	// to mark: this one leaves it.
	concurrent := g.w.concurrent.Load()
	if res.MarkedCount != len(res.MarkedIDs) || res.MarkedCount > len(unread) || !concurrent && res.MarkedCount != len(unread) {
		g.w.errorf("message.markRead %v as %q: marked %d %v, want the %d unread", ids, who, res.MarkedCount, res.MarkedIDs, len(unread))
	}
	for _, id := range res.MarkedIDs {
		if !unread[id] {
			g.w.errorf("message.markRead as %q claimed %s, which was read already", who, id)
		}
	}
	// Read state only grows: every message is read by the caller now, or,
	// if a concurrent call claimed it, once that call has written its read.
	for id := range known {
		for wait := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			got, err := g.w.n.GetMessage(ctx, &rpc.GetMessageParams{MessageID: id})
			if err == nil && got.Message.IsRead {
				break
			}
			if !concurrent || time.Now().After(wait) {
				g.w.errorf("message.markRead as %q returned marked_count %d, but message %s reads back is_read=false (err %v)",
					who, res.MarkedCount, id, err)
				break
			}
		}
	}
}

var groupErrs = []int{rpc.CodeUnauthenticated, rpc.CodeConflict, rpc.CodeNotFound, rpc.CodeForbidden}

func (g *propGen) groupCreate(ctx context.Context) {
	ctx, _ = g.caller(ctx)
	name := propPick(g.r, propGroups)
	if g.r.IntN(5) == 0 {
		name = "@" + name
	}
	_, err := g.w.n.CreateGroup(ctx, &rpc.CreateGroupParams{Name: name, Description: g.content()})
	g.w.outcome("group.create", err, groupErrs...)
}

func (g *propGen) groupDelete(ctx context.Context) {
	ctx, _ = g.caller(ctx)
	_, err := g.w.n.DeleteGroup(ctx, &rpc.DeleteGroupParams{Name: propPick(g.r, propGroups)})
	g.w.outcome("group.delete", err, groupErrs...)
}

func (g *propGen) member() *rpc.GroupMembership {
	p := &rpc.GroupMembership{Group: propPick(g.r, propGroups), MemberType: rpc.MemberAgent, MemberID: g.agentID()}
	if g.r.IntN(4) > 0 { // mostly a group that exists (but never everyone, which is implicit)
		if gs, err := g.w.n.ListGroups(context.Background(), &rpc.ListGroupsParams{}); err == nil {
			var names []string
			for _, gr := range gs.Groups {
				if gr.Name != thrum.EveryoneGroup {
					names = append(names, gr.Name)
				}
			}
			if len(names) > 0 {
				p.Group = propPick(g.r, names)
			}
		}
	}
	if g.r.IntN(3) == 0 {
		p.MemberType, p.MemberID = rpc.MemberRole, propPick(g.r, propRoles)
	}
	return p
}

func (g *propGen) memberAdd(ctx context.Context) {
	ctx, _ = g.caller(ctx)
	_, err := g.w.n.AddGroupMember(ctx, g.member())
	g.w.outcome("group.member.add", err, groupErrs...)
}

func (g *propGen) memberRemove(ctx context.Context) {
	ctx, _ = g.caller(ctx)
	p := g.member()
	if g.r.IntN(4) > 0 { // mostly a member that is there, of any group that has one
		for _, i := range g.r.Perm(len(propGroups)) {
			info, err := g.w.n.GroupInfo(ctx, &rpc.GroupInfoParams{Name: propGroups[i]})
			if err == nil && len(info.Members) > 0 {
				m := propPick(g.r, info.Members)
				p.Group, p.MemberType, p.MemberID = propGroups[i], m.Type, m.ID
				break
			}
		}
	}
	_, err := g.w.n.RemoveGroupMember(ctx, p)
	g.w.outcome("group.member.remove", err, groupErrs...)
}

func (g *propGen) agentDelete(ctx context.Context) {
	id := g.agentID()
	if g.r.IntN(10) == 0 {
		id = "nobody_here"
	}
	_, err := g.w.n.DeleteAgent(ctx, &rpc.DeleteAgentParams{Name: id})
	g.w.outcome("agent.delete", err, rpc.CodeNotFound)
}

// cleanup deletes every agent not seen for 30 days — all of them, seen
// from a clock 40 days ahead — or, without force, only lists them.
func (g *propGen) cleanup(ctx context.Context) {
	p := &rpc.CleanupAgentsParams{DryRun: g.r.IntN(4) == 0, Force: true}
	if g.r.IntN(6) > 0 { // mostly a dry run: a real one empties the world
		p.Force = false
	} else {
		g.w.skew.Store(int64(40 * 24 * time.Hour))
		defer g.w.skew.Store(0)
	}
	res, err := g.w.n.CleanupAgents(ctx, p)
	if g.w.outcome("agent.cleanup", err) && res.DryRun != (p.DryRun || !p.Force) {
		g.w.errorf("agent.cleanup %+v: dry_run %v", p, res.DryRun)
	}
}

// ---- reads (they must not fail internally either) ----

func (g *propGen) read(ctx context.Context) {
	ctx, _ = g.caller(ctx)
	n := g.w.n
	var err error
	op := "read"
	switch g.r.IntN(10) {
	case 0, 1, 2:
		op = "message.list"
		p := &rpc.ListMessagesParams{
			PageSize: g.r.IntN(30), Page: g.r.IntN(3), SortBy: propPick(g.r, []string{"", "created_at", "updated_at"}),
			SortOrder: propPick(g.r, []string{"", "asc", "desc"}), IncludeDeleted: g.r.IntN(3) == 0,
		}
		switch g.r.IntN(7) {
		case 0:
			p.Mentions = true
		case 1:
			p.Unread = true
		case 2:
			p.MentionRole = propPick(g.r, propRoles)
		case 3:
			p.UnreadForAgent = g.agentID()
		case 4:
			p.AuthorID = g.agentID()
		case 5:
			s := g.scopes(1)
			if len(s) > 0 {
				p.Scope = &s[0]
			}
		case 6:
			p.ThreadID = g.threadID()
		}
		_, err = n.ListMessages(ctx, p)
	case 3:
		op = "thread.list"
		_, err = n.ListThreads(ctx, &rpc.ListThreadsParams{PageSize: 5})
	case 4:
		op = "thread.get"
		_, err = n.GetThread(ctx, &rpc.GetThreadParams{ThreadID: g.threadID()})
	case 5:
		op = "agent.list"
		_, err = n.ListAgents(ctx, &rpc.ListAgentsParams{Role: propPick(g.r, append([]string{""}, propRoles...))})
	case 6:
		op = "session.list"
		_, err = n.ListSessions(ctx, &rpc.ListSessionsParams{AgentID: g.agentID(), ActiveOnly: g.r.IntN(2) == 0})
	case 7:
		op = "agent.listContext"
		_, err = n.ListContext(ctx, &rpc.ListContextParams{})
	case 8:
		op = "group.members"
		_, err = n.GroupMembers(ctx, &rpc.GroupMembersParams{Name: propPick(g.r, propGroups), Expand: true})
	case 9:
		op = "agent.whoami"
		_, err = n.Whoami(ctx, &rpc.WhoamiParams{})
	}
	g.w.outcome(op, err, rpc.CodeNotFound, rpc.CodeUnauthenticated)
}

// ---- writes that must fail, whatever the state ----

func (g *propGen) invalid(ctx context.Context) {
	n, w := g.w.n, g.w
	user := thrum.AsAgent(ctx, "user:ann") // registered first, never deleted, needs no session
	long := strings.Repeat("x", 5000)
	tooMany := func() []rpc.Pair {
		out := make([]rpc.Pair, 101)
		for i := range out {
			out[i] = rpc.Pair{Type: "t", Value: strconv.Itoa(i)}
		}
		return out
	}
	valid := func() *rpc.SendMessageParams { return &rpc.SendMessageParams{Content: "x"} }
	var err error
	switch c := g.r.IntN(24); c {
	case 0:
		_, err = n.RegisterAgent(ctx, &rpc.RegisterAgentParams{Name: propPick(g.r, []string{"Bad-Name", "bad name", "system", "daemon", strings.Repeat("a", 65)}), Role: "dev", Module: "core"})
		w.mustFail("agent.register", err, rpc.CodeInvalidParams)
	case 1:
		role := propPick(g.r, propRoles)
		_, err = n.RegisterAgent(ctx, &rpc.RegisterAgentParams{Name: role, Role: role, Module: "core"})
		w.mustFail("agent.register", err, rpc.CodeInvalidParams)
	case 2:
		_, err = n.RegisterAgent(ctx, &rpc.RegisterAgentParams{Name: "alice", Role: propPick(g.r, []string{"", "Dev"}), Module: "core"})
		w.mustFail("agent.register", err, rpc.CodeInvalidParams)
	case 3:
		_, err = n.RegisterUser(ctx, &rpc.RegisterUserParams{Username: propPick(g.r, []string{"", "agent:x", "bad name", strings.Repeat("u", 33)})})
		w.mustFail("user.register", err, rpc.CodeInvalidParams)
	case 4:
		_, err = n.StartSession(ctx, &rpc.StartSessionParams{})
		w.mustFail("session.start", err, rpc.CodeInvalidParams)
	case 5:
		ctx, sid := g.sessionCaller(ctx)
		_, err = n.EndSession(ctx, &rpc.EndSessionParams{SessionID: sid, Reason: "bored"})
		w.mustFail("session.end", err, rpc.CodeInvalidParams)
	case 6:
		ctx, sid := g.sessionCaller(ctx)
		_, err = n.Heartbeat(ctx, &rpc.HeartbeatParams{SessionID: sid, AddScopes: tooMany()})
		w.mustFail("session.heartbeat", err, rpc.CodeLimitExceeded)
	case 7:
		ctx, sid := g.sessionCaller(ctx)
		_, err = n.SetTask(ctx, &rpc.SetTaskParams{SessionID: sid, CurrentTask: &long})
		w.mustFail("session.task", err, rpc.CodeLimitExceeded)
	case 8:
		ctx, _ := g.caller(ctx)
		p := valid()
		switch g.r.IntN(6) {
		case 0:
			p.Content = ""
		case 1:
			p.Format = "html"
		case 2:
			p.Priority = "asap"
		case 3:
			p.Structured = json.RawMessage(`{"unterminated":`)
		case 4:
			p.Scopes = []rpc.Pair{{Type: "", Value: "x"}}
		case 5:
			p.Refs = []rpc.Pair{{Type: "issue"}}
		}
		_, err = n.SendMessage(ctx, p)
		w.mustFail("message.send", err, rpc.CodeInvalidParams)
	case 9:
		ctx, _ := g.caller(ctx)
		p := valid()
		switch g.r.IntN(3) {
		case 0:
			p.Content = long // over MaxContentBytes
		case 1:
			p.Tags = make([]string, 51)
			for i := range p.Tags {
				p.Tags[i] = "t"
			}
		case 2:
			p.Mentions = make([]string, 51)
			for i := range p.Mentions {
				p.Mentions[i] = "everyone"
			}
		}
		_, err = n.SendMessage(ctx, p)
		w.mustFail("message.send", err, rpc.CodeLimitExceeded)
	case 10:
		_, err = n.SendMessage(ctx, valid()) // no caller
		w.mustFail("message.send", err, rpc.CodeUnauthenticated)
	case 11:
		p := valid()
		switch g.r.IntN(3) {
		case 0:
			p.ThreadID = "thr_nope"
		case 1:
			p.Refs = []rpc.Pair{{Type: rpc.RefReplyTo, Value: "msg_nope"}}
		case 2:
			p.Mentions = []string{"@nobody_here"}
		}
		_, err = n.SendMessage(user, p)
		w.mustFail("message.send", err, rpc.CodeNotFound)
	case 12:
		_, err = n.SendMessage(user, &rpc.SendMessageParams{Content: "x", Mentions: []string{"@"}})
		w.mustFail("message.send", err, rpc.CodeInvalidParams)
	case 13:
		p := &rpc.CreateThreadParams{Title: "t", Recipient: "everyone"} // recipient without message
		if g.r.IntN(2) == 0 {
			p = &rpc.CreateThreadParams{Title: ""}
		}
		_, err = n.CreateThread(user, p)
		w.mustFail("thread.create", err, rpc.CodeInvalidParams)
	case 14:
		id := "msg_nope"
		if m, ok := g.message(); ok {
			id = m.id
		}
		empty := ""
		p := &rpc.EditMessageParams{MessageID: id}
		if g.r.IntN(2) == 0 {
			p.Content = &empty
		}
		_, err = n.EditMessage(user, p)
		w.mustFail("message.edit", err, rpc.CodeInvalidParams)
	case 15:
		_, err = n.EditMessage(user, &rpc.EditMessageParams{MessageID: "msg_nope", Content: &long})
		w.mustFail("message.edit", err, rpc.CodeLimitExceeded)
	case 16:
		_, err = n.DeleteMessage(user, &rpc.DeleteMessageParams{MessageID: "msg_nope"})
		w.mustFail("message.delete", err, rpc.CodeNotFound)
	case 17:
		ids := []string{}
		if g.r.IntN(2) == 0 {
			ids = make([]string, 1001)
			for i := range ids {
				ids[i] = "msg_" + strconv.Itoa(i)
			}
		}
		_, err = n.MarkRead(user, &rpc.MarkReadParams{MessageIDs: ids})
		w.mustFail("message.markRead", err, map[bool]int{true: rpc.CodeInvalidParams, false: rpc.CodeLimitExceeded}[len(ids) == 0])
	case 18:
		_, err = n.MarkRead(ctx, &rpc.MarkReadParams{MessageIDs: []string{"msg_nope"}})
		w.mustFail("message.markRead", err, rpc.CodeUnauthenticated)
	case 19:
		_, err = n.CreateGroup(user, &rpc.CreateGroupParams{Name: propPick(g.r, []string{"", "Bad Group", "a-b"})})
		w.mustFail("group.create", err, rpc.CodeInvalidParams)
	case 20:
		_, err = n.CreateGroup(user, &rpc.CreateGroupParams{Name: "everyone"})
		w.mustFail("group.create", err, rpc.CodeConflict)
	case 21:
		_, err = n.DeleteGroup(user, &rpc.DeleteGroupParams{Name: propPick(g.r, []string{"everyone", "@everyone"})})
		w.mustFail("group.delete", err, rpc.CodeForbidden)
	case 22:
		p := g.member()
		if g.r.IntN(2) == 0 {
			p.Group = "everyone"
			_, err = n.AddGroupMember(user, p)
			w.mustFail("group.member.add", err, rpc.CodeForbidden)
		} else {
			p.MemberType = "team"
			_, err = n.RemoveGroupMember(user, p)
			w.mustFail("group.member.remove", err, rpc.CodeInvalidParams)
		}
	case 23:
		_, err = n.DeleteAgent(ctx, &rpc.DeleteAgentParams{Name: propPick(g.r, []string{"", "Bad!", "user:ann"})})
		w.mustFail("agent.delete", err, rpc.CodeInvalidParams)
	}
}

// ---- helpers ----

func propContains(xs []string, x string) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}

func dumpProjection(t *testing.T, s *store.Store) map[string][]string {
	t.Helper()
	d, err := s.Dump(context.Background())
	if err != nil {
		t.Fatalf("dump: %v", err)
	}
	return d
}

func propRowCounts(d map[string][]string) string {
	var parts []string
	for _, tb := range store.Tables {
		parts = append(parts, fmt.Sprintf("%s=%d", tb, len(d[tb])))
	}
	return strings.Join(parts, " ")
}

// diffDumps compares two dumps table by table and describes the first
// differing rows of each table that differs; "" means equal.
func diffDumps(a, b map[string][]string) string {
	tables := append([]string(nil), store.Tables...)
	for _, m := range []map[string][]string{a, b} {
		for k := range m {
			if !propContains(tables, k) {
				tables = append(tables, k)
			}
		}
	}
	var out strings.Builder
	for _, tb := range tables {
		onlyA, onlyB := diffSorted(a[tb], b[tb])
		if len(onlyA)+len(onlyB) == 0 {
			continue
		}
		fmt.Fprintf(&out, "table %s: %d vs %d rows; %d only in the first, %d only in the second\n",
			tb, len(a[tb]), len(b[tb]), len(onlyA), len(onlyB))
		for i := 0; i < len(onlyA) && i < 3; i++ {
			fmt.Fprintf(&out, "  first:  %s\n", onlyA[i])
		}
		for i := 0; i < len(onlyB) && i < 3; i++ {
			fmt.Fprintf(&out, "  second: %s\n", onlyB[i])
		}
	}
	return out.String()
}

// sortedDiff returns the rows of sorted multisets a and b that the other
// lacks.
func diffSorted(a, b []string) (onlyA, onlyB []string) {
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b) || i < len(a) && a[i] < b[j]:
			onlyA = append(onlyA, a[i])
			i++
		case i == len(a) || b[j] < a[i]:
			onlyB = append(onlyB, b[j])
			j++
		default:
			i++
			j++
		}
	}
	return onlyA, onlyB
}

// reapply scans the whole log and applies it to s in batches of size.
func reapplyLog(t *testing.T, lg *eventlog.Log, s *store.Store, size int) int {
	t.Helper()
	ctx := context.Background()
	var batch []*eventlog.Event
	n := 0
	flush := func() error {
		err := s.Apply(ctx, batch)
		n += len(batch)
		batch = batch[:0]
		return err
	}
	_, err := lg.Scan(ctx, nil, func(e *eventlog.Event) error {
		e.Raw = bytes.Clone(e.Raw) // Scan's Raw is only valid during the call
		batch = append(batch, e)
		if len(batch) == size {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	if err != nil {
		t.Fatalf("reapply the log: %v", err)
	}
	return n
}

// copyDB copies a closed SQLite database (and its WAL, if any).
func copyProjection(t *testing.T, from, to string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, suffix := range []string{"", "-wal"} {
		src, err := os.Open(from + suffix)
		if errors.Is(err, os.ErrNotExist) && suffix != "" {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		dst, err := os.Create(to + suffix)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(dst, src); err != nil {
			t.Fatal(err)
		}
		src.Close()
		if err := dst.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// propGitRepo creates a worktree on a feature branch with a commit not on
// main and an uncommitted change, so heartbeats record a work context. It
// returns "" (and heartbeats skip work contexts) when git is missing.
func propGitRepo(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Logf("git not found: no work contexts in this run")
		return ""
	}
	dir := thrumtest.GitRepo(t)
	git := func(args ...string) { t.Helper(); thrumtest.Git(t, dir, args...) }
	write := func(name, s string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.go", "package a\n")
	git("add", ".")
	git("commit", "-q", "-m", "first")
	git("checkout", "-q", "-b", "feature")
	write("b.go", "package a\n")
	git("add", ".")
	git("commit", "-q", "-m", "second")
	write("a.go", "package a // changed\n")
	return dir
}
