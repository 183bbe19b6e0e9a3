package msgindex_test

import (
	"encoding/binary"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/internal/msgindex"
	"github.com/thrumhq/thrum/store"
)

// FuzzSnapshotLoad feeds Load snapshots with a valid checksum over a
// fuzzed body, so the decoder itself is explored: it must refuse or load
// them, never panic, and a loaded index must list and take new events
// without panicking.
func FuzzSnapshotLoad(f *testing.F) {
	_, x, filters := listingFixture(f, 8)
	path := filepath.Join(f.TempDir(), "seed")
	if err := x.Save(path, []byte("fp")); err != nil {
		f.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b[:len(b)-4]) // the body; the fuzz function adds the checksum
	f.Add([]byte("thrumidx\x01\x02fp\x01\x00\x00\x00\x00\x00"))
	filters = filters[:40]
	crc := crc32.MakeTable(crc32.Castagnoli)
	p := filepath.Join(f.TempDir(), "s") // the fuzz function runs one call at a time
	f.Fuzz(func(t *testing.T, body []byte) {
		file := binary.LittleEndian.AppendUint32(append([]byte(nil), body...), crc32.Checksum(body, crc))
		if err := os.WriteFile(p, file, 0o600); err != nil {
			t.Fatal(err)
		}
		y := msgindex.New()
		if err := y.Load(p, []byte("fp")); err != nil {
			return
		}
		for _, f := range filters {
			y.List(t.Context(), f)
		}
		y.Apply([]*eventlog.Event{{Type: eventlog.TypeMessageCreate, Payload: eventlog.MessageCreate{MessageID: "msg_new", AgentID: "ann"}},
			{Type: eventlog.TypeMessageRead, Payload: eventlog.MessageRead{AgentID: "bob", MessageIDs: []string{"msg_new"}}}})
		y.List(t.Context(), store.MessageFilter{Reader: "bob", Limit: 10})
	})
}
