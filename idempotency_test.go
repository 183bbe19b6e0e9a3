package thrum_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/internal/thrumtest"
	"github.com/thrumhq/thrum/rpc"
)

// TestIdempotencyKey checks that a repeated send or thread.create with the
// same key returns the first result and writes nothing — concurrently,
// across a restart and across a rebuild of the projection — and that the
// key expires after IdempotencyWindow.
func TestIdempotencyKey(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	var skew atomic.Int64
	open := func() *thrum.Node {
		return thrumtest.OpenNodeIn(t, dir, &thrum.Options{NoSync: true, Now: func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }})
	}
	n := open()
	thrumtest.Register(t, n, "alice", "dev", "m")
	thrumtest.Register(t, n, "bob", "dev", "m")
	alice := thrum.AsAgent(ctx, "alice")
	count := func() int {
		t.Helper()
		r, err := n.ListMessages(alice, &rpc.ListMessagesParams{})
		if err != nil {
			t.Fatal(err)
		}
		return r.Total
	}

	// Eight concurrent retries of one send: one message.
	var wg sync.WaitGroup
	results := make([]*rpc.SendMessageResult, 8)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := n.SendMessage(alice, &rpc.SendMessageParams{Content: "once", Mentions: []string{"@bob"}, IdempotencyKey: "k1"})
			if err != nil {
				t.Error(err)
				return
			}
			results[i] = r
		}()
	}
	wg.Wait()
	first := results[0]
	for _, r := range results {
		if r == nil || r.MessageID != first.MessageID || r.CreatedAt != first.CreatedAt || len(r.Recipients) != 1 {
			t.Fatalf("retries disagree: %+v vs %+v", r, first)
		}
	}
	if c := count(); c != 1 {
		t.Fatalf("%d messages after 8 sends with one key", c)
	}
	// The same key from another caller is another key.
	bobs, err := n.SendMessage(thrum.AsAgent(ctx, "bob"), &rpc.SendMessageParams{Content: "mine", IdempotencyKey: "k1"})
	if err != nil || bobs.MessageID == first.MessageID {
		t.Fatalf("bob's send with alice's key: %+v %v", bobs, err)
	}

	th, err := n.CreateThread(alice, &rpc.CreateThreadParams{Title: "t", Recipient: "@bob", Message: &rpc.ThreadMessage{Content: "hi"}, IdempotencyKey: "k2"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.CreateThread(alice, &rpc.CreateThreadParams{Title: "x", IdempotencyKey: "k1"}); err == nil {
		t.Fatal("a send's key was accepted by thread.create")
	} else {
		wantCode(t, err, rpc.CodeIdempotencyKey, "message "+first.MessageID)
	}
	if _, err := n.SendMessage(alice, &rpc.SendMessageParams{Content: "x", IdempotencyKey: strings.Repeat("k", 129)}); err == nil {
		t.Fatal("a 129-byte key was accepted")
	} else {
		wantCode(t, err, rpc.CodeInvalidParams, "idempotency_key is too long")
	}

	check := func(when string) {
		t.Helper()
		r, err := n.SendMessage(alice, &rpc.SendMessageParams{Content: "once", Mentions: []string{"bob"}, IdempotencyKey: "k1"})
		if err != nil || r.MessageID != first.MessageID {
			t.Fatalf("%s: send retry = %+v %v, want %s", when, r, err, first.MessageID)
		}
		tr, err := n.CreateThread(alice, &rpc.CreateThreadParams{Title: "t", Recipient: "@bob", Message: &rpc.ThreadMessage{Content: "hi"}, IdempotencyKey: "k2"})
		if err != nil || *tr != *th {
			t.Fatalf("%s: thread retry = %+v %v, want %+v", when, tr, err, th)
		}
		if c := count(); c != 3 {
			t.Fatalf("%s: %d messages, want 3", when, c)
		}
	}
	check("live")
	// The key reused for a different request is refused, naming the
	// first message, and stores nothing: whatever differs.
	for what, p := range map[string]*rpc.SendMessageParams{
		"content":    {Content: "twice", Mentions: []string{"@bob"}},
		"recipients": {Content: "once", Mentions: []string{"@alice"}},
		"none":       {Content: "once"},
		"priority":   {Content: "once", Mentions: []string{"@bob"}, Priority: rpc.PriorityHigh},
		"tags":       {Content: "once", Mentions: []string{"@bob"}, Tags: []string{"x"}},
		"format":     {Content: "once", Mentions: []string{"@bob"}, Format: rpc.FormatPlain},
		"ack":        {Content: "once", Mentions: []string{"@bob"}, AckWithin: "1h"},
		"thread":     {Content: "once", Mentions: []string{"@bob"}, ThreadID: th.ThreadID},
	} {
		p.IdempotencyKey = "k1"
		_, err := n.SendMessage(alice, p)
		wantCode(t, err, rpc.CodeIdempotencyKey, first.MessageID)
		if what != "none" && what != "thread" && !strings.Contains(err.Error(), map[string]string{"content": "content", "recipients": "recipients", "priority": "priority", "tags": "tags", "format": "format", "ack": "ack_required"}[what]) {
			t.Errorf("%s: %v does not say what differs", what, err)
		}
	}
	for _, p := range []*rpc.CreateThreadParams{
		{Title: "other", Recipient: "@bob", Message: &rpc.ThreadMessage{Content: "hi"}},
		{Title: "t", Recipient: "@alice", Message: &rpc.ThreadMessage{Content: "hi"}},
		{Title: "t", Recipient: "@bob", Message: &rpc.ThreadMessage{Content: "bye"}},
		{Title: "t"},
	} {
		p.IdempotencyKey = "k2"
		_, err := n.CreateThread(alice, p)
		wantCode(t, err, rpc.CodeIdempotencyKey, th.ThreadID)
	}
	// Mentions given in another order, with or without "@", are the same.
	if r, err := n.SendMessage(alice, &rpc.SendMessageParams{Content: "once", Mentions: []string{"bob", "@bob"}, IdempotencyKey: "k1"}); err != nil || r.MessageID != first.MessageID {
		t.Fatalf("the same send, mentions spelled otherwise: %+v %v", r, err)
	}
	check("after refused reuses")
	n.Close()
	n = open()
	check("after a restart")
	n.Close()
	for _, s := range []string{"", "-wal", "-shm"} {
		os.Remove(filepath.Join(dir, thrum.DefaultDBName+s))
	}
	n = open()
	check("after a rebuild")

	skew.Store(int64(thrum.IdempotencyWindow + time.Minute))
	r, err := n.SendMessage(alice, &rpc.SendMessageParams{Content: "later", IdempotencyKey: "k1"})
	if err != nil || r.MessageID == first.MessageID {
		t.Fatalf("past the window: %+v %v, want a new message", r, err)
	}
}
