package mcpserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/pkoukk/tiktoken-go"
	tiktoken_loader "github.com/pkoukk/tiktoken-go-loader"
)

// maxToolTokens is the agents' budget for tools/list: what every session
// of an agent pays in its context before it does anything.
const maxToolTokens = 3200

// TestToolSchemas checks what the schemas tell a client: enums for every closed set of strings, bounds on limit and timeout,
// no nullable arrays where the tools always return [], one status per
// tool where a shared type used to say two — and that tools/list stays
// within maxToolTokens, counted with the cl100k_base encoding.
func TestToolSchemas(t *testing.T) {
	n := newNode(t, nil)
	alice := connect(t, n, addAgent(t, n, "alice", "implementer", "auth"), nil)
	res, err := alice.cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(res)
	tiktoken.SetBpeLoader(tiktoken_loader.NewOfflineLoader())
	enc, err := tiktoken.GetEncoding("cl100k_base")
	if err != nil {
		t.Fatal(err)
	}
	tokens := len(enc.Encode(string(raw), nil, nil))
	t.Logf("tools/list: %d bytes, %d tokens (cl100k_base)", len(raw), tokens)
	if tokens > maxToolTokens {
		t.Errorf("tools/list is %d tokens, want at most %d", tokens, maxToolTokens)
	}

	schemas := map[string]map[string]any{}
	for _, tool := range res.Tools {
		schemas[tool.Name+" in"] = asObject(t, tool.Name, tool.InputSchema)
		schemas[tool.Name+" out"] = asObject(t, tool.Name, tool.OutputSchema)
	}
	prop := func(schema, path string) map[string]any {
		t.Helper()
		cur := schemas[schema]
		for _, p := range strings.Split(path, ".") {
			if p == "[]" {
				cur, _ = cur["items"].(map[string]any)
			} else {
				props, _ := cur["properties"].(map[string]any)
				cur, _ = props[p].(map[string]any)
			}
			if cur == nil {
				t.Fatalf("%s has no %s", schema, path)
			}
		}
		return cur
	}
	enum := func(schema, path string, want ...string) {
		t.Helper()
		var got []string
		for _, v := range prop(schema, path)["enum"].([]any) {
			got = append(got, fmt.Sprint(v))
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s %s enum = %v, want %v", schema, path, got, want)
		}
	}
	prios := []string{"critical", "high", "normal", "low"}
	enum("send_message in", "priority", prios...)
	enum("broadcast_message in", "priority", prios...)
	enum("wait_for_message in", "priority_filter", "all", "critical", "high_and_above", "normal_and_above")
	enum("add_group_member in", "member_type", "agent", "role")
	enum("remove_group_member in", "member_type", "agent", "role")
	enum("broadcast_message in", "filter.status", "all", "active")
	// A message's priority has no enum out: one synced from elsewhere may
	// be anything (escaped), and a result breaking its schema is refused
	// whole.
	if p := prop("check_messages out", "messages.[].priority"); p["enum"] != nil {
		t.Errorf("check_messages out: messages[].priority has an enum %v", p["enum"])
	}
	enum("wait_for_message out", "message.addressed_as.kind", "agent", "role", "group", "everyone")
	enum("wait_for_message out", "status", "message_received", "acknowledged", "timeout", "shutdown")
	enum("create_group out", "status", "created")
	enum("delete_group out", "status", "deleted")
	enum("add_group_member out", "status", "added")
	enum("remove_group_member out", "status", "removed")
	for _, b := range []struct {
		schema, path string
		lo, hi       float64
	}{{"check_messages in", "limit", 1, 100}, {"wait_for_message in", "timeout", 1, 3600}} {
		p := prop(b.schema, b.path)
		if p["minimum"] != b.lo || p["maximum"] != b.hi {
			t.Errorf("%s %s: minimum %v maximum %v, want %v and %v", b.schema, b.path, p["minimum"], p["maximum"], b.lo, b.hi)
		}
	}
	// No output array may be null.
	for name, s := range schemas {
		var walk func(path string, s map[string]any)
		walk = func(path string, s map[string]any) {
			if ts, ok := s["type"].([]any); ok && slices.Contains(ts, "array") && slices.Contains(ts, "null") {
				t.Errorf("%s %s is a nullable array", name, path)
			}
			props, _ := s["properties"].(map[string]any)
			for k, v := range props {
				if m, ok := v.(map[string]any); ok {
					walk(path+"."+k, m)
				}
			}
			if it, ok := s["items"].(map[string]any); ok {
				walk(path+"[]", it)
			}
		}
		walk("", s)
	}
}
