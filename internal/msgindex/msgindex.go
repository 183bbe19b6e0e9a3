// Package msgindex is an in-memory index of every message, for
// message.list and thread.get. It is a projection: built from a snapshot
// of the SQLite projection at open, then kept current by the projector.
package msgindex

import (
	"context"
	"errors"
	"fmt"
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
// thread.get: a filter, its counts and a page are a scan over compact
// structs in created order, which beats SQLite's per-row work by two
// orders of magnitude at 100,000 messages. It is derived state, like the
// projection: built from a snapshot of the projection at open, then kept
// current by the commit path (every update is idempotent, so an event
// that is both in the snapshot and applied after it does no harm). The
// page's rows themselves are then read from SQLite by ID.
type Index struct {
	mu       sync.RWMutex
	ready    chan struct{} // closed once built
	slow     chan struct{} // closed once listings stop waiting: Build started (ErrBuilding until ready), built, or closed
	slowOnce sync.Once
	err      error // why the build failed, if it did

	slots   []imsg           // by slot: append order
	order   []int32          // slots sorted by (created, message_id)
	sorted  []int32          // slots sorted by message_id: those a snapshot brought
	byID    map[string]int32 // message_id → slot, for the others
	strs    map[string]uint32
	strList []string            // by ID: strs inverted; only ever appended to
	reads   map[uint32][]uint64 // reader → bitset over slots
	pending []*eventlog.Event   // committed while building
	early   map[string][]string // reads of messages not indexed yet (synced out of order)
	pos     map[string]Position // shard path → how far the index has applied it
	unsaved uint64              // log events taken since the snapshot on disk was saved or loaded
	saveMu  sync.Mutex          // one Save at a time
	onDisk  bool                // a snapshot of it (saved or loaded) is on disk
	closed  bool
	bulk    bool // building: add appends to order, sorted once at the end
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
	x.slots, x.order, x.sorted, x.byID, x.reads = nil, nil, nil, nil, nil
	x.mu.Unlock()
	// A listing waiting for a load or build that will now never come
	// gets ErrClosed instead.
	x.markSlow()
}

// markSlow lets listings stop waiting for the index.
func (x *Index) markSlow() { x.slowOnce.Do(func() { close(x.slow) }) }

// Settled is closed once listings no longer wait for the index: it is
// loaded or built, or a Build has started (listings are then answered
// elsewhere until it ends), or the index is closed.
func (x *Index) Settled() <-chan struct{} { return x.slow }

type imsg struct {
	id      string
	created int64 // unix nanoseconds
	updated int64 // 0 if never edited
	author  uint32
	thread  uint32 // 0: not in a thread
	deleted bool
	proxied bool     // a user sent it as author: the author has not read it
	keys    []uint32 // interned "s\x00type\x00value" and "r\x00type\x00value"
}

// New returns an empty index; Build fills it.
func New() *Index {
	return &Index{ready: make(chan struct{}), slow: make(chan struct{}), byID: map[string]int32{}, strs: map[string]uint32{"": 0},
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
	err := st.IndexSnapshot(ctx, func(rel string, off int64, eventID string) {
		b.pos[rel] = Position{off, eventID}
	}, func(r store.IndexRow) {
		b.add(r.MessageID, r.AgentID, r.ThreadID, r.CreatedAt.UnixNano(), r.Deleted)
		s, _ := b.slotOf(r.MessageID)
		m := &b.slots[s]
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
			b.slots[s].keys = append(b.slots[s].keys, b.intern(pairKey(kind, typ, value)))
		}
	}, func(id, agent string) {
		b.markRead(agent, id)
	})
	if b.bulk { // no scope or ref at all
		sort.Slice(b.order, func(i, j int) bool { return b.less(b.order[i], b.order[j]) })
		b.bulk = false
	}
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
	x.slots, x.order, x.sorted, x.byID, x.strs, x.strList, x.reads, x.early = b.slots, b.order, b.sorted, b.byID, b.strs, b.strList, b.reads, b.early
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
func (x *Index) slotOf(id string) (int32, bool) {
	if s, ok := x.byID[id]; ok {
		return s, true
	}
	i := sort.Search(len(x.sorted), func(i int) bool { return x.slots[x.sorted[i]].id >= id })
	if i < len(x.sorted) && x.slots[x.sorted[i]].id == id {
		return x.sorted[i], true
	}
	return 0, false
}

// add inserts a message if new, keeping order sorted by created time.
func (x *Index) add(id, author, thread string, created int64, deleted bool) int32 {
	if s, ok := x.slotOf(id); ok {
		return s
	}
	slot := int32(len(x.slots))
	x.slots = append(x.slots, imsg{id: id, created: created, author: x.intern(author), thread: x.intern(thread), deleted: deleted})
	x.byID[id] = slot
	if readers, ok := x.early[id]; ok {
		delete(x.early, id)
		for _, r := range readers {
			x.markRead(r, id)
		}
	}
	// Almost always the newest: append. A message synced from elsewhere
	// may be older than some already here: insert it in place.
	n := len(x.order)
	if x.bulk || n == 0 || x.less(x.order[n-1], slot) {
		x.order = append(x.order, slot)
		return slot
	}
	i := sort.Search(n, func(i int) bool { return x.less(slot, x.order[i]) })
	x.order = append(x.order, 0)
	copy(x.order[i+1:], x.order[i:])
	x.order[i] = slot
	return slot
}

func (x *Index) less(a, b int32) bool {
	ma, mb := &x.slots[a], &x.slots[b]
	if ma.created != mb.created {
		return ma.created < mb.created
	}
	return ma.id < mb.id
}

func (x *Index) markRead(agent, id string) {
	s, ok := x.slotOf(id)
	if !ok {
		// A read can arrive before its message when both came from other
		// machines: keep it for when the message does.
		if x.early == nil {
			x.early = map[string][]string{}
		}
		x.early[id] = append(x.early[id], agent)
		return
	}
	r := x.intern(agent)
	bits := x.reads[r]
	if need := int(s)/64 + 1; len(bits) < need {
		bits = append(bits, make([]uint64, need-len(bits)+len(bits)/4)...)
	}
	bits[s/64] |= 1 << (uint(s) % 64)
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
	return len(x.slots)
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
		m := &x.slots[s]
		m.proxied = p.ActingAs != ""
		for _, sc := range p.Scopes {
			m.keys = append(m.keys, x.intern(pairKey("s", sc.Type, sc.Value)))
		}
		for _, r := range p.Refs {
			m.keys = append(m.keys, x.intern(pairKey("r", r.Type, r.Value)))
		}
	case eventlog.TypeMessageEdit:
		p, err := eventlog.PayloadAs[eventlog.MessageEdit](e)
		if err == nil {
			if s, ok := x.slotOf(p.MessageID); ok && x.slots[s].updated < e.Time.UnixNano() {
				x.slots[s].updated = e.Time.UnixNano()
			}
		}
	case eventlog.TypeMessageDelete:
		p, err := eventlog.PayloadAs[eventlog.MessageDelete](e)
		if err == nil {
			if s, ok := x.slotOf(p.MessageID); ok {
				x.slots[s].deleted = true
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

// query is a compiled filter.
type query struct {
	keys           []uint32 // a message must hold every one of these (scope, ref)
	mentions       []uint32 // and, if mentionFilter, at least one of these
	mentionFilter  bool
	thread, author uint32
	hasThread      bool
	hasAuthor      bool
	reader         uint32
	hasReader      bool
	readBits       []uint64
	unread         bool
	withDeleted    bool
	none           bool // a filter value nothing has: no match
}

func (x *Index) compile(f store.MessageFilter) query {
	var q query
	need := func(s string) uint32 {
		id, ok := x.lookup(s)
		if !ok {
			q.none = true
		}
		return id
	}
	if f.Scope != nil {
		q.keys = append(q.keys, need(pairKey("s", f.Scope.Type, f.Scope.Value)))
	}
	if f.Ref != nil {
		q.keys = append(q.keys, need(pairKey("r", f.Ref.Type, f.Ref.Value)))
	}
	if f.ThreadID != "" {
		q.thread, q.hasThread = need(f.ThreadID), true
	}
	if f.AuthorID != "" {
		q.author, q.hasAuthor = need(f.AuthorID), true
	}
	if f.Mentions != nil {
		q.mentionFilter = true
		for _, t := range f.Mentions {
			if id, ok := x.lookup(pairKey("r", "mention", t)); ok {
				q.mentions = append(q.mentions, id)
			}
		}
		if len(q.mentions) == 0 {
			q.none = true
		}
	}
	if f.Reader != "" {
		if id, ok := x.lookup(f.Reader); ok {
			q.reader, q.hasReader, q.readBits = id, true, x.reads[id]
		}
	}
	q.unread, q.withDeleted = f.Unread, f.IncludeDeleted
	return q
}

func (q *query) read(x *Index, s int32) bool {
	if !q.hasReader {
		return false
	}
	if m := &x.slots[s]; m.author == q.reader && !m.proxied {
		return true
	}
	w := int(s) / 64
	return w < len(q.readBits) && q.readBits[w]&(1<<(uint(s)%64)) != 0
}

func (q *query) match(x *Index, s int32) bool {
	m := &x.slots[s]
	if m.deleted && !q.withDeleted {
		return false
	}
	if q.hasThread && m.thread != q.thread || q.hasAuthor && m.author != q.author {
		return false
	}
	for _, k := range q.keys {
		if !has(m.keys, k) {
			return false
		}
	}
	if q.mentionFilter {
		hit := false
		for _, k := range q.mentions {
			if has(m.keys, k) {
				hit = true
				break
			}
		}
		if !hit {
			return false
		}
	}
	return true
}

func has(keys []uint32, k uint32) bool {
	for _, x := range keys {
		if x == k {
			return true
		}
	}
	return false
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
	q := x.compile(f)
	if q.none {
		return nil, 0, 0, nil
	}
	f.Offset, f.Limit = max(f.Offset, 0), max(f.Limit, 0) // a bad page is empty, not a panic
	byUpdated := f.SortBy == "updated_at"
	var matches []int32 // only kept when the page cannot be cut in one pass
	if byUpdated {
		matches = make([]int32, 0, 1024)
	}
	page := make([]string, 0, f.Limit)
	for i := range x.order {
		s := x.order[len(x.order)-1-i] // newest first
		if f.Asc {
			s = x.order[i]
		}
		if !q.match(x, s) {
			continue
		}
		isRead := q.read(x, s)
		if q.unread && isRead {
			continue
		}
		if !isRead {
			unread++
		}
		if byUpdated {
			matches = append(matches, s)
		} else if total >= f.Offset && len(page) < f.Limit {
			page = append(page, x.slots[s].id)
		}
		total++
	}
	if byUpdated {
		key := func(s int32) int64 {
			if u := x.slots[s].updated; u != 0 {
				return u
			}
			return x.slots[s].created
		}
		sort.SliceStable(matches, func(i, j int) bool {
			ki, kj := key(matches[i]), key(matches[j])
			if f.Asc {
				return ki < kj
			}
			return ki > kj
		})
		for i := f.Offset; i < len(matches) && len(page) < f.Limit; i++ {
			page = append(page, x.slots[matches[i]].id)
		}
	}
	return page, total, unread, nil
}
