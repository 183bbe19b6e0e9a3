package inbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/inbox"
	"github.com/thrumhq/thrum/internal/thrumtest"
	"github.com/thrumhq/thrum/rpc"
)

// open returns bob's inbox on a fresh node, and a send as alice.
func open(t *testing.T) (*inbox.Inbox, *thrum.Node, func(content string) string) {
	t.Helper()
	return openWith(t, nil)
}

// openWith is open with opts.
func openWith(t *testing.T, opts *inbox.Options) (*inbox.Inbox, *thrum.Node, func(content string) string) {
	t.Helper()
	n := thrumtest.OpenNode(t, nil)
	thrumtest.Register(t, n, "alice", "implementer", "auth")
	bob := thrumtest.Register(t, n, "bob", "reviewer", "auth")
	dial := func(_ context.Context, onNote func(string, json.RawMessage)) (*rpc.Client, error) {
		return n.Dial(&rpc.ClientOptions{OnNotification: onNote}), nil
	}
	ib, err := inbox.New(context.Background(), dial, inbox.Identity{AgentID: bob.ID, Role: bob.Role, Token: bob.Token}, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ib.Close() })
	send := func(content string) string {
		t.Helper()
		r, err := n.SendMessage(thrum.AsAgent(context.Background(), "alice"), &rpc.SendMessageParams{Content: content, Mentions: []string{"@bob"}})
		if err != nil {
			t.Fatal(err)
		}
		return r.MessageID
	}
	return ib, n, send
}

func unread(t *testing.T, n *thrum.Node) int {
	t.Helper()
	r, err := n.ListMessages(thrum.AsAgent(context.Background(), "bob"), &rpc.ListMessagesParams{Mentions: true, Unread: true, PageSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	return r.Total
}

// TestCheckBoundToItsDeadline: a claim whose deadline has passed is
// refused by the daemon and marks nothing read; with time to spare it
// claims and shows.
func TestCheckBoundToItsDeadline(t *testing.T) {
	ib, n, send := open(t)
	send("for a hook")
	_, err := ib.Check(context.Background(), inbox.CheckParams{Limit: 5, Via: rpc.ViaHook, Deadline: time.Now().Add(-time.Second)})
	if err == nil {
		t.Fatal("a check past its deadline claimed")
	}
	if u := unread(t, n); u != 1 {
		t.Fatalf("after a refused claim %d unread, want 1 (%v)", u, err)
	}
	r, err := ib.Check(context.Background(), inbox.CheckParams{Limit: 5, Via: rpc.ViaHook, Deadline: time.Now().Add(time.Minute)})
	if err != nil || len(r.Messages) != 1 {
		t.Fatalf("check with time to spare: %+v, %v", r, err)
	}
	if u := unread(t, n); u != 0 {
		t.Errorf("after the claim %d unread, want 0", u)
	}
}

// TestDoorbellClaimsNothing: a doorbell counts and names the unread
// messages, newest of them, and marks none read; one wait at a time.
func TestDoorbellClaimsNothing(t *testing.T) {
	ib, n, send := open(t)
	var ids []string
	for _, s := range []string{"one\nmore", "two", "three"} {
		ids = append(ids, send(s))
	}
	d, err := ib.Doorbell(context.Background(), 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d.Unread != 3 || len(d.New) != 2 || d.New[0].MessageID != ids[1] || d.New[1].MessageID != ids[2] || d.New[0].Subject != "two" {
		t.Errorf("doorbell = %+v, want 3 unread, the newest two oldest first", d)
	}
	if d, _ := ib.Doorbell(context.Background(), 5, func(id string) bool { return id != ids[0] }); len(d.New) != 1 || d.New[0].Subject != "one" {
		t.Errorf("doorbell leaving out what was announced = %+v, want only the first, by its first line", d)
	}
	if u := unread(t, n); u != 3 {
		t.Errorf("after the doorbells %d unread, want 3", u)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	waiting := make(chan error, 1)
	go func() {
		_, err := ib.Wait(ctx, inbox.WaitParams{Timeout: time.Minute, MinPriority: rpc.PriorityCritical, Via: rpc.ViaWaitForMessage})
		waiting <- err
	}()
	for !ib.Stats().Waiting {
		time.Sleep(time.Millisecond)
	}
	if _, err := ib.Wait(ctx, inbox.WaitParams{Timeout: time.Second}); !errors.Is(err, inbox.ErrWaitInProgress) {
		t.Errorf("a second wait: %v, want ErrWaitInProgress", err)
	}
	cancel()
	if err := <-waiting; !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled wait: %v", err)
	}
}

// subscriptions counts the subscriptions of ib's connection in the daemon.
func subscriptions(t *testing.T, ib *inbox.Inbox) int {
	t.Helper()
	r, err := inbox.Call(context.Background(), ib, func(ctx context.Context, c *rpc.Client) (*rpc.ListSubscriptionsResult, error) {
		return c.ListSubscriptions(ctx, &rpc.ListSubscriptionsParams{})
	})
	if err != nil {
		t.Fatal(err)
	}
	return len(r.Subscriptions)
}

// TestNoPushInboxSubscribesToNothing: an inbox that claims or counts once
// (a hook's) leaves the daemon no subscription to push to, and still
// counts and claims; one that waits subscribes.
func TestNoPushInboxSubscribesToNothing(t *testing.T) {
	if ib, _, _ := open(t); subscriptions(t, ib) != 1 {
		t.Fatalf("an inbox has %d subscriptions, want 1", subscriptions(t, ib))
	}
	ib, _, send := openWith(t, &inbox.Options{NoPush: true})
	if n := subscriptions(t, ib); n != 0 {
		t.Fatalf("a NoPush inbox has %d subscriptions, want none", n)
	}
	id := send("for a hook")
	if d, err := ib.Doorbell(context.Background(), 1, nil); err != nil || d.Unread != 1 {
		t.Fatalf("doorbell = %+v, %v; want 1 unread", d, err)
	}
	r, err := ib.Check(context.Background(), inbox.CheckParams{Limit: 5, Via: rpc.ViaHook, Deadline: time.Now().Add(time.Minute)})
	if err != nil || len(r.Messages) != 1 || r.Messages[0].MessageID != id {
		t.Fatalf("check = %+v, %v; want the message", r, err)
	}
	if q := ib.Stats().Queued; len(q) != 0 {
		t.Errorf("queued %v: nothing was pushed, nothing should be", q)
	}
}
