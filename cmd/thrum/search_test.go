package main

import (
	"strings"
	"testing"
	"time"

	"github.com/thrumhq/thrum/internal/thrumtest"
	"github.com/thrumhq/thrum/rpc"
)

// TestSearchCommand runs `thrum search` against a real daemon: the
// highlighted human output, paging, filters, --json, and a malformed
// query's error.
func TestSearchCommand(t *testing.T) {
	t.Parallel()
	c := &thrumCLI{t: t, repo: thrumtest.GitRepo(t)}
	c.ok("", "init")
	startDaemon(t, c)
	c.ok("", "quickstart", "--name", "alice", "--role", "implementer", "--module", "auth")
	c.ok("", "quickstart", "--name", "bob", "--role", "reviewer", "--module", "auth")
	first := strings.TrimSpace(c.ok("alice", "--quiet", "send", "the auth token expired\nduring deploy", "--scope", "module:auth").stdout)
	c.ok("bob", "send", "token rotation is done", "--to", "@alice")
	c.ok("bob", "send", "unrelated words")

	r := c.ok("bob", "search", "token")
	contains(t, "search", r.stdout, "@alice", "@bob", "the auth token expired during deploy", "Showing 1-2 of 2 matches")
	lacks(t, "search", r.stdout, "unrelated", "\x1b[", "**") // a pipe gets plain text

	r = c.ok("bob", "search", "token", "--page-size", "1", "--scope", "module:auth")
	contains(t, "one page", r.stdout, first, "Showing 1-1 of 1 match")
	r = c.ok("bob", "search", "token", "--page-size", "1", "--sort", "time")
	contains(t, "next page", r.stdout, "Showing 1-1 of 2 matches", "Next page: thrum search token --sort time --page-size 1 --page 2")

	var res rpc.SearchMessagesResult
	c.okJSON(&res, "alice", "search", "auth", "token", "--author", "alice", "--since", "1h")
	if res.Total != 1 || len(res.Results) != 1 || res.Results[0].MessageID != first || len(res.Results[0].Highlights) != 2 {
		t.Fatalf("search --json: %+v", res)
	}
	c.okJSON(&res, "alice", "search", "token", "--until", "2000-01-01")
	if res.Total != 0 {
		t.Fatalf("--until 2000: %+v", res)
	}
	contains(t, "nothing", c.ok("bob", "search", "nothing*").stdout, "No messages match.")
	c.fails(exitError, "bob", []string{"search", `"auth token`}, "the phrase opened by the quote at character 1 is not closed")
	c.fails(exitUsage, "bob", []string{"search", "x", "--since", "last week"}, "--since", "RFC 3339")
	c.fails(exitUsage, "bob", []string{"search", "x", "--sort", "rank"}, "--sort")
}

func TestHighlightAndParseWhen(t *testing.T) {
	if got := highlight("a\ntoken é token", [][2]int{{2, 7}, {10, 15}, {12, 13}}, true); got != "a \x1b[1;33mtoken\x1b[0m é \x1b[1;33mtoken\x1b[0m" {
		t.Fatalf("highlight: %q", got)
	}
	if got := highlight("token", [][2]int{{0, 5}}, true); got != "\x1b[1;33mtoken\x1b[0m" {
		t.Fatalf("highlight in colour: %q", got)
	}
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]string{
		"2026-11-24T09:00:00+01:00": "2026-11-24T08:00:00Z",
		"2026-11-20":                "2026-11-20T00:00:00Z",
		"7d":                        "2026-11-17T12:00:00Z",
		"90m":                       "2026-11-24T10:30:00Z",
	} {
		if got, err := parseWhen(in, now); err != nil || got != want {
			t.Errorf("parseWhen(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"yesterday", "-3d", "3w"} {
		if _, err := parseWhen(bad, now); err == nil {
			t.Errorf("parseWhen(%q) accepted", bad)
		}
	}
}
