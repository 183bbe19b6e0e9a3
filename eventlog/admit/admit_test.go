package admit_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/eventlog/admit"
)

func openLog(t testing.TB) *eventlog.Log {
	t.Helper()
	l, err := eventlog.Open(t.TempDir(), &eventlog.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func newGate(t testing.TB, l *eventlog.Log, opts *admit.Options) *admit.Gate {
	t.Helper()
	g, err := admit.New(l, opts)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// eachEvent is a Judge that judges each event alone.
func eachEvent(judge func(*eventlog.Event) admit.Verdict) admit.Judge {
	return func(_ context.Context, _ string, evs []*eventlog.Event) ([]admit.Verdict, error) {
		out := make([]admit.Verdict, len(evs))
		for i, e := range evs {
			out[i] = judge(e)
		}
		return out, nil
	}
}

// line is an event line of type typ at time at with the given payload
// fields (a JSON object's members).
func line(typ string, at time.Time, fields string) []byte {
	return fmt.Appendf(nil, `{"event_id":"%s","type":"%s","timestamp":"%s",%s}`, eventlog.NewID(), typ, eventlog.FormatTime(at), fields)
}

func message(author string) []byte {
	return line(eventlog.TypeMessageCreate, time.Now(), fmt.Sprintf(
		`"message_id":"msg_%s","agent_id":%q,"session_id":"ses_%s","format":"markdown","content":"hi","priority":"normal"`,
		eventlog.NewID(), author, eventlog.NewID()))
}

// shardLines returns the lines of a shard's files.
func shardLines(t *testing.T, l *eventlog.Log, shard string) [][]byte {
	t.Helper()
	var out [][]byte
	segs, err := l.Segments(shard)
	if err != nil {
		t.Fatal(err)
	}
	for _, rel := range segs {
		b, err := os.ReadFile(filepath.Join(l.Dir(), rel))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n"))...)
	}
	return out
}

// A gate imports what may enter the shard, refuses the rest into the
// quarantine (each line once, however often it comes), skips what the
// shard holds, and asks the judge only about events the log's rules let
// through.
func TestGateImportsRefusesAndSkips(t *testing.T) {
	l := openLog(t)
	var judged []string
	g := newGate(t, l, &admit.Options{Judge: eachEvent(func(e *eventlog.Event) admit.Verdict {
		judged = append(judged, e.ID)
		if strings.Contains(string(e.Raw), "mallory was here") {
			return admit.Verdict{Refuse: "the judge said no"}
		}
		return admit.Verdict{}
	})})
	good := message("alice")
	judgedNo := bytes.Replace(message("alice"), []byte(`"content":"hi"`), []byte(`"content":"mallory was here"`), 1)
	lines := [][]byte{
		good,
		[]byte("not json"),
		message("bob"), // in alice's shard
		line(eventlog.TypeCredentialAdd, time.Now(), `"agent_id":"alice","token_hash":"x"`),
		judgedNo,
		good,
	}
	src := admit.Source{File: "messages/alice.jsonl", Commit: "c1"}
	res, err := g.Admit(t.Context(), src, "alice", lines)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Imported) != 1 || res.Imported[0].ID != eventlog.LineID(good) || len(res.Refused) != 4 || res.Held != 1 {
		t.Fatalf("Admit: %d imported, %d refused, %d held; want 1, 4, 1", len(res.Imported), len(res.Refused), res.Held)
	}
	if len(judged) != 2 {
		t.Errorf("the judge saw %d events, want the 2 the log's rules let through", len(judged))
	}
	if got := shardLines(t, l, "alice"); len(got) != 1 || !bytes.Equal(got[0], good) {
		t.Errorf("alice's shard holds %q, want the good line alone", got)
	}
	// Again, from a later version of the source: nothing new.
	res, err = g.Admit(t.Context(), admit.Source{File: src.File, Commit: "c2"}, "alice", lines)
	if err != nil || len(res.Imported) != 0 || res.Held != 2 {
		t.Fatalf("Admit again: %+v, %v; want nothing imported, the good line held", res, err)
	}
	n, counts := g.Refusals()
	rs, err := admit.ReadQuarantine(l.Dir())
	if err != nil || n != 4 || len(rs) != 4 {
		t.Fatalf("the quarantine holds %d lines (%v), Refusals says %d; want 4 each", len(rs), err, n)
	}
	if len(counts) != 4 || counts[0].File != src.File {
		t.Errorf("Refusals = %+v, want 4 reasons in %s", counts, src.File)
	}
	// A new gate (a restart) knows what was kept.
	if n, _ := newGate(t, l, nil).Refusals(); n != 4 {
		t.Errorf("a new gate counts %d refusals, want 4", n)
	}
}

// The quarantine is its owner's alone, whatever the umask: it holds
// what other machines sent, message bodies included.
func TestQuarantineIsPrivate(t *testing.T) {
	l := openLog(t)
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	g := newGate(t, l, nil)
	if _, err := g.Admit(t.Context(), admit.Source{File: "events.jsonl"}, "", [][]byte{[]byte("garbage")}); err != nil {
		t.Fatal(err)
	}
	if err := g.RefuseFile(admit.Source{File: "local.jsonl"}, "the local shard"); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(l.Dir(), admit.QuarantineFile))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("%s has mode %04o, want 0600", admit.QuarantineFile, st.Mode().Perm())
	}
	if n, _ := g.Refusals(); n != 2 {
		t.Errorf("Refusals = %d, want the line and the file", n)
	}
}

// A quarantine file that is a symbolic link is never written through.
func TestQuarantineNeverFollowsALink(t *testing.T) {
	l := openLog(t)
	target := filepath.Join(t.TempDir(), "elsewhere")
	if err := os.WriteFile(target, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(l.Dir(), admit.QuarantineFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := admit.New(l, nil); err == nil {
		t.Error("New: no error for a quarantine file that is a symbolic link")
	}
	if b, _ := os.ReadFile(target); len(b) != 0 {
		t.Errorf("the link's target was written: %q", b)
	}
}

// Two transports hand the gate the same 1,000 events at once, in
// batches of their own sizes: each event is imported once, by one of
// them, and the shard holds it once.
func TestGateTwoTransportsAtOnce(t *testing.T) {
	l := openLog(t)
	g := newGate(t, l, nil)
	lines := make([][]byte, 1000)
	for i := range lines {
		lines[i] = message("alice")
	}
	imported := make(chan int, 2)
	for _, size := range []int{7, 64} {
		go func() {
			n := 0
			for i := 0; i < len(lines); i += size {
				res, err := g.Admit(context.Background(), admit.Source{File: fmt.Sprintf("transport-%d", size)}, "alice", lines[i:min(i+size, len(lines))])
				if err != nil {
					t.Error(err)
					break
				}
				n += len(res.Imported)
			}
			imported <- n
		}()
	}
	if n := <-imported + <-imported; n != 1000 {
		t.Errorf("the transports imported %d events between them, want 1,000", n)
	}
	seen := map[string]int{}
	for _, line := range shardLines(t, l, "alice") {
		seen[eventlog.LineID(line)]++
	}
	if len(seen) != 1000 {
		t.Errorf("the shard holds %d events, want 1,000", len(seen))
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("event %s is in the shard %d times", id, n)
		}
	}
}
