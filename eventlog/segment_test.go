package eventlog

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/thrumhq/thrum/internal/fault"
)

func TestSegmentPath(t *testing.T) {
	for _, tt := range []struct {
		shard string
		n     int
		path  string
	}{
		{"", 0, "events.jsonl"},
		{"", 1, "events/000001.jsonl"},
		{"alice", 0, "messages/alice.jsonl"},
		{"alice", 42, "messages/alice/000042.jsonl"},
		{"a.b", 1234567, "messages/a.b/1234567.jsonl"},
	} {
		if got := SegmentPath(tt.shard, tt.n); got != tt.path {
			t.Errorf("SegmentPath(%q, %d) = %q, want %q", tt.shard, tt.n, got, tt.path)
		}
		shard, n, ok := ParseSegmentPath(tt.path)
		if !ok || shard != tt.shard || n != tt.n {
			t.Errorf("ParseSegmentPath(%q) = %q, %d, %v", tt.path, shard, n, ok)
		}
	}
	for _, bad := range []string{"events", "events/1.jsonl", "events/000000.jsonl", "events/0000001.jsonl",
		"messages/alice/000001.jsonl.corrupt", "messages/a/b/000001.jsonl", "messages/../000001.jsonl",
		"messages/.jsonl", "messages/alice.txt", "other/000001.jsonl", "events/00000x.jsonl"} {
		if shard, n, ok := ParseSegmentPath(bad); ok {
			t.Errorf("ParseSegmentPath(%q) = %q, %d, true; want not a segment", bad, shard, n)
		}
	}
}

// TestSegmentsRoll appends to two shards with tiny segments: each shard
// becomes a chain of files of which only the last grows, and Scan (from
// the start, from any event, from a segment's end), CheckAt, Verify and a
// reopen read the chain as one shard with unchanged offsets.
func TestSegmentsRoll(t *testing.T) {
	dir := t.TempDir()
	opts := &Options{SegmentBytes: 300}
	l := openLog(t, dir, opts)
	for i := 0; i < 12; i++ {
		appendOK(t, l, &Event{Type: "agent.update", Payload: map[string]int{"i": i}},
			&Event{Type: "message.create", Shard: "alice", Payload: map[string]int{"i": i}},
			&Event{Type: "message.create", Shard: "alice", Payload: map[string]int{"j": i}})
	}
	checkPositions(t, l)
	for _, shard := range []string{"", "alice"} {
		segs, err := l.Segments(shard)
		if err != nil {
			t.Fatal(err)
		}
		if len(segs) < 3 || segs[0] != ShardPath(shard) || segs[1] != SegmentPath(shard, 1) {
			t.Fatalf("shard %q has segments %v, want %s, %s, … (3 or more)", shard, segs, ShardPath(shard), SegmentPath(shard, 1))
		}
		for _, seg := range segs[:len(segs)-1] {
			if size := fileSize(t, filepath.Join(dir, filepath.FromSlash(seg))); size < 300 {
				t.Errorf("%s was closed at %d bytes, under the 300 of a segment", seg, size)
			}
		}
	}
	all, end := scanAll(t, l, nil)
	if len(all) != 36 {
		t.Fatalf("Scan read %d events, want 36", len(all))
	}
	if !slices.IsSortedFunc(all, func(a, b *Event) int { return strings.Compare(a.ID, b.ID) }) {
		t.Error("Scan did not merge the segments in ID order")
	}
	if !maps.Equal(end, l.Positions()) {
		t.Errorf("Scan ended at %v, Positions says %v", end, l.Positions())
	}
	// From every event's position, Scan returns exactly the events after
	// it in its shard (plus the other shard's from its own position), and
	// CheckAt finds the event there.
	for i, e := range all {
		rel := ShardPath(e.Shard)
		got, err := l.CheckAt(rel, e.Offset, e.ID)
		if err != nil || got.ID != e.ID || got.Offset != e.Offset || got.Shard != e.Shard {
			t.Fatalf("CheckAt(%s, %d) = %+v, %v; want event %s", rel, e.Offset, got, err, e.ID)
		}
		from := map[string]int64{}
		for _, p := range all[:i+1] {
			from[ShardPath(p.Shard)] = p.Offset
		}
		rest, _ := scanAll(t, l, from)
		if want := eventIDs(all[i+1:]); !slices.Equal(eventIDs(rest), want) {
			t.Fatalf("Scan from event %d read %d events, want %d", i, len(rest), len(want))
		}
	}
	if _, err := l.CheckAt(EventsFile, end[EventsFile]+1, ""); !isCorrupt(err) {
		t.Errorf("CheckAt past the end = %v, want a CorruptError", err)
	}
	var lines []LineInfo
	if err := l.Verify(context.Background(), func(li LineInfo) error { lines = append(lines, li); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(lines) != 36 || lines[len(lines)-1].File != lastSegment(t, l, "alice") || lines[len(lines)-1].Line > 5 {
		t.Errorf("Verify read %d lines, the last %s:%d; want 36, the last in %s near its start", len(lines), lines[len(lines)-1].File, lines[len(lines)-1].Line, lastSegment(t, l, "alice"))
	}
	l.Close()
	l2 := openLog(t, dir, opts)
	if !maps.Equal(l2.Positions(), end) {
		t.Errorf("reopened at %v, closed at %v", l2.Positions(), end)
	}
	again, _ := scanAll(t, l2, nil)
	if !slices.Equal(eventIDs(again), eventIDs(all)) {
		t.Error("a reopened log scans differently")
	}
}

// TestSegmentsMigrateSingleFile: a shard written as one file (before
// segments) keeps that file, byte for byte, as its first segment; saved
// positions in it stay valid; new events go to a new segment.
func TestSegmentsMigrateSingleFile(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, nil)
	for i := 0; i < 20; i++ {
		appendOK(t, l, &Event{Type: "message.create", Shard: "bob", Payload: map[string]int{"i": i}})
	}
	old, saved := scanAll(t, l, nil)
	l.Close()
	path := filepath.Join(dir, filepath.FromSlash(ShardPath("bob")))
	before := readFile(t, path)

	l = openLog(t, dir, &Options{SegmentBytes: 1000}) // the old file is over the size
	last := old[len(old)-1]
	if _, err := l.CheckAt(ShardPath("bob"), last.Offset, last.ID); err != nil {
		t.Fatalf("a saved position is not valid after migration: %v", err)
	}
	appendOK(t, l, &Event{Type: "message.create", Shard: "bob", Payload: map[string]string{"new": "1"}})
	if got := readFile(t, path); got != before {
		t.Error("the shard's original file changed")
	}
	if segs, _ := l.Segments("bob"); !slices.Equal(segs, []string{ShardPath("bob"), SegmentPath("bob", 1)}) {
		t.Errorf("segments %v, want the old file and one new", segs)
	}
	rest, _ := scanAll(t, l, saved)
	if len(rest) != 1 || rest[0].Offset != int64(len(before))+int64(len(rest[0].Raw))+1 {
		t.Errorf("Scan from the saved positions read %d events (want the 1 new one, at offset past the old file)", len(rest))
	}
	checkPositions(t, l)
}

// TestSegmentRollFaults: a batch that fails as it starts a new segment
// (its write, or its fsync) leaves the new segment empty and the log as
// before; a crash that tore the new segment's first line is repaired at
// the next Open, in that segment; appends go on in both cases.
func TestSegmentRollFaults(t *testing.T) {
	for _, op := range []string{fault.LogWrite, fault.LogSync} {
		t.Run(op, func(t *testing.T) {
			dir := t.TempDir()
			opts := &Options{SegmentBytes: 100}
			l := openLog(t, dir, opts)
			appendOK(t, l, &Event{Type: "message.create", Shard: "a", Payload: map[string]string{"pad": fmt.Sprint(make([]byte, 40))}})
			pos := l.Positions()
			seg1 := filepath.Join(dir, filepath.FromSlash(SegmentPath("a", 1)))
			restore := fault.Set(func(o, path string) error {
				if o == op && path == seg1 {
					return &fs.PathError{Op: o, Path: path, Err: syscall.ENOSPC}
				}
				return nil
			})
			err := l.Append(context.Background(), &Event{Type: "message.create", Shard: "a", Payload: map[string]int{"n": 2}})
			restore()
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("Append = %v, want ENOSPC", err)
			}
			if got := fileSize(t, seg1); got != 0 {
				t.Errorf("the new segment holds %d bytes after the failed batch", got)
			}
			if !maps.Equal(l.Positions(), pos) {
				t.Errorf("Positions moved to %v after a failed batch, was %v", l.Positions(), pos)
			}
			appendOK(t, l, &Event{Type: "message.create", Shard: "a", Payload: map[string]int{"n": 3}})
			checkPositions(t, l)
			l.Close()

			// A crash in the middle of the next line.
			f, err := os.OpenFile(seg1, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.WriteString(`{"event_id":"01J`)
			f.Close()
			l = openLog(t, dir, opts)
			if r := l.Repairs(); len(r) != 1 || r[0].File != SegmentPath("a", 1) {
				t.Fatalf("Repairs() = %v, want one in %s", r, SegmentPath("a", 1))
			}
			appendOK(t, l, &Event{Type: "message.create", Shard: "a", Payload: map[string]int{"n": 4}})
			evs, _ := scanAll(t, l, nil)
			if len(evs) != 3 {
				t.Fatalf("the log holds %d events, want 3 (before, after the failure, after the crash)", len(evs))
			}
			checkPositions(t, l)
		})
	}
}

func lastSegment(t *testing.T, l *Log, shard string) string {
	t.Helper()
	segs, err := l.Segments(shard)
	if err != nil || len(segs) == 0 {
		t.Fatalf("Segments(%q) = %v, %v", shard, segs, err)
	}
	return segs[len(segs)-1]
}

func isCorrupt(err error) bool {
	var ce *CorruptError
	return errors.As(err, &ce)
}

// TestCheckAtNamesDamageInAnEarlierSegment: a line in the middle of a
// shard's first segment replaced by text of another length moves every
// later position, so a saved position at the shard's end no longer falls
// where it did, in its last segment. CheckAt names the damaged line, in
// the segment where the shard stops being valid; a replacement that
// still parses is reported where the position falls, saying an earlier
// segment may have changed length.
func TestCheckAtNamesDamageInAnEarlierSegment(t *testing.T) {
	dir := t.TempDir()
	opts := &Options{SegmentBytes: 600}
	l := openLog(t, dir, opts)
	for i := 0; i < 15; i++ {
		appendOK(t, l, &Event{Type: "message.create", Shard: "alice", Payload: map[string]int{"i": i}})
	}
	rel := ShardPath("alice")
	segs, err := l.Segments("alice")
	if err != nil || len(segs) < 3 {
		t.Fatalf("segments %v, %v; want 3 or more", segs, err)
	}
	all, _ := scanAll(t, l, nil)
	last, end := all[len(all)-1].ID, l.Positions()[rel]
	l.Close()
	first := filepath.Join(dir, filepath.FromSlash(segs[0]))
	orig := readFile(t, first)
	lines := strings.SplitAfter(orig, "\n")
	if len(lines) < 4 {
		t.Fatalf("the first segment has %d lines, want 3 or more", len(lines)-1)
	}
	tests := []struct {
		name     string
		line     string // what replaces line 2 of the first segment
		wantFile string
		wantErr  []string
	}{
		{"garbage, shorter", "garbage\n", segs[0], []string{":2: corrupt event: line is not valid JSON"}},
		{"garbage, longer", strings.Repeat("x", len(lines[1])+10) + "\n", segs[0], []string{":2: corrupt event"}},
		{"another valid event, longer", goodLine(t, strings.Repeat("y", 40)), segs[len(segs)-1],
			[]string{"not the end of a line", "or a line of an earlier segment changed length"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			writeFile(t, first, lines[0]+tt.line+strings.Join(lines[2:], ""))
			defer writeFile(t, first, orig)
			l := openLog(t, dir, opts)
			defer l.Close()
			_, err := l.CheckAt(rel, end, last)
			var ce *CorruptError
			if !errors.As(err, &ce) || ce.File != tt.wantFile {
				t.Fatalf("CheckAt = %v, want a CorruptError in %s", err, tt.wantFile)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("CheckAt = %v, want it to say %q", err, w)
				}
			}
		})
	}
}
