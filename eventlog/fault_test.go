package eventlog

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/thrumhq/thrum/internal/fault"
)

// TestFailedBatchLeavesNoLines fails one shard of a batch that spans three
// (at write, then at fsync) and checks that no shard keeps a line of it:
// the shards written before the failing one are truncated back too, so no
// unacknowledged event can be replayed later. The log then takes appends
// again.
func TestFailedBatchLeavesNoLines(t *testing.T) {
	for _, op := range []string{fault.LogWrite, fault.LogSync} {
		t.Run(op, func(t *testing.T) {
			dir := t.TempDir()
			l := openLog(t, dir, nil)
			appendOK(t, l, &Event{Type: "agent.register", Payload: map[string]string{"n": "1"}},
				&Event{Type: "message.create", Shard: "a", Payload: map[string]string{"n": "2"}})
			sizes := l.Positions()
			failing := filepath.Join(dir, filepath.FromSlash(ShardPath("b")))
			defer fault.Set(func(o, path string) error {
				if o == op && path == failing {
					return &fs.PathError{Op: o, Path: path, Err: syscall.ENOSPC}
				}
				return nil
			})()
			err := l.Append(context.Background(),
				&Event{Type: "agent.update", Payload: map[string]string{"n": "3"}},
				&Event{Type: "message.create", Shard: "a", Payload: map[string]string{"n": "4"}},
				&Event{Type: "message.create", Shard: "b", Payload: map[string]string{"n": "5"}})
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("Append = %v, want ENOSPC", err)
			}
			for rel, size := range sizes {
				if got := fileSize(t, filepath.Join(dir, filepath.FromSlash(rel))); got != size {
					t.Errorf("%s is %d bytes after the failed batch, was %d", rel, got, size)
				}
			}
			if got := fileSize(t, failing); got != 0 {
				t.Errorf("the failing shard holds %d bytes", got)
			}
			checkPositions(t, l)
			fault.Set(nil)
			appendOK(t, l, &Event{Type: "message.create", Shard: "b", Payload: map[string]string{"n": "6"}})
			evs, _ := scanAll(t, l, nil)
			if len(evs) != 3 {
				t.Fatalf("log holds %d events, want 3 (two before, one after the failure)", len(evs))
			}
			checkPositions(t, l)
		})
	}
}

// TestProbe checks that Probe fails while the log's directory refuses
// writes and passes once it takes them, leaving no file either way.
func TestProbe(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, nil)
	var full atomic.Bool
	full.Store(true)
	defer fault.Set(func(o, path string) error {
		if full.Load() && o == fault.LogWrite && filepath.Dir(path) == dir {
			return &fs.PathError{Op: o, Path: path, Err: syscall.ENOSPC}
		}
		return nil
	})()
	if err := l.Probe(); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Probe on a full disk = %v, want ENOSPC", err)
	}
	full.Store(false)
	if err := l.Probe(); err != nil {
		t.Fatalf("Probe once the disk takes writes = %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, probeFile)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Probe left its file behind: %v", err)
	}
}
