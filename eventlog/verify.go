package eventlog

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
)

// CheckAt verifies a position a reader saved in shard rel (a projection's
// checkpoint): off must be the end of a line that holds a valid event
// (whose ID is wantID, unless that is empty), which it returns. If not,
// the shard was changed before off, and the error is a *CorruptError
// naming where the shard stops being valid: its first line that does not
// parse, in the segment that holds off (or the last one) or an earlier
// one; or, if every line parses, the line that holds off.
func (l *Log) CheckAt(rel string, off int64, wantID string) (*Event, error) {
	if off <= 0 {
		return nil, nil
	}
	// The log's own list of segments, not a fresh listing of the
	// directory: a projection checks every shard's checkpoint at open,
	// and a listing per shard made that O(shards × files).
	l.mu.Lock()
	segs := append([]segment(nil), l.segs[rel]...)
	l.mu.Unlock()
	if len(segs) == 0 { // not one of ours: what the disk says
		all, _, err := layout(l.dir)
		if err != nil {
			return nil, err
		}
		segs = all[rel]
	}
	if len(segs) == 0 {
		return nil, &CorruptError{File: rel, Line: 1, Err: fmt.Errorf("the file is missing, though a reader saved position %d in it", off)}
	}
	i := locate(segs, off)
	if i < 0 {
		i = len(segs) - 1 // off is past the end: the shorter-than check below reports it
	}
	ev, err := l.checkSegment(segs[i].rel, off-segs[i].base, wantID)
	var atOff *CorruptError
	if !errors.As(err, &atOff) {
		if ev != nil {
			ev.Shard, ev.Offset = shardName(rel), off
		}
		return ev, err
	}
	// A line of another length in an earlier segment moves every later
	// position: off then falls in segment i wrongly, and the damage is
	// where the first line does not parse, from the shard's start.
	for _, s := range segs[:i+1] {
		bad, err := l.firstBadLine(s.rel)
		if err != nil {
			return nil, err
		}
		if bad != nil {
			return nil, bad
		}
	}
	if i > 0 {
		atOff.Err = fmt.Errorf("%w; or a line of an earlier segment changed length, which moves every later position", atOff.Err)
	}
	return nil, atOff
}

// checkSegment is CheckAt within one segment file, off counted from its
// start.
func (l *Log) checkSegment(rel string, off int64, wantID string) (*Event, error) {
	f, err := openLogFile(filepath.Join(l.dir, filepath.FromSlash(rel)))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, &CorruptError{File: rel, Line: 1, Err: fmt.Errorf("the file is missing, though a reader saved position %d in it", off)}
	}
	if err != nil {
		return nil, fmt.Errorf("eventlog: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("eventlog: %w", err)
	}
	// changed reports the line that holds byte at-1 (ends at at, if at is
	// past a newline); CheckAt looks for a line that does not parse.
	changed := func(at int64, why string) error {
		n, _ := countLines(f, at-1)
		return &CorruptError{File: rel, Line: n + 1, Err: errors.New(why)}
	}
	if off > st.Size() {
		return nil, changed(st.Size()+1, fmt.Sprintf("the file is %d bytes, shorter than the position %d a reader saved: it was truncated", st.Size(), off))
	}
	prev, err := lastIndexByte(f, off-1, st.Size())
	if err != nil {
		return nil, fmt.Errorf("eventlog: %w", err)
	}
	line := make([]byte, off-prev-1)
	if _, err := f.ReadAt(line, prev+1); err != nil {
		return nil, fmt.Errorf("eventlog: %w", err)
	}
	if len(line) == 0 || line[len(line)-1] != '\n' {
		return nil, changed(off, fmt.Sprintf("byte %d, where a reader stopped, is not the end of a line: the file was changed before it", off))
	}
	ev, derr := DecodeLine(line[:len(line)-1])
	if derr != nil {
		return nil, changed(off, fmt.Sprintf("the line before byte %d, where a reader stopped, does not parse: %v", off, derr))
	}
	if wantID != "" && ev.ID != wantID {
		return nil, changed(off, fmt.Sprintf("the line before byte %d, where a reader stopped, holds event %s, not %s, the one it read there: the file was changed before it", off, ev.ID, wantID))
	}
	return ev, nil
}

// firstBadLine returns a *CorruptError for the first line of segment
// file rel that does not parse, or nil if every line does.
func (l *Log) firstBadLine(rel string) (*CorruptError, error) {
	f, err := openLogFile(filepath.Join(l.dir, filepath.FromSlash(rel)))
	if errors.Is(err, fs.ErrNotExist) {
		return &CorruptError{File: rel, Line: 1, Err: errors.New("the file is missing")}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("eventlog: %w", err)
	}
	defer f.Close()
	r := &shardReader{rel: rel, segs: []segment{{rel: rel}}, f: f, br: bufio.NewReaderSize(f, 256<<10)}
	for {
		err := r.next()
		var ce *CorruptError
		if errors.As(err, &ce) {
			return ce, nil
		}
		if err != nil {
			return nil, err
		}
		if r.ev == nil {
			return nil, nil
		}
	}
}

// LineInfo is one line of a shard, as Verify reads it.
type LineInfo struct {
	File  string // segment path relative to the log directory
	Line  int    // 1-based, in the segment
	Event *Event // nil when the line does not parse
	Err   error  // why it does not parse
}

// Verify reads every line of every shard, in file order, and calls fn for
// each, going on past lines that do not parse (unlike Scan, which stops at
// the first): it is how a checker lists every problem. Event.Raw is valid
// only during the call.
func (l *Log) Verify(ctx context.Context, fn func(LineInfo) error) error {
	ends := l.Positions()
	all, shards, err := layout(l.dir)
	if err != nil {
		return err
	}
	for _, rel := range shards {
		end, known := ends[rel]
		for _, seg := range all[rel] {
			n := seg.size
			if known {
				n = min(n, end-seg.base) // not what is being appended now
			}
			if n <= 0 {
				continue
			}
			if err := l.verifySegment(ctx, seg, shardName(rel), n, fn); err != nil {
				return err
			}
		}
	}
	return nil
}

// verifySegment reads the first n bytes of a segment.
func (l *Log) verifySegment(ctx context.Context, seg segment, shard string, n int64, fn func(LineInfo) error) error {
	rel := seg.rel
	f, err := openLogFile(filepath.Join(l.dir, filepath.FromSlash(rel)))
	if err != nil {
		return fmt.Errorf("eventlog: %w", err)
	}
	defer f.Close()
	br := bufio.NewReaderSize(io.LimitReader(f, n), 256<<10)
	off := seg.base
	for n := 1; ; n++ {
		if n%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		line, err := readLine(br)
		if err == io.EOF && len(line) == 0 {
			return nil
		}
		info := LineInfo{File: rel, Line: n}
		switch {
		case err == io.EOF:
			info.Err = errors.New("final line has no newline")
		case err != nil && line == nil: // longer than MaxLineBytes, and skipped
			info.Err = err
		case err != nil:
			return fmt.Errorf("eventlog: %s: %w", rel, err)
		default:
			off += int64(len(line)) + 1
			if ev, derr := DecodeLine(line); derr != nil {
				info.Err = derr
			} else {
				ev.Shard, ev.Offset = shard, off
				info.Event = ev
			}
		}
		if err := fn(info); err != nil {
			return err
		}
		if err == io.EOF {
			return nil
		}
	}
}
