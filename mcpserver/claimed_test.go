package mcpserver_test

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/thrumhq/thrum/internal/fault"
	"github.com/thrumhq/thrum/mcpserver"
)

// armedUntil polls until a wait of srv has its standing claim armed in
// the daemon, so that the next send fills it.
func armedUntil(t *testing.T, srv *mcpserver.Server) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !mcpserver.ArmedInDaemon(srv); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the wait never armed its standing claim")
		}
	}
}

// A waiting wait_for_message gets its message claimed in the message's
// own commit: the daemon pushes it whole, and the wait returns it without
// a claim of its own (the notification never reaches the queue).
func TestWaitGetsMessageClaimedInItsCommit(t *testing.T) {
	n := newNode(t, nil)
	addAgent(t, n, "alice", "implementer", "auth")
	bob := connect(t, n, addAgent(t, n, "bob", "reviewer", "auth"), nil)
	ch := startWait(bob, args{"timeout": 30})
	armedUntil(t, bob.srv)
	id := send(t, n, "alice", "@bob", "in one commit", "high")
	m := received(t, await(t, ch), id)
	if body(t, m) != "in one commit" || m.Priority != "high" || m.From != "alice" || m.AddressedAs == nil || m.AddressedAs.Kind != "agent" {
		t.Fatalf("message = %+v", m)
	}
	if !getMessage(t, n, "bob", id).IsRead {
		t.Fatal("the returned message is not read")
	}
	if q := mcpserver.QueueIDs(bob.srv); len(q) != 0 || mcpserver.ArmedInDaemon(bob.srv) {
		t.Fatalf("queue %v, armed %v: the claimed message must not be queued, nor the claim left armed", q, mcpserver.ArmedInDaemon(bob.srv))
	}
	// The next wait arms again; a filtered one lets what is below its
	// floor through to the queue, unclaimed.
	ch = startWait(bob, args{"timeout": 30, "priority_filter": "critical"})
	armedUntil(t, bob.srv)
	low := send(t, n, "alice", "@bob", "below the floor", "normal")
	queuedUntil(t, bob.srv, low)
	crit := send(t, n, "alice", "@bob", "at the floor", "critical")
	received(t, await(t, ch), crit)
	if u := unread(t, n, "bob"); len(u) != 1 || u[0] != low {
		t.Fatalf("unread = %v, want only the message below the floor", u)
	}
}

// A long message a waiting wait_for_message's standing claim took is cut
// as every message the tool returns is (at the frame's 4,000 units, with
// a pointer to get_message), so that the result stays within what a host
// shows whole: one the host cuts is claimed and never seen.
func TestWaitCutsWhatItsStandingClaimTook(t *testing.T) {
	n := newNode(t, nil)
	addAgent(t, n, "alice", "implementer", "auth")
	bob := connect(t, n, addAgent(t, n, "bob", "reviewer", "auth"), nil)
	ch := startWait(bob, args{"timeout": 30})
	armedUntil(t, bob.srv)
	long := strings.Repeat("a long report. ", 2000) // 30,000 characters
	id := send(t, n, "alice", "@bob", long, "normal")
	r := await(t, ch)
	m := received(t, r, id)
	if !strings.Contains(m.Content, `cut="30000"`) || len(m.Content) > 5000 {
		t.Errorf("a message of 30,000 characters came whole (%d bytes framed), not cut at 4,000", len(m.Content))
	}
	raw, _ := json.Marshal(r.res.StructuredContent)
	if len(raw) > 10000 || len(resultText(r.res)) > 10000 {
		t.Errorf("a result of %d bytes, over the 10,000 a host shows whole", max(len(raw), len(resultText(r.res))))
	}
}

// A wait cancelled while its standing claim is being filled — the send
// that claims the message for it is in its fsync — claims nothing for
// itself, but the message its claim took is not lost: the next consuming
// call returns it, exactly once.
func TestCancelledWaitHandsOnWhatItsClaimTook(t *testing.T) {
	n := newNode(t, nil)
	addAgent(t, n, "alice", "implementer", "auth")
	bob := connect(t, n, addAgent(t, n, "bob", "reviewer", "auth"), nil)

	cancel, errc := waitInBackground(bob)
	armedUntil(t, bob.srv)

	// Hold the next fsync of the log until the wait is cancelled.
	var once sync.Once
	gate, inSync := make(chan struct{}), make(chan struct{})
	defer fault.Set(func(op, path string) error {
		if op == fault.LogSync && strings.HasPrefix(path, n.Dir()) {
			once.Do(func() { close(inSync) })
			<-gate
		}
		return nil
	})()
	sent := make(chan string, 1)
	go func() { sent <- send(t, n, "alice", "@bob", "claimed while the wait was cancelled", "normal") }()
	<-inSync
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("the cancelled wait returned no error")
	}
	// The server saw the cancel: the wait is cancelling its claim, which
	// the daemon answers once the send is settled.
	for deadline := time.Now().Add(10 * time.Second); mcpserver.ArmedInDaemon(bob.srv); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the server never saw the cancel")
		}
	}
	close(gate)
	id := <-sent

	// The claim went through; the message is held for the next call.
	for deadline := time.Now().Add(10 * time.Second); mcpserver.Held(bob.srv) == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("what the cancelled wait's claim took never reached the server")
		}
	}
	if !getMessage(t, n, "bob", id).IsRead {
		t.Fatal("the message claimed for the cancelled wait is not read")
	}
	got := call[mcpserver.CheckMessagesOutput](t, bob, "check_messages", nil)
	if len(got.Messages) != 1 || got.Messages[0].MessageID != id {
		t.Fatalf("check_messages = %+v, want the message the cancelled wait's claim took", got.Messages)
	}
	if again := call[mcpserver.CheckMessagesOutput](t, bob, "check_messages", nil); len(again.Messages) != 0 {
		t.Fatalf("second check_messages = %+v, want nothing: each message once", again.Messages)
	}
	out := decode[mcpserver.WaitForMessageOutput](t, "wait_for_message", await(t, startWait(bob, args{"timeout": 1})).res)
	if out.Status != "timeout" {
		t.Fatalf("wait after = %+v, want a timeout", out)
	}
}
