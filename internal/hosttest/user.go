package hosttest

import (
	"context"
	"strings"
	"time"
)

// What a person does with a host after `thrum setup`, done through the
// host's own screens and commands rather than by writing its files.

// TrustAsPrinted follows, in the host's TUI, the steps `thrum setup HOST`
// prints, after the trust the host asks for at its first start in the
// repository, then quits: Claude Code trusts the folder and, at "New MCP
// server found in this project", takes "Use this MCP server"; Codex
// trusts the folder, then trusts thrum's hooks in /hooks; Gemini CLI
// trusts the folder, and exits to restart. Each choice is checked on the
// screen before it is confirmed; a dialog that does not show fails the
// test with the screen. The scene needs PrepareUntrusted.
func (s *Scene) TrustAsPrinted(h Host) {
	s.T.Helper()
	tty := s.Interactive(h)
	// step waits for want on the screen, lets the screen settle (a key
	// sent to a dialog still drawing is lost), then sends keys.
	step := func(want string, keys ...string) {
		s.T.Helper()
		if !tty.WaitScreen(90*time.Second, want) {
			s.T.Fatalf("%s: waited for %q; the screen:\n%s", h.Name, want, tty.Screen())
		}
		time.Sleep(time.Second)
		for _, k := range keys {
			tty.Keys(k)
			time.Sleep(400 * time.Millisecond)
		}
	}
	// choose presses key until the screen shows want (an option
	// selected), then Enter.
	choose := func(want, key string) {
		s.T.Helper()
		for i := 0; !strings.Contains(tty.Screen(), want); i++ {
			if i == 10 {
				s.T.Fatalf("%s: pressed %s 10 times for %q; the screen:\n%s", h.Name, key, want, tty.Screen())
			}
			tty.Keys(key)
			time.Sleep(time.Second)
		}
		tty.Keys("Enter")
	}
	switch h.Name {
	case "claude":
		step("Yes, I trust this folder")
		choose("❯ Yes, I trust this folder", "Down") // "No, exit" is preselected
		step("New MCP server found in this project: thrum")
		choose("❯ Use this MCP server", "Up")
		step("? for shortcuts")
	case "codex":
		step("Trust this folder?")
		choose("› 1. Trust and continue", "Up")
		// Codex offers a review of the new hooks at once; setup's advice
		// is /hooks, which a person who skipped it finds.
		step("Hooks need review", "Escape")
		step("Ask Codex")
		tty.Type("/hooks")
		step("t trust all", "t")
		step("enter details", "Escape")
	case "gemini":
		step("Do you trust the files in this folder?")
		choose("● 1. Trust folder", "Up")
		for i := 0; i < 100 && !tty.Exited(); i++ {
			time.Sleep(200 * time.Millisecond)
		}
	default:
		s.T.Fatalf("no steps for %s", h.Name)
	}
	tty.Quit(h)
}

// InstallClaudePlugin installs thrum's Claude Code plugin for the
// scene's user as its README says, offline from a clone of thrum (the
// repository holding .claude-plugin/marketplace.json): `claude plugin
// marketplace add CLONE`, then `claude plugin install thrum@thrum`. It
// returns what the two commands printed.
func (s *Scene) InstallClaudePlugin(clone string) string {
	s.T.Helper()
	var out strings.Builder
	for _, args := range [][]string{{"plugin", "marketplace", "add", clone}, {"plugin", "install", "thrum@thrum"}} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		b, err := s.Command(ctx, Claude.Path(s.T), args...).CombinedOutput()
		cancel()
		out.Write(b)
		if err != nil {
			s.T.Fatalf("claude %s: %v\n%s", strings.Join(args, " "), err, b)
		}
	}
	return out.String()
}
