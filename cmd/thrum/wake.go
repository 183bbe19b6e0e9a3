package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/thrumhq/thrum/internal/private"
)

// Waking an idle session (mcp serve --wake HOST). The MCP server is the
// session's child and lives as long as it does, so it rings: with the
// doorbell's line (inbox.Doorbell.Wake) as the session's next prompt,
// which claims nothing. Claude Code gives its children a messaging socket;
// Codex queues a prompt for a thread with `codex queue`, the thread named
// by thrum's SessionStart hook, which Codex runs with a session's first
// turn (and again for each new thread).

// ringTimeout bounds one ring.
const ringTimeout = 10 * time.Second

// claudeWaker rings the Claude Code session whose messaging socket and
// token are in the environment (Claude Code 2.1.224 and later give them
// to the session's children): an auth line, then a user line. nil, with
// a warning, when the session gave none.
func claudeWaker(env func(string) string, logger *slog.Logger) func(context.Context, string) error {
	sock, token := env("CLAUDE_CODE_MESSAGING_SOCKET"), env("CLAUDE_CODE_MESSAGING_TOKEN")
	if sock == "" || token == "" {
		logger.Warn("--wake claude: the session gave this server no CLAUDE_CODE_MESSAGING_SOCKET and _TOKEN (Claude Code 2.1.224 or later gives them); new mail waits for the agent's next prompt or tool call")
		return nil
	}
	return func(ctx context.Context, text string) error {
		return ringClaude(ctx, sock, token, text)
	}
}

// ringClaude writes text to a Claude Code messaging socket as a user
// turn, then waits briefly for the session to read it (its answer, if
// any, or its close) before hanging up.
func ringClaude(ctx context.Context, sock, token, text string) error {
	ctx, cancel := context.WithTimeout(ctx, ringTimeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", sock)
	if err != nil {
		return fmt.Errorf("ring Claude Code's messaging socket: %w", err)
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	auth, _ := json.Marshal(map[string]any{"type": "auth", "token": token})
	user, _ := json.Marshal(map[string]any{"type": "user", "message": map[string]any{"role": "user", "content": text}})
	if _, err := c.Write(append(append(auth, '\n'), append(user, '\n')...)); err != nil {
		return fmt.Errorf("ring Claude Code's messaging socket: %w", err)
	}
	c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	io.Copy(io.Discard, io.LimitReader(c, 64<<10))
	return nil
}

// codexThread is the Codex thread thrum's SessionStart hook registered for
// an agent: the session to ring.
type codexThread struct {
	Thread string    `json:"thread"`
	At     time.Time `json:"at"`
}

// codexThreadPath is where the hook registers agent's Codex thread.
func codexThreadPath(l *layout, agent string) string {
	return filepath.Join(filepath.Dir(l.PIDFile), "wake", agent+".codex.json")
}

// codexThreadID is what a Codex session ID may be (a UUID, or a session's
// name): it becomes an argument of codex queue.
var codexThreadID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// registerCodexThread records thread as agent's Codex session to ring.
func registerCodexThread(l *layout, agent, thread string) error {
	if !codexThreadID.MatchString(thread) {
		return fmt.Errorf("the hook input's session_id %q is not a Codex session ID", thread)
	}
	path := codexThreadPath(l, agent)
	if err := private.Dir(filepath.Dir(path)); err != nil {
		return err
	}
	b, _ := json.Marshal(codexThread{Thread: thread, At: time.Now().UTC()})
	return private.WriteFile(path, b)
}

// codexWaker rings agent a's Codex session with `codex queue --thread=ID
// --message=TEXT`: the thread registered since the server started (an
// older one is another session's), the message one argument, no shell,
// never --resume (which would run a closed session's turn headless). A
// ring that fails drops the registration; the server keeps waking the
// thread a later SessionStart registers (a new thread in the same TUI).
func codexWaker(a *agent, since time.Time) func(context.Context, string) error {
	path := codexThreadPath(a.l, a.f.AgentID)
	return func(ctx context.Context, text string) error {
		var reg codexThread
		b, err := os.ReadFile(path)
		if err == nil {
			err = json.Unmarshal(b, &reg)
		}
		if err != nil || !codexThreadID.MatchString(reg.Thread) || reg.At.Before(since) {
			a.logger.Debug("--wake codex: no Codex session registered since this server started; the mail waits for its first prompt", "err", err)
			return nil
		}
		forget := func(why string, args ...any) {
			a.logger.Warn("--wake codex: "+why+"; the session is forgotten, its mail waits for the next one", append([]any{"thread", reg.Thread}, args...)...)
			if b2, _ := os.ReadFile(path); string(b2) == string(b) { // not re-registered meanwhile
				os.Remove(path)
			}
		}
		if codexClosed() {
			forget("the Codex TUI closed")
			return nil
		}
		ctx, cancel := context.WithTimeout(ctx, ringTimeout)
		defer cancel()
		out, err := exec.CommandContext(ctx, codexPath(), "queue", "--thread="+reg.Thread, "--message="+text).CombinedOutput()
		if err != nil {
			forget("codex queue failed", "err", err, "output", strings.TrimSpace(string(out)))
		}
		return nil
	}
}

// codexClosed reports whether the Codex TUI this server serves has
// closed. Codex (0.169) runs MCP servers under an app-server daemon (codex
// app-server --managed-daemon), a child of the TUI that outlives it by
// about a minute and would run a turn queued meanwhile headless, with
// nobody to see it. Its parent is then no longer codex. A server whose
// parent is the TUI itself ends with it. Where /proc cannot tell, it is
// taken as open.
func codexClosed() bool {
	parent := os.Getppid()
	cmd, err := os.ReadFile("/proc/" + strconv.Itoa(parent) + "/cmdline")
	if err != nil || !strings.Contains(string(cmd), "app-server") {
		return false
	}
	st, err := os.ReadFile("/proc/" + strconv.Itoa(parent) + "/stat")
	if err != nil {
		return false
	}
	// Fields after the command's closing parenthesis: state, then ppid.
	f := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+1:]))
	if len(f) < 2 {
		return false
	}
	exe, err := os.Readlink("/proc/" + f[1] + "/exe")
	return err != nil || filepath.Base(exe) != "codex"
}

// codexPath is the codex to run: the server's parent when it is Codex
// (the session's own), else codex from PATH.
func codexPath() string {
	if exe, err := os.Readlink("/proc/" + strconv.Itoa(os.Getppid()) + "/exe"); err == nil && filepath.Base(exe) == "codex" {
		return exe
	}
	return "codex"
}
