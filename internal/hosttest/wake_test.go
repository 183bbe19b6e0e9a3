package hosttest_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/thrumhq/thrum/internal/hosttest"
)

const rings = 10

// An idle interactive Claude Code session, rung from outside through its
// messaging socket: whether and when a new model request arrives.
func TestLiveIdleWakeClaude(t *testing.T) {
	s := liveScene(t, hosttest.Claude)
	tty := s.Interactive(hosttest.Claude)
	env := mcpServeEnv(t, s)
	sock, token := env["CLAUDE_CODE_MESSAGING_SOCKET"], env["CLAUDE_CODE_MESSAGING_TOKEN"]
	if sock == "" || token == "" {
		t.Fatalf("the session gave its MCP server no messaging socket (socket %q, token set %v)", sock, token != "")
	}
	time.Sleep(5 * time.Second) // idle
	lat := ringAll(t, s, func(text string) error { return hosttest.RingClaude(sock, token, text) })
	t.Logf("ROW claude idle wake (messaging socket): woke %d of %d, %s", len(lat), rings, p50p99(lat))
	if len(lat) < rings {
		t.Errorf("woke %d of %d; the screen:\n%s", len(lat), rings, tty.Screen())
	}
	tty.Quit(hosttest.Claude)
}

// An idle Codex TUI, rung with `codex queue --thread <session>`.
func TestLiveIdleWakeCodex(t *testing.T) {
	s := liveScene(t, hosttest.Codex)
	tty := s.Interactive(hosttest.Codex)
	time.Sleep(8 * time.Second)
	tty.Type("first prompt")
	if s.Model.WaitFor(60*time.Second, func(r *hosttest.Request) bool { return r.Count("first prompt") > 0 }) == nil {
		t.Fatalf("no request for the first prompt; the screen:\n%s", tty.Screen())
	}
	var thread string
	for _, r := range s.HookRuns() {
		var in struct {
			SessionID string `json:"session_id"`
		}
		if r.Event == "session-start" && json.Unmarshal(r.Input, &in) == nil {
			thread = in.SessionID
		}
	}
	if thread == "" {
		t.Fatal("no SessionStart hook input named the session")
	}
	time.Sleep(5 * time.Second) // idle
	lat := ringAll(t, s, func(text string) error { _, err := s.RingCodex(thread, text); return err })
	t.Logf("ROW codex idle wake (codex queue): woke %d of %d, %s", len(lat), rings, p50p99(lat))
	if len(lat) < rings {
		t.Errorf("woke %d of %d; the screen:\n%s", len(lat), rings, tty.Screen())
	}
	tty.Quit(hosttest.Codex)
}

// ringAll rings the session rings times, each with its own text, waiting
// for the turn it starts to end, and returns the latencies from each
// ring to the model request carrying its text.
func ringAll(t *testing.T, s *hosttest.Scene, ring func(text string) error) []time.Duration {
	var lat []time.Duration
	for i := range rings {
		text := fmt.Sprintf("thrum: 1 new message (newest msg_ring%02d from bob); call check_messages", i)
		at := time.Now()
		if err := ring(text); err != nil {
			t.Errorf("ring %d: %v", i, err)
			continue
		}
		r := s.Model.WaitFor(10*time.Second, func(r *hosttest.Request) bool { return r.At.After(at) && r.Count(text) > 0 })
		if r == nil {
			t.Logf("ring %d: no model request within 10 s", i)
			continue
		}
		lat = append(lat, r.At.Sub(at))
		time.Sleep(2 * time.Second) // the turn ends
	}
	return lat
}
