package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/thrumhq/thrum/internal/thrumtest"
)

// TestEndToEndBinary runs the core flow through the real binary, as a
// user would: init, daemon start, two agents exchanging messages, inbox,
// reply, daemon stop — checking stdout, stderr and exit codes.
func TestEndToEndBinary(t *testing.T) {
	t.Parallel()
	thrumBin := thrumtest.Binary(t)
	repo := thrumtest.GitRepo(t)
	c := &thrumCLI{t: t, repo: repo, bin: thrumBin}

	r := c.ok("", "init")
	contains(t, "init", r.stdout, "Initialized thrum in "+repo+"\n")
	contains(t, "init", r.stderr, "Next: thrum daemon start")
	if r := c.ok("", "--quiet", "init"); r.stderr != "" {
		t.Errorf("init --quiet wrote on stderr: %q", r.stderr)
	}

	st := startDaemon(t, c)
	pid := int(num(st, "pid"))
	// The daemon is the binary itself, re-executed with `daemon run`.
	if exe, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe"); err == nil && exe != thrumBin {
		t.Errorf("daemon runs %s, want %s", exe, thrumBin)
	}
	r = c.ok("", "daemon", "status")
	contains(t, "daemon status", r.stdout, "Daemon running (pid "+strconv.Itoa(pid)+")\n")

	r = c.ok("", "quickstart", "--name", "alice", "--role", "implementer", "--module", "auth")
	contains(t, "quickstart", r.stdout, "> Agent alice registered (role implementer, module auth)\n")
	if strings.Contains(r.stderr, "THRUM_NAME") {
		t.Errorf("the first agent got the several-agents tip: %q", r.stderr)
	}
	r = c.ok("", "quickstart", "--name", "bob", "--role", "reviewer", "--module", "auth")
	contains(t, "quickstart", r.stderr, "THRUM_NAME=bob")

	// Without THRUM_NAME, two identities: exit 4.
	r = c.fails(exitNoIdentity, "", []string{"send", "hi", "--to", "@reviewer"}, "THRUM_NAME")
	if r.stdout != "" {
		t.Errorf("error wrote on stdout: %q", r.stdout)
	}
	c.fails(exitUsage, "alice", []string{"send", "hi", "--scope", "auth"}, "use type:value")

	r = c.ok("alice", "send", "Auth module complete, all tests passing", "--to", "@reviewer", "--scope", "module:auth", "--ref", "issue:beads-42")
	contains(t, "send", r.stdout, "> Message sent: msg_", "  To @reviewer (role): bob (active)\n")
	if r.stderr != "" {
		t.Errorf("send wrote on stderr: %q", r.stderr)
	}
	m1 := idAfter(t, r.stdout, "> Message sent: ")

	r = c.ok("bob", "inbox", "--unread")
	contains(t, "bob inbox --unread", r.stdout, "│ ● "+m1+"  @alice  just now", "│   Auth module complete, all tests passing", "Showing 1-1 of 1 message (1 unread)\n")
	r = c.ok("bob", "inbox", "--mark-read")
	contains(t, "bob inbox --mark-read", r.stdout, "│ ● "+m1, "(0 unread)", "> Marked 1 message as read\n")
	r = c.ok("bob", "inbox")
	contains(t, "bob inbox again", r.stdout, "│ ○ "+m1, "(0 unread)")

	r = c.ok("bob", "reply", m1, "Looks good, merging now")
	contains(t, "reply", r.stdout, "> Reply sent: msg_", "\n  In reply to: "+m1+"\n")
	reply := idAfter(t, r.stdout, "> Reply sent: ")

	r = c.ok("alice", "inbox", "--mentions", "--unread")
	contains(t, "alice inbox --mentions --unread", r.stdout, "↳ ● "+reply+"  @bob", "Looks good, merging now")
	r = c.ok("alice", "inbox", "--all")
	checkGrouped(t, r.stdout, m1, reply)
	contains(t, "alice inbox", r.stdout, "│   ↳ ● "+reply, "Showing 1-2 of 2 messages (1 unread)\n")

	// The default --repo is the working directory, found from a subdirectory.
	sub := filepath.Join(repo, "sub", "dir")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(thrumBin, "--json", "inbox", "--all")
	cmd.Dir = sub
	cmd.Env = append(cleanEnv(), "THRUM_NAME=alice")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("inbox from %s: %v\n%s", sub, err, errb.String())
	}
	var inbox map[string]any
	if err := json.Unmarshal(out.Bytes(), &inbox); err != nil || num(inbox, "total") != 2 || num(inbox, "unread") != 1 { // looking marked nothing
		t.Errorf("inbox --json from a subdirectory = %s (%v)", out.String(), err)
	}

	r = c.ok("", "daemon", "stop")
	contains(t, "daemon stop", r.stdout, "Daemon stopped (pid "+strconv.Itoa(pid)+")\n")
	if alive(pid) && !zombie(pid) {
		t.Errorf("daemon pid %d alive after daemon stop", pid)
	}
	r = c.fails(exitNoDaemon, "alice", []string{"inbox"}, "start it with `thrum daemon start`")
	if r.stdout != "" {
		t.Errorf("error wrote on stdout: %q", r.stdout)
	}
	c.fails(exitUsage, "alice", []string{"inbx"}, "unexpected argument inbx")
	if r := c.ok("", "version"); !strings.HasPrefix(r.stdout, "thrum ") {
		t.Errorf("version: %s", r)
	}
}
