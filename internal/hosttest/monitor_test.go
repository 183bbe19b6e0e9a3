package hosttest_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/thrumhq/thrum/internal/hosttest"
)

// The Claude Code plugin's monitor (`thrum wait --follow`), with the
// plugin installed offline from a clone as its README says and no
// `thrum setup`: the plugin brings the server, the hooks and the
// monitor. The agent is chosen as the README says, with THRUM_NAME.

// pluginTTY is an interactive Claude Code session with thrum's plugin,
// once its monitor runs.
func pluginTTY(t *testing.T) (*hosttest.Scene, *hosttest.TTY) {
	t.Helper()
	hosttest.Live(t)
	s := hosttest.NewScene(t)
	s.Prepare(hosttest.Claude)
	s.StartDaemon()
	s.Agent("alice")
	s.Agent("bob")
	s.Setenv("THRUM_NAME=alice")
	// This source tree is a clone of thrum: the marketplace is its root.
	clone, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("plugin install:\n%s", s.InstallClaudePlugin(clone))
	// thrum's tools allowed, as "Yes, and don't ask again" at the first
	// call does: else a woken turn waits for a person at that dialog.
	allow := `{"permissions": {"allow": ["mcp__plugin_thrum_thrum"]}}`
	dir := filepath.Join(s.Repo, ".claude")
	if err := errors.Join(os.MkdirAll(dir, 0o755), os.WriteFile(filepath.Join(dir, "settings.local.json"), []byte(allow), 0o644)); err != nil {
		t.Fatal(err)
	}
	tty := s.Interactive(hosttest.Claude)
	if !tty.WaitScreen(90*time.Second, "1 monitor") {
		t.Fatalf("the plugin's monitor did not start; the screen:\n%s", tty.Screen())
	}
	time.Sleep(3 * time.Second) // idle
	return s, tty
}

const monitorWakes = 5

// An idle session, a message sent from outside: the monitor's line wakes
// the session, and the message reaches the model once (through the line,
// or through check_messages once the line is only a doorbell).
func TestLivePluginMonitorWake(t *testing.T) {
	s, tty := pluginTTY(t)
	var sent []hosttest.Sent
	var lat []time.Duration
	first := -1 // thrum's tools the first woken turn offered
	for i := range monitorWakes {
		s.Model.SetScript(hosttest.Steps(hosttest.Reply{Call: "check_messages"}, hosttest.Reply{Text: "read it"}))
		at := time.Now()
		// The marker below the first line: a doorbell names a message by
		// that line (its subject), and only the body counts as shown.
		marker := fmt.Sprintf("monitor-%04d", i)
		sent = append(sent, hosttest.Sent{ID: s.Send("bob", "@alice", "a note for you\n"+marker+" is its body"), Marker: marker})
		r := s.Model.WaitFor(20*time.Second, func(r *hosttest.Request) bool { return r.At.After(at) && len(r.Tools) > 0 })
		if r == nil {
			t.Logf("message %d: no model request within 20 s", i)
			continue
		}
		lat = append(lat, r.At.Sub(at))
		if first < 0 {
			first = len(r.ServerTools("thrum"))
		}
		time.Sleep(5 * time.Second) // the turn ends
	}
	t.Logf("ROW claude plugin monitor, idle wake: woke %d of %d, %s, from the send's start (load %s); the first woken turn offered %d of thrum's tools",
		len(lat), monitorWakes, p50p99(lat), load(), first)
	if len(lat) < monitorWakes {
		t.Errorf("woke %d of %d; the screen:\n%s", len(lat), monitorWakes, tty.Screen())
	}
	hosttest.Check(t, "claude plugin monitor, idle session", s.Outcomes("bob", sent), "")
	tty.Quit(hosttest.Claude)
}

// The host stopped (SIGSTOP: it reads nothing more), messages sent, then
// the host killed: what its monitor wrote into the pipe meanwhile never
// reaches a model. Then two more are sent to the killed host's agent.
func TestLivePluginMonitorKilled(t *testing.T) {
	s, tty := pluginTTY(t)
	monitor, _ := thrumProcess(s, "wait", "--follow")
	host := tty.PID()
	if monitor == 0 || host == 0 {
		t.Fatalf("monitor %d, host %d: one is not running", monitor, host)
	}
	if err := syscall.Kill(host, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	piped := s.SendMarked("bob", "@alice", "piped", 20)
	time.Sleep(3 * time.Second) // the monitor writes them into the pipe
	if st := procState(host); st != "T" {
		t.Fatalf("the host did not stay stopped (state %q)", st)
	}
	if err := syscall.Kill(host, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	alive := procState(monitor) != ""
	after := s.SendMarked("bob", "@alice", "afterkill", 2)
	time.Sleep(3 * time.Second)
	t.Logf("the monitor was running %v after its host was killed, %v after two more were sent", alive, procState(monitor) != "")
	hosttest.Check(t, "claude plugin monitor, host killed with 20 sent into the pipe", s.Outcomes("bob", piped), "the monitor claims what it writes into its pipe")
	hosttest.Check(t, "claude plugin monitor, 2 sent after its host was killed", s.Outcomes("bob", after), "the monitor outlives its host and claims")
}

// procState is a process's state letter (R, S, T, Z, ...), "" if there is
// no such process.
func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) == 0 {
		return ""
	}
	return f[0]
}
