package eventlog

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Segments. A shard is stored as a sequence of segment files, read as
// their concatenation: segment 0 is the shard's own file (ShardPath), and
// once the last segment holds DefaultSegmentBytes (Options.SegmentBytes)
// the next batch starts segment n+1 in a directory named after the shard:
//
//	events.jsonl, events/000001.jsonl, events/000002.jsonl, …
//	messages/<agent>.jsonl, messages/<agent>/000001.jsonl, …
//	local.jsonl, local/000001.jsonl, …
//
// Only the last segment is ever appended to; the others never change
// again, so a git commit of the log stores one small changed file, not
// the shard's whole history. A log written before segments existed is a
// log whose shards each have one (large) segment 0: it needs no rewrite.
//
// Offsets (Event.Offset, Positions, Scan's from, CheckAt) stay per shard:
// a byte offset into the concatenation of its segments, so a reader's
// saved positions mean the same before and after a roll.

// DefaultSegmentBytes is the default of Options.SegmentBytes.
const DefaultSegmentBytes = 256 << 10

// SegmentPath returns the path, relative to the log directory, of segment
// n of a shard: ShardPath(shard) for 0, else the shard's path without
// ".jsonl", a slash, and n in six or more digits with ".jsonl".
func SegmentPath(shard string, n int) string {
	if n == 0 {
		return ShardPath(shard)
	}
	return strings.TrimSuffix(ShardPath(shard), ".jsonl") + "/" + fmt.Sprintf("%06d.jsonl", n)
}

// ParseSegmentPath inverts SegmentPath: it returns the shard and segment
// number of a path relative to the log directory, and whether the path is
// a segment of a shard at all.
func ParseSegmentPath(rel string) (shard string, n int, ok bool) {
	for _, own := range []string{"", LocalShard} { // the shards with files of their own
		file := ShardPath(own)
		if rel == file {
			return own, 0, true
		}
		if rest, found := strings.CutPrefix(rel, strings.TrimSuffix(file, ".jsonl")+"/"); found {
			n, ok = segmentNumber(rest)
			return own, n, ok
		}
	}
	rest, found := strings.CutPrefix(rel, MessagesDir+"/")
	if !found {
		return "", 0, false
	}
	if name, file, sub := strings.Cut(rest, "/"); sub {
		n, ok = segmentNumber(file)
		return name, n, ok && validShard(name)
	}
	name, found := strings.CutSuffix(rest, ".jsonl")
	return name, 0, found && validShard(name)
}

// segmentNumber parses the file name of a segment past the first: its
// number, zero-padded to six digits, and ".jsonl".
func segmentNumber(file string) (int, bool) {
	digits, found := strings.CutSuffix(file, ".jsonl")
	if !found || len(digits) < 6 || len(digits) > 12 {
		return 0, false
	}
	n, err := strconv.Atoi(digits)
	if err != nil || n < 1 || fmt.Sprintf("%06d", n) != digits {
		return 0, false
	}
	return n, true
}

// segment is one file of a shard.
type segment struct {
	rel  string // path relative to the log directory
	n    int    // segment number
	base int64  // offset of its first byte in the shard
	size int64  // its length (for the last segment of an open log: the durable end)
}

// end is the shard offset just past the segment.
func (s segment) end() int64 { return s.base + s.size }

// layout lists every shard's segments as they are on disk, keyed by
// ShardPath, each in order with its size and base, and the shard paths
// sorted.
func layout(dir string) (map[string][]segment, []string, error) {
	found := map[string][]segment{}
	add := func(rel string) error {
		shard, n, ok := ParseSegmentPath(rel)
		if !ok {
			return nil
		}
		// Lstat: a symbolic link is no segment, whatever it points to.
		st, err := os.Lstat(filepath.Join(dir, filepath.FromSlash(rel)))
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("eventlog: %w", err)
		}
		if !st.Mode().IsRegular() {
			return nil
		}
		key := ShardPath(shard)
		found[key] = append(found[key], segment{rel: rel, n: n, size: st.Size()})
		return nil
	}
	// listDir adds the segment files in a directory of the log.
	listDir := func(sub string) error {
		if fi, err := os.Lstat(filepath.Join(dir, filepath.FromSlash(sub))); err != nil || !fi.IsDir() {
			return nil // none, or not a directory (a symbolic link is never followed)
		}
		entries, err := os.ReadDir(filepath.Join(dir, filepath.FromSlash(sub)))
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("eventlog: %w", err)
		}
		for _, e := range entries {
			if !e.IsDir() && strings.HasSuffix(e.Name(), ".jsonl") {
				if err := add(sub + "/" + e.Name()); err != nil {
					return err
				}
			}
		}
		return nil
	}
	for _, file := range []string{EventsFile, LocalFile} {
		if err := add(file); err != nil {
			return nil, nil, err
		}
		if err := listDir(strings.TrimSuffix(file, ".jsonl")); err != nil {
			return nil, nil, err
		}
	}
	entries, err := os.ReadDir(filepath.Join(dir, MessagesDir))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("eventlog: %w", err)
	}
	for _, e := range entries {
		rel := MessagesDir + "/" + e.Name()
		if e.IsDir() {
			if validShard(e.Name()) {
				if err := listDir(rel); err != nil {
					return nil, nil, err
				}
			}
		} else if err := add(rel); err != nil {
			return nil, nil, err
		}
	}
	order := make([]string, 0, len(found))
	for key, segs := range found {
		sort.Slice(segs, func(i, j int) bool { return segs[i].n < segs[j].n })
		var base int64
		for i := range segs {
			segs[i].base = base
			base += segs[i].size
		}
		order = append(order, key)
	}
	sort.Strings(order)
	return found, order, nil
}

// locate returns the index of the segment that holds the byte before
// shard offset off (off > 0), or -1 if the shard is shorter than off.
func locate(segs []segment, off int64) int {
	for i, s := range segs {
		if off <= s.end() {
			return i
		}
	}
	return -1
}
