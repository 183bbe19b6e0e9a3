package msgindex

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/gob"
	"hash/crc32"
	"testing"
	"time"

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/store"
)

// FuzzSnapshotDecode feeds the snapshot decoder bodies with a valid
// checksum, so the decoder itself is explored (a damaged checksum is
// refused before it): it must refuse or accept them, never panic, and an
// accepted index must list and take new events without panicking.
func FuzzSnapshotDecode(f *testing.F) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	x := New()
	x.install(New(), nil)
	x.Apply([]*eventlog.Event{
		{Type: eventlog.TypeMessageRead, Time: at, Payload: eventlog.MessageRead{AgentID: "bob", MessageIDs: []string{"msg_4"}}},
		{Type: eventlog.TypeMessageCreate, Time: at, Payload: eventlog.MessageCreate{MessageID: "msg_1", AgentID: "ann", ThreadID: "thr_1",
			Scopes: []eventlog.Pair{{Type: "module", Value: "m"}}, Refs: []eventlog.Pair{{Type: "mention", Value: "bob"}}}},
		{Type: eventlog.TypeMessageCreate, Time: at.Add(time.Second), Payload: eventlog.MessageCreate{MessageID: "msg_2", AgentID: "bob", ActingAs: "user:leo"}},
		{Type: eventlog.TypeMessageCreate, Time: at, Payload: eventlog.MessageCreate{MessageID: "msg_3", AgentID: "cat",
			Refs: []eventlog.Pair{{Type: "mention", Value: "reviewer"}, {Type: "issue", Value: "7"}}}},
		{Type: eventlog.TypeMessageEdit, Time: at.Add(2 * time.Second), Payload: eventlog.MessageEdit{MessageID: "msg_1", AgentID: "ann"}},
		{Type: eventlog.TypeMessageDelete, Time: at.Add(3 * time.Second), Payload: eventlog.MessageDelete{MessageID: "msg_3", AgentID: "cat"}},
		{Type: eventlog.TypeMessageRead, Time: at, Payload: eventlog.MessageRead{AgentID: "bob", MessageIDs: []string{"msg_1", "msg_3"}}},
	})
	x.Apply([]*eventlog.Event{{Type: eventlog.TypeMessageCreate, Time: at, Shard: "ann", Offset: 120, ID: "evt_1",
		Payload: eventlog.MessageCreate{MessageID: "msg_5", AgentID: "ann"}}})
	var seed bytes.Buffer
	if _, err := x.writeSnapshot(&seed); err != nil {
		f.Fatal(err)
	}
	f.Add(seed.Bytes()) // the body; the fuzz function adds the checksum
	var header bytes.Buffer
	if err := gob.NewEncoder(&header).Encode(snapHeader{Version: snapVersion, Messages: 1}); err != nil {
		f.Fatal(err)
	}
	f.Add(header.Bytes()) // a header whose messages never come
	filters := []store.MessageFilter{
		{Limit: 10},
		{Reader: "bob", Unread: true, Limit: 10},
		{Mentions: []string{"bob", "reviewer"}, Reader: "bob", Limit: 10, Asc: true},
		{ThreadID: "thr_1", AuthorID: "ann", IncludeDeleted: true, SortBy: "updated_at", Limit: 10},
		{Scope: &eventlog.Pair{Type: "module", Value: "m"}, Ref: &eventlog.Pair{Type: "issue", Value: "7"}, Offset: 1, Limit: 10},
	}
	crc := crc32.MakeTable(crc32.Castagnoli)
	f.Fuzz(func(t *testing.T, body []byte) {
		file := binary.LittleEndian.AppendUint32(append([]byte(nil), body...), crc32.Checksum(body, crc))
		b := New()
		if err := b.decode(file); err != nil {
			return
		}
		y := New()
		y.install(b, nil)
		for _, f := range filters {
			y.List(context.Background(), f)
		}
		y.Apply([]*eventlog.Event{{Type: eventlog.TypeMessageCreate, Time: at, Payload: eventlog.MessageCreate{MessageID: "msg_new", AgentID: "ann"}},
			{Type: eventlog.TypeMessageRead, Time: at, Payload: eventlog.MessageRead{AgentID: "bob", MessageIDs: []string{"msg_new", "msg_4"}}}})
		y.List(context.Background(), store.MessageFilter{Reader: "bob", Limit: 10})
	})
}
