package natsync

import (
	"bytes"
	"strings"
	"testing"

	"github.com/thrumhq/thrum/eventlog"
)

// FuzzMessage reads what any client can put on the stream: a subject, an
// offset header and a body. A subject is taken only as one machine's
// events or one agent's shard (never the local shard, never a path); the
// body splits into lines that join back into it; and a shard takes lines
// only at its end: what fromOffset keeps starts exactly there, and what
// it drops lies within the shard.
func FuzzMessage(f *testing.F) {
	f.Add("thrum.x.a.@events", []byte("{}\n{}\n"), int64(0), int64(0))
	f.Add("thrum.x.a.alice", []byte("{\"a\":1}\n{\"b\":2}\n"), int64(0), int64(8))
	f.Add("thrum.x.a.al~ice", []byte("x"), int64(5), int64(3))
	f.Add("thrum.x.a.@local", []byte("\n\n"), int64(-1), int64(0))
	f.Add("thrum.x.a.~~", []byte(""), int64(0), int64(0))
	s := &Syncer{cfg: Config{Subjects: "thrum.x"}}
	f.Fuzz(func(t *testing.T, subject string, data []byte, off, have int64) {
		machine, shard, ok := s.parseSubject(subject)
		if ok {
			if machine == "" || strings.Contains(machine, ".") {
				t.Fatalf("%q: machine %q", subject, machine)
			}
			if shard == eventlog.LocalShard {
				t.Fatalf("%q: the local shard", subject)
			}
			if shard != "" {
				if got, n, valid := eventlog.ParseSegmentPath(eventlog.ShardPath(shard)); !valid || n != 0 || got != shard {
					t.Fatalf("%q: shard %q is not an agent's", subject, shard)
				}
			}
			if s.subject(shard) != "thrum.x."+s.opts.Machine+"."+strings.SplitN(subject, ".", 4)[3] {
				t.Fatalf("%q: shard %q does not map back to its token", subject, shard)
			}
		}
		lines := splitLines(data)
		var joined []byte
		for i, l := range lines {
			if bytes.IndexByte(l, '\n') >= 0 {
				t.Fatalf("line %d holds a newline", i)
			}
			joined = append(joined, l...)
			if i < len(lines)-1 || bytes.HasSuffix(data, []byte("\n")) {
				joined = append(joined, '\n')
			}
		}
		if !bytes.Equal(joined, data) {
			t.Fatalf("lines %q do not join back into %q", lines, data)
		}
		if off < 0 || have < 0 {
			return
		}
		kept, gap := fromOffset(lines, off, have)
		if gap {
			if kept != nil {
				t.Fatal("a gap keeps lines")
			}
			return
		}
		// The lines kept are the message's last ones, and start at have.
		start := off
		for _, l := range lines[:len(lines)-len(kept)] {
			start += int64(len(l)) + 1
		}
		if len(kept) > 0 && start != have {
			t.Fatalf("kept lines start at %d, the shard ends at %d", start, have)
		}
		// What it drops is here already: it ends within the shard.
		if start > have {
			t.Fatalf("dropped lines up to %d, past the shard's end at %d", start, have)
		}
	})
}
