package inbox_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/thrumhq/thrum/inbox"
	"github.com/thrumhq/thrum/internal/fault"
	"github.com/thrumhq/thrum/rpc"
)

// armed polls until ib's wait has its standing claim armed in the daemon,
// so that the next send fills it.
func armed(t *testing.T, ib *inbox.Inbox) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !ib.Stats().Armed; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the wait never armed its standing claim")
		}
	}
}

// oneLineCut says whether content is a frame on one line whose body was
// cut.
func oneLineCut(content string) bool {
	return !strings.Contains(content, "\n") && strings.Contains(content, ` cut="`)
}

// TestStandingClaimFramesInTheWaitsShape: a message a standing claim
// took is framed as the wait asked (`thrum wait` asks for one line, and
// wait_for_message for a cut body), not whole.
func TestStandingClaimFramesInTheWaitsShape(t *testing.T) {
	ib, _, send := open(t)
	got := make(chan *inbox.WaitResult, 1)
	go func() {
		r, err := ib.Wait(context.Background(), inbox.WaitParams{Timeout: 30 * time.Second, Via: rpc.ViaStream,
			Shape: inbox.Shape{BodyMax: 10, OneLine: true}})
		if err != nil {
			t.Error(err)
		}
		got <- r
	}()
	armed(t, ib)
	id := send("line one\nline two and a long rest of the body")
	r := <-got
	if r == nil || r.Status != inbox.StatusReceived || r.Message == nil || r.Message.MessageID != id {
		t.Fatalf("wait = %+v, want the message sent", r)
	}
	if !oneLineCut(r.Message.Content) {
		t.Errorf("the message is not in the wait's shape (one line, its body cut at 10):\n%s", r.Message.Content)
	}
}

// TestHeldMessagesTakeTheCheckersShapeAndLimits: what a claim took for a
// caller that left is held, and the next Check frames it in its own
// shape and returns no more of it than its limits let through; the rest
// stays held, counted in Remaining, for the call after.
func TestHeldMessagesTakeTheCheckersShapeAndLimits(t *testing.T) {
	ib, n, send := open(t)
	var ids []string
	for _, s := range []string{"first\nof three, a long one", "second\nof three, a long one", "third\nof three, a long one"} {
		ids = append(ids, send(s))
	}
	// Hold the claim's fsync until its caller has left.
	var once sync.Once
	gate, inSync := make(chan struct{}), make(chan struct{})
	defer fault.Set(func(op, path string) error {
		if op == fault.LogSync && strings.HasPrefix(path, n.Dir()) {
			once.Do(func() { close(inSync) })
			<-gate
		}
		return nil
	})()
	ctx, cancel := context.WithCancel(context.Background())
	left := make(chan error, 1)
	go func() {
		_, err := ib.Check(ctx, inbox.CheckParams{Limit: 10, Via: rpc.ViaCheckMessages, Shape: inbox.Shape{BodyMax: inbox.Whole}})
		left <- err
	}()
	<-inSync
	cancel()
	close(gate)
	if err := <-left; err == nil {
		t.Fatal("a check whose caller left returned no error")
	}
	if h := ib.Stats().Held; h != 3 {
		t.Fatalf("held %d, want the 3 messages the claim took", h)
	}
	shape := inbox.Shape{BodyMax: 10, OneLine: true}
	r, err := ib.Check(context.Background(), inbox.CheckParams{Limit: 10, Via: rpc.ViaCheckMessages, Shape: shape, ResultMax: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Messages) != 1 || r.Messages[0].MessageID != ids[0] || r.Remaining != 2 {
		t.Fatalf("check within a result of 1 byte = %d messages, remaining %d; want the oldest alone, 2 remaining", len(r.Messages), r.Remaining)
	}
	if !oneLineCut(r.Messages[0].Content) {
		t.Errorf("a held message is not in the check's shape:\n%s", r.Messages[0].Content)
	}
	r, err = ib.Check(context.Background(), inbox.CheckParams{Limit: 10, Via: rpc.ViaCheckMessages, Shape: shape})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Messages) != 2 || r.Messages[0].MessageID != ids[1] || r.Messages[1].MessageID != ids[2] || r.Remaining != 0 {
		t.Fatalf("the next check = %+v, want the other two, in order", r)
	}
}
