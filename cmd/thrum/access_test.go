package main

import (
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/thrumhq/thrum/internal/thrumtest"
)

// Attacks on the edges of the owner's standing (DESIGN.md, "Trust
// boundary"): a daemon that stops answering, a committed redirect or
// identity file, files made under a permissive umask.

// A daemon that stops answering (SIGSTOP: the socket still accepts, the
// kernel queues the request, nothing reads it) fails a command after the
// call timeout, saying which daemon and what to do, instead of hanging it.
func TestStoppedDaemonFailsCommands(t *testing.T) {
	t.Parallel()
	c := &thrumCLI{t: t, repo: thrumtest.GitRepo(t), bin: thrumtest.Binary(t)}
	c.ok("", "init")
	st := startDaemon(t, c)
	c.ok("", "quickstart", "--name", "alice", "--role", "implementer", "--module", "auth")
	pid := int(num(st, "pid"))
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGCONT) }) // before startDaemon's cleanup stops it

	start := time.Now()
	r := c.withEnv(map[string]string{"THRUM_NAME": "alice", "THRUM_CALL_TIMEOUT": "2s"}, "inbox")
	took := time.Since(start)
	if r.code != exitNoDaemon {
		t.Fatalf("inbox against a stopped daemon: want exit %d after the call timeout, got (after %v):\n%s", exitNoDaemon, took.Round(time.Millisecond), r)
	}
	contains(t, "stderr", r.stderr, "pid "+strconv.Itoa(pid), "did not answer", "2s", "daemon.log")
	t.Logf("inbox against a stopped daemon gave up after %v", took.Round(time.Millisecond))
}
