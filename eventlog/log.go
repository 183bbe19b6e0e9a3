// Package eventlog is thrum's source of truth: an append-only log of
// immutable events, stored as JSON lines in shards under one directory:
//
//	events.jsonl               agent and session lifecycle, threads, groups
//	messages/<agent>.jsonl     the message events of one agent
//	local.jsonl                what stays on this machine (credentials)
//
// Each shard is a sequence of segment files (see SegmentPath): the files
// above, then events/000001.jsonl, messages/<agent>/000001.jsonl, … once
// the last one holds Options.SegmentBytes. Only a shard's last segment is
// appended to.
//
// Append is durable: it returns after the lines are written and fsynced.
// Concurrent appends share one write and one fsync per shard (group
// commit). Scan replays the shards merged in event-ID order, which is the
// order Append committed them in, since IDs are assigned at commit.
package eventlog

import (
	"bufio"
	"bytes"
	"container/heap"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/thrumhq/thrum/internal/fault"
	"github.com/thrumhq/thrum/internal/private"
)

// File names inside a log directory.
const (
	EventsFile  = "events.jsonl"
	MessagesDir = "messages"
	LocalFile   = "local.jsonl"
)

// LocalShard names the local shard (LocalFile): the events that belong
// to this machine alone, such as the credentials it issued. Sync never
// commits it and never imports into it. No agent's shard can have this
// name.
const LocalShard = "@local"

// DefaultMaxBatch is the default of Options.MaxBatch.
const DefaultMaxBatch = 512

// Options configure a Log. A nil *Options means all defaults.
type Options struct {
	// Logger receives repairs and write failures. Nil means silent.
	Logger *slog.Logger

	// MaxBatch caps how many Append calls one group commit takes.
	// Default DefaultMaxBatch.
	MaxBatch int

	// OnCommit, if set, is called with each batch of events after they are
	// durable and before their Append calls return, in commit order, one
	// batch at a time, from the log's apply goroutine (which overlaps with
	// the fsync of the next batch; batches that became durable meanwhile
	// are merged into one call). A projection applies
	// the batch here, so that it sees events in exactly log order. Its error
	// is returned by every Append of the batch (the events stay in the
	// log: they are durable). The slice is reused after the call returns:
	// copy it to keep it.
	OnCommit func(batch []*Event) error

	// Stage, if set, is used instead of OnCommit, so that a projection
	// does a batch's work while the batch is being fsynced instead of
	// after: the log calls it, from the same goroutine and in the same
	// order as OnCommit, with each batch as soon as its lines are written.
	// Stage does the batch's work, then calls durable exactly once, which
	// waits for the fsync and returns the batch's fate: nil once it is
	// durable (the projection makes its work visible now, and Stage's
	// error is returned by every Append of the batch, as OnCommit's is),
	// or the error that undid it (the projection discards its work: no
	// event of the batch is in the log; Stage's error is ignored). If
	// batches merged into one call do not all become durable, the call's
	// durable reports the error and the durable ones are staged again,
	// with a durable that returns nil. The slice is reused after Stage
	// returns.
	Stage func(batch []*Event, durable func() error) error

	// NoSync skips fsync. Only for tests and benchmarks that measure
	// something else; a log opened so is not durable.
	NoSync bool

	// TeamKeys, if set, are the team keys that seal the bodies of the
	// events Append writes (TeamKeys.Sealing) and open sealed fields
	// wherever the log decodes a payload (seal.go). Nil writes bodies in
	// clear and opens none.
	TeamKeys TeamKeys

	// SegmentBytes is the size at which a shard's last segment is closed
	// for good and its next batch starts a new one. Default
	// DefaultSegmentBytes.
	SegmentBytes int64
}

// Repair describes a torn tail that Open moved aside.
type Repair struct {
	File      string // segment path relative to the log directory
	Offset    int64  // where the file was truncated
	Bytes     int    // how many bytes were moved
	MovedTo   string // the .corrupt file that received them
	Malformed bool   // the tail was a complete line that did not parse (else: no newline)
}

// String says what was moved where, for a log line or a health report.
func (r Repair) String() string {
	what := "an unterminated final line"
	if r.Malformed {
		what = "a final line that does not parse"
	}
	return fmt.Sprintf("%s: moved %s (%d bytes at offset %d) to %s", r.File, what, r.Bytes, r.Offset, r.MovedTo)
}

// ErrClosed is returned by Append after Close.
var ErrClosed = errors.New("eventlog: log closed")

// ErrBroken is returned by Append after a failed write could not be undone
// (the shard could not be truncated back): the log refuses appends until it
// is reopened.
var ErrBroken = errors.New("eventlog: log needs reopening")

// Log is an open event log. Append, Scan, Positions and Close may be
// called concurrently.
type Log struct {
	dir     string
	opts    Options
	repairs []Repair

	reqs    chan *appendReq
	applied chan *commitBatch // durable batches waiting for OnCommit, in order
	quit    chan struct{}
	done    chan struct{} // closed when both loops have stopped
	closed  sync.Once

	// commitHook, if set (by tests), sees the number of Append calls each
	// group commit takes: OnCommit may merge several commits into one call.
	commitHook func(appends int)

	// Lock order: idMu, then mu.
	mu     sync.Mutex           // guards files, segs and broken (used by the committer and Positions)
	files  map[string]*os.File  // open segment files, by segment path
	segs   map[string][]segment // each shard's segments by ShardPath; the last one's size is the durable end
	broken error                // a failed write could not be undone; see rollback
	idMu   sync.Mutex           // guards held
	held   map[string]*heldIDs  // the event IDs of the shards imports asked about, by ShardPath (held.go)
}

type appendReq struct {
	evs    []*Event
	dedupe bool // an import: the committer drops the events their shard holds
	done   chan error
}

// Open opens (creating if needed) the log in dir, repairs torn tails of its
// shards (see Repairs) and starts its committer.
func Open(dir string, opts *Options) (*Log, error) {
	l := &Log{dir: dir, files: map[string]*os.File{}, held: map[string]*heldIDs{}}
	if opts != nil {
		l.opts = *opts
	}
	if l.opts.MaxBatch <= 0 {
		l.opts.MaxBatch = DefaultMaxBatch
	}
	if l.opts.SegmentBytes <= 0 {
		l.opts.SegmentBytes = DefaultSegmentBytes
	}
	// The log is its owner's alone: directories 0700, files 0600.
	if err := private.Dir(dir); err != nil {
		return nil, fmt.Errorf("eventlog: %w", err)
	}
	if err := realDir(filepath.Join(dir, MessagesDir)); err != nil {
		return nil, err
	}
	if err := private.Dir(filepath.Join(dir, MessagesDir)); err != nil {
		return nil, fmt.Errorf("eventlog: %w", err)
	}
	segs, order, err := layout(dir)
	if err != nil {
		return nil, err
	}
	for _, key := range order {
		// Only the last segment can end in a torn write: a roll starts
		// the next one only after the previous batch was durable.
		last := &segs[key][len(segs[key])-1]
		r, size, err := repairTail(dir, last.rel)
		if err != nil {
			return nil, fmt.Errorf("eventlog: repair %s: %w", last.rel, err)
		}
		if r != nil {
			l.repairs = append(l.repairs, *r)
			if l.opts.Logger != nil {
				l.opts.Logger.Warn("eventlog: repaired torn tail", "repair", r.String())
			}
		}
		last.size = size
	}
	l.segs = segs
	l.reqs = make(chan *appendReq, l.opts.MaxBatch)
	l.applied = make(chan *commitBatch, 1)
	l.quit = make(chan struct{})
	l.done = make(chan struct{})
	go l.commitLoop()
	return l, nil
}

// Dir returns the log's directory.
func (l *Log) Dir() string { return l.dir }

// TeamKeys returns the team keys the log seals and opens with
// (Options.TeamKeys), or nil.
func (l *Log) TeamKeys() TeamKeys { return l.opts.TeamKeys }

// Repairs returns the torn tails that Open moved aside.
func (l *Log) Repairs() []Repair { return append([]Repair(nil), l.repairs...) }

// ShardPath returns the path of a shard file relative to the log
// directory: EventsFile for "", LocalFile for LocalShard, else
// messages/<shard>.jsonl.
func ShardPath(shard string) string {
	switch shard {
	case "":
		return EventsFile
	case LocalShard:
		return LocalFile
	}
	return MessagesDir + "/" + shard + ".jsonl"
}

// validShard reports whether a shard name is safe as a file name.
func validShard(s string) bool {
	if s == "" || len(s) > 128 || s == "." || s == ".." {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// shards lists the shards present (their ShardPath), sorted.
func (l *Log) shards() ([]string, error) {
	_, order, err := layout(l.dir)
	return order, err
}

// Segments returns the paths, relative to the log directory, of a shard's
// segment files as they are on disk, in order.
func (l *Log) Segments(shard string) ([]string, error) {
	segs, _, err := layout(l.dir)
	if err != nil {
		return nil, err
	}
	out := []string{}
	for _, s := range segs[ShardPath(shard)] {
		out = append(out, s.rel)
	}
	return out, nil
}

// Import appends lines that another log wrote (a peer's events, merged
// by sync): each is validated, keeps its own ID, time and bytes, and goes
// through the same durable commit and OnCommit as Append. shard names the
// shard each line belongs to; a line that does not belong there (see
// CheckShard) fails the whole call, and nothing enters the local shard.
// A line whose event ID the shard already holds, or that an earlier line
// of the same commit brings, is dropped by the committer, so imports
// racing through any number of transports leave each event once. It
// returns the events it appended. Admission (package admit) decides
// which lines to import; Import holds the log to its own rules.
func (l *Log) Import(ctx context.Context, shard string, lines [][]byte) ([]*Event, error) {
	if shard == LocalShard {
		return nil, fmt.Errorf("eventlog: import: %w", errLocalShard)
	}
	evs := make([]*Event, 0, len(lines))
	for i, line := range lines {
		if bytes.IndexByte(line, '\n') >= 0 {
			return nil, fmt.Errorf("eventlog: import: line %d contains a newline", i+1)
		}
		e, err := DecodeLine(line)
		if err != nil {
			return nil, fmt.Errorf("eventlog: import: line %d: %w", i+1, err)
		}
		if len(line) > MaxLineBytes {
			return nil, fmt.Errorf("%w: imported line %d", ErrTooLarge, i+1)
		}
		if err := CheckShard(shard, e); err != nil {
			return nil, fmt.Errorf("eventlog: import: line %d: %w", i+1, err)
		}
		e.Shard, e.imported = shard, true
		evs = append(evs, e)
	}
	if len(evs) == 0 {
		return nil, nil
	}
	req := &appendReq{evs: evs, dedupe: true, done: make(chan error, 1)}
	if err := l.submit(ctx, req); err != nil {
		return nil, err
	}
	return req.evs, nil
}

// Append writes the events durably, assigning each its ID and Time if
// unset and its Offset, and returns when they are fsynced (and, if
// Options.OnCommit is set, applied). The events of one call are committed
// together and in order. ctx is honoured only until the events are queued:
// after that Append waits for the outcome, so that a nil error always means
// durable and a non-nil one almost always means not written.
func (l *Log) Append(ctx context.Context, evs ...*Event) error {
	if len(evs) == 0 {
		return nil
	}
	for _, e := range evs {
		if e.Type == "" {
			return errors.New("eventlog: append: event has no type")
		}
		if e.Shard != "" && e.Shard != LocalShard && !validShard(e.Shard) {
			return fmt.Errorf("eventlog: append: invalid shard name %q", e.Shard)
		}
	}
	return l.submit(ctx, &appendReq{evs: evs, done: make(chan error, 1)})
}

// submit queues a request for the committer and waits for its outcome.
func (l *Log) submit(ctx context.Context, req *appendReq) error {
	select {
	case <-l.quit:
		return ErrClosed
	default:
	}
	select {
	case l.reqs <- req:
	case <-l.quit:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	// A request queued as Close began may never be taken: once both loops
	// have stopped, it failed unless it got its answer.
	select {
	case err := <-req.done:
		return err
	case <-l.done:
		select {
		case err := <-req.done:
			return err
		default:
			return ErrClosed
		}
	}
}

// commitLoop writes and fsyncs batches; applyLoop runs OnCommit on them
// and replies. The two overlap: while one batch is applied, the next is
// being made durable, so throughput is bounded by the slower stage, not
// by their sum. Order is kept: applyLoop takes batches in commit order.
func (l *Log) commitLoop() {
	applyDone := make(chan struct{})
	go l.applyLoop(applyDone)
	defer func() {
		close(l.applied)
		<-applyDone
		close(l.done)
	}()
	for {
		var first *appendReq
		select {
		case first = <-l.reqs:
		case <-l.quit:
			l.drain()
			return
		}
		batch := make([]*appendReq, 1, l.opts.MaxBatch)
		batch[0] = first
	fill:
		for len(batch) < l.opts.MaxBatch {
			select {
			case r := <-l.reqs:
				batch = append(batch, r)
			default:
				break fill
			}
		}
		l.commit(batch)
	}
}

// commitBatch is a batch on its way to OnCommit (once durable) or Stage
// (once written: durable then receives the fsync's outcome).
type commitBatch struct {
	reqs    []*appendReq
	errs    []error  // per request; nil where the request is durable
	evs     []*Event // the batch's events, in order
	durable chan error
}

// applyLoop hands durable batches to OnCommit. When OnCommit is the
// slower stage, the batches that became durable meanwhile are merged into
// one call, so the projection, too, pays its per-commit cost once per
// group.
func (l *Log) applyLoop(done chan struct{}) {
	defer close(done)
	var group []*commitBatch
	var evs []*Event
	for b := range l.applied {
		group, evs = append(group[:0], b), append(evs[:0], b.evs...)
	more:
		for len(evs) < 8*l.opts.MaxBatch {
			select {
			case nb, ok := <-l.applied:
				if !ok {
					break more
				}
				group, evs = append(group, nb), append(evs, nb.evs...)
			default:
				break more
			}
		}
		if l.opts.Stage != nil || l.opts.OnCommit != nil {
			for _, e := range evs {
				e.decodePayload(l.opts.TeamKeys) // once, for every projection
			}
		}
		var cerr error
		switch {
		case l.opts.Stage != nil:
			cerr = l.stage(group, evs)
		case l.opts.OnCommit != nil && len(evs) > 0:
			cerr = l.opts.OnCommit(evs)
		}
		for _, b := range group {
			for i, r := range b.reqs {
				if b.errs[i] == nil {
					b.errs[i] = cerr
				}
				r.done <- b.errs[i]
			}
		}
		// The slices are used again: what they held must not outlive
		// the group (an import's events, and the lines they point into).
		clear(group)
		clear(evs)
	}
}

// drain fails the requests still queued at Close.
func (l *Log) drain() {
	for {
		select {
		case r := <-l.reqs:
			r.done <- ErrClosed
		default:
			return
		}
	}
}

// commit writes one batch: encode every event, sign those that ask
// (Event.Sign: all the batch's at once, on every CPU), append each
// shard's lines in one write, fsync each touched shard, then pass it to
// applyLoop. An event that fails to encode or sign fails only its own
// request.
func (l *Log) commit(batch []*appendReq) {
	if l.commitHook != nil {
		l.commitHook(len(batch))
	}
	bufs := map[string]*shardBuf{}
	var order []*shardBuf
	errs := make([]error, len(batch))
	var all []*Event
	var imported map[string]map[idKey]struct{} // the IDs this commit imports, by shard path
	var toSign []signing                       // the events to sign, once all are encoded
	assigned := make([][]*Event, len(batch))   // the events each request got their IDs from here
	var sealing *TeamKey                       // the key this batch's bodies are sealed with, if any
	if l.opts.TeamKeys != nil {
		sealing = l.opts.TeamKeys.Sealing()
	}
	for i, r := range batch {
		if r.dedupe {
			if imported == nil {
				imported = map[string]map[idKey]struct{}{}
			}
			var err error
			l.idMu.Lock()
			r.evs, err = l.dropHeld(r.evs, imported)
			l.idMu.Unlock()
			if err != nil {
				errs[i] = err
				continue
			}
		}
		// Encode each request's events into scratch first, so a failure
		// leaves no partial request behind.
		staged := map[string]int{}
		var err error
		signs := len(toSign)
		for _, e := range r.evs {
			id, t := ids.next(time.Now())
			if e.ID == "" && e.Time.IsZero() {
				e.ID, e.Time = id.String(), t
				assigned[i] = append(assigned[i], e)
			} else if e.ID == "" {
				e.ID = id.String()
			} else if e.Time.IsZero() {
				e.Time = t
			}
			rel := ShardPath(e.Shard)
			sb := bufs[rel]
			if sb == nil {
				sb = &shardBuf{rel: rel, shard: e.Shard, seg: -1}
				bufs[rel] = sb
				order = append(order, sb)
			}
			if _, ok := staged[rel]; !ok {
				staged[rel] = sb.buf.Len()
			}
			if e.imported {
				if sb.buf.Len() == 0 {
					sb.buf.Grow(importedSize(r.evs))
				}
				sb.buf.Write(e.Raw) // a line from another log: kept byte for byte
				sb.buf.WriteByte('\n')
				continue
			}
			payload := e.Payload
			if sealing != nil && e.Shard != LocalShard && Sealable(e.Type) {
				payload = sealPayload(e, sealing) // before it is signed
			}
			start := sb.buf.Len()
			if err = e.encode(&sb.buf, payload); err != nil {
				break
			}
			e.Raw = append([]byte(nil), sb.buf.Bytes()[start:sb.buf.Len()-1]...)
			e.decoded = nil // decoded again from this line (decodePayload)
			if e.Sign != nil {
				toSign = append(toSign, signing{e: e, req: i})
			}
		}
		if err != nil {
			for rel, n := range staged {
				bufs[rel].buf.Truncate(n)
			}
			for _, e := range assigned[i] { // a retry gets fresh, in-order IDs
				e.ID, e.Time, e.Raw = "", time.Time{}, nil
			}
			toSign = toSign[:signs]
			errs[i] = err
			continue
		}
		for _, e := range r.evs {
			sb := bufs[ShardPath(e.Shard)]
			sb.evs = append(sb.evs, e)
		}
		all = append(all, r.evs...)
	}
	if len(toSign) > 0 {
		all = l.sign(batch, toSign, errs, assigned, order, all)
	}

	// Write every shard's lines, then fsync them all. A failure at any
	// step undoes the whole batch: every shard it touched is truncated
	// back to its size before the batch, so no line of a failed batch
	// stays behind to be replayed later as if it had been acknowledged.
	var werr error
	var written []*os.File
	l.mu.Lock()
	werr = l.broken
	for _, sb := range order {
		if werr != nil {
			break
		}
		if sb.buf.Len() == 0 {
			continue
		}
		var f *os.File
		if f, werr = l.writeShard(sb, sb.buf.Bytes(), sb.evs); werr == nil {
			written = append(written, f)
		}
	}
	l.mu.Unlock()
	// With Stage, the batch goes to the apply goroutine now, so that the
	// projection works while the fsync runs, unless that goroutine is
	// still busy with earlier ones: then after the fsync, as with
	// OnCommit. The fsync then runs in a goroutine started before the
	// hand-off, while this one waits: a goroutine woken just before a
	// blocking system call waits until the runtime notices that the call
	// blocks (measured: 56 µs from hand-off to Stage with one client),
	// whereas now the apply goroutine gets this processor at once.
	cb := &commitBatch{reqs: batch, errs: errs, evs: all, durable: make(chan error, 1)}
	sent := false
	if werr == nil && l.opts.Stage != nil {
		synced := make(chan error, 1)
		go func() { synced <- l.syncShards(written) }()
		select {
		case l.applied <- cb:
			sent = true
		default:
		}
		werr = <-synced
	} else if werr == nil {
		werr = l.syncShards(written)
	}
	l.mu.Lock()
	if werr != nil {
		l.rollback(order)
	} else {
		for _, sb := range order {
			if sb.seg >= 0 {
				l.segs[sb.rel][sb.seg].size = sb.end
			}
		}
	}
	l.mu.Unlock()
	if werr != nil && l.opts.Logger != nil {
		l.opts.Logger.Error("eventlog: commit failed; the batch was undone", "err", werr)
	}
	if sent {
		cb.durable <- werr
		return
	}
	if werr != nil {
		for i, r := range batch {
			if errs[i] == nil {
				errs[i] = fmt.Errorf("eventlog: append: %w", werr)
			}
			r.done <- errs[i]
		}
		return
	}
	cb.durable <- nil
	l.applied <- cb
}

// stage runs Stage on a group of written batches while the committer
// fsyncs them; Stage's durable waits for their outcome. A batch that
// failed gets its error in errs; the durable rest, if the group did not
// all make it, is staged again with nothing to wait for, so a projection
// never keeps work of a batch that is not in the log.
func (l *Log) stage(group []*commitBatch, evs []*Event) error {
	waited, failed := false, error(nil)
	durable := func() error {
		if waited {
			return failed
		}
		waited = true
		for _, b := range group {
			if werr := <-b.durable; werr != nil {
				failed = werr
				for i := range b.reqs {
					if b.errs[i] == nil {
						b.errs[i] = fmt.Errorf("eventlog: append: %w", werr)
					}
				}
				b.evs = nil
			}
		}
		return failed
	}
	var err error
	if len(evs) > 0 {
		err = l.opts.Stage(evs, durable)
	}
	if durable() == nil { // durable waits once: here, if Stage did not call it
		return err
	}
	evs = evs[:0]
	for _, b := range group {
		evs = append(evs, b.evs...)
	}
	if len(evs) == 0 {
		return nil
	}
	return l.opts.Stage(evs, func() error { return nil })
}

// rollback truncates each segment a failed batch wrote to back to its
// durable size, and syncs the truncation. If that fails too, the log no
// longer knows what its files hold: it refuses every later append
// (l.broken) until it is reopened, when Open repairs what it can and Scan
// reports the rest. A segment the batch created stays, empty. Called
// with l.mu held.
func (l *Log) rollback(order []*shardBuf) {
	for _, sb := range order {
		if sb.seg < 0 {
			continue
		}
		seg := l.segs[sb.rel][sb.seg]
		rel, size := seg.rel, seg.size
		f := l.files[rel]
		if f == nil {
			continue
		}
		err := f.Truncate(size)
		if err == nil && !l.opts.NoSync {
			err = f.Sync()
		}
		if err != nil && l.broken == nil {
			l.broken = fmt.Errorf("%w: undoing a failed write to %s: %v", ErrBroken, rel, err)
			if l.opts.Logger != nil {
				l.opts.Logger.Error("eventlog: could not undo a failed write; refusing appends until reopened", "err", l.broken)
			}
		}
	}
}

// writeShard appends b to the shard's last segment, first starting a new
// segment if the last one is full (see roll), and records in sb which
// segment it wrote and its new size, which the caller makes the durable
// end once the batch is durable. On a short write it truncates the file
// back, so the next append starts on a clean line. Called with l.mu held.
func (l *Log) writeShard(sb *shardBuf, b []byte, evs []*Event) (*os.File, error) {
	sb.seg = -1
	segs := l.segs[sb.rel]
	if len(segs) == 0 || segs[len(segs)-1].size >= l.opts.SegmentBytes {
		var err error
		if segs, err = l.roll(sb.shard, segs); err != nil {
			return nil, err
		}
	}
	i := len(segs) - 1
	seg := segs[i]
	f, path := l.files[seg.rel], filepath.Join(l.dir, filepath.FromSlash(seg.rel))
	if f == nil {
		var err error
		if f, err = private.OpenFile(path, os.O_WRONLY|os.O_APPEND); err != nil {
			return nil, err
		}
		l.files[seg.rel] = f
	}
	sb.seg = i
	size := seg.size
	var err error
	if ferr := fault.Check(fault.LogWrite, path); ferr != nil {
		f.Write(b[:len(b)/2]) // what a full disk does: a short write
		err = ferr
	} else {
		_, err = f.Write(b)
	}
	if err != nil {
		if terr := f.Truncate(size); terr != nil {
			return nil, fmt.Errorf("%w (and truncating back failed: %v)", err, terr)
		}
		return nil, err
	}
	// Record each event's end offset in the shard: the lines are in evs
	// order.
	off := size
	for _, e := range evs {
		n := bytes.IndexByte(b[off-size:], '\n')
		off += int64(n) + 1
		e.Offset = seg.base + off
	}
	sb.end = size + int64(len(b))
	return f, nil
}

// roll creates the shard's next segment file (the first one, ShardPath,
// for a new shard), durably: its directory and its entry are fsynced
// before any line is written to it, so a crash after a roll leaves an
// empty last segment, which Open takes as it is, or a torn one, which it
// repairs like any other. The previous segment's file is closed: it is
// never written again. Called with l.mu held.
func (l *Log) roll(shard string, segs []segment) ([]segment, error) {
	next := segment{}
	if k := len(segs); k > 0 {
		next = segment{n: segs[k-1].n + 1, base: segs[k-1].end()}
	}
	next.rel = SegmentPath(shard, next.n)
	path := filepath.Join(l.dir, filepath.FromSlash(next.rel))
	dir := filepath.Dir(path)
	if err := realDir(dir); err != nil {
		return nil, err
	}
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		if err := os.Mkdir(dir, private.DirMode); err != nil {
			return nil, err
		}
		if !l.opts.NoSync {
			if err := syncDir(filepath.Dir(dir)); err != nil {
				return nil, err
			}
		}
	}
	f, err := private.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND)
	if err != nil {
		return nil, err
	}
	if !l.opts.NoSync {
		if err := syncDir(dir); err != nil {
			f.Close()
			return nil, err
		}
	}
	if k := len(segs); k > 0 {
		if old := l.files[segs[k-1].rel]; old != nil {
			old.Close()
			delete(l.files, segs[k-1].rel)
		}
	}
	l.files[next.rel] = f
	segs = append(segs, next)
	l.segs[ShardPath(shard)] = segs
	return segs, nil
}

// shardBuf collects one shard's lines of a batch, and where they went.
type shardBuf struct {
	rel   string // ShardPath
	shard string
	buf   bytes.Buffer
	evs   []*Event
	seg   int   // index of the segment written, -1 if none
	end   int64 // its size after the write
}

// importedSize is the bytes the imported lines of evs take in a shard
// file, newlines included: what a commit of one import writes.
func importedSize(evs []*Event) int {
	n := 0
	for _, e := range evs {
		if e.imported {
			n += len(e.Raw) + 1
		}
	}
	return n
}

// syncShards fsyncs the files of a batch, in parallel when there are
// several.
func (l *Log) syncShards(files []*os.File) error {
	sync := func(f *os.File) error {
		if err := fault.Check(fault.LogSync, f.Name()); err != nil {
			return err
		}
		if l.opts.NoSync {
			return nil
		}
		return f.Sync()
	}
	if len(files) == 1 {
		return sync(files[0])
	}
	errc := make(chan error, len(files))
	for _, f := range files {
		go func() { errc <- sync(f) }()
	}
	var first error
	for range files {
		if err := <-errc; err != nil && first == nil {
			first = err
		}
	}
	return first
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// probeFile is the file Probe writes, in the log's directory.
const probeFile = ".write-probe"

// Probe reports whether the log's directory takes writes now, as a
// caller waits for after a failed Append (a full disk, until space is
// freed): it writes a small file there, fsyncs and removes it. It writes
// no event, and says nothing of ErrBroken, which only reopening clears.
func (l *Log) Probe() error {
	path := filepath.Join(l.dir, probeFile)
	if err := fault.Check(fault.LogWrite, path); err != nil {
		return err
	}
	f, err := private.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC)
	if err != nil {
		return err
	}
	defer os.Remove(path)
	_, err = f.Write(make([]byte, 4096))
	if err == nil {
		err = f.Sync()
	}
	return errors.Join(err, f.Close())
}

// Positions returns the current end offset of every shard: where a reader
// that has seen everything would resume.
func (l *Log) Positions() map[string]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]int64, len(l.segs))
	for k, segs := range l.segs {
		out[k] = segs[len(segs)-1].end()
	}
	return out
}

// Files returns every segment file of the log with its durable length
// (the bytes of acknowledged appends; the file may hold more while a
// batch is being written), by path relative to the log directory.
func (l *Log) Files() map[string]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]int64{}
	for _, segs := range l.segs {
		for _, s := range segs {
			out[s.rel] = s.size
		}
	}
	return out
}

// Close stops the committer (failing appends still queued with ErrClosed)
// and closes the shard files. It is idempotent.
func (l *Log) Close() error {
	var err error
	l.closed.Do(func() {
		close(l.quit)
		<-l.done
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, f := range l.files {
			if cerr := f.Close(); cerr != nil && err == nil {
				err = cerr
			}
		}
		l.files = nil
	})
	return err
}

// ---- scanning ----

// CorruptError reports a line in the middle of a shard that does not
// parse. Open never repairs these: a human must look.
type CorruptError struct {
	File string // shard path relative to the log directory
	Line int    // 1-based line number in the file
	Err  error
}

// Error names the file, the line and what is wrong with it.
func (e *CorruptError) Error() string {
	return fmt.Sprintf("eventlog: %s:%d: corrupt event: %v", e.File, e.Line, e.Err)
}

// Unwrap returns why the line does not parse.
func (e *CorruptError) Unwrap() error { return e.Err }

// Scan calls fn for every event past the given positions (shard path →
// byte offset; nil means from the start), merging the shards in event-ID
// order. Events it passes carry Raw, Shard and Offset, with the payload
// decoded once for PayloadAs. It returns the
// positions after the last event passed to fn. fn must not retain Raw
// beyond the call. Memory use is bounded by one line per shard.
func (l *Log) Scan(ctx context.Context, from map[string]int64, fn func(*Event) error) (map[string]int64, error) {
	ends := l.Positions()
	segs, shards, err := layout(l.dir)
	if err != nil {
		return nil, err
	}
	pos := make(map[string]int64, len(shards))
	h := &readerHeap{}
	defer func() {
		for _, r := range *h {
			r.close()
		}
	}()
	for _, rel := range shards {
		start := from[rel]
		pos[rel] = start
		end, known := ends[rel]
		if known && start >= end {
			continue
		}
		r := &shardReader{dir: l.dir, rel: rel, shard: shardName(rel), segs: segs[rel], off: start, limit: end, limited: known}
		if err := r.seek(start); err != nil {
			return nil, err
		}
		if err := r.next(); err != nil {
			r.close()
			return nil, err
		}
		if r.ev == nil {
			r.close()
			continue
		}
		heap.Push(h, r)
	}
	n := 0
	for h.Len() > 0 {
		if n++; n%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return pos, err
			}
		}
		r := (*h)[0]
		ev := r.ev
		ev.decodePayload(l.opts.TeamKeys)
		if err := fn(ev); err != nil {
			return pos, err
		}
		pos[r.rel] = ev.Offset
		if err := r.next(); err != nil {
			return pos, err
		}
		if r.ev == nil {
			heap.Pop(h)
			r.close()
		} else {
			heap.Fix(h, 0)
		}
	}
	return pos, nil
}

// shardReader reads a shard's segments in order, as one stream.
type shardReader struct {
	dir     string // the log's
	rel     string // ShardPath
	shard   string
	segs    []segment
	seg     int // index of the segment open in f
	f       *os.File
	br      *bufio.Reader
	off     int64 // shard offset of the next line
	limit   int64
	limited bool
	line    int // lines read in the open segment
	ev      *Event
}

// seek opens the segment that holds shard offset off and positions the
// reader there. An offset at a segment's end starts the next one; past
// the last segment's end, the reader reads on from its end (to find what
// was appended meanwhile, or nothing).
func (r *shardReader) seek(off int64) error {
	if len(r.segs) == 0 {
		return nil
	}
	i := len(r.segs) - 1
	for j, s := range r.segs {
		if off < s.end() {
			i = j
			break
		}
	}
	return r.open(i, off-r.segs[i].base)
}

// open opens segment i at local offset at.
func (r *shardReader) open(i int, at int64) error {
	r.close()
	f, err := openLogFile(filepath.Join(r.dir, filepath.FromSlash(r.segs[i].rel)))
	if err != nil {
		return fmt.Errorf("eventlog: %w", err)
	}
	if _, err := f.Seek(at, io.SeekStart); err != nil {
		f.Close()
		return fmt.Errorf("eventlog: %w", err)
	}
	if r.br == nil {
		// A reader of a shard's tail (a publisher after each commit)
		// reads a few lines: its buffer is as small as what is there.
		size := int64(256 << 10)
		if r.limited {
			size = min(size, max(r.limit-r.segs[i].base-at, 4096))
		}
		r.br = bufio.NewReaderSize(f, int(size))
	} else {
		r.br.Reset(f)
	}
	r.f, r.seg, r.line = f, i, 0
	return nil
}

func (r *shardReader) close() {
	if r.f != nil {
		r.f.Close()
		r.f = nil
	}
}

// next reads the following event into r.ev (nil at the end). A
// CorruptError names the segment and the line counted from its start.
func (r *shardReader) next() error {
	err := r.read()
	var ce *CorruptError
	if errors.As(err, &ce) {
		ce.File, ce.Line = r.segs[r.seg].rel, r.lineNumber()
	}
	return err
}

// lineNumber returns the number of the line starting at r.off, counting
// from its segment's start. It runs only when reporting corruption.
func (r *shardReader) lineNumber() int {
	n, err := countLines(r.f, r.off-r.segs[r.seg].base)
	if err != nil {
		return r.line
	}
	return n + 1
}

func countLines(f *os.File, end int64) (int, error) {
	buf := make([]byte, 256<<10)
	n := 0
	for off := int64(0); off < end; {
		k := int64(len(buf))
		if end-off < k {
			k = end - off
		}
		m, err := f.ReadAt(buf[:k], off)
		n += bytes.Count(buf[:m], []byte{'\n'})
		off += int64(m)
		if err != nil && !(errors.Is(err, io.EOF) && off >= end) {
			return n, err
		}
		if m == 0 {
			break
		}
	}
	return n, nil
}

func (r *shardReader) read() error {
	r.ev = nil
	if r.limited && r.off >= r.limit || r.f == nil {
		return nil
	}
	line, err := readLine(r.br)
	for err == io.EOF && len(line) == 0 {
		if r.seg+1 >= len(r.segs) {
			return nil
		}
		// The segment ended: go on with the next one.
		if err := r.open(r.seg+1, 0); err != nil {
			return err
		}
		if r.limited && r.off >= r.limit {
			return nil
		}
		line, err = readLine(r.br)
	}
	r.line++
	if err == io.EOF {
		// An unterminated tail: only possible if something wrote the file
		// behind our back since Open repaired it.
		return &CorruptError{File: r.rel, Line: r.line, Err: errors.New("final line has no newline")}
	}
	if err != nil {
		return &CorruptError{File: r.rel, Line: r.line, Err: err}
	}
	ev, derr := DecodeLine(line)
	if derr != nil {
		return &CorruptError{File: r.rel, Line: r.line, Err: derr}
	}
	r.off += int64(len(line)) + 1
	ev.Shard = r.shard
	ev.Offset = r.off
	r.ev = ev
	return nil
}

// readLine returns the next line without its newline; io.EOF with a
// non-empty line means the data ended without one. A line longer than
// MaxLineBytes is consumed whole and returned as (nil, error).
func readLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if err == nil {
		out := make([]byte, len(line)-1)
		copy(out, line)
		return out, nil
	}
	if err != bufio.ErrBufferFull {
		return append([]byte(nil), line...), err
	}
	buf := append([]byte(nil), line...)
	for {
		line, err = br.ReadSlice('\n')
		buf = append(buf, line...)
		if len(buf) > MaxLineBytes+1 {
			// Skip the rest of the line, so that a reader that goes on
			// (Verify) starts at the next one.
			for err == bufio.ErrBufferFull {
				_, err = br.ReadSlice('\n')
			}
			return nil, errLongLine
		}
		if err == nil {
			return buf[:len(buf)-1], nil
		}
		if err != bufio.ErrBufferFull {
			return buf, err
		}
	}
}

// realDir refuses a symbolic link where the log keeps a directory: the
// files written through it would land wherever it points. A missing
// directory is fine (it is made).
func realDir(path string) error {
	if fi, err := os.Lstat(path); err == nil && !fi.IsDir() {
		return fmt.Errorf("eventlog: %s is not a directory (%s): the log keeps its files in real directories only; move it aside", path, fi.Mode().Type())
	}
	return nil
}

var errLongLine = fmt.Errorf("line longer than %d bytes", MaxLineBytes)

// openLogFile opens a file of the log for reading, never through a
// symbolic link, and only if this user owns it (see private.OpenFile).
func openLogFile(path string) (*os.File, error) { return private.OpenFile(path, os.O_RDONLY) }

// shardName inverts ShardPath.
func shardName(rel string) string {
	switch rel {
	case EventsFile:
		return ""
	case LocalFile:
		return LocalShard
	}
	return strings.TrimSuffix(strings.TrimPrefix(rel, MessagesDir+"/"), ".jsonl")
}

type readerHeap []*shardReader

func (h readerHeap) Len() int { return len(h) }
func (h readerHeap) Less(i, j int) bool {
	if h[i].ev.ID != h[j].ev.ID {
		return h[i].ev.ID < h[j].ev.ID
	}
	return h[i].rel < h[j].rel
}
func (h readerHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *readerHeap) Push(x any)   { *h = append(*h, x.(*shardReader)) }
func (h *readerHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// ---- torn-tail repair ----

// repairTail makes sure the shard ends with a complete, parseable line. A
// final fragment without a newline, or a final line that does not parse,
// is appended to <file>.corrupt and truncated away. It returns the file's
// size after repair.
func repairTail(dir, rel string) (*Repair, int64, error) {
	path := filepath.Join(dir, filepath.FromSlash(rel))
	f, err := private.OpenFile(path, os.O_RDWR)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	size := st.Size()
	if size == 0 {
		return nil, 0, nil
	}
	// Find the start of the final line (complete or not).
	lastNL, err := lastIndexByte(f, size, size)
	if err != nil {
		return nil, 0, err
	}
	var cut int64 = -1
	malformed := false
	if lastNL != size-1 {
		cut = lastNL + 1 // unterminated fragment after the last newline
	} else {
		prevNL, err := lastIndexByte(f, lastNL, size)
		if err != nil {
			return nil, 0, err
		}
		start := prevNL + 1
		line := make([]byte, lastNL-start)
		if _, err := f.ReadAt(line, start); err != nil {
			return nil, 0, err
		}
		if _, derr := DecodeLine(line); derr != nil {
			cut, malformed = start, true
		}
	}
	if cut < 0 {
		return nil, size, nil
	}
	tail := make([]byte, size-cut)
	if _, err := f.ReadAt(tail, cut); err != nil {
		return nil, 0, err
	}
	corrupt := path + ".corrupt"
	cf, err := private.OpenFile(corrupt, os.O_CREATE|os.O_WRONLY|os.O_APPEND)
	if err != nil {
		return nil, 0, err
	}
	if !bytes.HasSuffix(tail, []byte("\n")) {
		tail = append(tail, '\n')
	}
	if _, err := cf.Write(tail); err != nil {
		cf.Close()
		return nil, 0, err
	}
	if err := cf.Sync(); err != nil {
		cf.Close()
		return nil, 0, err
	}
	if err := cf.Close(); err != nil {
		return nil, 0, err
	}
	if err := f.Truncate(cut); err != nil {
		return nil, 0, err
	}
	if err := f.Sync(); err != nil {
		return nil, 0, err
	}
	return &Repair{File: rel, Offset: cut, Bytes: int(size - cut), MovedTo: rel + ".corrupt", Malformed: malformed}, cut, nil
}

// lastIndexByte returns the offset of the last '\n' before end, or -1.
func lastIndexByte(f *os.File, end, size int64) (int64, error) {
	const chunk = 64 << 10
	buf := make([]byte, chunk)
	for end > 0 {
		n := int64(chunk)
		if end < n {
			n = end
		}
		if _, err := f.ReadAt(buf[:n], end-n); err != nil {
			return 0, err
		}
		if i := bytes.LastIndexByte(buf[:n], '\n'); i >= 0 {
			return end - n + int64(i), nil
		}
		end -= n
	}
	return -1, nil
}

// signing is an event of a batch to sign, and the request it is in.
type signing struct {
	e   *Event
	req int
}

// sign signs the batch's events that ask, at once on every CPU (their
// writers wait on the batch: the committer is the one goroutine that
// works meanwhile), and ends each one's line with its signature. A
// request with an event that fails to sign, or grows past MaxLineBytes,
// fails: its events leave the shards' buffers (rebuilt from the lines)
// and all, which sign returns.
func (l *Log) sign(batch []*appendReq, toSign []signing, errs []error, assigned [][]*Event, order []*shardBuf, all []*Event) []*Event {
	sigs := make([]Sig, len(toSign))
	serrs := make([]error, len(toSign))
	workers := min(runtime.GOMAXPROCS(0), len(toSign))
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := w; k < len(toSign); k += workers {
				sigs[k], serrs[k] = toSign[k].e.Sign(toSign[k].e.Raw)
			}
		}()
	}
	wg.Wait()
	failed := map[int]bool{}
	for k, t := range toSign {
		err := serrs[k]
		if err == nil && (len(sigs[k].KeyID) != keyIDLen || len(sigs[k].Sig) != ed25519.SignatureSize) {
			err = ErrBadSig
		}
		if err == nil && len(t.e.Raw)+SigMemberLen+1 > MaxLineBytes {
			err = fmt.Errorf("%w: %s event is over %d bytes once signed", ErrTooLarge, t.e.Type, MaxLineBytes)
		}
		if err != nil {
			if errs[t.req] == nil {
				errs[t.req] = err
			}
			failed[t.req] = true
			continue
		}
		t.e.Raw = withSig(t.e.Raw, sigs[k])
	}
	inFailed := map[*Event]bool{}
	for i := range failed {
		for _, e := range batch[i].evs {
			inFailed[e] = true
		}
		for _, e := range assigned[i] { // a retry gets fresh, in-order IDs
			e.ID, e.Time = "", time.Time{}
		}
	}
	for _, sb := range order {
		sb.buf.Reset()
		kept := sb.evs[:0]
		for _, e := range sb.evs {
			if inFailed[e] {
				continue
			}
			sb.buf.Write(e.Raw)
			sb.buf.WriteByte('\n')
			kept = append(kept, e)
		}
		sb.evs = kept
	}
	for i := range failed {
		for _, e := range batch[i].evs {
			e.Raw = nil
		}
	}
	return slices.DeleteFunc(all, func(e *Event) bool { return inFailed[e] })
}
