package eventlog

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"slices"
)

// The event IDs a shard holds. Import drops a line whose event the shard
// already holds, so that two transports bringing the same event at any
// delay leave it there once; Lacks lets a caller skip such lines before
// judging them. The check runs in the committer, the one goroutine that
// writes the files, so nothing lands between the check and the write.
//
// A shard's IDs are read the first time an import or Lacks asks about
// the shard, then kept up to date by reading on from where the last
// look stopped (the durable end): local appends need no bookkeeping of
// their own, and a shard no import touches costs nothing. Each ID is
// kept as 16 bytes of its SHA-256, whatever its length, in sorted lists
// by its first byte, which grow by an eighth: about 1.7 MiB per 100,000
// events (a map took 2.3).

// idKey is an event ID as a shard's ID set keeps it.
type idKey [16]byte

func keyOf(id string) idKey {
	sum := sha256.Sum256([]byte(id))
	return idKey(sum[:16])
}

// heldIDs are the event IDs of a shard's lines up to shard offset end.
type heldIDs struct {
	keys [256][]idKey // by first byte, each sorted
	end  int64
}

// has reports whether h holds k.
func (h *heldIDs) has(k idKey) bool {
	_, ok := slices.BinarySearchFunc(h.keys[k[0]], k, compareKeys)
	return ok
}

// add adds k.
func (h *heldIDs) add(k idKey) {
	list := h.keys[k[0]]
	i, ok := slices.BinarySearchFunc(list, k, compareKeys)
	if ok {
		return
	}
	if len(list) == cap(list) {
		grown := make([]idKey, len(list), len(list)+len(list)/8+4)
		copy(grown, list)
		list = grown
	}
	h.keys[k[0]] = slices.Insert(list, i, k)
}

func compareKeys(a, b idKey) int { return bytes.Compare(a[:], b[:]) }

// LineID returns the event ID of a log line (without its newline), ""
// if the line is not an event. Lines a thrum wrote start with their ID,
// which it takes without parsing the rest (Import parses every line it
// appends in full).
func LineID(line []byte) string {
	if id, _, ok := cutString(line, `{"event_id":"`); ok && id != "" {
		return id
	}
	e, err := DecodeLine(line)
	if err != nil {
		return ""
	}
	return e.ID
}

// Lacks returns the lines, in order, whose event the shard does not hold
// yet, each ID once (a line that is no event is kept, for the caller to
// refuse).
func (l *Log) Lacks(shard string, lines [][]byte) ([][]byte, error) {
	l.idMu.Lock()
	defer l.idMu.Unlock()
	h, err := l.heldIn(ShardPath(shard))
	if err != nil {
		return nil, err
	}
	seen := map[idKey]struct{}{}
	out := make([][]byte, 0, len(lines))
	for _, line := range lines {
		if id := LineID(line); id != "" {
			k := keyOf(id)
			if h.has(k) {
				continue
			}
			if _, dup := seen[k]; dup {
				continue
			}
			seen[k] = struct{}{}
		}
		out = append(out, line)
	}
	return out, nil
}

// dropHeld removes from evs the events their shard holds, or that an
// earlier event of the same commit (seen, by shard path) brings. Called
// by the committer with l.idMu held.
func (l *Log) dropHeld(evs []*Event, seen map[string]map[idKey]struct{}) ([]*Event, error) {
	kept := evs[:0:0]
	for _, e := range evs {
		rel := ShardPath(e.Shard)
		h, err := l.heldIn(rel)
		if err != nil {
			return nil, err
		}
		k := keyOf(e.ID)
		if h.has(k) {
			continue
		}
		s := seen[rel]
		if s == nil {
			s = map[idKey]struct{}{}
			seen[rel] = s
		}
		if _, dup := s[k]; dup {
			continue
		}
		s[k] = struct{}{}
		kept = append(kept, e)
	}
	return kept, nil
}

// heldIn returns the IDs of shard file rel up to its durable end, reading
// what was appended since the last look. Called with l.idMu held.
func (l *Log) heldIn(rel string) (*heldIDs, error) {
	h := l.held[rel]
	if h == nil {
		h = &heldIDs{}
		l.held[rel] = h
	}
	l.mu.Lock()
	segs := append([]segment(nil), l.segs[rel]...)
	l.mu.Unlock()
	for _, seg := range segs {
		if seg.end() <= h.end {
			continue
		}
		if err := h.read(l.dir, seg); err != nil {
			return nil, fmt.Errorf("eventlog: read the event IDs of %s: %w", seg.rel, err)
		}
	}
	return h, nil
}

// read adds the IDs of the lines of seg past h.end, up to its durable
// size.
func (h *heldIDs) read(dir string, seg segment) error {
	f, err := openLogFile(filepath.Join(dir, filepath.FromSlash(seg.rel)))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	from := max(h.end-seg.base, 0)
	// Mostly the lines of the last commit: a buffer for what there is,
	// not a full one per look.
	n := seg.size - from
	br := bufio.NewReaderSize(io.NewSectionReader(f, from, n), int(min(n, 64<<10)))
	for {
		line, err := readLine(br)
		switch {
		case err == io.EOF:
			h.end = seg.end() // the durable end is a line's end
			return nil
		case errors.Is(err, errLongLine):
			continue // no event of this log
		case err != nil:
			return err
		}
		if id := LineID(line); id != "" {
			h.add(keyOf(id))
		}
	}
}
