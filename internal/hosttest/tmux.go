package hosttest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// TTY is a host running interactively in a tmux session of its own (a
// private tmux server), as a person would run it in a terminal.
type TTY struct {
	s    *Scene
	sock string
}

// Interactive starts the host's TUI with args in the repository, in a
// 200×50 terminal; it is killed when the test ends.
func (s *Scene) Interactive(h Host, args ...string) *TTY {
	s.T.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		s.T.Skip("interactive host test: needs tmux")
	}
	t := &TTY{s: s, sock: filepath.Join(s.Dir, "tmux.sock")}
	cmd := []string{"new-session", "-d", "-s", "host", "-x", "200", "-y", "50", "-c", s.Repo}
	// Through env -i, not tmux's -e: tmux puts its client's PATH over
	// the session's. From a shell, as a terminal runs it: tmux resumes a
	// pane's own process when it stops, so a host stopped by a test
	// (SIGSTOP) would not stay stopped. The shell outlives a Ctrl-C the
	// host takes as "press again to quit".
	cmd = append(append(cmd, "--", "env", "-i"), append(s.Env, "PWD="+s.Repo)...)
	cmd = append(cmd, "sh", "-c", `trap : INT; "$@"; exit $?`, "sh", h.Path(s.T))
	if _, err := t.tmux(append(cmd, args...)...); err != nil {
		s.T.Fatal(err)
	}
	t.tmux("set-option", "-t", "host", "remain-on-exit", "on")
	s.T.Cleanup(func() { t.tmux("kill-server") })
	return t
}

func (t *TTY) tmux(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := exec.CommandContext(ctx, "tmux", append([]string{"-S", t.sock}, args...)...)
	c.Env = append(os.Environ(), "TMUX=")
	out, err := c.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("tmux %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// Screen is what the terminal shows now.
func (t *TTY) Screen() string {
	out, _ := t.tmux("capture-pane", "-p", "-t", "host")
	return out
}

// WaitScreen waits up to d for the screen to contain s, and says whether
// it did.
func (t *TTY) WaitScreen(d time.Duration, s string) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if strings.Contains(t.Screen(), s) {
			return true
		}
		time.Sleep(200 * time.Millisecond)
	}
	return false
}

// Keys sends tmux key names (Enter, Escape, C-c, ...).
func (t *TTY) Keys(keys ...string) {
	if _, err := t.tmux(append([]string{"send-keys", "-t", "host"}, keys...)...); err != nil {
		t.s.T.Error(err)
	}
}

// Type types text literally, then Enter.
func (t *TTY) Type(text string) {
	if _, err := t.tmux("send-keys", "-t", "host", "-l", text); err != nil {
		t.s.T.Error(err)
	}
	time.Sleep(300 * time.Millisecond) // a paste and its Enter apart, as typed
	t.Keys("Enter")
}

// Exited says whether the host's process has ended.
func (t *TTY) Exited() bool {
	out, _ := t.tmux("display-message", "-p", "-t", "host", "#{pane_dead}")
	return strings.TrimSpace(out) == "1"
}

// PID is the host process's ID (the child of the pane's shell), or 0
// once it has exited.
func (t *TTY) PID() int {
	out, _ := t.tmux("display-message", "-p", "-t", "host", "#{pane_pid}")
	shell := strings.TrimSpace(out)
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range stats {
		b, _ := os.ReadFile(p)
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) > 1 && f[1] == shell {
			var pid int
			fmt.Sscan(filepath.Base(filepath.Dir(p)), &pid)
			return pid
		}
	}
	return 0
}

// Quit ends the host as a person would (hostQuit's keys), waits up to
// 10 s for it to exit, then kills what is left.
func (t *TTY) Quit(h Host) {
	for _, k := range hostQuit[h.Name] {
		t.Keys(k)
		time.Sleep(400 * time.Millisecond)
	}
	for i := 0; i < 50 && !t.Exited(); i++ {
		time.Sleep(200 * time.Millisecond)
	}
	t.tmux("kill-server")
}

// hostQuit are the keys that quit each host's TUI with no prompt typed.
var hostQuit = map[string][]string{
	"claude":   {"C-c", "C-c"},
	"codex":    {"C-c", "C-c"},
	"gemini":   {"C-c", "C-c"},
	"opencode": {"C-c", "C-c"},
}

// CodexTrustHooks trusts every hook Codex finds for the repository, as a
// person does in the TUI's hook review: it asks `codex app-server` for
// the hooks (hooks/list, with each hook's key and content hash) and
// records their hashes in the user's config.toml (hooks.state).
func (s *Scene) CodexTrustHooks() int {
	s.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := s.Command(ctx, Codex.Path(s.T), "app-server")
	in := strings.Join([]string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"clientInfo":{"name":"hosttest","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"initialized"}`,
		fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"hooks/list","params":{"cwds":[%q]}}`, s.Repo),
	}, "\n") + "\n"
	stdin, _ := c.StdinPipe()
	stdout, _ := c.StdoutPipe()
	if err := c.Start(); err != nil {
		s.T.Fatal(err)
	}
	defer func() { stdin.Close(); c.Process.Kill(); c.Wait() }()
	stdin.Write([]byte(in))
	dec := json.NewDecoder(stdout)
	for {
		var msg struct {
			ID     int `json:"id"`
			Result struct {
				Data []struct {
					Hooks []struct {
						Key, CurrentHash, TrustStatus string
					}
				}
			}
		}
		if err := dec.Decode(&msg); err != nil {
			s.T.Fatalf("codex app-server hooks/list: %v", err)
		}
		if msg.ID != 2 {
			continue
		}
		var b strings.Builder
		n := 0
		for _, d := range msg.Result.Data {
			for _, h := range d.Hooks {
				if h.TrustStatus != "trusted" {
					fmt.Fprintf(&b, "\n[hooks.state.%q]\ntrusted_hash = %q\n", h.Key, h.CurrentHash)
					n++
				}
			}
		}
		f, err := os.OpenFile(filepath.Join(s.Home, ".codex", "config.toml"), os.O_APPEND|os.O_WRONLY, 0)
		if err == nil {
			_, err = f.WriteString(b.String())
			f.Close()
		}
		if err != nil {
			s.T.Fatal(err)
		}
		return n
	}
}
