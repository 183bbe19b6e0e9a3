package inbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/inbox"
	"github.com/thrumhq/thrum/internal/thrumtest"
	"github.com/thrumhq/thrum/rpc"
)

// TestLazyInboxWaitsForItsDaemon: a Lazy inbox starts with no daemon to
// reach, says why an operation finds none, connects when one answers,
// and a wait then gets what was sent while it had none.
func TestLazyInboxWaitsForItsDaemon(t *testing.T) {
	n := thrumtest.OpenNode(t, nil)
	thrumtest.Register(t, n, "alice", "implementer", "auth")
	bob := thrumtest.Register(t, n, "bob", "reviewer", "auth")
	var up atomic.Bool
	dial := func(_ context.Context, onNote func(string, json.RawMessage)) (*rpc.Client, error) {
		if !up.Load() {
			return nil, errors.New("no daemon on /run/test.sock")
		}
		return n.Dial(&rpc.ClientOptions{OnNotification: onNote}), nil
	}
	ib, err := inbox.New(context.Background(), dial, inbox.Identity{AgentID: bob.ID, Role: bob.Role, Token: bob.Token}, &inbox.Options{Lazy: true})
	if err != nil {
		t.Fatalf("a lazy inbox with no daemon: %v", err)
	}
	defer ib.Close()
	_, err = ib.Conn(context.Background())
	if !errors.Is(err, inbox.ErrUnreachable) || !strings.Contains(err.Error(), "no daemon on /run/test.sock") {
		t.Fatalf("an operation with no daemon: %v, want ErrUnreachable saying why", err)
	}
	r, err := n.SendMessage(thrum.AsAgent(context.Background(), "alice"), &rpc.SendMessageParams{Content: "while down", Mentions: []string{"@bob"}})
	if err != nil {
		t.Fatal(err)
	}
	up.Store(true)
	m, err := ib.Wait(context.Background(), inbox.WaitParams{Timeout: 10 * time.Second, Via: rpc.ViaWaitForMessage})
	if err != nil || m.Message == nil || m.Message.MessageID != r.MessageID {
		t.Fatalf("wait once the daemon answers: %+v, %v; want %s", m, err, r.MessageID)
	}
}

// TestWakeDoorbellRingsOncePerBatch: with a settle, messages sent
// together ring once, and the ring's line names only the count, the
// newest ID and its sender — never a subject or body; the next batch
// rings again with its own newest ID. Nothing is marked read.
func TestWakeDoorbellRingsOncePerBatch(t *testing.T) {
	ib, n, send := open(t)
	var mu sync.Mutex
	var rings []string
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- ib.Doorbells(ctx, inbox.DoorbellSettle, func(d *inbox.Doorbell) error {
			mu.Lock()
			defer mu.Unlock()
			rings = append(rings, d.Wake())
			return nil
		})
	}()
	got := func(want int) []string {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			mu.Lock()
			r := append([]string(nil), rings...)
			mu.Unlock()
			if len(r) >= want || time.Now().After(deadline) {
				time.Sleep(2 * inbox.DoorbellEvery) // and no more come
				mu.Lock()
				defer mu.Unlock()
				return append([]string(nil), rings...)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	var last string
	for i := range 3 {
		last = send(fmt.Sprintf("secret body %d</thrum-message>", i))
	}
	r := got(1)
	want := fmt.Sprintf("thrum: 3 new messages (newest %s from alice); call check_messages", last)
	if len(r) != 1 || r[0] != want {
		t.Fatalf("rings for a batch of 3 = %q, want one: %q", r, want)
	}
	next := send("another secret")
	r = got(2)
	if want := fmt.Sprintf("thrum: 4 new messages (newest %s from alice); call check_messages", next); len(r) != 2 || r[1] != want {
		t.Fatalf("rings after one more = %q, want a second: %q", r, want)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if u := unread(t, n); u != 4 {
		t.Errorf("after the rings %d unread, want 4", u)
	}
}
