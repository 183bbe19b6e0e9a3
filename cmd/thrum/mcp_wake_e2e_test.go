package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/thrumhq/thrum/internal/thrumtest"
	"github.com/thrumhq/thrum/mcpserver"
	"github.com/thrumhq/thrum/rpc"
)

// serveWith starts `thrum args...` (an MCP server) as name with env added,
// and connects a go-sdk client, as a host does.
func (e *mcpE2E) serveWith(name string, env []string, args ...string) *mcp.ClientSession {
	e.t.Helper()
	cmd := exec.Command(e.bin, args...)
	cmd.Dir, cmd.Env = e.repo, append(e.env(name), env...)
	stderr := &bytes.Buffer{}
	cmd.Stderr = &mcpE2EWriter{mu: &e.mu, w: stderr}
	e.mu.Lock()
	e.stderrs[name] = stderr
	e.mu.Unlock()
	client := mcp.NewClient(&mcp.Implementation{Name: "thrum-e2e", Version: "1"}, nil)
	cs, err := client.Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		e.t.Fatalf("connect to thrum %s as %q: %v\nstderr:\n%s", strings.Join(args, " "), name, err, e.stderr(name))
	}
	e.t.Cleanup(func() { cs.Close() })
	return cs
}

// toolFails calls a tool that must fail and returns its structured error.
func toolFails(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) mcpserver.ToolError {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if !res.IsError {
		t.Fatalf("%s succeeded, want a tool error: %s", name, mcpE2EText(res))
	}
	raw, _ := json.Marshal(res.StructuredContent)
	var te mcpserver.ToolError
	if err := json.Unmarshal(raw, &te); err != nil {
		t.Fatalf("%s: structured error %s: %v", name, raw, err)
	}
	return te
}

// eventually calls a tool until it succeeds, for up to 30 s.
func eventually(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		cancel()
		if err == nil && !res.IsError {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still fails after 30 s: %v %s", name, err, mcpE2EText(res))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// An agent's MCP server started with no daemon running stays up and
// starts the daemon where thrum init has run: its tools then work.
func TestMCPServeStartsItsDaemon(t *testing.T) {
	t.Parallel()
	e := newMCPPair(t)
	e.stopDaemon()
	cs := e.serveWith("bob", nil, "mcp", "serve")
	eventually(t, cs, "list_agents", map[string]any{})
	if r := e.run("", "daemon", "status"); r.code != 0 {
		t.Errorf("after the server's start, daemon status: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// With --no-autostart the server starts nothing: its tools say the daemon
// is unreachable and why, and work once a daemon is started by hand.
func TestMCPServeWaitsForItsDaemon(t *testing.T) {
	t.Parallel()
	e := newMCPPair(t)
	e.stopDaemon()
	cs := e.serveWith("bob", nil, "mcp", "serve", "--no-autostart")
	te := toolFails(t, cs, "check_messages", map[string]any{})
	if te.Code != "unavailable" || !strings.Contains(te.Message, "not reachable") || !strings.Contains(te.Message, "thrum.sock") {
		t.Errorf("check_messages with no daemon = %+v, want unavailable, naming the socket it cannot reach", te)
	}
	if r := e.run("", "daemon", "status"); r.code == 0 {
		t.Fatalf("--no-autostart started a daemon:\n%s", r.stdout)
	}
	e.thrum("", "daemon", "start")
	eventually(t, cs, "check_messages", map[string]any{})
}

// With two identities and no THRUM_NAME, or a THRUM_NAME that has none,
// the server stays up, lists its tools, and each call says how to name
// the agent and which identities there are.
func TestMCPServeWithoutAnAgent(t *testing.T) {
	t.Parallel()
	e := newMCPPair(t)
	for _, name := range []string{"", "carol"} {
		cs := e.serveWith(name, nil, "mcp", "serve")
		res, err := cs.ListTools(context.Background(), nil)
		if err != nil || len(res.Tools) != len(mcpserver.ToolNames) {
			t.Fatalf("THRUM_NAME=%q: tools/list: %v (%d tools)", name, err, len(res.Tools))
		}
		for tool, args := range map[string]map[string]any{"check_messages": {}, "send_message": {"to": "@alice", "content": "hi"}} {
			te := toolFails(t, cs, tool, args)
			text := te.Error()
			if te.Code != "no_identity" || !strings.Contains(text, "THRUM_NAME") || !strings.Contains(text, "--agent-id") ||
				!strings.Contains(text, "alice") || !strings.Contains(text, "bob") {
				t.Errorf("THRUM_NAME=%q: %s = %+v, want no_identity naming THRUM_NAME, --agent-id, alice and bob", name, tool, te)
			}
		}
		cs.Close()
	}
}

// An autostarted daemon syncs only where a person was told the log goes:
// init said so for this remote; once the remote changed, it does not.
func TestAutostartedDaemonSyncsOnlyWhereTold(t *testing.T) {
	t.Parallel()
	bin := thrumtest.Binary(t) // first: it skips under -short
	remote := thrumtest.GitRemote(t)
	e := &mcpE2E{t: t, bin: bin, repo: remote.Clone("a"), stderrs: map[string]*bytes.Buffer{}}
	if out := e.thrum("", "init"); !strings.Contains(out, "Sync: the daemon pushes") || !strings.Contains(out, remote.Path) {
		t.Fatalf("init did not say where the log goes:\n%s", out)
	}
	e.startDaemon()
	e.thrum("bob", "quickstart", "--name", "bob", "--role", "reviewer", "--module", "auth")
	logFile := filepath.Join(e.repo, ".thrum", "var", "daemon.log")
	for i, moved := range []bool{false, true} {
		e.stopDaemon()
		if moved {
			other := thrumtest.GitRemote(t)
			thrumtest.Git(t, e.repo, "remote", "set-url", "origin", other.Path)
		}
		before, _ := os.ReadFile(logFile)
		cs := e.serveWith("bob", nil, "mcp", "serve")
		eventually(t, cs, "list_agents", map[string]any{})
		after, _ := os.ReadFile(logFile)
		run := string(after[len(before):])
		if off := strings.Contains(run, "sync is off"); off != moved {
			t.Errorf("start %d (remote changed since init: %v): sync off = %v, want %v; its log:\n%s", i, moved, off, moved, run)
		}
		cs.Close()
	}
}

// claudeSocket is a stand-in for a Claude Code session's messaging
// socket: it records each connection's lines.
type claudeSocket struct {
	path  string
	ln    net.Listener
	rings chan []map[string]any
}

func newClaudeSocket(t *testing.T) *claudeSocket {
	t.Helper()
	c := &claudeSocket{path: filepath.Join(thrumtest.SocketDir(t), "claude.sock"), rings: make(chan []map[string]any, 16)}
	ln, err := net.Listen("unix", c.path)
	if err != nil {
		t.Fatal(err)
	}
	c.ln = ln
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			var lines []map[string]any
			sc := bufio.NewScanner(conn)
			for sc.Scan() {
				var m map[string]any
				json.Unmarshal(sc.Bytes(), &m)
				lines = append(lines, m)
			}
			conn.Close()
			c.rings <- lines
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return c
}

// next returns the next ring's lines, nil if none came within d.
func (c *claudeSocket) next(d time.Duration) []map[string]any {
	select {
	case r := <-c.rings:
		return r
	case <-time.After(d):
		return nil
	}
}

var wakeLine = regexp.MustCompile(`^thrum: (\d+) new messages? \(newest (msg_\S+) from (\S+)\); call check_messages$`)

// With --wake claude, the server rings its session's messaging socket
// once per batch of new mail, with a line of its own values — never a
// body — and claims nothing: the receipts stay queued until bob's
// check_messages takes the mail. A ring that fails ends the waking, and
// the server stays up.
func TestMCPServeWakesClaudeCode(t *testing.T) {
	t.Parallel()
	e := newMCPPair(t)
	sock := newClaudeSocket(t)
	cs := e.serveWith("bob", []string{"CLAUDE_CODE_MESSAGING_SOCKET=" + sock.path, "CLAUDE_CODE_MESSAGING_TOKEN=tok-1"}, "mcp", "serve", "--wake=claude")
	var ids []string
	for i := range 3 {
		ids = append(ids, strings.TrimSpace(e.thrum("alice", "send", "--quiet", "--to", "@bob", fmt.Sprintf("secret %d", i))))
	}
	ring := sock.next(15 * time.Second)
	if len(ring) != 2 || ring[0]["type"] != "auth" || ring[0]["token"] != "tok-1" || ring[1]["type"] != "user" {
		t.Fatalf("the ring's lines = %v, want auth with the session's token, then a user line; stderr:\n%s", ring, e.stderr("bob"))
	}
	text, _ := ring[1]["message"].(map[string]any)["content"].(string)
	m := wakeLine.FindStringSubmatch(text)
	if m == nil || m[1] != "3" || m[2] != ids[2] || m[3] != "alice" {
		t.Fatalf("the ring's text = %q, want 3 new messages, newest %s from alice", text, ids[2])
	}
	if extra := sock.next(2 * time.Second); extra != nil {
		t.Errorf("a second ring for the same batch: %v", extra)
	}
	for _, id := range ids {
		if r := e.receipt(id, "bob"); r.State != rpc.ReceiptQueued {
			t.Errorf("after the ring, bob's receipt of %s = %+v, want queued: a ring claims nothing", id, r)
		}
	}
	out := mcpE2ECall[mcpserver.CheckMessagesOutput](t, cs, "check_messages", map[string]any{})
	if len(out.Messages) != 3 {
		t.Fatalf("check_messages after the ring = %d messages, want 3", len(out.Messages))
	}
	for _, id := range ids {
		if r := e.receipt(id, "bob"); r.State != rpc.ReceiptDelivered || r.Via != rpc.ViaCheckMessages {
			t.Errorf("after check_messages, bob's receipt of %s = %+v, want delivered by check_messages", id, r)
		}
	}

	next := strings.TrimSpace(e.thrum("alice", "send", "--quiet", "--to", "@bob", "later"))
	ring = sock.next(15 * time.Second)
	if len(ring) != 2 {
		t.Fatalf("no ring for new mail after the first was read: %v", ring)
	}
	text, _ = ring[1]["message"].(map[string]any)["content"].(string)
	if m := wakeLine.FindStringSubmatch(text); m == nil || m[1] != "1" || m[2] != next {
		t.Errorf("the second ring's text = %q, want 1 new message, newest %s", text, next)
	}

	sock.ln.Close() // the session is gone
	e.thrum("alice", "send", "--quiet", "--to", "@bob", "after the session")
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(e.stderr("bob"), "waking the session stopped") {
		if time.Now().After(deadline) {
			t.Fatalf("a failed ring was not noted; stderr:\n%s", e.stderr("bob"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if out := mcpE2ECall[mcpserver.CheckMessagesOutput](t, cs, "check_messages", map[string]any{}); len(out.Messages) != 2 {
		t.Errorf("after a failed ring, check_messages = %d messages, want the 2 unread", len(out.Messages))
	}
}

// receipt returns agent's receipt of message id.
func (e *mcpE2E) receipt(id, agent string) rpc.Receipt {
	e.t.Helper()
	var g rpc.GetMessageResult
	if err := json.Unmarshal([]byte(e.thrum("alice", "message", "get", id, "--json")), &g); err != nil {
		e.t.Fatal(err)
	}
	for _, r := range g.Message.Receipts {
		if r.AgentID == agent {
			return r
		}
	}
	e.t.Fatalf("%s has no receipt for %s", id, agent)
	return rpc.Receipt{}
}

// fakeCodex puts a codex on PATH that records its arguments, one run a
// line, in the returned file, and exits with code.
func fakeCodex(t *testing.T, code int) (pathEnv, record string) {
	t.Helper()
	dir := t.TempDir()
	record = filepath.Join(dir, "runs")
	script := fmt.Sprintf("#!/bin/sh\nfor a in \"$@\"; do printf '%%s\\t' \"$a\"; done >> %q\necho >> %q\n", record, record)
	if code != 0 {
		script += fmt.Sprintf("echo 'No active session found' >&2\nexit %d\n", code)
	}
	if err := os.WriteFile(filepath.Join(dir, "codex"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return "PATH=" + dir + ":" + os.Getenv("PATH"), record
}

// codexRuns returns the fake codex's runs, each its arguments.
func codexRuns(record string) [][]string {
	b, _ := os.ReadFile(record)
	var runs [][]string
	for line := range strings.Lines(string(b)) {
		runs = append(runs, strings.Split(strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\t"), "\t"))
	}
	return runs
}

// With --wake codex, the server rings the thread thrum's SessionStart
// hook registered after it started, with `codex queue --thread=ID
// --message=LINE` (the line one argument, no shell); a thread
// registered before it started is another session's and is not rung; a
// ring that fails forgets the thread.
func TestMCPServeWakesCodex(t *testing.T) {
	t.Parallel()
	e := newMCPPair(t)
	path, record := fakeCodex(t, 0)
	startHook := func(thread string) {
		t.Helper()
		cmd := exec.Command(e.bin, "hook", "codex", "session-start")
		cmd.Dir, cmd.Env = t.TempDir(), append(e.env("bob"), path)
		cmd.Stdin = strings.NewReader(fmt.Sprintf(`{"session_id":%q,"cwd":%q,"hook_event_name":"SessionStart","source":"startup"}`, thread, e.repo))
		if out, err := cmd.Output(); err != nil || !json.Valid(out) {
			t.Fatalf("session-start hook: %v %s", err, out)
		}
	}
	startHook("--resume") // not a session ID: never an argument of codex
	if _, err := os.Stat(filepath.Join(e.repo, ".thrum", "var", "wake", "bob.codex.json")); err == nil {
		t.Fatal("a session_id that is no Codex session ID was registered")
	}
	startHook("thread-old") // an earlier session's
	time.Sleep(10 * time.Millisecond)
	cs := e.serveWith("bob", []string{path}, "mcp", "serve", "--wake=codex")
	eventually(t, cs, "list_agents", map[string]any{})
	e.thrum("alice", "send", "--quiet", "--to", "@bob", "before this session's first turn")
	time.Sleep(3 * time.Second)
	if runs := codexRuns(record); len(runs) != 0 {
		t.Fatalf("rang a thread registered before the server started: %q", runs)
	}
	mcpE2ECall[mcpserver.CheckMessagesOutput](t, cs, "check_messages", map[string]any{})

	startHook("thread-1")
	id := strings.TrimSpace(e.thrum("alice", "send", "--quiet", "--to", "@bob", "--", "-starts with a dash"))
	deadline := time.Now().Add(15 * time.Second)
	for len(codexRuns(record)) == 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	runs := codexRuns(record)
	want := []string{"queue", "--thread=thread-1", fmt.Sprintf("--message=thrum: 1 new message (newest %s from alice); call check_messages", id)}
	if len(runs) != 1 || !slices.Equal(runs[0], want) {
		t.Fatalf("codex runs = %q, want one: %q; stderr:\n%s", runs, want, e.stderr("bob"))
	}
	if r := e.receipt(id, "bob"); r.State != rpc.ReceiptQueued {
		t.Errorf("after the ring, bob's receipt = %+v, want queued", r)
	}

	failing, _ := fakeCodex(t, 1)
	cs.Close()
	cs = e.serveWith("bob", []string{failing}, "mcp", "serve", "--wake=codex")
	eventually(t, cs, "list_agents", map[string]any{})
	startHook("thread-2")
	reg := filepath.Join(e.repo, ".thrum", "var", "wake", "bob.codex.json")
	if _, err := os.Stat(reg); err != nil {
		t.Fatalf("the hook registered no thread: %v", err)
	}
	e.thrum("alice", "send", "--quiet", "--to", "@bob", "to a closed session")
	deadline = time.Now().Add(15 * time.Second)
	for {
		if _, err := os.Stat(reg); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a failed ring kept the registration; stderr:\n%s", e.stderr("bob"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(e.stderr("bob"), "No active session found") {
		t.Errorf("the failed ring's output is not in the log:\n%s", e.stderr("bob"))
	}
}

// A hook that fails still answers {} and exit 0, and records why in the
// repository's hook log, which daemon status and doctor summarise.
func TestHookFailuresAreRecorded(t *testing.T) {
	t.Parallel()
	e := newMCPPair(t)
	e.stopDaemon()
	cmd := exec.Command(e.bin, "hook", "claude", "user-prompt-submit")
	cmd.Dir, cmd.Env = t.TempDir(), e.env("bob")
	cmd.Stdin = strings.NewReader(fmt.Sprintf(`{"cwd":%q,"prompt":"hi"}`, e.repo))
	if out, err := cmd.Output(); err != nil || strings.TrimSpace(string(out)) != "{}" {
		t.Fatalf("a failing hook: %v %q, want {} and exit 0", err, out)
	}
	r := e.run("", "daemon", "status")
	contains(t, "daemon status", r.stdout, "hooks: 1 failure recorded", "claude user-prompt-submit", "hook-failures.log")
	d := e.run("", "doctor")
	contains(t, "doctor", d.stdout, "hooks: 1 failure recorded", "claude user-prompt-submit")
}

// The hook log stays bounded: past its size the older half goes.
func TestHookFailureLogIsBounded(t *testing.T) {
	l := &layout{PIDFile: filepath.Join(t.TempDir(), "var", "thrum.pid")}
	for i := range 3000 {
		if err := recordHookFailure(l, "codex stop", fmt.Errorf("failure %d: %s", i, strings.Repeat("x", 100))); err != nil {
			t.Fatal(err)
		}
	}
	st, err := os.Stat(hookFailuresPath(l))
	if err != nil || st.Size() > hookFailuresMax+256 {
		t.Fatalf("the log after 3000 failures: %v, %d bytes, want at most about %d", err, st.Size(), hookFailuresMax)
	}
	n, last := hookFailures(l)
	if n < 100 || last == nil || !strings.HasPrefix(last.Error, "failure 2999:") {
		t.Errorf("the log keeps %d, the last %+v; want the newest kept", n, last)
	}
}

// setup writes --wake for Claude Code and Codex, and opencode's plugin,
// not with --no-wake, which other hosts refuse.
func TestSetupWake(t *testing.T) {
	c := newSetupCLI(t)
	c.setup("claude")
	c.setup("codex")
	got := files(t, c.repo)
	contains(t, ".mcp.json", got[".mcp.json"], `"--wake=claude"`)
	contains(t, ".codex/config.toml", got[".codex/config.toml"], `"--wake=codex"`)
	c.setup("claude", "--no-wake")
	c.setup("codex", "--no-wake")
	got = files(t, c.repo)
	lacks(t, ".mcp.json", got[".mcp.json"], "--wake")
	lacks(t, ".codex/config.toml", got[".codex/config.toml"], "--wake")
	if r := c.setup("opencode"); !strings.Contains(files(t, c.repo)[".opencode/plugins/thrum.js"], `"wait","--follow","--wake"`) {
		t.Errorf("setup opencode wrote no plugin running thrum wait --follow --wake:\n%s", r)
	}
	if r := c.setup("opencode", "--no-wake"); !strings.Contains(r.stdout, "delete ") || !strings.Contains(r.stdout, "thrum.js") {
		t.Errorf("setup opencode --no-wake over an earlier plugin does not say to delete it:\n%s", r)
	}
	if r := c.setup("cursor", "--no-wake"); r.code != exitUsage {
		t.Errorf("setup cursor --no-wake: exit %d, want %d\n%s", r.code, exitUsage, r)
	}
}

// Whatever a host's SessionStart input holds, the thread it registers is
// a Codex session ID, never a flag of codex queue, and reads back as
// written; the hook failure log reads back whatever it holds.
func FuzzCodexThreadRegistration(f *testing.F) {
	f.Add([]byte(`{"session_id":"019a2c4e-7d1b-7c3e-9a55-0e3f1b2c4d5e","cwd":"/x"}`))
	f.Add([]byte(`{"session_id":"--resume"}`))
	f.Add([]byte(`{"session_id":"a\u0000b"}`))
	f.Add([]byte(`{"session_id":1}`))
	l := &layout{PIDFile: filepath.Join(f.TempDir(), "var", "thrum.pid")}
	f.Fuzz(func(t *testing.T, input []byte) {
		in, err := readHookInput(context.Background(), bytes.NewReader(input))
		if err != nil {
			return
		}
		os.Remove(codexThreadPath(l, "bob"))
		if err := registerCodexThread(l, "bob", in.SessionID); err != nil {
			if _, serr := os.Stat(codexThreadPath(l, "bob")); serr == nil {
				t.Fatalf("a refused session_id %q was registered", in.SessionID)
			}
			return
		}
		b, err := os.ReadFile(codexThreadPath(l, "bob"))
		var reg codexThread
		if err != nil || json.Unmarshal(b, &reg) != nil || reg.Thread != in.SessionID || strings.HasPrefix(reg.Thread, "-") ||
			!codexThreadID.MatchString(reg.Thread) {
			t.Fatalf("session_id %q registered as %s (%v)", in.SessionID, b, err)
		}
		os.WriteFile(hookFailuresPath(l), input, 0o600)
		hookFailures(l)
		hookFailuresLine(l)
	})
}
