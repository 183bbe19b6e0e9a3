package hosttest_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/thrumhq/thrum/internal/hosttest"
)

// Setup as written: only what `thrum setup HOST --agent alice` writes,
// and the steps it prints, done in the host's TUI as a person does them
// (hosttest.TrustAsPrinted); then one headless run with no flag that
// allows, trusts or approves anything. Each host must offer thrum's
// tools to the model and run thrum's hooks.
func TestLiveSetupAsWritten(t *testing.T) {
	// The step each host's advice must name: the one TrustAsPrinted
	// performs.
	printed := map[string]string{
		"claude": `choose "Use this MCP server"`,
		"codex":  "open /hooks and trust thrum's hooks",
		"gemini": "start gemini here and trust the folder",
	}
	headless := map[string][]string{
		"claude": {"-p", "setup as written claude", "--output-format", "json"},
		"codex":  {"exec", "setup as written codex"},
		"gemini": {"-p", "setup as written gemini"},
	}
	eachHost(t, []hosttest.Host{hosttest.Claude, hosttest.Codex, hosttest.Gemini}, func(t *testing.T, h hosttest.Host) {
		hosttest.Live(t)
		h.Path(t)
		s := hosttest.NewScene(t)
		s.PrepareUntrusted(h)
		s.StartDaemon()
		s.Agent("alice")
		s.Agent("bob")
		advice := s.Setup(h.Name, "--agent", "alice")
		t.Logf("thrum setup %s --agent alice printed:\n%s", h.Name, advice)
		if !strings.Contains(advice, printed[h.Name]) {
			t.Errorf("setup's advice does not say %q, the step this case performs", printed[h.Name])
		}
		s.TrustAsPrinted(h)
		before := len(s.HookRuns())
		sent := s.SendMarked("bob", "@alice", "aswritten", 1)
		s.Model.SetScript(hosttest.Steps(hosttest.Reply{Call: "check_messages"}, hosttest.Reply{Text: "done"}))
		out, err := s.Headless(h, runFor, headless[h.Name]...)
		if err != nil {
			t.Errorf("%s %s: %v\n%s", h.Name, strings.Join(headless[h.Name], " "), err, out)
		}
		turns := s.Model.Turns()
		if len(turns) == 0 {
			t.Fatalf("the host sent the model no turn:\n%s", out)
		}
		tools := turns[0].ServerTools("thrum")
		ran := hookEvents(s.HookRuns()[before:])
		t.Logf("ROW %s setup as written: thrum's tools offered %d (%s); hooks run: %s; check_messages answered: %.300q",
			h.Name, len(tools), strings.Join(tools, ", "), strings.Join(ran, ", "), answered(turns))
		if !slices.Contains(tools, "check_messages") || !slices.Contains(tools, "send_message") {
			t.Errorf("the first turn offered the model none of thrum's tools (%v)", turns[0].Tools)
		}
		if !slices.Contains(ran, "user-prompt-submit") && !slices.Contains(ran, "before-agent") {
			t.Errorf("the headless run ran no prompt hook of thrum's (ran: %v)", ran)
		}
		hosttest.Check(t, h.Name+" setup as written, headless", s.Outcomes("bob", sent), "")
	})
}

// hookEvents are the events of runs, in order, each once.
func hookEvents(runs []hosttest.HookRun) []string {
	var evs []string
	for _, r := range runs {
		if !slices.Contains(evs, r.Event) {
			evs = append(evs, r.Event)
		}
	}
	return evs
}

// answered is what the host added to the conversation after the model's
// last call: the strings of the last turn that the turn before it did not
// carry (the call and its result), joined.
func answered(turns []*hosttest.Request) string {
	if len(turns) < 2 {
		return ""
	}
	prev := map[string]bool{}
	for _, v := range turns[len(turns)-2].Strings {
		prev[v] = true
	}
	var added []string
	for _, v := range turns[len(turns)-1].Strings {
		if !prev[v] {
			added = append(added, v)
		}
	}
	return strings.Join(added, " | ")
}
