package thrum_test

import (
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/internal/fault"
	"github.com/thrumhq/thrum/internal/thrumtest"
	"github.com/thrumhq/thrum/rpc"
)

// pushes records what one connection is pushed.
type pushes struct {
	mu      sync.Mutex
	claimed []rpc.ClaimedNotification
	plain   []string // notification.message IDs
	signal  chan struct{}
}

func (p *pushes) on(method string, params json.RawMessage) {
	p.mu.Lock()
	switch method {
	case rpc.NotificationClaimed:
		var n rpc.ClaimedNotification
		_ = json.Unmarshal(params, &n)
		p.claimed = append(p.claimed, n)
	case rpc.NotificationMessage:
		var n rpc.MessageNotification
		_ = json.Unmarshal(params, &n)
		p.plain = append(p.plain, n.MessageID)
	}
	p.mu.Unlock()
	select {
	case p.signal <- struct{}{}:
	default:
	}
}

// await waits until cond holds over what was pushed; the deadline only
// keeps a broken test from hanging.
func (p *pushes) await(t *testing.T, what string, cond func(claimed []rpc.ClaimedNotification, plain []string) bool) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		p.mu.Lock()
		ok := cond(p.claimed, p.plain)
		p.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-p.signal:
		case <-deadline:
			t.Fatalf("never pushed: %s", what)
		}
	}
}

// dialAs opens an RPC connection authenticated as agent, subscribed to
// what is addressed to it, and records its pushes.
func (f *fixture) dialAs(agent string) (*rpc.Client, *pushes) {
	f.t.Helper()
	p := &pushes{signal: make(chan struct{}, 1)}
	c := f.n.Dial(&rpc.ClientOptions{OnNotification: p.on})
	f.t.Cleanup(func() { c.Close() })
	if _, err := c.Auth(f.ctx, &rpc.AuthParams{AgentID: agent}); err != nil {
		f.t.Fatal(err)
	}
	if _, err := c.Subscribe(f.ctx, &rpc.SubscribeParams{MentionRole: agent}); err != nil {
		f.t.Fatal(err)
	}
	return c, p
}

func (f *fixture) isRead(n *thrum.Node, id, reader string) bool {
	f.t.Helper()
	g, err := n.GetMessage(thrum.AsAgent(f.ctx, reader), &rpc.GetMessageParams{MessageID: id})
	if err != nil {
		f.t.Fatal(err)
	}
	return g.Message.IsRead
}

// A standing claim (message.claimNext) takes the next message sent to its
// agent in the message's own commit: the connection is pushed the message
// whole, read, instead of its notification.message; the claim fires once;
// and the claim is as durable as the message — after a restart it is read
// and nobody can claim it again.
func TestClaimNextClaimsInTheSendsCommit(t *testing.T) {
	f := newFixture(t, nil)
	bob, got := f.dialAs("bob")
	if r, err := bob.ClaimNext(f.ctx, &rpc.ClaimNextParams{}); err != nil || !r.Armed {
		t.Fatalf("arm: %+v %v", r, err)
	}
	first := f.send("alice", rpc.SendMessageParams{Content: "first", Mentions: []string{"@bob"}}).MessageID
	got.await(t, "the claimed message", func(c []rpc.ClaimedNotification, _ []string) bool { return len(c) == 1 })
	c := got.claimed[0]
	if c.MessageID != first || c.Message == nil || c.Message.Body.Content != "first" || !c.Message.IsRead {
		t.Fatalf("claimed push = %+v, want the first message, whole and read", c)
	}
	// Fired once: the next message is only notified, and stays unread.
	second := f.send("alice", rpc.SendMessageParams{Content: "second", Mentions: []string{"@reviewer"}}).MessageID
	got.await(t, "the second message's notification", func(_ []rpc.ClaimedNotification, p []string) bool { return len(p) == 1 })
	if got.plain[0] != second || len(got.claimed) != 1 {
		t.Fatalf("pushed %v and %d claimed: the first must not be notified, the second not claimed", got.plain, len(got.claimed))
	}
	if !f.isRead(f.n, first, "bob") || f.isRead(f.n, second, "bob") {
		t.Fatal("the claimed message must be read, the other not")
	}
	// Nobody can claim it again; carol (same role) still reads it as hers.
	if r, err := f.n.MarkRead(f.as("bob"), &rpc.MarkReadParams{MessageIDs: []string{first}}); err != nil || r.MarkedCount != 0 {
		t.Fatalf("markRead of a claimed message: %+v %v", r, err)
	}

	if err := f.n.Close(); err != nil {
		t.Fatal(err)
	}
	n := thrumtest.OpenNodeIn(t, f.dir, nil)
	if !f.isRead(n, first, "bob") || f.isRead(n, second, "bob") {
		t.Fatal("after a restart the claim must stand and the other message stay unread")
	}
	r, err := n.MarkRead(thrum.AsAgent(f.ctx, "bob"), &rpc.MarkReadParams{MessageIDs: []string{first, second}})
	if err != nil || strings.Join(r.MarkedIDs, ",") != second {
		t.Fatalf("after a restart bob claimed %v (%v), want only the unclaimed message", r.MarkedIDs, err)
	}
}

// What a standing claim takes: a message to its agent at or above its
// floor, never its agent's own, from the claim armed first when the agent
// has several; a cancelled claim takes nothing, and a cancel says what the
// claim took.
func TestClaimNextFilterOrderAndCancel(t *testing.T) {
	f := newFixture(t, nil)
	bob1, got1 := f.dialAs("bob")
	bob2, got2 := f.dialAs("bob")
	if _, err := bob1.ClaimNext(f.ctx, &rpc.ClaimNextParams{MinPriority: rpc.PriorityHigh}); err != nil {
		t.Fatal(err)
	}
	if _, err := bob2.ClaimNext(f.ctx, &rpc.ClaimNextParams{}); err != nil {
		t.Fatal(err)
	}
	_, err := bob1.ClaimNext(f.ctx, &rpc.ClaimNextParams{MinPriority: "urgent"})
	wantCode(t, err, rpc.CodeInvalidParams, "invalid min_priority")
	// bob's own message to his role: nobody claims it for him.
	own := f.send("bob", rpc.SendMessageParams{Content: "own", Mentions: []string{"@reviewer"}}).MessageID
	// Below bob1's floor: bob2's claim takes it.
	normal := f.send("alice", rpc.SendMessageParams{Content: "normal", Mentions: []string{"@bob"}}).MessageID
	got2.await(t, "normal, claimed by the second connection", func(c []rpc.ClaimedNotification, _ []string) bool { return len(c) == 1 })
	if got2.claimed[0].MessageID != normal {
		t.Fatalf("second connection claimed %s, want %s", got2.claimed[0].MessageID, normal)
	}
	// Both armed again, bob2 first now: a high message goes to bob1, armed
	// first and still armed, and bob2 sees only its notification.
	if _, err := bob2.ClaimNext(f.ctx, &rpc.ClaimNextParams{}); err != nil {
		t.Fatal(err)
	}
	high := f.send("alice", rpc.SendMessageParams{Content: "high", Priority: rpc.PriorityHigh, Mentions: []string{"@bob"}}).MessageID
	got1.await(t, "high, claimed by the first connection", func(c []rpc.ClaimedNotification, _ []string) bool { return len(c) == 1 })
	got2.await(t, "high's notification on the second", func(_ []rpc.ClaimedNotification, p []string) bool { return len(p) == 1 })
	if got1.claimed[0].MessageID != high || got2.plain[0] != high || len(got2.claimed) != 1 {
		t.Fatalf("first claimed %+v; second notified %v and claimed %d", got1.claimed, got2.plain, len(got2.claimed))
	}
	got1.mu.Lock()
	if len(got1.plain) != 1 || got1.plain[0] != normal {
		t.Errorf("first connection notified of %v, want only normal (high was claimed for it)", got1.plain)
	}
	got1.mu.Unlock()
	// A cancel says what the claim took; a cancelled claim takes nothing.
	if r, err := bob2.ClaimNext(f.ctx, &rpc.ClaimNextParams{Cancel: true}); err != nil || r.ClaimedID != "" || r.Armed {
		t.Fatalf("cancel of an unfired claim: %+v %v", r, err)
	}
	if r, err := bob1.ClaimNext(f.ctx, &rpc.ClaimNextParams{Cancel: true}); err != nil || r.ClaimedID != high {
		t.Fatalf("cancel of a fired claim: %+v %v, want claimed_id %s", r, err, high)
	}
	last := f.send("alice", rpc.SendMessageParams{Content: "last", Mentions: []string{"@bob"}}).MessageID
	for id, want := range map[string]bool{own: true, normal: true, high: true, last: false} {
		if f.isRead(f.n, id, "bob") != want {
			t.Errorf("message %s read by bob = %v, want %v", id, !want, want)
		}
	}
}

// A send whose commit fails claims nothing: the message is not written,
// the standing claim is armed again, and the next message is claimed.
// A cancel that meets a claim in flight waits for its outcome and reports
// it, the push ahead of the reply.
func TestClaimNextFailedSendAndCancelInFlight(t *testing.T) {
	f := newFixture(t, nil)
	bob, got := f.dialAs("bob")
	if _, err := bob.ClaimNext(f.ctx, &rpc.ClaimNextParams{}); err != nil {
		t.Fatal(err)
	}
	var failing bool
	var mu sync.Mutex
	gate := make(chan struct{})
	hold := false
	defer fault.Set(func(op, path string) error {
		if op != fault.LogSync || !strings.HasPrefix(path, f.dir) {
			return nil
		}
		mu.Lock()
		fail, wait := failing, hold
		mu.Unlock()
		if wait {
			<-gate
		}
		if fail {
			return syscall.EIO
		}
		return nil
	})()
	mu.Lock()
	failing = true
	mu.Unlock()
	if _, err := f.n.SendMessage(f.as("alice"), &rpc.SendMessageParams{Content: "lost", Mentions: []string{"@bob"}}); err == nil {
		t.Fatal("a send whose fsync fails succeeded")
	}
	mu.Lock()
	failing, hold = false, true
	mu.Unlock()
	waitHealthy(t, f.n)

	// The claim is armed again: this send takes it, and is held in its
	// fsync while bob cancels.
	sent := make(chan string, 1)
	go func() {
		r, err := f.n.SendMessage(f.as("alice"), &rpc.SendMessageParams{Content: "kept", Mentions: []string{"@bob"}})
		if err != nil {
			t.Error(err)
			sent <- ""
			return
		}
		sent <- r.MessageID
	}()
	cancelled := make(chan *rpc.ClaimNextResult, 1)
	time.Sleep(20 * time.Millisecond) // the send reaches its fsync
	go func() {
		r, err := bob.ClaimNext(f.ctx, &rpc.ClaimNextParams{Cancel: true})
		if err != nil {
			t.Error(err)
		}
		cancelled <- r
	}()
	select {
	case r := <-cancelled:
		t.Fatalf("cancel answered %+v while the claim was in flight", r)
	case <-time.After(50 * time.Millisecond):
	}
	mu.Lock()
	hold = false
	mu.Unlock()
	close(gate)
	id := <-sent
	r := <-cancelled
	if r == nil || r.ClaimedID != id {
		t.Fatalf("cancel = %+v, want the message claimed in flight, %s", r, id)
	}
	got.mu.Lock()
	defer got.mu.Unlock()
	if len(got.claimed) != 1 || got.claimed[0].MessageID != id {
		t.Fatalf("claimed pushes %+v: the push must precede the cancel's reply", got.claimed)
	}
	if !f.isRead(f.n, id, "bob") {
		t.Fatal("the message claimed in flight is not read")
	}
}

// message.claimNext needs a registered caller.
func TestClaimNextNeedsACaller(t *testing.T) {
	f := newFixture(t, nil)
	c := f.n.Dial(nil)
	defer c.Close()
	_, err := c.ClaimNext(f.ctx, &rpc.ClaimNextParams{})
	var re *rpc.Error
	if !errors.As(err, &re) || re.Code == rpc.CodeInternal {
		t.Fatalf("claimNext with no identity: %v, want the caller's error", err)
	}
	t.Logf("no identity: %v", err)
}

// The message a standing claim pushes is what message.get returns to the
// reader, field for field, whatever the message holds.
func TestClaimNextPushIsMessageGet(t *testing.T) {
	f := newFixture(t, nil)
	u, err := f.n.RegisterUser(f.ctx, &rpc.RegisterUserParams{Username: "Leon-1"})
	if err != nil {
		t.Fatal(err)
	}
	bob, got := f.dialAs("bob")
	first := f.send("alice", rpc.SendMessageParams{Content: "root", Mentions: []string{"@carol"}}).MessageID
	sends := []struct {
		as string
		p  rpc.SendMessageParams
	}{
		{"alice", rpc.SendMessageParams{Content: "plain", Mentions: []string{"@bob"}}},
		{"alice", rpc.SendMessageParams{Content: "everything — ünïcode", Format: rpc.FormatPlain, Priority: rpc.PriorityHigh,
			Mentions:   []string{"@reviewer", "bob", "@everyone"},
			Scopes:     []rpc.Pair{{Type: "module", Value: "ui"}, {Type: "file", Value: "b.go"}, {Type: "module", Value: "ui"}, {Type: "file", Value: "a.go"}},
			Refs:       []rpc.Pair{{Type: "issue", Value: "9"}, {Type: rpc.RefReplyTo, Value: first}, {Type: "issue", Value: "10"}, {Type: "issue", Value: "9"}},
			Tags:       []string{"z", "a", "z"},
			Structured: json.RawMessage(" { \"b\" : [1, 2],\n \"a\" : {\"x\": null} } ")}},
		{"alice", rpc.SendMessageParams{Content: "{\"k\":1}", Format: rpc.FormatJSON, Structured: json.RawMessage("null"), Mentions: []string{"@bob"}, Tags: []string{}}},
		{u.UserID, rpc.SendMessageParams{Content: "as alice, disclosed", ActingAs: "alice", Disclose: true, Mentions: []string{"@bob"}}},
		{u.UserID, rpc.SendMessageParams{Content: "as alice, undisclosed", ActingAs: "alice", Mentions: []string{"@bob"}}},
		{"alice", rpc.SendMessageParams{Content: "acknowledge me", Mentions: []string{"@bob"}, AckWithin: "45m"}},
	}
	for i, s := range sends {
		if _, err := bob.ClaimNext(f.ctx, &rpc.ClaimNextParams{}); err != nil {
			t.Fatal(err)
		}
		id := f.send(s.as, s.p).MessageID
		got.await(t, "the claimed message", func(c []rpc.ClaimedNotification, _ []string) bool { return len(c) == i+1 })
		pushed := got.claimed[i]
		g, err := f.n.GetMessage(f.as("bob"), &rpc.GetMessageParams{MessageID: id})
		if err != nil {
			t.Fatal(err)
		}
		g.Message.Receipts = nil // message.get's alone: the recipient's copy has none
		want, _ := json.Marshal(g.Message)
		have, _ := json.Marshal(pushed.Message)
		if pushed.MessageID != id || string(have) != string(want) {
			t.Errorf("send %d: pushed\n%s\nmessage.get\n%s", i, have, want)
		}
	}
}
