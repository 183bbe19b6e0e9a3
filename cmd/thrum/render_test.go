package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/thrumhq/thrum/internal/frame"
	"github.com/thrumhq/thrum/rpc"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// goldenNow is the fixed "now" of the golden renderings.
var goldenNow = time.Date(2026, 2, 3, 12, 0, 0, 0, time.UTC)

// at is a timestamp d before goldenNow.
func at(d time.Duration) string { return goldenNow.Add(-d).Format(time.RFC3339Nano) }

// golden compares got with testdata/golden/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run %s -update to create it)", err, t.Name())
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file (go test -update rewrites it)\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}

// msg builds a message summary.
func msg(id, agent string, age time.Duration, read bool, content string) rpc.MessageSummary {
	return rpc.MessageSummary{MessageID: id, AgentID: agent, CreatedAt: at(age), IsRead: read, Priority: rpc.PriorityNormal,
		Body: rpc.Body{Format: rpc.FormatMarkdown, Content: content}}
}

func replyOf(m rpc.MessageSummary, parent string) rpc.MessageSummary {
	m.Refs = append(m.Refs, rpc.Pair{Type: rpc.RefReplyTo, Value: parent})
	return m
}

func page(total, unread, pg, size int, ms ...rpc.MessageSummary) *rpc.ListMessagesResult {
	pages := (total + size - 1) / size
	return &rpc.ListMessagesResult{Messages: ms, Total: total, Unread: unread, Page: pg, PageSize: size, TotalPages: pages}
}

func TestInboxGolden(t *testing.T) {
	edited := msg("msg_01HXF0000000000000000EDIT", "reviewer", time.Hour, true, "Updated: auth module complete with rate limiting")
	edited.UpdatedAt = at(2 * time.Minute)
	edited.Version = 2
	high := msg("msg_01HXF0000000000000000HIGH", "implementer", 3*time.Minute, false, "Production deploy is blocked")
	high.Priority = rpc.PriorityHigh
	critical := msg("msg_01HXF000000000000000CRIT", "ops", 30*time.Second, false, "Database is down")
	critical.Priority = rpc.PriorityCritical
	low := msg("msg_01HXF00000000000000000LOW", "bot", 26*time.Hour, true, "Nightly docs rebuilt")
	low.Priority = rpc.PriorityLow
	critEdited := critical
	critEdited.MessageID = "msg_01HXF00000000000CRITEDIT"
	critEdited.UpdatedAt = at(10 * time.Second)

	long := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 6) +
		"See https://example.com/a/very/long/url/that/does/not/fit/on/one/line/of/the/inbox/box/at/all/really for details."

	spec := make([]rpc.MessageSummary, 10)
	for i := range spec {
		spec[i] = msg("msg_01HXE000000000000000000"+string(rune('A'+i)), "implementer", time.Duration(i+1)*5*time.Minute, i >= 3, "Message "+string(rune('A'+i)))
	}

	orig := msg("msg_01HXE0000000000000000ORIG", "implementer", 5*time.Minute, false, "Auth module complete, all tests passing")
	r1 := replyOf(msg("msg_01HXG00000000000000REPLY1", "reviewer", 4*time.Minute, true, "Looks good"), orig.MessageID)
	r2 := replyOf(msg("msg_01HXG00000000000000REPLY2", "implementer", 2*time.Minute, false, "Merging now"), orig.MessageID)
	other := msg("msg_01HXF0000000000000000OTHR", "tester", 3*time.Minute, true, "UI tests green")

	cases := []struct {
		name string
		r    *rpc.ListMessagesResult
		v    inboxView
	}{
		{"empty", page(0, 0, 1, 10), inboxView{}},
		{"empty_filter", page(0, 0, 1, 10), inboxView{Filter: []string{"scope=module:auth"}, FilterFlags: "--scope module:auth", AllTotal: 15}},
		{"empty_filters", page(0, 0, 1, 10), inboxView{Filter: []string{"scope=module:auth", "mentions", "unread"}, FilterFlags: "--scope module:auth --mentions --unread", AllTotal: 15}},
		{"mixed", page(4, 2, 1, 10,
			msg("msg_01HXE000000000000000NEW1", "implementer", 10*time.Second, false, "Just landed"),
			msg("msg_01HXE000000000000000OLD1", "reviewer", 5*time.Minute, true, "Seen this"),
			msg("msg_01HXE000000000000000OLD2", "implementer", 3*time.Hour, false, "Still unread"),
			msg("msg_01HXE000000000000000OLD3", "reviewer", 50*time.Hour, true, "Ancient history")), inboxView{}},
		// Newest first, as the daemon lists them: replies before their original.
		{"reply_grouped", page(4, 2, 1, 10, r2, other, r1, orig), inboxView{}},
		{"reply_original_elsewhere", page(12, 1, 2, 10,
			replyOf(msg("msg_01HXG0000000000000ORPHAN", "reviewer", time.Minute, false, "Replying to something on page 1"), "msg_01HXE00000000000000PAGE1"),
			msg("msg_01HXF0000000000000000LAST", "implementer", 2*time.Minute, true, "Last one")), inboxView{}},
		// inbox --mentions: the replies are listed, their original is
		// not, and is shown as context above them.
		{"reply_original_fetched", page(3, 2, 1, 10,
			replyOf(msg("msg_01HXG0000000000000MREPL2", "tester", time.Minute, false, "Second answer"), orig.MessageID),
			other,
			replyOf(msg("msg_01HXG0000000000000MREPL1", "reviewer", 2*time.Minute, false, "First answer"), orig.MessageID)),
			inboxView{Filter: []string{"mentions"}, Originals: map[string]rpc.MessageSummary{orig.MessageID: orig}}},
		// A reply to a reply, both on the page, the original not: all
		// under the original.
		{"reply_chain_original_fetched", page(2, 2, 1, 10,
			replyOf(msg("msg_01HXG0000000000000000RR2", "implementer", time.Minute, false, "Reply to the reply"), "msg_01HXG0000000000000000RR1"),
			replyOf(msg("msg_01HXG0000000000000000RR1", "reviewer", 2*time.Minute, false, "First reply"), orig.MessageID)),
			inboxView{Filter: []string{"unread"}, Originals: map[string]rpc.MessageSummary{orig.MessageID: orig}}},
		{"reply_original_deleted", page(1, 1, 1, 10,
			replyOf(msg("msg_01HXG0000000000000MREPL1", "reviewer", 2*time.Minute, false, "First answer"), orig.MessageID)),
			inboxView{Originals: map[string]rpc.MessageSummary{orig.MessageID: {MessageID: orig.MessageID, Deleted: true}}}},
		{"reply_to_reply", page(3, 1, 1, 10,
			replyOf(msg("msg_01HXG0000000000000000RR2", "implementer", time.Minute, false, "Reply to the reply"), "msg_01HXG0000000000000000RR1"),
			replyOf(msg("msg_01HXG0000000000000000RR1", "reviewer", 2*time.Minute, true, "First reply"), orig.MessageID),
			orig), inboxView{}},
		// Replies that point at each other (a forged log) are still shown.
		{"reply_cycle", page(2, 0, 1, 10,
			replyOf(msg("msg_01HXG000000000000000CYC1", "reviewer", time.Minute, true, "One"), "msg_01HXG000000000000000CYC2"),
			replyOf(msg("msg_01HXG000000000000000CYC2", "reviewer", 2*time.Minute, true, "Two"), "msg_01HXG000000000000000CYC1")), inboxView{}},
		{"edited", page(1, 0, 1, 10, edited), inboxView{}},
		{"priority", page(5, 3, 1, 10, critical, high, edited, low, critEdited), inboxView{}},
		{"long_content", page(2, 1, 1, 10,
			msg("msg_01HXE0000000000000000LONG", "implementer", time.Minute, false, long),
			msg("msg_01HXE00000000000000LONGID", "an_agent_with_a_rather_long_name_that_keeps_going_and_going", 90*time.Minute, true, "short")), inboxView{}},
		{"multiline", page(1, 1, 1, 10,
			msg("msg_01HXE00000000000000MULTI", "implementer", time.Minute, false, "Summary:\r\n\n- tests pass\n- docs updated\n\n    indented code\n\n")), inboxView{}},
		{"unicode", page(2, 2, 1, 10,
			msg("msg_01HXE0000000000000000UNI1", "reviewer", time.Minute, false, "Ça marche: naïve café, Ω≈ç√, “quotes” — done ✓"),
			msg("msg_01HXE0000000000000000UNI2", "implementer", 2*time.Minute, false, "日本語のテキストと絵文字 🚀🎉 "+strings.Repeat("é", 80))), inboxView{}},
		{"spec_footer", page(23, 3, 1, 10, spec...), inboxView{}},
		{"page2", page(23, 3, 2, 10, spec...), inboxView{}},
		{"page2_filtered", page(7, 3, 2, 3, spec[:3]...), inboxView{Filter: []string{"scope=module:auth", "unread"},
			FilterFlags: "--scope module:auth --unread", NextCmd: "thrum inbox --scope module:auth --unread --page-size 3"}},
		{"last_page", page(23, 3, 3, 10, spec[7:]...), inboxView{}},
		{"past_last_page", page(23, 3, 9, 10), inboxView{}},
		{"past_only_page", page(2, 0, 2, 10), inboxView{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.v.Now = goldenNow
			var b bytes.Buffer
			renderInbox(&b, tc.r, tc.v)
			out := b.String()
			golden(t, "inbox_"+tc.name+".txt", out)
			// Every box line is exactly as wide as the box.
			for _, l := range strings.Split(out, "\n") {
				if l == "" || !strings.ContainsAny(l[:3], "│┌├└") {
					continue
				}
				if n := utf8.RuneCountInString(l); n != boxWidth+4 {
					t.Errorf("box line is %d characters, want %d: %q", n, boxWidth+4, l)
				}
			}
			// Every message on the page is shown exactly once.
			for _, m := range tc.r.Messages {
				if n := strings.Count(out, m.MessageID+"  @"); n != 1 {
					t.Errorf("%s shown %d times:\n%s", m.MessageID, n, out)
				}
			}
		})
	}
}

func TestMessageGolden(t *testing.T) {
	full := &rpc.MessageDetail{
		MessageID: "msg_01HXE0000000000000000FULL",
		ThreadID:  "thr_01HXE000000000000000THREAD",
		Author:    rpc.Author{AgentID: "implementer", SessionID: "ses_01HXE0000000000000000SESS"},
		Body:      rpc.Body{Format: rpc.FormatMarkdown, Content: "Auth module complete, all tests passing\n\n- 45 passed\n- 2 failed", Structured: `{"type":"test_result","passed":45,"failed":2}`},
		Scopes:    []rpc.Pair{{Type: "module", Value: "auth"}, {Type: "file", Value: "src/auth.go"}},
		Refs:      []rpc.Pair{{Type: "issue", Value: "beads-42"}, {Type: "mention", Value: "reviewer"}},
		CreatedAt: at(5 * time.Minute),
		UpdatedAt: at(2 * time.Minute),
		Priority:  rpc.PriorityHigh,
		Tags:      []string{"release", "auth"},
		Version:   2,
		IsRead:    true,
	}
	deleted := &rpc.MessageDetail{
		MessageID: "msg_01HXE000000000000000DELTD",
		Author:    rpc.Author{AgentID: "reviewer", SessionID: "ses_01HXE0000000000000000SESS"},
		Body:      rpc.Body{Format: rpc.FormatPlain, Content: "Wrong channel, sorry"},
		Metadata:  rpc.MessageMetadata{DeletedAt: at(3 * time.Hour), DeleteReason: "posted by mistake"},
		CreatedAt: at(4 * time.Hour),
		Deleted:   true,
		Priority:  rpc.PriorityNormal,
	}
	deletedNoReason := *deleted
	deletedNoReason.MessageID = "msg_01HXE00000000000000DELNR"
	deletedNoReason.Metadata.DeleteReason = ""
	via := &rpc.MessageDetail{
		MessageID:    "msg_01HXE0000000000000000VIA1",
		Author:       rpc.Author{AgentID: "implementer"},
		Body:         rpc.Body{Format: rpc.FormatMarkdown, Content: "Sent for the agent by its user"},
		CreatedAt:    at(3 * 24 * time.Hour),
		Priority:     rpc.PriorityNormal,
		DisclosedVia: "user:leon",
	}
	for _, tc := range []struct {
		name string
		m    *rpc.MessageDetail
	}{
		{"full", full}, {"deleted", deleted}, {"deleted_no_reason", &deletedNoReason}, {"via_user", via},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			renderMessage(&b, tc.m, goldenNow)
			golden(t, "message_"+tc.name+".txt", b.String())
		})
	}
}

func TestAgo(t *testing.T) {
	for _, tc := range []struct {
		ts   string
		want string
	}{
		{at(0), "just now"},
		{at(59 * time.Second), "just now"},
		{at(-time.Hour), "just now"}, // a clock ahead of ours
		{at(time.Minute), "1m ago"},
		{at(59 * time.Minute), "59m ago"},
		{at(time.Hour), "1h ago"},
		{at(23*time.Hour + 59*time.Minute), "23h ago"},
		{at(24 * time.Hour), "1d ago"},
		{at(400 * 24 * time.Hour), "400d ago"},
		{"2026-02-03T11:55:00+01:00", "1h ago"},
		{"not a time", "not a time"},
		{"", ""},
	} {
		if got := ago(tc.ts, goldenNow); got != tc.want {
			t.Errorf("ago(%q) = %q, want %q", tc.ts, got, tc.want)
		}
	}
}

func TestWrap(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		width    int
		want     []string
	}{
		{"empty", "", 10, []string{""}},
		{"fits", "hello world", 11, []string{"hello world"}},
		{"breaks at spaces", "hello big world", 10, []string{"hello big", "world"}},
		{"long word", "abcdefghijkl", 5, []string{"abcde", "fghij", "kl"}},
		{"long word after text", "hi abcdefghijkl", 5, []string{"hi", "abcde", "fghij", "kl"}},
		{"keeps line breaks", "a\nb\n\nc", 10, []string{"a", "b", "", "c"}},
		{"crlf", "a\r\nb", 10, []string{"a", "b"}},
		{"drops trailing blank lines", "a\n\n\n", 10, []string{"a"}},
		{"runes not bytes", "ééééé ééééé", 5, []string{"ééééé", "ééééé"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := wrap(tc.in, tc.width)
			if strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Errorf("wrap(%q, %d) = %q, want %q", tc.in, tc.width, got, tc.want)
			}
		})
	}
}

// hostile is a body that, printed as it is, would act on the reader's
// terminal: set its title (OSC 0) and clipboard (OSC 52), erase and
// rewrite a line (CSI, CR), delete (DEL), a C1 CSI, reverse what follows
// (RLO) and hide a text in Unicode tags.
const hostile = "title\x1b]0;pwned\x07 clip\x1b]52;c;cm0gLXJmIH4=\x07 \x1b[2K\rfake\x7f c1\u009b31m rlo\u202egnp.exe tag\U000E0041\U000E0042 bad\xff"

// TestShownEscapesWhatActsOnATerminal: every C0 control but newline and
// tab, DEL, every C1 control, and every character the frame calls hidden
// is written as a Go escape, and a byte that is not UTF-8 as \xff; the
// rest, accents and emoji included, as it is.
func TestShownEscapesWhatActsOnATerminal(t *testing.T) {
	want := `title\x1b]0;pwned\x07 clip\x1b]52;c;cm0gLXJmIH4=\x07 \x1b[2K\x0dfake\x7f c1\u009b31m rlo\u202egnp.exe tag\U000e0041\U000e0042 bad\xff`
	if got := shown(hostile); got != want {
		t.Errorf("shown(hostile) =\n%s\nwant\n%s", got, want)
	}
	for _, s := range []string{"plain\ttext\nnext line", "Ça marche: naïve café — ✓ 🚀 日本語", "U+FFFD itself: \ufffd"} {
		if got := shown(s); got != s {
			t.Errorf("shown(%q) = %q, want it as it is", s, got)
		}
	}
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if r == '\n' || r == '\t' || !frame.Hidden(r) && !(r >= 0x80 && r <= 0x9f) && r != 0x7f {
			continue
		}
		if got := shown(string(r)); strings.ContainsRune(got, r) || !strings.HasPrefix(got, `\`) {
			t.Fatalf("shown(U+%04X) = %q, want an escape", r, got)
		}
	}
}

// TestPreview: a list shows the first 3 lines or 300 characters of a
// body, escaped first, cut where a grapheme cluster ends, then how many
// characters more there are and where to read them.
func TestPreview(t *testing.T) {
	more := func(n int) string { return fmt.Sprintf("\n… %d more characters: thrum message get msg_1", n) }
	a300 := strings.Repeat("a", 300)
	for _, tc := range []struct{ name, body, want string }{
		{"short", "hello", "hello"},
		{"three lines", "one\ntwo\nthree", "one\ntwo\nthree"},
		{"trailing blank lines", "one\ntwo\nthree\n\n\n", "one\ntwo\nthree"},
		{"four lines", "one\ntwo\nthree\nfour", "one\ntwo\nthree" + more(5)},
		{"CRLF lines", "one\r\ntwo\r\nthree\r\nfour", "one\ntwo\nthree" + more(5)},
		{"300 characters", a300, a300},
		{"301 characters", a300 + "b", a300 + "\n… 1 more character: thrum message get msg_1"},
		{"100 KB", strings.Repeat("x", 100<<10), strings.Repeat("x", 300) + more(100<<10-300)},
		{"escaped, then cut", strings.Repeat("\x1b", 100), strings.Repeat(`\x1b`, 75) + more(100)},
		{"an accent stays on its letter", strings.Repeat("a", 299) + "e\u0301z", strings.Repeat("a", 299) + more(3)},
		{"a flag is not halved", strings.Repeat("a", 299) + "🇫🇷", strings.Repeat("a", 299) + more(2)},
		{"a Hangul syllable of jamo stays whole", strings.Repeat("a", 298) + "\u1100\u1161\u11A8", strings.Repeat("a", 298) + more(3)},
	} {
		if got := preview(tc.body, "msg_1"); got != tc.want {
			t.Errorf("%s: preview =\n%q\nwant\n%q", tc.name, got, tc.want)
		}
	}
}

// TestHighlightPlainWhenPiped: without a terminal a snippet is plain
// text, no ** around the matches; on a terminal the matches are bold
// yellow and everything of the snippet is escaped, so the only escape
// sequences are the highlight's own.
func TestHighlightPlainWhenPiped(t *testing.T) {
	s := "find the needle\x1b]0;t\x07 here"
	if got, want := highlight(s, [][2]int{{9, 15}}, false), `find the needle\x1b]0;t\x07 here`; got != want {
		t.Errorf("piped highlight = %q, want %q", got, want)
	}
	got := highlight(s, [][2]int{{9, 15}}, true)
	if want := "find the \x1b[1;33mneedle\x1b[0m" + `\x1b]0;t\x07 here`; got != want {
		t.Errorf("terminal highlight = %q, want %q", got, want)
	}
}

// FuzzShown holds, for any bytes, that what human output writes is
// UTF-8 with no character a terminal acts on or hides but newline and
// tab, and that a preview is the start of that text, cut where a line
// or a grapheme cluster ends, at most 3 lines and 300 characters.
func FuzzShown(f *testing.F) {
	f.Add(hostile)
	f.Add("a\nb\r\nc\nd\n" + strings.Repeat("e\u0301", 200))
	f.Add("\xff\xfe\x9b\u202e🇫🇷\U000E0041")
	f.Fuzz(func(t *testing.T, s string) {
		out := shown(s)
		if !utf8.ValidString(out) {
			t.Fatalf("shown(%q) = %q is not UTF-8", s, out)
		}
		if ch, bad := actsOnTerminal(out); bad {
			t.Fatalf("shown(%q) = %q writes U+%04X as it is", s, out, ch)
		}
		p, _, _ := strings.Cut(preview(s, "msg_1"), "\n… ")
		whole := shown(strings.TrimRight(strings.ReplaceAll(s, "\r\n", "\n"), " \t\n"))
		if !strings.HasPrefix(whole, p) || strings.Count(p, "\n") > 2 || utf8.RuneCountInString(p) > 300 {
			t.Fatalf("preview of %q is %q: not the start of %q within 3 lines and 300 characters", s, p, whole)
		}
	})
}
