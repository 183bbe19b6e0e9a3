package eventlog

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestCheckAtFindsChangesBeforeAPosition damages a shard before a saved
// position in the ways a hand edit does, and checks that CheckAt reports
// each as a CorruptError naming the line that was damaged, not the line
// the position happens to fall in. (A same-length change that leaves every
// line parseable and the line at the position intact is beyond it: only a
// comparison with the projection, thrum doctor, finds that.)
func TestCheckAtFindsChangesBeforeAPosition(t *testing.T) {
	g := make([]string, 6)
	for i := range g {
		g[i] = goodLine(t, "g")
	}
	content := strings.Join(g, "")
	end := int64(len(content))
	lastID := func(t *testing.T, l *Log) string {
		evs, _ := scanAll(t, l, nil)
		return evs[len(evs)-1].ID
	}
	tests := []struct {
		name     string
		damage   func(string) string
		wantLine int
		wantErr  string
	}{
		{"garbage line inserted at line 3", func(s string) string { return g[0] + g[1] + "garbage\n" + strings.Join(g[2:], "") }, 3, "not valid JSON"},
		{"line 2 deleted", func(s string) string { return g[0] + strings.Join(g[2:], "") }, 6, "shorter than the position"},
		{"last line replaced by another event of the same length", func(s string) string {
			return strings.Join(g[:5], "") + g[4] // IDs have the same length
		}, 6, "holds event"},
		{"file truncated", func(s string) string { return strings.Join(g[:3], "") }, 4, "shorter than the position"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, EventsFile)
			writeFile(t, path, content)
			l := openLog(t, dir, nil)
			want := lastID(t, l)
			if ev, err := l.CheckAt(EventsFile, end, want); err != nil || ev.ID != want {
				t.Fatalf("CheckAt on the undamaged file = %v, %v", ev, err)
			}
			l.Close()
			writeFile(t, path, tt.damage(content))
			l = openLog(t, dir, nil)
			_, err := l.CheckAt(EventsFile, end, want)
			var ce *CorruptError
			if !errors.As(err, &ce) || ce.Line != tt.wantLine || ce.File != EventsFile || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("CheckAt = %v, want a CorruptError at %s:%d containing %q", err, EventsFile, tt.wantLine, tt.wantErr)
			}
		})
	}
	t.Run("missing file", func(t *testing.T) {
		l := openLog(t, t.TempDir(), nil)
		if _, err := l.CheckAt("messages/gone.jsonl", 10, ""); err == nil || !strings.Contains(err.Error(), "missing") {
			t.Fatalf("CheckAt on a missing shard = %v", err)
		}
	})
}

// TestVerifyListsEveryBadLine checks that Verify goes on past bad lines and
// names each with its file and line.
func TestVerifyListsEveryBadLine(t *testing.T) {
	dir := t.TempDir()
	g1, g2, g3 := goodLine(t, "g1"), goodLine(t, "g2"), goodLine(t, "g3")
	writeFile(t, filepath.Join(dir, EventsFile), g1+"garbage\n"+g2+"{}\n"+strings.Repeat("x", MaxLineBytes+10)+"\n"+g3)
	writeFile(t, filepath.Join(dir, "messages", "a.jsonl"), g1+"[1]\n")
	l := openLog(t, dir, nil)
	var bad []string
	good := 0
	if err := l.Verify(context.Background(), func(li LineInfo) error {
		if li.Err != nil {
			bad = append(bad, li.File+":"+itoa(li.Line))
		} else {
			good++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// Open moved a/jsonl's malformed last line aside, so that one is not
	// there any more.
	if got := strings.Join(bad, " "); got != "events.jsonl:2 events.jsonl:4 events.jsonl:5" || good != 4 {
		t.Fatalf("bad lines %q, %d good; want events.jsonl:2, :4, :5 and 4 good", got, good)
	}
	if _, err := os.Stat(filepath.Join(dir, "messages", "a.jsonl.corrupt")); err != nil {
		t.Fatalf("torn tail not moved aside: %v", err)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
