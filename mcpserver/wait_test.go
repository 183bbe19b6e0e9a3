package mcpserver_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/inbox"
	"github.com/thrumhq/thrum/mcpserver"
	"github.com/thrumhq/thrum/rpc"
)

type waitResult struct {
	res *mcp.CallToolResult
	err error
	at  time.Time // when the call returned
}

// startWait calls wait_for_message in a goroutine.
func startWait(a *agentClient, in args) <-chan waitResult {
	ch := make(chan waitResult, 1)
	go func() {
		res, err := a.rawCall(context.Background(), "wait_for_message", in)
		ch <- waitResult{res, err, time.Now()}
	}()
	return ch
}

// await takes a wait's result; the deadline only keeps a broken test from
// hanging, it is not a timing assertion.
func await(t testing.TB, ch <-chan waitResult) waitResult {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("wait_for_message: protocol error: %v", r.err)
		}
		return r
	case <-time.After(60 * time.Second):
		t.Fatal("wait_for_message did not return")
	}
	panic("unreachable")
}

// received checks a wait's result is the message id.
func received(t testing.TB, r waitResult, id string) inbox.Message {
	t.Helper()
	out := decode[mcpserver.WaitForMessageOutput](t, "wait_for_message", r.res)
	if out.Status != "message_received" || out.Message == nil {
		t.Fatalf("wait_for_message = %+v, want message %s", out, id)
	}
	if out.Message.MessageID != id {
		t.Fatalf("wait_for_message returned %s (%q), want %s", out.Message.MessageID, out.Message.Content, id)
	}
	return *out.Message
}

// waitFor calls wait_for_message and expects message id.
func waitFor(t testing.TB, a *agentClient, in args, id string) inbox.Message {
	t.Helper()
	return received(t, await(t, startWait(a, in)), id)
}

// queuedUntil polls until srv's queue holds the notification of id: the
// pushes come in commit order, so everything sent before id is in too.
func queuedUntil(t testing.TB, srv *mcpserver.Server, id string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !slices.Contains(mcpserver.QueueIDs(srv), id) {
		if time.Now().After(deadline) {
			t.Fatalf("the notification of %s never reached the queue", id)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestWaitForMessageReceives(t *testing.T) {
	n := newNode(t, nil)
	alice := connect(t, n, addAgent(t, n, "alice", "implementer", "auth"), nil)
	bob := connect(t, n, addAgent(t, n, "bob", "reviewer", "auth"), nil)

	ch := startWait(bob, args{"timeout": 30})
	time.Sleep(20 * time.Millisecond) // let the wait block first (only to make the latency figure meaningful)
	start := time.Now()
	sent := call[mcpserver.SendMessageOutput](t, alice, "send_message", args{"to": "@bob", "content": "wake up", "priority": "high"})
	r := await(t, ch)
	t.Logf("send_message call → wait_for_message return: %v", r.at.Sub(start))
	m := received(t, r, sent.MessageID)
	if m.From != "alice" || body(t, m) != "wake up" || m.Priority != "high" {
		t.Errorf("message = %+v", m)
	}
	if _, err := time.Parse(time.RFC3339Nano, m.Timestamp); err != nil {
		t.Errorf("timestamp %q: %v", m.Timestamp, err)
	}
	out := decode[mcpserver.WaitForMessageOutput](t, "wait_for_message", r.res)
	if out.WaitedSeconds < 0 || out.WaitedSeconds > 30 {
		t.Errorf("waited_seconds = %d", out.WaitedSeconds)
	}
	// wait_for_message marks what it returns read.
	if got := call[mcpserver.CheckMessagesOutput](t, bob, "check_messages", nil); got.Status != "empty" {
		t.Errorf("check_messages after the wait = %+v, want empty", got)
	}
	if getMessage(t, n, "bob", sent.MessageID).IsRead != true {
		t.Error("the returned message is not read")
	}

	// Addressed by role, by group and to everyone, each wakes the waiter.
	call[mcpserver.CreateGroupOutput](t, alice, "create_group", args{"name": "backend"})
	call[mcpserver.GroupMemberOutput](t, alice, "add_group_member", args{"group": "backend", "member_type": "role", "member_id": "reviewer"})
	for _, to := range []string{"@reviewer", "@backend", "@everyone", "agent:reviewer:0000000000"} {
		ch := startWait(bob, args{"timeout": 30})
		sent := call[mcpserver.SendMessageOutput](t, alice, "send_message", args{"to": to, "content": "via " + to})
		if m := received(t, await(t, ch), sent.MessageID); body(t, m) != "via "+to {
			t.Errorf("via %s: got %+v", to, m)
		}
	}
}

// TestWaitForMessageQueued checks that messages arriving while nobody
// waits are queued and returned oldest first.
func TestWaitForMessageQueued(t *testing.T) {
	n := newNode(t, nil)
	addAgent(t, n, "alice", "implementer", "auth")
	bob := connect(t, n, addAgent(t, n, "bob", "reviewer", "auth"), nil)

	ids := []string{
		send(t, n, "alice", "@bob", "one", "normal"),
		send(t, n, "alice", "@reviewer", "two", "low"),
		send(t, n, "alice", "@everyone", "three", "critical"),
	}
	queuedUntil(t, bob.srv, ids[2])
	for i, id := range ids {
		m := waitFor(t, bob, args{"timeout": 5}, id)
		if body(t, m) != []string{"one", "two", "three"}[i] {
			t.Errorf("wait %d: %+v", i, m)
		}
	}
	if q := mcpserver.QueueLen(bob.srv); q != 0 {
		t.Errorf("queue holds %d after taking everything", q)
	}
}

func TestWaitForMessageTimeout(t *testing.T) {
	t.Parallel() // waits out timeouts: overlap them
	n := newNode(t, nil)
	bob := connect(t, n, addAgent(t, n, "bob", "reviewer", "auth"), nil)

	start := time.Now()
	res, err := bob.rawCall(context.Background(), "wait_for_message", args{"timeout": 1})
	if err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	out := decode[mcpserver.WaitForMessageOutput](t, "wait_for_message", res)
	if out.Status != "timeout" || out.Message != nil || out.WaitedSeconds != 1 {
		t.Errorf("wait_for_message(timeout 1) = %+v, want timeout, no message, waited_seconds 1", out)
	}
	if m := structured(t, res); m["message"] != nil {
		t.Errorf("message on timeout = %v, want null", m["message"])
	} else if _, ok := m["message"]; !ok {
		t.Error("timeout result has no message key (want null)")
	}
	if elapsed < time.Second {
		t.Errorf("a 1 s wait returned after %v", elapsed)
	}
}

// TestWaitForMessageOneWaiter starts two waits at once: exactly one is
// refused, and the other still gets the next message.
func TestWaitForMessageOneWaiter(t *testing.T) {
	n := newNode(t, nil)
	addAgent(t, n, "alice", "implementer", "auth")
	bob := connect(t, n, addAgent(t, n, "bob", "reviewer", "auth"), nil)

	a, b := startWait(bob, args{"timeout": 30}), startWait(bob, args{"timeout": 30})
	var first waitResult
	var other <-chan waitResult
	select {
	case first = <-a:
		other = b
	case first = <-b:
		other = a
	case <-time.After(30 * time.Second):
		t.Fatal("neither concurrent wait returned: the second should be refused at once")
	}
	if first.err != nil {
		t.Fatalf("refused wait: protocol error %v, want a tool error", first.err)
	}
	checkToolErr(t, "second wait_for_message", first.res, "only one may wait")

	id := send(t, n, "alice", "@bob", "for the one waiter", "normal")
	received(t, await(t, other), id)

	// Once the first wait is over, waiting again is fine.
	id = send(t, n, "alice", "@bob", "again", "normal")
	waitFor(t, bob, args{"timeout": 5}, id)
}

func TestWaitForMessagePriorityFilter(t *testing.T) {
	n := newNode(t, nil)
	addAgent(t, n, "alice", "implementer", "auth")
	bob := connect(t, n, addAgent(t, n, "bob", "reviewer", "auth"), nil)

	for _, tc := range []struct {
		filter string
		sends  []string // priorities, in order
		want   int      // index of the one returned
	}{
		{"critical", []string{"low", "normal", "high", "critical"}, 3},
		{"high_and_above", []string{"low", "normal", "high", "critical"}, 2},
		{"normal_and_above", []string{"low", "normal", "high"}, 1},
		{"all", []string{"low", "critical"}, 0},
		{"", []string{"low", "critical"}, 0},
	} {
		t.Run("filter "+tc.filter, func(t *testing.T) {
			var ids []string
			for _, p := range tc.sends {
				ids = append(ids, send(t, n, "alice", "@bob", p+" for "+tc.filter, p))
			}
			queuedUntil(t, bob.srv, ids[len(ids)-1])
			in := args{"timeout": 5}
			if tc.filter != "" {
				in["priority_filter"] = tc.filter
			}
			m := waitFor(t, bob, in, ids[tc.want])
			if m.Priority != tc.sends[tc.want] {
				t.Errorf("returned priority %s", m.Priority)
			}
			// What the filter passed over stays unread for check_messages.
			var skipped []string
			for i, id := range ids {
				if i < tc.want {
					skipped = append(skipped, id)
				}
			}
			got := call[mcpserver.CheckMessagesOutput](t, bob, "check_messages", nil)
			var left []string
			for _, m := range got.Messages {
				left = append(left, m.MessageID)
			}
			rest := ids[tc.want+1:]
			if want := append(skipped, rest...); !slices.Equal(left, want) {
				t.Errorf("check_messages after the wait = %v, want %v (the filtered ones and the later ones)", left, want)
			}
		})
	}

	// A blocked filtered wait lets normal messages go by and returns the
	// critical one.
	ch := startWait(bob, args{"timeout": 30, "priority_filter": "critical"})
	normal := send(t, n, "alice", "@bob", "not urgent", "normal")
	critical := send(t, n, "alice", "@reviewer", "urgent!", "critical")
	if m := received(t, await(t, ch), critical); m.Priority != "critical" || body(t, m) != "urgent!" {
		t.Errorf("got %+v", m)
	}
	got := call[mcpserver.CheckMessagesOutput](t, bob, "check_messages", nil)
	if len(got.Messages) != 1 || got.Messages[0].MessageID != normal {
		t.Errorf("check_messages = %+v, want only the normal message %s", got.Messages, normal)
	}
}

// TestWaitForMessageQueueLimit pushes 1100 notifications at a server
// nobody is waiting on: the queue keeps the newest 1000, dropping the
// oldest 100 (which stay unread for check_messages).
func TestWaitForMessageQueueLimit(t *testing.T) {
	t.Parallel() // waits out timeouts: overlap them
	// A roomy node-side subscriber buffer, so the node never drops the
	// connection for being slow: the queue under test is the MCP server's.
	// No fsync: 2,100 durable writes would only make the test slow.
	n := newNode(t, &thrum.Options{SubscriberQueue: 4096, NoSync: true})
	addAgent(t, n, "alice", "implementer", "auth")
	bob := connect(t, n, addAgent(t, n, "bob", "reviewer", "auth"), nil)

	const total = 1100
	start := time.Now()
	ids := make([]string, total)
	for i := range ids {
		ids[i] = send(t, n, "alice", "@bob", fmt.Sprintf("m%04d", i), "normal")
	}
	t.Logf("%d sends in %v", total, time.Since(start))
	queuedUntil(t, bob.srv, ids[total-1])
	if got := mcpserver.QueueIDs(bob.srv); !slices.Equal(got, ids[total-mcpserver.DefaultQueueSize:]) {
		t.Fatalf("queue holds %d notifications (first %v), want the newest %d", len(got), got[:1], mcpserver.DefaultQueueSize)
	}
	if d := mcpserver.QueueDropped(bob.srv); d != total-mcpserver.DefaultQueueSize {
		t.Errorf("dropped %d, want %d", d, total-mcpserver.DefaultQueueSize)
	}

	// Take the queue with wait_for_message. The first waits return the
	// oldest kept, in order. The middle of the queue is then read through
	// the node (as another of bob's clients would), so the rest of the
	// drain is quick: wait skips what is already read. The oldest 100
	// stay unread all along, so wait would return them were they queued.
	kept := ids[total-mcpserver.DefaultQueueSize:]
	const head, tail = 5, 10
	start = time.Now()
	seen := map[string]bool{}
	take := func(want string) {
		t.Helper()
		m := waitFor(t, bob, args{"timeout": 5}, want)
		if seen[m.MessageID] {
			t.Fatalf("wait returned %s twice", m.MessageID)
		}
		seen[m.MessageID] = true
	}
	for _, id := range kept[:head] {
		take(id)
	}
	middle := kept[head : len(kept)-tail]
	for len(middle) > 0 {
		k := min(len(middle), 100)
		if _, err := n.MarkRead(thrum.AsAgent(context.Background(), "bob"), &rpc.MarkReadParams{MessageIDs: middle[:k]}); err != nil {
			t.Fatal(err)
		}
		middle = middle[k:]
	}
	for _, id := range kept[len(kept)-tail:] {
		take(id)
	}
	r := await(t, startWait(bob, args{"timeout": 1}))
	if out := decode[mcpserver.WaitForMessageOutput](t, "wait_for_message", r.res); out.Status != "timeout" {
		t.Fatalf("wait after the queue was drained = %+v, want timeout (the oldest 100 must not come through)", out)
	}
	t.Logf("drained in %v", time.Since(start))
	if len(seen) > mcpserver.DefaultQueueSize {
		t.Errorf("%d distinct messages came through wait_for_message, more than the queue's %d", len(seen), mcpserver.DefaultQueueSize)
	}
	for _, id := range ids[:total-mcpserver.DefaultQueueSize] {
		if seen[id] {
			t.Fatalf("dropped (oldest) message %s came through wait_for_message", id)
		}
		if getMessage(t, n, "bob", id).IsRead {
			t.Fatalf("dropped message %s is read: the test no longer shows wait would skip it", id)
		}
	}
	// The dropped ones were not lost: they are still unread, for
	// check_messages (as many calls as its results' size takes).
	var left []string
	for {
		got := call[mcpserver.CheckMessagesOutput](t, bob, "check_messages", args{"limit": 100})
		for _, m := range got.Messages {
			left = append(left, m.MessageID)
		}
		if got.Remaining == 0 {
			break
		}
	}
	if !slices.Equal(left, ids[:total-mcpserver.DefaultQueueSize]) {
		t.Errorf("check_messages found %d, want the %d dropped from the queue", len(left), total-mcpserver.DefaultQueueSize)
	}
}

// TestWaitForMessageSkipsConsumed checks that wait_for_message does not
// return what check_messages already consumed, nor deleted messages.
func TestWaitForMessageSkipsConsumed(t *testing.T) {
	t.Parallel() // waits out timeouts: overlap them
	n := newNode(t, nil)
	addAgent(t, n, "alice", "implementer", "auth")
	bob := connect(t, n, addAgent(t, n, "bob", "reviewer", "auth"), nil)

	var ids []string
	for i := range 3 {
		ids = append(ids, send(t, n, "alice", "@bob", fmt.Sprintf("old %d", i), "normal"))
	}
	deleted := send(t, n, "alice", "@bob", "oops", "normal")
	if _, err := n.DeleteMessage(thrum.AsAgent(context.Background(), "alice"), &rpc.DeleteMessageParams{MessageID: deleted}); err != nil {
		t.Fatal(err)
	}
	queuedUntil(t, bob.srv, deleted)
	got := call[mcpserver.CheckMessagesOutput](t, bob, "check_messages", nil)
	if len(got.Messages) != 3 || got.Messages[0].MessageID != ids[0] || got.Messages[2].MessageID != ids[2] {
		t.Fatalf("check_messages = %+v, want the 3 live messages %v", got.Messages, ids)
	}
	// What check_messages claimed left the queue; the deleted one is left
	// for the wait to discard.
	if q := mcpserver.QueueIDs(bob.srv); !slices.Equal(q, []string{deleted}) {
		t.Fatalf("queue holds %v, want only the deleted %s", q, deleted)
	}
	r := await(t, startWait(bob, args{"timeout": 1}))
	if out := decode[mcpserver.WaitForMessageOutput](t, "wait_for_message", r.res); out.Status != "timeout" {
		t.Fatalf("wait after check_messages = %+v, want timeout", out)
	}
	fresh := send(t, n, "alice", "@bob", "new", "normal")
	waitFor(t, bob, args{"timeout": 5}, fresh)
}

// TestWaitForMessageIgnoresOwn checks that an agent's own messages, even
// to its role, a group it is in or everyone, do not wake it.
func TestWaitForMessageIgnoresOwn(t *testing.T) {
	t.Parallel() // waits out timeouts: overlap them
	n := newNode(t, nil)
	alice := connect(t, n, addAgent(t, n, "alice", "implementer", "auth"), nil)
	bob := connect(t, n, addAgent(t, n, "bob", "reviewer", "auth"), nil)
	call[mcpserver.CreateGroupOutput](t, alice, "create_group", args{"name": "backend"})
	call[mcpserver.GroupMemberOutput](t, alice, "add_group_member", args{"group": "backend", "member_type": "agent", "member_id": "bob"})

	for _, to := range []string{"@bob", "@reviewer", "@backend", "@everyone"} {
		call[mcpserver.SendMessageOutput](t, bob, "send_message", args{"to": to, "content": "bob to " + to})
	}
	call[mcpserver.BroadcastMessageOutput](t, bob, "broadcast_message", args{"content": "bob's broadcast"})
	theirs := call[mcpserver.SendMessageOutput](t, alice, "send_message", args{"to": "@reviewer", "content": "alice to reviewers"})
	queuedUntil(t, bob.srv, theirs.MessageID)
	if got := mcpserver.QueueIDs(bob.srv); !slices.Equal(got, []string{theirs.MessageID}) {
		t.Errorf("bob's queue = %v, want only alice's %s: his own messages must not wake him", got, theirs.MessageID)
	}
	waitFor(t, bob, args{"timeout": 5}, theirs.MessageID)
	r := await(t, startWait(bob, args{"timeout": 1}))
	if out := decode[mcpserver.WaitForMessageOutput](t, "wait_for_message", r.res); out.Status != "timeout" {
		t.Errorf("wait after his own sends = %+v, want timeout", out)
	}
}

// TestWaitForMessageCancel checks that a client cancelling its call ends
// the wait and frees the single waiter slot.
func TestWaitForMessageCancel(t *testing.T) {
	t.Parallel() // waits out a timeout
	n := newNode(t, nil)
	addAgent(t, n, "alice", "implementer", "auth")
	bob := connect(t, n, addAgent(t, n, "bob", "reviewer", "auth"), nil)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := bob.rawCall(ctx, "wait_for_message", args{"timeout": 600})
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if err == nil {
			t.Error("cancelled wait returned no error")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("cancelled wait did not return")
	}
	// The cancellation reaches the server, which ends the wait and frees
	// the slot: a new wait is soon not refused (it times out instead, as
	// nothing was sent; sending now could race the cancelled wait for it).
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := await(t, startWait(bob, args{"timeout": 1}))
		if !r.res.IsError {
			if out := decode[mcpserver.WaitForMessageOutput](t, "wait_for_message", r.res); out.Status != "timeout" {
				t.Fatalf("wait = %+v, want timeout", out)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("waits still refused after the cancelled one: %s", resultText(r.res))
		}
		time.Sleep(10 * time.Millisecond)
	}
	id := send(t, n, "alice", "@bob", "after cancel", "normal")
	waitFor(t, bob, args{"timeout": 10}, id)
}
