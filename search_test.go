package thrum_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/internal/thrumtest"
	"github.com/thrumhq/thrum/rpc"
)

// search runs a search as an agent ("" for nobody) and returns the IDs
// found, in order.
func (f *fixture) search(as string, p rpc.SearchMessagesParams) (*rpc.SearchMessagesResult, []string) {
	f.t.Helper()
	ctx := f.ctx
	if as != "" {
		ctx = f.as(as)
	}
	r, err := f.n.SearchMessages(ctx, &p)
	if err != nil {
		f.t.Fatalf("search as %q %+v: %v", as, p, err)
	}
	ids := []string{}
	for _, h := range r.Results {
		ids = append(ids, h.MessageID)
	}
	return r, ids
}

// highlighted returns the highlighted words of a result's snippet.
func highlighted(t *testing.T, r rpc.SearchResult) []string {
	t.Helper()
	rs := []rune(r.Snippet)
	var out []string
	for _, h := range r.Highlights {
		if h[0] < 0 || h[1] > len(rs) || h[0] >= h[1] {
			t.Fatalf("highlight %v out of snippet %q", h, r.Snippet)
		}
		out = append(out, string(rs[h[0]:h[1]]))
	}
	return out
}

func TestSearchRankingAndSnippets(t *testing.T) {
	f := newFixture(t, nil)
	once := f.send("alice", rpc.SendMessageParams{Content: "the deploy failed; a token expired somewhere in a long message about many other things entirely"})
	time.Sleep(2 * time.Millisecond)
	thrice := f.send("bob", rpc.SendMessageParams{Content: "Token rotation: the token service renews every token"})
	time.Sleep(2 * time.Millisecond)
	f.send("carol", rpc.SendMessageParams{Content: "nothing to see here"})
	time.Sleep(2 * time.Millisecond)
	structured := f.send("carol", rpc.SendMessageParams{Content: "see payload", Structured: json.RawMessage(`{"finding":"tokens leak in logs"}`)})

	r, ids := f.search("bob", rpc.SearchMessagesParams{Query: "token"})
	if r.Total != 3 || len(ids) != 3 {
		t.Fatalf("token: total %d, ids %v; want 3 (stemmed: tokens too)", r.Total, ids)
	}
	if ids[0] != thrice.MessageID {
		t.Fatalf("relevance: first is %s, want the message with the word three times (%s): %v", ids[0], thrice.MessageID, ids)
	}
	for _, h := range r.Results {
		words := highlighted(t, h)
		if len(words) == 0 {
			t.Fatalf("no highlight in %q", h.Snippet)
		}
		for _, w := range words {
			if !strings.HasPrefix(strings.ToLower(w), "token") {
				t.Fatalf("highlighted %q in %q, want only token(s)", w, h.Snippet)
			}
		}
		if strings.ContainsAny(h.Snippet, "\x01\x02") {
			t.Fatalf("snippet keeps markers: %q", h.Snippet)
		}
	}
	if got := r.Results[0]; got.Body.Content == "" || got.AgentID != "bob" || !got.IsRead {
		t.Fatalf("result carries the message and bob's read state (his own): %+v", got)
	}
	for _, h := range r.Results {
		if h.MessageID == structured.MessageID && !strings.Contains(h.Snippet, "leak") {
			t.Fatalf("a structured match's snippet is the payload's text: %q", h.Snippet)
		}
	}
	if _, ids := f.search("bob", rpc.SearchMessagesParams{Query: "token", SortBy: "created_at"}); !slices.Equal(ids, []string{structured.MessageID, thrice.MessageID, once.MessageID}) {
		t.Fatalf("by time: %v, want newest first", ids)
	}
	// Paging: one result a page, the total over all.
	r, ids = f.search("bob", rpc.SearchMessagesParams{Query: "token", PageSize: 1, Page: 2})
	if r.Total != 3 || r.TotalPages != 3 || r.Page != 2 || len(ids) != 1 {
		t.Fatalf("page 2 of 1: %+v", r)
	}
	if r, _ := f.search("bob", rpc.SearchMessagesParams{Query: "token", PageSize: 2, Page: 9}); r.Total != 3 || len(r.Results) != 0 {
		t.Fatalf("page past the end: %+v", r)
	}
	// Read state is the caller's.
	if _, err := f.n.MarkRead(f.as("carol"), &rpc.MarkReadParams{MessageIDs: []string{once.MessageID}}); err != nil {
		t.Fatal(err)
	}
	r, _ = f.search("carol", rpc.SearchMessagesParams{Query: "deploy"})
	if len(r.Results) != 1 || !r.Results[0].IsRead {
		t.Fatalf("carol read it: %+v", r.Results)
	}
	r, _ = f.search("bob", rpc.SearchMessagesParams{Query: "deploy"})
	if len(r.Results) != 1 || r.Results[0].IsRead {
		t.Fatalf("bob did not read it: %+v", r.Results)
	}
}

func TestSearchMalformedQueries(t *testing.T) {
	f := newFixture(t, nil)
	f.send("alice", rpc.SendMessageParams{Content: "auth token"})
	// The store's word on a query (store.TestSearchMalformedQueries) is
	// invalid params, word for word.
	for _, tc := range []struct{ query, msg string }{
		{"", "query is required: give one or more words to search for"},
		{"auth\x00token", "query: character 5 is a NUL (a zero byte): remove it"},
		{"(auth token", "query: the ( at character 1 is not closed: add a )"},
	} {
		_, err := f.n.SearchMessages(f.as("bob"), &rpc.SearchMessagesParams{Query: tc.query})
		var re *rpc.Error
		if !errors.As(err, &re) || re.Code != rpc.CodeInvalidParams || re.Message != tc.msg {
			t.Fatalf("%q: %v, want -32602 %q", tc.query, err, tc.msg)
		}
	}
	for _, p := range []rpc.SearchMessagesParams{
		{Query: "auth", SortBy: "rank"},
		{Query: "auth", Since: "yesterday"},
		{Query: "auth", Since: "2026-01-02T00:00:00Z", Until: "2026-01-01T00:00:00Z"},
		{Query: "auth", PageSize: 101},
	} {
		if _, err := f.n.SearchMessages(f.as("bob"), &p); !errors.Is(err, thrum.ErrInvalidParams) {
			t.Fatalf("%+v: %v, want invalid params", p, err)
		}
	}
	if _, err := f.n.SearchMessages(f.ctx, &rpc.SearchMessagesParams{Query: "auth", Mentions: true}); !errors.Is(err, thrum.ErrUnauthenticated) {
		t.Fatalf("mentions without a caller: %v", err)
	}
}

func TestSearchFilters(t *testing.T) {
	f := newFixture(t, nil)
	th, err := f.n.CreateThread(f.as("alice"), &rpc.CreateThreadParams{Title: "t"})
	if err != nil {
		t.Fatal(err)
	}
	inThread := f.send("alice", rpc.SendMessageParams{Content: "deploy in thread", ThreadID: th.ThreadID})
	scoped := f.send("bob", rpc.SendMessageParams{Content: "deploy scoped", Scopes: []rpc.Pair{{Type: "module", Value: "auth"}}})
	reffed := f.send("bob", rpc.SendMessageParams{Content: "deploy reffed", Refs: []rpc.Pair{{Type: "issue", Value: "42"}}})
	time.Sleep(5 * time.Millisecond)
	toBob := f.send("carol", rpc.SendMessageParams{Content: "deploy for bob", Mentions: []string{"@bob"}})
	toReviewers := f.send("alice", rpc.SendMessageParams{Content: "deploy for reviewers", Mentions: []string{"@reviewer"}})
	gone := f.send("carol", rpc.SendMessageParams{Content: "deploy deleted"})
	if _, err := f.n.DeleteMessage(f.as("carol"), &rpc.DeleteMessageParams{MessageID: gone.MessageID}); err != nil {
		t.Fatal(err)
	}
	mid := toBob.CreatedAt
	all := []string{inThread.MessageID, scoped.MessageID, reffed.MessageID, toBob.MessageID, toReviewers.MessageID}
	tests := []struct {
		name string
		as   string
		p    rpc.SearchMessagesParams
		want []string
	}{
		{"none", "", rpc.SearchMessagesParams{}, all},
		{"author", "", rpc.SearchMessagesParams{AuthorID: "bob"}, []string{scoped.MessageID, reffed.MessageID}},
		{"scope", "", rpc.SearchMessagesParams{Scope: &rpc.Pair{Type: "module", Value: "auth"}}, []string{scoped.MessageID}},
		{"ref", "", rpc.SearchMessagesParams{Ref: &rpc.Pair{Type: "issue", Value: "42"}}, []string{reffed.MessageID}},
		{"thread", "", rpc.SearchMessagesParams{ThreadID: th.ThreadID}, []string{inThread.MessageID}},
		{"mentions me (by name and role)", "bob", rpc.SearchMessagesParams{Mentions: true}, []string{toBob.MessageID, toReviewers.MessageID}},
		{"mention_role", "", rpc.SearchMessagesParams{MentionRole: "@reviewer"}, []string{toReviewers.MessageID}},
		{"since", "", rpc.SearchMessagesParams{Since: mid}, []string{toBob.MessageID, toReviewers.MessageID}},
		{"until", "", rpc.SearchMessagesParams{Until: mid}, []string{inThread.MessageID, scoped.MessageID, reffed.MessageID, toBob.MessageID}},
		{"include_deleted", "", rpc.SearchMessagesParams{IncludeDeleted: true}, append(slices.Clone(all), gone.MessageID)},
		{"combined", "", rpc.SearchMessagesParams{AuthorID: "alice", Since: mid}, []string{toReviewers.MessageID}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.p
			p.Query, p.SortBy = "deploy", "created_at"
			r, ids := f.search(tc.as, p)
			want := slices.Clone(tc.want)
			slices.Reverse(want)
			if !slices.Equal(ids, want) || r.Total != len(want) {
				t.Fatalf("found %v (total %d), want %v", ids, r.Total, want)
			}
			// The listing with the same filters shows the same messages:
			// search never shows what a caller could not list.
			lp := rpc.ListMessagesParams{Scope: p.Scope, Ref: p.Ref, ThreadID: p.ThreadID, AuthorID: p.AuthorID,
				Mentions: p.Mentions, MentionRole: p.MentionRole, IncludeDeleted: p.IncludeDeleted, PageSize: 100}
			if p.Since == "" && p.Until == "" {
				l := f.list(tc.as, lp)
				var listed []string
				for _, m := range l.Messages {
					listed = append(listed, m.MessageID)
				}
				if !slices.Equal(listed, want) {
					t.Fatalf("listing shows %v, search %v", listed, ids)
				}
			}
		})
	}
}

func TestSearchFollowsEditsAndDeletes(t *testing.T) {
	f := newFixture(t, nil)
	m := f.send("alice", rpc.SendMessageParams{Content: "the quarterly budget", Structured: json.RawMessage(`{"status":"draft"}`)})
	content := "the annual forecast"
	if _, err := f.n.EditMessage(f.as("alice"), &rpc.EditMessageParams{MessageID: m.MessageID, Content: &content}); err != nil {
		t.Fatal(err)
	}
	found := func(q string, deleted bool) bool {
		_, ids := f.search("bob", rpc.SearchMessagesParams{Query: q, IncludeDeleted: deleted})
		return slices.Contains(ids, m.MessageID)
	}
	if found("budget", false) || !found("forecast", false) || !found("draft", false) {
		t.Fatal("after a content edit: the old words must be gone, the new and the payload's found")
	}
	if _, err := f.n.EditMessage(f.as("alice"), &rpc.EditMessageParams{MessageID: m.MessageID, Structured: json.RawMessage(`{"status":"final"}`)}); err != nil {
		t.Fatal(err)
	}
	if found("draft", false) || !found("final", false) || !found("forecast", false) {
		t.Fatal("after a payload edit: the old payload gone, the new found, the content kept")
	}
	if _, err := f.n.DeleteMessage(f.as("alice"), &rpc.DeleteMessageParams{MessageID: m.MessageID}); err != nil {
		t.Fatal(err)
	}
	if found("forecast", false) || !found("forecast", true) {
		t.Fatal("a deleted message is found only with include_deleted")
	}
	// The index survives a restart and agrees with its messages.
	dir := f.n.Dir()
	f.n.Close()
	n := thrumtest.OpenNodeIn(t, dir, nil)
	r, err := n.SearchMessages(context.Background(), &rpc.SearchMessagesParams{Query: "forecast final", IncludeDeleted: true})
	if err != nil || r.Total != 1 || r.Results[0].MessageID != m.MessageID || !r.Results[0].Deleted {
		t.Fatalf("after reopen: %+v %v", r, err)
	}
}

// TestSearchOverRPC checks the method on the wire: the read access of
// message.list (a WebSocket stranger gets nothing) and -32602 for a
// malformed query.
func TestSearchOverRPC(t *testing.T) {
	f := newFixture(t, nil)
	f.send("alice", rpc.SendMessageParams{Content: "secret plans"})
	d := thrumtest.Serve(t, f.n, nil)
	ctx := context.Background()
	c, err := d.Dial(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r, err := c.SearchMessages(ctx, &rpc.SearchMessagesParams{Query: "plans"})
	if err != nil || r.Total != 1 || r.Results[0].Snippet != "secret plans" || len(r.Results[0].Highlights) != 1 || r.Results[0].Highlights[0] != [2]int{7, 12} {
		t.Fatalf("over the socket: %+v %v", r, err)
	}
	_, err = c.SearchMessages(ctx, &rpc.SearchMessagesParams{Query: `"plans`})
	var re *rpc.Error
	if !errors.As(err, &re) || re.Code != rpc.CodeInvalidParams || !strings.Contains(re.Message, "not closed") {
		t.Fatalf("malformed over the socket: %v", err)
	}
	ws, err := d.DialWebSocket(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	if _, err := ws.SearchMessages(ctx, &rpc.SearchMessagesParams{Query: "plans"}); !errors.Is(err, rpc.ErrUnauthenticated) {
		t.Fatalf("a WebSocket without a credential searched: %v", err)
	}
}

// TestVerifyFindsSearchIndexDrift: an index that no longer matches its
// messages (here a message's words removed from it behind the node's
// back) is a problem Verify reports, and a rebuilt projection is sound.
func TestVerifyFindsSearchIndexDrift(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	n := thrumtest.OpenNodeIn(t, dir, &thrum.Options{NoSync: true})
	thrumtest.Register(t, n, "alice", "dev", "m")
	if _, err := n.SendMessage(thrum.AsAgent(ctx, "alice"), &rpc.SendMessageParams{Content: "findable words"}); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, thrum.DefaultDBName)
	n.Close()
	c, err := sql.Open("sqlite", "file:"+db)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(`INSERT INTO messages_fts(messages_fts, rowid, body_content, body_structured)
		SELECT 'delete', rowid, body_content, body_structured FROM messages`); err != nil {
		t.Fatal(err)
	}
	c.Close()
	n = thrumtest.OpenNodeIn(t, dir, &thrum.Options{NoSync: true})
	if r, err := n.SearchMessages(ctx, &rpc.SearchMessagesParams{Query: "findable"}); err != nil || r.Total != 0 {
		t.Fatalf("the drifted index still finds it: %+v %v", r, err)
	}
	rep, err := n.Verify(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0].Message, "search index does not match") {
		t.Fatalf("Verify = %v, want the search index's drift", rep.Problems)
	}
	rebuilt, err := n.Rebuild(ctx, filepath.Join(t.TempDir(), "rebuilt.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer rebuilt.Close()
	if err := rebuilt.CheckSearchIndex(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestSearchPrefixesInAnOlderProjection: a projection made before the
// plain index (schema version 4, whose prefixes matched stems) is
// rebuilt from the log at open, and its prefixes then match words'
// beginnings.
func TestSearchPrefixesInAnOlderProjection(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	n := thrumtest.OpenNodeIn(t, dir, &thrum.Options{NoSync: true})
	thrumtest.Register(t, n, "alice", "dev", "m")
	m, err := n.SendMessage(thrum.AsAgent(ctx, "alice"), &rpc.SendMessageParams{Content: "the deployment failed"})
	if err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(n.Dir(), thrum.DefaultDBName)
	n.Close()
	c, err := sql.Open("sqlite", "file:"+db)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`DROP TABLE messages_fts_plain_terms`, `DROP TABLE messages_fts_plain`,
		`UPDATE meta SET value = '4' WHERE key = 'schema_version'`} {
		if _, err := c.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	c.Close()
	n = thrumtest.OpenNodeIn(t, dir, &thrum.Options{NoSync: true})
	r, err := n.SearchMessages(ctx, &rpc.SearchMessagesParams{Query: "deploy*"})
	if err != nil || r.Total != 1 || r.Results[0].MessageID != m.MessageID {
		t.Fatalf("deploy* after reopening an older projection: %+v %v", r, err)
	}
	if got := highlighted(t, r.Results[0]); !slices.Equal(got, []string{"deployment"}) {
		t.Fatalf("highlighted %q, want deployment", got)
	}
}
