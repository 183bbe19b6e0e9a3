package thrum_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/internal/jsonrpc"
	"github.com/thrumhq/thrum/rpc"
)

// A notification is encoded once per message and each subscriber's match
// spliced in: the bytes must be exactly what encoding it whole would give.
func TestNotificationFrameIsItsEncoding(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	l := f.n.Listen(0)
	defer l.Close()
	bob := thrum.AsAgent(ctx, "bob")
	for _, p := range []*rpc.SubscribeParams{{All: true}, {Scope: &rpc.Pair{Type: "module", Value: "auth"}}, {MentionRole: "reviewer"}} {
		if _, err := f.n.Subscribe(bob, l, p); err != nil {
			t.Fatal(err)
		}
	}
	content := "naïve \"quoted\" <b>&</b> \u2028 " + string(rune(0x1F600))
	if _, err := f.n.SendMessage(thrum.AsAgent(ctx, "alice"), &rpc.SendMessageParams{Content: content, Scopes: []rpc.Pair{{Type: "module", Value: "auth"}}, Mentions: []string{"@reviewer"}}); err != nil {
		t.Fatal(err)
	}
	matches := map[string]bool{}
	for range 3 {
		select {
		case nt := <-l.C():
			want, err := jsonrpc.EncodeNotification(rpc.NotificationMessage, nt)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(nt.Frame, want) {
				t.Fatalf("spliced frame differs from the encoding:\n got %s\nwant %s", nt.Frame, want)
			}
			matches[nt.MatchedSubscription.MatchType] = true
		case <-time.After(5 * time.Second):
			t.Fatal("no notification")
		}
	}
	if len(matches) != 3 {
		t.Fatalf("matches %v, want all, scope and mention", matches)
	}
}
