package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/alecthomas/kong"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/internal/thrumtest"
)

// TestEndToEndRun drives the whole CLI through runEnv in a temporary git
// repository: init, the daemon's lifecycle, two agents messaging, every
// message, group, thread, agent and session command in human and --json
// form, and the exit codes of the failures a user will meet.
func TestEndToEndRun(t *testing.T) {
	t.Parallel()
	repo := thrumtest.GitRepo(t)
	c := &thrumCLI{t: t, repo: repo}

	// Before init, commands say what to run.
	c.fails(exitNoDaemon, "", []string{"inbox"}, "thrum init", "thrum daemon start")

	// init, and init again.
	r := c.ok("", "init")
	contains(t, "init", r.stdout, "Initialized thrum in "+repo, "created "+filepath.Join(repo, ".git", "thrum-sync", "a-sync")+" (worktree of branch a-sync)")
	contains(t, "init hint", r.stderr, "thrum daemon start")
	var ini map[string]any
	c.okJSON(&ini, "", "init")
	hasKeys(t, "init", ini, "root", "git", "log_dir", "home", "created")
	if ini["git"] != true || str(ini, "log_dir") != filepath.Join(repo, ".git", "thrum-sync", "a-sync") || str(ini, "root") != repo {
		t.Errorf("init --json = %v", ini)
	}
	if cr, _ := ini["created"].([]any); len(cr) != 0 {
		t.Errorf("second init created %v", cr)
	}
	contains(t, "third init", c.ok("", "init").stdout, "thrum is already set up in "+repo)

	// daemon status before start: exit 3 with the hint.
	r = c.fails(exitNoDaemon, "", []string{"daemon", "status"}, "thrum daemon start")
	contains(t, "daemon status", r.stdout, "Daemon is not running for "+repo)

	// daemon start and status.
	st := startDaemon(t, c)
	pid := num(st, "pid")
	socket := filepath.Join(repo, ".thrum", "var", "thrum.sock")
	if st["running"] != true || str(st, "socket") != socket || num(st, "ws_port") <= 0 {
		t.Errorf("daemon start --json = %v", st)
	}
	var status map[string]any
	c.okJSON(&status, "", "daemon", "status")
	hasKeys(t, "daemon status", status, "running", "pid", "socket", "ws_port", "health.status", "health.version")
	if status["running"] != true || num(status, "pid") != pid || str(status, "socket") != socket ||
		num(status, "ws_port") != num(st, "ws_port") || str(status, "health.status") != "ok" {
		t.Errorf("daemon status --json = %v, start said %v", status, st)
	}
	r = c.ok("", "daemon", "status")
	contains(t, "daemon status", r.stdout, "Daemon running (pid ", "socket:  "+socket, "ws port: ", "version: "+thrum.Version)
	contains(t, "daemon start again", c.ok("", "daemon", "start").stdout, "Daemon already running (pid ",
		"\n  websocket: ws://127.0.0.1:"+strconv.Itoa(int(num(st, "ws_port")))+"/ws\n")

	// Two agents.
	r = c.ok("", "quickstart", "--name", "alice", "--role", "implementer", "--module", "auth")
	contains(t, "quickstart", r.stdout, "> Agent alice registered (role implementer, module auth)", "Session: ses_",
		"Identity: "+filepath.Join(repo, ".thrum", "identities", "alice.json"))
	var qs map[string]any
	c.okJSON(&qs, "", "quickstart", "--name", "bob", "--role", "reviewer", "--module", "auth")
	hasKeys(t, "quickstart", qs, "agent_id", "status", "session_id", "identity_file")
	if qs["agent_id"] != "bob" || qs["status"] != "registered" || !strings.HasPrefix(str(qs, "session_id"), "ses_") {
		t.Errorf("quickstart --json = %v", qs)
	}
	if fi, err := os.Stat(str(qs, "identity_file")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("identity file %s: %v, %v (want mode 0600)", str(qs, "identity_file"), fi, err)
	}
	c.fails(exitUsage, "", []string{"quickstart", "--name", "carol"}, "--role and --module")
	c.fails(exitError, "", []string{"quickstart", "--name", "bob", "--role", "implementer", "--module", "auth"}, "--force")

	// Identity errors: two identity files and nothing to choose → exit 4.
	c.fails(exitNoIdentity, "", []string{"send", "hi"}, "THRUM_NAME", "alice, bob")
	r = c.fails(exitNoIdentity, "", []string{"--json", "inbox"})
	var jerr map[string]any
	if err := json.Unmarshal([]byte(r.stderr), &jerr); err != nil || num(jerr, "error.code") != exitNoIdentity ||
		!strings.Contains(str(jerr, "error.message"), "THRUM_NAME") {
		t.Errorf("--json identity error on stderr = %q (%v)", r.stderr, err)
	}
	c.fails(exitNoIdentity, "carol", []string{"inbox"}, `no identity file for "carol"`, "thrum quickstart --name carol")
	// THRUM_ROLE and --agent-id select too.
	var who map[string]any
	r = c.withEnv(map[string]string{"THRUM_ROLE": "reviewer"}, "--json", "agent", "whoami")
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &who) != nil || who["agent_id"] != "bob" {
		t.Errorf("THRUM_ROLE=reviewer whoami:\n%s", r)
	}
	contains(t, "--agent-id whoami", c.ok("", "--agent-id", "alice", "agent", "whoami").stdout, "Agent:   @alice")

	// Empty inbox.
	contains(t, "empty inbox", c.ok("alice", "inbox").stdout, "No messages addressed to @alice; thrum inbox --all lists all 0 messages\n")
	contains(t, "empty inbox --all", c.ok("alice", "inbox", "--all").stdout, "No messages in inbox.")

	// Usage errors of send, before anything is sent.
	c.fails(exitUsage, "alice", []string{"send", "x", "--scope", "module"}, `--scope "module": use type:value`)
	c.fails(exitUsage, "alice", []string{"send", "x", "--ref", ":42"}, "use type:value")
	c.fails(exitUsage, "alice", []string{"send", "x", "--priority", "urgent"}, "--priority", `"low","normal","high","critical"`, `"urgent"`)
	c.fails(exitUsage, "alice", []string{"send", "x", "--format", "html"}, "--format", `"markdown","plain","json"`)
	c.fails(exitUsage, "alice", []string{"send", "x", "--structured", "{not json"}, "--structured is not valid JSON")
	c.fails(exitUsage, "alice", []string{"frobnicate"}, "unexpected argument frobnicate")
	c.fails(exitUsage, "alice", []string{"inbox", "--page-size", "0"}, "--page-size 0")
	c.fails(exitError, "alice", []string{"send", "x", "--to", "@nobody"}, "unknown recipient @nobody", "see thrum agent list, thrum group list")

	// alice sends two messages to the reviewer.
	var sent map[string]any
	c.okJSON(&sent, "alice", "send", "Auth module complete, all tests passing",
		"--to", "@reviewer", "--scope", "module:auth", "--ref", "issue:beads-42", "--priority", "high",
		"--structured", `{"type":"test_result","passed":45,"failed":2}`)
	hasKeys(t, "send", sent, "message_id", "created_at", "recipients")
	m1 := str(sent, "message_id")
	if !strings.HasPrefix(m1, "msg_") {
		t.Fatalf("send --json message_id = %q", m1)
	}
	if rc, _ := sent["recipients"].([]any); len(rc) != 1 || str(rc[0], "address") != "reviewer" || str(rc[0], "kind") != "role" {
		t.Errorf("send --json recipients = %v", sent["recipients"])
	}
	r = c.ok("alice", "send", "Second note", "--to", "reviewer", "--format", "plain") // the @ is optional
	contains(t, "send", r.stdout, "> Message sent: msg_", "To @reviewer (role): bob (active)")
	m2 := idAfter(t, r.stdout, "> Message sent: ")

	// bob: --unread shows both and does not mark them read.
	for i := 0; i < 2; i++ {
		r = c.ok("bob", "inbox", "--unread")
		contains(t, "inbox --unread", r.stdout, "● "+m1+"  @alice  just now  [high]", "Auth module complete", "● "+m2+"  @alice",
			"Showing 1-2 of 2 messages (2 unread)")
		lacks(t, "inbox --unread", r.stdout, "○ ")
	}
	var inbox map[string]any
	c.okJSON(&inbox, "bob", "inbox", "--unread")
	hasKeys(t, "inbox", inbox, "messages", "total", "unread", "page", "page_size", "total_pages")
	if num(inbox, "total") != 2 || num(inbox, "unread") != 2 || num(inbox, "page") != 1 || num(inbox, "page_size") != 10 {
		t.Errorf("inbox --unread --json = %v", inbox)
	}
	// Filters.
	r = c.ok("bob", "inbox", "--scope", "module:auth", "--unread")
	contains(t, "inbox --scope", r.stdout, m1, "Showing 1-1 of 1 message (1 unread)")
	lacks(t, "inbox --scope", r.stdout, m2)
	r = c.ok("bob", "inbox", "--scope", "module:billing")
	contains(t, "inbox --scope (empty)", r.stdout, "No messages matching filter --scope module:billing\n",
		"Showing 0 of 2 total messages (filter: scope=module:billing, to you)\n")
	contains(t, "inbox --mentions", c.ok("bob", "inbox", "--mentions", "--unread").stdout, m1, m2)

	// A reply marks the original read.
	r = c.ok("bob", "reply", m1, "Looks good, merging now")
	reply := idAfter(t, r.stdout, "> Reply sent: ")
	contains(t, "reply", r.stdout, "> Reply sent: "+reply+"\n  In reply to: "+m1+"\n")
	r = c.ok("bob", "inbox", "--unread")
	contains(t, "inbox --unread after reply", r.stdout, m2, "(1 unread)")
	lacks(t, "inbox --unread after reply", r.stdout, m1)
	var rep map[string]any
	c.okJSON(&rep, "bob", "reply", m2, "Noted")
	hasKeys(t, "reply", rep, "message_id", "reply_to", "created_at")
	if rep["reply_to"] != m2 {
		t.Errorf("reply --json = %v", rep)
	}

	// inbox --mark-read marks what it shows read; then --unread is empty.
	c.okJSON(&inbox, "bob", "inbox", "--unread")
	if num(inbox, "total") != 0 {
		// bob's own replies count as read for bob.
		t.Errorf("bob has unread after replying to both: %v", inbox)
	}
	c.ok("alice", "send", "Third", "--to", "@bob")
	r = c.ok("bob", "inbox", "--mark-read")
	contains(t, "inbox", r.stdout, "● ", "(0 unread)", "> Marked 1 message as read\n")
	r = c.ok("bob", "inbox", "--unread")
	contains(t, "inbox --unread (empty)", r.stdout, "No messages matching filter --unread\n", "Showing 0 of 5 total messages (filter: to you, unread)\n")
	r = c.ok("bob", "inbox")
	lacks(t, "inbox after marking", r.stdout, "● ")
	contains(t, "inbox after marking", r.stdout, "(0 unread)")

	// alice sees bob's reply under her original, with ↳.
	r = c.ok("alice", "inbox")
	checkGrouped(t, r.stdout, m1, reply)
	contains(t, "alice inbox", r.stdout, "│   ↳ ● "+reply+"  @bob  just now", "Looks good, merging now")

	// message get shows the details and marks nothing read.
	c.ok("bob", "send", "ping", "--to", "@alice")
	r = c.ok("alice", "inbox", "--unread")
	ping := idAfter(t, r.stdout, "● ")
	r = c.ok("alice", "message", "get", m1)
	contains(t, "message get", r.stdout, "Message: "+m1+"\n", "  From:    @alice\n", "  Time:    just now\n",
		"  Priority: high\n", "  Scopes:  module:auth\n", "  Refs:    ", "issue:beads-42", "mention:reviewer",
		"\nAuth module complete, all tests passing\n", `Structured: {"type":"test_result","passed":45,"failed":2}`)
	lacks(t, "message get", r.stdout, "Edited:", "DELETED")
	var got map[string]any
	c.okJSON(&got, "alice", "message", "get", ping)
	hasKeys(t, "message get", got, "message.message_id", "message.author.agent_id", "message.author.session_id",
		"message.body.content", "message.scopes", "message.refs", "message.created_at", "message.deleted")
	if str(got, "message.author.agent_id") != "bob" || str(got, "message.body.content") != "ping" {
		t.Errorf("message get --json = %v", got)
	}
	contains(t, "inbox --unread after get", c.ok("alice", "inbox", "--unread").stdout, "● "+ping)

	// edit.
	r = c.ok("alice", "message", "edit", m1, "Auth module complete with rate limiting")
	contains(t, "edit", r.stdout, "> Message edited: "+m1+" (version 1)\n")
	var ed map[string]any
	c.okJSON(&ed, "alice", "message", "edit", m1, "Auth module complete with rate limiting, v2")
	hasKeys(t, "message edit", ed, "message_id", "updated_at", "version")
	if num(ed, "version") != 2 {
		t.Errorf("second edit --json = %v", ed)
	}
	r = c.ok("bob", "inbox", "--scope", "module:auth")
	matches(t, "inbox after edit", r.stdout, m1+"  @alice  "+recent+`  \[high\]  \(edited\)`, "rate limiting, v2")
	contains(t, "get after edit", c.ok("bob", "message", "get", m1).stdout, "  Edited:  just now (version 2)\n")
	c.fails(exitError, "bob", []string{"message", "edit", m1, "hijacked"}, "only message author can edit", m1, "alice")

	// delete.
	c.fails(exitUsage, "alice", []string{"message", "delete", m2}, "without --force")
	c.fails(exitError, "bob", []string{"message", "delete", m2, "--force"}, "only message author can delete")
	contains(t, "delete", c.ok("alice", "message", "delete", m2, "--force", "--reason", "obsolete").stdout, "> Message deleted: "+m2+"\n")
	lacks(t, "inbox after delete", c.ok("bob", "inbox").stdout, m2, "Second note")
	c.okJSON(&inbox, "bob", "inbox")
	for _, m := range inbox["messages"].([]any) {
		if str(m, "message_id") == m2 {
			t.Errorf("deleted message %s still in inbox", m2)
		}
	}
	contains(t, "get deleted", c.ok("bob", "message", "get", m2).stdout, "  Status:  DELETED just now (obsolete)\n", "Second note")
	c.okJSON(&got, "bob", "message", "get", m2)
	if got["message"].(map[string]any)["deleted"] != true {
		t.Errorf("message get --json of a deleted message = %v", got)
	}
	c.fails(exitError, "alice", []string{"message", "edit", m2, "again"}, "deleted")
	var del map[string]any
	c.okJSON(&del, "bob", "message", "delete", ping, "--force")
	if del["message_id"] != ping || str(del, "deleted_at") == "" {
		t.Errorf("message delete --json = %v", del)
	}

	// message read <id> and --all.
	var ids []string
	for _, s := range []string{"one", "two", "three"} {
		var m map[string]any
		c.okJSON(&m, "alice", "send", s, "--to", "@bob")
		ids = append(ids, str(m, "message_id"))
	}
	contains(t, "message read", c.ok("bob", "message", "read", ids[0]).stdout, "> Marked 1 message as read\n")
	r = c.ok("bob", "inbox", "--unread")
	contains(t, "unread after read", r.stdout, ids[1], ids[2], "(2 unread)")
	lacks(t, "unread after read", r.stdout, ids[0])
	contains(t, "message read --all", c.ok("bob", "message", "read", "--all").stdout, "> Marked 2 messages as read\n")
	contains(t, "message read --all (none)", c.ok("bob", "message", "read", "--all").stdout, "> No unread messages\n")
	var mr map[string]any
	c.okJSON(&mr, "bob", "message", "read", ids[1], ids[2])
	hasKeys(t, "message read", mr, "marked_count", "marked_ids")
	if mr["marked_count"] != 0.0 {
		t.Errorf("message read of messages read already: marked_count %v, want 0", mr["marked_count"])
	}
	// The count is of newly marked messages; unknown IDs
	// are an error naming them, and mark nothing.
	var fresh map[string]any
	c.okJSON(&fresh, "alice", "send", "four", "--to", "@bob")
	contains(t, "message read (one new, one old)", c.ok("bob", "message", "read", ids[0], str(fresh, "message_id")).stdout,
		"> Marked 1 message as read (1 read already)\n")
	c.fails(exitError, "bob", []string{"message", "read", ids[0], "msg_nope", "msg_gone"}, "unknown messages: msg_nope, msg_gone")
	c.fails(exitUsage, "bob", []string{"message", "read"}, "name message IDs, or pass --all")
	c.fails(exitError, "bob", []string{"message", "get", "msg_nope"}, "message not found: msg_nope")
	c.fails(exitError, "bob", []string{"reply", "msg_nope", "x"}, "message not found: msg_nope")

	// Groups.
	contains(t, "group create", c.ok("alice", "group", "create", "reviewers", "--description", "Code review team").stdout, "> Group created: @reviewers\n")
	contains(t, "group add", c.ok("alice", "group", "add", "reviewers", "@alice").stdout, "> Added agent alice to @reviewers\n")
	var ga map[string]any
	c.okJSON(&ga, "alice", "group", "add", "reviewers", "--role", "reviewer")
	if ga["group"] != "reviewers" || ga["member_type"] != "role" || ga["member_id"] != "reviewer" {
		t.Errorf("group add --role --json = %v", ga)
	}
	c.fails(exitUsage, "alice", []string{"group", "add", "reviewers", "@bob", "--role", "reviewer"}, "not both")
	// THRUM_ROLE in an agent's environment is not a member.
	r = c.withEnv(map[string]string{"THRUM_ROLE": "implementer"}, "group", "add", "reviewers", "@bob")
	if r.code != 0 || !strings.Contains(r.stdout, "> Added agent bob to @reviewers\n") {
		t.Errorf("group add @bob with THRUM_ROLE set:\n%s", r)
	}
	r = c.withEnv(map[string]string{"THRUM_ROLE": "implementer"}, "group", "remove", "reviewers", "@bob")
	if r.code != 0 || !strings.Contains(r.stdout, "> Removed agent bob from @reviewers\n") {
		t.Errorf("group remove @bob with THRUM_ROLE set:\n%s", r)
	}
	c.fails(exitUsage, "alice", []string{"group", "add", "reviewers"}, "name a member")
	r = c.ok("alice", "group", "list")
	matches(t, "group list", r.stdout, `(?m)^@everyone\s+2 \(all agents\)\s+`, `(?m)^@reviewers\s+2\s+Code review team$`)
	var gl map[string]any
	c.okJSON(&gl, "", "group", "list")
	found, everyone := false, false
	for _, g := range gl["groups"].([]any) {
		switch str(g, "name") {
		case "reviewers":
			found = num(g, "member_count") == 2 && str(g, "description") == "Code review team"
		case "everyone":
			everyone = num(g, "member_count") == 2 // the two agents
		}
	}
	if !found || !everyone {
		t.Errorf("group list --json = %v", gl)
	}
	r = c.ok("alice", "group", "info", "reviewers")
	contains(t, "group info", r.stdout, "Group: @reviewers\n", "  Description: Code review team\n", " by alice\n", "  Members:     @alice, role:reviewer\n")
	var gi map[string]any
	c.okJSON(&gi, "", "group", "info", "reviewers")
	hasKeys(t, "group info", gi, "name", "description", "created_at", "created_by", "members")
	r = c.ok("alice", "group", "members", "reviewers", "--expand")
	contains(t, "group members --expand", r.stdout, "Members of @reviewers: @alice, role:reviewer\n", "Reaches: alice, bob\n")
	r = c.ok("", "group", "members", "@everyone", "--expand")
	if r.stdout != "Members of @everyone: every agent\nReaches: alice, bob\n" {
		t.Errorf("group members @everyone --expand:\n%s", r)
	}
	// Two identities and none named: the owner manages groups.
	contains(t, "group create as the owner", c.ok("", "group", "create", "backend").stdout, "> Group created: @backend\n")
	contains(t, "group add as the owner", c.ok("", "group", "add", "backend", "--role", "reviewer").stdout, "> Added role reviewer to @backend\n")
	contains(t, "owner's group info", c.ok("", "group", "info", "backend").stdout, " by owner\n", "  Members:     role:reviewer\n")
	contains(t, "group delete as the owner", c.ok("", "group", "delete", "backend").stdout, "> Group deleted: @backend\n")
	var gm map[string]any
	c.okJSON(&gm, "", "group", "members", "everyone", "--expand")
	if ea, _ := gm["expanded_agents"].([]any); len(ea) != 2 {
		t.Errorf("group members everyone --expand --json = %v", gm)
	}
	c.okJSON(&sent, "alice", "send", "PR ready for review", "--to", "@reviewers")
	if rc, _ := sent["recipients"].([]any); len(rc) != 1 || str(rc[0], "kind") != "group" {
		t.Errorf("send --to @reviewers recipients = %v", sent["recipients"])
	}
	contains(t, "group remove", c.ok("alice", "group", "remove", "reviewers", "@alice").stdout, "> Removed agent alice from @reviewers\n")
	contains(t, "group members", c.ok("alice", "group", "members", "reviewers").stdout, "Members of @reviewers: role:reviewer\n")
	contains(t, "group remove --role", c.ok("alice", "group", "remove", "reviewers", "--role", "reviewer").stdout, "> Removed role reviewer from @reviewers\n")
	c.fails(exitError, "alice", []string{"group", "delete", "everyone"}, "everyone", "cannot be deleted")
	var gd map[string]any
	c.okJSON(&gd, "alice", "group", "delete", "reviewers")
	if gd["name"] != "reviewers" || gd["deleted"] != true {
		t.Errorf("group delete --json = %v", gd)
	}
	c.fails(exitError, "alice", []string{"group", "info", "reviewers"}, "group not found")

	// Threads.
	var th map[string]any
	c.okJSON(&th, "alice", "thread", "create", "Auth review", "--to", "@reviewer", "--message", "PR #42 is ready", "--scope", "module:auth")
	hasKeys(t, "thread create", th, "thread_id", "created_at", "message_id")
	tid := str(th, "thread_id")
	contains(t, "thread create", c.ok("alice", "thread", "create", "Empty thread").stdout, "> Thread created: thr_")
	c.fails(exitUsage, "alice", []string{"thread", "create", "x", "--to", "@bob"}, "--to and --message go together")
	r = c.ok("bob", "thread", "list")
	matches(t, "thread list", r.stdout, `(?m)^THREAD\s+TITLE\s+MESSAGES\s+UNREAD\s+LAST$`, `(?m)^`+tid+`\s+Auth review\s+1\s+`)
	contains(t, "thread list", r.stdout, "Showing page 1 of 1 (2 threads)")
	var tl map[string]any
	c.okJSON(&tl, "bob", "thread", "list", "--scope", "module:auth")
	if num(tl, "total") != 1 || str(tl["threads"].([]any)[0], "thread_id") != tid {
		t.Errorf("thread list --scope --json = %v", tl)
	}
	r = c.ok("bob", "thread", "get", tid)
	contains(t, "thread get", r.stdout, "Thread: "+tid+" — Auth review (by @alice)\n", "PR #42 is ready", "Showing 1-1 of 1 message")
	var tg map[string]any
	c.okJSON(&tg, "bob", "thread", "get", tid)
	if str(tg, "thread.title") != "Auth review" || len(tg["messages"].([]any)) != 1 {
		t.Errorf("thread get --json = %v", tg)
	}

	// Paging: the next-page hint repeats the filters and the page size.
	c.ok("alice", "send", "More on the review", "--thread", tid)
	r = c.ok("bob", "thread", "get", tid, "--page-size", "1")
	contains(t, "thread get --page-size 1", r.stdout, "Showing 1-1 of 2 messages", "Next page: thrum thread get "+tid+" --page-size 1 --page 2\n")
	r = c.ok("bob", "inbox", "--mentions", "--page-size", "1")
	contains(t, "inbox --page-size 1", r.stdout, "Showing 1-1 of ", "Next page: thrum inbox --page-size 1 --page 2\n")
	r = c.ok("bob", "inbox", "--all", "--page-size", "1")
	contains(t, "inbox --all --page-size 1", r.stdout, "Next page: thrum inbox --all --page-size 1 --page 2\n")
	contains(t, "inbox --page-size 2", c.ok("bob", "inbox", "--page-size", "2", "--page", "2").stdout, "Showing 3-4 of ", "Next page: thrum inbox --page-size 2 --page 3\n")
	// --quiet leaves out the hint, and the recipient lines of send.
	r = c.ok("bob", "inbox", "--page-size", "2", "--page", "2", "--quiet")
	contains(t, "inbox --quiet", r.stdout, "Showing 3-4 of ")
	lacks(t, "inbox --quiet", r.stdout, "Next page")
	lacks(t, "thread get --quiet", c.ok("bob", "thread", "get", tid, "--page-size", "1", "-q").stdout, "Next page")
	r = c.ok("alice", "send", "Quietly", "--to", "@reviewer", "--quiet")
	if !regexp.MustCompile(`^msg_\w+\n$`).MatchString(r.stdout) || r.stderr != "" {
		t.Errorf("send --quiet printed more than the ID:\n%s", r)
	}
	quiet := strings.TrimSpace(r.stdout)
	r = c.ok("bob", "reply", quiet, "Heard", "-q")
	if !regexp.MustCompile(`^msg_\w+\n$`).MatchString(r.stdout) || r.stderr != "" || strings.TrimSpace(r.stdout) == quiet {
		t.Errorf("reply --quiet printed more than the new ID:\n%s", r)
	}
	contains(t, "inbox past the end", c.ok("bob", "inbox", "--page-size", "100", "--page", "3").stdout, "No messages on page 3: there is 1 page.\n")

	// Agents.
	r = c.ok("", "agent", "list")
	matches(t, "agent list", r.stdout, `(?m)^AGENT\s+KIND\s+ROLE\s+MODULE\s+STATUS\s+LAST SEEN$`,
		`(?m)^@alice\s+agent\s+implementer\s+auth\s+active\s+`+recent+`$`, `(?m)^@bob\s+agent\s+reviewer\s+auth\s+active\s+`+recent+`$`)
	var al map[string]any
	c.okJSON(&al, "", "agent", "list", "--role", "reviewer")
	if ag, _ := al["agents"].([]any); len(ag) != 1 || str(ag[0], "agent_id") != "bob" {
		t.Errorf("agent list --role reviewer --json = %v", al)
	}
	r = c.ok("alice", "agent", "whoami")
	contains(t, "whoami", r.stdout, "Agent:   @alice\n", "  Role:    implementer\n", "  Module:  auth\n", "  Source:  environment\n", "  Session: ses_")
	c.okJSON(&who, "alice", "agent", "whoami")
	hasKeys(t, "whoami", who, "agent_id", "role", "module", "source", "session_id", "session_start")

	// Sessions.
	var sl map[string]any
	c.okJSON(&sl, "", "session", "list", "--active")
	if ss, _ := sl["sessions"].([]any); len(ss) != 2 {
		t.Errorf("session list --active --json = %v", sl)
	}
	matches(t, "session list", c.ok("", "session", "list").stdout, `(?m)^SESSION\s+AGENT\s+STATUS\s+STARTED\s+INTENT$`, `(?m)^ses_\w+\s+@alice\s+active\s+`+recent)
	contains(t, "session intent", c.ok("alice", "session", "intent", "Refactor login").stdout, "> Intent set: Refactor login\n")
	matches(t, "session list intent", c.ok("", "session", "list", "--agent", "alice").stdout, `(?m)^ses_\w+\s+@alice\s+active\s+`+recent+`\s+Refactor login$`)
	var si map[string]any
	c.okJSON(&si, "alice", "session", "intent")
	if si["intent"] != "" {
		t.Errorf("session intent (clear) --json = %v", si)
	}
	contains(t, "session task", c.ok("alice", "session", "task", "beads-42").stdout, "> Task set: beads-42\n")
	contains(t, "session task clear", c.ok("alice", "session", "task").stdout, "> Task cleared\n")
	var hb map[string]any
	c.okJSON(&hb, "alice", "session", "heartbeat", "--add-scope", "module:auth", "--add-ref", "issue:beads-42")
	hasKeys(t, "session heartbeat", hb, "session_id", "last_seen_at")
	c.fails(exitUsage, "alice", []string{"session", "heartbeat", "--add-scope", "auth"}, "use type:value")
	contains(t, "session heartbeat", c.ok("alice", "session", "heartbeat").stdout, "> Heartbeat: ses_")
	var se map[string]any
	c.okJSON(&se, "alice", "session", "end")
	hasKeys(t, "session end", se, "session_id", "ended_at", "duration_ms")
	c.fails(exitError, "alice", []string{"session", "end"}, "alice has no active session", "thrum session start")
	contains(t, "whoami without session", c.ok("alice", "agent", "whoami").stdout, "  Session: none")
	r = c.ok("alice", "session", "start")
	contains(t, "session start", r.stdout, "> Session started: ses_")
	contains(t, "session end", c.ok("alice", "session", "end", "--reason", "superseded").stdout, "> Session ended: ses_")
	c.fails(exitUsage, "alice", []string{"session", "end", "--reason", "bored"}, "--reason")
	var ss map[string]any
	c.okJSON(&ss, "alice", "session", "start")
	hasKeys(t, "session start", ss, "session_id", "agent_id", "started_at")

	// Sync is off without a remote: a state (exit 0), not a failure;
	// forcing a round is one.
	contains(t, "sync status", c.ok("", "sync", "status").stdout, "Sync: off")
	r = c.fails(exitError, "", []string{"--json", "sync", "force"})
	if err := json.Unmarshal([]byte(r.stderr), &jerr); err != nil || !strings.Contains(str(jerr, "error.message"), "sync is off") {
		t.Errorf("sync force --json error = %q", r.stderr)
	}

	// version.
	contains(t, "version", c.ok("", "version").stdout, "thrum "+thrum.Version+"\n")
	var ver map[string]any
	c.okJSON(&ver, "", "version")
	if ver["version"] != thrum.Version {
		t.Errorf("version --json = %v", ver)
	}

	// Stop; afterwards commands fail with exit 3 and the hint.
	var stop map[string]any
	c.okJSON(&stop, "", "daemon", "stop")
	if stop["stopped"] != true || num(stop, "pid") != pid {
		t.Errorf("daemon stop --json = %v (pid %v)", stop, pid)
	}
	if alive(int(pid)) && !zombie(int(pid)) {
		t.Errorf("daemon pid %v alive after daemon stop", pid)
	}
	for _, args := range [][]string{{"inbox"}, {"send", "hi"}, {"agent", "list"}, {"group", "list"}} {
		c.fails(exitNoDaemon, "alice", args, "no daemon is running for "+repo, "thrum daemon start")
	}
	r = c.fails(exitNoDaemon, "alice", []string{"--json", "inbox"})
	if err := json.Unmarshal([]byte(r.stderr), &jerr); err != nil || num(jerr, "error.code") != exitNoDaemon {
		t.Errorf("--json no-daemon error = %q", r.stderr)
	}
	c.fails(exitNoDaemon, "", []string{"daemon", "status"})
	contains(t, "daemon stop (stopped)", c.ok("", "daemon", "stop").stdout, "Daemon is not running\n")
}

// TestHelpEveryCommand runs --help on every command of the tree, found by
// walking kong's model (so a new command is covered without being listed
// here): each exits 0 and prints its usage, and every leaf command — one
// without subcommands — has an Examples section that runs it.
func TestHelpEveryCommand(t *testing.T) {
	t.Parallel()
	c := &thrumCLI{t: t, repo: t.TempDir()}
	parser, err := kong.New(&CLI{}, kong.Name("thrum"))
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	leaf := map[string]bool{}
	var walk func(n *kong.Node)
	walk = func(n *kong.Node) {
		for _, ch := range n.Children {
			if ch.Type == kong.CommandNode {
				paths = append(paths, ch.Path())
				leaf[ch.Path()] = true
				for _, g := range ch.Children {
					if g.Type == kong.CommandNode {
						leaf[ch.Path()] = false
					}
				}
				walk(ch)
			}
		}
	}
	walk(parser.Model.Node)
	leaves := 0
	for _, p := range paths {
		if leaf[p] {
			leaves++
		}
	}
	if leaves < 35 {
		t.Fatalf("found only %d leaf commands: %v", leaves, paths)
	}
	for _, p := range append([]string{""}, paths...) {
		args := append(strings.Fields(p), "--help")
		r := c.run(args...)
		if r.code != 0 {
			t.Errorf("want exit 0:\n%s", r)
			continue
		}
		contains(t, p+" --help", r.stdout, strings.TrimSpace("Usage: thrum "+p))
		_, examples, hasExamples := strings.Cut(r.stdout, "\nExamples:\n")
		examples, _, _ = strings.Cut(examples, "\nArguments:\n")
		examples, _, _ = strings.Cut(examples, "\nFlags:\n")
		if leaf[p] && !hasExamples {
			t.Errorf("%s --help has no Examples section:\n%s", p, r.stdout)
		}
		if hasExamples && !strings.Contains(examples, "thrum "+p+" ") && !strings.HasSuffix(strings.TrimSpace(examples), "thrum "+p) &&
			!strings.Contains(examples, "thrum "+p+"\n") {
			t.Errorf("%s --help: no example runs thrum %s:\n%s", p, p, r.stdout)
		}
		if strings.Contains(r.stdout, "Example:") {
			t.Errorf("%s --help: use the heading Examples:\n%s", p, r.stdout)
		}
		if r.stderr != "" {
			t.Errorf("%s --help wrote on stderr: %q", p, r.stderr)
		}
	}
	// -h too, and the bare program and a group without a subcommand are
	// usage errors.
	if r := c.run("send", "-h"); r.code != 0 || !strings.Contains(r.stdout, "Usage: thrum send [<message>]") {
		t.Errorf("send -h:\n%s", r)
	}
	c.fails(exitUsage, "", []string{"daemon"}, `expected one of "start"`)
	c.fails(exitUsage, "", []string{"send"}, "no message text")
}

// recent matches the relative time of something that happened during the
// test, even on a slow machine.
const recent = `(just now|\d+m ago)`

// idAfter returns the msg_ ID that follows prefix in s.
func idAfter(t testing.TB, s, prefix string) string {
	t.Helper()
	i := strings.Index(s, prefix)
	if i < 0 {
		t.Fatalf("no %q in:\n%s", prefix, s)
	}
	f := strings.Fields(s[i+len(prefix):])
	if len(f) == 0 || !strings.HasPrefix(f[0], "msg_") {
		t.Fatalf("no message ID after %q in:\n%s", prefix, s)
	}
	return f[0]
}

// matches fails the test unless s matches every regexp.
func matches(t testing.TB, what, s string, res ...string) {
	t.Helper()
	for _, re := range res {
		if !regexp.MustCompile(re).MatchString(s) {
			t.Errorf("%s does not match %s:\n%s", what, re, s)
		}
	}
}

// checkGrouped checks that in a rendered inbox the reply's ↳ line comes
// after the original's header, inside the same entry (no separator
// between them).
func checkGrouped(t testing.TB, out, original, reply string) {
	t.Helper()
	lines := strings.Split(out, "\n")
	orig, rep := -1, -1
	for i, l := range lines {
		switch {
		case strings.Contains(l, " "+original+" "):
			orig = i
		case strings.Contains(l, "↳ ") && strings.Contains(l, " "+reply+" "):
			rep = i
		}
	}
	if orig < 0 || rep < 0 || rep < orig {
		t.Errorf("reply %s is not under %s:\n%s", reply, original, out)
		return
	}
	for _, l := range lines[orig:rep] {
		if strings.HasPrefix(l, "├") {
			t.Errorf("reply %s is in another entry than %s:\n%s", reply, original, out)
		}
	}
}
