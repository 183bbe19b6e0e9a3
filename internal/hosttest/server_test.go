package hosttest_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/thrumhq/thrum/internal/hosttest"
)

// `thrum mcp serve` started by each host when it cannot serve yet: no
// daemon running, or an agent it cannot tell. The server must stay up:
// the host offers thrum's tools, and a tool call is answered (with the
// daemon started where thrum is initialized, or with an error naming
// THRUM_NAME and --agent-id). Each case records what the host showed.

// TestLiveServerNoDaemon: the daemon is not running for the whole run.
func TestLiveServerNoDaemon(t *testing.T) {
	eachHost(t, hosttest.Hosts, func(t *testing.T, h hosttest.Host) {
		s := liveScene(t, h)
		s.StopDaemon()
		shown := serverRun(t, s, h, "server with no daemon")
		hosttest.Expect(t, slices.Contains(shown.tools, "check_messages"), hosttest.KnownServerExits,
			"thrum mcp serve exits with no daemon", "%s offered none of thrum's tools with no daemon running", h.Name)
	})
}

// TestLiveServerUnknownAgent: two agents registered, setup naming none,
// THRUM_NAME unset.
func TestLiveServerUnknownAgent(t *testing.T) {
	eachHost(t, hosttest.Hosts, func(t *testing.T, h hosttest.Host) {
		s := newLiveScene(t, h)
		sent := s.SendMarked("bob", "@alice", "unknown", 1)
		shown := serverRun(t, s, h, "server with an unknown agent")
		hosttest.Expect(t, slices.Contains(shown.tools, "check_messages") && strings.Contains(shown.answer, "THRUM_NAME") &&
			strings.Contains(shown.answer, "alice, bob"),
			hosttest.KnownServerExits, "thrum mcp serve exits when it cannot tell the agent",
			"%s: thrum's tools offered %v, check_messages answered %.300q: want the tools, and an answer naming THRUM_NAME and the identities", h.Name, shown.tools, shown.answer)
		hosttest.Check(t, h.Name+" headless, unknown agent", s.Outcomes("bob", sent), "")
	})
}

// shown is what a host showed of thrum in one headless run.
type shown struct {
	tools  []string // thrum's tools the first turn offered
	answer string   // what the host gave the model for its check_messages call
}

// serverRun runs one headless turn in which the model calls
// check_messages, and logs a ROW of what the host showed: thrum's tools
// offered, the call's answer, the host's own words about thrum, the hook
// runs, and for Claude Code and Gemini CLI their `mcp list`.
func serverRun(t *testing.T, s *hosttest.Scene, h hosttest.Host, name string) shown {
	t.Helper()
	s.Model.SetScript(hosttest.Steps(hosttest.Reply{Call: "check_messages"}, hosttest.Reply{Text: "done"}))
	out, err := s.Headless(h, runFor, hosttest.HeadlessArgs(h, name+" "+h.Name)...)
	var sh shown
	turns := s.Model.Turns()
	if len(turns) > 0 {
		sh.tools = turns[0].ServerTools("thrum")
		sh.answer = answered(turns)
	}
	var hooks []string
	for _, r := range s.HookRuns() {
		hooks = append(hooks, r.Event+" → "+strings.TrimSpace(string(r.Output)))
	}
	said := mentions(out)
	if h == hosttest.Claude || h == hosttest.Gemini {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		list, _ := s.Command(ctx, h.Path(t), "mcp", "list").CombinedOutput()
		cancel()
		said = append(said, "mcp list: "+strings.Join(mentions(string(list)), " / "))
	}
	t.Logf("ROW %s %s: thrum's tools offered %d; check_messages answered %.200q; the host said: %q (exit: %v); hooks: %q",
		h.Name, name, len(sh.tools), sh.answer, said, err, hooks)
	return sh
}

// mentions are the lines of a host's output that speak of thrum or MCP,
// at most eight.
func mentions(out string) []string {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		low := strings.ToLower(l)
		if (strings.Contains(low, "thrum") || strings.Contains(low, "mcp")) && len(lines) < 8 {
			lines = append(lines, strings.TrimSpace(l))
		}
	}
	return lines
}
