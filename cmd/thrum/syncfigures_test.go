package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/internal/thrumtest"
	"github.com/thrumhq/thrum/rpc"
)

// TestSyncFiguresDaemon prints what sync costs on the user's path: the
// real daemon (`thrum daemon start`) in a clone of a bare remote on disk,
// with THRUM_SYNC_MESSAGES messages stored (default 5,000), then
// THRUM_SYNC_ROUNDS times (default 40): a message sent with `thrum send`,
// the daemon's debounced round that commits and pushes it, then `thrum
// sync force` and its round. It prints the daemon's CPU per message — its
// own and its git children's, the remote's receive-pack and upload-pack
// included, which are its grandchildren — for the send with its round and
// for the forced round. THRUM_SYNC_BIN runs another thrum binary (an
// older build, to compare). Run it with
//
//	THRUM_SYNC_FIGURES=1 go test ./cmd/thrum -run TestSyncFiguresDaemon -v -timeout 30m
func TestSyncFiguresDaemon(t *testing.T) {
	if os.Getenv("THRUM_SYNC_FIGURES") != "1" {
		t.Skip("set THRUM_SYNC_FIGURES=1 to print sync figures")
	}
	stored, rounds := envInt(t, "THRUM_SYNC_MESSAGES", 5000), envInt(t, "THRUM_SYNC_ROUNDS", 40)
	bin := os.Getenv("THRUM_SYNC_BIN")
	if bin == "" {
		bin = thrumtest.Binary(t)
	}
	remote := thrumtest.GitRemote(t)
	c := &syncCLI{thrumCLI: &thrumCLI{t: t, repo: remote.Clone("a"), bin: bin}, name: "a"}
	c.do("", "init")
	c.startDaemon("--sync-interval", "1h")
	c.do("", "quickstart", "--name", "alice", "--role", "implementer", "--module", "m")
	c.do("", "quickstart", "--name", "bob", "--role", "reviewer", "--module", "m")
	c.do("alice", "send", "the first message", "--to", "@bob")
	c.forceSync()
	c.do("", "daemon", "stop")
	logDir := filepath.Join(c.repo, ".git", "thrum-sync", "a-sync")
	thrumtest.CopyMessages(t, filepath.Join(logDir, filepath.FromSlash(eventlog.ShardPath("alice"))), stored-1, "", nil)
	c.startDaemon("--sync-interval", "1h")
	c.forceSync() // pushes the copies
	pid := pidFromFile(filepath.Join(c.repo, ".thrum", "var", "thrum.pid"))

	// Rounds are watched through one connection, every 50 ms: a `thrum
	// sync status` each time would cost the daemon a connection of its
	// own.
	ctx := context.Background()
	rc, err := rpc.Dial(ctx, filepath.Join(c.repo, ".thrum", "var", "thrum.sock"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	polls := 0
	lastSync := func() string {
		polls++
		st, err := rc.SyncStatus(ctx, &rpc.SyncStatusParams{})
		if err != nil {
			t.Fatal(err)
		}
		if st.LastError != "" {
			t.Fatalf("sync failed: %s", st.LastError)
		}
		return st.LastSyncAt
	}
	waitRound := func(last string) {
		for deadline := time.Now().Add(30 * time.Second); lastSync() == last; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("no sync round within 30s")
			}
		}
	}
	// What the watching costs the daemon, per sync.status call.
	const probes = 1000
	p0 := daemonCPU(t, pid)
	for range probes {
		lastSync()
	}
	pollCPU := (daemonCPU(t, pid)[0] - p0[0]) / probes
	polls = 0

	var sendCPU, forceCPU [2]time.Duration // the daemon's own, its children's
	start := time.Now()
	for i := 0; i < rounds; i++ {
		last := lastSync()
		c0 := daemonCPU(t, pid)
		c.do("alice", "send", fmt.Sprintf("message %d, one per round, with a sentence or two of text as agents write them", i), "--to", "@bob")
		waitRound(last) // the round the send's debounce started
		last = lastSync()
		c1 := daemonCPU(t, pid)
		c.do("", "sync", "force")
		waitRound(last)
		c2 := daemonCPU(t, pid)
		for k := range 2 {
			sendCPU[k] += c1[k] - c0[k]
			forceCPU[k] += c2[k] - c1[k]
		}
	}
	elapsed := time.Since(start)
	per := func(d time.Duration) string {
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)/float64(rounds))
	}
	t.Logf("%d messages stored, then %d times a send and a forced round, in %v (binary %s)", stored, rounds, elapsed.Round(time.Millisecond), bin)
	t.Logf("per message: the send and its round: daemon %s + git children %s; the forced round: daemon %s + git children %s; in all %s",
		per(sendCPU[0]), per(sendCPU[1]), per(forceCPU[0]), per(forceCPU[1]), per(sendCPU[0]+sendCPU[1]+forceCPU[0]+forceCPU[1]))
	t.Logf("of the daemon's own CPU, about %s per message went to this test's %.1f sync.status calls per message (%.2f ms each, over %d calls)",
		per(time.Duration(polls)*pollCPU), float64(polls)/float64(rounds), float64(pollCPU)/float64(time.Millisecond), probes)
}

// daemonCPU returns a process's CPU time so far: its own, and that of
// the children it waited for (theirs included).
func daemonCPU(t *testing.T, pid int) [2]time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// pid (comm) state … utime stime cutime cstime are fields 14-17.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	tick := func(i int) time.Duration {
		n, err := strconv.ParseInt(f[i-3], 10, 64)
		if err != nil {
			t.Fatalf("/proc/%d/stat field %d: %v", pid, i, err)
		}
		return time.Duration(n) * 10 * time.Millisecond // USER_HZ is 100 on Linux
	}
	return [2]time.Duration{tick(14) + tick(15), tick(16) + tick(17)}
}

func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive number", name, v)
	}
	return n
}
