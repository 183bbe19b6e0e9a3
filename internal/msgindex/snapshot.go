package msgindex

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/gob"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// A snapshot is the index written to a file, so that the next start
// lists at once instead of rebuilding from SQLite (about 300 ms at
// 100,000 messages). The node saves one as the log grows and when it
// closes. A snapshot carries the index's positions in the log; the next
// start checks that the log still holds the event at each (a log that
// was replaced or cut back refuses it), then applies what the log holds
// past them, so a snapshot older than the log (after a crash) is made
// current, not thrown away. Anything unusable — no file, another format,
// a torn or corrupt file, a position the log does not hold — and the
// index is built from SQLite.
//
// The file is a gob stream (encoding/gob) of a snapHeader; the order in
// snapSlots of at most snapshotChunk; the messages in snapChunks of at
// most snapshotChunk; the by-ID order in snapSlots; the strings in
// snapStrings of at most snapshotChunk; and a snapTail, followed by the
// CRC-32C of the stream (4 bytes, little-endian). Every part is a value
// of its own, so that a save holds at most one chunk's encoding at a
// time: one value of the orders and the strings (gob encodes a value
// whole before writing it) held 2-4 MiB at 100,000 messages, at the end
// of an import, when the heap is at its fullest. A chunk holds its
// messages column by column, in slices of numbers and one string of
// IDs, which gob decodes several times faster than a slice of structs
// (and the IDs and keys need no allocation each). The file holds no map:
// gob sizes a map from the count the stream gives, which a damaged file
// could make huge, whereas it grows a slice only as the bytes allow.
const snapVersion = 6 // change it when the format or the index's meaning changes

type snapHeader struct {
	Version   int
	Positions []snapPosition
	Messages  int // how many follow, in chunks; each order has as many
	Strings   int // how many strings follow the orders (the first is "")
}

type snapPosition struct {
	Shard   string
	Offset  int64
	EventID string
}

// A snapChunk is messages, each field a column: message i's ID is the
// next IDLens[i] bytes of IDs, and its keys the next KeyLens[i] of Keys.
type snapChunk struct {
	IDs              string
	IDLens           []uint32
	Created, Updated []int64
	Author, Thread   []uint32 // string IDs
	Flags            []byte   // 1 deleted, 2 proxied
	Keys, KeyLens    []uint32
}

// snapSlots is the next slots of an order: by (created, ID), or by ID.
type snapSlots struct{ Slots []int32 }

// snapStrings is the next strings by ID, one after the other in
// Strings, each as long as its entry in Lens.
type snapStrings struct {
	Strings string
	Lens    []uint32
}

type snapTail struct {
	Reads []snapReads
	Early []snapEarly
}

type snapReads struct {
	Reader uint32
	Words  []uint64
}

type snapEarly struct {
	Message earlyKey // earlyKeyOf its ID
	Readers []uint32 // string IDs
}

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// errSnapshot is why a snapshot file was not used.
var errSnapshot = errors.New("msgindex: snapshot unusable")

// snapshotChunk is how many messages Save encodes per hold of the read
// lock: commits wait for at most one chunk (well under a millisecond),
// never for the whole index.
var snapshotChunk = 4096

// Save writes the built index to path, under a temporary name renamed
// into place. It may run while events are applied: it holds the index's
// lock only for short steps, so commits are not held up, and it streams
// the file a chunk at a time, so it needs little memory beyond the
// index's own.
//
// Once saved, the messages the snapshot holds are found by binary search
// in its by-ID order, as after a load, and the map that found them is
// dropped: the index takes less memory from then on.
func (x *Index) Save(path string) error {
	x.saveMu.Lock() // the swap below assumes the last snapshot written is the newest
	defer x.saveMu.Unlock()
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("msgindex: save: %w", err)
	}
	defer os.Remove(tmp.Name()) // after the rename, a no-op
	w := &crcWriter{w: bufio.NewWriterSize(tmp, 64<<10)}
	sn, err := x.writeSnapshot(w)
	if err == nil {
		_, err = w.w.Write(binary.LittleEndian.AppendUint32(nil, w.crc))
	}
	if err == nil {
		err = w.w.Flush()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	// No fsync: a snapshot torn by a crash fails its checksum and the
	// index is built from SQLite.
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("msgindex: save: %w", err)
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	x.unsaved -= min(sn.covered, x.unsaved)
	x.onDisk = true
	if x.closed {
		return nil
	}
	// The slots the snapshot holds are in its by-ID order; only later
	// ones need the map (unless more were sorted meanwhile).
	if len(sn.byID) <= len(x.sorted) {
		return nil
	}
	later := make(map[msgKey]int32, x.slots.len()-len(sn.byID))
	ids := x.ids()
	for i := len(sn.byID); i < x.slots.len(); i++ {
		later[ids.key(int32(i))] = int32(i)
	}
	x.sorted, x.byID = sn.byID, later
	return nil
}

// crcWriter writes through w, keeping the CRC-32C of what it wrote.
type crcWriter struct {
	w   *bufio.Writer
	crc uint32
}

func (c *crcWriter) Write(p []byte) (int, error) {
	c.crc = crc32.Update(c.crc, crcTable, p)
	return c.w.Write(p)
}

// snapshotInfo is what a written snapshot holds: how many of the
// index's unsaved events, and its slots in message ID order.
type snapshotInfo struct {
	covered uint64
	byID    []int32
}

// writeSnapshot writes the index to w (without the checksum), holding
// the lock only in short steps.
//
// Every change to the index only adds: messages, keys, reads, the
// deleted flag, a later updated time; and applying an event again
// changes nothing. So a snapshot may mix states, as long as it holds
// everything up to its positions and nothing it cannot explain:
//
//   - first, in one step, the positions, the order (which names exactly
//     the messages there are then), the reads (cut to those messages:
//     a later message's slot number is not the one it will get when it
//     is replayed), the early reads and the by-ID order's makings;
//   - then those messages, a chunk per step, each as it is then (a later
//     delete or edit already in it is applied again by the replay);
//   - last, the strings, which only grow, so every ID used above is in
//     them.
//
// Of a message, only deleted and updated ever change; its ID, keys and
// the rest are set when it is added. So the by-ID order is computed from
// the slots as they were in the first step without the lock: the fields
// it reads are never written again (an append that grows the slots
// copies them to a new array and leaves the old one as it was).
func (x *Index) writeSnapshot(w io.Writer) (snapshotInfo, error) {
	x.mu.RLock()
	select {
	case <-x.ready:
	default:
		x.mu.RUnlock()
		return snapshotInfo{}, errors.New("not built")
	}
	if x.err != nil || x.closed {
		x.mu.RUnlock()
		return snapshotInfo{}, errors.New("no index to save")
	}
	n, covered := x.slots.len(), x.unsaved
	// The first n slots' IDs never change; the lists' headers and the map
	// of the IDs that do not pack do.
	ids := slotIDs{slices.Clone(x.slots), maps.Clone(x.long)}
	head := snapHeader{Version: snapVersion, Messages: n, Strings: len(x.strList)}
	for rel, p := range x.pos {
		head.Positions = append(head.Positions, snapPosition{rel, p.Offset, p.EventID})
	}
	order := slices.Clone(x.order)
	// The by-ID order: the slots already in it (x.sorted, after a load
	// or a save: always the first len(x.sorted) slots) and the others,
	// to be sorted and merged.
	sorted := x.sorted
	var tail snapTail
	words := (n + 63) / 64
	for r, bits := range x.reads {
		bits = slices.Clone(bits[:min(len(bits), words)])
		if len(bits) == words && n%64 != 0 {
			bits[words-1] &= 1<<(n%64) - 1
		}
		tail.Reads = append(tail.Reads, snapReads{r, bits})
	}
	for k, r := range x.early {
		tail.Early = append(tail.Early, snapEarly{k, append([]uint32{r}, x.earlyMore[k]...)})
	}
	x.mu.RUnlock()

	enc := gob.NewEncoder(w)
	if err := enc.Encode(head); err != nil {
		return snapshotInfo{}, err
	}
	// The order first, so that its copy is let go before the messages'
	// chunks and the by-ID order are made.
	if err := encodeSlots(enc, order); err != nil {
		return snapshotInfo{}, err
	}
	order = nil
	var idBytes []byte
	k := min(n, snapshotChunk)
	c := snapChunk{IDLens: make([]uint32, 0, k), Created: make([]int64, 0, k), Updated: make([]int64, 0, k),
		Author: make([]uint32, 0, k), Thread: make([]uint32, 0, k), Flags: make([]byte, 0, k), KeyLens: make([]uint32, 0, k)}
	for lo := 0; lo < n; lo += snapshotChunk {
		c.IDLens, c.Created, c.Updated, c.Author, c.Thread, c.Flags = c.IDLens[:0], c.Created[:0], c.Updated[:0], c.Author[:0], c.Thread[:0], c.Flags[:0]
		c.Keys, c.KeyLens = c.Keys[:0], c.KeyLens[:0]
		idBytes = idBytes[:0]
		x.mu.RLock()
		if x.closed {
			x.mu.RUnlock()
			return snapshotInfo{}, ErrClosed
		}
		for i := lo; i < min(lo+snapshotChunk, n); i++ {
			m := x.slots.at(int32(i))
			was := len(idBytes)
			idBytes = ids.key(int32(i)).appendTo(idBytes)
			c.IDLens = append(c.IDLens, uint32(len(idBytes)-was))
			c.Created, c.Updated = append(c.Created, m.created), append(c.Updated, m.updated)
			c.Author, c.Thread = append(c.Author, m.author), append(c.Thread, m.thread)
			var flags byte
			if m.deleted {
				flags |= 1
			}
			if m.proxied {
				flags |= 2
			}
			c.Flags = append(c.Flags, flags)
			keys := x.keysOf(i)
			c.Keys, c.KeyLens = append(c.Keys, keys...), append(c.KeyLens, uint32(len(keys)))
		}
		x.mu.RUnlock()
		c.IDs = string(idBytes)
		if err := enc.Encode(c); err != nil {
			return snapshotInfo{}, err
		}
	}
	byID := mergeByID(ids, sorted, n)
	if err := encodeSlots(enc, byID); err != nil {
		return snapshotInfo{}, err
	}
	x.mu.RLock()
	strs := x.strList[:head.Strings:head.Strings] // appended to, never changed
	x.mu.RUnlock()
	for lo := 0; lo < len(strs); lo += snapshotChunk {
		var all strings.Builder
		part := strs[lo:min(lo+snapshotChunk, len(strs))]
		lens := make([]uint32, len(part))
		for i, s := range part {
			all.WriteString(s)
			lens[i] = uint32(len(s))
		}
		if err := enc.Encode(snapStrings{all.String(), lens}); err != nil {
			return snapshotInfo{}, err
		}
	}
	if err := enc.Encode(tail); err != nil {
		return snapshotInfo{}, err
	}
	return snapshotInfo{covered, byID}, nil
}

// encodeSlots encodes an order, snapshotChunk slots at a time.
func encodeSlots(enc *gob.Encoder, order []int32) error {
	for lo := 0; lo < len(order); lo += snapshotChunk {
		if err := enc.Encode(snapSlots{order[lo:min(lo+snapshotChunk, len(order))]}); err != nil {
			return err
		}
	}
	return nil
}

// mergeByID returns the first n slots in message ID order: sorted,
// already in that order, merged with the slots past it, sorted here.
// Slots are mostly added in ID order (IDs grow with time), so those sort
// quickly. The result is the only copy made: the others are sorted in
// its own tail, then merged forward (the merge writes at i+j, never past
// the next unread other at len(sorted)+j).
func mergeByID(ids slotIDs, sorted []int32, n int) []int32 {
	byIDOf := func(a, b int32) int { return compareKeys(ids.key(a), ids.key(b)) }
	out := make([]int32, n)
	others := out[len(sorted):]
	for j := range others {
		others[j] = int32(len(sorted) + j)
	}
	slices.SortFunc(others, byIDOf)
	i, j := 0, 0
	for i < len(sorted) && j < len(others) {
		if byIDOf(sorted[i], others[j]) < 0 {
			out[i+j] = sorted[i]
			i++
		} else {
			out[i+j] = others[j]
			j++
		}
	}
	copy(out[i+j:], sorted[i:]) // when others are used up, i+j = i+len(others): the rest of sorted fits exactly
	return out
}

// load reads the snapshot at path into x; mu is not held (x is not yet
// shared).
func (x *Index) load(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return x.decode(b)
}

// decode fills x from a snapshot's bytes. Whatever the bytes, it never
// panics: gob refuses what is malformed, and every count, slot and
// string ID is checked before the index uses it.
func (x *Index) decode(b []byte) error {
	if len(b) < 4 {
		return fmt.Errorf("%w: not a snapshot", errSnapshot)
	}
	body := b[:len(b)-4]
	if crc32.Checksum(body, crcTable) != binary.LittleEndian.Uint32(b[len(b)-4:]) {
		return fmt.Errorf("%w: checksum mismatch", errSnapshot)
	}
	bad := func(why string) error { return fmt.Errorf("%w: %s", errSnapshot, why) }
	dec := gob.NewDecoder(bytes.NewReader(body))
	var head snapHeader
	if err := dec.Decode(&head); err != nil {
		return bad(err.Error())
	}
	if head.Version != snapVersion {
		return bad(fmt.Sprintf("version %d", head.Version))
	}
	pos := map[string]Position{}
	for _, p := range head.Positions {
		if _, dup := pos[p.Shard]; dup || p.Offset < 0 {
			return bad("bad position")
		}
		pos[p.Shard] = Position{p.Offset, p.EventID}
	}
	if head.Messages < 0 {
		return bad("a negative count of messages")
	}
	// The order comes first; it grows as its parts come, and the slots a
	// chunk at a time as messages decode: no count is trusted with
	// memory.
	order, err := decodeSlots(dec, head.Messages, len(body))
	if err != nil {
		return bad(err.Error())
	}
	var slots slotList
	long := map[int32]string{}
	var allKeys []uint32
	var maxStr uint32
	for slots.len() < head.Messages {
		var c snapChunk
		if err := dec.Decode(&c); err != nil {
			return bad(err.Error())
		}
		k := len(c.IDLens)
		if k == 0 || k > head.Messages-slots.len() {
			return bad("messages not as many as said")
		}
		if len(c.Created) != k || len(c.Updated) != k || len(c.Author) != k || len(c.Thread) != k || len(c.Flags) != k || len(c.KeyLens) != k {
			return bad("a chunk's columns differ in length")
		}
		for _, key := range c.Keys {
			maxStr = max(maxStr, key)
		}
		ids, keys := c.IDs, c.Keys
		for i := range k {
			if uint64(c.IDLens[i]) > uint64(len(ids)) || uint64(c.KeyLens[i]) > uint64(len(keys)) {
				return bad("a chunk's IDs or keys shorter than said")
			}
			maxStr = max(maxStr, c.Author[i], c.Thread[i])
			nk := c.KeyLens[i]
			id := keyOf(ids[:c.IDLens[i]])
			if !id.packed {
				long[int32(slots.len())] = strings.Clone(id.long) // not the whole chunk's IDs
			}
			slots.push(imsg{ulid: id.ulid, long: !id.packed, created: c.Created[i], updated: c.Updated[i],
				author: c.Author[i], thread: c.Thread[i], deleted: c.Flags[i]&1 != 0, proxied: c.Flags[i]&2 != 0,
				keyAt: uint32(len(allKeys) + len(c.Keys) - len(keys))})
			ids, keys = ids[c.IDLens[i]:], keys[nk:]
		}
		if ids != "" || len(keys) != 0 {
			return bad("a chunk's IDs or keys longer than said")
		}
		if uint64(len(allKeys))+uint64(len(c.Keys)) > math.MaxUint32 {
			return bad("more keys than an index holds")
		}
		allKeys = append(allKeys, c.Keys...)
	}
	n := slots.len()
	byID, err := decodeSlots(dec, n, n)
	if err != nil {
		return bad(err.Error())
	}
	if len(order) != n {
		return bad("the order does not cover the messages")
	}
	seen := make([]bool, n)
	for _, s := range order {
		if s < 0 || int(s) >= n || seen[s] {
			return bad("order is not a permutation")
		}
		seen[s] = true
	}
	// The slots by ID: strictly increasing IDs, so also no ID twice.
	sids := slotIDs{slots, long}
	for i, s := range byID {
		if s < 0 || int(s) >= n || i > 0 && compareKeys(sids.key(s), sids.key(byID[i-1])) <= 0 {
			return bad("message IDs are not sorted or repeat")
		}
	}
	// Each string slices the one its part holds. The map is not sized by
	// the count, and stops at the first repeat.
	strs := map[string]uint32{}
	var part snapStrings
	for len(strs) < head.Strings {
		// The room of the last part's lengths is reused; gob leaves a
		// field the stream omits (an empty one) as it was.
		part = snapStrings{Lens: part.Lens[:0]}
		if err := dec.Decode(&part); err != nil {
			return bad(err.Error())
		}
		if len(part.Lens) == 0 || len(part.Lens) > head.Strings-len(strs) {
			return bad("strings not as many as said")
		}
		rest := part.Strings
		for _, l := range part.Lens {
			if uint64(l) > uint64(len(rest)) {
				return bad("strings shorter than said")
			}
			s := rest[:l]
			if _, dup := strs[s]; dup {
				return bad("strings repeat")
			}
			strs[s], rest = uint32(len(strs)), rest[l:]
		}
		if rest != "" {
			return bad("strings longer than said")
		}
	}
	strList := make([]string, len(strs))
	for s, i := range strs {
		strList[i] = s
	}
	if len(strList) == 0 || strList[0] != "" {
		return bad("string 0 is not empty")
	}
	var tail snapTail
	if err := dec.Decode(&tail); err != nil {
		return bad(err.Error())
	}
	if err := dec.Decode(new(snapTail)); err != io.EOF {
		return bad("trailing bytes")
	}
	reads := map[uint32][]uint64{}
	for _, r := range tail.Reads {
		if _, dup := reads[r.Reader]; dup || len(r.Words) > (n+63)/64 {
			return bad("reads repeat or pass the messages")
		}
		if len(r.Words) > 0 && len(r.Words) == (n+63)/64 && n%64 != 0 {
			r.Words[len(r.Words)-1] &= 1<<(n%64) - 1 // no message past the last is read
		}
		maxStr = max(maxStr, r.Reader)
		reads[r.Reader] = r.Words
	}
	for _, e := range tail.Early {
		for _, r := range e.Readers {
			maxStr = max(maxStr, r)
			x.addEarly(e.Message, r)
		}
	}
	if int(maxStr) >= len(strList) {
		return bad("string ID out of range")
	}
	x.slots, x.keys, x.order, x.sorted, x.byID, x.long, x.strs, x.strList, x.reads, x.pos = slots, allKeys, order, byID, map[msgKey]int32{}, long, strs, strList, reads, pos
	x.derive()
	return nil
}

// decodeSlots decodes an order of n slots, in parts of any size, into
// room for at most most: n is taken on trust only as far as the bytes
// could hold it (an order grown as its parts came allocated five times
// its size, at a start, when nothing is collected).
func decodeSlots(dec *gob.Decoder, n, most int) ([]int32, error) {
	order := make([]int32, 0, min(n, most))
	var part snapSlots
	for len(order) < n {
		part.Slots = part.Slots[:0] // room reused; gob leaves a field the stream omits (an empty one) as it was
		if err := dec.Decode(&part); err != nil {
			return nil, err
		}
		if len(part.Slots) == 0 || len(part.Slots) > n-len(order) {
			return nil, errors.New("the orders do not cover the messages")
		}
		order = append(order, part.Slots...)
	}
	return order, nil
}
