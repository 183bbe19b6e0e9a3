package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/thrumhq/thrum/internal/thrumtest"
)

// Attack 6: after a crash the pid file may name an unrelated process that
// reused the ID. `thrum daemon stop` signals only the process holding the
// data directory's lock: it leaves the stranger alone, removes the stale
// pid file and says so.
func TestDaemonStopIgnoresStalePID(t *testing.T) {
	t.Parallel()
	thrumBin := thrumtest.Binary(t)
	c := &thrumCLI{t: t, repo: thrumtest.GitRepo(t), bin: thrumBin}
	c.ok("", "init")

	stranger := exec.Command("sleep", "60")
	if err := stranger.Start(); err != nil {
		t.Fatal(err)
	}
	// Reaped as soon as it ends: a signalled child that nobody waits for
	// is a zombie, which signal 0 still finds.
	exited := make(chan struct{})
	go func() { stranger.Wait(); close(exited) }()
	t.Cleanup(func() { stranger.Process.Kill(); <-exited })
	pidFile := filepath.Join(c.repo, ".thrum", "var", "thrum.pid")
	if err := os.MkdirAll(filepath.Dir(pidFile), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(stranger.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}

	r := c.ok("", "daemon", "stop")
	contains(t, "daemon stop", r.stdout, "removed the stale pid file", strconv.Itoa(stranger.Process.Pid))
	select {
	case <-exited:
		t.Fatalf("the unrelated process was signalled: it ended (%v)", stranger.ProcessState)
	case <-time.After(200 * time.Millisecond):
	}
	if _, err := os.Stat(pidFile); !os.IsNotExist(err) {
		t.Fatalf("stale pid file left: %v", err)
	}

	// A real daemon is still stopped, by the lock holder's pid.
	st := startDaemon(t, c)
	pid := int(num(st, "pid"))
	r = c.ok("", "daemon", "status")
	contains(t, "daemon status", r.stdout, "Daemon running (pid "+strconv.Itoa(pid)+")")
	r = c.ok("", "daemon", "stop")
	contains(t, "daemon stop", r.stdout, "Daemon stopped (pid "+strconv.Itoa(pid)+")")
}

// A daemon that does not answer (here: stopped with SIGSTOP) is still the
// daemon: status says it runs, and start does not launch a second one.
func TestDaemonBusyIsNotGone(t *testing.T) {
	t.Parallel()
	thrumBin := thrumtest.Binary(t)
	c := &thrumCLI{t: t, repo: thrumtest.GitRepo(t), bin: thrumBin}
	c.ok("", "init")
	st := startDaemon(t, c)
	pid := int(num(st, "pid"))
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(pid, syscall.SIGCONT)
	waitProcState(t, pid, 'T') // a signal is delivered asynchronously
	r := c.ok("", "daemon", "status")
	contains(t, "status of a stopped daemon", r.stdout, "Daemon running (pid "+strconv.Itoa(pid)+") but not answering")
	r = c.run("daemon", "start")
	if r.code == 0 || !strings.Contains(r.stderr, "already running (pid "+strconv.Itoa(pid)+")") {
		t.Fatalf("start beside a busy daemon:\n%s", r)
	}
	syscall.Kill(pid, syscall.SIGCONT)
	r = c.ok("", "daemon", "status")
	contains(t, "status after SIGCONT", r.stdout, "Daemon running (pid "+strconv.Itoa(pid)+")\n")
}

// waitProcState waits until /proc says process pid is in state (R, S, T…).
func waitProcState(t *testing.T, pid int, state byte) {
	t.Helper()
	path := "/proc/" + strconv.Itoa(pid) + "/stat"
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("process %d: %v", pid, err)
		}
		// The state follows the command name, which is in parentheses.
		if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) && b[i+2] == state {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d never reached state %c: %s", pid, state, b)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A process that exited and was not reaped is stopped, though signal 0
// still finds it; a running one is not. Both names hold a space and a
// parenthesis, as /proc/PID/stat shows them.
func TestZombieIsStopped(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	odd, oddTrue := filepath.Join(dir, "a b) Z"), filepath.Join(dir, "x) Z")
	for name, target := range map[string]string{odd: "sleep", oddTrue: "true"} {
		path, err := exec.LookPath(target)
		if err != nil {
			t.Skip(err)
		}
		if err := os.Symlink(path, name); err != nil {
			t.Fatal(err)
		}
	}
	running := exec.Command(odd, "60")
	if err := running.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { running.Process.Kill(); running.Wait() })
	done := exec.Command(oddTrue)
	if err := done.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { done.Wait() })
	for deadline := time.Now().Add(10 * time.Second); !zombie(done.Process.Pid); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("an exited child not waited for is never a zombie")
		}
	}
	if !alive(done.Process.Pid) {
		t.Error("signal 0 no longer finds a zombie: the stop loop's zombie check is moot")
	}
	if zombie(running.Process.Pid) {
		t.Errorf("a running process named %q counts as exited", filepath.Base(odd))
	}
}
