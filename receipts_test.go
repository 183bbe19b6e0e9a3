package thrum_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/internal/thrumtest"
	"github.com/thrumhq/thrum/rpc"
)

// receiptsOf returns message id's receipts as message.get shows them,
// keyed by agent.
func (f *fixture) receiptsOf(id string) map[string]rpc.Receipt {
	f.t.Helper()
	g, err := f.n.GetMessage(f.ctx, &rpc.GetMessageParams{MessageID: id})
	if err != nil {
		f.t.Fatal(err)
	}
	out := map[string]rpc.Receipt{}
	for _, r := range g.Message.Receipts {
		if _, dup := out[r.AgentID]; dup {
			f.t.Errorf("%s: two receipts for %s", id, r.AgentID)
		}
		out[r.AgentID] = r
	}
	return out
}

// A message walks every state with each of its recipients, by each way
// there is, and the receipts say so — after a restart and in a rebuilt
// projection too.
func TestReceiptsWalkEveryState(t *testing.T) {
	f := newFixture(t, nil)
	thrumtest.Register(t, f.n, "dave", "implementer", "db")
	// @reviewer reaches bob and carol, @implementer alice (the sender,
	// left out) and dave.
	sent := f.send("alice", rpc.SendMessageParams{Content: "please review", Mentions: []string{"@reviewer", "@implementer"},
		AckRequired: true, AckWithin: "30m"})
	id := sent.MessageID
	g, err := f.n.GetMessage(f.ctx, &rpc.GetMessageParams{MessageID: id})
	if err != nil {
		t.Fatal(err)
	}
	if !g.Message.AckRequired || g.Message.AckDue == "" {
		t.Fatalf("ack_required %v, ack_due %q: the request for an acknowledgement was not kept", g.Message.AckRequired, g.Message.AckDue)
	}
	created, _ := time.Parse(time.RFC3339Nano, g.Message.CreatedAt)
	if due, _ := time.Parse(time.RFC3339Nano, g.Message.AckDue); due.Sub(created) != 30*time.Minute {
		t.Errorf("ack_due %s is not 30m after created_at %s", g.Message.AckDue, g.Message.CreatedAt)
	}
	var order []string
	for _, r := range g.Message.Receipts {
		order = append(order, r.AgentID)
		if r.State != rpc.ReceiptQueued || r.Via != "" || r.At != "" {
			t.Errorf("fresh receipt %+v, want queued", r)
		}
	}
	if !slices.Equal(order, []string{"bob", "carol", "dave"}) {
		t.Fatalf("recipients %v, want bob, carol, dave (as resolved, never the sender)", order)
	}

	// bob: delivered by a wait, then acknowledged by a reply.
	if _, err := f.n.MarkRead(f.as("bob"), &rpc.MarkReadParams{MessageIDs: []string{id}, Via: rpc.ViaWaitForMessage}); err != nil {
		t.Fatal(err)
	}
	if r := f.receiptsOf(id)["bob"]; r.State != rpc.ReceiptDelivered || r.Via != rpc.ViaWaitForMessage || r.At == "" {
		t.Fatalf("bob after a wait: %+v", r)
	}
	reply := f.send("bob", rpc.SendMessageParams{Content: "on it", Mentions: []string{"@alice"},
		Refs: []rpc.Pair{{Type: rpc.RefReplyTo, Value: id}}})
	bob := f.receiptsOf(id)["bob"]
	if bob.State != rpc.ReceiptAcknowledged || bob.ReplyID != reply.MessageID || bob.Via != rpc.ViaWaitForMessage {
		t.Fatalf("bob after replying: %+v", bob)
	}

	// carol: acknowledged with a note, never delivered before: the ack
	// consumes the message.
	a, err := f.n.AckMessage(f.as("carol"), &rpc.AckMessageParams{MessageID: id, Note: "seen"})
	if err != nil {
		t.Fatal(err)
	}
	if a.Already || a.Receipt.State != rpc.ReceiptAcknowledged || a.Receipt.Note != "seen" || a.Receipt.Via != rpc.ViaAck {
		t.Fatalf("carol's ack: %+v", a)
	}
	if r, err := f.n.MarkRead(f.as("carol"), &rpc.MarkReadParams{MessageIDs: []string{id}}); err != nil || r.MarkedCount != 0 {
		t.Fatalf("carol's acknowledged message could still be claimed: %+v %v", r, err)
	}
	// A second acknowledgement changes nothing; neither does a reply after.
	again, err := f.n.AckMessage(f.as("carol"), &rpc.AckMessageParams{MessageID: id, Note: "really"})
	if err != nil || !again.Already || again.Receipt.Note != "seen" || again.Receipt.AckedAt != a.Receipt.AckedAt {
		t.Fatalf("a second ack: %+v %v, want already, the first kept", again, err)
	}
	f.send("carol", rpc.SendMessageParams{Content: "done", Refs: []rpc.Pair{{Type: rpc.RefReplyTo, Value: id}}})
	if r := f.receiptsOf(id)["carol"]; r.Note != "seen" || r.ReplyID != "" {
		t.Fatalf("a reply after the ack replaced it: %+v", r)
	}

	// dave: still queued. A reply by the sender acknowledges nothing.
	f.send("alice", rpc.SendMessageParams{Content: "ping", Refs: []rpc.Pair{{Type: rpc.RefReplyTo, Value: id}}})
	want := f.receiptsOf(id)
	if len(want) != 3 || want["dave"].State != rpc.ReceiptQueued {
		t.Fatalf("receipts %+v", want)
	}

	// The log is the truth: a restart and a rebuild give the same.
	if err := f.n.Close(); err != nil {
		t.Fatal(err)
	}
	f.n = thrumtest.OpenNodeIn(t, f.dir, nil)
	if got := f.receiptsOf(id); !mapsEqual(got, want) {
		t.Errorf("after restart:\n got %+v\nwant %+v", got, want)
	}
	rebuilt, err := f.n.Rebuild(f.ctx, filepath.Join(t.TempDir(), "rebuilt.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer rebuilt.Close()
	live := dump(t, f.n)
	d, err := rebuilt.Dump(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"messages", "message_reads", "message_acks"} {
		if !slices.Equal(d[table], live[table]) {
			t.Errorf("rebuilt %s differs:\n%v\n%v", table, d[table], live[table])
		}
	}
}

func mapsEqual(a, b map[string]rpc.Receipt) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// dump is the node's projection, table by table.
func dump(t *testing.T, n *thrum.Node) map[string][]string {
	t.Helper()
	d, err := thrum.ProjectionOf(n).Dump(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// Bad requests for and of acknowledgements are refused with the right
// code, and store nothing.
func TestAckBadInput(t *testing.T) {
	f := newFixture(t, nil)
	id := f.send("alice", rpc.SendMessageParams{Content: "x", Mentions: []string{"@bob"}, AckRequired: true}).MessageID
	before := dump(t, f.n)
	sends := []struct {
		name string
		p    rpc.SendMessageParams
		code int
		says string
	}{
		{"negative ack_within", rpc.SendMessageParams{Content: "x", Mentions: []string{"@bob"}, AckWithin: "-5m"}, rpc.CodeInvalidParams, "out of range"},
		{"zero ack_within", rpc.SendMessageParams{Content: "x", Mentions: []string{"@bob"}, AckWithin: "0s"}, rpc.CodeInvalidParams, "out of range"},
		{"absurd ack_within", rpc.SendMessageParams{Content: "x", Mentions: []string{"@bob"}, AckWithin: "100000h"}, rpc.CodeInvalidParams, "out of range"},
		{"ack_within not a duration", rpc.SendMessageParams{Content: "x", Mentions: []string{"@bob"}, AckWithin: "soon"}, rpc.CodeInvalidParams, "duration"},
		{"ack from no one", rpc.SendMessageParams{Content: "x", AckRequired: true}, rpc.CodeInvalidParams, "needs a recipient"},
		{"ack from oneself only", rpc.SendMessageParams{Content: "x", Mentions: []string{"@alice"}, AckWithin: "1h"}, rpc.CodeInvalidParams, "needs a recipient"},
	}
	for _, c := range sends {
		_, err := f.n.SendMessage(f.as("alice"), &c.p)
		checkCode(t, c.name, err, c.code, c.says)
	}
	acks := []struct {
		name, as string
		p        rpc.AckMessageParams
		code     int
		says     string
	}{
		{"unknown message", "bob", rpc.AckMessageParams{MessageID: "msg_nope"}, rpc.CodeNotFound, "not found"},
		{"no message", "bob", rpc.AckMessageParams{}, rpc.CodeInvalidParams, "required"},
		{"not addressed to the caller", "carol", rpc.AckMessageParams{MessageID: id}, rpc.CodeForbidden, "not addressed to carol"},
		{"the sender's own", "alice", rpc.AckMessageParams{MessageID: id}, rpc.CodeForbidden, "not addressed"},
		{"note too long", "bob", rpc.AckMessageParams{MessageID: id, Note: strings.Repeat("n", 501)}, rpc.CodeLimitExceeded, "limit"},
	}
	for _, c := range acks {
		_, err := f.n.AckMessage(f.as(c.as), &c.p)
		checkCode(t, c.name, err, c.code, c.says)
	}
	_, err := f.n.AckMessage(f.ctx, &rpc.AckMessageParams{MessageID: id})
	checkCode(t, "no caller", err, rpc.CodeUnauthenticated, "")
	_, err = f.n.MarkRead(f.as("bob"), &rpc.MarkReadParams{MessageIDs: []string{id}, Via: "pigeon"})
	checkCode(t, "unknown via", err, rpc.CodeInvalidParams, "invalid via")
	// Only an acknowledgement records a delivery by ack.
	_, err = f.n.MarkRead(f.as("bob"), &rpc.MarkReadParams{MessageIDs: []string{id}, Via: rpc.ViaAck})
	checkCode(t, "a read claiming to be an ack", err, rpc.CodeInvalidParams, "invalid via")
	// A channel push only announces: it claims nothing.
	_, err = f.n.MarkRead(f.as("bob"), &rpc.MarkReadParams{MessageIDs: []string{id}, Via: rpc.ViaChannel})
	checkCode(t, "a read by a channel push", err, rpc.CodeInvalidParams, "invalid via")
	// A claim whose caller gave up before its read was queued.
	_, err = f.n.MarkRead(f.as("bob"), &rpc.MarkReadParams{MessageIDs: []string{id}, Via: rpc.ViaHook,
		Deadline: time.Now().Add(-time.Millisecond).Format(time.RFC3339Nano)})
	checkCode(t, "a claim past its deadline", err, rpc.CodeDeadlinePassed, "nothing was marked read")
	_, err = f.n.MarkRead(f.as("bob"), &rpc.MarkReadParams{MessageIDs: []string{id}, Deadline: "soon"})
	checkCode(t, "a deadline that is not a time", err, rpc.CodeInvalidParams, "invalid deadline")

	after := dump(t, f.n)
	for _, table := range []string{"messages", "message_reads", "message_acks"} {
		if !slices.Equal(before[table], after[table]) {
			t.Errorf("a refused request changed %s", table)
		}
	}
}

func checkCode(t *testing.T, name string, err error, code int, says string) {
	t.Helper()
	var re *rpc.Error
	if !errors.As(err, &re) || re.Code != code {
		t.Errorf("%s: %v, want code %d", name, err, code)
		return
	}
	if !strings.Contains(re.Message, says) {
		t.Errorf("%s: %q does not say %q", name, re.Message, says)
	}
}

// The sender's unacknowledged and overdue messages are listed as such,
// with their counts, until every recipient has acknowledged.
func TestListSent(t *testing.T) {
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	f := newFixture(t, &thrum.Options{Now: clock})
	plain := f.send("alice", rpc.SendMessageParams{Content: "fyi", Mentions: []string{"@bob"}}).MessageID
	soon := f.send("alice", rpc.SendMessageParams{Content: "review by noon", Mentions: []string{"@reviewer"}, AckWithin: "10m"}).MessageID
	later := f.send("alice", rpc.SendMessageParams{Content: "when you can", Mentions: []string{"@bob"}, AckRequired: true}).MessageID
	f.send("bob", rpc.SendMessageParams{Content: "not alice's", Mentions: []string{"@alice"}, AckRequired: true})

	list := func(p rpc.ListSentParams) []rpc.SentMessage {
		t.Helper()
		r, err := f.n.ListSent(f.as("alice"), &p)
		if err != nil {
			t.Fatal(err)
		}
		if r.Total != len(r.Messages) {
			t.Errorf("total %d, %d listed", r.Total, len(r.Messages))
		}
		return r.Messages
	}
	idsOf := func(ms []rpc.SentMessage) []string {
		var out []string
		for _, m := range ms {
			out = append(out, m.MessageID)
		}
		return out
	}
	if got := idsOf(list(rpc.ListSentParams{})); !slices.Equal(got, []string{later, soon, plain}) {
		t.Fatalf("sent %v, want alice's three, newest first", got)
	}
	if got := idsOf(list(rpc.ListSentParams{Unacked: true})); !slices.Equal(got, []string{later, soon}) {
		t.Fatalf("unacked %v", got)
	}
	if got := list(rpc.ListSentParams{Overdue: true}); len(got) != 0 {
		t.Fatalf("overdue before the deadline: %v", idsOf(got))
	}
	mu.Lock()
	now = now.Add(time.Hour)
	mu.Unlock()
	// The deadline is the message's own time plus ack_within (the log's
	// clock), so move the clock of the query past it.
	over := list(rpc.ListSentParams{Overdue: true})
	if !slices.Equal(idsOf(over), []string{soon}) || !over[0].Overdue || over[0].Recipients != 2 {
		t.Fatalf("overdue %+v", over)
	}
	if _, err := f.n.MarkRead(f.as("bob"), &rpc.MarkReadParams{MessageIDs: []string{soon}, Via: rpc.ViaCheckMessages}); err != nil {
		t.Fatal(err)
	}
	for _, who := range []string{"bob", "carol"} {
		if _, err := f.n.AckMessage(f.as(who), &rpc.AckMessageParams{MessageID: soon}); err != nil {
			t.Fatal(err)
		}
	}
	if got := idsOf(list(rpc.ListSentParams{Unacked: true})); !slices.Equal(got, []string{later}) {
		t.Fatalf("unacked after both acked %v", got)
	}
	all := list(rpc.ListSentParams{})
	if m := all[1]; m.MessageID != soon || m.Delivered != 2 || m.Acknowledged != 2 || m.Overdue {
		t.Fatalf("summary of the acknowledged message: %+v", m)
	}
	if m := all[2]; m.AckRequired || m.Recipients != 1 || m.Delivered != 0 || m.Receipts[0].State != rpc.ReceiptQueued {
		t.Fatalf("summary of the plain message: %+v", m)
	}
}

// A subscription to receipts gets each delivery and acknowledgement of
// the subscriber's messages once, as the projection holds it; "all" gets
// every message's.
func TestReceiptNotifications(t *testing.T) {
	f := newFixture(t, nil)
	subscribe := func(who, which string) *thrum.Subscription {
		t.Helper()
		l := f.n.Listen(0)
		t.Cleanup(l.Close)
		if _, err := f.n.Subscribe(f.as(who), l, &rpc.SubscribeParams{Receipts: which}); err != nil {
			t.Fatal(err)
		}
		return l
	}
	mine, theirs, every := subscribe("alice", rpc.ReceiptsSent), subscribe("carol", rpc.ReceiptsSent), subscribe("carol", rpc.ReceiptsAll)
	id := f.send("alice", rpc.SendMessageParams{Content: "x", Mentions: []string{"@bob"}, AckRequired: true}).MessageID
	if _, err := f.n.MarkRead(f.as("bob"), &rpc.MarkReadParams{MessageIDs: []string{id}, Via: rpc.ViaHook}); err != nil {
		t.Fatal(err)
	}
	// A second read (another session) is no new delivery.
	if _, err := f.n.MarkRead(f.as("bob"), &rpc.MarkReadParams{MessageIDs: []string{id}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.n.AckMessage(f.as("bob"), &rpc.AckMessageParams{MessageID: id, Note: "ok"}); err != nil {
		t.Fatal(err)
	}
	for _, l := range []*thrum.Subscription{mine, every} {
		for _, want := range []rpc.Receipt{{AgentID: "bob", State: rpc.ReceiptDelivered, Via: rpc.ViaHook},
			{AgentID: "bob", State: rpc.ReceiptAcknowledged, Via: rpc.ViaHook, Note: "ok"}} {
			select {
			case nt := <-l.Receipts():
				got := nt.Receipt
				if nt.MessageID != id || nt.AuthorID != "alice" || !nt.AckRequired || got.AgentID != want.AgentID ||
					nt.Change != want.State || got.State != want.State || got.Via != want.Via || got.Note != want.Note {
					t.Errorf("receipt %+v, want %+v", nt, want)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("no %s receipt", want.State)
			}
		}
		select {
		case nt := <-l.Receipts():
			t.Errorf("an extra receipt: %+v", nt)
		default:
		}
	}
	select {
	case nt := <-theirs.Receipts():
		t.Errorf("carol got a receipt of alice's message: %+v", nt)
	default:
	}
	_, err := f.n.Subscribe(f.as("alice"), mine, &rpc.SubscribeParams{Receipts: "mine"})
	checkCode(t, "unknown receipts", err, rpc.CodeInvalidParams, "invalid receipts")
}

// A reply acknowledges before the reader's read delivers (thrum reply
// marks the message read after it sends): the two pushes say which
// change each is, so the acknowledgement is pushed as one once, though
// the delivery's receipt is acknowledged too.
func TestReceiptPushesSayWhatChanged(t *testing.T) {
	f := newFixture(t, nil)
	l := f.n.Listen(0)
	t.Cleanup(l.Close)
	if _, err := f.n.Subscribe(f.as("alice"), l, &rpc.SubscribeParams{Receipts: rpc.ReceiptsSent}); err != nil {
		t.Fatal(err)
	}
	id := f.send("alice", rpc.SendMessageParams{Content: "x", Mentions: []string{"@bob"}, AckRequired: true}).MessageID
	reply := f.send("bob", rpc.SendMessageParams{Content: "done", Refs: []rpc.Pair{{Type: rpc.RefReplyTo, Value: id}}}).MessageID
	if _, err := f.n.MarkRead(f.as("bob"), &rpc.MarkReadParams{MessageIDs: []string{id}, Via: rpc.ViaReply}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{rpc.ReceiptAcknowledged, rpc.ReceiptDelivered} {
		select {
		case nt := <-l.Receipts():
			if nt.Change != want || nt.Receipt.State != rpc.ReceiptAcknowledged || nt.Receipt.ReplyID != reply {
				t.Errorf("push %+v: want change %s, state acknowledged by reply %s", nt, want, reply)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no %s push", want)
		}
	}
	select {
	case nt := <-l.Receipts():
		t.Errorf("an extra push: %+v", nt)
	case <-time.After(50 * time.Millisecond):
	}
}

// A retried send asking for an acknowledgement is the first send; the
// same key asking for another time is refused.
func TestAckRetriedWithItsKey(t *testing.T) {
	f := newFixture(t, nil)
	p := rpc.SendMessageParams{Content: "x", Mentions: []string{"@bob"}, AckWithin: "30m", IdempotencyKey: "k"}
	first := f.send("alice", p)
	if again := f.send("alice", p); again.MessageID != first.MessageID {
		t.Fatalf("the retry made %s, want %s", again.MessageID, first.MessageID)
	}
	p.AckWithin = "31m"
	_, err := f.n.SendMessage(f.as("alice"), &p)
	checkCode(t, "another ack_within", err, rpc.CodeIdempotencyKey, "ack_within")
}
