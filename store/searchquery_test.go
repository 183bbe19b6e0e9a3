package store_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/store"
)

// searchStore opens a store holding a message of each content, in order
// a second apart, with IDs msg_0, msg_1, …
func searchStore(t testing.TB, contents ...string) *store.Store {
	t.Helper()
	st, err := store.Open(filepath.Join(t.TempDir(), "p.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var evs []*eventlog.Event
	for i, c := range contents {
		evs = append(evs, &eventlog.Event{ID: eventlog.NewID(), Time: t0.Add(time.Duration(i) * time.Second), Type: eventlog.TypeMessageCreate, Shard: "alice",
			Payload: eventlog.MessageCreate{MessageID: fmt.Sprintf("msg_%d", i), AgentID: "alice", SessionID: "ses", Format: "markdown", Content: c, Priority: "normal"}})
	}
	if err := st.Apply(context.Background(), evs); err != nil {
		t.Fatal(err)
	}
	return st
}

// found returns the IDs of the messages a query finds, oldest first.
func found(t *testing.T, st *store.Store, query string) []string {
	t.Helper()
	hits, total, _, err := st.Search(context.Background(), store.SearchFilter{Query: query, ByTime: true, Limit: 100})
	if err != nil {
		t.Fatalf("%q: %v", query, err)
	}
	ids := []string{}
	for _, h := range hits {
		ids = append(ids, h.MessageID)
	}
	slices.Reverse(ids)
	if total != len(ids) {
		t.Fatalf("%q: total %d, found %v", query, total, ids)
	}
	return ids
}

// marked returns the words a snippet marks as matches.
func marked(snippet string) []string {
	var out []string
	for _, part := range strings.Split(snippet, store.SnippetOpen)[1:] {
		w, _, _ := strings.Cut(part, store.SnippetClose)
		out = append(out, w)
	}
	return out
}

func ids(n ...int) []string {
	out := []string{}
	for _, i := range n {
		out = append(out, fmt.Sprintf("msg_%d", i))
	}
	return out
}

func TestSearchQueryLanguage(t *testing.T) {
	st := searchStore(t,
		"The reviewer said the auth token must rotate",
		"authentication uses a JWT token",
		"token auth said nothing; user_id is café-bound",
		`He wrote "don't" and body_content:x`,
	)
	tests := []struct {
		query string
		want  []string
	}{
		{"token", ids(0, 1, 2)},
		{"auth token", ids(0, 2)},
		{`"auth token"`, ids(0)},
		{"auth*", ids(0, 1, 2)},
		{`"auth tok"*`, ids(0)},
		{"token NOT jwt", ids(0, 2)},
		{"reviewer OR jwt", ids(0, 1)},
		{"(reviewer OR jwt) AND rotate", ids(0)},
		{"jwt OR reviewer NOT rotate", ids(1)},
		{"what did the reviewer say about the auth token?", nil}, // "what", "did" … are not all there
		{"reviewer said auth token?", ids(0)},
		{"AUTH-TOKEN", ids(0)}, // punctuation in a word makes a phrase
		{"user_id", ids(2)},
		{"cafe", ids(2)},
		{"caf*", ids(2)},    // prefixes fold diacritics too
		{"and or not", nil}, // lower case: words
		{"don't", ids(3)},
		{"body_content:x", ids(3)}, // no column filter: words
		{`x" OR "1"="1`, ids(3)},   // words: x" or (1 and ="1); only "x" is there
		{"'; DROP TABLE messages; --", nil},
		{"token - ?", ids(0, 1, 2)}, // punctuation alone is not a word
	}
	for _, tc := range tests {
		t.Run(tc.query, func(t *testing.T) {
			want := tc.want
			if want == nil {
				want = []string{}
			}
			if got := found(t, st, tc.query); !slices.Equal(got, want) {
				t.Fatalf("%q found %v, want %v", tc.query, got, want)
			}
		})
	}
}

// TestSearchPrefixesMatchWordBeginnings: a prefix matches every word
// that begins with it as written, also where the word's stem does not
// (the stemmed index holds "deployment" as "deploy" but "deploy" as
// "deploi", "tokenizer" as "token", "running" as "run"), and nothing
// else (not "tokens" for tokeniz*); whole words keep their stemming, in
// queries of both kinds of term too.
func TestSearchPrefixesMatchWordBeginnings(t *testing.T) {
	st := searchStore(t,
		"the deployment to staging failed", // 0
		"we deployed it",                   // 1
		"deploy now, then staging",         // 2
		"the tokenizer splits words",       // 3
		"tokenized text",                   // 4
		"two tokens",                       // 5
		"generalization of analyses",       // 6
		"Déployé hier, running",            // 7
		"the analysis of runners",          // 8
	)
	tests := []struct {
		query string
		want  []string
	}{
		{"deploy*", ids(0, 1, 2, 7)},
		{"deployment*", ids(0)},
		{"deploye*", ids(1, 7)},
		{"tokeniz*", ids(3, 4)},
		{"token*", ids(3, 4, 5)},
		{"generaliz*", ids(6)},
		{"analys*", ids(6, 8)},
		{"runn*", ids(7, 8)},
		{`"the deploy"*`, ids(0)},
		{`"the token"*`, ids(3)},
		// Whole words are stemmed: "tokens" is "token", as are
		// "tokenizer" and "tokenized".
		{"tokens", ids(3, 4, 5)},
		{"staging", ids(0, 2)},
		// Both kinds in one query.
		{"deploy* NOT staging", ids(1, 7)},
		{"staging deploy*", ids(0, 2)},
		{"deploy* staging", ids(0, 2)},
		{"tokeniz* OR staging", ids(0, 2, 3, 4)},
		{"(tokeniz* OR deploy*) NOT staging", ids(1, 3, 4, 7)},
		{"deploy* NOT (staging OR deployed)", ids(7)},
		{"tokens NOT tokeniz*", ids(5)},
		{"(staging OR text) deploy*", ids(0, 2)},
		{"(staging OR tokeniz*) (deploy* OR text)", ids(0, 2, 4)},
		{"deploy* AND NOT_A_WORD_HERE OR runn*", ids(7, 8)},
	}
	for _, tc := range tests {
		t.Run(tc.query, func(t *testing.T) {
			if got := found(t, st, tc.query); !slices.Equal(got, tc.want) {
				t.Fatalf("%q found %v, want %v", tc.query, got, tc.want)
			}
		})
	}

	ctx := context.Background()
	// Snippets mark the words the prefixes matched, and the whole words.
	for _, tc := range []struct {
		query string
		want  map[string][]string // message → its marked words
	}{
		{"deploy*", map[string][]string{"msg_0": {"deployment"}, "msg_1": {"deployed"}, "msg_7": {"Déployé"}}},
		{"staging deploy*", map[string][]string{"msg_0": {"deployment", "staging"}, "msg_2": {"deploy", "staging"}}},
		{"tokens NOT tokeniz*", map[string][]string{"msg_5": {"tokens"}}},
	} {
		hits, _, _, err := st.Search(ctx, store.SearchFilter{Query: tc.query, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hits {
			if want, ok := tc.want[h.MessageID]; ok && !slices.Equal(marked(h.Snippet), want) {
				t.Errorf("%q: %s's snippet %q marks %q, want %q", tc.query, h.MessageID, h.Snippet, marked(h.Snippet), want)
			}
		}
	}
	// A query with a part of one kind to drive is ranked; one without
	// (an OR of both kinds) comes newest first, and says so.
	for _, tc := range []struct {
		query  string
		byTime bool
	}{{"deploy*", false}, {"staging deploy*", false}, {"deploy* NOT staging", false}, {"tokeniz* OR staging", true}} {
		_, _, byTime, err := st.Search(ctx, store.SearchFilter{Query: tc.query, Limit: 10})
		if err != nil || byTime != tc.byTime {
			t.Errorf("%q: byTime %v (%v), want %v", tc.query, byTime, err, tc.byTime)
		}
	}
}

func TestSearchMalformedQueries(t *testing.T) {
	st := searchStore(t, "auth token")
	tests := []struct{ query, msg string }{
		{"", "query is required"},
		{"   ", "query is required"},
		{"?!", "has no words"},
		{`"auth token`, "the quote at character 1 is not closed"},
		{`""`, "the phrase at character 1 has no words"},
		{`auth "?!"`, "the phrase at character 6 has no words"},
		{"(auth token", "( at character 1 is not closed"},
		{"auth)", ") at character 5 has no ("},
		{"auth AND", "ends after AND at character 6"},
		{"auth OR", "ends after OR at character 6"},
		{"auth NOT", "ends after NOT at character 6"},
		{"auth (", "ends after the ( at character 6"},
		{"NOT auth", "NOT at character 1 needs a word before it"},
		{"AND auth", "AND at character 1 needs a word"},
		{"auth AND NOT token", "NOT at character 10"},
		{"()", "has no words"},
		{"a ()", ") at character 4 needs a word"},
		{"*", "* at character 1 must follow a word"},
		{"auth -*", "* at character 7 must follow a word"},
		{strings.Repeat("w ", 40), "more than 32 words and phrases: the one at character 65"},
		{strings.Repeat("x", 2000), "2000 bytes, at most 1024: it runs past the limit at character 1025"},
		{strings.Repeat("é", 600), "1200 bytes, at most 1024: it runs past the limit at character 513"},
		{"\xff", "not valid UTF-8: byte 1 (character 1)"},
		{"auté\xffx", "not valid UTF-8: byte 6 (character 5)"},
		{"auth\x00token", "character 5 is a NUL"},
		{"é \x00", "character 3 is a NUL"},
	}
	for _, tc := range tests {
		t.Run(tc.query, func(t *testing.T) {
			_, _, _, err := st.Search(context.Background(), store.SearchFilter{Query: tc.query, Limit: 10})
			if !errors.Is(err, store.ErrBadQuery) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("%q: %v, want ErrBadQuery saying %q", tc.query, err, tc.msg)
			}
		})
	}
	// A replacement character typed as such is valid UTF-8: a word of
	// no letters, ignored.
	if got := found(t, st, "auth \uFFFD"); !slices.Equal(got, ids(0)) {
		t.Fatalf("auth U+FFFD found %v", got)
	}
}

// FuzzSearchQuery: any query is either refused by the parser, saying
// what is wrong, or searched: never an expression SQLite refuses, in
// either index, in any kind of plan.
func FuzzSearchQuery(f *testing.F) {
	for _, s := range []string{"auth token", `"a b"*`, "a OR (b NOT c)", "((", `x" OR "1"="1`, "NOT", "a AND", "é* ü", "a:b", "^a", "a + b", "NEAR(a b)",
		"deploy* NOT staging", "a* OR b", "(a* OR b) NOT (c* d)", `"a b"* NOT "c d"`, "a\x00b"} {
		f.Add(s)
	}
	st := searchStore(f, "auth token", "a b c d", "deployment to staging")
	f.Fuzz(func(t *testing.T, q string) {
		_, _, _, err := st.Search(context.Background(), store.SearchFilter{Query: q, Limit: 10})
		if err == nil {
			return
		}
		if !errors.Is(err, store.ErrBadQuery) || strings.Contains(err.Error(), "search index refused") {
			t.Fatalf("%q: %v", q, err)
		}
	})
}
