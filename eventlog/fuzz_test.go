package eventlog

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzDecodeLine feeds arbitrary bytes to DecodeLine, which reads lines of
// shard files that may have been damaged or written by anything.
func FuzzDecodeLine(f *testing.F) {
	f.Add([]byte(`{"event_id":"01JAAAAAAAAAAAAAAAAAAAAAAA","type":"message.create","timestamp":"2025-01-02T03:04:05.000000006Z","content":"x"}`))
	f.Add([]byte(`{"event_id":"01JAAAAAAAAAAAAAAAAAAAAAAA","type":"message.create","timestamp":"2025-01-02T03:04:05.000000006Z","content":"x","recipients":["bob","carol"],"ack_required":true,"ack_within":"30m0s"}`))
	f.Add([]byte(`{"event_id":"01JAAAAAAAAAAAAAAAAAAAAAAA","type":"message.read","timestamp":"2025-01-02T03:04:05.000000006Z","agent_id":"bob","message_ids":["msg_1"],"via":"hook"}`))
	f.Add([]byte(`{"event_id":"01JAAAAAAAAAAAAAAAAAAAAAAA","type":"message.ack","timestamp":"2025-01-02T03:04:05.000000006Z","agent_id":"bob","message_id":"msg_1","note":"ok"}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		in := bytes.Clone(line)
		ev, err := DecodeLine(line)
		if !bytes.Equal(line, in) {
			t.Fatalf("DecodeLine modified its input")
		}
		if err != nil {
			if ev != nil {
				t.Fatalf("DecodeLine returned an event with error %v", err)
			}
			return
		}
		if ev.ID == "" || ev.Type == "" {
			t.Fatalf("DecodeLine(%q) succeeded with ID %q, Type %q", line, ev.ID, ev.Type)
		}
		if !json.Valid(line) || line[0] != '{' {
			t.Fatalf("DecodeLine(%q) accepted a line that is not a JSON object", line)
		}
		if !bytes.Equal(ev.Raw, line) {
			t.Fatalf("Raw = %q, want the line", ev.Raw)
		}
	})
}

// FuzzShardFile writes arbitrary bytes as a shard, opens the log (which
// repairs its tail), and checks that Verify reports one LineInfo per line
// without panicking, that Scan agrees with it on whether every line is
// good, and that CheckAt at any position either returns the event ending
// there or a CorruptError.
func FuzzShardFile(f *testing.F) {
	g := `{"event_id":"01JAAAAAAAAAAAAAAAAAAAAAAA","type":"agent.register","timestamp":"2025-01-02T03:04:05.000000006Z"}` + "\n"
	f.Add([]byte(g+g), int64(len(g)))
	f.Add([]byte(g+"garbage\n"+g), int64(2*len(g)))
	f.Add([]byte("\n\n"+g), int64(1))
	f.Add([]byte(g+`{"event_id":"01J`), int64(len(g)+3))
	f.Fuzz(func(t *testing.T, data []byte, off int64) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, EventsFile), data, 0o644); err != nil {
			t.Fatal(err)
		}
		l, err := Open(dir, &Options{NoSync: true})
		if err != nil {
			return // e.g. a repair that could not be written
		}
		defer l.Close()
		size := l.Positions()[EventsFile]
		kept, _ := os.ReadFile(filepath.Join(dir, EventsFile))
		lines, bad := 0, 0
		if err := l.Verify(context.Background(), func(li LineInfo) error {
			lines++
			if li.Line != lines || li.File != EventsFile || (li.Err == nil) == (li.Event == nil) {
				t.Fatalf("LineInfo %+v at line %d", li, lines)
			}
			if li.Err != nil {
				bad++
			}
			return nil
		}); err != nil {
			t.Fatalf("Verify: %v", err)
		}
		if want := bytes.Count(kept, []byte{'\n'}); lines != want {
			t.Fatalf("Verify saw %d lines, the file has %d", lines, want)
		}
		_, serr := l.Scan(context.Background(), nil, func(*Event) error { return nil })
		if (serr == nil) != (bad == 0) {
			t.Fatalf("Scan error %v, Verify found %d bad lines", serr, bad)
		}
		if off < 0 || off > size+10 {
			return
		}
		ev, err := l.CheckAt(EventsFile, off, "")
		var ce *CorruptError
		switch {
		case err != nil && !errors.As(err, &ce):
			t.Fatalf("CheckAt(%d) = %v, not a CorruptError", off, err)
		case err == nil && off > 0 && (ev == nil || ev.Offset != off || kept[off-1] != '\n'):
			t.Fatalf("CheckAt(%d) = %+v for a position that does not end a line", off, ev)
		}
	})
}

// FuzzParseSegmentPath: any path (sync reads them from a remote's tree)
// either is not a segment or is exactly the path of the segment it names.
func FuzzParseSegmentPath(f *testing.F) {
	for _, s := range []string{"events.jsonl", "events/000001.jsonl", "messages/a.jsonl", "messages/a/000012.jsonl",
		"messages/a/000000.jsonl", "messages/../x.jsonl", "messages/a/b/000001.jsonl", "events/1000000.jsonl"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, rel string) {
		shard, n, ok := ParseSegmentPath(rel)
		if !ok {
			return
		}
		if got := SegmentPath(shard, n); got != rel {
			t.Fatalf("ParseSegmentPath(%q) = %q, %d; SegmentPath of that is %q", rel, shard, n, got)
		}
		if shard != "" && !validShard(shard) {
			t.Fatalf("ParseSegmentPath(%q) accepted shard %q", rel, shard)
		}
	})
}
