// Package push encodes the notification.message pushes of thrum's RPC
// server. One published message reaches every subscriber whose filter it
// matches, and their pushes differ only in matched_subscription: the
// notification is encoded once per message and each subscriber's match
// spliced in, rather than encoded again per subscriber.
package push

import (
	"bytes"
	"strconv"
	"sync"

	"github.com/thrumhq/thrum/internal/jsonrpc"
	"github.com/thrumhq/thrum/rpc"
)

// An Encoder encodes pushes of notification.message. It keeps the
// encoding of the message it encoded last, so the subscribers of one
// message, pushed one after the other, share it. Its methods may be
// called concurrently.
type Encoder struct {
	mu         sync.Mutex
	last       *rpc.MessageNotification
	head, tail []byte // last's encoding before and after its match's value
}

// blankMatch is how an unset match encodes inside a notification: the
// place where each subscriber's own match goes.
const blankMatch = `"matched_subscription":{"subscription_id":0,"match_type":""}`

// Encode returns the push of nt with the match m, as a whole JSON-RPC
// message for jsonrpc.Conn.NotifyEncoded: exactly the bytes of encoding
// nt with m whole. nt's own match must be unset, and nt unchanged while
// it is pushed: the encoding is kept for the next call with the same nt.
func (e *Encoder) Encode(nt *rpc.MessageNotification, m rpc.MatchedSubscription) ([]byte, error) {
	e.mu.Lock()
	if e.last != nt {
		e.last, e.head, e.tail = nt, nil, nil
		if nt.MatchedSubscription == (rpc.MatchedSubscription{}) {
			e.head, e.tail = encodeAround(nt)
		}
	}
	head, tail := e.head, e.tail
	e.mu.Unlock()
	if head == nil {
		whole := *nt
		whole.MatchedSubscription = m
		return jsonrpc.EncodeNotification(rpc.NotificationMessage, &whole)
	}
	out := make([]byte, 0, len(head)+len(tail)+64)
	out = append(out, head...)
	out = append(out, `{"subscription_id":`...)
	out = strconv.AppendInt(out, m.SubscriptionID, 10)
	out = append(out, `,"match_type":`...)
	out = strconv.AppendQuote(out, m.MatchType) // one of the rpc.Match* constants: plain ASCII
	out = append(out, '}')
	return append(out, tail...), nil
}

// encodeAround encodes nt, whose match is unset, and returns the bytes
// before and after the match's value. Both are nil if the encoding fails
// (Frame then encodes per subscriber).
func encodeAround(nt *rpc.MessageNotification) (head, tail []byte) {
	b, err := jsonrpc.EncodeNotification(rpc.NotificationMessage, nt)
	if err != nil {
		return nil, nil
	}
	i := bytes.Index(b, []byte(blankMatch))
	if i < 0 {
		return nil, nil
	}
	head = b[:i+len(`"matched_subscription":`)]
	return head, b[i+len(blankMatch):]
}
