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
	slow     chan struct{} // closed when Build starts reading the projection
	slowOnce sync.Once
	err      error // why the build failed, if it did

	slots   []imsg           // by slot: append order
	order   []int32          // slots sorted by (created, message_id)
	byID    map[string]int32 // message_id → slot
	strs    map[string]uint32
	reads   map[uint32][]uint64 // reader → bitset over slots
	pending []*eventlog.Event   // committed while building
	early   map[string][]string // reads of messages not indexed yet (synced out of order)
	closed  bool
	bulk    bool // building: add appends to order, sorted once at the end
}

// Close makes later listings fail with ErrClosed.
func (x *Index) Close() {
	x.mu.Lock()
	x.closed = true
	x.slots, x.order, x.byID, x.reads = nil, nil, nil, nil
	x.mu.Unlock()
}

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
	return &Index{ready: make(chan struct{}), slow: make(chan struct{}), byID: map[string]int32{}, strs: map[string]uint32{"": 0}, reads: map[uint32][]uint64{}}
}

// intern returns s's ID, adding it. Called with mu held for writing.
func (x *Index) intern(s string) uint32 {
	if id, ok := x.strs[s]; ok {
		return id
	}
	id := uint32(len(x.strs))
	x.strs[s] = id
	return id
}

// lookup returns s's ID without adding it (ok false: nothing has it).
func (x *Index) lookup(s string) (uint32, bool) {
	id, ok := x.strs[s]
	return id, ok
}

func pairKey(kind, typ, value string) string { return kind + "\x00" + typ + "\x00" + value }

// Load fills the index from the snapshot at path (see Save) if it was
// saved with fingerprint, the projection's fingerprint now, then applies
// what was committed meanwhile. Listings wait for it (it takes a tenth of
// Build's time). It fails, leaving the index as it was, when there is no
// such snapshot: the caller then runs Build.
func (x *Index) Load(path string, fingerprint []byte) error {
	b := New()
	if err := b.load(path, fingerprint); err != nil {
		return err
	}
	x.install(b, nil)
	return nil
}

// Build fills the index from the projection, then applies what was
// committed meanwhile. It is meant to run in its own goroutine, and holds
// the lock only to install the result, so writers never wait for it.
// Listings meanwhile get ErrBuilding. Cancelling ctx abandons it;
// listings then fail.
func (x *Index) Build(ctx context.Context, st *store.Store) {
	x.slowOnce.Do(func() { close(x.slow) })
	b := New()
	b.bulk = true
	err := st.IndexSnapshot(ctx, func(r store.IndexRow) {
		b.add(r.MessageID, r.AgentID, r.ThreadID, r.CreatedAt.UnixNano(), r.Deleted)
		m := &b.slots[b.byID[r.MessageID]]
		if !r.UpdatedAt.IsZero() {
			m.updated = r.UpdatedAt.UnixNano()
		}
		m.proxied = r.ActingAs != ""
	}, func(id, kind, typ, value string) {
		if b.bulk { // the messages are all in: put them in order once
			sort.Slice(b.order, func(i, j int) bool { return b.less(b.order[i], b.order[j]) })
			b.bulk = false
		}
		if s, ok := b.byID[id]; ok {
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
	}()
	if err != nil {
		x.err = err
		return
	}
	x.slots, x.order, x.byID, x.strs, x.reads, x.early = b.slots, b.order, b.byID, b.strs, b.reads, b.early
	for _, e := range x.pending { // idempotent: some may be in the snapshot too
		x.applyLocked(e)
	}
	x.pending = nil
}

// add inserts a message if new, keeping order sorted by created time.
func (x *Index) add(id, author, thread string, created int64, deleted bool) int32 {
	if s, ok := x.byID[id]; ok {
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
	s, ok := x.byID[id]
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
	select {
	case <-x.ready:
	default:
		for _, e := range batch {
			if isMessageEvent(e.Type) {
				x.pending = append(x.pending, e)
			}
		}
		return
	}
	for _, e := range batch {
		x.applyLocked(e)
	}
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
		if _, ok := x.byID[p.MessageID]; ok {
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
			if s, ok := x.byID[p.MessageID]; ok && x.slots[s].updated < e.Time.UnixNano() {
				x.slots[s].updated = e.Time.UnixNano()
			}
		}
	case eventlog.TypeMessageDelete:
		p, err := eventlog.PayloadAs[eventlog.MessageDelete](e)
		if err == nil {
			if s, ok := x.byID[p.MessageID]; ok {
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
