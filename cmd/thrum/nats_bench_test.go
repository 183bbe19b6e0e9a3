package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/identity"
	"github.com/thrumhq/thrum/internal/keystore"
	"github.com/thrumhq/thrum/internal/thrumtest"
	"github.com/thrumhq/thrum/rpc"
)

// The figures of live delivery between machines (budgets: docs/performance.md):
// each daemon in its own process, a real nats-server (a child process),
// the clones sharing no git remote, so NATS alone carries events.
//
//	go test ./cmd/thrum -run '^$' -bench 'NATS' -benchtime 200x

// BenchmarkNATSLatency: from alice's send returning on A to bob's
// wait_for_message tool result (thrum mcp serve) on B; over loopback,
// and with each daemon 50 ms (one way) from the server through a
// delaying proxy.
func BenchmarkNATSLatency(b *testing.B) {
	for _, delay := range []time.Duration{0, 50 * time.Millisecond} {
		b.Run("delay="+delay.String(), func(b *testing.B) {
			ns, remote := thrumtest.StartNATS(b), thrumtest.GitRemote(b)
			urls := []string{ns.URL, ns.URL}
			if delay > 0 {
				urls = []string{delayProxy(b, ns.Port, delay), delayProxy(b, ns.Port, delay)}
			}
			a, bc := benchClone(b, ns, remote, "a", urls[0], true), benchClone(b, ns, remote, "b", urls[1], false)
			a.do("", "quickstart", "--name", "alice", "--role", "dev", "--module", "m")
			bc.do("", "quickstart", "--name", "bob", "--role", "dev", "--module", "m")
			waitFor(b, 30*time.Second, "bob known on a", func() bool { return a.knows("bob") })
			a.do("", "sync", "force", "--wait") // bob's registration applied everywhere on a
			send := agentClient(b, a, "alice")
			e := &mcpE2E{t: b, bin: thrumtest.Binary(b), repo: bc.repo, stderrs: map[string]*bytes.Buffer{}}
			cs := e.serve("bob")
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := range b.N {
				b.StopTimer()
				wait := mcpE2EWait(cs, map[string]any{"timeout": 30})
				time.Sleep(20 * time.Millisecond) // the wait is waiting
				b.StartTimer()
				content := fmt.Sprintf("latency %d", i)
				start := time.Now()
				if _, err := send.SendMessage(context.Background(), &rpc.SendMessageParams{Content: content, Mentions: []string{"@bob"}}); err != nil {
					b.Fatal(err)
				}
				r := <-wait
				d := time.Since(start)
				if r.err != nil || !strings.Contains(mcpE2EText(r.res), content) {
					b.Fatalf("wait_for_message: %v %s", r.err, mcpE2EText(r.res))
				}
				lat = append(lat, d)
			}
			b.StopTimer()
			thrumtest.ReportLatencies(b, lat)
		})
	}
}

// BenchmarkNATSSend: sends per second from 8 concurrent agents to a
// ninth of the same daemon, and that daemon's CPU per send, with NATS
// off, on, and on with another clone reading the stream on the same
// machine (whose imports then share its two cores).
func BenchmarkNATSSend(b *testing.B) {
	for _, mode := range []string{"off", "on", "on+reader"} {
		on, reader := mode != "off", mode == "on+reader"
		b.Run("nats="+mode, func(b *testing.B) {
			ns, remote := thrumtest.StartNATS(b), thrumtest.GitRemote(b)
			url := ""
			if on {
				url = ns.URL
			}
			a := benchClone(b, ns, remote, "a", url, true)
			a.do("", "quickstart", "--name", "bob", "--role", "dev", "--module", "m")
			if reader { // another clone reads the stream, on the same two cores
				benchClone(b, ns, remote, "b", ns.URL, false)
			}
			var clients []*rpc.Client
			for i := range 8 {
				name := "s" + strconv.Itoa(i)
				a.do("", "quickstart", "--name", name, "--role", "dev", "--module", "m")
				clients = append(clients, agentClient(b, a, name))
			}
			pid := pidFromFile(filepath.Join(a.repo, ".thrum", "var", "thrum.pid"))
			cpu0 := procCPU(b, pid)
			var next atomic.Int64
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for _, c := range clients {
				wg.Go(func() {
					for next.Add(1) <= int64(b.N) {
						if _, err := c.SendMessage(context.Background(), &rpc.SendMessageParams{Content: "rate", Mentions: []string{"@bob"}}); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			el := time.Since(start)
			b.StopTimer()
			cpu := procCPU(b, pid) - cpu0
			b.ReportMetric(float64(b.N)/el.Seconds(), "sends/s")
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/send")
		})
	}
}

// BenchmarkNATSIdle: the CPU an idle daemon connected to NATS uses, in
// percent of a core, over 10 s.
func BenchmarkNATSIdle(b *testing.B) {
	ns, remote := thrumtest.StartNATS(b), thrumtest.GitRemote(b)
	a := benchClone(b, ns, remote, "a", ns.URL, true)
	a.do("", "quickstart", "--name", "alice", "--role", "dev", "--module", "m")
	pid := pidFromFile(filepath.Join(a.repo, ".thrum", "var", "thrum.pid"))
	time.Sleep(2 * time.Second)
	for range b.N {
		cpu0, t0 := procCPU(b, pid), time.Now()
		time.Sleep(10 * time.Second)
		b.ReportMetric(100*float64(procCPU(b, pid)-cpu0)/float64(time.Since(t0)), "%core")
	}
}

// BenchmarkNATSCatchUp100k: a clone that was offline catches up with
// 100,000 messages from the stream, through the same admission as git:
// the time until it holds them all, and its peak resident memory.
func BenchmarkNATSCatchUp100k(b *testing.B) {
	const n = 100_000
	for range b.N {
		b.StopTimer()
		ns, remote := thrumtest.StartNATS(b), thrumtest.GitRemote(b)
		a := benchClone(b, ns, remote, "a", ns.URL, true)
		a.do("", "quickstart", "--name", "alice", "--role", "dev", "--module", "m")
		a.do("alice", "send", "the first", "--to", "@alice")
		a.do("", "daemon", "stop")
		// Signed as alice's thrum signs, or B refuses every copy.
		ks, err := keystore.Open(filepath.Join(a.repo, ".thrum", "var", thrum.DefaultKeyDir))
		if err != nil {
			b.Fatal(err)
		}
		key, err := ks.Key("alice", false)
		if err != nil || key == nil {
			b.Fatalf("alice's key: %v", err)
		}
		repoID := thrumtest.Git(b, a.repo, "rev-list", "--max-parents=0", "--max-count=1", "HEAD")[:16]
		thrumtest.CopyMessages(b, filepath.Join(a.repo, ".git", "thrum-sync", "a-sync", filepath.FromSlash(eventlog.ShardPath("alice"))), n-1, repoID, key.(ed25519.PrivateKey))
		a.do("", "daemon", "start", "--nats", ns.URL, "--timeout", "5m") // it applies the copied messages first
		waitFor(b, 5*time.Minute, "a to publish its history", func() bool {
			st := a.syncStatus()
			return str(st, "nats.state") == "live" && num(st, "nats.unpublished_bytes") == 0 && num(st, "nats.published") > 0
		})
		b.StartTimer()
		start := time.Now()
		bc := benchClone(b, ns, remote, "b", ns.URL, false)
		waitFor(b, 5*time.Minute, "b to hold every message", func() bool { return bc.messageTotal() >= n })
		el := time.Since(start)
		b.StopTimer()
		pid := pidFromFile(filepath.Join(bc.repo, ".thrum", "var", "thrum.pid"))
		b.ReportMetric(el.Seconds(), "s-caught-up")
		b.ReportMetric(float64(procHWM(b, pid))/(1<<20), "MiB-peak")
	}
}

// benchClone is a clone with no git remote and a daemon with the NATS
// URL (none for ""); first makes the stream.
func benchClone(tb testing.TB, ns *thrumtest.NATSServer, remote *thrumtest.Remote, name, url string, first bool) *syncCLI {
	tb.Helper()
	c := &syncCLI{thrumCLI: &thrumCLI{t: tb, repo: remote.Clone(name), bin: thrumtest.Binary(tb)}, name: name, allowed: natsAllowed}
	thrumtest.Git(tb, c.repo, "remote", "remove", "origin")
	c.do("", "init")
	if first {
		c.do("", "sync", "nats", "init", "--nats", ns.URL)
	}
	if url == "" {
		c.startDaemon()
	} else {
		c.startDaemon("--nats", url)
	}
	return c
}

// agentClient is a connection to the clone's daemon as an agent.
func agentClient(tb testing.TB, c *syncCLI, name string) *rpc.Client {
	tb.Helper()
	f, err := identity.Load(filepath.Join(c.repo, ".thrum", "identities", name+".json"))
	if err != nil {
		tb.Fatal(err)
	}
	cl, err := rpc.Dial(context.Background(), filepath.Join(c.repo, ".thrum", "var", "thrum.sock"), nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cl.Close() })
	if _, err := cl.Auth(context.Background(), &rpc.AuthParams{Token: f.Token}); err != nil {
		tb.Fatal(err)
	}
	return cl
}

// procCPU is a process's user and system time so far.
func procCPU(tb testing.TB, pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		tb.Fatal(err)
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	ut, _ := strconv.Atoi(f[11])
	st, _ := strconv.Atoi(f[12])
	return time.Duration(ut+st) * 10 * time.Millisecond // USER_HZ 100
}

// procHWM is a process's peak resident memory in bytes.
func procHWM(tb testing.TB, pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		tb.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// delayProxy forwards connections on a new loopback port to the port,
// holding every chunk of bytes d in each direction (a one-way delay of
// d, as across a continent). It returns the proxy's nats:// URL.
func delayProxy(tb testing.TB, port int, d time.Duration) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { l.Close() })
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
			if err != nil {
				in.Close()
				continue
			}
			go delayCopy(out, in, d)
			go delayCopy(in, out, d)
		}
	}()
	return "nats://" + l.Addr().String()
}

// delayCopy copies from src to dst, each chunk d after it was read.
func delayCopy(dst, src net.Conn, d time.Duration) {
	type chunk struct {
		at time.Time
		b  []byte
	}
	q := make(chan chunk, 4096)
	go func() {
		defer close(q)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				q <- chunk{time.Now().Add(d), buf[:n]}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range q {
		time.Sleep(time.Until(c.at))
		if _, err := dst.Write(c.b); err != nil {
			break
		}
	}
	dst.Close()
	src.Close()
	io.Copy(io.Discard, src)
}
