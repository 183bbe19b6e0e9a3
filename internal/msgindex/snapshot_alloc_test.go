package msgindex

import (
	"bytes"
	"encoding/binary"
	"encoding/gob"
	"fmt"
	"hash/crc32"
	"runtime"
	"testing"
	"time"

	"github.com/thrumhq/thrum/eventlog"
)

// A damaged snapshot must not make the decoder allocate far more than
// the file holds: no count in it sizes anything, so a file that says it
// holds a great deal, or holds a million empty strings (refused for
// repeating them), costs no more per byte than a real snapshot of
// messages does (twice that, for a margin).
func TestSnapshotDecodeAllocatesInProportion(t *testing.T) {
	alloc := func(file []byte) (uint64, error) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		err := New().decode(file)
		runtime.ReadMemStats(&after)
		return after.TotalAlloc - before.TotalAlloc, err
	}
	withCRC := func(body []byte) []byte {
		return binary.LittleEndian.AppendUint32(body, crc32.Checksum(body, crcTable))
	}
	stream := func(vals ...any) []byte {
		var b bytes.Buffer
		enc := gob.NewEncoder(&b)
		for _, v := range vals {
			if err := enc.Encode(v); err != nil {
				t.Fatal(err)
			}
		}
		return withCRC(b.Bytes())
	}

	x := New()
	x.install(New(), nil)
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var evs []*eventlog.Event
	for i := range 20_000 {
		evs = append(evs, &eventlog.Event{Type: eventlog.TypeMessageCreate, Time: at.Add(time.Duration(i) * time.Millisecond),
			Payload: eventlog.MessageCreate{MessageID: fmt.Sprintf("msg_%026d", i), AgentID: fmt.Sprintf("agent_%02d", i%20),
				Refs: []eventlog.Pair{{Type: "mention", Value: "reviewer"}}}})
	}
	x.Apply(evs)
	var real bytes.Buffer
	if _, err := x.writeSnapshot(&real); err != nil {
		t.Fatal(err)
	}
	realFile := withCRC(real.Bytes())
	realAlloc, err := alloc(realFile)
	if err != nil {
		t.Fatal(err)
	}
	perByte := float64(realAlloc) / float64(len(realFile))

	// gob's own state (type descriptions, buffers) is a few KiB whatever
	// the file.
	const fixed = 64 << 10
	for name, file := range map[string][]byte{
		"a million empty strings":  stream(snapHeader{Version: snapVersion, Strings: 1 << 20}, snapStrings{Lens: make([]uint32, 1<<20)}),
		"a huge count of strings":  stream(snapHeader{Version: snapVersion, Strings: 1 << 40}, snapStrings{Lens: []uint32{0}}),
		"a huge count of messages": stream(snapHeader{Version: snapVersion, Messages: 1 << 40}, snapChunk{IDs: "msg_1", IDLens: []uint32{5}}),
	} {
		got, err := alloc(file)
		if err == nil {
			t.Fatalf("%s: accepted", name)
		}
		if float64(got) > 2*perByte*float64(len(file))+fixed {
			t.Errorf("%s: decoding %d bytes allocated %d (%.0f per byte; a real snapshot %.0f): %v", name, len(file), got, float64(got)/float64(len(file)), perByte, err)
		}
	}
}
