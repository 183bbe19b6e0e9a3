package eventlog

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/thrumhq/thrum/internal/fault"
)

// stager records what Options.Stage is given and what each call's
// durable reported.
type stager struct {
	mu        sync.Mutex
	staged    [][]string // message IDs ("n" payloads) of each call
	finished  []error    // each call's outcome (its durable), in order
	committed []string   // the events of calls whose durable was nil
	err       error      // Stage's answer to a durable batch
	gate      chan struct{}
	entered   chan struct{}
}

func (s *stager) stage(batch []*Event, wait func() error) error {
	var ns []string
	for _, e := range batch {
		m, err := PayloadAs[map[string]string](e)
		if err != nil || e.ID == "" || e.Offset == 0 {
			panic("Stage got an event without its payload, ID or offset")
		}
		ns = append(ns, m["n"])
	}
	s.mu.Lock()
	s.staged = append(s.staged, ns)
	gate, entered := s.gate, s.entered
	s.gate, s.entered = nil, nil
	s.mu.Unlock()
	if entered != nil {
		close(entered)
	}
	if gate != nil {
		<-gate
	}
	durable := wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.finished = append(s.finished, durable)
	if durable != nil {
		return nil
	}
	s.committed = append(s.committed, ns...)
	return s.err
}

func msg(shard, n string) *Event {
	return &Event{Type: "message.create", Shard: shard, Payload: map[string]string{"n": n}}
}

// TestStageRunsWhileTheBatchIsFsynced: with Options.Stage, a batch is
// staged before its fsync is done (the fsync waits for it here), and its
// durable reports nil; Stage's error is Append's.
func TestStageRunsWhileTheBatchIsFsynced(t *testing.T) {
	dir := t.TempDir()
	s := &stager{entered: make(chan struct{})}
	entered := s.entered
	l := openLog(t, dir, &Options{Stage: s.stage})
	shard := filepath.Join(dir, filepath.FromSlash(ShardPath("a")))
	defer fault.Set(func(op, path string) error {
		if op == fault.LogSync && path == shard {
			select {
			case <-entered:
			case <-time.After(10 * time.Second):
				t.Error("the batch was not staged while its fsync waited")
			}
		}
		return nil
	})()
	appendOK(t, l, msg("a", "1"))
	no := errors.New("projection says no")
	s.mu.Lock()
	s.err = no
	s.mu.Unlock()
	if err := l.Append(context.Background(), msg("a", "2")); !errors.Is(err, no) {
		t.Fatalf("Append = %v, want Stage's error", err)
	}
	if len(s.finished) != 2 || s.finished[0] != nil || s.finished[1] != nil {
		t.Fatalf("finished with %v, want [nil nil]", s.finished)
	}
	if len(s.committed) != 2 {
		t.Fatalf("committed %v, want [1 2]", s.committed)
	}
}

// TestStageFsyncFailureDiscardsTheBatch: a batch staged while its fsync
// fails learns the fsync's error from durable, its Append fails, and no
// line of it stays in the log.
func TestStageFsyncFailureDiscardsTheBatch(t *testing.T) {
	dir := t.TempDir()
	s := &stager{}
	l := openLog(t, dir, &Options{Stage: s.stage})
	appendOK(t, l, msg("a", "1"), msg("b", "2"))
	sizes := l.Positions()
	failing := filepath.Join(dir, filepath.FromSlash(ShardPath("b")))
	defer fault.Set(func(op, path string) error {
		if op == fault.LogSync && path == failing {
			return &fs.PathError{Op: op, Path: path, Err: syscall.EIO}
		}
		return nil
	})()
	if err := l.Append(context.Background(), msg("a", "3"), msg("b", "4")); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Append = %v, want EIO", err)
	}
	if len(s.finished) != 2 || s.finished[0] != nil || !errors.Is(s.finished[1], syscall.EIO) {
		t.Fatalf("finished with %v, want [nil EIO]", s.finished)
	}
	for rel, size := range sizes {
		if got := fileSize(t, filepath.Join(dir, filepath.FromSlash(rel))); got != size {
			t.Errorf("%s is %d bytes after the failed batch, was %d", rel, got, size)
		}
	}
	fault.Set(nil)
	appendOK(t, l, msg("b", "5"))
	if got := s.committed; len(got) != 3 || got[0] != "1" || got[1] != "2" || got[2] != "5" {
		t.Fatalf("committed %v, want [1 2 5]", got)
	}
	checkPositions(t, l)
}

// TestStageGroupWithAFailedBatch: batches merged into one Stage call
// where one failed its fsync: the call's durable reports the error, and
// the durable ones are staged again and committed, so the projection
// gets exactly the events in the log.
func TestStageGroupWithAFailedBatch(t *testing.T) {
	dir := t.TempDir()
	gate := make(chan struct{})
	s := &stager{gate: gate, entered: make(chan struct{})}
	entered := s.entered
	l := openLog(t, dir, &Options{Stage: s.stage})
	bad := filepath.Join(dir, filepath.FromSlash(ShardPath("bad")))
	good := filepath.Join(dir, filepath.FromSlash(ShardPath("good")))
	synced := make(chan string, 4)
	defer fault.Set(func(op, path string) error {
		if op != fault.LogSync {
			return nil
		}
		synced <- path
		if path == bad {
			return &fs.PathError{Op: op, Path: path, Err: syscall.ENOSPC}
		}
		return nil
	})()
	ctx := context.Background()
	errs := make([]chan error, 3)
	for i := range errs {
		errs[i] = make(chan error, 1)
	}
	// The first batch holds the apply goroutine in Stage; the second
	// (failing) and third (durable) are written and fsynced meanwhile.
	go func() { errs[0] <- l.Append(ctx, msg("first", "0")) }()
	<-entered
	<-synced
	go func() { errs[1] <- l.Append(ctx, msg("bad", "1")) }()
	if p := <-synced; p != bad {
		t.Fatalf("fsync of %s, want %s", p, bad)
	}
	go func() { errs[2] <- l.Append(ctx, msg("good", "2")) }()
	if p := <-synced; p != good {
		t.Fatalf("fsync of %s, want %s", p, good)
	}
	time.Sleep(20 * time.Millisecond) // the third batch waits to be handed over
	close(gate)
	if err := <-errs[0]; err != nil {
		t.Fatalf("first Append: %v", err)
	}
	if err := <-errs[1]; !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("failing Append = %v, want ENOSPC", err)
	}
	if err := <-errs[2]; err != nil {
		t.Fatalf("durable Append: %v", err)
	}
	if got := s.committed; len(got) != 2 || got[0] != "0" || got[1] != "2" {
		t.Fatalf("committed %v, want [0 2]", got)
	}
	failed := 0
	for _, err := range s.finished {
		if err != nil {
			failed++
		}
	}
	if failed != 1 {
		t.Fatalf("%d Stage calls' durable reported an error, want 1: %v", failed, s.finished)
	}
	t.Logf("staged %v, finished %v", s.staged, s.finished)
	evs, _ := scanAll(t, l, nil)
	if len(evs) != 2 {
		t.Fatalf("log holds %d events, want 2", len(evs))
	}
}
