package push_test

import (
	"bytes"
	"testing"

	"github.com/thrumhq/thrum/internal/jsonrpc"
	"github.com/thrumhq/thrum/internal/push"
	"github.com/thrumhq/thrum/rpc"
)

// Each subscriber's push is a splice into one encoding: its bytes must be
// exactly what encoding the notification whole would give, for any
// content and for every match, the encoding kept from one message to the
// next only while the message is the same.
func TestFrameIsTheWholeEncoding(t *testing.T) {
	var e push.Encoder
	contents := []string{"plain", "naïve \"quoted\" <b>&</b> \u2028 " + string(rune(0x1F600)), "\x00\x1f\\", ""}
	matches := []rpc.MatchedSubscription{
		{SubscriptionID: 1, MatchType: rpc.MatchAll},
		{SubscriptionID: 42, MatchType: rpc.MatchScope},
		{SubscriptionID: 1 << 40, MatchType: rpc.MatchMention},
	}
	for _, content := range contents {
		nt := &rpc.MessageNotification{
			MessageID: "msg_1", ThreadID: "thr_1", Preview: content, Timestamp: "2026-01-02T03:04:05.000Z",
			Author: rpc.NotificationAuthor{AgentID: "alice", Role: "implementer", Module: "auth"},
			Scopes: []rpc.Pair{{Type: "module", Value: content}},
		}
		for _, m := range matches {
			got, err := e.Encode(nt, m)
			if err != nil {
				t.Fatal(err)
			}
			whole := *nt
			whole.MatchedSubscription = m
			want, err := jsonrpc.EncodeNotification(rpc.NotificationMessage, &whole)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("spliced frame differs from the encoding:\n got %s\nwant %s", got, want)
			}
		}
	}
}

// A notification that carries a match of its own is encoded whole, with
// the match Frame is given.
func TestFrameOfANotificationWithAMatch(t *testing.T) {
	var e push.Encoder
	nt := &rpc.MessageNotification{MessageID: "msg_2", Scopes: []rpc.Pair{},
		MatchedSubscription: rpc.MatchedSubscription{SubscriptionID: 9, MatchType: rpc.MatchAll}}
	m := rpc.MatchedSubscription{SubscriptionID: 3, MatchType: rpc.MatchScope}
	got, err := e.Encode(nt, m)
	if err != nil {
		t.Fatal(err)
	}
	whole := *nt
	whole.MatchedSubscription = m
	want, _ := jsonrpc.EncodeNotification(rpc.NotificationMessage, &whole)
	if !bytes.Equal(got, want) {
		t.Fatalf("got %s\nwant %s", got, want)
	}
}
