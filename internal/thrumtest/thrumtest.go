// Package thrumtest is the one way thrum's tests stand up real parts: a
// node in a temp dir, that node served on a real Unix socket and loopback
// WebSocket, the thrum binary (built once per test binary), git
// repositories with a bare remote on disk, and the seed of a randomized
// test. Everything it makes is removed or stopped by t.Cleanup.
//
// The parts:
//   - OpenNode, OpenNodeIn, Register: a node (in a fresh directory or
//     a given one, for restarts), and agents with sessions on it;
//   - Serve (Unix socket + WebSocket + owner secret), ServeUnix (socket
//     only), ServeWebSocket (WebSocket only): that node served;
//   - Seed: THRUM_SEED or the clock, logged with the line that replays it;
//   - Binary, BuildBinary, Main: the built binary;
//   - Git, GitEnv, GitUser, GitRepo, GitRemote: git.
//
// Under go test -short, Binary, BuildBinary and GitRemote skip the test:
// the end-to-end tests (the built binary, sync through a remote) are what
// make the full run slow; the quick edit loop leaves them to go test
// ./... and .ci/run.
//
// It is for tests only (it calls t.Fatal); it lives under internal/ so
// that no embedder depends on it.
package thrumtest

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/identity"
	"github.com/thrumhq/thrum/rpc"
)

// OpenNode opens a node in a fresh directory (event log and SQLite in
// t.TempDir()) and closes it when the test ends, failing the test if
// Close fails.
func OpenNode(t testing.TB, opts *thrum.Options) *thrum.Node {
	t.Helper()
	return OpenNodeIn(t, t.TempDir(), opts)
}

// OpenNodeIn is OpenNode on the data directory dir, for a test that
// closes a node and opens its directory again (a restart). Closing the
// node early is fine: Close is idempotent.
func OpenNodeIn(t testing.TB, dir string, opts *thrum.Options) *thrum.Node {
	t.Helper()
	n, err := thrum.Open(context.Background(), dir, opts)
	if err != nil {
		t.Fatalf("open node in %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Errorf("close node: %v", err)
		}
	})
	return n
}

// Agent is a registered agent with an active session.
type Agent struct {
	ID, Role, Module, Token string
}

// Register registers an agent and starts its session, as `thrum
// quickstart` does. An empty name gives an unnamed agent (ID role_hash).
func Register(t testing.TB, n *thrum.Node, name, role, module string) Agent {
	t.Helper()
	ctx := context.Background()
	r, err := n.RegisterAgent(ctx, &rpc.RegisterAgentParams{Name: name, Role: role, Module: module})
	if err != nil {
		t.Fatalf("register %s: %v", name, err)
	}
	if r.Status == "conflict" {
		t.Fatalf("register %s: conflict", name)
	}
	if _, err := n.StartSession(ctx, &rpc.StartSessionParams{AgentID: r.AgentID}); err != nil {
		t.Fatalf("start session of %s: %v", r.AgentID, err)
	}
	return Agent{ID: r.AgentID, Role: role, Module: module, Token: r.Token}
}

// SocketDir returns a fresh directory for Unix sockets, removed when the
// test ends. Socket paths are short (about 100 bytes), so it is not under
// t.TempDir(), which carries the test's name.
func SocketDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "thrum-sock-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// Daemon serves a node's API as `thrum daemon` does: on a Unix socket
// and, if made by Serve, on a loopback WebSocket too, both through one
// RPCServer. It can be stopped and started again on the same socket path
// (a daemon restart). It is stopped when the test ends.
type Daemon struct {
	// Path is the socket's path.
	Path string
	// WSURL is the WebSocket's ws:// URL (Serve only; a restart moves it
	// to a new port).
	WSURL string
	// Secret is the owner's secret the server was given (Serve only).
	Secret string
	// RPC is the running server (nil while stopped).
	RPC *thrum.RPCServer

	t    testing.TB
	n    *thrum.Node
	opts *thrum.RPCOptions
	ws   bool
	hs   *httptest.Server
	done chan error
}

// ServeUnix starts serving n on a Unix socket in a fresh directory.
func ServeUnix(t testing.TB, n *thrum.Node) *Daemon {
	t.Helper()
	d := &Daemon{t: t, n: n, Path: filepath.Join(SocketDir(t), "thrum.sock")}
	d.Start()
	t.Cleanup(d.Stop)
	return d
}

// Serve starts serving n as the daemon does: on a Unix socket in a fresh
// directory and on a loopback WebSocket, with an owner's secret made by
// identity.LoadOwnerSecret next to the socket unless opts has one. Nil opts
// are the defaults.
func Serve(t testing.TB, n *thrum.Node, opts *thrum.RPCOptions) *Daemon {
	t.Helper()
	dir := SocketDir(t)
	o := thrum.RPCOptions{}
	if opts != nil {
		o = *opts
	}
	if o.OwnerSecret == "" {
		secret, err := identity.LoadOwnerSecret(filepath.Join(dir, identity.OwnerSecretFile))
		if err != nil {
			t.Fatalf("owner secret: %v", err)
		}
		o.OwnerSecret = secret
	}
	d := &Daemon{t: t, n: n, Path: filepath.Join(dir, "thrum.sock"), Secret: o.OwnerSecret, opts: &o, ws: true}
	d.Start()
	t.Cleanup(d.Stop)
	return d
}

// Start serves the node on Path (and a WebSocket) again after Stop.
func (d *Daemon) Start() {
	d.t.Helper()
	l, err := thrum.ListenUnix(d.Path)
	if err != nil {
		d.t.Fatalf("listen on %s: %v", d.Path, err)
	}
	d.RPC, d.done = d.n.RPCServer(d.opts), make(chan error, 1)
	go func(rs *thrum.RPCServer, done chan error) { done <- rs.Serve(l) }(d.RPC, d.done)
	if d.ws {
		d.hs = httptest.NewServer(d.RPC)
		d.WSURL = "ws" + strings.TrimPrefix(d.hs.URL, "http") + "/ws"
	}
}

// Stop shuts the server down, closing every connection, and checks that
// Serve returned ErrServerClosed. It does nothing if already stopped.
func (d *Daemon) Stop() {
	if d.RPC == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Shutdown also ends the hijacked WebSockets hs.Close would wait for.
	if err := d.RPC.Shutdown(ctx); err != nil {
		d.t.Errorf("shutdown: %v", err)
	}
	if d.hs != nil {
		d.hs.Close()
		d.hs = nil
	}
	if err := <-d.done; !errors.Is(err, thrum.ErrServerClosed) {
		d.t.Errorf("Serve returned %v, want ErrServerClosed", err)
	}
	d.RPC = nil
}

// Dial connects to the daemon's socket.
func (d *Daemon) Dial(ctx context.Context, opts *rpc.ClientOptions) (*rpc.Client, error) {
	return rpc.Dial(ctx, d.Path, opts)
}

// DialWebSocket connects to the daemon's WebSocket (Serve only).
func (d *Daemon) DialWebSocket(ctx context.Context, opts *rpc.ClientOptions) (*rpc.Client, error) {
	return rpc.DialWebSocket(ctx, d.WSURL, opts)
}

// Seed returns the seed of a randomized test: THRUM_SEED if set (a
// decimal uint64), else the clock. It logs the seed with the command that
// replays the run, so a failure's log says how to repeat it.
func Seed(t testing.TB) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("THRUM_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("THRUM_SEED=%q: %v", s, err)
		}
		seed = v
	}
	t.Logf("seed %d (replay: THRUM_SEED=%d go test -run '^%s$')", seed, seed, t.Name())
	return seed
}

// ServeWebSocket serves n's WebSocket endpoint on a loopback HTTP server
// and returns its ws:// URL; the server is closed when the test ends.
func ServeWebSocket(t testing.TB, n *thrum.Node, opts *thrum.RPCOptions) string {
	t.Helper()
	rs := n.RPCServer(opts)
	hs := httptest.NewServer(rs)
	t.Cleanup(func() {
		// Shutdown also ends the hijacked WebSockets hs.Close would wait for.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := rs.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		hs.Close()
	})
	return "ws" + strings.TrimPrefix(hs.URL, "http") + "/ws"
}

// Built binaries, one per package path, shared by every test of the test
// binary and removed by Main.
var (
	binMu  sync.Mutex
	bins   = map[string]*builtBinary{}
	binDir string
)

type builtBinary struct {
	once sync.Once
	path string
	err  error
}

// Binary returns the path of the thrum binary (cmd/thrum), built the
// first time a test of this test binary asks. Call Main from TestMain to
// remove it afterwards.
func Binary(t testing.TB) string {
	t.Helper()
	return BuildBinary(t, "github.com/thrumhq/thrum/cmd/thrum")
}

// BuildBinary builds the main package pkg once per test binary (with
// CGO_ENABLED=0: thrum needs no cgo) and returns its path.
func BuildBinary(t testing.TB, pkg string) string {
	t.Helper()
	skipShort(t, "runs the built binary")
	binMu.Lock()
	b := bins[pkg]
	if b == nil {
		b = &builtBinary{}
		bins[pkg] = b
	}
	binMu.Unlock()
	b.once.Do(func() { b.path, b.err = build(pkg) })
	if b.err != nil {
		t.Fatalf("building %s: %v", pkg, b.err)
	}
	return b.path
}

func build(pkg string) (string, error) {
	binMu.Lock()
	if binDir == "" {
		dir, err := os.MkdirTemp("", "thrum-bin-")
		if err != nil {
			binMu.Unlock()
			return "", err
		}
		binDir = dir
	}
	dir := binDir
	binMu.Unlock()
	gobin, err := exec.LookPath("go")
	if err != nil {
		return "", errors.New("no go command to build with")
	}
	out := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.Command(gobin, "build", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", errors.New("go build: " + err.Error() + "\n" + string(b))
	}
	return out, nil
}

// Main runs the tests and removes the binaries they built, and returns
// m.Run's code; a TestMain that calls it and returns makes the test
// binary exit with that code.
func Main(m *testing.M) int {
	code := m.Run()
	binMu.Lock()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	binMu.Unlock()
	return code
}

// GitEnv is the environment for git (and for a thrum that runs git):
// the process's own without THRUM_* variables, and with global and system
// git configuration out of the way so a developer's settings (signing,
// hooks) cannot interfere.
func GitEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "THRUM_") {
			env = append(env, kv)
		}
	}
	return append(env, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL="+os.DevNull)
}

// Git runs git in dir with GitEnv and returns its stdout without the
// trailing newlines; it fails the test if git fails.
func Git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir, cmd.Env = dir, GitEnv()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, errb.String())
	}
	return strings.TrimRight(out.String(), "\n")
}

// GitUser gives the repository in dir a local identity for commits
// (Test User <test@example.com>), unsigned.
func GitUser(t testing.TB, dir string) {
	t.Helper()
	Git(t, dir, "config", "user.name", "Test User")
	Git(t, dir, "config", "user.email", "test@example.com")
	Git(t, dir, "config", "commit.gpgsign", "false")
}

// GitRepo makes a git repository in a fresh temp dir: branch main, a
// local user, one empty commit.
func GitRepo(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	Git(t, dir, "init", "-q", "-b", "main")
	GitUser(t, dir)
	Git(t, dir, "commit", "-q", "--allow-empty", "-m", "initial commit")
	return dir
}

// Remote is a bare repository on disk with a first commit on main
// (a README), from which tests clone.
type Remote struct {
	// Path is the bare repository.
	Path string
	t    testing.TB
	root string
}

// GitRemote makes a bare remote in a fresh temp dir and pushes a first
// commit to its main branch.
func GitRemote(t testing.TB) *Remote {
	t.Helper()
	skipShort(t, "syncs through a git remote")
	root := t.TempDir()
	r := &Remote{Path: filepath.Join(root, "remote.git"), t: t, root: root}
	Git(t, root, "init", "-q", "--bare", "-b", "main", r.Path)
	seed := r.Clone("seed")
	if err := os.WriteFile(filepath.Join(seed, "README.md"), []byte("# project\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	Git(t, seed, "add", "README.md")
	Git(t, seed, "commit", "-q", "-m", "initial commit")
	Git(t, seed, "push", "-q", "origin", "main")
	return r
}

// skipShort skips an end-to-end test under go test -short.
func skipShort(t testing.TB, why string) {
	t.Helper()
	if testing.Short() {
		t.Skip("end to end (" + why + "): skipped under -short")
	}
}

// Clone clones the remote into a directory named name beside it, with a
// local user.
func (r *Remote) Clone(name string) string {
	r.t.Helper()
	dir := filepath.Join(r.root, name)
	Git(r.t, r.root, "clone", "-q", r.Path, dir)
	GitUser(r.t, dir)
	return dir
}

// ReportLatencies adds the p50, p99 and maximum of lat, in milliseconds,
// to the benchmark's line, as p50-ms, p99-ms and max-ms. It sorts lat.
func ReportLatencies(b *testing.B, lat []time.Duration) {
	b.Helper()
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(lat[min(len(lat)-1, len(lat)/2)]), "p50-ms")
	b.ReportMetric(ms(lat[min(len(lat)-1, len(lat)*99/100)]), "p99-ms")
	b.ReportMetric(ms(lat[len(lat)-1]), "max-ms")
}

// CopyMessages appends n copies of the last line of the shard file at
// path (a message.create) to it, each with a fresh event ID and message
// ID and its own content: a large history written in seconds, for the
// figures that need one. With key, each copy is signed again with it for
// the repository repoID, as its author's thrum signs (the last line's
// own signature, if any, is dropped); without, a signed line's copies
// keep a signature that verifies for none. The log must be closed.
func CopyMessages(t testing.TB, path string, n int, repoID string, key ed25519.PrivateKey) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b = bytes.TrimSuffix(b, []byte("\n"))
	tmpl := b[bytes.LastIndexByte(b, '\n')+1:]
	if _, unsigned, signed, _ := eventlog.ParseSig(tmpl); signed && key != nil {
		tmpl = unsigned
	}
	field := func(prefix string) []byte {
		_, rest, ok := bytes.Cut(tmpl, []byte(prefix))
		if !ok {
			t.Fatalf("CopyMessages: no %s in %s", prefix, tmpl)
		}
		v, _, _ := bytes.Cut(rest, []byte(`"`))
		return append([]byte(prefix), v...)
	}
	evID, msgID, content := field(`"event_id":"`), field(`"message_id":"`), field(`"content":"`)
	var buf bytes.Buffer
	for i := 0; i < n; i++ {
		line := bytes.Replace(tmpl, evID, []byte(`"event_id":"`+eventlog.NewID()), 1)
		line = bytes.Replace(line, msgID, []byte(`"message_id":"msg_`+eventlog.NewID()), 1)
		line = bytes.Replace(line, content, []byte(`"content":"copied message `+strconv.Itoa(i)+`, with a sentence or two of text as agents write them`), 1)
		if key != nil {
			buf.WriteString(SignLine(t, string(line), repoID, key))
		} else {
			buf.Write(line)
		}
		buf.WriteByte('\n')
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(buf.Bytes()); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// EventLine returns a log line of an event of type typ with the given
// payload fields, a fresh ID and the time now, as a thrum writes it (or
// as anyone could write one by hand).
func EventLine(t testing.TB, typ string, payload map[string]any) string {
	t.Helper()
	b, err := json.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	head := `{"event_id":"` + eventlog.NewID() + `","type":"` + typ + `","timestamp":"` + eventlog.FormatTime(time.Now()) + `"`
	if len(b) > 2 {
		return head + "," + string(b[1:])
	}
	return head + "}"
}

// SignLine returns line (an unsigned event line, as EventLine makes)
// signed with key for the repository repoID, as a thrum holding that key
// would sign it: a forger's own key, in the tests that push one.
func SignLine(t testing.TB, line, repoID string, key ed25519.PrivateKey) string {
	t.Helper()
	sig, err := key.Sign(nil, eventlog.SignedMessage(repoID, []byte(line)), crypto.Hash(0))
	if err != nil {
		t.Fatal(err)
	}
	s := eventlog.Sig{KeyID: eventlog.KeyID(key.Public().(ed25519.PublicKey)), Sig: sig}
	return strings.TrimSuffix(line, "}") + `,"sig":"` + s.String() + `"}`
}

// NewKey returns a fresh Ed25519 key: a forger's, or another machine's.
func NewKey(t testing.TB) ed25519.PrivateKey {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// Planted is a file ForgeBranch puts in a branch's tree: a regular file
// holding Content, or (Link) a symbolic link to Content.
type Planted struct {
	Content string
	Link    bool
}

// ForgeBranch pushes to the remote at path a commit on branch (on top of
// the branch, if the remote has it) whose tree also holds the planted
// files, built with git's plumbing as anyone who can push there can: so
// a path may be one git would never check out (messages/../x.jsonl), a
// symbolic link, or a file thrum keeps to itself (local.jsonl).
func ForgeBranch(t testing.TB, remote, branch string, planted map[string]Planted) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "forger")
	Git(t, filepath.Dir(dir), "init", "-q", dir)
	GitUser(t, dir)
	entries := map[string]string{} // path → "mode type object"
	var parent []string
	cmd := exec.Command("git", "fetch", "-q", remote, "refs/heads/"+branch)
	cmd.Dir, cmd.Env = dir, GitEnv()
	if cmd.Run() == nil {
		parent = []string{"-p", "FETCH_HEAD"}
		for _, rec := range strings.Split(Git(t, dir, "ls-tree", "-r", "-z", "FETCH_HEAD"), "\x00") {
			if meta, p, ok := strings.Cut(rec, "\t"); ok {
				entries[p] = meta
			}
		}
	}
	for p, f := range planted {
		c := exec.Command("git", "hash-object", "-w", "--stdin")
		c.Dir, c.Env, c.Stdin = dir, GitEnv(), strings.NewReader(f.Content)
		oid, err := c.Output()
		if err != nil {
			t.Fatalf("hash-object: %v", err)
		}
		mode := "100644"
		if f.Link {
			mode = "120000"
		}
		entries[p] = mode + " blob " + strings.TrimSpace(string(oid))
	}
	var tree func(prefix string) string
	tree = func(prefix string) string {
		var in strings.Builder
		subs := map[string]bool{}
		for p, meta := range entries {
			rest, ok := strings.CutPrefix(p, prefix)
			if !ok {
				continue
			}
			if name, _, sub := strings.Cut(rest, "/"); sub {
				subs[name] = true
			} else {
				fmt.Fprintf(&in, "%s\t%s\n", meta, rest)
			}
		}
		for name := range subs {
			fmt.Fprintf(&in, "040000 tree %s\t%s\n", tree(prefix+name+"/"), name)
		}
		c := exec.Command("git", "mktree")
		c.Dir, c.Env, c.Stdin = dir, GitEnv(), strings.NewReader(in.String())
		oid, err := c.Output()
		if err != nil {
			t.Fatalf("mktree %q: %v", prefix, err)
		}
		return strings.TrimSpace(string(oid))
	}
	args := append([]string{"commit-tree", tree(""), "-m", "thrum: sync from a laptop"}, parent...)
	commit := Git(t, dir, args...)
	Git(t, dir, "push", "-q", remote, commit+":refs/heads/"+branch)
}
