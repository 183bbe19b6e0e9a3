package thrum

import (
	"context"
	"hash/fnv"
	"time"

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/rpc"
	"github.com/thrumhq/thrum/store"
)

// Idempotency keys (README, "Safe retries"). A message.send or
// thread.create with an idempotency_key that repeats the key of an earlier
// call by the same caller within IdempotencyWindow returns the earlier
// call's result and writes nothing. The key is stored in the event's
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

// replaySend is the result of the send that first used a key.
func (n *Node) replaySend(ctx context.Context, k *store.Keyed, key string) (*rpc.SendMessageResult, error) {
	if k.Kind != "message" {
		return nil, conflict("idempotency_key %q was used to create thread %s, not to send a message", key, k.ThreadID)
	}
	m, err := n.store.Message(ctx, k.MessageID, "")
	if err != nil {
		return nil, internal("idempotency key", err)
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
	return res, nil
}

// replayThread is the result of the thread.create that first used a key.
func (n *Node) replayThread(ctx context.Context, k *store.Keyed, key string) (*rpc.CreateThreadResult, error) {
	if k.Kind != "thread" {
		return nil, conflict("idempotency_key %q was used to send message %s, not to create a thread", key, k.MessageID)
	}
	t, err := n.store.Thread(ctx, k.ThreadID)
	if err != nil {
		return nil, internal("idempotency key", err)
	}
	return &rpc.CreateThreadResult{ThreadID: t.ThreadID, CreatedAt: t.CreatedAt, MessageID: k.MessageID}, nil
}
