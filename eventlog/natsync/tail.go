package natsync

import "github.com/thrumhq/thrum/eventlog"

// tailBytes bounds the lines all tails hold. Past it (the server down
// for long) a shard's tail lets its lines go, and the publisher reads
// them back from the log.
var tailBytes int64 = 1 << 20

// tail is what Committed told the publisher of one shard: every line
// the log committed to it from offset from to offset end, in order, and
// of those, this machine's not yet published. The publisher takes them
// from here; from the shard's position up to from (lines written before
// this process, or before a gap in what it was told) it reads the log,
// asking Options.Local whose each line is.
type tail struct {
	from, end int64
	lines     []tailLine
	bytes     int64
}

type tailLine struct {
	end int64 // the shard offset past the line's newline
	raw []byte
}

// Committed tells the Syncer what the log committed: every batch, in
// log order, once applied (a thrum node's Options.OnCommit). It keeps
// this machine's lines (the events not imported) for the publisher, and
// wakes it. It never blocks.
func (s *Syncer) Committed(batch []*eventlog.Event) {
	local := false
	s.mu.Lock()
	for _, e := range batch {
		if e.Shard == eventlog.LocalShard || e.Raw == nil {
			continue
		}
		n := int64(len(e.Raw)) + 1
		start := e.Offset - n
		t := s.tails[e.Shard]
		if t == nil || t.end != start {
			// The first line, or lines this was not told of: the record
			// starts again here.
			if t != nil {
				s.tailHeld -= t.bytes
			}
			t = &tail{from: start}
			s.tails[e.Shard] = t
		}
		t.end = e.Offset
		if e.Imported() {
			continue
		}
		local = true
		if s.tailHeld+n > tailBytes {
			s.tailHeld -= t.bytes
			t.from, t.lines, t.bytes = e.Offset, nil, 0
			continue
		}
		t.lines = append(t.lines, tailLine{end: e.Offset, raw: e.Raw})
		t.bytes += n
		s.tailHeld += n
	}
	s.mu.Unlock()
	if local {
		wake(s.pubWake)
	}
}

// runLocked lets go of the tail up to pos and returns the run
// to publish from pos: this machine's consecutive lines (up to maxRun
// bytes), or, before any, how far the lines to skip go (another
// machine's, or too large: those it counts). more says lines were left
// for another round. Called with s.mu held.
func (s *Syncer) runLocked(path, shard string, t *tail, pos int64, maxRun int, tooLarge *int) (r *run, more bool) {
	i := 0
	for i < len(t.lines) && t.lines[i].end <= pos {
		n := int64(len(t.lines[i].raw)) + 1
		t.bytes -= n
		s.tailHeld -= n
		i++
	}
	// What went before pos is forgotten: should the position go back
	// (a stream made again), the log has it.
	clear(t.lines[:i])
	t.lines, t.from = t.lines[i:], pos
	r = &run{path: path, shard: shard}
	for _, l := range t.lines {
		n := int64(len(l.raw)) + 1
		start := l.end - n
		if len(r.data) > 0 && (start != r.end || len(r.data)+int(n) > maxRun) {
			return r, true // a run is consecutive lines
		}
		if n > int64(maxRun) {
			*tooLarge++ // git carries it
			r.skip = l.end
			continue
		}
		if len(r.data) == 0 {
			r.start = start
			r.data = make([]byte, 0, min(maxRun, int(t.bytes)))
		}
		r.data = append(append(r.data, l.raw...), '\n')
		r.end = l.end
	}
	if len(r.data) == 0 {
		r.skip = t.end // every line up to the tail's end is another machine's
		return r, false
	}
	return r, r.end < t.end // another machine's lines follow: the next round skips them
}
