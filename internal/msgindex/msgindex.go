// Package msgindex is an in-memory index of every message, for
// message.list and thread.get. It is a projection: built from a snapshot
// of the SQLite projection at open, then kept current by the projector.
package msgindex

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/store"
)

// ErrClosed is the error of List after Close.
var ErrClosed = errors.New("msgindex: closed")

// ErrBuilding is the error of List while Build reads the projection: the
// caller should answer from the projection itself (store.MessageIDs
// gives the same answer, more slowly) rather than wait.
var ErrBuilding = errors.New("msgindex: building")

// An Index is an in-memory index of every message, for message.list and
// thread.get. Each key (scope, ref, mention), author and thread has the
// list of its messages' slots; a filter intersects those lists (a union
// for mentions) into a bitset over the slots, so that its counts are
// popcounts and its page a walk of the created (or updated) order that
// stops at the page's end or the last match. A listing then costs its
// lists, a few passes over words of 64 messages each, and that walk: a
// bit test per message, not a look at each message's fields. It is
// derived state, like the projection: built from a snapshot of the
// projection at open, then kept current by the commit path (every
// update is idempotent, so an event that is both in the snapshot and
// applied after it does no harm). The page's rows themselves are then
// read from SQLite by ID.
type Index struct {
	mu       sync.RWMutex
	ready    chan struct{} // closed once built
	slow     chan struct{} // closed once listings stop waiting: Build started (ErrBuilding until ready), built, or closed
	slowOnce sync.Once
	err      error // why the build failed, if it did

	slots   slotList         // by slot: append order
	keys    []uint32         // the slots' keys, in slot order (keysOf)
	order   []int32          // slots sorted by (created, message_id)
	byUpd   []int32          // slots sorted by (updated or else created, created, message_id)
	sorted  []int32          // slots sorted by message_id: those a snapshot brought
	byID    map[msgKey]int32 // message_id → slot, for the others
	long    map[int32]string // slot → message_id, for the IDs that do not pack (see msgKey)
	strs    map[string]uint32
	strList []string            // by ID: strs inverted; only ever appended to
	reads   map[uint32][]uint64 // reader → bitset over slots
	pending []*eventlog.Event   // committed while building
	// Reads of messages not indexed yet (synced out of order: an import
	// can hold tens of thousands at once): the reader of each, and the
	// others of the few that several read first. A message is keyed by
	// earlyKeyOf, and a reader is its string ID.
	early     map[earlyKey]uint32
	earlyMore map[earlyKey][]uint32
	// earlyMost is the most entries early has held: a map never gives
	// back the room it grew to, so early is copied once it is down to a
	// quarter of that.
	earlyMost int
	pos       map[string]Position // shard path → how far the index has applied it
	unsaved   uint64              // log events taken since the snapshot on disk was saved or loaded
	saveMu    sync.Mutex          // one Save at a time
	onDisk    bool                // a snapshot of it (saved or loaded) is on disk
	closed    bool
	bulk      bool // building: add appends to order, sorted once at the end

	// What a listing counts and pages with, derived from the slots once
	// they are all in (Build, load) and kept current by every change
	// from then on (indexed): the slots of each key, author and thread
	// (ascending, as slots are only appended), and the deleted and
	// proxied slots as bitsets.
	indexed  bool
	byKey    postings
	byAuthor postings
	byThread postings
	deleted  bitset
	proxied  bitset
}

// A Position is how far into one shard of the log (eventlog.ShardPath)
// the index has applied every event: the offset just past the line of
// the last one (eventlog.Event.Offset), and its ID. A snapshot carries
// the index's positions, so that a snapshot older than the log is made
// current by applying what the log holds past them.
type Position struct {
	Offset  int64
	EventID string
}

// Close makes later listings fail with ErrClosed.
func (x *Index) Close() {
	x.mu.Lock()
	x.closed = true
	x.slots, x.keys, x.order, x.sorted, x.byID, x.long, x.reads = nil, nil, nil, nil, nil, nil, nil
	x.byUpd, x.byKey, x.byAuthor, x.byThread, x.deleted, x.proxied = nil, nil, nil, nil, nil, nil
	x.mu.Unlock()
	// A listing waiting for a load or build that will now never come
	// gets ErrClosed instead.
	x.markSlow()
}

// An earlyKey is the ID of a message read before it came, as early keeps
// it: 16 bytes of its SHA-256, whatever its length (the ID itself cost a
// string of 32 bytes or more each).
type earlyKey [16]byte

func earlyKeyOf(id string) earlyKey {
	sum := sha256.Sum256([]byte(id))
	return earlyKey(sum[:16])
}

// markSlow lets listings stop waiting for the index.
func (x *Index) markSlow() { x.slowOnce.Do(func() { close(x.slow) }) }

// Settled is closed once listings no longer wait for the index: it is
// loaded or built, or a Build has started (listings are then answered
// elsewhere until it ends), or the index is closed.
func (x *Index) Settled() <-chan struct{} { return x.slow }

// An imsg is a message as the index holds it: 48 bytes, its ID packed
// (see msgKey) and its keys kept apart in one array for all (a slice of
// its own cost 24 bytes and an allocation a message).
type imsg struct {
	ulid    [16]byte // its packed ID, unless long
	created int64    // unix nanoseconds
	updated int64    // 0 if never edited
	author  uint32
	thread  uint32 // 0: not in a thread
	keyAt   uint32 // where its keys start in Index.keys (see keysOf)
	long    bool   // its ID did not pack: it is in Index.long
	deleted bool
	proxied bool // a user sent it as author: the author has not read it
}

// A slotList is the slots in chunks of slotChunk: it grows a chunk at a
// time and never copies what it holds (a slice of them all, grown by a
// quarter, held its old array and its new one at once: 9 MiB at
// 100,000).
type slotList [][]imsg

const slotChunk = 1 << 12

func (l slotList) len() int {
	if len(l) == 0 {
		return 0
	}
	return (len(l)-1)*slotChunk + len(l[len(l)-1])
}

func (l slotList) at(s int32) *imsg { return &l[s/slotChunk][s%slotChunk] }

func (l *slotList) push(m imsg) {
	if n := len(*l); n == 0 || len((*l)[n-1]) == slotChunk {
		*l = append(*l, make([]imsg, 0, slotChunk))
	}
	last := &(*l)[len(*l)-1]
	*last = append(*last, m)
}

// keysOf returns the keys of slot s (interned "s\x00type\x00value" and
// "r\x00type\x00value"): the keys of the slots are kept in slot order,
// so they run from its keyAt to the next slot's.
func (x *Index) keysOf(s int) []uint32 {
	end := uint32(len(x.keys))
	if s+1 < x.slots.len() {
		end = x.slots.at(int32(s + 1)).keyAt
	}
	return x.keys[x.slots.at(int32(s)).keyAt:end:end]
}

// New returns an empty index; Build fills it.
func New() *Index {
	return &Index{ready: make(chan struct{}), slow: make(chan struct{}), byID: map[msgKey]int32{}, long: map[int32]string{}, strs: map[string]uint32{"": 0},
		strList: []string{""}, reads: map[uint32][]uint64{}, pos: map[string]Position{}}
}

// intern returns s's ID, adding it. Called with mu held for writing.
func (x *Index) intern(s string) uint32 {
	if id, ok := x.strs[s]; ok {
		return id
	}
	id := uint32(len(x.strList))
	x.strs[s] = id
	x.strList = append(x.strList, s)
	return id
}

// lookup returns s's ID without adding it (ok false: nothing has it).
func (x *Index) lookup(s string) (uint32, bool) {
	id, ok := x.strs[s]
	return id, ok
}

func pairKey(kind, typ, value string) string { return kind + "\x00" + typ + "\x00" + value }

// A Log is what Load needs of the event log: its durable end, to check
// that a saved position still ends the line of the event saved with it,
// and to read the events past given positions. *eventlog.Log is one.
type Log interface {
	Positions() map[string]int64
	CheckAt(rel string, off int64, wantID string) (*eventlog.Event, error)
	Scan(ctx context.Context, from map[string]int64, fn func(*eventlog.Event) error) (map[string]int64, error)
}

// Load fills the index from the snapshot at path (see Save), then
// applies what lg holds past the snapshot's positions, then what was
// committed meanwhile. Listings wait for it: it takes a fraction of
// Build's time, plus the replay of the log's tail, which the node keeps
// short by saving snapshots as the log grows. It fails, leaving the
// index as it was, when there is no usable snapshot (none, damaged, of
// another format, or with a position the log no longer holds): the
// caller then runs Build.
func (x *Index) Load(ctx context.Context, path string, lg Log) error {
	snap, err := ReadSnapshot(path)
	if err != nil {
		return err
	}
	return x.LoadSnapshot(ctx, snap, lg)
}

// A Snapshot is a snapshot file read and decoded, not yet checked against
// the log. Reading one needs nothing but the file, so a node starts it
// before it opens the rest.
type Snapshot struct{ b *Index }

// ReadSnapshot reads and decodes the snapshot at path.
func ReadSnapshot(path string) (*Snapshot, error) {
	b := New()
	if err := b.load(path); err != nil {
		return nil, err
	}
	return &Snapshot{b}, nil
}

// LoadSnapshot is Load of a snapshot already read. A Snapshot is used up
// by it, whatever the outcome.
func (x *Index) LoadSnapshot(ctx context.Context, snap *Snapshot, lg Log) error {
	b := snap.b
	if b == nil {
		return fmt.Errorf("%w: already used", errSnapshot)
	}
	snap.b = nil
	from := make(map[string]int64, len(b.pos))
	for rel, p := range b.pos {
		if _, err := lg.CheckAt(rel, p.Offset, p.EventID); err != nil {
			return fmt.Errorf("%w: the log changed before its position in %s: %v", errSnapshot, rel, err)
		}
		from[rel] = p.Offset
	}
	// Only what is durable now: an event committed from here on reaches
	// the index through Apply (queued until the load is installed), and
	// a line still being written (a shard created meanwhile, which Scan
	// would read to its end) may yet be undone.
	durable := lg.Positions()
	if _, err := lg.Scan(ctx, from, func(e *eventlog.Event) error {
		if end, ok := durable[eventlog.ShardPath(e.Shard)]; !ok || e.Offset > end {
			return nil
		}
		b.advance(e)
		b.unsaved++
		if isMessageEvent(e.Type) {
			b.applyLocked(e)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("msgindex: load: replay the log past the snapshot: %w", err)
	}
	b.onDisk = true
	x.install(b, nil)
	return nil
}

// Build fills the index from the projection, then applies what was
// committed meanwhile. It is meant to run in its own goroutine, and holds
// the lock only to install the result, so writers never wait for it.
// Listings meanwhile get ErrBuilding. Cancelling ctx abandons it;
// listings then fail.
func (x *Index) Build(ctx context.Context, st *store.Store) {
	x.markSlow()
	b := New()
	b.bulk = true
	// The keys come by kind, not by message: they are laid out in slot
	// order once all are in.
	type slotKey struct {
		slot int32
		key  uint32
	}
	var keys []slotKey
	err := st.IndexSnapshot(ctx, func(rel string, off int64, eventID string) {
		b.pos[rel] = Position{off, eventID}
	}, func(r store.IndexRow) {
		m := b.slots.at(b.add(r.MessageID, r.AgentID, r.ThreadID, r.CreatedAt.UnixNano(), r.Deleted))
		if !r.UpdatedAt.IsZero() {
			m.updated = r.UpdatedAt.UnixNano()
		}
		m.proxied = r.ActingAs != ""
	}, func(id, kind, typ, value string) {
		if b.bulk { // the messages are all in: put them in order once
			sort.Slice(b.order, func(i, j int) bool { return b.less(b.order[i], b.order[j]) })
			b.bulk = false
		}
		if s, ok := b.slotOf(id); ok {
			keys = append(keys, slotKey{s, b.intern(pairKey(kind, typ, value))})
		}
	}, func(id, agent string) {
		b.markRead(agent, id)
	})
	if b.bulk { // no scope or ref at all
		sort.Slice(b.order, func(i, j int) bool { return b.less(b.order[i], b.order[j]) })
		b.bulk = false
	}
	slices.SortStableFunc(keys, func(a, c slotKey) int { return int(a.slot) - int(c.slot) })
	b.keys = make([]uint32, len(keys))
	for i, k := range keys {
		b.keys[i] = k.key
	}
	for s, i := b.slots.len()-1, len(keys); s >= 0; s-- {
		for i > 0 && keys[i-1].slot >= int32(s) {
			i--
		}
		b.slots.at(int32(s)).keyAt = uint32(i)
	}
	b.derive()
	x.install(b, err)
}

// install makes b's content (or the build's failure) the index's, applies
// what was committed meanwhile, and lets listings in.
func (x *Index) install(b *Index, err error) {
	x.mu.Lock()
	defer func() {
		close(x.ready)
		x.mu.Unlock()
		x.markSlow()
	}()
	if err != nil {
		x.err = err
		return
	}
	x.slots, x.keys, x.order, x.sorted, x.byID, x.long, x.strs, x.strList, x.reads = b.slots, b.keys, b.order, b.sorted, b.byID, b.long, b.strs, b.strList, b.reads
	x.early, x.earlyMore, x.earlyMost = b.early, b.earlyMore, b.earlyMost
	x.indexed, x.byUpd, x.byKey, x.byAuthor, x.byThread, x.deleted, x.proxied = b.indexed, b.byUpd, b.byKey, b.byAuthor, b.byThread, b.deleted, b.proxied
	for _, e := range x.pending { // idempotent: some may be in the snapshot too
		x.applyLocked(e)
	}
	x.unsaved += b.unsaved
	x.onDisk = b.onDisk
	x.pending = nil
	// Every event is in b or was committed since (in x.pending, whose
	// positions x.pos holds): the later of the two positions is covered.
	for rel, p := range x.pos {
		if q, ok := b.pos[rel]; !ok || p.Offset > q.Offset {
			b.pos[rel] = p
		}
	}
	x.pos = b.pos
}

// slotOf returns the slot of message id. The messages a snapshot brought
// are found by binary search in sorted, so that a load does not build a
// map of every message ID (a third of its time at 100,000); the others
// are in byID.
func (x *Index) slotOf(id string) (int32, bool) { return x.slotOfKey(keyOf(id)) }

func (x *Index) slotOfKey(k msgKey) (int32, bool) {
	if s, ok := x.byID[k]; ok {
		return s, true
	}
	ids := x.ids()
	i := sort.Search(len(x.sorted), func(i int) bool { return compareKeys(ids.key(x.sorted[i]), k) >= 0 })
	if i < len(x.sorted) && ids.key(x.sorted[i]) == k {
		return x.sorted[i], true
	}
	return 0, false
}

// mapMost is how many messages byID holds before they join sorted.
const mapMost = 4096

// sortByID merges the slots byID holds (every slot past sorted's) into
// sorted, and empties byID: a map of the 100,000 messages an import
// brought took 3 MiB, the sorted slots 0.4. A save does it too.
func (x *Index) sortByID() {
	x.sorted = mergeByID(x.ids(), x.sorted, x.slots.len())
	x.byID = map[msgKey]int32{}
}

// add inserts a message if new, keeping order sorted by created time.
func (x *Index) add(id, author, thread string, created int64, deleted bool) int32 {
	k := keyOf(id)
	if s, ok := x.slotOfKey(k); ok {
		return s
	}
	slot := int32(x.slots.len())
	m := imsg{ulid: k.ulid, created: created, author: x.intern(author), thread: x.intern(thread), keyAt: uint32(len(x.keys))}
	if !k.packed {
		m.long, x.long[slot] = true, k.long
	}
	x.slots.push(m)
	x.byID[k] = slot
	if len(x.byID) > max(mapMost, len(x.sorted)/8) {
		x.sortByID()
	}
	if x.bulk {
		x.order = append(x.order, slot) // sorted once at the end
	} else {
		x.order = insertSorted(x.order, slot, x.less)
	}
	if x.indexed {
		x.byAuthor.add(m.author, slot)
		if m.thread != 0 {
			x.byThread.add(m.thread, slot)
		}
		x.byUpd = insertSorted(x.byUpd, slot, x.lessUpd)
	}
	if deleted {
		x.setDeleted(slot)
	}
	if len(x.early) > 0 {
		k := earlyKeyOf(id)
		if r, ok := x.early[k]; ok {
			more := x.earlyMore[k]
			delete(x.early, k)
			delete(x.earlyMore, k)
			x.shrinkEarly()
			x.setRead(r, slot)
			for _, r := range more {
				x.setRead(r, slot)
			}
		}
	}
	return slot
}

// shrinkEarly lets the room go that early no longer needs.
func (x *Index) shrinkEarly() {
	if len(x.early) > x.earlyMost/4 {
		return
	}
	var kept map[earlyKey]uint32
	if len(x.early) > 0 {
		kept = make(map[earlyKey]uint32, len(x.early))
		for k, r := range x.early {
			kept[k] = r
		}
	}
	x.early, x.earlyMost = kept, len(kept)
	if len(x.earlyMore) == 0 {
		x.earlyMore = nil
	}
}

// insertSorted inserts s into list, sorted by less. It is almost always
// the newest: appended. A message synced from elsewhere may be older
// than some already here: it is inserted in place.
func insertSorted(list []int32, s int32, less func(a, b int32) bool) []int32 {
	n := len(list)
	if n == 0 || less(list[n-1], s) {
		return append(list, s)
	}
	i := sort.Search(n, func(i int) bool { return less(s, list[i]) })
	list = append(list, 0)
	copy(list[i+1:], list[i:])
	list[i] = s
	return list
}

// postings are lists of slots by string ID (of a key, author or thread),
// each ascending.
type postings [][]int32

func (p *postings) add(id uint32, s int32) {
	if int(id) >= len(*p) {
		*p = append(*p, make([][]int32, int(id)+1-len(*p))...)
	}
	(*p)[id] = append((*p)[id], s)
}

func (p postings) of(id uint32) []int32 {
	if int(id) < len(p) {
		return p[id]
	}
	return nil
}

// derive computes what listings use from the slots and order, and has
// every later change keep it current.
func (x *Index) derive() {
	// Each list is sized first and cut from one array for them all: a
	// load then makes three allocations, not one per list and growth.
	n := len(x.strList)
	authors, threads, keys := make([]int32, n), make([]int32, n), make([]int32, n)
	for i := range x.slots.len() {
		m := x.slots.at(int32(i))
		authors[m.author]++
		threads[m.thread]++
		for _, k := range x.keysOf(i) {
			keys[k]++
		}
	}
	threads[0] = 0 // not in a thread
	x.byAuthor, x.byThread, x.byKey = carve(authors), carve(threads), carve(keys)
	x.deleted, x.proxied = nil, nil
	var edited []int32
	for i := range x.slots.len() {
		s, m := int32(i), x.slots.at(int32(i))
		x.byAuthor[m.author] = append(x.byAuthor[m.author], s)
		if m.thread != 0 {
			x.byThread[m.thread] = append(x.byThread[m.thread], s)
		}
		for _, k := range x.keysOf(i) {
			x.byKey[k] = append(x.byKey[k], s)
		}
		if m.deleted {
			x.deleted.set(s)
		}
		if m.proxied {
			x.proxied.set(s)
		}
		if m.updated != 0 {
			edited = append(edited, s)
		}
	}
	// A message never edited sorts by its created time in both orders:
	// the edited ones are taken out of the created order, sorted, and
	// merged back in.
	slices.SortFunc(edited, func(a, b int32) int {
		if x.lessUpd(a, b) {
			return -1
		}
		return 1
	})
	x.byUpd = make([]int32, 0, len(x.order))
	for _, s := range x.order {
		if x.slots.at(s).updated != 0 {
			continue
		}
		for len(edited) > 0 && x.lessUpd(edited[0], s) {
			x.byUpd, edited = append(x.byUpd, edited[0]), edited[1:]
		}
		x.byUpd = append(x.byUpd, s)
	}
	x.byUpd = append(x.byUpd, edited...)
	x.indexed = true
}

// carve returns empty lists with room for counts[id] slots each, all in
// one array; a list that outgrows its room moves out of it.
func carve(counts []int32) postings {
	total := 0
	for _, c := range counts {
		total += int(c)
	}
	all := make([]int32, total)
	p := make(postings, len(counts))
	for id, c := range counts {
		p[id], all = all[:0:c], all[c:]
	}
	return p
}

// lessUpd orders slots as a listing by updated_at does: by the time of
// the last edit, or else of creation, then as less.
func (x *Index) lessUpd(a, b int32) bool {
	ka, kb := x.slots.at(a).updated, x.slots.at(b).updated
	if ka == 0 {
		ka = x.slots.at(a).created
	}
	if kb == 0 {
		kb = x.slots.at(b).created
	}
	if ka != kb {
		return ka < kb
	}
	return x.less(a, b)
}

// setUpdated records an edit of slot s at t, moving it in the updated
// order.
func (x *Index) setUpdated(s int32, t int64) {
	if !x.indexed {
		x.slots.at(s).updated = t
		return
	}
	u := x.byUpd
	i := sort.Search(len(u), func(i int) bool { return !x.lessUpd(u[i], s) })
	x.slots.at(s).updated = t
	if i == len(u) || u[i] != s { // not there: never, as every slot is
		return
	}
	copy(u[i:], u[i+1:])
	x.byUpd = insertSorted(u[:len(u)-1], s, x.lessUpd)
}

func (x *Index) setDeleted(s int32) {
	x.slots.at(s).deleted = true
	if x.indexed {
		x.deleted.set(s)
	}
}

func (x *Index) less(a, b int32) bool {
	ma, mb := x.slots.at(a), x.slots.at(b)
	if ma.created != mb.created {
		return ma.created < mb.created
	}
	ids := x.ids()
	return compareKeys(ids.key(a), ids.key(b)) < 0
}

func (x *Index) markRead(agent, id string) {
	r := x.intern(agent)
	s, ok := x.slotOf(id)
	if ok {
		x.setRead(r, s)
		return
	}
	// A read can arrive before its message when both came from other
	// machines: keep it for when the message does.
	x.addEarly(earlyKeyOf(id), r)
}

// addEarly keeps reader r's read of a message not indexed yet.
func (x *Index) addEarly(k earlyKey, r uint32) {
	first, ok := x.early[k]
	switch {
	case !ok:
		if x.early == nil {
			x.early = map[earlyKey]uint32{}
		}
		x.early[k] = r
		x.earlyMost = max(x.earlyMost, len(x.early))
	case first != r && !slices.Contains(x.earlyMore[k], r):
		if x.earlyMore == nil {
			x.earlyMore = map[earlyKey][]uint32{}
		}
		x.earlyMore[k] = append(x.earlyMore[k], r)
	}
}

// setRead marks slot s read by reader r (a string ID).
func (x *Index) setRead(r uint32, s int32) {
	bits := bitset(x.reads[r])
	bits.set(s)
	x.reads[r] = bits
}

// Apply folds committed events in; before the build is done it queues
// them.
func (x *Index) Apply(batch []*eventlog.Event) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed { // a batch committed while the node closes
		return
	}
	ready := true
	select {
	case <-x.ready:
	default:
		ready = false
	}
	for _, e := range batch {
		if x.advance(e) {
			x.unsaved++ // every event of the log: all are replayed after a crash
		}
		switch {
		case !isMessageEvent(e.Type):
		case ready:
			x.applyLocked(e)
		default:
			x.pending = append(x.pending, e)
		}
	}
}

// Unsaved returns how many log events (of any kind: a start after a crash
// replays them all) the index has taken since its snapshot on disk was
// saved or loaded, and whether there is one at all
// (there is none after Build until Save).
func (x *Index) Unsaved() (events uint64, onDisk bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.unsaved, x.onDisk
}

// Len returns how many messages the index holds.
func (x *Index) Len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.slots.len()
}

// advance moves the position of e's shard past e, and reports whether e
// is from the log. Events reach the index in log order within a shard,
// so every event before e in its shard is applied too. An event that is
// not from a log (no offset) moves nothing.
func (x *Index) advance(e *eventlog.Event) bool {
	if e.Offset <= 0 {
		return false
	}
	rel := eventlog.ShardPath(e.Shard)
	if p, ok := x.pos[rel]; !ok || e.Offset > p.Offset {
		x.pos[rel] = Position{e.Offset, e.ID}
	}
	return true
}

func isMessageEvent(t string) bool {
	switch t {
	case eventlog.TypeMessageCreate, eventlog.TypeMessageEdit, eventlog.TypeMessageDelete, eventlog.TypeMessageRead:
		return true
	}
	return false
}

func (x *Index) applyLocked(e *eventlog.Event) {
	switch e.Type {
	case eventlog.TypeMessageCreate:
		p, err := eventlog.PayloadAs[eventlog.MessageCreate](e)
		if err != nil {
			return
		}
		if _, ok := x.slotOf(p.MessageID); ok {
			return
		}
		s := x.add(p.MessageID, p.AgentID, p.ThreadID, e.Time.UnixNano(), false)
		m := x.slots.at(s) // the newest slot: its keys end x.keys
		for _, sc := range p.Scopes {
			x.keys = append(x.keys, x.intern(pairKey("s", sc.Type, sc.Value)))
		}
		for _, r := range p.Refs {
			x.keys = append(x.keys, x.intern(pairKey("r", r.Type, r.Value)))
		}
		if x.indexed {
			for _, k := range x.keys[m.keyAt:] {
				x.byKey.add(k, s)
			}
		}
		if p.ActingAs != "" {
			m.proxied = true
			if x.indexed {
				x.proxied.set(s)
			}
		}
	case eventlog.TypeMessageEdit:
		p, err := eventlog.PayloadAs[eventlog.MessageEdit](e)
		if err == nil {
			if s, ok := x.slotOf(p.MessageID); ok && x.slots.at(s).updated < e.Time.UnixNano() {
				x.setUpdated(s, e.Time.UnixNano())
			}
		}
	case eventlog.TypeMessageDelete:
		p, err := eventlog.PayloadAs[eventlog.MessageDelete](e)
		if err == nil {
			if s, ok := x.slotOf(p.MessageID); ok {
				x.setDeleted(s)
			}
		}
	case eventlog.TypeMessageRead:
		p, err := eventlog.PayloadAs[eventlog.MessageRead](e)
		if err == nil {
			for _, id := range p.MessageIDs {
				x.markRead(p.AgentID, id)
			}
		}
	}
}

// matches returns the slots that match f, but for its unread filter: a
// bitset of x.slots.len() bits, each filter's slots intersected. It costs
// the size of those lists plus a few passes over the bitset's words (a
// 64th of the messages each), not a test of every message's fields.
func (x *Index) matches(f store.MessageFilter) bitset {
	words := (x.slots.len() + 63) / 64
	slotsOf := func(p postings, s string) []int32 {
		if id, ok := x.lookup(s); ok {
			return p.of(id)
		}
		return nil
	}
	var every [][]int32 // a match is in each
	if f.Scope != nil {
		every = append(every, slotsOf(x.byKey, pairKey("s", f.Scope.Type, f.Scope.Value)))
	}
	if f.Ref != nil {
		every = append(every, slotsOf(x.byKey, pairKey("r", f.Ref.Type, f.Ref.Value)))
	}
	if f.ThreadID != "" {
		every = append(every, slotsOf(x.byThread, f.ThreadID))
	}
	if f.AuthorID != "" {
		every = append(every, slotsOf(x.byAuthor, f.AuthorID))
	}
	slices.SortFunc(every, func(a, b []int32) int { return len(a) - len(b) })
	r := make(bitset, words)
	switch {
	case f.Mentions != nil: // any one of them
		for _, t := range f.Mentions {
			for _, s := range slotsOf(x.byKey, pairKey("r", "mention", t)) {
				r.set(s)
			}
		}
	case len(every) > 0:
		for _, s := range every[0] {
			r.set(s)
		}
		every = every[1:]
	default:
		r.fill(x.slots.len())
	}
	for _, list := range every {
		r.andList(list)
	}
	if !f.IncludeDeleted {
		r.andNot(x.deleted)
	}
	return r
}

// countRead returns how many of r's slots reader has read, and with
// drop removes them from r: those it marked read, and those it wrote
// itself (not as a user's proxy).
func (x *Index) countRead(r bitset, reader string, drop bool) int {
	id, ok := x.lookup(reader)
	if reader == "" || !ok {
		return 0
	}
	marked := bitset(x.reads[id])
	n := r.count() - r.countNot(marked)
	for _, s := range x.byAuthor.of(id) {
		if r.has(s) && !marked.has(s) && !x.proxied.has(s) {
			n++
			if drop {
				r.clear(s)
			}
		}
	}
	if drop {
		r.andNot(marked)
	}
	return n
}

// A bitset is a set of slots: slot s is bit s%64 of word s/64.
type bitset []uint64

func (b bitset) has(s int32) bool {
	w := int(s) / 64
	return w < len(b) && b[w]&(1<<(uint(s)%64)) != 0
}

// set adds s, growing b (by a quarter more than needed) if it is short.
func (b *bitset) set(s int32) {
	if need := int(s)/64 + 1; len(*b) < need {
		*b = append(*b, make([]uint64, need-len(*b)+len(*b)/4)...)
	}
	(*b)[s/64] |= 1 << (uint(s) % 64)
}

// fill adds slots 0 to n-1; b has room for them.
func (b bitset) fill(n int) {
	for i := range n / 64 {
		b[i] = ^uint64(0)
	}
	if n%64 != 0 {
		b[n/64] = 1<<(n%64) - 1
	}
}

func (b bitset) clear(s int32) { b[s/64] &^= 1 << (uint(s) % 64) }

// andList keeps only the slots of b that are in list, which is sorted.
func (b bitset) andList(list []int32) {
	i := 0
	for w := range b {
		var in uint64
		for ; i < len(list) && int(list[i])/64 == w; i++ {
			in |= 1 << (uint(list[i]) % 64)
		}
		b[w] &= in
	}
}

// andNot removes c's slots from b.
func (b bitset) andNot(c bitset) {
	for i := range min(len(b), len(c)) {
		b[i] &^= c[i]
	}
}

func (b bitset) count() int {
	n := 0
	for _, w := range b {
		n += bits.OnesCount64(w)
	}
	return n
}

// countNot returns how many of b's slots are not in c.
func (b bitset) countNot(c bitset) int {
	n := 0
	for i, w := range b {
		if i < len(c) {
			w &^= c[i]
		}
		n += bits.OnesCount64(w)
	}
	return n
}

// Built reports whether the index is built (by Load or Build) and usable.
func (x *Index) Built() bool {
	select {
	case <-x.ready:
	default:
		return false
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.err == nil && !x.closed
}

// List returns one page of message IDs matching f, and the total and
// unread counts over all matches. It waits for a Load, and returns
// ErrBuilding at once while Build runs.
func (x *Index) List(ctx context.Context, f store.MessageFilter) (ids []string, total, unread int, err error) {
	select {
	case <-x.ready:
	case <-x.slow:
		select {
		case <-x.ready:
		default:
			x.mu.RLock()
			closed := x.closed
			x.mu.RUnlock()
			if closed {
				return nil, 0, 0, ErrClosed
			}
			return nil, 0, 0, ErrBuilding
		}
	case <-ctx.Done():
		return nil, 0, 0, ctx.Err()
	case <-time.After(time.Minute):
		return nil, 0, 0, fmt.Errorf("msgindex: not built after a minute: %w", context.DeadlineExceeded)
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	if x.err != nil {
		return nil, 0, 0, fmt.Errorf("msgindex: build: %w", x.err)
	}
	if x.closed {
		return nil, 0, 0, ErrClosed
	}
	f.Offset, f.Limit = max(f.Offset, 0), max(f.Limit, 0) // a bad page is empty, not a panic
	if f.Mentions != nil && len(f.Mentions) == 0 {
		return nil, 0, 0, nil
	}
	r := x.matches(f)
	total = r.count()
	unread = total - x.countRead(r, f.Reader, f.Unread)
	if f.Unread {
		total = unread
	}
	// The page: the matches met walking the order from the chosen end,
	// past the offset; the walk stops at the page's end or the last match.
	order := x.order
	if f.SortBy == "updated_at" {
		order = x.byUpd
	}
	page := make([]string, 0, min(f.Limit, max(total-f.Offset, 0)))
	seen, end := 0, min(total, f.Offset+f.Limit)
	for i := 0; i < len(order) && seen < end; i++ {
		s := order[len(order)-1-i] // newest first
		if f.Asc {
			s = order[i]
		}
		if !r.has(s) {
			continue
		}
		if seen >= f.Offset {
			page = append(page, x.ids().key(s).String())
		}
		seen++
	}
	return page, total, unread, nil
}
