package thrum

import (
	"context"

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/rpc"
	"github.com/thrumhq/thrum/store"
)

// CreateThread creates a thread and, if message and recipient are both
// given, its first message addressed to the recipient, in one commit.
func (n *Node) CreateThread(ctx context.Context, p *rpc.CreateThreadParams) (*rpc.CreateThreadResult, error) {
	if p.Title == "" {
		return nil, invalid("title is required")
	}
	if len(p.Title) > maxPairLen {
		return nil, tooLarge("title is too long: at most %d bytes", maxPairLen)
	}
	if (p.Recipient == "") != (p.Message == nil) {
		return nil, invalid("recipient and message must both be provided or both be nil")
	}
	if err := checkPairs("scopes", p.Scopes); err != nil {
		return nil, err
	}
	me, err := n.callerID(ctx, "creating a thread")
	if err != nil {
		return nil, err
	}
	if _, ok := n.dirc.Agent(me); !ok {
		return nil, notRegistered("agent %q is not registered", me)
	}
	var first *sendForm
	if p.Message != nil {
		// The first message is checked as SendMessage checks a send; thread
		// and message are then committed together, so neither exists
		// without the other.
		if first, err = n.normalizeSend(&rpc.SendMessageParams{
			Content: p.Message.Content, Format: p.Message.Format, Structured: p.Message.Structured,
			Scopes: p.Scopes, Mentions: []string{p.Recipient}, ActingAs: p.ActingAs, Disclose: p.Disclose,
			IdempotencyKey: p.IdempotencyKey,
		}); err != nil {
			return nil, err
		}
	}
	if p.IdempotencyKey != "" {
		if k, err := n.usedKey(ctx, me, p.IdempotencyKey); err != nil || k != nil {
			if err != nil {
				return nil, err
			}
			return n.replayThread(ctx, k, p.IdempotencyKey, p, first)
		}
	}
	tid := "thr_" + eventlog.NewID()
	te := &eventlog.Event{Type: eventlog.TypeThreadCreate, Payload: eventlog.ThreadCreate{
		ThreadID: tid, Title: p.Title, Scopes: p.Scopes, CreatedBy: me, IdempotencyKey: p.IdempotencyKey}}
	evs, msgID := []*eventlog.Event{te}, ""
	if first != nil {
		pm, err := n.prepareMessage(ctx, first, tid)
		if err != nil {
			return nil, err
		}
		evs, msgID = append(evs, pm.event), pm.id
	}
	if p.IdempotencyKey != "" {
		k, unlock, err := n.keyed(ctx, me, p.IdempotencyKey)
		if err != nil {
			return nil, err
		}
		defer unlock()
		if k != nil { // a concurrent call with the key wrote first
			return n.replayThread(ctx, k, p.IdempotencyKey, p, first)
		}
	}
	if err := n.append(ctx, evs...); err != nil {
		return nil, err
	}
	return &rpc.CreateThreadResult{ThreadID: tid, CreatedAt: te.Timestamp(), MessageID: msgID}, nil
}

// ListThreads lists threads, most recently active first, with unread
// counts for the caller. Every summary carries an unread count, which
// means nothing without a reader, so a call without a caller is an
// unauthenticated error (as message.list's unread and mentions filters
// are), never counts for nobody.
func (n *Node) ListThreads(ctx context.Context, p *rpc.ListThreadsParams) (*rpc.ListThreadsResult, error) {
	page, size, offset, err := pageParams(p.Page, p.PageSize)
	if err != nil {
		return nil, err
	}
	reader, err := n.callerID(ctx, "thread.list (its unread counts are the caller's)")
	if err != nil {
		return nil, err
	}
	ts, total, err := n.store.Threads(ctx, p.Scope, reader, size, offset)
	if err != nil {
		return nil, internal("list threads", err)
	}
	out := &rpc.ListThreadsResult{Threads: make([]rpc.ThreadSummary, 0, len(ts)), Total: total, Page: page, PageSize: size, TotalPages: totalPages(total, size)}
	for _, t := range ts {
		s := rpc.ThreadSummary{
			ThreadID: t.ThreadID, Title: t.Title, MessageCount: t.MessageCount, UnreadCount: t.UnreadCount,
			LastActivity: t.LastActivity, LastSender: t.LastSender, CreatedBy: t.CreatedBy, CreatedAt: t.CreatedAt,
			Preview: t.Preview,
		}
		out.Threads = append(out.Threads, s)
	}
	return out, nil
}

// GetThread returns a thread and a page of its messages, oldest first.
func (n *Node) GetThread(ctx context.Context, p *rpc.GetThreadParams) (*rpc.GetThreadResult, error) {
	if p.ThreadID == "" {
		return nil, invalid("thread_id is required")
	}
	page, size, offset, err := pageParams(p.Page, p.PageSize)
	if err != nil {
		return nil, err
	}
	t, err := n.store.Thread(ctx, p.ThreadID)
	if isNotFound(err) {
		return nil, notFound("thread not found: %s", p.ThreadID)
	}
	if err != nil {
		return nil, internal("get thread", err)
	}
	pg, err := n.messages(ctx, store.MessageFilter{
		ThreadID: t.ThreadID, Reader: readerOf(ctx), Asc: true, Limit: size, Offset: offset,
	})
	if err != nil {
		return nil, err
	}
	return &rpc.GetThreadResult{
		Thread:   rpc.ThreadInfo{ThreadID: t.ThreadID, Title: t.Title, CreatedBy: t.CreatedBy, CreatedAt: t.CreatedAt},
		Messages: pg.Messages, Total: pg.Total, Page: page, PageSize: size, TotalPages: totalPages(pg.Total, size),
	}, nil
}
