package thrum_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/identity"
	"github.com/thrumhq/thrum/internal/gitwork"
	"github.com/thrumhq/thrum/internal/thrumtest"
	"github.com/thrumhq/thrum/rpc"
)

func ptr[T any](v T) *T { return &v }

// thread.list's unread counts are the caller's, so
// without a caller it is refused (the spec's error), the same rule as
// message.list's unread and mentions filters; with one it counts.
func TestThreadListNeedsCaller(t *testing.T) {
	f := newFixture(t, nil)
	if _, err := f.n.CreateThread(f.as("alice"), &rpc.CreateThreadParams{Title: "t", Recipient: "@bob",
		Message: &rpc.ThreadMessage{Content: "hi"}}); err != nil {
		t.Fatal(err)
	}
	_, err := f.n.ListThreads(f.ctx, &rpc.ListThreadsParams{})
	wantCode(t, err, rpc.CodeUnauthenticated, "caller_agent_id")
	_, err = f.n.ListMessages(f.ctx, &rpc.ListMessagesParams{Unread: true})
	wantCode(t, err, rpc.CodeUnauthenticated, "caller_agent_id")
	for who, unread := range map[string]int{"alice": 0, "bob": 1} {
		l, err := f.n.ListThreads(f.as(who), &rpc.ListThreadsParams{})
		if err != nil || len(l.Threads) != 1 || l.Threads[0].UnreadCount != unread {
			t.Fatalf("thread.list as %s: %+v %v, want unread %d", who, l, err, unread)
		}
	}
}

// intent and current_task are required; leaving one out
// is -32602 and keeps the value, an explicit "" clears it. Checked in
// process and over the socket, where "absent" is a missing key.
func TestSetIntentTaskRequireTheField(t *testing.T) {
	d := startDaemon(t)
	ctx := thrum.AsAgent(t.Context(), "alice")
	ss, err := d.n.ListSessions(ctx, &rpc.ListSessionsParams{AgentID: "alice", ActiveOnly: true})
	if err != nil || len(ss.Sessions) != 1 {
		t.Fatalf("sessions: %+v %v", ss, err)
	}
	sid := ss.Sessions[0].SessionID
	if _, err := d.n.SetIntent(ctx, &rpc.SetIntentParams{SessionID: sid, Intent: ptr("refactor auth")}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.n.SetTask(ctx, &rpc.SetTaskParams{SessionID: sid, CurrentTask: ptr("beads:1")}); err != nil {
		t.Fatal(err)
	}
	_, err = d.n.SetIntent(ctx, &rpc.SetIntentParams{SessionID: sid})
	wantCode(t, err, rpc.CodeInvalidParams, "intent is required")
	_, err = d.n.SetTask(ctx, &rpc.SetTaskParams{SessionID: sid})
	wantCode(t, err, rpc.CodeInvalidParams, "current_task is required")

	c := d.unix(t, nil)
	for _, tt := range []struct{ method, params, msg string }{
		{rpc.MethodSessionSetIntent, `{"session_id":"` + sid + `","caller_agent_id":"alice"}`, "intent is required"},
		{rpc.MethodSessionSetIntent, `{"session_id":"` + sid + `","intent":null,"caller_agent_id":"alice"}`, "intent is required"},
		{rpc.MethodSessionSetTask, `{"session_id":"` + sid + `","caller_agent_id":"alice"}`, "current_task is required"},
	} {
		err := c.Call(t.Context(), tt.method, json.RawMessage(tt.params), nil)
		wantCode(t, err, rpc.CodeInvalidParams, tt.msg)
	}
	contexts := func() rpc.WorkContext {
		t.Helper()
		l, err := d.n.ListContext(ctx, &rpc.ListContextParams{AgentID: "alice"})
		if err != nil || len(l.Contexts) != 1 {
			t.Fatalf("contexts: %+v %v", l, err)
		}
		return l.Contexts[0]
	}
	if w := contexts(); w.Intent != "refactor auth" || w.CurrentTask != "beads:1" {
		t.Fatalf("a call without the field changed the session: %+v", w)
	}
	var ri rpc.SetIntentResult
	if err := c.Call(t.Context(), rpc.MethodSessionSetIntent, json.RawMessage(`{"session_id":"`+sid+`","intent":"","caller_agent_id":"alice"}`), &ri); err != nil || ri.Intent != "" {
		t.Fatalf("clear intent: %+v %v", ri, err)
	}
	if _, err := d.n.SetTask(ctx, &rpc.SetTaskParams{SessionID: sid, CurrentTask: ptr("")}); err != nil {
		t.Fatal(err)
	}
	if w := contexts(); w.Intent != "" || w.CurrentTask != "" {
		t.Fatalf("an explicit empty string did not clear: %+v", w)
	}
}

// re_register is "the same agent returning"; with another
// role it is refused and does not act like force: the holder keeps its
// role and its token.
func TestReRegisterIsNotForce(t *testing.T) {
	f := newFixture(t, nil)
	first, err := f.n.RegisterAgent(f.ctx, &rpc.RegisterAgentParams{Name: "dan", Role: "tester", Module: "qa"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.n.RegisterAgent(f.ctx, &rpc.RegisterAgentParams{Name: "dan", Role: "lead", Module: "qa", ReRegister: true})
	wantCode(t, err, rpc.CodeConflict, "registered as tester/qa")
	if id, err := f.n.Authenticate(f.ctx, first.Token); err != nil || id != "dan" {
		t.Fatalf("the holder's token stopped working: %q %v", id, err)
	}
	l, _ := f.n.ListAgents(f.ctx, &rpc.ListAgentsParams{Role: "lead"})
	if len(l.Agents) != 0 {
		t.Fatalf("re_register changed the role: %+v", l.Agents)
	}
	again, err := f.n.RegisterAgent(f.ctx, &rpc.RegisterAgentParams{Name: "dan", Role: "tester", Module: "qa", ReRegister: true})
	if err != nil || again.Status != "updated" {
		t.Fatalf("re_register of the same agent: %+v %v", again, err)
	}
}

// structured is a typed payload object. message.send,
// thread.create's message and message.edit refuse any other JSON value.
func TestStructuredMustBeAnObject(t *testing.T) {
	f := newFixture(t, nil)
	m := f.send("alice", rpc.SendMessageParams{Content: "x", Structured: json.RawMessage(` {"ok":true} `)})
	for _, tt := range []struct{ raw, kind string }{
		{`"just a string"`, "a string"}, {`[1,2]`, "an array"}, {`42`, "a number"}, {`true`, "a boolean"},
	} {
		raw := json.RawMessage(tt.raw)
		_, err := f.n.SendMessage(f.as("alice"), &rpc.SendMessageParams{Content: "x", Structured: raw})
		wantCode(t, err, rpc.CodeInvalidParams, "structured must be a JSON object")
		wantCode(t, err, rpc.CodeInvalidParams, tt.kind)
		_, err = f.n.CreateThread(f.as("alice"), &rpc.CreateThreadParams{Title: "t", Recipient: "@bob",
			Message: &rpc.ThreadMessage{Content: "x", Structured: raw}})
		wantCode(t, err, rpc.CodeInvalidParams, "structured must be a JSON object")
		_, err = f.n.EditMessage(f.as("alice"), &rpc.EditMessageParams{MessageID: m.MessageID, Structured: raw})
		wantCode(t, err, rpc.CodeInvalidParams, "structured must be a JSON object")
	}
	if l, _ := f.n.ListThreads(f.as("alice"), &rpc.ListThreadsParams{}); l.Total != 0 {
		t.Fatalf("a refused first message left a thread: %+v", l)
	}
	// null means none, over the wire too.
	d := startDaemon(t)
	c := d.unix(t, nil)
	var r rpc.SendMessageResult
	if err := c.Call(t.Context(), rpc.MethodMessageSend, json.RawMessage(`{"content":"x","structured":null,"caller_agent_id":"alice"}`), &r); err != nil {
		t.Fatal(err)
	}
	err := c.Call(t.Context(), rpc.MethodMessageSend, json.RawMessage(`{"content":"x","structured":"{\"a\":1}","caller_agent_id":"alice"}`), nil)
	wantCode(t, err, rpc.CodeInvalidParams, "structured must be a JSON object")
}

// agent.cleanup never removes an agent that is active or
// whose identity file is in any worktree's identity directory (the binary
// lists them through Options.IdentityDirs), and says why each orphan is
// one.
func TestCleanupSparesOtherWorktreesAndSaysWhy(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	mainIDs, featIDs := t.TempDir(), t.TempDir()
	// The node records work context only in worktrees of its own
	// repository, so frank's worktree is one of them.
	repo := thrumtest.GitRepo(t)
	var offset time.Duration
	var dirsErr error
	opts := &thrum.Options{
		GitRepo:      gitwork.New(repo),
		IdentityDir:  mainIDs,
		IdentityDirs: func(context.Context) ([]string, error) { return []string{mainIDs, featIDs}, dirsErr },
		Now:          func() time.Time { return time.Now().Add(offset) },
	}
	f := newFixture(t, opts) // alice, bob, carol: registered over RPC, no files
	identity.Save(mainIDs, &identity.File{Name: "alice", AgentID: "alice", Role: "implementer", Module: "auth"})
	identity.Save(featIDs, &identity.File{Name: "dan", AgentID: "dan", Role: "tester", Module: "qa"})
	os.WriteFile(filepath.Join(featIDs, "erin.json"), []byte("{not json"), 0o600) // still names erin
	thrumtest.Register(t, f.n, "dan", "tester", "qa")
	thrumtest.Register(t, f.n, "erin", "tester", "ui")

	// frank worked in a worktree that has since been removed.
	wt := filepath.Join(t.TempDir(), "gone")
	thrumtest.Git(t, repo, "worktree", "add", "-q", "--detach", wt)
	frank := thrumtest.Register(t, f.n, "frank", "tester", "core").ID
	s, err := f.n.StartSession(f.ctx, &rpc.StartSessionParams{AgentID: frank, Refs: []rpc.Pair{{Type: rpc.RefWorktree, Value: wt}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.n.Heartbeat(f.ctx, &rpc.HeartbeatParams{SessionID: s.SessionID}); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(wt); err != nil {
		t.Fatal(err)
	}

	// Everyone is active: no orphans, not even agents without a file.
	c, err := f.n.CleanupAgents(f.ctx, &rpc.CleanupAgentsParams{Force: true})
	if err != nil || len(c.Orphans) != 0 || len(c.Deleted) != 0 {
		t.Fatalf("cleanup while everyone is active: %+v %v", c, err)
	}

	// An hour on, nobody is active and nobody is stale: only frank, whose
	// worktree is gone, is an orphan.
	offset = time.Hour
	c, err = f.n.CleanupAgents(f.ctx, &rpc.CleanupAgentsParams{DryRun: true})
	if err != nil || len(c.Orphans) != 1 || c.Orphans[0].AgentID != "frank" || !c.Orphans[0].WorktreeMissing ||
		c.Orphans[0].Reason != "no identity file in any worktree; worktree "+wt+" is gone; days idle: 0" {
		t.Fatalf("dry run an hour on: %+v %v", c, err)
	}

	// If the worktrees cannot be listed, cleanup refuses rather than guess.
	offset = 40 * 24 * time.Hour
	dirsErr = errors.New("git worktree list: exit status 128")
	if _, err := f.n.CleanupAgents(f.ctx, &rpc.CleanupAgentsParams{Force: true}); !errors.Is(err, thrum.ErrInternal) {
		t.Fatalf("cleanup without the worktree list: %v", err)
	}
	dirsErr = nil

	// 40 days on: everyone is stale, but alice (main worktree), dan
	// (feature worktree) and erin (a file that does not parse, named
	// after her) keep their identities and stay.
	c, err = f.n.CleanupAgents(f.ctx, &rpc.CleanupAgentsParams{Force: true})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, o := range c.Orphans {
		got[o.AgentID] = o.Reason
	}
	want := map[string]string{
		"bob":   "no identity file in any worktree; days idle: 40",
		"carol": "no identity file in any worktree; days idle: 40",
		"frank": "no identity file in any worktree; worktree " + wt + " is gone; days idle: 40",
	}
	if !reflect.DeepEqual(got, want) || strings.Join(c.Deleted, ",") != "bob,carol,frank" {
		t.Fatalf("forced cleanup 40 days on: orphans %v deleted %v", got, c.Deleted)
	}
	l, _ := f.n.ListAgents(f.ctx, &rpc.ListAgentsParams{})
	var left []string
	for _, a := range l.Agents {
		left = append(left, a.AgentID)
	}
	if strings.Join(left, ",") != "alice,dan,erin" {
		t.Fatalf("agents after cleanup: %v", left)
	}

	// agent.delete removes the identity file from whichever worktree
	// holds it.
	if _, err := f.n.DeleteAgent(f.ctx, &rpc.DeleteAgentParams{Name: "dan"}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(identity.Path(featIDs, "dan")); !os.IsNotExist(err) {
		t.Fatalf("dan's identity file in the feature worktree remains: %v", err)
	}
}

// Refreshing for an unknown recipient, the library's half: a send naming a recipient nobody
// here has calls Options.Refresh once, bounded, and then looks again.
func TestUnknownRecipientRefreshesOnce(t *testing.T) {
	var n *thrum.Node
	var calls atomic.Int32
	var mode atomic.Value // "register", "fail" or "hang"
	mode.Store("register")
	opts := &thrum.Options{
		RefreshTimeout: 200 * time.Millisecond,
		Refresh: func(ctx context.Context) error {
			calls.Add(1)
			switch mode.Load() {
			case "register": // what a sync would bring: dan, registered on another clone
				_, err := n.RegisterAgent(ctx, &rpc.RegisterAgentParams{Name: "dan", Role: "tester", Module: "qa"})
				return err
			case "hang":
				<-ctx.Done()
				return ctx.Err()
			}
			return errors.New("fetch: remote unreachable")
		},
	}
	f := newFixture(t, opts)
	n = f.n

	// Known recipients never refresh.
	f.send("alice", rpc.SendMessageParams{Content: "hi", Mentions: []string{"@bob"}})
	if c := calls.Load(); c != 0 {
		t.Fatalf("a send to a known recipient refreshed %d times", c)
	}
	r := f.send("alice", rpc.SendMessageParams{Content: "welcome", Mentions: []string{"@bob", "@dan"}})
	if c := calls.Load(); c != 1 || len(r.Recipients) != 2 || r.Recipients[1].Agents[0] != "dan" {
		t.Fatalf("send to dan after a refresh: %d refreshes, %+v", c, r.Recipients)
	}
	// thread.create's recipient takes the same path.
	mode.Store("fail")
	_, err := f.n.CreateThread(f.as("alice"), &rpc.CreateThreadParams{Title: "t", Recipient: "@ghost", Message: &rpc.ThreadMessage{Content: "x"}})
	wantCode(t, err, rpc.CodeNotFound, "unknown recipient @ghost")
	if c := calls.Load(); c != 2 {
		t.Fatalf("refreshes after thread.create to a ghost: %d", c)
	}
	// Two unknown names: one refresh. A refresh that hangs is cut at
	// RefreshTimeout and the clear error stays.
	mode.Store("hang")
	start := time.Now()
	_, err = f.n.SendMessage(f.as("alice"), &rpc.SendMessageParams{Content: "x", Mentions: []string{"@nobody", "@noone"}})
	wantCode(t, err, rpc.CodeNotFound, "unknown recipient @nobody")
	if c := calls.Load(); c != 3 {
		t.Fatalf("refreshes for two unknown names: %d, want one more", c-2)
	}
	t.Logf("a send with a hanging refresh took %v (RefreshTimeout 200ms)", time.Since(start).Round(time.Millisecond))
}
