package thrum_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/identity"
	"github.com/thrumhq/thrum/internal/gitwork"
	"github.com/thrumhq/thrum/internal/thrumtest"
	"github.com/thrumhq/thrum/rpc"
)

// fixture is a node with agents alice (implementer), bob (reviewer) and
// carol (reviewer), each with a session.
type fixture struct {
	t   *testing.T
	n   *thrum.Node
	dir string
	ctx context.Context
}

func newFixture(t *testing.T, opts *thrum.Options) *fixture {
	t.Helper()
	n := thrumtest.OpenNode(t, opts)
	f := &fixture{t: t, n: n, dir: n.Dir(), ctx: context.Background()}
	thrumtest.Register(t, n, "alice", "implementer", "auth")
	thrumtest.Register(t, n, "bob", "reviewer", "auth")
	thrumtest.Register(t, n, "carol", "reviewer", "ui")
	return f
}

func (f *fixture) as(id string) context.Context { return thrum.AsAgent(f.ctx, id) }

func (f *fixture) send(from string, p rpc.SendMessageParams) *rpc.SendMessageResult {
	f.t.Helper()
	r, err := f.n.SendMessage(f.as(from), &p)
	if err != nil {
		f.t.Fatalf("send from %s %+v: %v", from, p, err)
	}
	return r
}

func (f *fixture) list(as string, p rpc.ListMessagesParams) *rpc.ListMessagesResult {
	f.t.Helper()
	ctx := f.ctx
	if as != "" {
		ctx = f.as(as)
	}
	r, err := f.n.ListMessages(ctx, &p)
	if err != nil {
		f.t.Fatalf("list as %s %+v: %v", as, p, err)
	}
	return r
}

func ids(ms []rpc.MessageSummary) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Body.Content
	}
	return out
}

// wantCode checks err is an *rpc.Error with code, whose message contains
// want.
func wantCode(t *testing.T, err error, code int, want string) {
	t.Helper()
	var re *rpc.Error
	if !errors.As(err, &re) {
		t.Fatalf("err = %v (%T), want *rpc.Error %d %q", err, err, code, want)
	}
	if re.Code != code || !strings.Contains(re.Message, want) {
		t.Fatalf("err = %d %q, want %d containing %q", re.Code, re.Message, code, want)
	}
}

func TestRegisterAgent(t *testing.T) {
	f := newFixture(t, nil)
	tests := []struct {
		name       string
		p          rpc.RegisterAgentParams
		wantStatus string
		wantID     string
		code       int
		msg        string
	}{
		{"new named", rpc.RegisterAgentParams{Name: "dave", Role: "tester", Module: "qa"}, "registered", "dave", 0, ""},
		{"same agent returns", rpc.RegisterAgentParams{Name: "alice", Role: "implementer", Module: "auth", Display: "Alice"}, "updated", "alice", 0, ""},
		{"other agent same name", rpc.RegisterAgentParams{Name: "bob", Role: "implementer", Module: "auth"}, "conflict", "bob", 0, ""},
		{"force takes over", rpc.RegisterAgentParams{Name: "carol", Role: "lead", Module: "ui", Force: true}, "updated", "carol", 0, ""},
		{"re_register same agent", rpc.RegisterAgentParams{Name: "carol", Role: "lead", Module: "ui", ReRegister: true}, "updated", "carol", 0, ""},
		{"re_register other role is not force", rpc.RegisterAgentParams{Name: "carol", Role: "reviewer", Module: "ui", ReRegister: true}, "", "", rpc.CodeConflict, "registered as lead/ui"},
		{"re_register other module is not force", rpc.RegisterAgentParams{Name: "carol", Role: "lead", Module: "core", ReRegister: true}, "", "", rpc.CodeConflict, "use force"},
		{"unnamed gets derived id", rpc.RegisterAgentParams{Role: "planner", Module: "core"}, "registered", identity.AgentID("", "planner", "core", ""), 0, ""},
		{"missing role", rpc.RegisterAgentParams{Name: "x", Module: "m"}, "", "", rpc.CodeInvalidParams, "role is required"},
		{"missing module", rpc.RegisterAgentParams{Name: "x", Role: "r"}, "", "", rpc.CodeInvalidParams, "module is required"},
		{"bad name", rpc.RegisterAgentParams{Name: "Bob", Role: "r", Module: "m"}, "", "", rpc.CodeInvalidParams, "use a-z, 0-9 and _"},
		{"reserved name", rpc.RegisterAgentParams{Name: "daemon", Role: "r", Module: "m"}, "", "", rpc.CodeInvalidParams, "reserved"},
		{"name equals role", rpc.RegisterAgentParams{Name: "reviewer", Role: "reviewer", Module: "m"}, "", "", rpc.CodeInvalidParams, "equals its role"},
		{"bad role", rpc.RegisterAgentParams{Name: "x", Role: "Re-viewer", Module: "m"}, "", "", rpc.CodeInvalidParams, "role"},
		{"name taken by group", rpc.RegisterAgentParams{Name: "everyone", Role: "r", Module: "m"}, "", "", rpc.CodeConflict, "group"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := f.n.RegisterAgent(f.ctx, &tt.p)
			if tt.code != 0 {
				wantCode(t, err, tt.code, tt.msg)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.Status != tt.wantStatus || r.AgentID != tt.wantID {
				t.Fatalf("got %s %s, want %s %s", r.AgentID, r.Status, tt.wantID, tt.wantStatus)
			}
			if tt.wantStatus == "conflict" {
				if r.Conflict == nil || r.Conflict.ExistingAgentID != tt.wantID || r.Conflict.RegisteredAt == "" || r.Token != "" {
					t.Fatalf("conflict = %+v token=%q", r.Conflict, r.Token)
				}
				return
			}
			id, err := f.n.Authenticate(f.ctx, r.Token)
			if err != nil || id != tt.wantID {
				t.Fatalf("token authenticates as %q, %v", id, err)
			}
		})
	}
	if _, err := f.n.Authenticate(f.ctx, "nope"); !errors.Is(err, thrum.ErrUnauthenticated) {
		t.Fatalf("bad token: %v", err)
	}
	list, err := f.n.ListAgents(f.ctx, &rpc.ListAgentsParams{Role: "reviewer"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range list.Agents {
		got = append(got, a.AgentID+":"+a.Status)
	}
	if strings.Join(got, ",") != "bob:active" { // carol was forced to lead, and re_register did not undo it
		t.Fatalf("reviewers = %v", got)
	}
}

func TestAgentStatusWindow(t *testing.T) {
	var offset time.Duration
	f := newFixture(t, &thrum.Options{Now: func() time.Time { return time.Now().Add(offset) }})
	status := func() string {
		list, err := f.n.ListAgents(f.ctx, &rpc.ListAgentsParams{Role: "implementer"})
		if err != nil || len(list.Agents) != 1 {
			t.Fatalf("list: %+v %v", list, err)
		}
		return list.Agents[0].Status
	}
	if got := status(); got != "active" {
		t.Fatalf("fresh agent is %s", got)
	}
	offset = 2 * time.Minute
	if got := status(); got != "offline" {
		t.Fatalf("agent silent for 2 minutes is %s", got)
	}
}

func TestSessions(t *testing.T) {
	f := newFixture(t, nil)
	old, _ := f.n.ListSessions(f.ctx, &rpc.ListSessionsParams{AgentID: "alice", ActiveOnly: true})
	if len(old.Sessions) != 1 {
		t.Fatalf("alice has %d active sessions", len(old.Sessions))
	}
	// Starting again recovers the orphaned session.
	s, err := f.n.StartSession(f.ctx, &rpc.StartSessionParams{AgentID: "alice", Scopes: []rpc.Pair{{Type: "module", Value: "auth"}}})
	if err != nil {
		t.Fatal(err)
	}
	all, _ := f.n.ListSessions(f.ctx, &rpc.ListSessionsParams{AgentID: "alice"})
	if len(all.Sessions) != 2 || all.Sessions[0].SessionID != s.SessionID || all.Sessions[1].Status != "ended" || all.Sessions[1].EndReason != "superseded" {
		t.Fatalf("sessions after restart: %+v", all.Sessions)
	}
	if _, err := f.n.SetIntent(f.ctx, &rpc.SetIntentParams{SessionID: s.SessionID, Intent: ptr("Refactoring auth")}); err != nil {
		t.Fatal(err)
	}
	if r, err := f.n.SetTask(f.ctx, &rpc.SetTaskParams{SessionID: s.SessionID, CurrentTask: ptr("beads:x")}); err != nil || r.CurrentTask != "beads:x" || r.TaskUpdatedAt == "" {
		t.Fatalf("set task: %+v %v", r, err)
	}
	hb, err := f.n.Heartbeat(f.ctx, &rpc.HeartbeatParams{SessionID: s.SessionID, AddRefs: []rpc.Pair{{Type: "issue", Value: "1"}}})
	if err != nil || hb.LastSeenAt == "" {
		t.Fatalf("heartbeat: %+v %v", hb, err)
	}
	ctxs, _ := f.n.ListContext(f.ctx, &rpc.ListContextParams{AgentID: "alice"})
	if len(ctxs.Contexts) != 1 || ctxs.Contexts[0].Intent != "Refactoring auth" || ctxs.Contexts[0].CurrentTask != "beads:x" {
		t.Fatalf("contexts: %+v", ctxs.Contexts)
	}
	end, err := f.n.EndSession(f.ctx, &rpc.EndSessionParams{SessionID: s.SessionID})
	if err != nil || end.DurationMs < 0 || end.EndedAt == "" {
		t.Fatalf("end: %+v %v", end, err)
	}

	tests := []struct {
		name string
		call func() error
		code int
		msg  string
	}{
		{"start without agent", func() error { _, err := f.n.StartSession(f.ctx, &rpc.StartSessionParams{}); return err }, rpc.CodeInvalidParams, "agent_id is required"},
		{"start unknown agent", func() error {
			_, err := f.n.StartSession(f.ctx, &rpc.StartSessionParams{AgentID: "zed"})
			return err
		}, rpc.CodeNotFound, "agent not found"},
		{"start for another agent", func() error {
			_, err := f.n.StartSession(f.as("bob"), &rpc.StartSessionParams{AgentID: "alice"})
			return err
		}, rpc.CodeForbidden, "may not start"},
		{"end without id", func() error { _, err := f.n.EndSession(f.ctx, &rpc.EndSessionParams{}); return err }, rpc.CodeInvalidParams, "session_id is required"},
		{"end unknown", func() error {
			_, err := f.n.EndSession(f.ctx, &rpc.EndSessionParams{SessionID: "ses_nope"})
			return err
		}, rpc.CodeNotFound, "session not found"},
		{"end twice", func() error {
			_, err := f.n.EndSession(f.ctx, &rpc.EndSessionParams{SessionID: s.SessionID})
			return err
		}, rpc.CodeConflict, "session has already ended"},
		{"end bad reason", func() error {
			_, err := f.n.EndSession(f.ctx, &rpc.EndSessionParams{SessionID: s.SessionID, Reason: "bored"})
			return err
		}, rpc.CodeInvalidParams, "invalid reason"},
		{"heartbeat ended", func() error {
			_, err := f.n.Heartbeat(f.ctx, &rpc.HeartbeatParams{SessionID: s.SessionID})
			return err
		}, rpc.CodeConflict, "session has already ended"},
		{"heartbeat bad scope", func() error {
			_, err := f.n.Heartbeat(f.ctx, &rpc.HeartbeatParams{SessionID: s.SessionID, AddScopes: []rpc.Pair{{Type: "x"}}})
			return err
		}, rpc.CodeInvalidParams, "type and a value"},
		{"intent unknown", func() error {
			_, err := f.n.SetIntent(f.ctx, &rpc.SetIntentParams{SessionID: "ses_x", Intent: ptr("")})
			return err
		}, rpc.CodeNotFound, "session not found"},
		{"task without id", func() error { _, err := f.n.SetTask(f.ctx, &rpc.SetTaskParams{}); return err }, rpc.CodeInvalidParams, "session_id is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { wantCode(t, tt.call(), tt.code, tt.msg) })
	}
}

func TestHeartbeatExtractsGitContext(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	repo := thrumtest.GitRepo(t)
	git := func(args ...string) { t.Helper(); thrumtest.Git(t, repo, args...) }
	os.WriteFile(filepath.Join(repo, "a.go"), []byte("package a\n"), 0o644)
	git("add", ".")
	git("commit", "-qm", "base")
	git("checkout", "-qb", "feature")
	os.WriteFile(filepath.Join(repo, "b.go"), []byte("package a\n"), 0o644)
	git("add", ".")
	git("commit", "-qm", "add b")
	os.WriteFile(filepath.Join(repo, "c.go"), []byte("package a\n"), 0o644)

	f := newFixture(t, &thrum.Options{GitRepo: gitwork.New(repo)})
	s, _ := f.n.StartSession(f.ctx, &rpc.StartSessionParams{AgentID: "alice", Refs: []rpc.Pair{{Type: rpc.RefWorktree, Value: repo}}})
	if _, err := f.n.Heartbeat(f.ctx, &rpc.HeartbeatParams{SessionID: s.SessionID}); err != nil {
		t.Fatal(err)
	}
	r, err := f.n.ListContext(f.ctx, &rpc.ListContextParams{File: "c.go"})
	if err != nil || len(r.Contexts) != 1 {
		t.Fatalf("contexts for c.go: %+v %v", r, err)
	}
	c := r.Contexts[0]
	if c.Branch != "feature" || len(c.UnmergedCommits) != 1 || c.UnmergedCommits[0].Subject != "add b" ||
		strings.Join(c.UncommittedFiles, ",") != "c.go" || strings.Join(c.ChangedFiles, ",") != "b.go,c.go" || c.GitUpdatedAt == "" {
		t.Fatalf("context = %+v", c)
	}
	if r, _ := f.n.ListContext(f.ctx, &rpc.ListContextParams{Branch: "main"}); len(r.Contexts) != 0 {
		t.Fatalf("branch filter: %+v", r.Contexts)
	}
}

func TestSendErrors(t *testing.T) {
	f := newFixture(t, nil)
	if _, err := f.n.RegisterAgent(f.ctx, &rpc.RegisterAgentParams{Name: "idle", Role: "ops", Module: "m"}); err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", thrum.DefaultMaxContentBytes+1)
	tests := []struct {
		name string
		ctx  context.Context
		p    rpc.SendMessageParams
		code int
		msg  string
	}{
		{"no content", f.as("alice"), rpc.SendMessageParams{}, rpc.CodeInvalidParams, "content is required"},
		{"bad format", f.as("alice"), rpc.SendMessageParams{Content: "x", Format: "html"}, rpc.CodeInvalidParams, "invalid format"},
		{"bad priority", f.as("alice"), rpc.SendMessageParams{Content: "x", Priority: "urgent"}, rpc.CodeInvalidParams, "invalid priority"},
		{"bad structured", f.as("alice"), rpc.SendMessageParams{Content: "x", Structured: json.RawMessage(`{`)}, rpc.CodeInvalidParams, "structured"},
		{"too large", f.as("alice"), rpc.SendMessageParams{Content: big}, rpc.CodeLimitExceeded, "limit"},
		{"no caller", f.ctx, rpc.SendMessageParams{Content: "x"}, rpc.CodeUnauthenticated, "caller_agent_id"},
		{"unregistered caller", f.as("zed"), rpc.SendMessageParams{Content: "x"}, rpc.CodeNotFound, "not registered"},
		{"no session", f.as("idle"), rpc.SendMessageParams{Content: "x"}, rpc.CodeConflict, "no active session found"},
		{"unknown recipient", f.as("alice"), rpc.SendMessageParams{Content: "x", Mentions: []string{"@nobody"}}, rpc.CodeNotFound, "unknown recipient @nobody"},
		{"agent acting as", f.as("alice"), rpc.SendMessageParams{Content: "x", ActingAs: "bob"}, rpc.CodeForbidden, "only users can impersonate agents"},
		{"unknown thread", f.as("alice"), rpc.SendMessageParams{Content: "x", ThreadID: "thr_nope"}, rpc.CodeNotFound, "thread not found"},
		{"unknown reply_to", f.as("alice"), rpc.SendMessageParams{Content: "x", Refs: []rpc.Pair{{Type: "reply_to", Value: "msg_nope"}}}, rpc.CodeNotFound, "reply_to"},
		{"empty scope", f.as("alice"), rpc.SendMessageParams{Content: "x", Scopes: []rpc.Pair{{Type: "module"}}}, rpc.CodeInvalidParams, "type and a value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := f.n.SendMessage(tt.ctx, &tt.p)
			wantCode(t, err, tt.code, tt.msg)
		})
	}
}

func TestAddressingAndInbox(t *testing.T) {
	f := newFixture(t, nil)
	thrumtest.Register(t, f.n, "dave", "ops", "infra")
	if _, err := f.n.CreateGroup(f.as("alice"), &rpc.CreateGroupParams{Name: "backend"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.n.AddGroupMember(f.as("alice"), &rpc.GroupMembership{Group: "backend", MemberType: "role", MemberID: "reviewer"}); err != nil {
		t.Fatal(err)
	}
	toBob := f.send("alice", rpc.SendMessageParams{Content: "to bob", Mentions: []string{"@bob"}})
	toRole := f.send("alice", rpc.SendMessageParams{Content: "to reviewers", Mentions: []string{"reviewer"}, Scopes: []rpc.Pair{{Type: "module", Value: "auth"}}})
	toGroup := f.send("alice", rpc.SendMessageParams{Content: "to backend", Mentions: []string{"@backend"}, Priority: "high"})
	f.send("alice", rpc.SendMessageParams{Content: "to everyone", Mentions: []string{"@everyone"}})
	f.send("bob", rpc.SendMessageParams{Content: "bob to dave", Mentions: []string{"@dave"}, Refs: []rpc.Pair{{Type: "issue", Value: "42"}}})
	f.send("alice", rpc.SendMessageParams{Content: "legacy", Mentions: []string{"agent:ops:XYZ"}})

	if got := toRole.Recipients[0]; got.Kind != "role" || strings.Join(got.Agents, ",") != "bob,carol" || len(got.Active) != 2 {
		t.Fatalf("role recipients = %+v", got)
	}
	if got := toGroup.Recipients[0]; got.Kind != "group" || strings.Join(got.Agents, ",") != "bob,carol" {
		t.Fatalf("group recipients = %+v", got)
	}
	if got := toBob.Recipients[0]; got.Kind != "agent" {
		t.Fatalf("agent recipient = %+v", got)
	}

	tests := []struct {
		name string
		as   string
		p    rpc.ListMessagesParams
		want string // contents, newest first
	}{
		{"bob mentions", "bob", rpc.ListMessagesParams{Mentions: true}, "to everyone,to backend,to reviewers,to bob"},
		{"carol mentions", "carol", rpc.ListMessagesParams{Mentions: true}, "to everyone,to backend,to reviewers"},
		{"dave mentions", "dave", rpc.ListMessagesParams{Mentions: true}, "legacy,bob to dave,to everyone"},
		{"mention_role explicit", "", rpc.ListMessagesParams{MentionRole: "reviewer"}, "to everyone,to backend,to reviewers"},
		{"mention_role agent id", "", rpc.ListMessagesParams{MentionRole: "@bob"}, "to everyone,to backend,to reviewers,to bob"},
		{"scope", "", rpc.ListMessagesParams{Scope: &rpc.Pair{Type: "module", Value: "auth"}}, "to reviewers"},
		{"ref", "", rpc.ListMessagesParams{Ref: &rpc.Pair{Type: "issue", Value: "42"}}, "bob to dave"},
		{"author", "", rpc.ListMessagesParams{AuthorID: "bob"}, "bob to dave"},
		{"ascending page 2", "", rpc.ListMessagesParams{SortOrder: "asc", PageSize: 2, Page: 2}, "to backend,to everyone"},
		{"unread for carol", "", rpc.ListMessagesParams{UnreadForAgent: "carol", MentionRole: "carol"}, "to everyone,to backend,to reviewers"},
		{"all as alice, own are read", "alice", rpc.ListMessagesParams{Unread: true}, "bob to dave"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := f.list(tt.as, tt.p)
			if got := strings.Join(ids(r.Messages), ","); got != tt.want {
				t.Fatalf("got %s\nwant %s", got, tt.want)
			}
		})
	}

	// Read tracking: bob reads two, counts follow; carol sees bob as a co-reader.
	r := f.list("bob", rpc.ListMessagesParams{Mentions: true})
	if r.Total != 4 || r.Unread != 4 || r.TotalPages != 1 {
		t.Fatalf("bob before reading: total %d unread %d", r.Total, r.Unread)
	}
	// An unknown ID fails the call, names it, and marks nothing.
	_, err := f.n.MarkRead(f.as("bob"), &rpc.MarkReadParams{MessageIDs: []string{toBob.MessageID, "msg_unknown", "msg_gone"}})
	wantCode(t, err, rpc.CodeNotFound, "unknown messages: msg_unknown, msg_gone")
	mr, err := f.n.MarkRead(f.as("bob"), &rpc.MarkReadParams{MessageIDs: []string{toBob.MessageID, toRole.MessageID, toRole.MessageID}})
	if err != nil || mr.MarkedCount != 2 || strings.Join(mr.MarkedIDs, ",") != toBob.MessageID+","+toRole.MessageID {
		t.Fatalf("mark read: %+v %v", mr, err)
	}
	// Marking again claims nothing: the count is of newly marked messages.
	if mr, err := f.n.MarkRead(f.as("bob"), &rpc.MarkReadParams{MessageIDs: []string{toBob.MessageID}}); err != nil || mr.MarkedCount != 0 || len(mr.MarkedIDs) != 0 {
		t.Fatalf("mark read again: %+v %v", mr, err)
	}
	r = f.list("bob", rpc.ListMessagesParams{Mentions: true})
	if r.Unread != 2 || r.Total != 4 {
		t.Fatalf("bob after reading: total %d unread %d", r.Total, r.Unread)
	}
	if got := strings.Join(ids(f.list("bob", rpc.ListMessagesParams{Mentions: true, Unread: true}).Messages), ","); got != "to everyone,to backend" {
		t.Fatalf("bob unread = %s", got)
	}
	mr, _ = f.n.MarkRead(f.as("carol"), &rpc.MarkReadParams{MessageIDs: []string{toRole.MessageID}})
	if got := mr.AlsoReadBy[toRole.MessageID]; len(got) != 1 || got[0] != "bob" {
		t.Fatalf("also_read_by = %+v", mr.AlsoReadBy)
	}
	// Membership resolves at read time: carol leaves via role removal.
	if _, err := f.n.RemoveGroupMember(f.as("alice"), &rpc.GroupMembership{Group: "backend", MemberType: "role", MemberID: "reviewer"}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(ids(f.list("carol", rpc.ListMessagesParams{Mentions: true}).Messages), ","); got != "to everyone,to reviewers" {
		t.Fatalf("carol after group change = %s", got)
	}

	for _, bad := range []struct {
		p   rpc.ListMessagesParams
		as  string
		msg string
	}{
		{rpc.ListMessagesParams{SortBy: "author"}, "", "invalid sort_by"},
		{rpc.ListMessagesParams{SortOrder: "up"}, "", "invalid sort_order"},
		{rpc.ListMessagesParams{PageSize: 101}, "", "page_size"},
		{rpc.ListMessagesParams{Page: -1}, "", "page"},
	} {
		_, err := f.n.ListMessages(f.ctx, &bad.p)
		wantCode(t, err, rpc.CodeInvalidParams, bad.msg)
	}
	_, err = f.n.ListMessages(f.ctx, &rpc.ListMessagesParams{Mentions: true})
	wantCode(t, err, rpc.CodeUnauthenticated, "mentions")
	_, err = f.n.MarkRead(f.as("bob"), &rpc.MarkReadParams{})
	wantCode(t, err, rpc.CodeInvalidParams, "message_ids is required and must not be empty")
}

func TestEditDeleteGet(t *testing.T) {
	f := newFixture(t, nil)
	m := f.send("alice", rpc.SendMessageParams{Content: "v1", Structured: json.RawMessage(`{"k":1}`), Tags: []string{"t"}})
	newContent := "v2"
	e, err := f.n.EditMessage(f.as("alice"), &rpc.EditMessageParams{MessageID: m.MessageID, Content: &newContent})
	if err != nil || e.Version != 1 {
		t.Fatalf("edit: %+v %v", e, err)
	}
	e, err = f.n.EditMessage(f.as("alice"), &rpc.EditMessageParams{MessageID: m.MessageID, Structured: json.RawMessage(`{"k":2}`)})
	if err != nil || e.Version != 2 {
		t.Fatalf("edit structured: %+v %v", e, err)
	}
	g, err := f.n.GetMessage(f.as("bob"), &rpc.GetMessageParams{MessageID: m.MessageID})
	if err != nil {
		t.Fatal(err)
	}
	if g.Message.Body.Content != "v2" || g.Message.Body.Structured != `{"k":2}` || g.Message.Version != 2 || g.Message.UpdatedAt == "" ||
		g.Message.Author.AgentID != "alice" || g.Message.Author.SessionID == "" || g.Message.Tags[0] != "t" || g.Message.IsRead {
		t.Fatalf("get after edits: %+v", g.Message)
	}

	tests := []struct {
		name string
		call func() error
		code int
		msg  string
	}{
		{"edit no id", func() error { _, err := f.n.EditMessage(f.as("alice"), &rpc.EditMessageParams{}); return err }, rpc.CodeInvalidParams, "message_id is required"},
		{"edit nothing", func() error {
			_, err := f.n.EditMessage(f.as("alice"), &rpc.EditMessageParams{MessageID: m.MessageID})
			return err
		}, rpc.CodeInvalidParams, "at least one of content or structured must be provided"},
		{"edit unknown", func() error {
			_, err := f.n.EditMessage(f.as("alice"), &rpc.EditMessageParams{MessageID: "msg_x", Content: &newContent})
			return err
		}, rpc.CodeNotFound, "message not found"},
		{"edit by other", func() error {
			_, err := f.n.EditMessage(f.as("bob"), &rpc.EditMessageParams{MessageID: m.MessageID, Content: &newContent})
			return err
		}, rpc.CodeForbidden, "only message author can edit"},
		{"delete by other", func() error {
			_, err := f.n.DeleteMessage(f.as("bob"), &rpc.DeleteMessageParams{MessageID: m.MessageID})
			return err
		}, rpc.CodeForbidden, "only message author can delete"},
		{"delete without caller", func() error {
			_, err := f.n.DeleteMessage(f.ctx, &rpc.DeleteMessageParams{MessageID: m.MessageID})
			return err
		}, rpc.CodeUnauthenticated, "deleting a message needs the calling agent"},
		{"edit without caller", func() error {
			_, err := f.n.EditMessage(f.ctx, &rpc.EditMessageParams{MessageID: m.MessageID, Content: &newContent})
			return err
		}, rpc.CodeUnauthenticated, "editing a message needs the calling agent"},
		{"get no id", func() error { _, err := f.n.GetMessage(f.ctx, &rpc.GetMessageParams{}); return err }, rpc.CodeInvalidParams, "message_id is required"},
		{"get unknown", func() error {
			_, err := f.n.GetMessage(f.ctx, &rpc.GetMessageParams{MessageID: "msg_x"})
			return err
		}, rpc.CodeNotFound, "message not found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { wantCode(t, tt.call(), tt.code, tt.msg) })
	}

	d, err := f.n.DeleteMessage(f.as("alice"), &rpc.DeleteMessageParams{MessageID: m.MessageID, Reason: "obsolete"})
	if err != nil || d.DeletedAt == "" {
		t.Fatalf("delete: %+v %v", d, err)
	}
	_, err = f.n.DeleteMessage(f.as("alice"), &rpc.DeleteMessageParams{MessageID: m.MessageID})
	wantCode(t, err, rpc.CodeConflict, "message already deleted")
	_, err = f.n.EditMessage(f.as("alice"), &rpc.EditMessageParams{MessageID: m.MessageID, Content: &newContent})
	wantCode(t, err, rpc.CodeConflict, "cannot edit deleted message")
	g, _ = f.n.GetMessage(f.ctx, &rpc.GetMessageParams{MessageID: m.MessageID})
	if !g.Message.Deleted || g.Message.Metadata.DeleteReason != "obsolete" || g.Message.Metadata.DeletedAt == "" {
		t.Fatalf("deleted message: %+v", g.Message)
	}
	if r := f.list("", rpc.ListMessagesParams{}); r.Total != 0 {
		t.Fatalf("deleted message listed: %+v", r)
	}
	if r := f.list("", rpc.ListMessagesParams{IncludeDeleted: true}); r.Total != 1 {
		t.Fatalf("include_deleted: %+v", r)
	}
}

func TestThreads(t *testing.T) {
	f := newFixture(t, nil)
	th, err := f.n.CreateThread(f.as("alice"), &rpc.CreateThreadParams{Title: "Auth review", Recipient: "@bob",
		Message: &rpc.ThreadMessage{Content: "please look"}, Scopes: []rpc.Pair{{Type: "module", Value: "auth"}}})
	if err != nil || th.MessageID == "" {
		t.Fatalf("create: %+v %v", th, err)
	}
	bare, err := f.n.CreateThread(f.as("bob"), &rpc.CreateThreadParams{Title: "Empty"})
	if err != nil || bare.MessageID != "" {
		t.Fatalf("create bare: %+v %v", bare, err)
	}
	f.send("bob", rpc.SendMessageParams{Content: "looking now", ThreadID: th.ThreadID})
	l, err := f.n.ListThreads(f.as("alice"), &rpc.ListThreadsParams{})
	if err != nil || l.Total != 2 {
		t.Fatalf("list: %+v %v", l, err)
	}
	top := l.Threads[0]
	if top.ThreadID != th.ThreadID || top.MessageCount != 2 || top.UnreadCount != 1 || top.LastSender != "bob" ||
		top.Preview == nil || *top.Preview != "looking now" || top.CreatedBy != "alice" {
		t.Fatalf("thread summary: %+v", top)
	}
	if l.Threads[1].Preview != nil || l.Threads[1].MessageCount != 0 {
		t.Fatalf("empty thread summary: %+v", l.Threads[1])
	}
	if l, _ := f.n.ListThreads(f.as("bob"), &rpc.ListThreadsParams{Scope: &rpc.Pair{Type: "module", Value: "auth"}}); l.Total != 1 {
		t.Fatalf("scope filter: %+v", l)
	}
	g, err := f.n.GetThread(f.ctx, &rpc.GetThreadParams{ThreadID: th.ThreadID})
	if err != nil || g.Thread.Title != "Auth review" || strings.Join(ids(g.Messages), ",") != "please look,looking now" {
		t.Fatalf("get: %+v %v", g, err)
	}
	_, err = f.n.CreateThread(f.as("alice"), &rpc.CreateThreadParams{})
	wantCode(t, err, rpc.CodeInvalidParams, "title is required")
	_, err = f.n.CreateThread(f.as("alice"), &rpc.CreateThreadParams{Title: "x", Recipient: "bob"})
	wantCode(t, err, rpc.CodeInvalidParams, "recipient and message must both be provided or both be nil")
	_, err = f.n.GetThread(f.ctx, &rpc.GetThreadParams{})
	wantCode(t, err, rpc.CodeInvalidParams, "thread_id is required")
	_, err = f.n.GetThread(f.ctx, &rpc.GetThreadParams{ThreadID: "thr_x"})
	wantCode(t, err, rpc.CodeNotFound, "thread not found")
	// A failed first message creates no thread.
	_, err = f.n.CreateThread(f.as("alice"), &rpc.CreateThreadParams{Title: "x", Recipient: "@ghost", Message: &rpc.ThreadMessage{Content: "hi"}})
	wantCode(t, err, rpc.CodeNotFound, "unknown recipient")
	if l, _ := f.n.ListThreads(f.as("bob"), &rpc.ListThreadsParams{}); l.Total != 2 {
		t.Fatalf("failed create left a thread: %d", l.Total)
	}
}

// A mention of a group reaches whoever is in it when the inbox is read:
// a member added after the message finds it, with its counts, and one
// removed no longer does.
func TestGroupMentionReachesTheMembersOfTheListing(t *testing.T) {
	f := newFixture(t, nil)
	a := f.as("alice")
	if _, err := f.n.CreateGroup(a, &rpc.CreateGroupParams{Name: "backend"}); err != nil {
		t.Fatal(err)
	}
	carol := &rpc.GroupMembership{Group: "backend", MemberType: rpc.MemberAgent, MemberID: "carol"}
	bob := &rpc.GroupMembership{Group: "backend", MemberType: rpc.MemberAgent, MemberID: "bob"}
	if _, err := f.n.AddGroupMember(a, carol); err != nil {
		t.Fatal(err)
	}
	f.send("alice", rpc.SendMessageParams{Content: "to backend", Mentions: []string{"@backend"}})
	inbox := func(as string) (total, unread int) {
		r := f.list(as, rpc.ListMessagesParams{Mentions: true, Unread: true})
		return r.Total, r.Unread
	}
	if total, unread := inbox("bob"); total != 0 || unread != 0 {
		t.Fatalf("bob outside backend: %d/%d, want 0/0", total, unread)
	}
	if _, err := f.n.AddGroupMember(a, bob); err != nil {
		t.Fatal(err)
	}
	if total, unread := inbox("bob"); total != 1 || unread != 1 {
		t.Fatalf("bob added to backend: %d/%d, want 1/1", total, unread)
	}
	if _, err := f.n.RemoveGroupMember(a, carol); err != nil {
		t.Fatal(err)
	}
	if total, unread := inbox("carol"); total != 0 || unread != 0 {
		t.Fatalf("carol removed from backend: %d/%d, want 0/0", total, unread)
	}
}

func TestGroups(t *testing.T) {
	f := newFixture(t, nil)
	a := f.as("alice")
	if r, err := f.n.CreateGroup(a, &rpc.CreateGroupParams{Name: "@reviewers_team", Description: "Code review"}); err != nil || r.Name != "reviewers_team" {
		t.Fatalf("create: %+v %v", r, err)
	}
	f.n.AddGroupMember(a, &rpc.GroupMembership{Group: "reviewers_team", MemberType: "agent", MemberID: "@alice"})
	f.n.AddGroupMember(a, &rpc.GroupMembership{Group: "reviewers_team", MemberType: "role", MemberID: "reviewer"})
	info, err := f.n.GroupInfo(f.ctx, &rpc.GroupInfoParams{Name: "reviewers_team"})
	if err != nil || len(info.Members) != 2 || info.CreatedBy != "alice" || info.Description != "Code review" {
		t.Fatalf("info: %+v %v", info, err)
	}
	mem, _ := f.n.GroupMembers(f.ctx, &rpc.GroupMembersParams{Name: "reviewers_team", Expand: true})
	if strings.Join(mem.ExpandedAgents, ",") != "alice,bob,carol" {
		t.Fatalf("expanded: %+v", mem)
	}
	every, _ := f.n.GroupMembers(f.ctx, &rpc.GroupMembersParams{Name: "everyone", Expand: true})
	if strings.Join(every.ExpandedAgents, ",") != "alice,bob,carol" {
		t.Fatalf("everyone: %+v", every)
	}
	// everyone's member count is the number of agents it reaches.
	list, _ := f.n.ListGroups(f.ctx, &rpc.ListGroupsParams{})
	if len(list.Groups) != 2 || list.Groups[0].Name != "everyone" || list.Groups[0].MemberCount != 3 || list.Groups[1].MemberCount != 2 {
		t.Fatalf("list: %+v", list)
	}
	tests := []struct {
		name string
		call func() error
		code int
		msg  string
	}{
		{"create exists", func() error { _, err := f.n.CreateGroup(a, &rpc.CreateGroupParams{Name: "reviewers_team"}); return err }, rpc.CodeConflict, "already exists"},
		{"create agent name", func() error { _, err := f.n.CreateGroup(a, &rpc.CreateGroupParams{Name: "bob"}); return err }, rpc.CodeConflict, "agent"},
		{"create role name", func() error { _, err := f.n.CreateGroup(a, &rpc.CreateGroupParams{Name: "reviewer"}); return err }, rpc.CodeConflict, "role"},
		{"create bad name", func() error { _, err := f.n.CreateGroup(a, &rpc.CreateGroupParams{Name: "Bad Name"}); return err }, rpc.CodeInvalidParams, "group name"},
		{"create as unregistered", func() error { _, err := f.n.CreateGroup(f.as("zed"), &rpc.CreateGroupParams{Name: "x"}); return err }, rpc.CodeNotFound, "not registered"},
		{"delete everyone", func() error { _, err := f.n.DeleteGroup(a, &rpc.DeleteGroupParams{Name: "everyone"}); return err }, rpc.CodeForbidden, "cannot be deleted"},
		{"delete unknown", func() error { _, err := f.n.DeleteGroup(a, &rpc.DeleteGroupParams{Name: "nope"}); return err }, rpc.CodeNotFound, "group not found"},
		{"add unknown agent", func() error {
			_, err := f.n.AddGroupMember(a, &rpc.GroupMembership{Group: "reviewers_team", MemberType: "agent", MemberID: "zed"})
			return err
		}, rpc.CodeNotFound, "agent not found"},
		{"add twice", func() error {
			_, err := f.n.AddGroupMember(a, &rpc.GroupMembership{Group: "reviewers_team", MemberType: "role", MemberID: "reviewer"})
			return err
		}, rpc.CodeConflict, "already a member"},
		{"add bad type", func() error {
			_, err := f.n.AddGroupMember(a, &rpc.GroupMembership{Group: "reviewers_team", MemberType: "team", MemberID: "x"})
			return err
		}, rpc.CodeInvalidParams, "member_type"},
		{"add to everyone", func() error {
			_, err := f.n.AddGroupMember(a, &rpc.GroupMembership{Group: "everyone", MemberType: "role", MemberID: "x"})
			return err
		}, rpc.CodeForbidden, "everyone"},
		{"remove non-member", func() error {
			_, err := f.n.RemoveGroupMember(a, &rpc.GroupMembership{Group: "reviewers_team", MemberType: "agent", MemberID: "bob"})
			return err
		}, rpc.CodeNotFound, "not a member"},
		{"info unknown", func() error { _, err := f.n.GroupInfo(f.ctx, &rpc.GroupInfoParams{Name: "nope"}); return err }, rpc.CodeNotFound, "group not found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { wantCode(t, tt.call(), tt.code, tt.msg) })
	}
	if r, err := f.n.DeleteGroup(a, &rpc.DeleteGroupParams{Name: "reviewers_team"}); err != nil || !r.Deleted {
		t.Fatalf("delete: %+v %v", r, err)
	}
	_, err = f.n.SendMessage(a, &rpc.SendMessageParams{Content: "x", Mentions: []string{"@reviewers_team"}})
	wantCode(t, err, rpc.CodeNotFound, "unknown recipient")
}

func TestSubscriptionsAndNotifications(t *testing.T) {
	f := newFixture(t, nil)
	l := f.n.Listen(0)
	defer l.Close()
	bob := f.as("bob")
	scope, err := f.n.Subscribe(bob, l, &rpc.SubscribeParams{Scope: &rpc.Pair{Type: "module", Value: "auth"}})
	if err != nil {
		t.Fatal(err)
	}
	mention, _ := f.n.Subscribe(bob, l, &rpc.SubscribeParams{MentionRole: "@reviewer"})
	all, _ := f.n.Subscribe(bob, l, &rpc.SubscribeParams{All: true})
	subs, _ := f.n.ListSubscriptions(f.as("bob"), &rpc.ListSubscriptionsParams{})
	if len(subs.Subscriptions) != 3 || subs.Subscriptions[0].ScopeType != "module" || subs.Subscriptions[1].MentionRole != "reviewer" || !subs.Subscriptions[2].All {
		t.Fatalf("subscriptions: %+v", subs)
	}
	m := f.send("alice", rpc.SendMessageParams{Content: strings.Repeat("é", 150), Mentions: []string{"@backend_missing_is_not_used"}[:0], Scopes: []rpc.Pair{{Type: "module", Value: "auth"}}})
	f.send("alice", rpc.SendMessageParams{Content: "to reviewers", Mentions: []string{"@reviewer"}})
	f.send("bob", rpc.SendMessageParams{Content: "own message wakes nobody", Mentions: []string{"@reviewer"}})

	want := []struct {
		sub   int64
		match string
	}{{scope.SubscriptionID, "scope"}, {all.SubscriptionID, "all"}, {mention.SubscriptionID, "mention"}, {all.SubscriptionID, "all"}}
	for i, w := range want {
		select {
		case nt := <-l.C():
			if nt.MatchedSubscription.SubscriptionID != w.sub || nt.MatchedSubscription.MatchType != w.match {
				t.Fatalf("notification %d: %+v, want %+v", i, nt.MatchedSubscription, w)
			}
			if i == 0 {
				if nt.MessageID != m.MessageID || nt.Author.AgentID != "alice" || nt.Author.Role != "implementer" || nt.Author.Module != "auth" ||
					len([]rune(nt.Preview)) != 100 || len(nt.Scopes) != 1 || nt.Timestamp == "" {
					t.Fatalf("notification: %+v", nt)
				}
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("notification %d never arrived", i)
		}
	}
	select {
	case nt := <-l.C():
		t.Fatalf("unexpected notification %+v", nt)
	default:
	}
	// Edits notify too.
	c := "edited"
	f.n.EditMessage(f.as("alice"), &rpc.EditMessageParams{MessageID: m.MessageID, Content: &c})
	if nt := <-l.C(); nt.MessageID != m.MessageID || nt.Preview != "edited" {
		t.Fatalf("edit notification: %+v", nt)
	}
	<-l.C() // the all subscription
	if r, _ := f.n.Unsubscribe(f.as("bob"), &rpc.UnsubscribeParams{SubscriptionID: all.SubscriptionID}); !r.Removed {
		t.Fatal("unsubscribe did not remove")
	}
	if r, _ := f.n.Unsubscribe(f.as("alice"), &rpc.UnsubscribeParams{SubscriptionID: scope.SubscriptionID}); r.Removed {
		t.Fatal("alice removed bob's subscription")
	}

	_, err = f.n.Subscribe(bob, l, &rpc.SubscribeParams{})
	wantCode(t, err, rpc.CodeInvalidParams, "at least one of scope, mention_role, or all must be specified")
	_, err = f.n.Subscribe(bob, l, &rpc.SubscribeParams{All: true, MentionRole: "x"})
	wantCode(t, err, rpc.CodeInvalidParams, "only one")
	_, err = f.n.Subscribe(f.as("bob"), nil, &rpc.SubscribeParams{All: true})
	wantCode(t, err, rpc.CodeInvalidRequest, "Listen")
	_, err = f.n.Unsubscribe(f.as("bob"), &rpc.UnsubscribeParams{})
	wantCode(t, err, rpc.CodeInvalidParams, "subscription_id is required")
	thrumtest.Register(t, f.n, "eve", "x", "y")
	f.n.EndSession(f.ctx, &rpc.EndSessionParams{SessionID: mustSession(t, f, "eve")})
	_, err = f.n.Subscribe(f.as("eve"), l, &rpc.SubscribeParams{All: true})
	wantCode(t, err, rpc.CodeConflict, "no active session found")
}

func mustSession(t *testing.T, f *fixture, agent string) string {
	t.Helper()
	r, err := f.n.ListSessions(f.ctx, &rpc.ListSessionsParams{AgentID: agent, ActiveOnly: true})
	if err != nil || len(r.Sessions) == 0 {
		t.Fatalf("no session for %s: %v", agent, err)
	}
	return r.Sessions[0].SessionID
}

func TestSlowListenerIsDroppedWithoutBlockingWriters(t *testing.T) {
	f := newFixture(t, &thrum.Options{SubscriberQueue: 4, NoSync: true})
	l := f.n.Listen(0)
	if _, err := f.n.Subscribe(f.as("bob"), l, &rpc.SubscribeParams{All: true}); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 50; i++ {
			f.send("alice", rpc.SendMessageParams{Content: "flood"})
		}
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("writer blocked on a slow listener")
	}
	n := 0
	for range l.C() {
		n++
	}
	if n != 4 || !errors.Is(l.Err(), thrum.ErrSlowConsumer) {
		t.Fatalf("drained %d, err %v", n, l.Err())
	}
	subs, _ := f.n.ListSubscriptions(f.as("bob"), &rpc.ListSubscriptionsParams{})
	if len(subs.Subscriptions) != 0 {
		t.Fatalf("dropped listener kept subscriptions: %+v", subs)
	}
}

func TestUsersActingAs(t *testing.T) {
	f := newFixture(t, nil)
	u, err := f.n.RegisterUser(f.ctx, &rpc.RegisterUserParams{Username: "Leon-1", Display: "Leon"})
	if err != nil || u.UserID != "user:Leon-1" || u.Status != "registered" || u.Token == "" {
		t.Fatalf("register user: %+v %v", u, err)
	}
	again, _ := f.n.RegisterUser(f.ctx, &rpc.RegisterUserParams{Username: "Leon-1"})
	if again.Status != "existing" || again.Token == u.Token || again.DisplayName != "Leon" {
		t.Fatalf("re-register: %+v", again)
	}
	for _, tok := range []string{u.Token, again.Token} {
		if id, err := f.n.Authenticate(f.ctx, tok); err != nil || id != "user:Leon-1" {
			t.Fatalf("token %s: %s %v", tok[:6], id, err)
		}
	}
	user := f.as(u.UserID)
	m, err := f.n.SendMessage(user, &rpc.SendMessageParams{Content: "from alice, really leon", ActingAs: "alice", Disclose: true})
	if err != nil {
		t.Fatal(err)
	}
	g, _ := f.n.GetMessage(f.ctx, &rpc.GetMessageParams{MessageID: m.MessageID})
	if g.Message.Author.AgentID != "alice" || g.Message.DisclosedVia != "user:Leon-1" {
		t.Fatalf("acting_as message: %+v", g.Message)
	}
	_, err = f.n.SendMessage(user, &rpc.SendMessageParams{Content: "x", ActingAs: "ghost"})
	wantCode(t, err, rpc.CodeNotFound, "target agent does not exist")
	for _, bad := range []struct{ name, msg string }{
		{"", "username is required"}, {"agent:x", "username cannot start with 'agent:' prefix"}, {"has space", "invalid username format"},
		{strings.Repeat("a", 33), "invalid username format"},
	} {
		_, err := f.n.RegisterUser(f.ctx, &rpc.RegisterUserParams{Username: bad.name})
		wantCode(t, err, rpc.CodeInvalidParams, bad.msg)
	}
}

func TestWhoamiDeleteCleanup(t *testing.T) {
	idDir := t.TempDir()
	var offset time.Duration
	f := newFixture(t, &thrum.Options{IdentityDir: idDir, Now: func() time.Time { return time.Now().Add(offset) }})
	for _, name := range []string{"alice", "bob"} {
		identity.Save(idDir, &identity.File{Name: name, AgentID: name, Role: "r", Module: "m"})
	}
	w, err := f.n.Whoami(thrum.WithCaller(f.ctx, thrum.Caller{AgentID: "alice", Source: "environment"}), &rpc.WhoamiParams{})
	if err != nil || w.AgentID != "alice" || w.Role != "implementer" || w.Source != "environment" || w.SessionID == "" || w.SessionStart == "" {
		t.Fatalf("whoami: %+v %v", w, err)
	}
	_, err = f.n.Whoami(f.ctx, &rpc.WhoamiParams{})
	wantCode(t, err, rpc.CodeUnauthenticated, "resolve identity")

	// carol has no identity file but is active: not an orphan.
	c, err := f.n.CleanupAgents(f.ctx, &rpc.CleanupAgentsParams{DryRun: true})
	if err != nil || len(c.Orphans) != 0 || len(c.Deleted) != 0 || !c.DryRun {
		t.Fatalf("dry run: %+v %v", c, err)
	}
	// 40 days on, carol is stale; alice and bob keep their files.
	offset = 40 * 24 * time.Hour
	c, _ = f.n.CleanupAgents(f.ctx, &rpc.CleanupAgentsParams{Threshold: 30, Force: true})
	if len(c.Orphans) != 1 || len(c.Deleted) != 1 || c.DryRun || c.Orphans[0].DaysSinceLastSeen < 39 ||
		c.Orphans[0].Reason != fmt.Sprintf("no identity file in any worktree; days idle: %d", c.Orphans[0].DaysSinceLastSeen) {
		t.Fatalf("forced cleanup: %+v", c)
	}
	offset = 0
	f2 := newFixture(t, &thrum.Options{IdentityDir: idDir})
	identity.Save(idDir, &identity.File{Name: "bob", AgentID: "bob", Role: "reviewer", Module: "auth"})
	d, err := f2.n.DeleteAgent(f2.ctx, &rpc.DeleteAgentParams{Name: "bob"})
	if err != nil || !d.Deleted || d.AgentID != "bob" {
		t.Fatalf("delete: %+v %v", d, err)
	}
	if _, err := os.Stat(identity.Path(idDir, "bob")); !os.IsNotExist(err) {
		t.Fatal("identity file not removed")
	}
	_, err = f2.n.DeleteAgent(f2.ctx, &rpc.DeleteAgentParams{Name: "bob"})
	wantCode(t, err, rpc.CodeNotFound, "agent not found")
	_, err = f2.n.DeleteAgent(f2.ctx, &rpc.DeleteAgentParams{})
	wantCode(t, err, rpc.CodeInvalidParams, "agent name is required")
	_, err = f2.n.DeleteAgent(f2.ctx, &rpc.DeleteAgentParams{Name: "Not Valid"})
	wantCode(t, err, rpc.CodeInvalidParams, "invalid agent name")
	_, err = f2.n.SendMessage(f2.as("alice"), &rpc.SendMessageParams{Content: "x", Mentions: []string{"bob"}})
	wantCode(t, err, rpc.CodeNotFound, "unknown recipient")
}

func TestReopenKeepsEverything(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	n, err := thrum.Open(context.Background(), dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	n.RegisterAgent(ctx, &rpc.RegisterAgentParams{Name: "alice", Role: "dev", Module: "m"})
	n.StartSession(ctx, &rpc.StartSessionParams{AgentID: "alice"})
	m, err := n.SendMessage(thrum.AsAgent(ctx, "alice"), &rpc.SendMessageParams{Content: "persist me", Mentions: []string{"@everyone"}})
	if err != nil {
		t.Fatal(err)
	}
	n.Close()
	n.Close() // idempotent
	if _, err := os.Stat(filepath.Join(dir, "messages", "alice.jsonl")); err != nil {
		t.Fatalf("message shard: %v", err)
	}
	// Lose the projection entirely: the log rebuilds it on open.
	os.Remove(filepath.Join(dir, thrum.DefaultDBName))
	os.Remove(filepath.Join(dir, thrum.DefaultDBName+"-wal"))
	os.Remove(filepath.Join(dir, thrum.DefaultDBName+"-shm"))
	n, err = thrum.Open(context.Background(), dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	g, err := n.GetMessage(ctx, &rpc.GetMessageParams{MessageID: m.MessageID})
	if err != nil || g.Message.Body.Content != "persist me" {
		t.Fatalf("after reopen: %+v %v", g, err)
	}
	groups, _ := n.ListGroups(ctx, &rpc.ListGroupsParams{})
	if len(groups.Groups) != 1 {
		t.Fatalf("everyone created twice? %+v", groups)
	}
	_, err = n.SendMessage(thrum.AsAgent(ctx, "alice"), &rpc.SendMessageParams{Content: "x"})
	if err != nil {
		t.Fatalf("send after reopen: %v", err)
	}
	if _, err := n.Rebuild(ctx, filepath.Join(dir, thrum.DefaultDBName)); err == nil {
		t.Fatal("rebuild over the live projection was allowed")
	}
}

func TestClosedNodeRefusesWrites(t *testing.T) {
	f := newFixture(t, nil)
	f.n.Close()
	_, err := f.n.SendMessage(f.as("alice"), &rpc.SendMessageParams{Content: "x"})
	wantCode(t, err, rpc.CodeUnavailable, "shut down")
	_, err = f.n.ListMessages(f.ctx, &rpc.ListMessagesParams{})
	wantCode(t, err, rpc.CodeUnavailable, "shut down")
}

func TestSecondOpenIsRefused(t *testing.T) {
	dir := t.TempDir()
	n, err := thrum.Open(context.Background(), dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = thrum.Open(context.Background(), dir, nil)
	if !errors.Is(err, thrum.ErrLocked) || !strings.Contains(err.Error(), fmt.Sprintf("process %d", os.Getpid())) {
		t.Fatalf("second open: %v", err)
	}
	n.Close()
	n2, err := thrum.Open(context.Background(), dir, nil)
	if err != nil {
		t.Fatalf("open after close: %v", err)
	}
	n2.Close()
}

// An edit made here stands even after an edit of the same message dated
// ahead of this machine's clock (synced from a machine whose clock is
// ahead): it is dated after it.
func TestEditAfterOneDatedAheadStands(t *testing.T) {
	f := newFixture(t, nil)
	m := f.send("alice", rpc.SendMessageParams{Content: "the first draft"})
	ahead, later := "from a clock an hour ahead", "the final text"
	at := time.Now().Add(time.Hour)
	if err := f.n.EventLog().Append(f.ctx, &eventlog.Event{Type: eventlog.TypeMessageEdit, Shard: "alice", Time: at,
		Payload: eventlog.MessageEdit{MessageID: m.MessageID, AgentID: "alice", Content: &ahead}}); err != nil {
		t.Fatal(err)
	}
	res, err := f.n.EditMessage(f.as("alice"), &rpc.EditMessageParams{MessageID: m.MessageID, Content: &later})
	if err != nil {
		t.Fatal(err)
	}
	got, err := f.n.GetMessage(f.as("bob"), &rpc.GetMessageParams{MessageID: m.MessageID})
	if err != nil {
		t.Fatal(err)
	}
	if got.Message.Body.Content != later || got.Message.UpdatedAt != res.UpdatedAt || res.UpdatedAt <= eventlog.FormatTime(at) || res.Version != 2 {
		t.Errorf("after an edit dated %s and one made here: content %q updated %s (the edit said %s, version %d); want %q after it",
			eventlog.FormatTime(at), got.Message.Body.Content, got.Message.UpdatedAt, res.UpdatedAt, res.Version, later)
	}
}
