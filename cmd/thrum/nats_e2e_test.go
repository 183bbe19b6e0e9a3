package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/identity"
	"github.com/thrumhq/thrum/internal/thrumtest"
	"github.com/thrumhq/thrum/rpc"
)

// natsAllowed are the daemon log lines a NATS test expects: a server
// killed or gone, a daemon killed mid-write.
var natsAllowed = []string{"natsync:", "final sync failed", "gitsync: sync failed", "moved an unterminated", "moved a final line"}

// natsClones clones the remote n times, each with init and a daemon
// started with args and the NATS server; the stream is made first. With
// git false, each clone forgets its remote: NATS alone carries events.
func natsClones(t testing.TB, remote *thrumtest.Remote, ns *thrumtest.NATSServer, useGit bool, names []string, args ...string) []*syncCLI {
	t.Helper()
	bin := thrumtest.Binary(t)
	var cs []*syncCLI
	for i, name := range names {
		c := &syncCLI{thrumCLI: &thrumCLI{t: t, repo: remote.Clone(name), bin: bin}, name: name, allowed: natsAllowed}
		if !useGit {
			thrumtest.Git(t, c.repo, "remote", "remove", "origin")
		}
		c.do("", "init")
		if i == 0 {
			c.do("", "sync", "nats", "init", "--nats", ns.URL)
			c.startDaemon(append([]string{"--nats", ns.URL}, args...)...)
		} else {
			// As the README has it: the clone's own git config.
			thrumtest.Git(t, c.repo, "config", "thrum.natsUrl", ns.URL)
			c.startDaemon(args...)
		}
		cs = append(cs, c)
	}
	return cs
}

// knows reports whether the clone's daemon knows an agent.
func (c *syncCLI) knows(agent string) bool {
	var al map[string]any
	c.json(&al, "", "agent", "list")
	for _, ag := range al["agents"].([]any) {
		if str(ag, "agent_id") == agent {
			return true
		}
	}
	return false
}

// TestNATSBetweenDaemons: two clones whose git rounds are an hour apart
// meet through NATS: each sees the other's agent, and alice's message is
// in bob's inbox within seconds; sync status shows NATS live.
func TestNATSBetweenDaemons(t *testing.T) {
	t.Parallel()
	ns := thrumtest.StartNATS(t)
	cs := natsClones(t, thrumtest.GitRemote(t), ns, true, []string{"a", "b"}, "--sync-interval", "1h")
	a, b := cs[0], cs[1]
	a.do("", "quickstart", "--name", "alice", "--role", "dev", "--module", "m")
	b.do("", "quickstart", "--name", "bob", "--role", "dev", "--module", "m")
	// The send resolves @bob in the directory, which takes bob's
	// registration a moment after agent list (SQLite) shows it.
	var sent map[string]any
	env := map[string]string{"THRUM_NAME": "alice", "GIT_CONFIG_GLOBAL": os.DevNull, "GIT_CONFIG_NOSYSTEM": "1"}
	waitFor(t, 10*time.Second, "a send to bob accepted on a", func() bool {
		r := a.withEnv(env, "--json", "send", "live across machines", "--to", "@bob")
		return r.code == 0 && json.Unmarshal([]byte(r.stdout), &sent) == nil
	})
	id := str(sent, "message_id")
	start := time.Now()
	waitFor(t, 10*time.Second, "the message in bob's inbox", func() bool {
		var inbox map[string]any
		b.json(&inbox, "bob", "inbox")
		for _, m := range inbox["messages"].([]any) {
			if str(m, "message_id") == id {
				return true
			}
		}
		return false
	})
	t.Logf("in bob's inbox %v after the send returned (polled by the CLI)", time.Since(start).Round(time.Millisecond))
	st := b.syncStatus()
	if str(st, "nats.state") != "live" || str(st, "nats.stream") == "" || num(st, "nats.imported") == 0 {
		t.Errorf("b: sync status --json: %v", st)
	}
	r := b.do("", "sync", "status")
	contains(t, "sync status", r.stdout, "NATS: live, server "+ns.URL)
}

// TestNATSSyncStatusWithoutNATS: without a NATS server, sync status says
// nothing of NATS: the daemon runs as it did before NATS existed.
func TestNATSSyncStatusWithoutNATS(t *testing.T) {
	t.Parallel()
	remote := thrumtest.GitRemote(t)
	c := &syncCLI{thrumCLI: &thrumCLI{t: t, repo: remote.Clone("a"), bin: thrumtest.Binary(t)}, name: "a"}
	c.do("", "init")
	c.startDaemon("--sync-interval", "1h")
	if st := c.syncStatus(); st["nats"] != nil {
		t.Errorf("sync status without NATS: %v", st)
	}
	if r := c.do("", "sync", "status"); strings.Contains(r.stdout, "NATS") {
		t.Errorf("sync status without NATS:\n%s", r.stdout)
	}
}

// sender sends n messages as agent from one clone's daemon to peer,
// over its socket, each with an idempotency key, retrying each until it
// is acknowledged (its daemon may be killed and started again meanwhile).
type sender struct {
	c     *syncCLI
	agent string
	peer  string
	token string
}

func (s *sender) run(ctx context.Context, n int, acked *atomic.Int64) error {
	var cl *rpc.Client
	defer func() {
		if cl != nil {
			cl.Close()
		}
	}()
	sock := filepath.Join(s.c.repo, ".thrum", "var", "thrum.sock")
	for i := 0; i < n; {
		if ctx.Err() != nil {
			return fmt.Errorf("%s: %d of %d acknowledged: %w", s.agent, i, n, ctx.Err())
		}
		if cl == nil {
			c, err := rpc.Dial(ctx, sock, nil)
			if err == nil {
				if _, err = c.Auth(ctx, &rpc.AuthParams{Token: s.token}); err != nil {
					c.Close()
				}
			}
			if err != nil {
				time.Sleep(20 * time.Millisecond)
				continue
			}
			cl = c
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := cl.SendMessage(cctx, &rpc.SendMessageParams{Content: fmt.Sprintf("%s #%d", s.agent, i), Mentions: []string{"@" + s.peer},
			IdempotencyKey: s.agent + "-" + strconv.Itoa(i)})
		cancel()
		if err != nil {
			cl.Close()
			cl = nil
			continue
		}
		i++
		acked.Add(1)
	}
	return nil
}

// eightSenders registers four agents in each of two clones, each writing
// to one agent of the other clone: 8 senders, n messages in all.
func eightSenders(t testing.TB, a, b *syncCLI) []*sender {
	t.Helper()
	var out []*sender
	for i := range 4 {
		for _, side := range []struct {
			c    *syncCLI
			name string
			peer string
		}{{a, fmt.Sprintf("a%d", i), fmt.Sprintf("b%d", i)}, {b, fmt.Sprintf("b%d", i), fmt.Sprintf("a%d", i)}} {
			side.c.do("", "quickstart", "--name", side.name, "--role", "dev", "--module", "m")
			f, err := identity.Load(filepath.Join(side.c.repo, ".thrum", "identities", side.name+".json"))
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, &sender{c: side.c, agent: side.name, peer: side.peer, token: f.Token})
		}
	}
	for _, s := range out {
		waitFor(t, 30*time.Second, s.peer+" known where "+s.agent+" writes", func() bool { return s.c.knows(s.peer) })
	}
	return out
}

// sendAll runs the senders, n messages in all, calling at(k) as the
// acknowledged count passes each k of marks.
func sendAll(t testing.TB, senders []*sender, n int, marks []int64, at func(mark int64)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var acked atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, len(senders))
	for _, s := range senders {
		wg.Go(func() { errs <- s.run(ctx, n/len(senders), &acked) })
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for _, m := range marks {
		for acked.Load() < m {
			select {
			case <-done:
			case <-time.After(time.Millisecond):
				continue
			}
			break
		}
		at(m)
	}
	<-done
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// killDaemon kills a clone's daemon with SIGKILL and starts it again.
func (c *syncCLI) killDaemon(args ...string) {
	c.t.Helper()
	pid := pidFromFile(filepath.Join(c.repo, ".thrum", "var", "thrum.pid"))
	if pid <= 0 {
		c.t.Fatalf("%s: no daemon to kill", c.name)
	}
	syscall.Kill(pid, syscall.SIGKILL)
	for alive(pid) && !zombie(pid) {
		time.Sleep(5 * time.Millisecond)
	}
	// A process the daemon was forking when it died holds a copy of its
	// directory's lock until it execs: start refuses until then.
	env := map[string]string{"GIT_CONFIG_GLOBAL": os.DevNull, "GIT_CONFIG_NOSYSTEM": "1"}
	for deadline := time.Now().Add(10 * time.Second); ; {
		r := c.withEnv(env, append([]string{"daemon", "start"}, args...)...)
		if r.code == 0 {
			return
		}
		if time.Now().After(deadline) || !strings.Contains(r.stderr, "already running") {
			c.t.Fatalf("%s: restart after SIGKILL:\n%s", c.name, r)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// messageTotal is how many messages the clone's daemon holds.
func (c *syncCLI) messageTotal() int {
	c.t.Helper()
	ctx := context.Background()
	cl, err := rpc.Dial(ctx, filepath.Join(c.repo, ".thrum", "var", "thrum.sock"), nil)
	if err != nil {
		c.t.Fatalf("%s: %v", c.name, err)
	}
	defer cl.Close()
	var r rpc.ListMessagesResult
	if err := cl.Call(ctx, rpc.MethodMessageList, map[string]any{"page_size": 1}, &r); err != nil {
		c.t.Fatalf("%s: message.list: %v", c.name, err)
	}
	return r.Total
}

// stopAndCompare stops the clones' daemons and checks "logs equal": the
// same event IDs per shard (each once), and every agent's shard
// byte-identical to its author's.
func stopAndCompare(t testing.TB, cs ...*syncCLI) {
	t.Helper()
	type shardLog struct {
		ids   map[string]map[string]bool
		bytes map[string][]byte
	}
	logs := make([]shardLog, len(cs))
	for i, c := range cs {
		c.do("", "daemon", "stop")
		l, err := eventlog.Open(filepath.Join(c.repo, ".git", "thrum-sync", "a-sync"), nil)
		if err != nil {
			t.Fatal(err)
		}
		sl := shardLog{ids: map[string]map[string]bool{}, bytes: map[string][]byte{}}
		_, err = l.Scan(context.Background(), nil, func(e *eventlog.Event) error {
			if e.Shard == eventlog.LocalShard {
				return nil
			}
			p := eventlog.ShardPath(e.Shard)
			if sl.ids[p] == nil {
				sl.ids[p] = map[string]bool{}
			}
			if sl.ids[p][e.ID] {
				t.Errorf("%s: %s holds %s twice", c.name, p, e.ID)
			}
			sl.ids[p][e.ID] = true
			if e.Shard != "" {
				sl.bytes[p] = append(append(sl.bytes[p], e.Raw...), '\n')
			}
			return nil
		})
		l.Close()
		if err != nil {
			t.Fatal(err)
		}
		logs[i] = sl
	}
	for i := 1; i < len(cs); i++ {
		for p, ids := range logs[0].ids {
			for id := range ids {
				if !logs[i].ids[p][id] {
					t.Errorf("%s holds %s in %s, %s does not", cs[0].name, id, p, cs[i].name)
				}
			}
		}
		for p, ids := range logs[i].ids {
			for id := range ids {
				if !logs[0].ids[p][id] {
					t.Errorf("%s holds %s in %s, %s does not", cs[i].name, id, p, cs[0].name)
				}
			}
		}
		for p, b := range logs[0].bytes {
			if string(b) != string(logs[i].bytes[p]) {
				t.Errorf("%s differs between %s (%d bytes) and %s (%d bytes)", p, cs[0].name, len(b), cs[i].name, len(logs[i].bytes[p]))
			}
		}
	}
}

// TestNATSKillNine: 1,000 messages from 8 senders between two clones
// that share no git remote, with each daemon and then the server killed
// with SIGKILL mid-stream and started again: every acknowledged message
// reaches the other clone, once, and the logs are equal.
func TestNATSKillNine(t *testing.T) {
	t.Parallel()
	ns := thrumtest.StartNATS(t)
	cs := natsClones(t, thrumtest.GitRemote(t), ns, false, []string{"a", "b"})
	a, b := cs[0], cs[1]
	senders := eightSenders(t, a, b)
	const n = 1000
	before := a.messageTotal()
	sendAll(t, senders, n, []int64{250, 500, 750}, func(mark int64) {
		switch mark {
		case 250:
			a.killDaemon("--nats", ns.URL)
		case 500:
			b.killDaemon("--nats", ns.URL)
		case 750:
			ns.Kill()
			time.Sleep(200 * time.Millisecond)
			ns.Start()
		}
	})
	for _, c := range cs {
		waitFor(t, 60*time.Second, c.name+" to hold every message", func() bool { return c.messageTotal() >= before+n })
		if got := c.messageTotal(); got != before+n {
			t.Errorf("%s holds %d messages, want %d", c.name, got, before+n)
		}
	}
	c := a.syncStatus()
	t.Logf("a: %v", c["nats"])
	stopAndCompare(t, a, b)
}

// TestNATSAndGitTogether: the same 1,000 messages travel through git
// (a round every 100 ms) and NATS at once, with the NATS server gone for
// the middle third: each event is in each log once, and the logs are
// equal.
func TestNATSAndGitTogether(t *testing.T) {
	t.Parallel()
	ns := thrumtest.StartNATS(t)
	cs := natsClones(t, thrumtest.GitRemote(t), ns, true, []string{"a", "b"}, "--sync-interval", "100ms")
	a, b := cs[0], cs[1]
	senders := eightSenders(t, a, b)
	const n = 1000
	before := a.messageTotal()
	sendAll(t, senders, n, []int64{n / 3, 2 * n / 3}, func(mark int64) {
		if mark == n/3 {
			ns.Kill()
		} else {
			ns.Start()
		}
	})
	for _, c := range cs {
		waitFor(t, 60*time.Second, c.name+" to hold every message", func() bool { return c.messageTotal() >= before+n })
	}
	// Two clones pushing every 100 ms race each other: a round may lose
	// five races in a row and fail, and the next one go through.
	for _, c := range cs {
		env := map[string]string{"GIT_CONFIG_GLOBAL": os.DevNull, "GIT_CONFIG_NOSYSTEM": "1"}
		waitFor(t, 60*time.Second, c.name+": a round that pushes", func() bool {
			return c.withEnv(env, "sync", "force", "--wait").code == 0
		})
	}
	for _, c := range cs {
		if got := c.messageTotal(); got != before+n {
			t.Errorf("%s holds %d messages, want %d", c.name, got, before+n)
		}
	}
	stopAndCompare(t, a, b)
}

func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestNATSConfigFromThisCloneOnly: a server that a committed
// .thrumconfig suggests is shown by init and not used until this clone
// accepts it; a commit that changes it stops NATS until accepted again;
// doctor shows what the daemon would use; and a plain nats:// to another
// host without credentials is refused, from the flag as from
// THRUM_NATS_URL.
func TestNATSConfigFromThisCloneOnly(t *testing.T) {
	t.Parallel()
	ns := thrumtest.StartNATS(t)
	remote := thrumtest.GitRemote(t)
	c := &syncCLI{thrumCLI: &thrumCLI{t: t, repo: remote.Clone("a"), bin: thrumtest.Binary(t)}, name: "a", allowed: natsAllowed}
	thrumtest.Git(t, c.repo, "remote", "remove", "origin")
	suggest := func(url string) {
		if err := os.WriteFile(filepath.Join(c.repo, ".thrumconfig"), []byte("[nats]\n\turl = "+url+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		thrumtest.Git(t, c.repo, "add", ".thrumconfig")
		thrumtest.Git(t, c.repo, "commit", "-q", "-m", "suggest a NATS server")
	}
	suggest(ns.URL)
	r := c.do("", "init")
	contains(t, "init", r.stdout, ".thrumconfig suggests the server "+ns.URL+"; it is not used until you accept it: thrum sync nats accept")
	contains(t, "doctor", c.do("", "doctor").stdout, "suggests the server "+ns.URL)
	c.startDaemon()
	if st := c.syncStatus(); str(st, "sync_state") != "off" {
		t.Fatalf("a suggestion was used before it was accepted: %v", st)
	}

	contains(t, "accept", c.do("", "sync", "nats", "accept").stdout, "Accepted NATS server "+ns.URL)
	c.do("", "sync", "nats", "init")
	c.do("", "daemon", "restart")
	waitFor(t, 10*time.Second, "NATS live", func() bool { return str(c.syncStatus(), "nats.state") == "live" })
	c.do("", "daemon", "stop")
	contains(t, "doctor", c.do("", "doctor").stdout, "NATS: server "+ns.URL+" (from .thrumconfig (accepted)), stream thrum-")
	c.do("", "daemon", "start")

	suggest("nats://127.0.0.1:1")
	c.do("", "daemon", "restart")
	if st := c.syncStatus(); st["nats"] != nil {
		t.Fatalf("a changed suggestion was used without being accepted: %v", st)
	}

	c.do("", "daemon", "stop")
	for _, env := range []map[string]string{nil, {"THRUM_NATS_URL": "nats://nats.example.com:4222"}} {
		args := []string{"daemon", "start"}
		if env == nil {
			args = append(args, "--nats", "nats://nats.example.com:4222")
		}
		r := c.withEnv(env, args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, "--nats-insecure") || !strings.Contains(r.stderr, "in the clear") {
			t.Errorf("a plain nats:// to another host without credentials:\n%s", r)
		}
	}
}
