package hosttest_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/thrumhq/thrum/internal/hosttest"
)

// thrum's own wake of an idle session: `thrum setup` writes `mcp serve
// --wake HOST`, and the server rings the session when bob sends.

// wakeHosts are the hosts thrum wakes.
var wakeHosts = []hosttest.Host{hosttest.Claude, hosttest.Codex}

// idleSession opens h's TUI with args and leaves it idle with its MCP
// server up: Codex after a first prompt, whose SessionStart hook names
// the thread to ring.
func idleSession(t *testing.T, s *hosttest.Scene, h hosttest.Host, args ...string) *hosttest.TTY {
	t.Helper()
	tty := s.Interactive(h, args...)
	mcpServeEnv(t, s)
	time.Sleep(8 * time.Second) // the host's start-up requests
	if h == hosttest.Codex {
		tty.Type("first prompt")
		if s.Model.WaitFor(60*time.Second, func(r *hosttest.Request) bool { return r.Count("first prompt") > 0 }) == nil {
			t.Fatalf("no request for the first prompt; the screen:\n%s", tty.Screen())
		}
		reg := filepath.Join(s.Repo, ".thrum", "var", "wake", "alice.codex.json")
		for i := 0; i < 100; i++ {
			if _, err := os.Stat(reg); err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if _, err := os.Stat(reg); err != nil {
			t.Fatalf("the SessionStart hook registered no thread: %v", err)
		}
	}
	quiet(s, 3*time.Second)
	return tty
}

// quiet returns once the model got no request for d (a turn ended).
func quiet(s *hosttest.Scene, d time.Duration) {
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
		n := len(s.Model.Requests())
		time.Sleep(d)
		if len(s.Model.Requests()) == n {
			return
		}
	}
}

// wakeOnce sends alice one message and returns it and the time from the
// send to the first model request carrying the ring that names it (0 if
// none came within 30 s). The model answers the ring by calling
// check_messages, as an agent told to does.
func wakeOnce(t *testing.T, s *hosttest.Scene, prefix string) (hosttest.Sent, time.Duration) {
	t.Helper()
	s.Model.SetScript(hosttest.Steps(hosttest.Reply{Call: "check_messages"}, hosttest.Reply{Text: "done"}))
	at := time.Now()
	m := s.SendMarked("bob", "@alice", prefix, 1)[0]
	ring := "(newest " + m.ID + " from bob); call check_messages"
	r := s.Model.WaitFor(30*time.Second, func(r *hosttest.Request) bool { return r.At.After(at) && r.Count(ring) > 0 })
	if r == nil {
		return m, 0
	}
	lat := r.At.Sub(at)
	if r.Count(m.Marker) > 0 {
		t.Logf("%s: the ring's own request carried the body (the prompt's hook claimed it)", m.ID)
	}
	quiet(s, 3*time.Second)
	return m, lat
}

func wakeRow(lat []time.Duration, n int) string {
	within := 0
	for _, l := range lat {
		if l <= time.Second {
			within++
		}
	}
	return fmt.Sprintf("woke %d of %d (%d within 1 s), %s", len(lat), n, within, p50p99(lat))
}

// An idle interactive session, bob sends: a new model request carries
// thrum's ring (measured from the send), the body then reaches the model
// once, through the prompt's hook or check_messages, and the receipt
// says delivered only then.
func TestLiveWake(t *testing.T) {
	eachHost(t, wakeHosts, func(t *testing.T, h hosttest.Host) {
		s := liveScene(t, h)
		tty := idleSession(t, s, h)
		const n = 5
		var sent []hosttest.Sent
		var lat []time.Duration
		for i := range n {
			m, l := wakeOnce(t, s, fmt.Sprintf("wake%d", i))
			sent = append(sent, m)
			if l == 0 {
				t.Errorf("%s: no request carried its ring within 30 s; the screen:\n%s", m.ID, tty.Screen())
				continue
			}
			lat = append(lat, l)
		}
		t.Logf("ROW %s idle wake by thrum (send to request): %s", h.Name, wakeRow(lat, n))
		hosttest.Check(t, h.Name+" idle wake by thrum, then the body", s.Outcomes("bob", sent), "")
		tty.Quit(h)
	})
}

// The session closed before bob sends: nothing rings it, the message
// stays queued, and the next session takes it (Claude Code's is rung at
// its start; Codex's first prompt brings it).
func TestLiveWakeSessionClosed(t *testing.T) {
	eachHost(t, wakeHosts, func(t *testing.T, h hosttest.Host) {
		s := liveScene(t, h)
		tty := idleSession(t, s, h)
		tty.Quit(h)
		before := len(s.Model.Requests())
		sent := s.SendMarked("bob", "@alice", "closed", 1)
		time.Sleep(5 * time.Second)
		if n := len(s.Model.Requests()); n != before {
			t.Errorf("%d model requests after the session closed", n-before)
		}
		if r := s.Receipts("bob")[sent[0].ID]; r.State != "queued" {
			t.Errorf("the receipt after a closed session = %+v, want queued", r)
		}
		at := time.Now()
		s.Model.SetScript(hosttest.Steps(hosttest.Reply{Call: "check_messages"}, hosttest.Reply{Text: "done"}))
		next := s.Interactive(h)
		if h == hosttest.Codex {
			time.Sleep(8 * time.Second)
			next.Type("next session")
		}
		r := s.Model.WaitFor(60*time.Second, func(r *hosttest.Request) bool { return r.At.After(at) && r.Count(sent[0].Marker) > 0 })
		if r == nil {
			t.Errorf("the next session's model never saw the message; the screen:\n%s", next.Screen())
		} else {
			t.Logf("the next session brought it %v after it started", r.At.Sub(at).Round(time.Millisecond))
		}
		quiet(s, 3*time.Second)
		hosttest.Check(t, h.Name+" session closed before the ring, then the next session", s.Outcomes("bob", sent), "")
		next.Quit(h)
	})
}

// Claude Code in bypass-permissions mode lets only the session's own
// children through its messaging socket: thrum's MCP server is one.
func TestLiveWakeClaudeBypass(t *testing.T) {
	s := liveScene(t, hosttest.Claude)
	tty := idleSession(t, s, hosttest.Claude, "--dangerously-skip-permissions")
	const n = 3
	var sent []hosttest.Sent
	var lat []time.Duration
	for i := range n {
		m, l := wakeOnce(t, s, fmt.Sprintf("bypass%d", i))
		sent = append(sent, m)
		if l == 0 {
			t.Errorf("%s: no request carried its ring; the screen:\n%s", m.ID, tty.Screen())
			continue
		}
		lat = append(lat, l)
	}
	t.Logf("ROW claude bypass-permissions, idle wake by thrum: %s", wakeRow(lat, n))
	hosttest.Check(t, "claude bypass-permissions, idle wake", s.Outcomes("bob", sent), "")
	tty.Quit(hosttest.Claude)
}

// No daemon when the session starts: the MCP server starts it (init ran
// here) and the session has thrum's tools and its wake.
func TestLiveWakeNoDaemon(t *testing.T) {
	eachHost(t, wakeHosts, func(t *testing.T, h hosttest.Host) {
		s := liveScene(t, h)
		s.StopDaemon()
		tty := idleSession(t, s, h)
		if out, err := s.RunThrum("", "daemon", "status"); err != nil {
			t.Fatalf("no daemon after the session started: %v\n%s", err, out)
		}
		m, l := wakeOnce(t, s, "nodaemon")
		if l == 0 {
			t.Errorf("no ring after the server started the daemon; the screen:\n%s", tty.Screen())
		}
		t.Logf("ROW %s no daemon at start, the server started it: %s", h.Name, wakeRow(nonzero(l), 1))
		hosttest.Check(t, h.Name+" no daemon at start, then a wake", s.Outcomes("bob", []hosttest.Sent{m}), "")
		tty.Quit(h)
		s.StopDaemon() // the server started it; the scene's cleanup stops only its own
	})
}

func nonzero(l time.Duration) []time.Duration {
	if l == 0 {
		return nil
	}
	return []time.Duration{l}
}

// opencode: thrum's plugin (which `thrum setup opencode` writes) rings the
// agent's idle session. Measured headless, `opencode serve` with a
// session created through its HTTP API and left idle: its TUI draws
// nothing in tmux here. The same server runs under the TUI. The plugin's
// doorbell ends with opencode.
func TestLiveWakeOpencode(t *testing.T) {
	h := hosttest.OpenCode
	s := liveScene(t, h)
	url, stop := s.OpencodeServe()
	id := s.OpencodeSession(url)
	t.Logf("opencode session %s, idle", id)
	for i := 0; ; i++ {
		if pid, _ := thrumProcess(s, "wait", "--follow", "--wake"); pid != 0 {
			break
		}
		if i == 100 {
			t.Fatal("the plugin started no thrum wait --follow --wake within 30 s")
		}
		time.Sleep(300 * time.Millisecond)
	}
	quiet(s, 3*time.Second)
	const n = 5
	var sent []hosttest.Sent
	var lat []time.Duration
	for i := range n {
		m, l := wakeOnce(t, s, fmt.Sprintf("wake%d", i))
		sent = append(sent, m)
		if l == 0 {
			t.Errorf("%s: no request carried its ring within 30 s", m.ID)
			continue
		}
		t.Logf("%s: rung %v after the send", m.ID, l.Round(time.Millisecond))
		lat = append(lat, l)
	}
	t.Logf("ROW %s idle wake by thrum's plugin (send to request): %s", h.Name, wakeRow(lat, n))
	hosttest.Check(t, h.Name+" idle wake by thrum's plugin, then the body", s.Outcomes("bob", sent), "")
	stop()
	for i := 0; ; i++ {
		if pid, _ := thrumProcess(s, "wait", "--follow", "--wake"); pid == 0 {
			break
		}
		if i == 50 {
			t.Fatal("the plugin's thrum wait --follow --wake outlived opencode by 5 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
}
