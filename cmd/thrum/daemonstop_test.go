package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// Attack 6: after a crash the pid file may name an unrelated process that
// reused the ID. `thrum daemon stop` signals only the process holding the
// data directory's lock: it leaves the stranger alone, removes the stale
// pid file and says so.
func TestDaemonStopIgnoresStalePID(t *testing.T) {
	t.Parallel()
	if thrumBinErr != nil {
		t.Fatalf("building the binary: %v", thrumBinErr)
	}
	c := &thrumCLI{t: t, repo: gitRepo(t), bin: thrumBin}
	c.ok("", "init")

	stranger := exec.Command("sleep", "60")
	if err := stranger.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stranger.Process.Kill(); stranger.Wait() })
	pidFile := filepath.Join(c.repo, ".thrum", "var", "thrum.pid")
	if err := os.MkdirAll(filepath.Dir(pidFile), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(stranger.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}

	r := c.ok("", "daemon", "stop")
	contains(t, "daemon stop", r.stdout, "removed the stale pid file", strconv.Itoa(stranger.Process.Pid))
	time.Sleep(50 * time.Millisecond)
	if err := stranger.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the unrelated process was signalled: %v", err)
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
