package eventlog

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/oklog/ulid/v2"
)

func TestNewIDStrictlyIncreasing(t *testing.T) {
	const n = 100_000
	prev := ""
	for i := 0; i < n; i++ {
		id := NewID()
		if len(id) != ulid.EncodedSize {
			t.Fatalf("NewID() = %q: length %d, want %d", id, len(id), ulid.EncodedSize)
		}
		if id <= prev {
			t.Fatalf("call %d: NewID() = %q, not greater than the previous %q", i, id, prev)
		}
		prev = id
	}
	if _, err := ulid.ParseStrict(prev); err != nil {
		t.Fatalf("ulid.ParseStrict(%q): %v", prev, err)
	}
}

func TestNewIDConcurrentUnique(t *testing.T) {
	const goroutines, per = 8, 2000
	out := make([][]string, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for range per {
				out[g] = append(out[g], NewID())
			}
		})
	}
	wg.Wait()
	seen := make(map[string]bool, goroutines*per)
	for g, ids := range out {
		for i, id := range ids {
			if seen[id] {
				t.Fatalf("duplicate ID %q", id)
			}
			seen[id] = true
			if i > 0 && id <= ids[i-1] {
				t.Fatalf("goroutine %d: ID %q not greater than its previous %q", g, id, ids[i-1])
			}
		}
	}
}

// newTestIDSource returns an idSource of its own, so that the times a test
// feeds it do not disturb the package's.
func newTestIDSource(t *testing.T) *idSource {
	t.Helper()
	var seed [32]byte
	copy(seed[:], t.Name())
	return &idSource{entropy: ulid.Monotonic(bytes.NewReader(bytes.Repeat(seed[:], 1<<12)), 0)}
}

func TestIDSourceClampsBackwardClock(t *testing.T) {
	t0 := time.Date(2025, 6, 1, 12, 0, 0, 500_000_000, time.UTC)
	tests := []struct {
		name  string
		steps []time.Duration // offsets from t0 of successive clock readings
	}{
		{"forward", []time.Duration{0, time.Millisecond, time.Second}},
		{"same instant", []time.Duration{0, 0, 0, 0}},
		{"back one hour", []time.Duration{0, -time.Hour}},
		{"back one millisecond", []time.Duration{0, -time.Millisecond, -time.Millisecond}},
		{"back one nanosecond", []time.Duration{time.Millisecond, time.Millisecond - 1}},
		{"back then forward past", []time.Duration{0, -time.Minute, -time.Second, 2 * time.Millisecond, time.Millisecond}},
		{"steadily backwards", []time.Duration{0, -1 * time.Millisecond, -2 * time.Millisecond, -3 * time.Millisecond, -time.Hour}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newTestIDSource(t)
			var prevID ulid.ULID
			var maxIn time.Time
			for i, d := range tt.steps {
				in := t0.Add(d)
				if in.After(maxIn) {
					maxIn = in
				}
				id, got := s.next(in)
				if !got.Equal(maxIn) {
					t.Errorf("step %d (clock %v): time %v, want the latest clock reading %v", i, d, got, maxIn)
				}
				if id.Time() != ulid.Timestamp(got) {
					t.Errorf("step %d: ID encodes ms %d, want %d (the returned time)", i, id.Time(), ulid.Timestamp(got))
				}
				if i > 0 && id.Compare(prevID) <= 0 {
					t.Errorf("step %d (clock %v): ID %s not greater than previous %s", i, d, id, prevID)
				}
				prevID = id
			}
		})
	}
}

// TestIDSourceEntropyOverflow drives the monotonic entropy to its maximum so
// that the next ID within the same millisecond overflows: next must step to
// the following millisecond rather than fail or go backwards.
func TestIDSourceEntropyOverflow(t *testing.T) {
	ones := bytes.Repeat([]byte{0xff}, 1<<10)
	s := &idSource{entropy: ulid.Monotonic(bytes.NewReader(ones), 1)}
	t0 := time.Date(2025, 6, 1, 12, 0, 0, 123_456_789, time.UTC)

	first, ft := s.next(t0)
	if !ft.Equal(t0) {
		t.Fatalf("first time = %v, want %v", ft, t0)
	}
	second, st := s.next(t0)
	wantT := t0.Truncate(time.Millisecond).Add(time.Millisecond)
	if !st.Equal(wantT) {
		t.Errorf("after overflow: time = %v, want the next millisecond %v", st, wantT)
	}
	if second.Compare(first) <= 0 {
		t.Errorf("after overflow: ID %s not greater than %s", second, first)
	}
	// The clock is still in the old millisecond: it must be clamped to (at
	// least) the stepped one. (This entropy overflows on every increment, so
	// it steps once more.)
	third, tt := s.next(t0)
	if tt.Before(wantT) {
		t.Errorf("clock behind the stepped time: time = %v, want at least %v", tt, wantT)
	}
	if third.Compare(second) <= 0 {
		t.Errorf("ID %s not greater than %s", third, second)
	}
}

// withMonotonicOf returns wall with the monotonic clock reading of mono, as
// time.Now would return after the wall clock was stepped back while the
// monotonic clock went on. The standard library offers no way to build such
// a time, so this reaches into time.Time's layout; it reports false if that
// layout is not the one expected.
func withMonotonicOf(wall, mono time.Time) (time.Time, bool) {
	type rawTime struct {
		wall uint64
		ext  int64
		loc  *time.Location
	}
	if unsafe.Sizeof(time.Time{}) != unsafe.Sizeof(rawTime{}) {
		return time.Time{}, false
	}
	(*rawTime)(unsafe.Pointer(&wall)).ext = (*rawTime)(unsafe.Pointer(&mono)).ext
	// Check the forgery: equal by the monotonic clock, earlier by the wall.
	if wall.Before(mono) || mono.Before(wall) || !wall.Round(0).Before(mono.Round(0)) {
		return time.Time{}, false
	}
	return wall, true
}

// TestIDSourceWallClockStepsBackWithMonotonicReading is the case the clamp
// exists for: times come from time.Now, which carry a monotonic reading, and
// the wall clock (which ULIDs encode) steps back.
func TestIDSourceWallClockStepsBackWithMonotonicReading(t *testing.T) {
	now := time.Now()
	stepped, ok := withMonotonicOf(now.Add(-time.Hour), now)
	if !ok {
		t.Skip("cannot build a time.Time whose wall clock went back: unexpected time.Time layout")
	}
	s := newTestIDSource(t)
	first, _ := s.next(now)
	second, st := s.next(stepped)
	if second.Compare(first) <= 0 {
		t.Errorf("wall clock stepped back 1h: ID %s (ms %d) not greater than %s (ms %d)", second, second.Time(), first, first.Time())
	}
	if st.Round(0).Before(now.Round(0)) {
		t.Errorf("wall clock stepped back 1h: time %v went back from %v", st, now)
	}
}

// A message ID a thrum makes packs into its ULID's 16 bytes and back,
// in the IDs' order; any other ID, the same ULID in lowercase included,
// does not pack.
func TestPackMessageID(t *testing.T) {
	a, b := "msg_"+NewID(), "msg_"+NewID()
	pa, okA := PackMessageID(a)
	pb, okB := PackMessageID(b)
	if !okA || !okB {
		t.Fatalf("%s, %s: not packed", a, b)
	}
	if got := string(AppendMessageID(nil, pa)); got != a {
		t.Fatalf("packed %s, got back %s", a, got)
	}
	if bytes.Compare(pa[:], pb[:]) >= 0 {
		t.Fatalf("%s < %s, but their packed bytes are not in that order", a, b)
	}
	for _, id := range []string{"msg_1", "m", "thr_" + a[4:], "msg_" + strings.ToLower(a[4:]), "msg_8" + a[5:], a + "0", "msg_" + a[4:29] + "!"} {
		if _, ok := PackMessageID(id); ok {
			t.Errorf("%q packed", id)
		}
	}
}
