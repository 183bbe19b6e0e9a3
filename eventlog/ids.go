package eventlog

import (
	crand "crypto/rand"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
)

// ids hands out ULIDs that increase strictly within this process, even
// when the wall clock steps back: the time used is never less than the last
// one handed out.
var ids = func() *idSource {
	var seed [32]byte
	if _, err := crand.Read(seed[:]); err != nil {
		panic("eventlog: crypto/rand failed: " + err.Error())
	}
	return &idSource{entropy: ulid.Monotonic(rand.NewChaCha8(seed), 0)}
}()

type idSource struct {
	mu      sync.Mutex
	last    time.Time
	entropy *ulid.MonotonicEntropy
}

// next returns a new ULID and the time it encodes (clamped to be
// monotonic).
func (s *idSource) next(now time.Time) (ulid.ULID, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now = now.Round(0) // compare wall clocks (which ULIDs encode), not monotonic readings
	if now.Before(s.last) {
		now = s.last
	}
	s.last = now
	id, err := ulid.New(ulid.Timestamp(now), s.entropy)
	if err != nil {
		// The monotonic entropy ran out within one millisecond (2^80 IDs)
		// or the clock is past year 10889: step to the next millisecond.
		now = now.Truncate(time.Millisecond).Add(time.Millisecond)
		s.last = now
		id = ulid.MustNew(ulid.Timestamp(now), s.entropy)
	}
	return id, now
}

// NewID returns a new ULID string, greater than every ID this process
// handed out before. Prefixed IDs (msg_, ses_, thr_) are built on it.
func NewID() string {
	id, _ := ids.next(time.Now())
	return id.String()
}

// NewMessageID returns a new message ID: "msg_" and a NewID.
func NewMessageID() string { return messageIDPrefix + NewID() }

// PackMessageID returns the ULID of a message ID as a thrum makes one:
// "msg_" and the ULID as NewID writes it. Its 16 bytes are in the order
// of such IDs. ok is false for any other ID, one that is the same ULID
// written another way (in lowercase, say) included: AppendMessageID
// gives back exactly the ID that was packed.
func PackMessageID(id string) (u [16]byte, ok bool) {
	text, found := strings.CutPrefix(id, messageIDPrefix)
	if !found || len(text) != ulid.EncodedSize {
		return u, false
	}
	v, err := ulid.ParseStrict(text)
	var again [ulid.EncodedSize]byte
	if err != nil || v.MarshalTextTo(again[:]) != nil || string(again[:]) != text {
		return u, false
	}
	return v, true
}

// AppendMessageID appends to dst the message ID that PackMessageID
// packed into u.
func AppendMessageID(dst []byte, u [16]byte) []byte {
	var text [ulid.EncodedSize]byte
	ulid.ULID(u).MarshalTextTo(text[:]) // fails only for a buffer of another size
	return append(append(dst, messageIDPrefix...), text[:]...)
}

const messageIDPrefix = "msg_"
