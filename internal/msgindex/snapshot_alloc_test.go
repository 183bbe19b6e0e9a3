package msgindex

import (
	"encoding/binary"
	"hash/crc32"
	"runtime"
	"testing"
)

// A damaged snapshot must not make the decoder allocate far more than
// the file holds: a count is checked against the bytes left, but a map
// sized by that count costs some 50 bytes per entry of one byte. A file
// of a million empty strings (a valid checksum, refused for repeating
// them) must not cost more than the messages of a file its size (about 12×)
// do, with a margin.
func TestSnapshotDecodeAllocatesInProportion(t *testing.T) {
	const n = 1 << 20
	body := []byte(snapMagic)
	body = binary.AppendUvarint(body, snapVersion)
	for range 7 { // positions, IDs' length, messages, order, by ID, reads, early: none
		body = binary.AppendUvarint(body, 0)
	}
	body = binary.AppendUvarint(body, n) // strings: n empty ones
	body = append(body, make([]byte, n)...)
	file := binary.LittleEndian.AppendUint32(body, crc32.Checksum(body, crcTable))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	err := New().decode(file)
	runtime.ReadMemStats(&after)
	if err == nil {
		t.Fatal("a snapshot of repeated strings was accepted")
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 24*uint64(len(file)) {
		t.Fatalf("decoding a %d-byte snapshot allocated %d bytes (%.0f×): %v", len(file), got, float64(got)/float64(len(file)), err)
	}
}
