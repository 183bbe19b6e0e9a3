package thrum_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/rpc"
)

// BenchmarkDaemonSyncRSS starts the real binary's daemon in a git
// repository with a bare remote and 100,000 stored messages, waits for
// its first sync round (which commits and pushes the whole log), then
// for a second, forced one, and reports its resident memory when idle
// after each; then restarts it, as a daemon usually starts (its index
// loaded from what the stop saved), and reports the same after a forced
// round.
func BenchmarkDaemonSyncRSS(b *testing.B) {
	bin := buildThrum(b)
	src := benchDir(b, 100_000)
	var firstMiB, idleMiB, restartMiB, roundMs float64
	for i := 0; i < b.N; i++ {
		_, root, remote := syncBenchRepo(b)
		if out, err := exec.Command(bin, "--repo", root, "init").CombinedOutput(); err != nil {
			b.Fatalf("thrum init: %v\n%s", err, out)
		}
		logDir := filepath.Join(root, ".git", "thrum-sync", "a-sync")
		if err := copyTree(src, logDir); err != nil {
			b.Fatal(err)
		}
		os.MkdirAll(filepath.Join(root, ".thrum", "var"), 0o700)
		for _, f := range []string{thrum.DefaultDBName, thrum.DefaultDBName + "-wal", thrum.DefaultDBName + "-shm"} {
			os.Remove(filepath.Join(root, ".thrum", "var", f))
			os.Rename(filepath.Join(logDir, f), filepath.Join(root, ".thrum", "var", f))
		}
		os.Remove(filepath.Join(logDir, "complete"))
		sock := filepath.Join(root, ".thrum", "var", "thrum.sock")
		ctx := context.Background()
		cmd, c, _ := startColdDaemon(b, bin, root, sock)
		synced := func(after string) string {
			for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
				st, err := c.SyncStatus(ctx, &rpc.SyncStatusParams{})
				if err != nil {
					b.Fatal(err)
				}
				if st.SyncState == "synced" && st.LastSyncAt != after {
					return st.LastSyncAt
				}
				if st.SyncState == "error" && st.LastSyncAt == after && time.Since(start) > 5*time.Second {
					b.Fatalf("sync failed: %s", st.LastError)
				}
				if time.Since(start) > 2*time.Minute {
					b.Fatalf("no sync round finished: %+v", st)
				}
			}
		}
		last := synced("")
		if got := benchGit(b, remote, "rev-list", "--count", "a-sync"); got == "0" {
			b.Fatal("the remote has no a-sync commits")
		}
		time.Sleep(time.Second)
		firstMiB += rssMiB(cmd.Process.Pid)
		t0 := time.Now()
		if _, err := c.SyncForce(ctx, &rpc.SyncForceParams{}); err != nil {
			b.Fatal(err)
		}
		synced(last)
		roundMs += float64(time.Since(t0).Microseconds()) / 1000
		time.Sleep(time.Second)
		idleMiB += rssMiB(cmd.Process.Pid)
		c.Close()
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()

		if _, err := os.Stat(filepath.Join(root, ".thrum", "var", thrum.DefaultDBName+".index")); err != nil {
			b.Fatalf("the stop saved no index, so the restart would build one: %v", err)
		}
		cmd, c, _ = startColdDaemon(b, bin, root, sock)
		if _, err := c.SyncForce(ctx, &rpc.SyncForceParams{Wait: true}); err != nil {
			b.Fatal(err)
		}
		time.Sleep(time.Second)
		restartMiB += rssMiB(cmd.Process.Pid)
		c.Close()
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
	}
	b.ReportMetric(firstMiB/float64(b.N), "rss-after-first-push-MiB")
	b.ReportMetric(idleMiB/float64(b.N), "rss-idle-synced-MiB")
	b.ReportMetric(restartMiB/float64(b.N), "rss-restarted-synced-MiB")
	b.ReportMetric(roundMs/float64(b.N), "idle-round-ms")
}

// BenchmarkDaemonImportRSS is what a daemon's resident memory becomes
// when a sync brings 100,000 events another machine wrote, every one
// through admission: a fresh clone's daemon, idle after a first round
// with nothing to take (rss-before-import-MiB), then after the round
// that takes the remote's whole log (rss-after-import-MiB) and at its
// peak (hwm-MiB). The remote's log is a node's 100,000 messages,
// committed with git.
//
//	THRUM_BENCH_CACHE=DIR go test -run '^$' -bench DaemonImportRSS -benchtime 1x .
func BenchmarkDaemonImportRSS(b *testing.B) {
	bin := buildThrum(b)
	src := benchDir(b, 100_000)
	var before, after, hwm, importMs float64
	for i := 0; i < b.N; i++ {
		top, root, remote := syncBenchRepo(b)
		// The other machine's log: the fixture's shards, as its a-sync.
		other := filepath.Join(top, "other")
		benchGit(b, top, "init", "-q", "-b", "a-sync", other)
		for _, sub := range []string{"events.jsonl", "events", "messages"} {
			if _, err := os.Stat(filepath.Join(src, sub)); err == nil {
				if err := copyTree(filepath.Join(src, sub), filepath.Join(other, sub)); err != nil {
					b.Fatal(err)
				}
			}
		}
		benchGit(b, other, "add", "-A")
		benchGit(b, other, "commit", "-q", "-m", "thrum: sync from another machine")

		if out, err := exec.Command(bin, "--repo", root, "init").CombinedOutput(); err != nil {
			b.Fatalf("thrum init: %v\n%s", err, out)
		}
		ctx := context.Background()
		cmd, c, _ := startColdDaemon(b, bin, root, filepath.Join(root, ".thrum", "var", "thrum.sock"), "--sync-interval", "1h")
		if _, err := c.SyncForce(ctx, &rpc.SyncForceParams{Wait: true}); err != nil {
			b.Fatal(err)
		}
		time.Sleep(time.Second)
		before += rssMiB(cmd.Process.Pid)
		benchGit(b, other, "push", "-q", "-f", remote, "a-sync") // over the daemon's first commit: its next round merges
		t0 := time.Now()
		st, err := c.SyncForce(ctx, &rpc.SyncForceParams{Wait: true})
		if err != nil || st.LastError != "" {
			b.Fatalf("import round: %+v, %v", st, err)
		}
		importMs += float64(time.Since(t0).Milliseconds())
		if h, err := c.Health(ctx, &rpc.HealthParams{}); err != nil {
			b.Fatal(err)
		} else {
			b.Logf("after the import: %+v", h)
		}
		time.Sleep(time.Second)
		after += rssMiB(cmd.Process.Pid)
		hwm += statusMiB(cmd.Process.Pid, "VmHWM:")
		c.Close()
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
	}
	b.ReportMetric(before/float64(b.N), "rss-before-import-MiB")
	b.ReportMetric(after/float64(b.N), "rss-after-import-MiB")
	b.ReportMetric(hwm/float64(b.N), "hwm-MiB")
	b.ReportMetric(importMs/float64(b.N), "import-round-ms")
}

// syncBenchRepo makes, in a fresh directory top, a bare remote and a
// repository root whose main branch (a README) it holds.
func syncBenchRepo(b *testing.B) (top, root, remote string) {
	top = b.TempDir()
	remote, root = filepath.Join(top, "remote.git"), filepath.Join(top, "repo")
	benchGit(b, top, "init", "-q", "--bare", "-b", "main", remote)
	benchGit(b, top, "init", "-q", "-b", "main", root)
	if err := os.WriteFile(filepath.Join(root, "README.md"), []byte("# project\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	benchGit(b, root, "add", "README.md")
	benchGit(b, root, "commit", "-q", "-m", "initial")
	benchGit(b, root, "remote", "add", "origin", remote)
	benchGit(b, root, "push", "-q", "origin", "main")
	return top, root, remote
}

// benchGit runs git in dir, committing as b <b@b>, and returns its output
// trimmed.
func benchGit(b *testing.B, dir string, args ...string) string {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=b", "GIT_AUTHOR_EMAIL=b@b", "GIT_COMMITTER_NAME=b", "GIT_COMMITTER_EMAIL=b@b")
	out, err := cmd.CombinedOutput()
	if err != nil {
		b.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}
