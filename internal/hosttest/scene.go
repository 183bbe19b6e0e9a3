package hosttest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/thrumhq/thrum/internal/thrumtest"
)

// Scene is one scratch world for a host: a HOME of its own, a git
// repository where thrum is initialized, the built thrum binary behind a
// recording wrapper on PATH, and a mock model. Everything is removed when
// the test ends (a daemon it started is stopped).
type Scene struct {
	T     testing.TB
	Dir   string // the scene's root: home/, repo/, bin/, hooks/
	Home  string
	Repo  string
	Thrum string // the built binary (the wrapper on PATH runs it)
	Model *Model
	// Env is the environment every process of the scene runs with: a
	// minimal one (no variable of the machine's own agent hosts), the
	// scratch HOME, the wrapper first on PATH.
	Env []string
}

// NewScene makes a scene with thrum initialized in its repository (no
// daemon yet, no agent).
func NewScene(t testing.TB) *Scene {
	t.Helper()
	dir := t.TempDir()
	s := &Scene{T: t, Dir: dir, Home: filepath.Join(dir, "home"), Repo: filepath.Join(dir, "repo"),
		Thrum: thrumtest.Binary(t), Model: NewModel(t)}
	for _, d := range []string{s.Home, s.Repo, filepath.Join(dir, "bin"), filepath.Join(dir, "hooks")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The wrapper keeps each `thrum hook` run's input and output (see
	// HookRuns) and runs the binary for everything else. With
	// HOSTTEST_SEND_BEFORE_HOOK=SENDER in Env, SENDER sends alice a
	// message just before the first run of each event, so that every
	// context hook has mail of its own to show.
	wrapper := `#!/bin/sh
rec=` + shellQuote(filepath.Join(dir, "hooks")) + `
real=` + shellQuote(s.Thrum) + `
case " $* " in
*" hook "*)
	n=$(date +%s%N)-$$
	cat >"$rec/$n.in"
	ev=$(printf '%s\n' "$*" | sed 's/.*hook [a-z]* \([a-z-]*\).*/\1/')
	if [ -n "$HOSTTEST_SEND_BEFORE_HOOK" ] && [ ! -e "$rec/sent-$ev" ]; then
		: >"$rec/sent-$ev" # once per event: a stop blocked for new mail each time would never end
		"$real" --agent-id "$HOSTTEST_SEND_BEFORE_HOOK" send --to @alice "pre-$ev-$n is a note sent just before this hook" >/dev/null 2>&1
	fi
	"$real" "$@" <"$rec/$n.in" >"$rec/$n.out"
	rc=$?
	printf '%s\n' "$*" >"$rec/$n.args"
	date +%s%N >"$rec/$n.end"
	cat "$rec/$n.out"
	exit $rc;;
esac
exec "$real" "$@"
`
	if err := os.WriteFile(filepath.Join(dir, "bin", "thrum"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "bin") + ":" + os.Getenv("PATH")
	s.Env = thrumtest.GitEnv()
	s.Setenv("HOME="+s.Home, "PATH="+path, "TERM=xterm-256color", "LANG=C.UTF-8",
		"XDG_CONFIG_HOME="+filepath.Join(s.Home, ".config"), "XDG_DATA_HOME="+filepath.Join(s.Home, ".local", "share"),
		"XDG_CACHE_HOME="+filepath.Join(s.Home, ".cache"), "XDG_STATE_HOME="+filepath.Join(s.Home, ".local", "state"))
	s.Env = slices.DeleteFunc(s.Env, func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return slices.Contains([]string{"CLAUDECODE", "CLAUDE_CODE_ENTRYPOINT", "CODEX_HOME", "THRUM_NAME", "THRUM_HOME",
			"GEMINI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_BASE_URL", "OPENAI_BASE_URL"}, k)
	})
	t.Cleanup(s.killLeftovers)
	thrumtest.Git(t, s.Repo, "init", "-q", "-b", "main")
	thrumtest.GitUser(t, s.Repo)
	thrumtest.Git(t, s.Repo, "commit", "-q", "--allow-empty", "-m", "scratch")
	s.MustThrum("init")
	return s
}

// killLeftovers kills what the scene's processes left running when the
// test ends (it runs after every other cleanup of the scene): Codex's TUI
// starts an app-server daemon that outlives it, and a Claude Code
// plugin's monitor may outlive its host. A process is the scene's when
// its environment holds the scene's HOME.
func (s *Scene) killLeftovers() {
	envs, _ := filepath.Glob("/proc/[0-9]*/environ")
	for _, p := range envs {
		env, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(append([]byte{0}, env...), []byte("\x00HOME="+s.Home+"\x00")) {
			continue
		}
		var pid int
		fmt.Sscan(filepath.Base(filepath.Dir(p)), &pid)
		if pid != os.Getpid() {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// Setenv adds or replaces variables (KEY=VALUE) in the scene's Env,
// keeping one entry per key (tmux, unlike os/exec, takes the first).
func (s *Scene) Setenv(kvs ...string) {
	for _, kv := range kvs {
		k, _, _ := strings.Cut(kv, "=")
		s.Env = slices.DeleteFunc(s.Env, func(e string) bool { return strings.HasPrefix(e, k+"=") })
		s.Env = append(s.Env, kv)
	}
}

// Command is a command run in the repository with the scene's Env.
func (s *Scene) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	c := exec.CommandContext(ctx, name, args...)
	// PWD too: some hosts (opencode) take their directory from it.
	c.Dir, c.Env = s.Repo, append(slices.Clip(s.Env), "PWD="+s.Repo)
	return c
}

// RunThrum runs the thrum binary in the repository and returns its
// stdout; on failure, the error carries stderr.
func (s *Scene) RunThrum(stdin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := s.Command(ctx, s.Thrum, args...)
	c.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	if err := c.Run(); err != nil {
		return out.String(), fmt.Errorf("thrum %s: %w: %s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), nil
}

// MustThrum is RunThrum that fails the test on an error.
func (s *Scene) MustThrum(args ...string) string {
	s.T.Helper()
	out, err := s.RunThrum("", args...)
	if err != nil {
		s.T.Fatal(err)
	}
	return out
}

// StartDaemon starts thrum's daemon (the built binary), stopped when the
// test ends.
func (s *Scene) StartDaemon() {
	s.T.Helper()
	s.MustThrum("daemon", "start")
	s.T.Cleanup(func() { s.RunThrum("", "daemon", "stop") })
}

// StopDaemon stops the daemon.
func (s *Scene) StopDaemon() {
	s.T.Helper()
	s.MustThrum("daemon", "stop")
}

// Agent registers an agent with an identity file in the repository.
func (s *Scene) Agent(name string) {
	s.T.Helper()
	s.MustThrum("quickstart", "--name", name, "--role", "tester", "--module", "hosts")
}

// Send sends body from one agent to another ("@name" or a group) and
// returns the message's ID.
func (s *Scene) Send(from, to, body string) string {
	s.T.Helper()
	out := s.MustThrum("--json", "--agent-id", from, "send", "--to", to, body)
	var r struct {
		MessageID string `json:"message_id"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil || r.MessageID == "" {
		s.T.Fatalf("thrum send printed %q: %v", out, err)
	}
	return r.MessageID
}

// Receipt is where one message stands with one recipient, as its sender
// reads it.
type Receipt struct {
	MessageID string `json:"-"`
	Preview   string `json:"-"` // the start of the body
	AgentID   string `json:"agent_id"`
	State     string `json:"state"`
	Via       string `json:"via"`
	At        string `json:"at"`
}

// Receipts returns the receipts of the messages from sent by, keyed by
// message ID (the last recipient's, for a message to several).
func (s *Scene) Receipts(from string) map[string]Receipt {
	s.T.Helper()
	out := map[string]Receipt{}
	for page := 1; ; page++ {
		raw := s.MustThrum("--json", "--agent-id", from, "sent", "--page-size", "100", "--page", fmt.Sprint(page))
		var r struct {
			Messages []struct {
				MessageID string    `json:"message_id"`
				Preview   string    `json:"preview"`
				Receipts  []Receipt `json:"receipts"`
			} `json:"messages"`
			TotalPages int `json:"total_pages"`
		}
		if err := json.Unmarshal([]byte(raw), &r); err != nil {
			s.T.Fatalf("thrum sent printed %q: %v", raw, err)
		}
		for _, m := range r.Messages {
			for _, rc := range m.Receipts {
				rc.MessageID, rc.Preview = m.MessageID, m.Preview
				out[m.MessageID] = rc
			}
		}
		if page >= r.TotalPages {
			return out
		}
	}
}

// Setup runs `thrum setup HOST` with args in the repository.
func (s *Scene) Setup(host string, args ...string) string {
	s.T.Helper()
	return s.MustThrum(append([]string{"setup", host}, args...)...)
}

// HookRun is one run of `thrum hook` by a host, as the wrapper on PATH
// recorded it.
type HookRun struct {
	Host, Event string
	Args        string // the whole command line after "thrum"
	Input       []byte // the host's stdin
	Output      []byte // thrum's stdout
	End         time.Time
}

// HookRuns returns the hook runs so far, in the order they started.
func (s *Scene) HookRuns() []HookRun {
	dir := filepath.Join(s.Dir, "hooks")
	ins, _ := filepath.Glob(filepath.Join(dir, "*.in"))
	slices.Sort(ins)
	var runs []HookRun
	for _, in := range ins {
		base := strings.TrimSuffix(in, ".in")
		args, err := os.ReadFile(base + ".args")
		if err != nil {
			continue // still running
		}
		r := HookRun{Args: strings.TrimSpace(string(args))}
		r.Input, _ = os.ReadFile(in)
		r.Output, _ = os.ReadFile(base + ".out")
		if end, err := os.ReadFile(base + ".end"); err == nil {
			var ns int64
			fmt.Sscan(string(end), &ns)
			r.End = time.Unix(0, ns)
		}
		f := strings.Fields(r.Args)
		if i := slices.Index(f, "hook"); i >= 0 && i+2 < len(f) {
			r.Host, r.Event = f[i+1], f[i+2]
		}
		runs = append(runs, r)
	}
	return runs
}
