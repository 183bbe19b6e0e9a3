package thrum_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/internal/gitwork"
	"github.com/thrumhq/thrum/rpc"
)

// BenchmarkSendVsDisk measures, in one run on one file system, what the
// disk allows and what the daemon gets out of it, over its Unix socket:
//
//   - fsync-serial: one file, a loop of append (a send-sized line) + fsync;
//   - fsync-8files: 8 files, each its own loop, in parallel;
//   - clients=1: one client sending, each send acknowledged durable;
//   - clients=8: 8 clients that are 8 distinct agents, each appending to
//     its own shard of the log;
//   - nosync: both again on a second daemon whose log skips fsync, the
//     rate the process allows when the disk costs nothing (the CPU's
//     ceiling: daemon and clients share this machine's cores).
//
// It reports each rate and the send rates as ratios to their ceilings
// (serial for one client, 8 files for 8 agents): the projection keeps
// up when the ratio is near 1. It also prints the process's CPU per send
// (daemon and clients, which run in this process), a figure that holds
// on a busy machine where the rates do not. Run it with
//
//	go test -run '^$' -bench SendVsDisk -benchtime 2000x .
func BenchmarkSendVsDisk(b *testing.B) {
	dir := b.TempDir()
	serial := fsyncRate(b, dir, 1, b.N)
	parallel := fsyncRate(b, dir, 8, b.N)

	d := startDaemon(b)
	agents := senderAgents(b, d)
	cpu0, cpuOK := processCPU()
	one := sendRate(b, d, agents[:1], b.N)
	cpu1, _ := processCPU()
	eight := sendRate(b, d, agents, b.N)
	cpu2, _ := processCPU()

	// The same daemon with the log's fsync off: what the process itself
	// (RPC, log, projection, on these cores) allows when the disk costs
	// nothing. A send rate can approach its fsync ceiling only where
	// this is well above it.
	free := startDaemonWith(b, &thrum.Options{GitRepo: gitwork.New(""), NoSync: true})
	freeAgents := senderAgents(b, free)
	freeOne := sendRate(b, free, freeAgents[:1], b.N)
	freeEight := sendRate(b, free, freeAgents, b.N)

	b.ReportMetric(serial, "fsync-serial/s")
	b.ReportMetric(parallel, "fsync-8files/s")
	b.ReportMetric(one, "sends-1client/s")
	b.ReportMetric(eight, "sends-8agents/s")
	b.ReportMetric(one/serial, "ratio-1client/serial")
	b.ReportMetric(eight/parallel, "ratio-8agents/8files")
	b.ReportMetric(freeOne, "nosync-sends-1client/s")
	b.ReportMetric(freeEight, "nosync-sends-8agents/s")
	b.ReportMetric(freeOne/serial, "nosync-ratio-1client/serial")
	b.ReportMetric(freeEight/parallel, "nosync-ratio-8agents/8files")
	b.ReportMetric(one/freeOne, "ratio-1client/nosync")
	b.ReportMetric(eight/freeEight, "ratio-8agents/nosync")
	if cpuOK {
		// The whole process's CPU: daemon and clients (they run here too).
		b.ReportMetric(float64((cpu1-cpu0).Microseconds())/float64(b.N), "cpu-us/send-1client")
		b.ReportMetric(float64((cpu2-cpu1).Microseconds())/float64(b.N), "cpu-us/send-8agents")
	}
}

// senderAgents registers 8 agents on d, each with a session, and returns
// their names: each sends into its own shard of the log.
func senderAgents(b *testing.B, d *daemon) []string {
	ctx := context.Background()
	agents := make([]string, 8)
	for i := range agents {
		agents[i] = fmt.Sprintf("sender_%d", i)
		if _, err := d.n.RegisterAgent(ctx, &rpc.RegisterAgentParams{Name: agents[i], Role: "implementer", Module: "m"}); err != nil {
			b.Fatal(err)
		}
		if _, err := d.n.StartSession(ctx, &rpc.StartSessionParams{AgentID: agents[i]}); err != nil {
			b.Fatal(err)
		}
	}
	return agents
}

// fsyncRate appends n send-sized lines, each fsynced, spread over files
// files written in parallel, and returns the total fsyncs per second.
func fsyncRate(b *testing.B, dir string, files, n int) float64 {
	line := []byte(fmt.Sprintf(`{"v":1,"id":"evt_%026d","type":"message.create","ts":"2026-01-01T00:00:00.000000000Z","payload":{"message_id":"msg_x","content":"%0120d"}}`+"\n", 0, 0))
	var wg sync.WaitGroup
	errs := make(chan error, files)
	start := time.Now()
	for f := range files {
		count := n / files
		if f < n%files {
			count++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			fh, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("fsync-%d-%d.jsonl", files, f)), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
			if err != nil {
				errs <- err
				return
			}
			defer fh.Close()
			for range count {
				if _, err := fh.Write(line); err != nil {
					errs <- err
					return
				}
				if err := fh.Sync(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	return float64(n) / elapsed.Seconds()
}

// sendRate sends n messages over the Unix socket, one client per agent,
// all at once, and returns the acknowledged sends per second.
func sendRate(b *testing.B, d *daemon, agents []string, n int) float64 {
	ctx := context.Background()
	conns := make([]*rpc.Client, len(agents))
	for i, a := range agents {
		conns[i] = benchConn(b, d, "unix", a, nil)
	}
	var wg sync.WaitGroup
	start := time.Now()
	for i, c := range conns {
		count := n / len(conns)
		if i < n%len(conns) {
			count++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range count {
				p := &rpc.SendMessageParams{Content: fmt.Sprintf("bench %d from %s", j, agents[i]), Mentions: []string{"@bob"}}
				if _, err := c.SendMessage(ctx, p); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return float64(n) / time.Since(start).Seconds()
}
