package hosttest_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/thrumhq/thrum/internal/hosttest"
)

// The live part: each case runs a real host from npm against the mock
// model, with thrum set up by `thrum setup HOST --agent alice` and a real
// daemon; bob sends. Each logs a ROW line (the findings table of
// docs/hosts.md) and fails on a loss, a double showing or a wrong receipt
// unless the loss is known today (hosttest.KnownLosses).

const runFor = 3 * time.Minute

// liveScene is a scene for h with the daemon running, alice and bob
// registered and `thrum setup` run with extra flags.
func liveScene(t *testing.T, h hosttest.Host, setup ...string) *hosttest.Scene {
	t.Helper()
	return newLiveScene(t, h, append([]string{"--agent", "alice"}, setup...)...)
}

// newLiveScene is liveScene with `thrum setup` run with only the flags
// given: without --agent, the host's entries name no agent.
func newLiveScene(t *testing.T, h hosttest.Host, setup ...string) *hosttest.Scene {
	t.Helper()
	hosttest.Live(t)
	h.Path(t)
	s := hosttest.NewScene(t)
	s.Prepare(h)
	s.StartDaemon()
	s.Agent("alice")
	s.Agent("bob")
	s.Setup(h.Name, setup...)
	if h == hosttest.Codex {
		s.CodexTrustHooks() // what the TUI's review does once
	}
	return s
}

func eachHost(t *testing.T, hosts []hosttest.Host, f func(t *testing.T, h hosttest.Host)) {
	for _, h := range hosts {
		t.Run(h.Name, func(t *testing.T) { f(t, h) })
	}
}

// Messages queued before a headless run, and one sent just before each
// hook run: each context hook's messages must reach the model once.
func TestLiveHeadlessHooks(t *testing.T) {
	eachHost(t, hosttest.Hosts, func(t *testing.T, h hosttest.Host) {
		s := liveScene(t, h)
		s.SendMarked("bob", "@alice", "queued", 3)
		s.Setenv("HOSTTEST_SEND_BEFORE_HOOK=bob")
		out, err := s.Headless(h, runFor, hosttest.HeadlessArgs(h, "headless hooks "+h.Name)...)
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		hosttest.Check(t, h.Name+" headless, hooks", s.Outcomes("bob", s.AllSent("bob")), "")
		if *update {
			record(t, s, h, "headless")
		}
	})
}

// Messages sent while the agent works, read with check_messages.
func TestLiveHeadlessTool(t *testing.T) {
	eachHost(t, hosttest.Hosts, func(t *testing.T, h hosttest.Host) {
		s := liveScene(t, h)
		var sent []hosttest.Sent
		first := true
		steps := hosttest.Steps(hosttest.Reply{Call: "check_messages"}, hosttest.Reply{Text: "read them"})
		s.Model.SetScript(func(r *hosttest.Request) hosttest.Reply {
			if first && len(r.Tools) > 0 {
				first = false
				sent = append(s.SendMarked("bob", "@alice", "during", 3), hosttest.Sent{
					ID: s.Send("bob", "@alice", hosttest.Attack("attack-tool")), Marker: "attack-tool"})
			}
			return steps(r)
		})
		out, err := s.Headless(h, runFor, hosttest.HeadlessArgs(h, "headless tool "+h.Name)...)
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if s.Model.WaitFor(0, func(r *hosttest.Request) bool { return r.Count("during-0000") > 0 }) == nil {
			t.Errorf("no request carried a message read with check_messages:\n%s", out)
		}
		hosttest.Check(t, h.Name+" headless, check_messages", s.Outcomes("bob", sent), "")
		hosttest.CheckFramed(t, s.Model.Requests(), "attack-tool", "MCP tool results carry bodies raw")
	})
}

// A sender's attempt to close the frame, through each context hook.
func TestLiveHookFraming(t *testing.T) {
	eachHost(t, []hosttest.Host{hosttest.Claude, hosttest.Codex, hosttest.Gemini}, func(t *testing.T, h hosttest.Host) {
		s := liveScene(t, h)
		s.Send("bob", "@alice", hosttest.Attack("attack-hook"))
		if out, err := s.Headless(h, runFor, hosttest.HeadlessArgs(h, "framing "+h.Name)...); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if s.Model.WaitFor(0, func(r *hosttest.Request) bool { return r.Count("attack-hook") > 0 }) == nil {
			t.Fatal("no request carried the message")
		}
		hosttest.CheckFramed(t, s.Model.Requests(), "attack-hook", "")
	})
}

// An interactive session opened and quit before any prompt: what its
// SessionStart claimed never reaches a model.
func TestLiveLaunchQuit(t *testing.T) {
	eachHost(t, []hosttest.Host{hosttest.Claude, hosttest.Codex, hosttest.Gemini}, func(t *testing.T, h hosttest.Host) {
		s := liveScene(t, h)
		sent := s.SendMarked("bob", "@alice", "launch", 4)
		tty := s.Interactive(h)
		time.Sleep(8 * time.Second) // the TUI is up and its start hooks ran
		tty.Quit(h)
		t.Logf("hook runs: %d; requests: %d", len(s.HookRuns()), len(s.Model.Turns()))
		known := ""
		if h != hosttest.Codex {
			known = "SessionStart claims at launch"
		}
		hosttest.Check(t, h.Name+" interactive, launch and quit", s.Outcomes("bob", sent), known)
	})
}

// An interactive session with a prompt typed: queued messages and one
// sent before each hook reach the model once.
// opencode's TUI drew nothing in tmux within 100 s here: not yet driven.
func TestLiveInteractivePrompt(t *testing.T) {
	eachHost(t, []hosttest.Host{hosttest.Claude, hosttest.Codex, hosttest.Gemini}, func(t *testing.T, h hosttest.Host) {
		s := liveScene(t, h)
		s.SendMarked("bob", "@alice", "queued", 2)
		s.Setenv("HOSTTEST_SEND_BEFORE_HOOK=bob")
		s.Model.SetScript(hosttest.Steps(hosttest.Reply{Call: "check_messages"}, hosttest.Reply{Text: "read them"}))
		tty := s.Interactive(h)
		time.Sleep(8 * time.Second)
		tty.Type("interactive prompt " + h.Name)
		if s.Model.WaitFor(90*time.Second, func(r *hosttest.Request) bool { return r.Count("interactive prompt") > 0 }) == nil {
			t.Fatalf("no model request after the prompt; the screen:\n%s", tty.Screen())
		}
		time.Sleep(5 * time.Second) // the turn ends: stop hooks
		tty.Quit(h)
		hosttest.Check(t, h.Name+" interactive, prompt", s.Outcomes("bob", s.AllSent("bob")), "")
		if *update {
			record(t, s, h, "interactive")
		}
	})
}

// `claude mcp list` and `claude mcp get thrum`, the docs' way to check
// setup, start the server; with the channel it claims the agent's mail.
func TestLiveClaudeMCPList(t *testing.T) {
	h := hosttest.Claude
	s := liveScene(t, h, "--channel")
	s.Setenv("THRUM_CHANNEL=1") // the channel is chosen per launch, not in .mcp.json
	sent := s.SendMarked("bob", "@alice", "mcplist", 3)
	for _, args := range [][]string{{"mcp", "list"}, {"mcp", "get", "thrum"}} {
		out, err := s.Headless(h, time.Minute, args...)
		t.Logf("claude %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	hosttest.Check(t, "claude mcp list/get, channel set up", s.Outcomes("bob", sent), "the channel claims what the host drops")
}

// The channel set up but not loaded: claude -p ignores the development
// channels, so what the server pushes is dropped.
func TestLiveClaudeChannelNotLoaded(t *testing.T) {
	h := hosttest.Claude
	s := liveScene(t, h, "--channel")
	s.Setenv("THRUM_CHANNEL=1") // the channel is chosen per launch, not in .mcp.json
	var sent []hosttest.Sent
	first := true
	s.Model.SetScript(func(r *hosttest.Request) hosttest.Reply {
		if first && len(r.Tools) > 0 {
			first = false
			sent = s.SendMarked("bob", "@alice", "channel", 4)
			time.Sleep(2 * time.Second) // the server pushes them meanwhile
		}
		return hosttest.Reply{Text: "done"}
	})
	if out, err := s.Headless(h, runFor, hosttest.HeadlessArgs(h, "channel not loaded")...); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	hosttest.Check(t, "claude -p, channel set up, not loaded", s.Outcomes("bob", sent), "the channel claims what the host drops")
}

// No daemon when the host starts: the MCP server cannot connect; mail
// sent once the daemon runs must not be claimed by a server the host gave
// up on.
func TestLiveNoDaemonAtStart(t *testing.T) {
	eachHost(t, hosttest.Hosts, func(t *testing.T, h hosttest.Host) {
		s := liveScene(t, h)
		s.StopDaemon()
		var sent []hosttest.Sent
		first := true
		steps := hosttest.Steps(hosttest.Reply{Call: "check_messages"}, hosttest.Reply{Text: "done"})
		s.Model.SetScript(func(r *hosttest.Request) hosttest.Reply {
			if first && len(r.Tools) > 0 {
				first = false
				s.StartDaemon()
				sent = s.SendMarked("bob", "@alice", "nodaemon", 2)
			}
			return steps(r)
		})
		out, err := s.Headless(h, runFor, hosttest.HeadlessArgs(h, "no daemon at start")...)
		t.Logf("%v\n%.2000s", err, out)
		has := s.Model.Turns()
		if len(has) > 0 {
			t.Logf("the first turn declared check_messages: %v", has[0].Tool("check_messages") != "")
		}
		hosttest.Check(t, h.Name+" headless, no daemon at start", s.Outcomes("bob", sent), "")
	})
}

// A flood: 300 messages queued, read by a headless run that calls
// check_messages five times.
func TestLiveFlood(t *testing.T) {
	eachHost(t, hosttest.Hosts, func(t *testing.T, h hosttest.Host) {
		s := liveScene(t, h)
		sent := s.SendMarked("bob", "@alice", "flood", 300)
		var steps []hosttest.Reply
		for range 5 {
			steps = append(steps, hosttest.Reply{Call: "check_messages"})
		}
		s.Model.SetScript(hosttest.Steps(append(steps, hosttest.Reply{Text: "done"})...))
		if out, err := s.Headless(h, runFor, hosttest.HeadlessArgs(h, "flood")...); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		hosttest.Check(t, h.Name+" headless, flood of 300", s.Outcomes("bob", sent), "")
	})
}

// The host killed while its agent waits in wait_for_message: a message
// sent afterwards must stay unread.
func TestLiveExitDuringWait(t *testing.T) {
	eachHost(t, hosttest.Hosts, func(t *testing.T, h hosttest.Host) {
		s := liveScene(t, h)
		s.Model.SetScript(hosttest.Steps(hosttest.Reply{Call: "wait_for_message", Args: `{"timeout":120}`}))
		ctx, cancel := context.WithTimeout(context.Background(), runFor)
		defer cancel()
		c := s.Command(ctx, h.Path(t), hosttest.HeadlessArgs(h, "wait then exit")...)
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		if s.Model.WaitFor(time.Minute, func(r *hosttest.Request) bool { return r.Tool("wait_for_message") != "" }) == nil {
			t.Fatal("the host sent no turn")
		}
		time.Sleep(3 * time.Second) // the call is made and blocks
		syscall.Kill(-c.Process.Pid, syscall.SIGTERM)
		c.Wait()
		time.Sleep(time.Second)
		sent := s.SendMarked("bob", "@alice", "afterexit", 2)
		time.Sleep(3 * time.Second)
		hosttest.Check(t, h.Name+" killed during wait_for_message", s.Outcomes("bob", sent), "")
	})
}

// mcpServeEnv reads the environment of the host's `thrum mcp serve`
// child: what Claude Code gives the processes it starts.
func mcpServeEnv(t *testing.T, s *hosttest.Scene) map[string]string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if pid, env := thrumProcess(s, "mcp", "serve"); pid != 0 {
			return env
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatal("no thrum mcp serve started by the host")
	return nil
}

// thrumProcess finds a running `thrum ARGS...` of the scene (its HOME)
// and returns its process ID and environment, or 0.
func thrumProcess(s *hosttest.Scene, args ...string) (int, map[string]string) {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, _ := os.ReadFile(p)
		cmd := strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
		if len(cmd) <= len(args) || !strings.HasSuffix(cmd[0], "thrum") || !slices.Equal(cmd[1:1+len(args)], args) {
			continue
		}
		env, _ := os.ReadFile(filepath.Join(filepath.Dir(p), "environ"))
		if !strings.Contains(string(env), "HOME="+s.Home+"\x00") {
			continue // another scene's
		}
		out := map[string]string{}
		for _, kv := range strings.Split(string(env), "\x00") {
			if k, v, ok := strings.Cut(kv, "="); ok {
				out[k] = v
			}
		}
		var pid int
		fmt.Sscan(filepath.Base(filepath.Dir(p)), &pid)
		return pid, out
	}
	return 0, nil
}

// load is the machine's load average (1, 5, 15 minutes), for figures.
func load() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func p50p99(lat []time.Duration) string {
	if len(lat) == 0 {
		return "none"
	}
	sorted := append([]time.Duration(nil), lat...)
	for i := range sorted {
		for j := i + 1; j < len(sorted); j++ {
			if sorted[j] < sorted[i] {
				sorted[i], sorted[j] = sorted[j], sorted[i]
			}
		}
	}
	return fmt.Sprintf("p50 %v, p99 %v, max %v", sorted[len(sorted)/2].Round(time.Millisecond),
		sorted[min(len(sorted)-1, len(sorted)*99/100)].Round(time.Millisecond), sorted[len(sorted)-1].Round(time.Millisecond))
}
