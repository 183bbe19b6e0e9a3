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
		thrumtest.CopyMessages(t, filepath.Join(a.wt, filepath.FromSlash(eventlog.ShardPath(n))), perAgent-1, "", nil)
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
	// this process's grandchild, counted with git children. git looks
	// for the programs it starts (the remote's git-receive-pack, or the
	// shell's git) in its exec path first: there they are this test
	// binary, which runs the real one and records receive-pack's CPU
	// and its own apart.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	wrappers := t.TempDir()
	for _, name := range []string{"git", "git-receive-pack"} {
		if err := os.Symlink(self, filepath.Join(wrappers, name)); err != nil {
			t.Fatal(err)
		}
	}
	remoteCPU := filepath.Join(t.TempDir(), "receive-pack-cpu")
	t.Setenv(receivePackFileEnv, remoteCPU)
	t.Setenv(gitExecPathEnv, gitT(t, a.dir, "--exec-path"))
	t.Setenv("GIT_EXEC_PATH", wrappers)

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

// Running the git programs git starts through the test binary (see
// TestSyncFigures100k).
const (
	gitExecPathEnv     = "GITSYNC_GIT_EXEC_PATH" // git's own exec path
	receivePackFileEnv = "GITSYNC_RECEIVE_PACK_CPU"
)

// isGitWrapper reports whether this process was started as one of the
// git programs of TestSyncFigures100k's exec path.
func isGitWrapper() bool {
	name := filepath.Base(os.Args[0])
	return os.Getenv(gitExecPathEnv) != "" && (name == "git" || name == "git-receive-pack")
}

// gitWrapper runs the git program it was started as, with this process's
// arguments and standard streams and git's own exec path, and appends to
// the file named by receivePackFileEnv the CPU time of the program (with
// what it waited for) if it is receive-pack, and its own.
func gitWrapper() int {
	exe := os.Getenv(gitExecPathEnv)
	args := os.Args[1:]
	receive := filepath.Base(os.Args[0]) == "git-receive-pack"
	if receive {
		args = append([]string{"receive-pack"}, args...)
	}
	for i := 0; i < len(args) && !receive; i++ {
		if args[i] == "-c" {
			i++
			continue
		}
		receive = args[i] == "receive-pack"
		break
	}
	cmd := exec.Command(filepath.Join(exe, "git"), args...)
	cmd.Env = append(os.Environ(), "GIT_EXEC_PATH="+exe)
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
	var program time.Duration
	if ru, _ := cmd.ProcessState.SysUsage().(*syscall.Rusage); ru != nil && receive {
		program = cpu(*ru)
	}
	var own syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &own)
	if f, err := os.OpenFile(os.Getenv(receivePackFileEnv), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
		fmt.Fprintf(f, "%d %d\n", program, cpu(own))
		f.Close()
	}
	return code
}

// receivePackCPU sums what the wrappers recorded: receive-pack's CPU and
// their own.
func receivePackCPU(t *testing.T, path string) (remote, wrapper time.Duration) {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("no git program ran through the wrapper: %v", err)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var r, w int64
		if _, err := fmt.Sscan(l, &r, &w); err != nil {
			t.Fatalf("receive-pack CPU line %q: %v", l, err)
		}
		remote += time.Duration(r)
		wrapper += time.Duration(w)
	}
	if remote == 0 {
		t.Fatal("no receive-pack ran through the wrapper")
	}
	return remote, wrapper
}
