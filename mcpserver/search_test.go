package mcpserver_test

import (
	"context"
	"strings"
	"testing"

	"github.com/thrumhq/thrum/mcpserver"
)

// TestSearchMessages: the tool finds by words and author, best first,
// with matches in bold, marks nothing read, and reports a malformed query
// as invalid_argument with the daemon's reason.
func TestSearchMessages(t *testing.T) {
	n := newNode(t, nil)
	alice := connect(t, n, addAgent(t, n, "alice", "implementer", "auth"), nil)
	addAgent(t, n, "bob", "reviewer", "auth")
	once := send(t, n, "bob", "@alice", "the auth token expired during the deploy of many services", "")
	twice := send(t, n, "bob", "@alice", "token rotation: every token renewed", "")
	send(t, n, "alice", "@bob", "a token from alice", "")
	send(t, n, "bob", "@alice", "unrelated", "")

	out := call[mcpserver.SearchMessagesOutput](t, alice, "search_messages", args{"query": "token", "from": "bob"})
	if out.Total != 2 || len(out.Results) != 2 || out.Results[0].MessageID != twice || out.Results[1].MessageID != once {
		t.Fatalf("search: %+v, want %s then %s", out, twice, once)
	}
	if h := out.Results[0]; h.From != "bob" || h.Timestamp == "" || h.Snippet != "**token** rotation: every **token** renewed" {
		t.Fatalf("hit: %+v", h)
	}
	out = call[mcpserver.SearchMessagesOutput](t, alice, "search_messages", args{"query": "token", "limit": 1})
	if out.Total != 3 || len(out.Results) != 1 {
		t.Fatalf("limit 1: %+v", out)
	}
	if u := unread(t, n, "alice"); len(u) != 3 {
		t.Fatalf("searching marked messages read: unread %v", u)
	}
	res, err := alice.rawCall(context.Background(), "search_messages", args{"query": "auth AND"})
	if err != nil {
		t.Fatal(err)
	}
	msg := checkToolErr(t, "search_messages", res, "query ends after AND at character 6")
	if code := res.StructuredContent.(map[string]any)["code"]; code != "invalid_argument" || strings.Contains(msg, "SQL") {
		t.Fatalf("malformed query: code %v, %s", code, msg)
	}
}
