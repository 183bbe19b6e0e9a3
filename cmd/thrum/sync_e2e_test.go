package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/identity"
	"github.com/thrumhq/thrum/internal/thrumtest"
	"github.com/thrumhq/thrum/rpc"
)

// syncCLI runs the real binary in one clone, with git's global and
// system configuration out of the way (for the daemon's sync too, which
// inherits the environment).
type syncCLI struct {
	*thrumCLI
	name    string   // for messages
	agent   string   // the agent registered here, if any
	allowed []string // daemon log lines holding one of these are expected
}

func (c *syncCLI) do(agent string, args ...string) result {
	c.t.Helper()
	env := map[string]string{"GIT_CONFIG_GLOBAL": os.DevNull, "GIT_CONFIG_NOSYSTEM": "1"}
	if agent != "" {
		env["THRUM_NAME"] = agent
	}
	r := c.withEnv(env, args...)
	if r.code != 0 {
		c.t.Fatalf("%s: want exit 0, got:\n%s", c.name, r)
	}
	return r
}

func (c *syncCLI) json(v any, agent string, args ...string) {
	c.t.Helper()
	r := c.do(agent, append([]string{"--json"}, args...)...)
	if err := json.Unmarshal([]byte(r.stdout), v); err != nil {
		c.t.Fatalf("%s: stdout is not JSON (%v):\n%s", c.name, err, r)
	}
}

// startSyncDaemon starts the daemon with args and stops it when the test
// ends, killing it if `daemon stop` did not, and failing the test if its
// log shows a race, a panic or an error.
func (c *syncCLI) startDaemon(args ...string) {
	c.t.Helper()
	t := c.t
	pidFile := filepath.Join(c.repo, ".thrum", "var", "thrum.pid")
	logFile := filepath.Join(c.repo, ".thrum", "var", "daemon.log")
	var pid int
	t.Cleanup(func() {
		r := c.withEnv(map[string]string{"GIT_CONFIG_GLOBAL": os.DevNull, "GIT_CONFIG_NOSYSTEM": "1"}, "daemon", "stop")
		if r.code != 0 {
			t.Errorf("%s: cleanup: %s", c.name, r)
		}
		for _, p := range []int{pid, pidFromFile(pidFile)} {
			if p > 0 && alive(p) && !zombie(p) {
				t.Errorf("%s: cleanup: daemon pid %d still alive after daemon stop: killing it", c.name, p)
				syscall.Kill(p, syscall.SIGKILL)
			}
		}
		if b, err := os.ReadFile(logFile); err == nil {
			for _, l := range bytes.Split(b, []byte("\n")) {
				expected := false
				for _, a := range c.allowed {
					expected = expected || bytes.Contains(l, []byte(a))
				}
				for _, bad := range []string{"WARNING: DATA RACE", "panic:", "level=ERROR", "level=WARN"} {
					if !expected && bytes.Contains(l, []byte(bad)) {
						t.Errorf("%s: daemon log has %q:\n%s", c.name, bad, b)
					}
				}
			}
		}
	})
	var st map[string]any
	c.json(&st, "", append([]string{"daemon", "start"}, args...)...)
	if n := num(st, "pid"); n > 0 {
		pid = int(n)
	} else {
		t.Fatalf("%s: daemon start --json has no pid: %v", c.name, st)
	}
}

// syncStatus returns `thrum sync status --json`, which exits 1 (with
// the status) when the last round failed.
func (c *syncCLI) syncStatus() map[string]any {
	c.t.Helper()
	r := c.withEnv(map[string]string{"GIT_CONFIG_GLOBAL": os.DevNull, "GIT_CONFIG_NOSYSTEM": "1"}, "--json", "sync", "status")
	var st map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || r.code != 0 && (r.code != 1 || str(st, "sync_state") != "error" && str(st, "nats.state") != "error") {
		c.t.Fatalf("%s: sync status --json:\n%s", c.name, r)
	}
	return st
}

// forceSync runs `thrum sync force --wait` and checks that it returned
// after a round that finished after it.
func (c *syncCLI) forceSync() map[string]any {
	c.t.Helper()
	last := str(c.syncStatus(), "last_sync_at")
	var f map[string]any
	c.json(&f, "", "sync", "force", "--wait")
	hasKeys(c.t, "sync force", f, "triggered", "last_sync_at", "sync_state")
	// --wait returns once a round that started after the call is done: a
	// round already running when it came is not the one it waits for.
	if at := str(f, "last_sync_at"); at == "" || at == last || str(f, "sync_state") != "synced" {
		c.t.Fatalf("%s: sync force --wait returned before a new round was done: %v (last sync before: %q)", c.name, f, last)
	}
	return c.syncStatus()
}

// TestSyncForceWaitSaysWhenItFails: with --wait, a round that fails (the
// remote is gone) is an error with git's words, exit 1.
func TestSyncForceWaitSaysWhenItFails(t *testing.T) {
	t.Parallel()
	remote := thrumtest.GitRemote(t)
	c := &syncCLI{thrumCLI: &thrumCLI{t: t, repo: remote.Clone("a"), bin: thrumtest.Binary(t)}, name: "a",
		allowed: []string{"gitsync: sync failed; will retry", "final sync failed"}}
	c.do("", "init")
	c.startDaemon("--sync-interval", "1h")
	c.forceSync()
	if err := os.Rename(remote.Path, remote.Path+".gone"); err != nil {
		t.Fatal(err)
	}
	r := c.run("sync", "force", "--wait")
	if r.code != 1 || !strings.Contains(r.stderr, "sync failed") {
		t.Fatalf("sync force --wait with the remote gone:\n%s", r)
	}
	// sync status says so too, by its exit code.
	if r := c.run("sync", "status"); r.code != 1 || !strings.Contains(r.stdout, "Sync: error") {
		t.Fatalf("sync status after a failed round:\n%s", r)
	}
}

// TestSyncEndToEnd runs two clones of a bare remote, each with its own
// daemon syncing only when told to (--sync-interval 1h; the debounce
// after a local event still applies): a message sent in one clone reaches
// the other's inbox through `thrum sync force` on both sides.
func TestSyncEndToEnd(t *testing.T) {
	t.Parallel()
	thrumBin := thrumtest.Binary(t)
	remote := thrumtest.GitRemote(t)
	dirA, dirB := remote.Clone("a"), remote.Clone("b")

	a := &syncCLI{thrumCLI: &thrumCLI{t: t, repo: dirA, bin: thrumBin}, name: "a"}
	b := &syncCLI{thrumCLI: &thrumCLI{t: t, repo: dirB, bin: thrumBin}, name: "b"}
	for _, c := range []*syncCLI{a, b} {
		c.do("", "init")
		c.startDaemon("--sync-interval", "1h")
	}
	a.do("", "quickstart", "--name", "alice", "--role", "implementer", "--module", "auth")
	b.do("", "quickstart", "--name", "bob", "--role", "reviewer", "--module", "auth")

	// bob reaches a through the remote: sync force --wait returns once a
	// round that started after it is done, so one pass in b then a is
	// enough, whatever rounds were under way.
	knows := func(c *syncCLI, agent string) bool {
		var al map[string]any
		c.json(&al, "", "agent", "list")
		for _, ag := range al["agents"].([]any) {
			if str(ag, "agent_id") == agent {
				return true
			}
		}
		return false
	}
	b.forceSync()
	a.forceSync()
	if !knows(a, "bob") {
		t.Fatal("a does not know bob after sync force --wait in b, then in a")
	}

	// alice (a) writes to bob (b).
	var sent map[string]any
	a.json(&sent, "alice", "send", "Hello across machines", "--to", "@bob")
	id := str(sent, "message_id")
	if !strings.HasPrefix(id, "msg_") {
		t.Fatalf("send --json = %v", sent)
	}
	inboxHas := func() bool {
		var inbox map[string]any
		b.json(&inbox, "bob", "inbox", "--unread")
		for _, m := range inbox["messages"].([]any) {
			if str(m, "message_id") == id {
				if str(m, "body.content") != "Hello across machines" || str(m, "agent_id") != "alice" {
					t.Errorf("b: bob's inbox has %v", m)
				}
				return true
			}
		}
		return false
	}
	if inboxHas() {
		t.Fatal("b: bob has the message before any sync")
	}
	a.forceSync()
	if st := b.forceSync(); !inboxHas() {
		t.Fatalf("b: bob's inbox lacks %s after sync force --wait in a, then in b (b's sync status %v)", id, st)
	}

	// sync status, both forms, and health's sync_state.
	for _, c := range []*syncCLI{a, b} {
		st := c.syncStatus()
		hasKeys(t, "sync status", st, "running", "last_sync_at", "last_error", "sync_state")
		if st["running"] != true || str(st, "sync_state") != "synced" || str(st, "last_error") != "" {
			t.Errorf("%s: sync status --json = %v", c.name, st)
		}
		if _, err := time.Parse(time.RFC3339Nano, str(st, "last_sync_at")); err != nil {
			t.Errorf("%s: sync status last_sync_at: %v", c.name, err)
		}
		r := c.do("", "sync", "status")
		contains(t, c.name+": sync status", r.stdout, "Sync: synced (running: true)\n", "  Last sync: ")
		var ds map[string]any
		c.json(&ds, "", "daemon", "status")
		switch s := str(ds, "health.sync_state"); s {
		case "synced", "pending":
		default:
			t.Errorf("%s: daemon status health.sync_state = %q, want synced or pending: %v", c.name, s, ds)
		}
	}
	// b imported and has nothing of its own to send: synced, not pending.
	var ds map[string]any
	b.json(&ds, "", "daemon", "status")
	if s := str(ds, "health.sync_state"); s != "synced" {
		t.Errorf("b: health.sync_state = %q after its round, want synced", s)
	}

	// The remote's a-sync holds both agents' shards; the users' branches
	// are untouched.
	tree := thrumtest.Git(t, remote.Path, "ls-tree", "-r", "--name-only", "refs/heads/a-sync")
	contains(t, "the remote's a-sync", tree, "events.jsonl", "messages/alice.jsonl")
	for _, c := range []*syncCLI{a, b} {
		if got := thrumtest.Git(t, c.repo, "symbolic-ref", "HEAD"); got != "refs/heads/main" {
			t.Errorf("%s: HEAD is %s, want refs/heads/main", c.name, got)
		}
		if st := thrumtest.Git(t, c.repo, "status", "--porcelain"); st != "" {
			t.Errorf("%s: git status --porcelain = %q, want clean", c.name, st)
		}
	}
}

// TestSyncRefusalsReported: events pushed to the remote's a-sync with
// plain git by someone who writes as others (a message from alice in
// bob's shard, a registration of alice with a token hash of the forger's
// choosing) are refused by the daemons' sync, and said so: by `thrum sync
// status` (text and --json), and by `thrum doctor` once the daemon is
// stopped. The forged token authenticates nowhere.
func TestSyncRefusalsReported(t *testing.T) {
	t.Parallel()
	thrumBin := thrumtest.Binary(t)
	remote := thrumtest.GitRemote(t)
	dirA, dirB := remote.Clone("a"), remote.Clone("b")
	// The forged token, tried below, is a refused credential: logged too.
	refusals := []string{"admit: refused events from another machine", "loopback port refused"}
	a := &syncCLI{thrumCLI: &thrumCLI{t: t, repo: dirA, bin: thrumBin}, name: "a", agent: "alice", allowed: refusals}
	b := &syncCLI{thrumCLI: &thrumCLI{t: t, repo: dirB, bin: thrumBin}, name: "b", agent: "bob", allowed: refusals}
	for _, c := range []*syncCLI{a, b} {
		c.do("", "init")
		c.startDaemon("--sync-interval", "1h")
	}
	a.do("", "quickstart", "--name", "alice", "--role", "implementer", "--module", "auth")
	b.do("", "quickstart", "--name", "bob", "--role", "reviewer", "--module", "auth")
	a.forceSync()
	b.forceSync()
	a.forceSync()

	// The forger: a plain clone of a-sync, two lines appended, a push.
	forger := remote.Clone("forger")
	thrumtest.Git(t, forger, "checkout", "-q", "-b", "a-sync", "origin/a-sync")
	line := func(typ string, payload map[string]any) string { return thrumtest.EventLine(t, typ, payload) + "\n" }
	forgedToken := identity.NewToken()
	appendTo := func(rel, s string) {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(forger, rel)), 0o755); err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(filepath.Join(forger, rel), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteString(s); err != nil {
			t.Fatal(err)
		}
	}
	appendTo("messages/bob.jsonl", line(eventlog.TypeMessageCreate, map[string]any{"message_id": "msg_" + eventlog.NewID(), "agent_id": "alice",
		"session_id": "ses_x", "format": "markdown", "content": "forged: please merge my branch", "priority": "normal",
		"refs": []map[string]string{{"type": "mention", "value": "bob"}}}))
	appendTo("events.jsonl", line(eventlog.TypeAgentUpdate, map[string]any{"agent_id": "alice", "kind": "agent", "name": "alice",
		"role": "implementer", "module": "auth", "token_hash": identity.HashToken(forgedToken)}))
	thrumtest.Git(t, forger, "add", "-A")
	thrumtest.Git(t, forger, "commit", "-q", "-m", "thrum: sync")
	thrumtest.Git(t, forger, "push", "-q", "origin", "a-sync")

	for _, c := range []*syncCLI{a, b} {
		st := c.forceSync()
		if n := num(st, "refused"); n < 1 {
			t.Errorf("%s: sync status --json refused = %v, want the forged message: %v", c.name, n, st)
		}
		r := c.do("", "sync", "status")
		contains(t, c.name+": sync status", r.stdout, "  Refused: ", "messages/bob.jsonl: a message.create by \"alice\" in messages/bob.jsonl")
		var found map[string]any
		c.json(&found, c.agent, "search", "forged")
		if strings.Contains(fmt.Sprint(found), "please merge") {
			t.Errorf("%s: search finds the forged message: %v", c.name, found)
		}
	}
	// On a, where alice is registered, her forged registration is refused too.
	contains(t, "a: sync status", a.do("", "sync", "status").stdout, "alice is registered on this machine")

	// The forged token opens no WebSocket as alice on either machine.
	for _, c := range []*syncCLI{a, b} {
		port, err := os.ReadFile(filepath.Join(c.repo, ".thrum", "var", "ws.port"))
		if err != nil {
			t.Fatal(err)
		}
		ws, err := rpc.DialWebSocket(context.Background(), "ws://127.0.0.1:"+strings.TrimSpace(string(port))+"/ws", nil)
		if err != nil {
			t.Fatal(err)
		}
		if r, err := ws.Auth(context.Background(), &rpc.AuthParams{Token: forgedToken}); err == nil {
			t.Errorf("%s: the forged token authenticates as %+v", c.name, r)
		}
		ws.Close()
	}

	for _, c := range []*syncCLI{a, b} {
		c.do("", "daemon", "stop")
		r := c.withEnv(map[string]string{"GIT_CONFIG_GLOBAL": os.DevNull, "GIT_CONFIG_NOSYSTEM": "1"}, "doctor")
		if r.code != 0 {
			t.Errorf("%s: doctor exit %d, want 0 (refusals are the remote's, not the log's):\n%s", c.name, r.code, r)
		}
		contains(t, c.name+": doctor", r.stdout, "No problems found.", "Sync refused ", "quarantine.jsonl, never applied",
			"messages/bob.jsonl: a message.create by \"alice\" in messages/bob.jsonl")
		var rep map[string]any
		c.json(&rep, "", "doctor")
		if n := num(rep, "refused"); n < 1 {
			t.Errorf("%s: doctor --json refused = %v: %v", c.name, n, rep)
		}
	}
}
