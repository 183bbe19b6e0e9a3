// Package store is thrum's SQLite projection of the event log: the tables
// that answer queries. It is a cache: Apply folds events into it in log
// order, each event idempotently, with the log position recorded in the
// same transaction, so a store can always be brought up to date by
// replaying the log past Positions, or rebuilt from scratch with Rebuild.
//
// The store uses one writer connection and a pool of readers on a WAL
// database, so queries never wait for a write.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"
	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/thrumhq/thrum/eventlog"
)

// DefaultReaders is the default of Options.Readers.
const DefaultReaders = 4

// DefaultRebuildBatch is how many events Rebuild applies per transaction.
const DefaultRebuildBatch = 5000

// Options configure a Store. A nil *Options means all defaults.
type Options struct {
	// Logger receives warnings. Nil means silent.
	Logger *slog.Logger
	// Readers is the size of the read connection pool. Default
	// DefaultReaders, at least 2.
	Readers int

	bulk bool // Rebuild: no secondary indexes until the load is done
}

// Store is an open projection. All methods may be called concurrently;
// Apply calls are serialized internally.
type Store struct {
	path string
	opts Options
	w    *sqlx.DB // exactly one connection: all writes
	r    *sqlx.DB // readers
	ap   *applier
	rc   stmtCache // prepared reads on r
	ck   *sqlx.DB  // one connection for WAL checkpoints

	applies atomic.Uint64 // successful Apply calls, so the checkpointer knows when the store is idle
	// checkpoint modes run, for tests: TRUNCATE, and PASSIVE under the applier's lock
	truncates, lockedCheckpoints atomic.Uint64
	pageSize                     int64 // the database's, for the WAL's size in bytes

	// searchDirty is set when an Apply may have added messages the search
	// index does not hold yet; IndexPending clears it under searchMu.
	searchMu    sync.Mutex
	searchDirty atomic.Bool

	ckStop, ckDone chan struct{}

	closeOnce sync.Once
	closeErr  error
}

// ErrOutdated is returned by Open for a projection made by an older
// thrum: it is a cache of the log, so the remedy is to delete it and
// replay the log (thrum.Open does).
var ErrOutdated = errors.New("store: projection schema is outdated")

// ErrNotFound is returned by lookups of a single thing that does not exist.
var ErrNotFound = errors.New("store: not found")

func dsn(path string, readOnly, bulk bool) string {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "journal_mode(WAL)")
	// The log is the truth: a crash may lose the last transactions of
	// the projection (they are replayed from the log), never corrupt it.
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Add("_pragma", "foreign_keys(OFF)")
	// A small page cache per connection, 500 KiB: the node's own index
	// answers listings, so SQLite mostly fetches single rows, and pages
	// fetched by ID come from the OS's cache as fast (inbox and search
	// p99 unchanged with readers' caches of 500 KiB against 2 MiB). A
	// cached page costs SQLite's allocator 8 KiB, twice its size, and
	// the writer's cache held more than its size after an import of
	// 100,000 (SQLite counted 3.5 MiB at 2 MiB, 2.0 at 500 KiB): at 500
	// KiB the import's peak is 2.7 MiB lower, and sends are as fast. A
	// rebuild, which loads the whole log into a fresh file, keeps 2 MiB.
	if bulk {
		q.Add("_pragma", "cache_size(-2000)")
	} else {
		q.Add("_pragma", "cache_size(-500)")
	}
	q.Add("_pragma", "temp_store(MEMORY)")
	// No memory map: mapped pages count as resident memory, and reading
	// the whole projection at open (the index build) would map it all.
	q.Add("_pragma", "mmap_size(0)")
	if readOnly {
		q.Add("_pragma", "query_only(1)")
	} else {
		q.Set("_txlock", "immediate")
		// Checkpoints run on their own connection (see checkpointLoop), so
		// that their fsyncs stay off the commit path.
		q.Add("_pragma", "wal_autocheckpoint(0)")
		// When the writer restarts a fully checkpointed WAL, it cuts the
		// file back to this size. Not lower: cutting the file cost that
		// commit about 5 ms; the checkpoint loop bounds it (walHardMax).
		q.Add("_pragma", fmt.Sprintf("journal_size_limit(%d)", walSizeLimit))
	}
	return "file:" + (&url.URL{Path: path}).EscapedPath() + "?" + q.Encode()
}

// Open opens (creating if needed) the projection database at path.
func Open(path string, opts *Options) (*Store, error) {
	s := &Store{path: path}
	s.searchDirty.Store(true) // a crash may have left messages unindexed
	if opts != nil {
		s.opts = *opts
	}
	if s.opts.Readers <= 0 {
		s.opts.Readers = DefaultReaders
	}
	if s.opts.Readers < 2 {
		s.opts.Readers = 2
	}
	w, err := sqlx.Open("sqlite", dsn(path, false, s.opts.bulk))
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	if err := migrate(w, s.opts.bulk); err != nil {
		w.Close()
		return nil, fmt.Errorf("store: %s: %w", path, err)
	}
	r, err := sqlx.Open("sqlite", dsn(path, true, false))
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	n := s.opts.Readers
	if m := runtime.GOMAXPROCS(0) * 2; n > m && m >= 2 {
		n = m
	}
	r.SetMaxOpenConns(n)
	r.SetMaxIdleConns(n)
	r.SetConnMaxLifetime(0)
	s.w, s.r = w, r
	s.rc.db = r
	s.ap, err = newApplier(w, path)
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("store: %s: %w", path, err)
	}
	ck, err := sqlx.Open("sqlite", dsn(path, false, false))
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	ck.SetMaxOpenConns(1)
	s.ck = ck
	if err := ck.Get(&s.pageSize, `PRAGMA page_size`); err != nil {
		s.Close()
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	s.ckStop, s.ckDone = make(chan struct{}), make(chan struct{})
	go s.checkpointLoop()
	return s, nil
}

func migrate(w *sqlx.DB, bulk bool) error {
	var v string
	err := w.Get(&v, `SELECT value FROM meta WHERE key = 'schema_version'`)
	if err == nil {
		n, _ := strconv.Atoi(v)
		if n > schemaVersion {
			return fmt.Errorf("projection schema version %d is newer than this thrum (%d): upgrade thrum, or delete the file to rebuild it from the log", n, schemaVersion)
		}
		if n == schemaVersion {
			if bulk {
				return nil
			}
			// Indexes added within a version (see schemaVersion).
			if _, err := w.Exec(indexes); err != nil {
				return fmt.Errorf("create indexes: %w", err)
			}
			return nil
		}
		return fmt.Errorf("%w: version %d, this thrum uses %d", ErrOutdated, n, schemaVersion)
	}
	if _, err := w.Exec(schema); err != nil {
		return fmt.Errorf("create schema: %w", err)
	}
	if !bulk {
		if _, err := w.Exec(indexes); err != nil {
			return fmt.Errorf("create indexes: %w", err)
		}
	}
	if _, err := w.Exec(`INSERT OR IGNORE INTO meta(key, value) VALUES('search_indexed', '0')`); err != nil {
		return fmt.Errorf("create schema: %w", err)
	}
	_, err = w.Exec(`INSERT INTO meta(key, value) VALUES('schema_version', ?)
		ON CONFLICT(key) DO UPDATE SET value = excluded.value`, strconv.Itoa(schemaVersion))
	return err
}

// Path returns the database file's path.
func (s *Store) Path() string { return s.path }

// Close closes the database. It is idempotent; calls after it fail with
// an error for which IsClosed is true.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		var errs []error
		if s.ckStop != nil {
			close(s.ckStop)
			<-s.ckDone
			errs = append(errs, s.ck.Close())
		}
		if s.ap != nil && !s.opts.bulk {
			// Leave the file indexed (best effort: the next open indexes
			// what is left, and searches index before they look).
			_ = s.IndexPending(context.Background())
		}
		s.rc.close()
		if s.ap != nil {
			errs = append(errs, s.ap.close())
		}
		if s.r != nil {
			errs = append(errs, s.r.Close())
		}
		if s.w != nil {
			errs = append(errs, s.w.Close())
		}
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

// WAL checkpointing: how often, and the WAL's bounds.
const (
	checkpointInterval = 250 * time.Millisecond
	idleTicks          = 4              // ticks without an Apply before the WAL is truncated
	walMaxSize         = 8 << 20        // WAL content past this: a checkpoint under the applier's lock lets the writer restart it
	walHardMax         = 4 * walMaxSize // WAL file past this: truncated even while busy
	walSizeLimit       = walHardMax     // journal_size_limit: a restarted WAL's file is cut back to this
)

// checkpointLoop copies the WAL into the database in the background. A
// passive checkpoint never blocks the writer or readers; the writer then
// restarts the WAL from its beginning once it is fully copied, writing over
// the file. Under steady writes a passive checkpoint never ends with the
// WAL fully copied (commits land while it runs), so once the WAL holds more than walMaxSize the loop runs a second
// passive checkpoint holding the applier's lock: it copies only what was
// committed meanwhile, and the next commit restarts the WAL. Applies wait
// for it on a Go mutex for about one small checkpoint (1–3 ms, most of it
// the database file's fsync), never in SQLite's busy handler, whose
// back-off (sleeps of 1, 2, 5, 10 ms...) made a commit wait 10–20 ms behind
// a TRUNCATE checkpoint, which holds the write lock while it copies, syncs
// and truncates (about 10 ms): the tail of send → woken wait (see
// docs/performance.md, "WAL checkpoints"). A reader holding an old snapshot can keep
// any checkpoint from finishing, so when the store has been idle for
// idleTicks, or the WAL file has grown past walHardMax, the loop runs a
// TRUNCATE checkpoint, which waits for readers and empties the file.
func (s *Store) checkpointLoop() {
	defer close(s.ckDone)
	t := time.NewTicker(checkpointInterval)
	defer t.Stop()
	var lastApplies uint64
	var lastErr error
	idle, truncated := 0, false
	for {
		select {
		case <-s.ckStop:
			return
		case <-t.C:
		}
		if n := s.applies.Load(); n != lastApplies {
			lastApplies, idle, truncated = n, 0, false
		} else {
			idle++
		}
		if !s.opts.bulk {
			if err := s.IndexPending(context.Background()); err != nil && s.opts.Logger != nil {
				s.opts.Logger.Warn("store: indexing new messages for search failed; retrying", "err", err)
			}
		}
		mode := "PASSIVE"
		if !truncated && idle >= idleTicks || s.walSize() > walHardMax {
			mode = "TRUNCATE"
		}
		var busy, frames, copied int64 // frames: the WAL's content, in pages
		err := s.ck.QueryRow(`PRAGMA wal_checkpoint(`+mode+`)`).Scan(&busy, &frames, &copied)
		if err == nil && mode == "TRUNCATE" {
			truncated = true
			s.truncates.Add(1)
		}
		if err == nil && mode == "PASSIVE" && frames*s.pageSize > walMaxSize {
			s.ap.mu.Lock()
			_, err = s.ck.Exec(`PRAGMA wal_checkpoint(PASSIVE)`)
			s.ap.mu.Unlock()
			s.lockedCheckpoints.Add(1)
		}
		// Warn once per run of failures (a full disk fails every tick).
		if s.opts.Logger != nil && (err == nil) != (lastErr == nil) {
			if err != nil {
				s.opts.Logger.Warn("store: WAL checkpoints fail; retrying every tick", "mode", mode, "err", err)
			} else {
				s.opts.Logger.Info("store: WAL checkpoints work again")
			}
		}
		lastErr = err
	}
}

// walSize returns the size of the WAL file (0 if it cannot be read).
func (s *Store) walSize() int64 {
	st, err := os.Stat(s.path + "-wal")
	if err != nil {
		return 0
	}
	return st.Size()
}

// IsClosed reports whether err comes from using a closed Store.
func IsClosed(err error) bool {
	return err != nil && strings.Contains(err.Error(), "sql: database is closed")
}

// Positions returns the log positions the projection has applied up to
// (shard path → byte offset).
func (s *Store) Positions(ctx context.Context) (map[string]int64, error) {
	var rows []struct {
		Shard  string `db:"shard"`
		Offset int64  `db:"offset"`
	}
	if err := s.w.SelectContext(ctx, &rows, `SELECT shard, offset FROM checkpoints`); err != nil {
		return nil, fmt.Errorf("store: positions: %w", err)
	}
	out := make(map[string]int64, len(rows))
	for _, r := range rows {
		out[r.Shard] = r.Offset
	}
	return out, nil
}

// Apply folds a batch of events into the projection in one transaction,
// and records each event's shard offset as the checkpoint. Applying an
// event a second time changes nothing.
func (s *Store) Apply(ctx context.Context, evs []*eventlog.Event) error {
	b, err := s.Stage(ctx, evs)
	if err != nil {
		return err
	}
	return b.Commit()
}

// Staged is a batch applied in a transaction that is still open (see
// Stage): no reader sees any of it until Commit, and Rollback discards
// it. Exactly one of the two must be called; until then the store
// applies nothing else.
type Staged struct {
	s   *Store
	tx  *sqlx.Tx
	evs []*eventlog.Event
}

// Stage applies a batch as Apply does, but leaves its transaction open,
// so that a caller can do the batch's work while the batch becomes
// durable elsewhere (the log's fsync) and make it visible only then. On
// error nothing is left open.
func (s *Store) Stage(ctx context.Context, evs []*eventlog.Event) (*Staged, error) {
	if len(evs) == 0 {
		return &Staged{s: s}, nil
	}
	tx, err := s.ap.stage(ctx, evs)
	if err != nil {
		return nil, err // rolled back: the store is as idle as before
	}
	return &Staged{s: s, tx: tx, evs: evs}, nil
}

// Commit makes the staged batch visible, with its checkpoint. On error
// the batch is rolled back.
func (b *Staged) Commit() error {
	if b.tx == nil {
		return nil
	}
	tx := b.tx
	b.tx = nil
	if err := b.s.ap.commit(tx); err != nil {
		return err
	}
	b.s.applies.Add(1)
	for _, e := range b.evs {
		if e.Type == eventlog.TypeMessageCreate {
			b.s.searchDirty.Store(true)
			break
		}
	}
	return nil
}

// Rollback discards the staged batch.
func (b *Staged) Rollback() {
	if b.tx == nil {
		return
	}
	tx := b.tx
	b.tx = nil
	b.s.ap.rollback(tx)
}

// CatchUp applies every event of log past the projection's checkpoint, in
// batches, and returns how many it applied. Reading and decoding the log
// run in a second goroutine, overlapping SQLite's writes.
//
// It first checks that each shard's checkpoint still ends the line of the
// event it last applied (eventlog.Log.CheckAt): a shard changed before its
// checkpoint is reported as an *eventlog.CorruptError, not replayed from
// the middle of a line.
func (s *Store) CatchUp(ctx context.Context, log *eventlog.Log) (int, error) {
	from, err := s.Positions(ctx)
	if err != nil {
		return 0, err
	}
	var ids []struct {
		Shard string `db:"shard"`
		ID    string `db:"event_id"`
	}
	if err := s.w.SelectContext(ctx, &ids, `SELECT shard, event_id FROM checkpoints`); err != nil {
		return 0, fmt.Errorf("store: positions: %w", err)
	}
	for _, c := range ids {
		if _, err := log.CheckAt(c.Shard, from[c.Shard], c.ID); err != nil {
			return 0, err
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	batches := make(chan []*eventlog.Event, 2)
	scanErr := make(chan error, 1)
	go func() {
		defer close(batches)
		batch := make([]*eventlog.Event, 0, DefaultRebuildBatch)
		_, err := log.Scan(ctx, from, func(e *eventlog.Event) error {
			batch = append(batch, e)
			if len(batch) == cap(batch) {
				select {
				case batches <- batch:
				case <-ctx.Done():
					return ctx.Err()
				}
				batch = make([]*eventlog.Event, 0, DefaultRebuildBatch)
			}
			return nil
		})
		if err == nil && len(batch) > 0 {
			select {
			case batches <- batch:
			case <-ctx.Done():
				err = ctx.Err()
			}
		}
		scanErr <- err
	}()
	n := 0
	for batch := range batches {
		if err := s.Apply(ctx, batch); err != nil {
			cancel()
			for range batches { // let the scanner finish
			}
			<-scanErr
			return n, err
		}
		n += len(batch)
	}
	return n, <-scanErr
}

// Rebuild creates a fresh projection at path from every event of log. An
// existing file at path is replaced.
func Rebuild(ctx context.Context, log *eventlog.Log, path string, opts *Options) (*Store, error) {
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if err := os.Remove(path + suffix); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("store: rebuild: %w", err)
		}
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	o.bulk = true
	s, err := Open(path, &o)
	if err != nil {
		return nil, err
	}
	// A fresh file that is thrown away if the rebuild fails: no need to
	// sync while loading it.
	if _, err := s.w.ExecContext(ctx, `PRAGMA synchronous = OFF`); err != nil {
		s.Close()
		return nil, fmt.Errorf("store: rebuild: %w", err)
	}
	if _, err := s.CatchUp(ctx, log); err != nil {
		s.Close()
		return nil, fmt.Errorf("store: rebuild: %w", err)
	}
	for _, q := range []string{indexes, `PRAGMA synchronous = NORMAL`} {
		if _, err := s.w.ExecContext(ctx, q); err != nil {
			s.Close()
			return nil, fmt.Errorf("store: rebuild: %w", err)
		}
	}
	if err := s.IndexPending(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("store: rebuild: %w", err)
	}
	return s, nil
}

// Dump returns every row of every table in Tables, each row rendered as
// text in a stable order: two projections are equal when their dumps are.
func (s *Store) Dump(ctx context.Context) (map[string][]string, error) {
	if err := s.IndexPending(ctx); err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, t := range Tables {
		rows, err := s.r.QueryxContext(ctx, `SELECT * FROM `+t)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			vals, err := rows.SliceScan()
			if err != nil {
				rows.Close()
				return nil, err
			}
			out[t] = append(out[t], fmt.Sprintf("%q", vals))
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
		sort.Strings(out[t])
	}
	return out, nil
}

// notFound maps sql.ErrNoRows to ErrNotFound.
func notFound(err error) error {
	if errors.Is(err, sql.ErrNoRows) {
		return ErrNotFound
	}
	return err
}

// IsFull reports whether err is SQLite's "database or disk is full".
func IsFull(err error) bool {
	var se interface{ Code() int }
	return errors.As(err, &se) && se.Code()&0xff == sqliteFull
}

const sqliteFull = 13 // SQLITE_FULL
