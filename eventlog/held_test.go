package eventlog

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/thrumhq/thrum/internal/private"
)

// messageLines returns n message.create lines by agent, as another
// machine would have written them.
func messageLines(n int, agent string) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = fmt.Appendf(nil, `{"event_id":"%s","type":"message.create","timestamp":"%s","message_id":"msg_%d","agent_id":%q,"content":"m"}`,
			NewID(), FormatTime(time.Now()), i, agent)
	}
	return out
}

// shardIDs counts the lines of each event ID in a shard.
func shardIDs(t *testing.T, l *Log, shard string) map[string]int {
	t.Helper()
	count := map[string]int{}
	evs, _ := scanAll(t, l, nil)
	for _, e := range evs {
		if e.Shard == shard {
			count[e.ID]++
		}
	}
	return count
}

// Two transports bring the same 1,000 events at once, each in batches of
// its own sizes and at its own pace: every event is in the shard once,
// and each was reported imported by exactly one of them.
func TestImportRacingTransportsLeaveEachEventOnce(t *testing.T) {
	for _, shard := range []string{"", "alice"} {
		t.Run(ShardPath(shard), func(t *testing.T) {
			l := openLog(t, t.TempDir(), &Options{NoSync: true})
			lines := messageLines(1000, "alice")
			if shard == "" {
				for i := range lines { // events.jsonl holds no message event
					lines[i] = fmt.Appendf(nil, `{"event_id":"%s","type":"thread.create","timestamp":"%s","thread_id":"thr_%d","created_by":"alice"}`,
						NewID(), FormatTime(time.Now()), i)
				}
			}
			// A local event first: the shard is not empty when the race starts.
			appendOK(t, l, &Event{Type: "app.note", Shard: shard, Payload: map[string]string{"agent_id": "alice"}})
			var mu sync.Mutex
			reported := map[string]int{}
			var wg sync.WaitGroup
			for path := range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(path), 7))
					for i := 0; i < len(lines); {
						n := 1 + rng.IntN(60)
						batch := lines[i:min(i+n, len(lines))]
						i += n
						evs, err := l.Import(t.Context(), shard, batch)
						if err != nil {
							t.Error(err)
							return
						}
						mu.Lock()
						for _, e := range evs {
							reported[e.ID]++
						}
						mu.Unlock()
						time.Sleep(time.Duration(rng.IntN(300)) * time.Microsecond)
					}
				}()
			}
			wg.Wait()
			count := shardIDs(t, l, shard)
			if len(count) != 1001 {
				t.Fatalf("the shard holds %d distinct events, want 1,001", len(count))
			}
			for id, n := range count {
				if n != 1 {
					t.Errorf("event %s is in the shard %d times", id, n)
				}
			}
			for _, line := range lines {
				if id := LineID(line); reported[id] != 1 {
					t.Errorf("event %s was reported imported %d times, want once", id, reported[id])
				}
			}
		})
	}
}

// A line whose event the shard holds is dropped however it comes: in the
// same call, in a later one, after a restart (the IDs are read from the
// files), or when it is this log's own event coming back.
func TestImportDropsWhatTheShardHolds(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, &Options{NoSync: true, SegmentBytes: 512})
	lines := messageLines(20, "alice")
	evs, err := l.Import(t.Context(), "alice", append(lines[:10:10], lines[3], lines[3]))
	if err != nil || len(evs) != 10 {
		t.Fatalf("Import: %d events, %v; want 10", len(evs), err)
	}
	own := &Event{Type: TypeMessageCreate, Shard: "alice", Payload: map[string]string{"agent_id": "alice"}}
	appendOK(t, l, own)
	l.Close()

	l = openLog(t, dir, &Options{NoSync: true, SegmentBytes: 512})
	segs, _ := l.Segments("alice")
	if len(segs) < 2 {
		t.Fatalf("the shard has %d segments; the test wants several", len(segs))
	}
	again := append(lines[5:], own.Raw)
	lacks, err := l.Lacks("alice", again)
	if err != nil || len(lacks) != 10 {
		t.Fatalf("Lacks: %d lines, %v; want the 10 new ones", len(lacks), err)
	}
	evs, err = l.Import(t.Context(), "alice", again)
	if err != nil || len(evs) != 10 {
		t.Fatalf("Import after a restart: %d events, %v; want 10", len(evs), err)
	}
	count := shardIDs(t, l, "alice")
	if len(count) != 21 {
		t.Fatalf("the shard holds %d events, want 21", len(count))
	}
	for id, n := range count {
		if n != 1 {
			t.Errorf("event %s is in the shard %d times", id, n)
		}
	}
}

// The IDs a shard holds take under 20 bytes each once read (16 bytes of
// hash and the room to add more): 100,000 of a shard that an import asks
// about, not the 23 a map of them took.
func TestHeldIDsAreSmall(t *testing.T) {
	const n = 100_000
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, MessagesDir), 0o700); err != nil {
		t.Fatal(err)
	}
	var b []byte
	for _, line := range messageLines(n, "alice") {
		b = append(append(b, line...), '\n')
	}
	if err := private.WriteFile(filepath.Join(dir, ShardPath("alice")), b); err != nil {
		t.Fatal(err)
	}
	b = nil
	l := openLog(t, dir, &Options{NoSync: true})
	live := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := live()
	if _, err := l.Lacks("alice", messageLines(1, "alice")); err != nil {
		t.Fatal(err)
	}
	after := live()
	runtime.KeepAlive(l)
	held := after - min(before, after)
	t.Logf("the IDs of %d events: %d KiB, %d bytes each", n, held>>10, held/n)
	if held/n >= 20 {
		t.Fatalf("the IDs of a shard of %d events take %d KiB, %d bytes each", n, held>>10, held/n)
	}
}

// BenchmarkImportHeldShard is the cost of importing into a shard whose
// IDs are held, per line, and the memory its ID set takes.
func BenchmarkImportHeldShard(b *testing.B) {
	l, err := Open(b.TempDir(), &Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	lines := messageLines(100_000, "alice")
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := 0; j < len(lines); j += 1000 {
			if _, err := l.Import(b.Context(), "alice", lines[j:j+1000]); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(lines)), "ns/line")
}

// A log never reads or writes through a symbolic link, and never uses a
// file another user owns: a link where a segment would be is no segment
// (the shard's next write fails rather than follow it), a link where the
// messages directory would be fails Open, and the outside files stay as
// they were.
func TestLogNeverFollowsLinks(t *testing.T) {
	outside := t.TempDir()
	line := string(messageLines(1, "alice")[0]) + "\n"
	target := filepath.Join(outside, "target.jsonl")
	if err := os.WriteFile(target, []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, MessagesDir), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{EventsFile, ShardPath("alice")} {
		if err := os.Symlink(target, filepath.Join(dir, rel)); err != nil {
			t.Fatal(err)
		}
	}
	l := openLog(t, dir, &Options{NoSync: true})
	if evs, _ := scanAll(t, l, nil); len(evs) != 0 {
		t.Errorf("Scan read %d events through links", len(evs))
	}
	if err := l.Append(t.Context(), &Event{Type: "app.note", Payload: map[string]string{"agent_id": "alice"}}); err == nil {
		t.Error("Append wrote to events.jsonl, a link")
	}
	if _, err := l.Import(t.Context(), "alice", messageLines(1, "alice")); err == nil {
		t.Error("Import wrote to messages/alice.jsonl, a link")
	}
	if b, _ := os.ReadFile(target); string(b) != line {
		t.Errorf("the link's target now holds %q", b)
	}

	linked := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(linked, MessagesDir)); err != nil {
		t.Fatal(err)
	}
	if l, err := Open(linked, nil); err == nil {
		l.Close()
		t.Error("Open took a messages directory that is a link")
	}
}

// A segment another user owns is never read: whoever owns it could have
// written anything there.
func TestLogRefusesAnotherUsersFile(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a file to another user (uid 65534)")
	}
	dir := t.TempDir()
	l := openLog(t, dir, &Options{NoSync: true})
	appendOK(t, l, &Event{Type: "app.note", Payload: map[string]string{"agent_id": "alice"}})
	l.Close()
	if err := os.Chown(filepath.Join(dir, EventsFile), 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if l, err := Open(dir, &Options{NoSync: true}); !errors.Is(err, private.ErrNotPrivate) {
		if err == nil {
			l.Close()
		}
		t.Errorf("Open of a log with a segment another user owns: %v, want it refused as not private", err)
	}
}
