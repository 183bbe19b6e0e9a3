package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/internal/thrumtest"
	"github.com/thrumhq/thrum/rpc"
)

// Attacks on the edges of the owner's standing (DESIGN.md, "Trust
// boundary"): a daemon that stops answering, a committed redirect or
// identity file, files made under a permissive umask.

// A daemon that stops answering (SIGSTOP: the socket still accepts, the
// kernel queues the request, nothing reads it) fails a command after the
// call timeout, saying which daemon and what to do, instead of hanging it.
func TestStoppedDaemonFailsCommands(t *testing.T) {
	t.Parallel()
	c := &thrumCLI{t: t, repo: thrumtest.GitRepo(t), bin: thrumtest.Binary(t)}
	c.ok("", "init")
	st := startDaemon(t, c)
	c.ok("", "quickstart", "--name", "alice", "--role", "implementer", "--module", "auth")
	pid := int(num(st, "pid"))
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGCONT) }) // before startDaemon's cleanup stops it

	start := time.Now()
	r := c.withEnv(map[string]string{"THRUM_NAME": "alice", "THRUM_CALL_TIMEOUT": "2s"}, "inbox")
	took := time.Since(start)
	if r.code != exitNoDaemon {
		t.Fatalf("inbox against a stopped daemon: want exit %d after the call timeout, got (after %v):\n%s", exitNoDaemon, took.Round(time.Millisecond), r)
	}
	contains(t, "stderr", r.stderr, "pid "+strconv.Itoa(pid), "did not answer", "2s", "daemon.log")
	t.Logf("inbox against a stopped daemon gave up after %v", took.Round(time.Millisecond))
}

// A message for alice waiting in project A, where she and bob are
// registered and its daemon runs; it returns A's CLI.
func projectWithMailForAlice(t *testing.T) *thrumCLI {
	t.Helper()
	a := &thrumCLI{t: t, repo: thrumtest.GitRepo(t), bin: thrumtest.Binary(t)}
	a.ok("", "init")
	startDaemon(t, a)
	a.ok("", "quickstart", "--name", "alice", "--role", "implementer", "--module", "auth")
	a.ok("", "quickstart", "--name", "bob", "--role", "reviewer", "--module", "auth")
	a.ok("bob", "send", "for-alice-only", "--to", "@alice")
	return a
}

// stillQueued fails the test unless alice's receipt of bob's message is
// still queued in a: no one took it for her.
func stillQueued(t *testing.T, a *thrumCLI) {
	t.Helper()
	var sent rpc.ListSentResult
	a.okJSON(&sent, "bob", "sent")
	if len(sent.Messages) != 1 || len(sent.Messages[0].Receipts) != 1 || sent.Messages[0].Receipts[0].State != rpc.ReceiptQueued {
		t.Errorf("bob's message to alice was taken for her: %+v", sent.Messages)
	}
}

// A committed .thrum/redirect naming another project's .thrum (and an
// identity file with alice's ID and no token beside it) does not bind a
// checkout to that project's daemon: the inbox monitor (thrum wait) and
// inbox refuse the redirect, and alice's mail stays hers.
func TestRedirectToAnotherProjectRefused(t *testing.T) {
	t.Parallel()
	a := projectWithMailForAlice(t)
	b := &thrumCLI{t: t, repo: thrumtest.GitRepo(t), bin: a.bin}
	redirect := filepath.Join(b.repo, ".thrum", "redirect")
	plant(t, redirect, filepath.Join(a.repo, ".thrum")+"\n")
	plant(t, filepath.Join(b.repo, ".thrum", "identities", "alice.json"),
		`{"version":1,"name":"alice","agent_id":"alice","role":"implementer","module":"auth"}`)
	thrumtest.Git(t, b.repo, "add", "-f", ".thrum")
	thrumtest.Git(t, b.repo, "commit", "-q", "-m", "a redirect and an identity, committed")

	for _, args := range [][]string{{"wait", "--timeout", "3s"}, {"inbox"}} {
		r := b.as("alice", args...)
		if r.code == 0 || strings.Contains(r.stdout, "for-alice-only") {
			t.Errorf("a committed redirect bound the checkout to another project's daemon:\n%s", r)
		}
		contains(t, "stderr", r.stderr, redirect, "not the .thrum of this repository's main worktree")
	}
	stillQueued(t, a)
}

// An identity file with an agent's ID and no token (committed on a
// branch, say, and checked out in a worktree that shares the daemon)
// binds nothing: thrum wait and inbox refuse it, and the agent's mail
// stays its own. The redirect to the main worktree is followed.
func TestIdentityWithoutTokenBindsNothing(t *testing.T) {
	t.Parallel()
	a := projectWithMailForAlice(t)
	feat := filepath.Join(t.TempDir(), "feature")
	thrumtest.Git(t, a.repo, "worktree", "add", "-q", "-b", "feature", feat)
	f := &thrumCLI{t: t, repo: feat, bin: a.bin}
	f.ok("", "init")
	plant(t, filepath.Join(feat, ".thrum", "identities", "alice.json"),
		`{"version":1,"name":"alice","agent_id":"alice","role":"implementer","module":"auth"}`)

	for _, args := range [][]string{{"wait", "--timeout", "3s"}, {"inbox"}} {
		f.fails(exitNoIdentity, "alice", args, "has no token", "binds nothing")
	}
	// Without a name, the one file is no identity either.
	f.fails(exitNoIdentity, "", []string{"inbox"}, "no identity file with a token")
	stillQueued(t, a)
	f.ok("", "quickstart", "--name", "carol", "--role", "tester", "--module", "auth")
	contains(t, "whoami", f.ok("carol", "agent", "whoami").stdout, "@carol")
}

// plant writes a file as someone else might have: a commit, a checkout.
func plant(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// strangerCopy copies the main package pkg, built, where the stranger can
// run it (a built binary's directory is the owner's alone).
func strangerCopy(t *testing.T, pkg string) string {
	t.Helper()
	b, err := os.ReadFile(thrumtest.BuildBinary(t, pkg))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	reachable(t, dir)
	path := filepath.Join(dir, filepath.Base(pkg))
	if err := os.WriteFile(path, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// floodResult is what cmd/thrum/internal/flood prints.
type floodResult struct {
	Checked    int            `json:"checked"`
	Outcomes   map[string]int `json:"outcomes"`
	Seconds    float64        `json:"seconds"`
	CPUSeconds float64        `json:"cpu_seconds"`
}

// A stranger (uid 65534) failing credentials on the loopback port as fast
// as the daemon answers, in handshakes and in auth calls, from 64
// connections at once, locks nobody out: every one of the owner's valid
// credentials is accepted all the while, in the handshake and by auth:
// the owner's secret, an agent's token, a web login code and the web
// session it is traded for (a browser tab reconnecting). Each failure
// costs the stranger's connection a delay, its connections are capped,
// and the daemon logs the refusals at most once per 10 s, naming the uid,
// and counts them in health.
func TestStrangerFloodOwnerSignsIn(t *testing.T) {
	needRoot(t)
	a := startAttackTarget(t)
	flood := strangerCopy(t, "github.com/thrumhq/thrum/cmd/thrum/internal/flood")
	const dur = 12 * time.Second
	stranger := make(chan floodResult, 1)
	go func() {
		var r floodResult
		cmd := exec.Command(flood, "-url", a.wsURL, "-for", dur.String(), "-workers", "64")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: strangerID, Gid: strangerID}}
		out, err := cmd.Output()
		if err != nil || json.Unmarshal(out, &r) != nil {
			r.Outcomes = map[string]int{fmt.Sprintf("flood failed: %v: %s", err, out): 1}
		}
		stranger <- r
	}()

	ctx := context.Background()
	u := a.unix(t)
	code := func() string {
		w, err := u.WebLogin(ctx, &rpc.WebLoginParams{})
		if err != nil {
			t.Fatalf("web.login on the socket: %v", err)
		}
		return w.Code
	}
	session := ""
	probes := []struct {
		name string
		try  func(ctx context.Context) error
	}{
		{"handshake: owner's secret", func(ctx context.Context) error { return dialWith(ctx, a.wsURL, a.secret) }},
		{"handshake: agent token", func(ctx context.Context) error { return dialWith(ctx, a.wsURL, a.tokens["alice"]) }},
		{"handshake: login code", func(ctx context.Context) error {
			c := code()
			ws, err := rpc.DialWebSocket(ctx, a.wsURL, &rpc.ClientOptions{Credential: c})
			if err != nil {
				return err
			}
			defer ws.Close()
			r, err := ws.Auth(ctx, &rpc.AuthParams{LoginCode: c})
			if err == nil {
				session = r.WebSession
			}
			return err
		}},
		{"handshake: web session (a tab reconnecting)", func(ctx context.Context) error { return dialWith(ctx, a.wsURL, session) }},
		{"auth: owner's secret", func(ctx context.Context) error { return authWith(ctx, a.wsURL, &rpc.AuthParams{OwnerSecret: a.secret}) }},
		{"auth: agent token", func(ctx context.Context) error {
			return authWith(ctx, a.wsURL, &rpc.AuthParams{Token: a.tokens["bob"]})
		}},
		{"auth: login code", func(ctx context.Context) error { return authWith(ctx, a.wsURL, &rpc.AuthParams{LoginCode: code()}) }},
		{"auth: web session", func(ctx context.Context) error { return authWith(ctx, a.wsURL, &rpc.AuthParams{WebSession: session}) }},
	}
	time.Sleep(time.Second) // the flood under way
	ok, tried := map[string]int{}, map[string]int{}
	firstErr := map[string]error{}
	for end := time.Now().Add(dur - 2*time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		for _, p := range probes {
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := p.try(pctx)
			cancel()
			tried[p.name]++
			if err == nil {
				ok[p.name]++
			} else if firstErr[p.name] == nil {
				firstErr[p.name] = err
			}
		}
	}
	r := <-stranger
	total, accepted := 0, 0
	for _, p := range probes {
		total += tried[p.name]
		accepted += ok[p.name]
		t.Logf("%-45s %d/%d accepted", p.name, ok[p.name], tried[p.name])
		if ok[p.name] != tried[p.name] {
			t.Errorf("%s: %d of %d refused during the flood; the first: %v", p.name, tried[p.name]-ok[p.name], tried[p.name], firstErr[p.name])
		}
	}
	t.Logf("the owner's valid credentials: %d/%d accepted (%.1f%%)", accepted, total, 100*float64(accepted)/float64(max(total, 1)))
	t.Logf("the stranger: %d credentials checked in %.1fs (%.1f a second), %.3fs CPU (%.2f ms per checked credential); all answers: %v",
		r.Checked, r.Seconds, float64(r.Checked)/max(r.Seconds, 1e-9), r.CPUSeconds, 1000*r.CPUSeconds/float64(max(r.Checked, 1)), r.Outcomes)
	if r.Checked == 0 {
		t.Fatalf("the flood had no credential checked: %v", r.Outcomes)
	}
	// Each wrong credential holds one of the stranger's capped
	// connections for the delay: so many a second at most, however fast
	// it tries.
	if most := float64(thrum.DefaultMaxStrangerConns) * (r.Seconds/thrum.DefaultAuthFailureDelay.Seconds() + 1); float64(r.Checked) > most {
		t.Errorf("the stranger had %d credentials checked in %.1fs: at most %.0f should be", r.Checked, r.Seconds, most)
	}
	h, err := u.Health(ctx, &rpc.HealthParams{})
	if err != nil || h.Refused == nil || h.Refused.Credentials < int64(r.Checked) || h.Refused.Connections == 0 {
		t.Errorf("health after the flood: %+v, %v; want the refused credentials (at least %d) and connections counted", h.Refused, err, r.Checked)
	}
	b, err := os.ReadFile(filepath.Join(a.c.repo, ".thrum", "var", "daemon.log"))
	if err != nil {
		t.Fatal(err)
	}
	lines := 0
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "level=WARN") && strings.Contains(l, "refused") && strings.Contains(l, strconv.Itoa(strangerID)+":") {
			if lines++; lines == 1 {
				t.Logf("the daemon's log: %s", l)
			}
		}
	}
	if most := int(r.Seconds/10) + 1; lines == 0 || lines > most {
		t.Errorf("the daemon logged %d warnings naming uid %d in %.1fs, want 1 to %d (one per 10 s):\n%s", lines, strangerID, r.Seconds, most, b)
	}
}

// dialWith opens a WebSocket with cred in its handshake.
func dialWith(ctx context.Context, url, cred string) error {
	c, err := rpc.DialWebSocket(ctx, url, &rpc.ClientOptions{Credential: cred})
	if err != nil {
		return err
	}
	return c.Close()
}

// authWith opens a WebSocket without a credential and calls auth with p.
func authWith(ctx context.Context, url string, p *rpc.AuthParams) error {
	c, err := rpc.DialWebSocket(ctx, url, nil)
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.Auth(ctx, p)
	return err
}

// Under umask 000, which lets every mode bit through, everything thrum
// makes under .thrum is 0700 or 0600 and the user's: a directory's whole
// state (its log, database, socket, secret, identities) while the daemon
// runs, a feature worktree's own .thrum (its redirect, identities), and
// a repository's log.
func TestThrumDirPrivateUnderUmask000(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	c := underUmask(t, dir, "000")
	c.ok("", "init")
	startDaemon(t, c)
	c.ok("", "quickstart", "--name", "alice", "--role", "implementer", "--module", "auth")
	c.ok("alice", "send", "hello", "--to", "@alice")
	c.ok("", "web")
	if _, err := os.Stat(filepath.Join(dir, ".thrum", "var", "thrum.sock")); err != nil {
		t.Fatalf("the daemon's socket: %v", err)
	}
	wantPrivateTree(t, filepath.Join(dir, ".thrum"))

	// A git repository's main worktree, set up under the usual umask; a
	// feature worktree under umask 000.
	repo := thrumtest.GitRepo(t)
	m := underUmask(t, repo, "022")
	m.ok("", "init")
	startDaemon(t, m)
	feat := filepath.Join(t.TempDir(), "feature")
	thrumtest.Git(t, repo, "worktree", "add", "-q", "-b", "feature", feat)
	f := underUmask(t, feat, "000")
	f.ok("", "init")
	f.ok("", "quickstart", "--name", "bob", "--role", "reviewer", "--module", "auth")
	if _, err := os.Stat(filepath.Join(feat, ".thrum", "redirect")); err != nil {
		t.Fatalf("the feature worktree's redirect: %v", err)
	}
	wantPrivateTree(t, filepath.Join(feat, ".thrum"))
	wantPrivateTree(t, filepath.Join(repo, ".thrum"))

	// A git repository set up under umask 000: git makes the log's
	// worktree by the umask, and init makes it private.
	repo0 := thrumtest.GitRepo(t)
	r := underUmask(t, repo0, "000")
	r.ok("", "init")
	startDaemon(t, r)
	r.ok("", "quickstart", "--name", "carol", "--role", "implementer", "--module", "auth")
	r.ok("carol", "send", "hello", "--to", "@carol")
	wantPrivateTree(t, filepath.Join(repo0, ".thrum"))
	wantPrivateTree(t, filepath.Join(repo0, ".git", "thrum-sync", "a-sync", "messages"))
}
