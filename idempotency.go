package thrum

import (
	"bytes"
	"context"
	"encoding/json"
	"hash/fnv"
	"slices"
	"time"

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/rpc"
	"github.com/thrumhq/thrum/store"
)

// Idempotency keys (README, "Safe retries"). A message.send or
// thread.create with an idempotency_key that repeats the key of an earlier
// call by the same caller within IdempotencyWindow returns the earlier
// call's result and writes nothing; if its parameters differ from that
// call's, it is refused with -32009 (rpc.CodeIdempotencyKey), naming what
// the first call made, rather than return a result that is not its own. The key is stored in the event's
// payload, so deduplication survives restarts and rebuilds of the
// projection.
const (
	IdempotencyWindow = 24 * time.Hour
	maxIdempotencyKey = 128
)

// keyLocks serialize calls that carry the same key, so that two concurrent
// retries cannot both miss the lookup and both write.
type keyLocks [64]chan struct{}

func (k *keyLocks) lock(caller, key string) (unlock func()) {
	h := fnv.New32a()
	h.Write([]byte(caller))
	h.Write([]byte{0})
	h.Write([]byte(key))
	c := k[h.Sum32()%uint32(len(k))]
	c <- struct{}{}
	return func() { <-c }
}

func (k *keyLocks) init() {
	for i := range k {
		k[i] = make(chan struct{}, 1)
	}
}

// keyed looks up what the caller created with key within the window. It
// returns (nil, unlock, nil) when the call must go ahead; the caller holds
// the key's lock until it calls unlock, after its write.
func (n *Node) keyed(ctx context.Context, caller, key string) (*store.Keyed, func(), error) {
	if len(key) > maxIdempotencyKey {
		return nil, nil, invalid("idempotency_key is too long: at most %d bytes", maxIdempotencyKey)
	}
	unlock := n.keys.lock(caller, key)
	// A first call whose event is durable but waits to be applied is not
	// in the projection yet: while any event waits, refuse, rather than
	// miss it and write a second.
	if err := n.refuseWrites(); err != nil {
		unlock()
		return nil, nil, err
	}
	k, err := n.store.IdempotencyKey(ctx, caller, key)
	if isNotFound(err) {
		return nil, unlock, nil
	}
	if err != nil {
		unlock()
		return nil, nil, internal("idempotency key", err)
	}
	if t, perr := time.Parse(eventlog.TimeFormat, k.CreatedAt); perr == nil && n.now().Sub(t) > IdempotencyWindow {
		return nil, unlock, nil // expired: the key starts afresh
	}
	return k, unlock, nil
}

// usedKey is keyed with the lock released at once: a retry of a stored
// call gets its result before anything slow runs (resolving recipients
// may sync with a remote), and a first call takes the lock again, with
// keyed, only around its second check and its write. A first call thus
// looks its key up twice.
func (n *Node) usedKey(ctx context.Context, caller, key string) (*store.Keyed, error) {
	k, unlock, err := n.keyed(ctx, caller, key)
	if err != nil {
		return nil, err
	}
	unlock()
	return k, nil
}

// reusedKey is the error for a key used before for a different request:
// it names what the first request made, in the message and in data.
func reusedKey(key string, k *store.Keyed, differs string) error {
	made := "message " + k.MessageID
	if k.Kind == "thread" {
		made = "thread " + k.ThreadID
		if k.MessageID != "" {
			made += " (with message " + k.MessageID + ")"
		}
	}
	e := rpc.Errorf(rpc.CodeIdempotencyKey, "idempotency_key %q was used for %s, by a request with different %s: a retry repeats the request exactly; use a new key for a new one", key, made, differs)
	e.Data = map[string]string{"kind": k.Kind, "message_id": k.MessageID, "thread_id": k.ThreadID}
	return e
}

// replaySend is the result of the send that first used k, or, when the
// send f to threadID differs from that send, the error saying so.
func (n *Node) replaySend(ctx context.Context, k *store.Keyed, f *sendForm, threadID string) (*rpc.SendMessageResult, error) {
	if k.Kind != "message" {
		return nil, reusedKey(f.p.IdempotencyKey, k, "method (thread.create, not message.send)")
	}
	m, err := n.store.Message(ctx, k.MessageID, "")
	if err != nil {
		return nil, internal("idempotency key", err)
	}
	if differs := f.differs(m, threadID); differs != "" {
		return nil, reusedKey(f.p.IdempotencyKey, k, differs)
	}
	res := &rpc.SendMessageResult{MessageID: m.MessageID, ThreadID: m.ThreadID, CreatedAt: m.CreatedAt}
	for _, r := range m.Refs {
		if r.Type != rpc.RefMention {
			continue
		}
		if rc, ok := n.dirc.Resolve(r.Value); ok {
			res.Recipients = append(res.Recipients, rc)
		}
	}
	n.markActive(ctx, res.Recipients) // who is active now, as a first send says
	return res, nil
}

// replayThread is the result of the thread.create that first used a
// key, or, when p (its first message normalized as first, nil if none)
// differs from that call, the error saying so.
func (n *Node) replayThread(ctx context.Context, k *store.Keyed, key string, p *rpc.CreateThreadParams, first *sendForm) (*rpc.CreateThreadResult, error) {
	if k.Kind != "thread" {
		return nil, reusedKey(key, k, "method (message.send, not thread.create)")
	}
	t, err := n.store.Thread(ctx, k.ThreadID)
	if err != nil {
		return nil, internal("idempotency key", err)
	}
	differs := ""
	switch {
	case t.Title != p.Title:
		differs = "title"
	case (k.MessageID != "") != (first != nil):
		differs = "first message"
	case k.MessageID != "":
		m, err := n.store.Message(ctx, k.MessageID, "")
		if err != nil {
			return nil, internal("idempotency key", err)
		}
		differs = first.differs(m, k.ThreadID)
	}
	if differs != "" {
		return nil, reusedKey(key, k, differs)
	}
	return &rpc.CreateThreadResult{ThreadID: t.ThreadID, CreatedAt: t.CreatedAt, MessageID: k.MessageID}, nil
}

// differs names the first parameter in which the send f, to threadID,
// differs from the stored message m, or returns "". Content is compared
// only while m is neither edited nor deleted; mentions as the addresses
// they resolve to.
func (f *sendForm) differs(m *store.Message, threadID string) string {
	mentions, refs := splitMentions(m.Refs)
	wantMentions, wantRefs := splitMentions(f.refs)
	switch {
	case m.UpdatedAt == "" && !m.Deleted && m.Content != f.p.Content:
		return "content"
	case m.Format != f.format:
		return "format"
	case !sameJSON(m.Structured, f.structured):
		return "structured"
	case m.ThreadID != threadID:
		return "thread_id"
	case !sameSet(mentions, wantMentions):
		return "recipients"
	case !sameSet(refs, wantRefs):
		return "refs"
	case !sameSet(pairStrings(m.Scopes), pairStrings(f.p.Scopes)):
		return "scopes"
	case !slices.Equal(m.TagList(), f.p.Tags):
		return "tags"
	case m.Priority != f.priority:
		return "priority"
	case f.actingAs != "" && m.AgentID != f.actingAs || f.actingAs == "" && m.ActingAs != "":
		return "acting_as"
	case m.Disclose != (f.p.Disclose && f.actingAs != ""):
		return "disclose"
	case m.AckRequired != f.ack:
		return "ack_required"
	case m.AckDue != ackDueOf(f.ack, f.ackWithin, m.CreatedAt):
		return "ack_within"
	}
	return ""
}

// splitMentions splits refs into the mentions' addresses and the other
// refs, each as one comparable string.
func splitMentions(refs []rpc.Pair) (mentions, others []string) {
	for _, r := range refs {
		if r.Type == rpc.RefMention {
			mentions = append(mentions, r.Value)
		} else {
			others = append(others, r.Type+"\x00"+r.Value)
		}
	}
	return mentions, others
}

// ackDueOf is the ack_due of a message sent at created that asks for an
// acknowledgement within, as the projection keeps it.
func ackDueOf(ack bool, within, created string) string {
	at, err := eventlog.ParseTime(created)
	if err != nil {
		return ""
	}
	return store.AckDue(eventlog.MessageCreate{AckRequired: ack, AckWithin: within}, at)
}

func pairStrings(ps []rpc.Pair) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Type + "\x00" + p.Value
	}
	return out
}

// sameSet reports whether a and b hold the same strings, ignoring order
// and repeats.
func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}

// sameJSON reports whether stored JSON (or "") and raw are the same
// document, up to insignificant white space.
func sameJSON(stored string, raw json.RawMessage) bool {
	if stored == "" || len(raw) == 0 {
		return stored == "" && len(raw) == 0
	}
	var a, b bytes.Buffer
	if json.Compact(&a, []byte(stored)) != nil || json.Compact(&b, raw) != nil {
		return stored == string(raw)
	}
	return bytes.Equal(a.Bytes(), b.Bytes())
}
