package msgindex

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
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
// The format, little-endian, every count and number a varint, in the
// order it is written (streamed: the strings come last because they are
// taken last, see writeSnapshot):
//
//	"thrumidx" version
//	positions: n, then each: shard path (len, bytes), offset, event ID (len, bytes)
//	message IDs' total length
//	messages: n, then each: id (len, bytes), created, updated, author,
//	  thread, flags (1 deleted, 2 proxied), keys (n, string IDs)
//	order: n slots
//	by ID: n slots, sorted by message ID
//	reads: n readers, then each: reader ID, n words, words (8 bytes)
//	early: n message IDs, then each: id (len, bytes), n readers, readers
//	strings: n, then each (len, bytes), by ID (ID 0 is "")
//	crc32c of everything before it (4 bytes)
const (
	snapMagic   = "thrumidx"
	snapVersion = 3 // change it when the format or the index's meaning changes
)

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
// the file, so it needs little memory beyond the index's own.
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
	// ones need the map.
	later := make(map[string]int32, len(x.slots)-len(sn.byID))
	for i := len(sn.byID); i < len(x.slots); i++ {
		later[x.slots[i].id] = int32(i)
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
	n, covered := len(x.slots), x.unsaved
	slots := x.slots[:n:n]
	buf := make([]byte, 0, 64<<10)
	buf = append(buf, snapMagic...)
	buf = binary.AppendUvarint(buf, snapVersion)
	buf = binary.AppendUvarint(buf, uint64(len(x.pos)))
	for rel, p := range x.pos {
		buf = appendString(buf, rel)
		buf = binary.AppendUvarint(buf, uint64(p.Offset))
		buf = appendString(buf, p.EventID)
	}
	idsLen := 0
	for i := range slots {
		idsLen += len(slots[i].id)
	}
	buf = binary.AppendUvarint(buf, uint64(idsLen))
	buf = binary.AppendUvarint(buf, uint64(n))
	order := slices.Clone(x.order)
	// The by-ID order: the slots already in it (x.sorted, after a load
	// or a save: always the first len(x.sorted) slots) and the others,
	// to be sorted and merged.
	sorted := x.sorted
	others := make([]int32, 0, n-len(sorted))
	for s := len(sorted); s < n; s++ {
		others = append(others, int32(s))
	}
	var tail []byte
	words := (n + 63) / 64
	tail = binary.AppendUvarint(tail, uint64(len(x.reads)))
	for r, bits := range x.reads {
		bits = bits[:min(len(bits), words)]
		tail = binary.AppendUvarint(tail, uint64(r))
		tail = binary.AppendUvarint(tail, uint64(len(bits)))
		for i, w := range bits {
			if i == words-1 && n%64 != 0 {
				w &= 1<<(n%64) - 1
			}
			tail = binary.LittleEndian.AppendUint64(tail, w)
		}
	}
	tail = binary.AppendUvarint(tail, uint64(len(x.early)))
	for id, readers := range x.early {
		tail = appendString(tail, id)
		tail = binary.AppendUvarint(tail, uint64(len(readers)))
		for _, r := range readers {
			tail = appendString(tail, r)
		}
	}
	x.mu.RUnlock()

	for lo := 0; lo < n; lo += snapshotChunk {
		if _, err := w.Write(buf); err != nil {
			return snapshotInfo{}, err
		}
		buf = buf[:0]
		x.mu.RLock()
		if x.closed {
			x.mu.RUnlock()
			return snapshotInfo{}, ErrClosed
		}
		for i := lo; i < min(lo+snapshotChunk, n); i++ {
			m := &x.slots[i]
			buf = appendString(buf, m.id)
			buf = binary.AppendVarint(buf, m.created)
			buf = binary.AppendVarint(buf, m.updated)
			buf = binary.AppendUvarint(buf, uint64(m.author))
			buf = binary.AppendUvarint(buf, uint64(m.thread))
			var flags uint64
			if m.deleted {
				flags |= 1
			}
			if m.proxied {
				flags |= 2
			}
			buf = binary.AppendUvarint(buf, flags)
			buf = binary.AppendUvarint(buf, uint64(len(m.keys)))
			for _, k := range m.keys {
				buf = binary.AppendUvarint(buf, uint64(k))
			}
		}
		x.mu.RUnlock()
	}

	buf = binary.AppendUvarint(buf, uint64(len(order)))
	for _, s := range order {
		buf = binary.AppendUvarint(buf, uint64(s))
	}
	byID := mergeByID(slots, sorted, others)
	buf = binary.AppendUvarint(buf, uint64(len(byID)))
	for _, s := range byID {
		buf = binary.AppendUvarint(buf, uint64(s))
	}
	buf = append(buf, tail...)

	x.mu.RLock()
	strs := x.strList[:len(x.strList):len(x.strList)] // appended to, never changed
	x.mu.RUnlock()
	buf = binary.AppendUvarint(buf, uint64(len(strs)))
	for _, s := range strs {
		buf = appendString(buf, s)
	}
	if _, err := w.Write(buf); err != nil {
		return snapshotInfo{}, err
	}
	return snapshotInfo{covered, byID}, nil
}

// mergeByID returns every slot in message ID order: sorted, already in
// that order, merged with others, sorted here. Slots are mostly added in
// ID order (IDs grow with time), so others sorts quickly.
func mergeByID(slots []imsg, sorted, others []int32) []int32 {
	byIDOf := func(a, b int32) int { return strings.Compare(slots[a].id, slots[b].id) }
	slices.SortFunc(others, byIDOf)
	out := make([]int32, 0, len(sorted)+len(others))
	i, j := 0, 0
	for i < len(sorted) && j < len(others) {
		if byIDOf(sorted[i], others[j]) < 0 {
			out = append(out, sorted[i])
			i++
		} else {
			out = append(out, others[j])
			j++
		}
	}
	out = append(out, sorted[i:]...)
	return append(out, others[j:]...)
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
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

// decode fills x from a snapshot's bytes, checking every count and ID so
// that no file, however damaged, makes it panic or allocate more than
// the file's size allows.
func (x *Index) decode(b []byte) error {
	if len(b) < len(snapMagic)+4 || string(b[:len(snapMagic)]) != snapMagic {
		return fmt.Errorf("%w: not a snapshot", errSnapshot)
	}
	body := b[:len(b)-4]
	if crc32.Checksum(body, crcTable) != binary.LittleEndian.Uint32(b[len(b)-4:]) {
		return fmt.Errorf("%w: checksum mismatch", errSnapshot)
	}
	d := decoder{b: body[len(snapMagic):]}
	if v := d.uvarint(); v != snapVersion {
		return fmt.Errorf("%w: version %d", errSnapshot, v)
	}
	// Maps are not sized from counts: a count is checked only against the
	// bytes left, and a map's entry takes far more than its bytes.
	npos := d.count(3)
	pos := map[string]Position{}
	for i := 0; i < npos && d.err == nil; i++ {
		rel := d.string()
		off := d.uvarint()
		id := d.string()
		if _, dup := pos[rel]; dup || off > 1<<62 {
			d.fail("bad position")
		}
		pos[rel] = Position{int64(off), id}
	}

	// String IDs are checked against the strings at the end, which are
	// written last: the highest one used must be there.
	var maxStr uint64
	str := func() uint32 {
		v := d.uvarint()
		if v > 1<<31 {
			d.fail("string ID out of range")
			return 0
		}
		maxStr = max(maxStr, v)
		return uint32(v)
	}

	// Every message ID in one string, which each slot's ID slices: one
	// allocation instead of one per message.
	idsLen := d.count(1)
	var ids strings.Builder
	ids.Grow(idsLen)
	nslots := d.count(7)
	slots := make([]imsg, nslots)
	idLens := make([]int, nslots)
	keys := make([]uint32, 0, nslots) // one backing array for every slot's keys
	for i := 0; i < nslots && d.err == nil; i++ {
		m := &slots[i]
		id := d.bytes()
		if ids.Len()+len(id) > idsLen {
			d.fail("message IDs longer than said")
			break
		}
		ids.Write(id)
		idLens[i] = len(id)
		m.created, m.updated = d.varint(), d.varint()
		m.author, m.thread = str(), str()
		flags := d.uvarint()
		m.deleted, m.proxied = flags&1 != 0, flags&2 != 0
		nk := d.count(1)
		start := len(keys)
		for j := 0; j < nk && d.err == nil; j++ {
			keys = append(keys, str())
		}
		// The full slice expression keeps a later append from
		// writing into the next slot's keys.
		m.keys = keys[start:len(keys):len(keys)]
	}
	if d.err == nil && ids.Len() != idsLen {
		d.fail("message IDs shorter than said")
	}
	all, at := ids.String(), 0
	for i := 0; i < nslots && d.err == nil; i++ {
		slots[i].id, at = all[at:at+idLens[i]], at+idLens[i]
	}

	norder := d.count(1)
	if d.err == nil && norder != nslots {
		d.fail("order does not cover the messages")
	}
	order := make([]int32, norder)
	seen := make([]bool, nslots)
	for i := 0; i < norder && d.err == nil; i++ {
		s := d.uvarint()
		if s >= uint64(nslots) || seen[s] {
			d.fail("order is not a permutation")
			break
		}
		seen[s] = true
		order[i] = int32(s)
	}

	// The slots by ID: strictly increasing IDs, so also no ID twice.
	if nsorted := d.count(1); d.err == nil && nsorted != nslots {
		d.fail("the by-ID order does not cover the messages")
	}
	sorted := make([]int32, nslots)
	for i := 0; i < nslots && d.err == nil; i++ {
		s := d.uvarint()
		if s >= uint64(nslots) || i > 0 && slots[s].id <= slots[sorted[i-1]].id {
			d.fail("message IDs are not sorted or repeat")
			break
		}
		sorted[i] = int32(s)
	}

	nreads := d.count(2)
	reads := map[uint32][]uint64{}
	for i := 0; i < nreads && d.err == nil; i++ {
		r := str()
		nw := d.count(8)
		if nw > (nslots+63)/64 {
			d.fail("reads past the messages")
			break
		}
		bits := make([]uint64, nw)
		for j := range bits {
			bits[j] = d.uint64()
		}
		if nw > 0 && nw == (nslots+63)/64 && nslots%64 != 0 {
			bits[nw-1] &= 1<<(nslots%64) - 1 // no message past the last is read
		}
		reads[r] = bits
	}

	nearly := d.count(2)
	var early map[string][]string
	for i := 0; i < nearly && d.err == nil; i++ {
		id := d.string()
		rs := make([]string, d.count(1))
		for j := range rs {
			rs[j] = d.string()
		}
		if early == nil {
			early = map[string][]string{}
		}
		early[id] = rs
	}
	nstrs := d.count(1)
	strs := map[string]uint32{}
	strList := make([]string, 0, nstrs)
	for i := 0; i < nstrs && d.err == nil; i++ {
		s := d.string()
		strs[s] = uint32(i)
		strList = append(strList, s)
	}
	if d.err == nil && (len(strs) != nstrs || nstrs == 0) {
		d.fail("strings repeat or are missing")
	}
	if v, ok := strs[""]; d.err == nil && (!ok || v != 0) {
		d.fail("string 0 is not empty")
	}
	if d.err == nil && maxStr >= uint64(nstrs) {
		d.fail("string ID out of range")
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("trailing bytes")
	}
	if d.err != nil {
		return d.err
	}
	x.slots, x.order, x.sorted, x.byID, x.strs, x.strList, x.reads, x.early, x.pos = slots, order, sorted, map[string]int32{}, strs, strList, reads, early, pos
	return nil
}

// decoder reads a snapshot's fields; the first problem sticks in err and
// every later read returns zero.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(why string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", errSnapshot, why)
	}
	d.b = nil
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad number")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("bad number")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) uint64() uint64 {
	if d.err != nil {
		return 0
	}
	if len(d.b) < 8 {
		d.fail("truncated")
		return 0
	}
	v := binary.LittleEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

// count reads a number of items each at least min bytes long, refusing
// one the rest of the file cannot hold.
func (d *decoder) count(min int) int {
	v := d.uvarint()
	if v > uint64(len(d.b)/min) {
		d.fail("count larger than the file")
		return 0
	}
	return int(v)
}

func (d *decoder) bytes() []byte {
	n := d.count(1)
	if d.err != nil {
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) string() string { return string(d.bytes()) }
