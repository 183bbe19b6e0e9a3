package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/store"
)

// events appends a small history to a fresh log and returns it scanned
// back, as replay would see it.
func events(t *testing.T) (*eventlog.Log, []*eventlog.Event) {
	t.Helper()
	lg, err := eventlog.Open(t.TempDir(), &eventlog.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lg.Close() })
	content := "edited"
	ctx := context.Background()
	for _, e := range []*eventlog.Event{
		{Type: eventlog.TypeAgentRegister, Payload: eventlog.AgentRegister{AgentID: "alice", Kind: "agent", Name: "alice", Role: "dev", Module: "m"}},
		{Type: eventlog.TypeCredentialAdd, Shard: eventlog.LocalShard, Payload: eventlog.Credential{AgentID: "alice", TokenHash: "h1"}},
		// A token hash outside the local shard authenticates no one: one
		// in an agent.register (a log from before credentials were
		// local), one in a credential event that is not local.
		{Type: eventlog.TypeAgentRegister, Payload: map[string]any{"agent_id": "bob", "kind": "agent", "token_hash": "h2"}},
		{Type: eventlog.TypeCredentialAdd, Payload: eventlog.Credential{AgentID: "alice", TokenHash: "h3"}},
		{Type: eventlog.TypeSessionStart, Payload: eventlog.SessionStart{SessionID: "ses_1", AgentID: "alice"}},
		{Type: eventlog.TypeMessageCreate, Shard: "alice", Payload: eventlog.MessageCreate{MessageID: "msg_1", AgentID: "alice", SessionID: "ses_1",
			Format: "markdown", Content: "hi", Priority: "normal", Refs: []eventlog.Pair{{Type: "mention", Value: "bob"}}, Scopes: []eventlog.Pair{{Type: "module", Value: "m"}}}},
		{Type: eventlog.TypeMessageEdit, Shard: "alice", Payload: eventlog.MessageEdit{MessageID: "msg_1", AgentID: "alice", SessionID: "ses_1", Content: &content}},
		{Type: eventlog.TypeMessageRead, Shard: "bob", Payload: eventlog.MessageRead{AgentID: "bob", SessionID: "ses_2", MessageIDs: []string{"msg_1"}}},
		{Type: eventlog.TypeGroupCreate, Payload: eventlog.GroupCreate{Name: "team", CreatedBy: "alice"}},
		{Type: eventlog.TypeGroupMemberAdd, Payload: eventlog.GroupMember{Group: "team", MemberType: "role", MemberID: "dev", AgentID: "alice"}},
		{Type: eventlog.TypeMessageDelete, Shard: "alice", Payload: eventlog.MessageDelete{MessageID: "msg_1", AgentID: "alice", Reason: "done"}},
	} {
		if err := lg.Append(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	var out []*eventlog.Event
	if _, err := lg.Scan(ctx, nil, func(e *eventlog.Event) error { out = append(out, e); return nil }); err != nil {
		t.Fatal(err)
	}
	return lg, out
}

func TestApplyIsIdempotentAndMatchesRebuild(t *testing.T) {
	ctx := context.Background()
	lg, evs := events(t)
	st, err := store.Open(filepath.Join(t.TempDir(), "p.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Apply(ctx, evs); err != nil {
		t.Fatal(err)
	}
	once, err := st.Dump(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(once["message_edits"]) != 1 || len(once["message_reads"]) != 1 || len(once["group_members"]) != 1 {
		t.Fatalf("projection after one apply: %v", once)
	}
	m, err := st.Message(ctx, "msg_1", "bob")
	if err != nil || m.Content != "edited" || !m.Deleted || !m.IsRead || m.Version != 1 || len(m.Refs) != 1 || len(m.Scopes) != 1 {
		t.Fatalf("message: %+v %v", m, err)
	}
	// Every event a second time, one by one and as a batch: nothing changes.
	for _, e := range evs {
		if err := st.Apply(ctx, []*eventlog.Event{e}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Apply(ctx, evs); err != nil {
		t.Fatal(err)
	}
	twice, _ := st.Dump(ctx)
	if !reflect.DeepEqual(once, twice) {
		t.Fatalf("applying again changed the projection:\n%v\n%v", once, twice)
	}
	rebuilt, err := store.Rebuild(ctx, lg, filepath.Join(t.TempDir(), "r.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rebuilt.Close()
	fromLog, _ := rebuilt.Dump(ctx)
	if !reflect.DeepEqual(once, fromLog) {
		t.Fatalf("rebuild differs:\n%v\n%v", once, fromLog)
	}
	pos, _ := rebuilt.Positions(ctx)
	if !reflect.DeepEqual(pos, lg.Positions()) {
		t.Fatalf("checkpoint %v, log ends at %v", pos, lg.Positions())
	}
	for _, st := range []*store.Store{st, rebuilt} {
		if id, err := st.AgentByToken(ctx, "h1"); err != nil || id != "alice" {
			t.Fatalf("the local credential: %q, %v", id, err)
		}
		for _, h := range []string{"h2", "h3"} {
			if id, err := st.AgentByToken(ctx, h); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("token hash %s from outside the local shard authenticates as %q (%v)", h, id, err)
			}
		}
	}
	if _, err := st.Agent(ctx, "nobody"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("missing agent: %v", err)
	}
}

func TestClosedAndOutdated(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "p.db")
	st, err := store.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	st.Close() // idempotent
	if _, err := st.Agents(ctx, "", ""); !store.IsClosed(err) {
		t.Fatalf("query after Close: %v", err)
	}
	// Pretend an older thrum wrote it: Open asks for a rebuild.
	w, err := store.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	store.SetVersion(t, path, "1")
	if _, err := store.Open(path, nil); !errors.Is(err, store.ErrOutdated) {
		t.Fatalf("open of an older schema: %v", err)
	}
	store.SetVersion(t, path, "99")
	if _, err := store.Open(path, nil); err == nil || errors.Is(err, store.ErrOutdated) {
		t.Fatalf("open of a newer schema: %v", err)
	}
}

// Edits of one message that sync in either order leave the same message:
// each field holds the value of the latest edit that set it (by time,
// then event ID), and updated_at is the latest edit's time.
func TestEditsInEitherOrderConverge(t *testing.T) {
	ctx := context.Background()
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	create := &eventlog.Event{ID: "evt_0", Type: eventlog.TypeMessageCreate, Shard: "alice", Time: at, Payload: eventlog.MessageCreate{
		MessageID: "msg_1", AgentID: "alice", Format: "markdown", Content: "hi", Priority: "normal"}}
	edit := func(id string, d time.Duration, text, structured string) *eventlog.Event {
		p := eventlog.MessageEdit{MessageID: "msg_1", AgentID: "alice"}
		if text != "" {
			p.Content = &text
		}
		if structured != "" {
			p.Structured = json.RawMessage(structured)
		}
		return &eventlog.Event{ID: id, Type: eventlog.TypeMessageEdit, Shard: "alice", Time: at.Add(d), Payload: p}
	}
	for _, tc := range []struct {
		name                string
		a, b                *eventlog.Event
		content, structured string
		updated             time.Duration
	}{
		{"the later text", edit("evt_1", time.Second, "first", ""), edit("evt_2", 2*time.Second, "second", ""), "second", "", 2 * time.Second},
		{"each field its latest", edit("evt_1", time.Second, "first", ""), edit("evt_2", 2*time.Second, "", `{"k":1}`), "first", `{"k":1}`, 2 * time.Second},
		{"a tie by event ID", edit("evt_a", time.Second, "alpha", ""), edit("evt_b", time.Second, "beta", ""), "beta", "", time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rows [][]string
			for _, order := range [][]*eventlog.Event{{create, tc.a, tc.b}, {create, tc.b, tc.a}} {
				st, err := store.Open(filepath.Join(t.TempDir(), "p.db"), nil)
				if err != nil {
					t.Fatal(err)
				}
				defer st.Close()
				for _, e := range order {
					if err := st.Apply(ctx, []*eventlog.Event{e}); err != nil {
						t.Fatal(err)
					}
				}
				m, err := st.Message(ctx, "msg_1", "alice")
				if err != nil {
					t.Fatal(err)
				}
				how := order[1].ID + " then " + order[2].ID
				if want := eventlog.FormatTime(at.Add(tc.updated)); m.Content != tc.content || string(m.Structured) != tc.structured ||
					m.UpdatedAt != want || m.Version != 2 {
					t.Errorf("%s: content %q, structured %s, updated %s, version %d; want %q, %s, %s, 2",
						how, m.Content, m.Structured, m.UpdatedAt, m.Version, tc.content, tc.structured, want)
				}
				for _, e := range []*eventlog.Event{tc.a, tc.b} {
					text := e.Payload.(eventlog.MessageEdit).Content
					if text == nil {
						continue
					}
					want := 0
					if *text == tc.content {
						want = 1
					}
					if _, n, _, err := st.Search(ctx, store.SearchFilter{Query: *text}); err != nil || n != want {
						t.Errorf("%s: search for %q finds %d (%v), want %d", how, *text, n, err, want)
					}
				}
				d, err := st.Dump(ctx)
				if err != nil {
					t.Fatal(err)
				}
				rows = append(rows, d["messages"])
			}
			if !reflect.DeepEqual(rows[0], rows[1]) {
				t.Errorf("the message differs by the order its edits came in:\n%v\n%v", rows[0], rows[1])
			}
		})
	}
}
