package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/internal/frame"
	"github.com/thrumhq/thrum/internal/thrumtest"
	"github.com/thrumhq/thrum/rpc"
)

// forgeLog stops c's daemon, appends lines to the shard file of the log
// (as a sync from another machine, or an older thrum, would have left
// them) and starts the daemon again, which applies them.
func forgeLog(t testing.TB, c *thrumCLI, shard string, lines ...string) {
	t.Helper()
	c.ok("", "daemon", "stop")
	path := filepath.Join(c.repo, ".git", "thrum-sync", "a-sync", eventlog.ShardPath(shard))
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(strings.Join(lines, "\n") + "\n"); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	startDaemon(t, c)
}

// actsOnTerminal returns the first character of s that a terminal would
// act on or not show: a control but newline and tab, DEL, a C1 control, a
// hidden character, or a byte that is not UTF-8.
func actsOnTerminal(s string) (rune, bool) {
	for i, r := range s {
		if r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD") {
			return rune(s[i]), true
		}
		if r != '\n' && r != '\t' && frame.Hidden(r) {
			return r, true
		}
	}
	return 0, false
}

// TestHumanOutputShowsDataEscaped runs every command that prints data,
// through the built binary with its output on a pipe (as `| cat` and
// `| less -R` have it), over bodies and logged fields made of terminal
// escapes — title and clipboard (OSC 0, 52), erase and rewrite (CSI, CR),
// DEL, C1, bidirectional overrides, Unicode tags — and checks that none
// of them reaches stdout or stderr as it is, while --json gives the body
// exactly; and that a list shows a preview of a long body.
func TestHumanOutputShowsDataEscaped(t *testing.T) {
	t.Parallel()
	c := &thrumCLI{t: t, repo: thrumtest.GitRepo(t), bin: thrumtest.Binary(t)}
	c.ok("", "init")
	startDaemon(t, c)
	c.ok("", "quickstart", "--name", "alice", "--role", "implementer", "--module", "auth")
	c.ok("", "quickstart", "--name", "bob", "--role", "reviewer", "--module", "auth")
	c.ok("alice", "session", "intent", "fixing\x1b]0;owned title\x07 auth")
	c.ok("alice", "session", "task", "task\x1b[2J\rcleared")

	ev := func(typ string, p map[string]any) string { return thrumtest.EventLine(t, typ, p) }
	forgeLog(t, c, "",
		ev(eventlog.TypeAgentRegister, map[string]any{"agent_id": "mallory", "kind": "agent", "name": "mallory",
			"role": "ops\x1b]52;c;cm0gLXJmIH4=\x07", "module": "m\u202eod", "display": "Mal\x9b31mlory\U000E0041"}),
		ev(eventlog.TypeGroupCreate, map[string]any{"name": "grp\x1b[2J", "description": "desc\x1b]0;t\x07", "created_by": "mallory"}),
		ev(eventlog.TypeGroupMemberAdd, map[string]any{"group": "grp\x1b[2J", "member_type": "agent", "member_id": "bob", "agent_id": "mallory"}),
		ev(eventlog.TypeThreadCreate, map[string]any{"thread_id": "thr_\x1b[31m", "title": "title\x1b]0;x\x07\x7f", "created_by": "mallory"}))
	forgeLog(t, c, "mallory",
		ev(eventlog.TypeMessageCreate, map[string]any{"message_id": "msg_forged\x1b[1A", "agent_id": "mallory", "session_id": "ses_x",
			"thread_id": "thr_\x1b[31m", "format": "markdown", "content": "forged " + hostile, "priority": "high\x1b[5m",
			"tags": []string{"tag\x1b[8m"}, "refs": []map[string]string{{"type": "mention", "value": "bob"}}, "recipients": []string{"bob"}}))
	sent := strings.TrimSpace(c.ok("alice", "--quiet", "send", "--to", "@bob", "local "+hostile).stdout)

	for _, args := range [][]string{
		{"inbox"}, {"inbox", "--mentions"}, {"sent"}, {"search", "forged"}, {"search", "local"},
		{"message", "get", sent}, {"message", "get", "msg_forged\x1b[1A"},
		{"thread", "list"}, {"thread", "get", "thr_\x1b[31m"},
		{"agent", "list"}, {"agent", "whoami"}, {"group", "list"}, {"group", "info", "grp\x1b[2J"}, {"group", "members", "grp\x1b[2J"},
		{"session", "list"}, {"message", "get", "msg_none\x1b]0;x\x07"},
	} {
		for _, as := range []string{"bob", "alice"} {
			r := c.as(as, args...)
			for what, out := range map[string]string{"stdout": r.stdout, "stderr": r.stderr} {
				if ch, bad := actsOnTerminal(out); bad {
					t.Errorf("thrum %q as %s: %s writes U+%04X as it is:\n%q", args, as, what, ch, out)
				}
			}
		}
	}
	contains(t, "message get", c.ok("bob", "message", "get", sent).stdout, `title\x1b]0;pwned\x07`, `\x1b]52;c;`, `rlo\u202egnp.exe`, `tag\U000e0041`)

	// A list shows a preview of a 100 KB body; --json and message get all of it.
	big := strings.Repeat("word ", 20<<10) + "end"
	id := strings.TrimSpace(c.ok("alice", "--quiet", "send", "--to", "@bob", big).stdout)
	out := c.ok("bob", "inbox", "--page-size", "10").stdout
	if n := strings.Count(out, "\n"); n > 40 {
		t.Errorf("inbox of 4 messages, one of 100 KB, printed %d lines:\n%.3000s", n, out)
	}
	contains(t, "inbox", out, "… 102103 more characters: thrum message get "+id)
	var page rpc.ListMessagesResult
	c.okJSON(&page, "bob", "inbox", "--page-size", "10")
	for _, m := range page.Messages {
		if m.MessageID == id && m.Body.Content != big {
			t.Errorf("inbox --json cut the body to %d bytes", len(m.Body.Content))
		}
	}

	var g rpc.GetMessageResult
	c.okJSON(&g, "bob", "message", "get", sent)
	if g.Message.Body.Content != "local "+strings.ToValidUTF8(hostile, "\uFFFD") {
		t.Errorf("message get --json = %q, want the body exactly", g.Message.Body.Content)
	}
}
