package natsync_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/thrumhq/thrum/rpc"
)

// TestStreamHoldsNoSealedBody: with a team key, what a machine publishes
// to the stream carries no body (a body sent before sealing does: the
// stream carries the log's lines as they were written), and a machine
// with the key reads the message live.
func TestStreamHoldsNoSealedBody(t *testing.T) {
	ns := startServer(t, nil)
	cfg := testConfig(ns)
	initStream(t, cfg)
	a, b := newMachine(t, "a", cfg), newMachine(t, "b", cfg)
	a.register("alice")
	b.register("bob")
	waitFor(t, 10*time.Second, "bob's registration on a", func() bool { return a.knows("bob") })
	settle(t, a, b)
	const before, token = "clear-marmot-4417", "sealed-lynx-9026"
	first := a.send("alice", "bob", "before sealing: "+before)

	ctx := context.Background()
	if _, err := a.n.NewKey(ctx, &rpc.KeyNewParams{}); err != nil {
		t.Fatal(err)
	}
	x, err := a.n.ExportKeys(ctx, &rpc.KeyExportParams{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.n.ImportKeys(ctx, &rpc.KeyImportParams{Keys: x.Keys}); err != nil {
		t.Fatal(err)
	}
	id := a.send("alice", "bob", "the code is "+token)
	waitFor(t, 10*time.Second, "both messages on b", func() bool { return b.has(first) && b.has(id) })
	r, err := b.n.GetMessage(ctx, &rpc.GetMessageParams{MessageID: id})
	if err != nil || r.Message.Body.Content != "the code is "+token {
		t.Fatalf("b reads %+v, %v", r, err)
	}

	nc, err := nats.Connect(ns.url())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	str, err := js.Stream(ctx, cfg.Stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := str.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var all []byte
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := str.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("message %d: %v", seq, err)
		}
		all = append(all, m.Data...)
	}
	if bytes.Contains(all, []byte(token)) {
		t.Fatal("the NATS stream holds a sealed body")
	}
	if !bytes.Contains(all, []byte(before)) || !bytes.Contains(all, []byte(`"sealed":{"content":"`)) {
		t.Errorf("the stream lacks the clear message or the sealed line: %d messages read", info.State.Msgs)
	}
}
