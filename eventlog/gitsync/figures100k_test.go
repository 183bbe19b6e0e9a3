package gitsync_test

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/internal/thrumtest"
)

// TestSyncFigures100k prints what sync costs per message with a large
// history: it preloads 100,000 messages (written into the log files
// directly, 5,000 in each of 20 agents' shards, pushed once), then sends
// 200 messages from one of those agents, one sync round each, through a
// bare remote on disk. It prints the repository growth per message in
// the clone and the remote, the CPU per message of this process and of
// its git children, and the resident memory afterwards. Run it with
//
//	THRUM_SYNC_FIGURES=1 go test ./eventlog/gitsync -run TestSyncFigures100k -v -timeout 30m
func TestSyncFigures100k(t *testing.T) {
	if os.Getenv("THRUM_SYNC_FIGURES") != "1" {
		t.Skip("set THRUM_SYNC_FIGURES=1 to print sync figures")
	}
	const agents, perAgent, sends = 20, 5000, 200
	remote := newRemote(t)
	a := newClone(t, remote, "a", nil)
	a.register("bob", "reviewer")
	names := []string{"alice"}
	for i := 1; i < agents; i++ {
		names = append(names, fmt.Sprintf("agent%02d", i))
	}
	for _, n := range names {
		a.register(n, "implementer")
		a.send(n, "bob", "template")
	}
	a.close()

	// Preload: copy each agent's message with fresh IDs.
	start := time.Now()
	for _, n := range names {
		thrumtest.CopyMessages(t, filepath.Join(a.wt, filepath.FromSlash(eventlog.ShardPath(n))), perAgent-1)
	}
	a.open()
	if got := a.total(); got != agents*perAgent {
		t.Fatalf("the clone holds %d messages, want %d", got, agents*perAgent)
	}
	a.sync()
	info, _ := os.Stat(filepath.Join(a.wt, filepath.FromSlash(eventlog.ShardPath("alice"))))
	t.Logf("preloaded %d messages in %d shards (alice's shard %d KB) and pushed them in %v",
		agents*perAgent, agents, info.Size()>>10, time.Since(start).Round(time.Millisecond))
	gitT(t, a.wt, "repack", "-a", "-d", "-q")
	gitT(t, remote, "repack", "-a", "-d", "-q")
	clone0, remote0 := objectBytes(t, a.gitDir), objectBytes(t, remote)
	// The remote's side of each push (receive-pack and what it runs) is
	// this process's grandchild, counted with git children: run it
	// through this test binary, which records its CPU apart.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	remoteCPU := filepath.Join(t.TempDir(), "receive-pack-cpu")
	t.Setenv(receivePackFileEnv, remoteCPU)
	gitT(t, a.dir, "config", "remote.origin.receivepack", receivePackEnv+"=1 "+self)

	var self0, kids0 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self0)
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids0)
	start = time.Now()
	for i := 0; i < sends; i++ {
		a.send("alice", "bob", fmt.Sprintf("spaced message %d, one per sync round", i))
		a.sync()
	}
	elapsed := time.Since(start)
	var self1, kids1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self1)
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids1)
	if got := a.total(); got != agents*perAgent+sends {
		t.Fatalf("the clone holds %d messages, want %d", got, agents*perAgent+sends)
	}
	if !remoteHas(t, remote, a) {
		t.Fatal("the remote lacks the clone's last commit")
	}
	per := func(d time.Duration) string {
		return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)/sends)
	}
	remoteSide, wrapper := receivePackCPU(t, remoteCPU)
	t.Logf("%d messages, one sync round each, in %v: CPU per message: this process %s (user+sys), git children %s, of which the remote's receive-pack %s",
		sends, elapsed.Round(time.Millisecond), per(cpu(self1)-cpu(self0)), per(cpu(kids1)-cpu(kids0)-wrapper), per(remoteSide))

	clone1, remote1 := objectBytes(t, a.gitDir), objectBytes(t, remote)
	t.Logf("repository growth per message as left by the rounds: clone %.1f KB, remote %.1f KB (the remote's loose objects, before any server-side packing)",
		kb(clone1-clone0)/sends, kb(remote1-remote0)/sends)
	gitT(t, a.wt, "repack", "-a", "-d", "-q")
	gitT(t, remote, "repack", "-a", "-d", "-q")
	clone2, remote2 := objectBytes(t, a.gitDir), objectBytes(t, remote)
	t.Logf("repository growth per message after git repack -a -d: clone %.1f KB, remote %.1f KB (budget 10 KB)",
		kb(clone2-clone0)/sends, kb(remote2-remote0)/sends)

	runtime.GC()
	debug.FreeOSMemory()
	t.Logf("resident memory of this process (node + Syncer + test) at %d messages with a remote, after GC: %s",
		agents*perAgent+sends, vmRSS(t))
}

// objectBytes is the size of a git directory's object store.
func objectBytes(t *testing.T, gitDir string) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(filepath.Join(gitDir, "objects"), func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err == nil {
			n += info.Size()
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func cpu(r syscall.Rusage) time.Duration {
	return time.Duration(r.Utime.Nano() + r.Stime.Nano())
}

func kb(n int64) float64 { return float64(n) / 1024 }

func vmRSS(t *testing.T) string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// Running the remote's receive-pack through the test binary (see
// TestSyncFigures100k).
const (
	receivePackEnv     = "GITSYNC_RECEIVE_PACK" // set: this process is the wrapper
	receivePackFileEnv = "GITSYNC_RECEIVE_PACK_CPU"
)

// receivePack runs git receive-pack with this process's arguments and
// standard streams, and appends to the file named by receivePackFileEnv
// the CPU time of receive-pack (with what it waited for) and its own.
func receivePack() int {
	cmd := exec.Command("git", append([]string{"receive-pack"}, os.Args[1:]...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	err := cmd.Run()
	code := 0
	if err != nil {
		code = 1
		if cmd.ProcessState == nil {
			fmt.Fprintln(os.Stderr, err)
			return code
		}
		code = cmd.ProcessState.ExitCode()
	}
	ru, _ := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	var own syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &own)
	if f, err := os.OpenFile(os.Getenv(receivePackFileEnv), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil && ru != nil {
		fmt.Fprintf(f, "%d %d\n", cpu(*ru), cpu(own))
		f.Close()
	}
	return code
}

// receivePackCPU sums what the wrappers recorded: receive-pack's CPU and
// their own.
func receivePackCPU(t *testing.T, path string) (remote, wrapper time.Duration) {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("no receive-pack ran through the wrapper: %v", err)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var r, w int64
		if _, err := fmt.Sscan(l, &r, &w); err != nil {
			t.Fatalf("receive-pack CPU line %q: %v", l, err)
		}
		remote += time.Duration(r)
		wrapper += time.Duration(w)
	}
	return remote, wrapper
}
