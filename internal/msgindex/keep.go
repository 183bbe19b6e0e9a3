package msgindex

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// This file is the snapshot's policy: where it lives, how a start reads
// it while the store and the log open, and when a running index saves it.

// SnapshotPath is where the index of the projection database at db is
// saved: beside it, as db + ".index"; "" for a database with no file.
func SnapshotPath(db string) string {
	if db == "" || strings.HasPrefix(db, ":") || strings.HasPrefix(db, "file:") {
		return ""
	}
	return db + ".index"
}

// A Reading is a snapshot being read and decoded in the background, so
// that this overlaps a start's other work.
type Reading struct {
	done chan struct{}
	snap *Snapshot
	err  error
}

// StartReading starts reading the snapshot at path ("" for none).
func StartReading(path string) *Reading {
	r := &Reading{done: make(chan struct{})}
	if path == "" {
		r.err = fs.ErrNotExist
		close(r.done)
		return r
	}
	go func() {
		defer close(r.done)
		r.snap, r.err = ReadSnapshot(path)
	}()
	return r
}

// Wait waits until the read has ended: a start that fails before it
// restores calls it, so that no read outlives the start.
func (r *Reading) Wait() { <-r.done }

// Restore loads the snapshot r is reading (or, if r is nil, the one at path)
// and makes it current with lg, removing any temporary file a save cut
// short by a crash left beside it. It reports whether the index was
// loaded; if not, the caller builds it. Why not is logged, if logger is
// set.
func (x *Index) Restore(ctx context.Context, path string, r *Reading, lg Log, logger *slog.Logger) bool {
	if path == "" {
		return false
	}
	start := time.Now()
	if r == nil {
		r = StartReading(path)
	}
	<-r.done
	tmps, _ := filepath.Glob(path + ".*.tmp")
	for _, t := range tmps {
		os.Remove(t)
	}
	err := r.err
	if err == nil {
		err = x.LoadSnapshot(ctx, r.snap, lg)
	}
	switch {
	case err == nil:
		if logger != nil {
			logger.Debug("thrum: message index loaded", "snapshot", path, "took", time.Since(start))
		}
		return true
	case logger != nil && !errors.Is(err, fs.ErrNotExist):
		logger.Info("thrum: building the message index from the projection", "reason", err)
	}
	return false
}

// SaveIfChanged saves the index to path ("" for nowhere) if it is built
// and has changed since its snapshot there. The snapshot carries the
// index's positions in the log, so it stays usable as the log grows. A
// failure costs only the next start's speed; it is logged and returned.
func (x *Index) SaveIfChanged(path string, logger *slog.Logger) error {
	if path == "" || !x.Built() {
		return nil
	}
	if unsaved, onDisk := x.Unsaved(); onDisk && unsaved == 0 {
		return nil
	}
	err := x.Save(path)
	if err != nil && logger != nil {
		logger.Warn("thrum: could not save the message index for the next start", "err", err)
	}
	return err
}

// A SavePolicy says when a running index is saved: once the log events
// (of any kind) taken since the last save reach a fiftieth of the
// messages indexed, and at least Min, or, if anything changed, Age after
// the last save; checked every Check. A start after a crash thus replays
// at most that much of the log, and saving (in the background) costs a
// few microseconds per event at any size. While the index takes a burst
// (Min events or more since the last check: an import), it is saved
// only Age after the last save, and then once the burst is over: a save
// holds a copy of the index's orders while it runs, on top of what the
// import holds.
type SavePolicy struct {
	Min   int
	Age   time.Duration
	Check time.Duration
}

// DefaultSavePolicy is the node's: a save every 2,000 events (more past
// 100,000 messages), or 30 s after a change.
var DefaultSavePolicy = SavePolicy{Min: 2000, Age: 30 * time.Second, Check: time.Second}

// SaveLoop saves the index to path as p says, until ctx ends. A failed
// save is retried only with the next one the policy calls for.
func (x *Index) SaveLoop(ctx context.Context, path string, p SavePolicy, logger *slog.Logger) {
	if path == "" {
		return
	}
	t := time.NewTicker(p.Check)
	defer t.Stop()
	at, failed := time.Now(), false
	var last uint64 // unsaved at the last check
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		unsaved, onDisk := x.Unsaved()
		took := unsaved - min(last, unsaved)
		last = unsaved
		if onDisk && unsaved == 0 || !x.Built() {
			continue
		}
		young := time.Since(at) < p.Age
		if (onDisk || failed) && young && (unsaved < uint64(max(p.Min, x.Len()/50)) || took >= uint64(p.Min)) {
			continue
		}
		at = time.Now()
		failed = x.SaveIfChanged(path, logger) != nil
		last, _ = x.Unsaved()
	}
}
