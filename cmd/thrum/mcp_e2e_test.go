package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/thrumhq/thrum/inbox"
	"github.com/thrumhq/thrum/internal/frame/frametest"
	"github.com/thrumhq/thrum/internal/thrumtest"
	"github.com/thrumhq/thrum/mcpserver"
	"github.com/thrumhq/thrum/rpc"
)

// TestMCPServeEndToEnd runs the real binary the way Claude Code does: in a
// git repository with a daemon started by `thrum daemon start` and two
// agents from `thrum quickstart`, each agent's host starts `thrum mcp
// serve` over stdio (mcp.CommandTransport) and talks to it with the go-sdk
// client. Bob's wait_for_message wakes on alice's send_message, a second
// concurrent wait is refused, and priority_filter lets only what it should
// through.
func TestMCPServeEndToEnd(t *testing.T) {
	t.Parallel() // its own repository, daemon and servers
	e := newMCPPair(t)

	alice := e.serve("alice")
	bob := e.serve("bob")

	for who, cs := range map[string]*mcp.ClientSession{"alice": alice, "bob": bob} {
		res, err := cs.ListTools(context.Background(), nil)
		if err != nil {
			t.Fatalf("%s: tools/list: %v", who, err)
		}
		var names []string
		for _, tool := range res.Tools {
			names = append(names, tool.Name)
		}
		want := slices.Clone(mcpserver.ToolNames)
		sort.Strings(names)
		sort.Strings(want)
		if !slices.Equal(names, want) {
			t.Errorf("%s: tools = %v, want the 11 %v", who, names, want)
		}
	}

	// Bob blocks; alice's message wakes him.
	waiting := mcpE2EWait(bob, map[string]any{"timeout": 30})
	sent := mcpE2ECall[mcpserver.SendMessageOutput](t, alice, "send_message", map[string]any{"to": "@bob", "content": "hello from alice"})
	// Sent, not delivered: bob's receipt is queued, or delivered by his
	// waiting wait_for_message if its standing claim took it in the send's
	// own commit — a tool result, which goes to his model.
	if sent.Status != "sent" || sent.RecipientStatus != "active" || len(sent.Receipts) != 1 {
		t.Errorf("send_message = %+v", sent)
	} else if r := sent.Receipts[0]; r.AgentID != "bob" || (r.State != rpc.ReceiptQueued && r.Via != rpc.ViaWaitForMessage) {
		t.Errorf("bob's receipt at send = %+v, want queued (or delivered by his waiting wait)", r)
	}
	got := mcpE2EReceived(t, <-waiting)
	if m, _, err := frametest.Parse(got.Content); got.MessageID != sent.MessageID || got.From != "alice" || err != nil || m.Body != "hello from alice" {
		t.Errorf("bob's wait returned %+v, want %s from alice, framed (%v)", got, sent.MessageID, err)
	}

	// Two waits at once: one is refused at once, the other gets the next
	// message.
	w1 := mcpE2EWait(bob, map[string]any{"timeout": 30})
	w2 := mcpE2EWait(bob, map[string]any{"timeout": 30})
	var refused mcpE2EResult
	var other <-chan mcpE2EResult
	select {
	case refused = <-w1:
		other = w2
	case refused = <-w2:
		other = w1
	case <-time.After(30 * time.Second):
		t.Fatal("neither of two concurrent waits returned: the second should be refused")
	}
	if refused.err != nil || !refused.res.IsError || !strings.Contains(mcpE2EText(refused.res), "only one may wait") {
		t.Fatalf("second concurrent wait = %v %s, want the one-waiter tool error", refused.err, mcpE2EText(refused.res))
	}
	second := mcpE2ECall[mcpserver.SendMessageOutput](t, alice, "send_message", map[string]any{"to": "@reviewer", "content": "for the one waiter"})
	if got := mcpE2EReceived(t, <-other); got.MessageID != second.MessageID {
		t.Errorf("remaining wait returned %+v, want %s", got, second.MessageID)
	}

	// priority_filter critical: the normal message goes by (and stays
	// unread), the critical one is returned.
	filtered := mcpE2EWait(bob, map[string]any{"timeout": 30, "priority_filter": "critical"})
	normal := mcpE2ECall[mcpserver.SendMessageOutput](t, alice, "send_message", map[string]any{"to": "@bob", "content": "whenever", "priority": "normal"})
	critical := mcpE2ECall[mcpserver.SendMessageOutput](t, alice, "send_message", map[string]any{"to": "@bob", "content": "now!", "priority": "critical"})
	if got := mcpE2EReceived(t, <-filtered); got.MessageID != critical.MessageID || got.Priority != "critical" {
		t.Errorf("filtered wait returned %+v, want the critical %s", got, critical.MessageID)
	}
	left := mcpE2ECall[mcpserver.CheckMessagesOutput](t, bob, "check_messages", nil)
	if len(left.Messages) != 1 || left.Messages[0].MessageID != normal.MessageID {
		t.Errorf("bob's check_messages = %+v, want only the normal %s", left, normal.MessageID)
	}

	// The agents see each other, active.
	agents := mcpE2ECall[mcpserver.ListAgentsOutput](t, alice, "list_agents", map[string]any{"include_offline": false})
	var names []string
	for _, a := range agents.Agents {
		names = append(names, a.Name)
	}
	sort.Strings(names)
	if !slices.Equal(names, []string{"alice", "bob"}) {
		t.Errorf("active agents = %v", names)
	}
	// Nothing was addressed to alice.
	if got := mcpE2ECall[mcpserver.CheckMessagesOutput](t, alice, "check_messages", nil); got.Status != "empty" {
		t.Errorf("alice's inbox = %+v", got)
	}

	// The hosts hang up: each server exits cleanly when its stdin closes.
	for who, cs := range map[string]*mcp.ClientSession{"alice": alice, "bob": bob} {
		if err := cs.Close(); err != nil {
			t.Errorf("%s: mcp serve did not exit cleanly: %v\nstderr:\n%s", who, err, e.stderr(who))
		}
	}
	for _, who := range []string{"alice", "bob"} {
		for _, bad := range []string{"panic:", "WARNING: DATA RACE", "level=ERROR"} {
			if strings.Contains(e.stderr(who), bad) {
				t.Errorf("%s's mcp serve stderr has %q:\n%s", who, bad, e.stderr(who))
			}
		}
	}

}

// mcpE2E is one repository driven through the real thrum binary.
type mcpE2E struct {
	t    testing.TB
	bin  string
	repo string

	mu      sync.Mutex
	stderrs map[string]*bytes.Buffer
}

func newMCPE2E(t *testing.T) *mcpE2E {
	t.Helper()
	return &mcpE2E{t: t, bin: thrumtest.Binary(t), repo: thrumtest.GitRepo(t), stderrs: map[string]*bytes.Buffer{}}
}

// newMCPPair is newMCPE2E with the log made, the daemon running and two
// agents registered: alice (implementer) and bob (reviewer), both of
// module auth.
func newMCPPair(t *testing.T) *mcpE2E {
	t.Helper()
	e := newMCPE2E(t)
	e.thrum("", "init")
	e.startDaemon()
	e.thrum("alice", "quickstart", "--name", "alice", "--role", "implementer", "--module", "auth")
	e.thrum("bob", "quickstart", "--name", "bob", "--role", "reviewer", "--module", "auth")
	return e
}

// env is the environment of every process: no THRUM_* variables but
// THRUM_NAME=name (when given), and no global or system git config.
func (e *mcpE2E) env(name string) []string {
	env := thrumtest.GitEnv()
	if name != "" {
		env = append(env, "THRUM_NAME="+name)
	}
	return env
}

type mcpE2ERun struct {
	code           int
	stdout, stderr string
}

// run runs the binary in the repository as name (THRUM_NAME).
func (e *mcpE2E) run(name string, args ...string) mcpE2ERun {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, e.bin, args...)
	cmd.Dir, cmd.Env = e.repo, e.env(name)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := mcpE2ERun{stdout: out.String(), stderr: errb.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		e.t.Fatalf("thrum %v: %v", args, err)
	}
	return r
}

// thrum runs the binary and fails the test unless it exits 0.
func (e *mcpE2E) thrum(name string, args ...string) string {
	e.t.Helper()
	r := e.run(name, args...)
	if r.code != 0 {
		e.t.Fatalf("thrum %s (as %q): exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), name, r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

func (e *mcpE2E) pidFile() string { return filepath.Join(e.repo, ".thrum", "var", "thrum.pid") }

// startDaemon runs `thrum daemon start` and makes sure the daemon is gone
// at the end of the test, whatever happens.
func (e *mcpE2E) startDaemon() {
	e.t.Helper()
	e.t.Cleanup(func() {
		pid := 0
		if b, err := os.ReadFile(e.pidFile()); err == nil {
			pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		}
		e.stopDaemon()
		if pid > 0 && syscall.Kill(pid, 0) == nil {
			if st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); err == nil && !bytes.Contains(st, []byte(") Z ")) {
				e.t.Errorf("daemon pid %d still alive after daemon stop: killing it", pid)
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	e.thrum("", "daemon", "start")
}

func (e *mcpE2E) stopDaemon() {
	e.t.Helper()
	if r := e.run("", "daemon", "stop"); r.code != 0 {
		e.t.Errorf("daemon stop: exit %d: %s", r.code, r.stderr)
	}
}

// serve starts `thrum mcp serve` as name over stdio and connects a client.
func (e *mcpE2E) serve(name string) *mcp.ClientSession {
	e.t.Helper()
	cmd := exec.Command(e.bin, "mcp", "serve")
	cmd.Dir, cmd.Env = e.repo, e.env(name)
	stderr := &bytes.Buffer{}
	cmd.Stderr = &mcpE2EWriter{mu: &e.mu, w: stderr}
	e.mu.Lock()
	e.stderrs[name] = stderr
	e.mu.Unlock()
	client := mcp.NewClient(&mcp.Implementation{Name: "thrum-e2e", Version: "1"}, nil)
	cs, err := client.Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		e.t.Fatalf("connect to thrum mcp serve as %s: %v\nstderr:\n%s", name, err, e.stderr(name))
	}
	e.t.Cleanup(func() { cs.Close() }) // idempotent; the test closes first
	return cs
}

func (e *mcpE2E) stderr(name string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if b := e.stderrs[name]; b != nil {
		return b.String()
	}
	return ""
}

type mcpE2EWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l *mcpE2EWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

type mcpE2EResult struct {
	res *mcp.CallToolResult
	err error
}

// mcpE2EWait calls wait_for_message in a goroutine.
func mcpE2EWait(cs *mcp.ClientSession, args map[string]any) <-chan mcpE2EResult {
	ch := make(chan mcpE2EResult, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "wait_for_message", Arguments: args})
		ch <- mcpE2EResult{res, err}
	}()
	return ch
}

// mcpE2EReceived checks a wait returned a message and gives it.
func mcpE2EReceived(t *testing.T, r mcpE2EResult) inbox.Message {
	t.Helper()
	if r.err != nil {
		t.Fatalf("wait_for_message: %v", r.err)
	}
	out := mcpE2EDecode[mcpserver.WaitForMessageOutput](t, "wait_for_message", r.res)
	if out.Status != "message_received" || out.Message == nil {
		t.Fatalf("wait_for_message = %+v, want a message", out)
	}
	return *out.Message
}

// mcpE2ECall calls a tool that must succeed and decodes its structured
// output.
func mcpE2ECall[T any](t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return mcpE2EDecode[T](t, name, res)
}

func mcpE2EDecode[T any](t *testing.T, name string, res *mcp.CallToolResult) T {
	t.Helper()
	var out T
	if res.IsError {
		t.Fatalf("%s: tool error: %s", name, mcpE2EText(res))
	}
	raw, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err != nil {
		t.Fatalf("%s: structured content %s does not match %T: %v", name, raw, out, err)
	}
	return out
}

func mcpE2EText(res *mcp.CallToolResult) string {
	if res == nil {
		return ""
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}
