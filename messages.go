package thrum

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/identity"
	"github.com/thrumhq/thrum/internal/msgindex"
	"github.com/thrumhq/thrum/rpc"
	"github.com/thrumhq/thrum/store"
)

// Paging limits of the list operations.
const (
	DefaultPageSize = 10
	MaxPageSize     = 100
	maxMentions     = 50
	maxTags         = 50
	maxMarkRead     = 1000
)

var formats = map[string]bool{rpc.FormatMarkdown: true, rpc.FormatPlain: true, rpc.FormatJSON: true}

func trimAt(s string) string { return strings.TrimPrefix(strings.TrimSpace(s), "@") }

// author is who a write acts as: the agent, its session, and the user
// behind it when a user acts as an agent.
type author struct {
	agentID   string
	sessionID string
	actingAs  string // the user, when a user sends as agentID
}

// resolveAuthor finds who a message is written as. Users may act as an
// existing agent (acting_as); agents need an active session.
func (n *Node) resolveAuthor(ctx context.Context, actingAs string) (author, error) {
	id, err := n.callerID(ctx, "sending")
	if err != nil {
		return author{}, err
	}
	caller, ok := n.dirc.Agent(id)
	if !ok {
		return author{}, notRegistered("agent %q is not registered", id)
	}
	if actingAs != "" {
		if caller.Kind != rpc.KindUser {
			return author{}, forbidden("only users can impersonate agents")
		}
		target := identity.NormalizeAgentID(actingAs)
		if a, ok := n.dirc.Agent(target); !ok || a.Kind != rpc.KindAgent {
			return author{}, notFound("target agent does not exist: %s", target)
		}
		sid := ""
		if ss, err := n.store.Sessions(ctx, target, true); err == nil && len(ss) > 0 {
			sid = ss[0].SessionID
		}
		return author{agentID: target, sessionID: sid, actingAs: id}, nil
	}
	if caller.Kind == rpc.KindUser {
		return author{agentID: id}, nil // users have no sessions
	}
	_, s, err := n.callerSession(ctx)
	if err != nil {
		return author{}, err
	}
	return author{agentID: id, sessionID: s.SessionID}, nil
}

// checkStructured validates a structured payload: the spec makes it a
// typed payload object, so anything but a JSON object (a string, a
// number, an array) is refused; null or absent means none.
func checkStructured(raw json.RawMessage) error {
	s := bytes.TrimSpace(raw)
	if len(s) == 0 || bytes.Equal(s, []byte("null")) {
		return nil
	}
	if !json.Valid(s) {
		return invalid("structured is not valid JSON")
	}
	if s[0] != '{' {
		return invalid("structured must be a JSON object, as {\"type\":\"test_result\",\"passed\":45}: got %s", jsonKindOf(s[0]))
	}
	return nil
}

// jsonKindOf names the kind of the JSON value that starts with c.
func jsonKindOf(c byte) string {
	switch c {
	case '"':
		return "a string"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	}
	return "a number"
}

// SendMessage sends a message as the caller. Mentions ("@name", "@role",
// "@group", "@everyone"; the "@" is optional) are resolved now and stored
// as mention refs; one that reaches nobody is an error. Recipients says
// whom each mention reaches.
func (n *Node) SendMessage(ctx context.Context, p *rpc.SendMessageParams) (*rpc.SendMessageResult, error) {
	if p.ThreadID != "" {
		if _, err := n.store.Thread(ctx, p.ThreadID); isNotFound(err) {
			return nil, notFound("thread not found: %s", p.ThreadID)
		} else if err != nil {
			return nil, internal("send", err)
		}
	}
	f, err := n.normalizeSend(p)
	if err != nil {
		return nil, err
	}
	var caller string
	if p.IdempotencyKey != "" {
		if caller, err = n.callerID(ctx, "sending"); err != nil {
			return nil, err
		}
		if k, err := n.usedKey(ctx, caller, p.IdempotencyKey); err != nil || k != nil {
			if err != nil {
				return nil, err
			}
			return n.replaySend(ctx, k, f, p.ThreadID)
		}
	}
	pm, err := n.prepareMessage(ctx, f, p.ThreadID)
	if err != nil {
		return nil, err
	}
	if p.IdempotencyKey != "" {
		k, unlock, err := n.keyed(ctx, caller, p.IdempotencyKey)
		if err != nil {
			return nil, err
		}
		defer unlock()
		if k != nil { // a concurrent call with the key wrote first
			return n.replaySend(ctx, k, f, p.ThreadID)
		}
	}
	// A waiter's standing claim is filled in the message's own commit.
	taken, reads := n.standing.reserve(pm.id, pm.author, pm.priority, pm.recipients)
	err = n.append(ctx, append([]*eventlog.Event{pm.event}, reads...)...)
	n.settleClaims(ctx, taken, pm.id, err)
	if err != nil {
		return nil, err
	}
	return &rpc.SendMessageResult{MessageID: pm.id, ThreadID: p.ThreadID, CreatedAt: pm.event.Timestamp(), Recipients: pm.recipients}, nil
}

// sendForm is one send normalized, once, for both its write
// (prepareMessage) and the check of a retry against the message its
// idempotency key made (differs): defaults filled in, mentions resolved
// to the addresses the message stores.
type sendForm struct {
	p                *rpc.SendMessageParams
	format, priority string
	structured       json.RawMessage
	actingAs         string          // the agent a user sends as, normalized
	refs             []rpc.Pair      // the refs as given, then one mention ref per address
	recipients       []rpc.Recipient // whom each mention that resolved reaches
	unknown          string          // the first mention that resolves to nothing, "" if none
	ack              bool
	ackWithin        string
}

// normalizeSend validates p and normalizes it. A mention that resolves
// to nothing is kept as its normalized address and named in unknown: a
// retry compares it, and a write refuses it.
func (n *Node) normalizeSend(p *rpc.SendMessageParams) (*sendForm, error) {
	if p.Content == "" {
		return nil, invalid("content is required")
	}
	if len(p.Content) > n.opts.MaxContentBytes {
		return nil, tooLarge("content is %d bytes: the limit is %d", len(p.Content), n.opts.MaxContentBytes)
	}
	f := &sendForm{p: p, format: cmp.Or(p.Format, rpc.FormatMarkdown), priority: cmp.Or(p.Priority, rpc.PriorityNormal)}
	if !formats[f.format] {
		return nil, invalid("invalid format %q: use markdown, plain or json", p.Format)
	}
	if !slices.Contains(eventlog.Priorities, f.priority) {
		return nil, invalid("invalid priority %q: use low, normal, high or critical", p.Priority)
	}
	if err := checkStructured(p.Structured); err != nil {
		return nil, err
	}
	if err := checkPairs("scopes", p.Scopes); err != nil {
		return nil, err
	}
	if err := checkPairs("refs", p.Refs); err != nil {
		return nil, err
	}
	if len(p.Mentions) > maxMentions {
		return nil, tooLarge("too many mentions: at most %d", maxMentions)
	}
	if len(p.Tags) > maxTags {
		return nil, tooLarge("too many tags: at most %d", maxTags)
	}
	var err error
	if f.ack, f.ackWithin, err = ackWithin(p); err != nil {
		return nil, err
	}
	f.structured = normalizeStructured(p.Structured)
	if p.ActingAs != "" {
		f.actingAs = identity.NormalizeAgentID(p.ActingAs)
	}
	var mentions []string
	for _, r := range p.Refs {
		if r.Type == rpc.RefMention {
			mentions = append(mentions, r.Value)
		} else {
			f.refs = append(f.refs, r)
		}
	}
	seen := map[string]bool{}
	for _, m := range append(mentions, p.Mentions...) {
		addr := identity.NormalizeAgentID(m)
		if addr == "" {
			return nil, invalid("empty mention: name an agent, role or group, as @reviewer")
		}
		to, rc, ok := n.resolveMention(m, addr)
		if !ok && f.unknown == "" {
			f.unknown = addr
		}
		if seen[to] {
			continue
		}
		seen[to] = true
		f.refs = append(f.refs, rpc.Pair{Type: rpc.RefMention, Value: to})
		if ok {
			f.recipients = append(f.recipients, rc)
		}
	}
	return f, nil
}

// preparedMessage is a validated message.create, ready to append.
type preparedMessage struct {
	id               string
	author, priority string
	event            *eventlog.Event
	recipients       []rpc.Recipient
}

// prepareMessage builds the event of the send f, in threadID, checking
// what normalizeSend leaves to it: the author, the message replied to,
// and recipients unknown here (which a refresh from the other clones
// may bring in).
func (n *Node) prepareMessage(ctx context.Context, f *sendForm, threadID string) (*preparedMessage, error) {
	au, err := n.resolveAuthor(ctx, f.p.ActingAs)
	if err != nil {
		return nil, err
	}
	for _, r := range f.refs {
		if r.Type != rpc.RefReplyTo {
			continue
		}
		if _, err := n.store.Message(ctx, r.Value, ""); isNotFound(err) {
			return nil, notFound("reply_to message not found: %s", r.Value)
		} else if err != nil {
			return nil, internal("send", err)
		}
	}
	if f.unknown != "" && n.opts.Refresh != nil {
		// Perhaps registered elsewhere and not synced yet: bring the
		// other clones' events in once, then look again.
		n.refresh(ctx)
		again, err := n.normalizeSend(f.p)
		if err != nil {
			return nil, err
		}
		*f = *again
	}
	if f.unknown != "" {
		return nil, rpc.ReasonErrorf(rpc.CodeNotFound, rpc.ReasonUnknownRecipient, "unknown recipient @%s: no agent, role or group has that name", f.unknown)
	}
	n.markActive(ctx, f.recipients)
	agents := recipientAgents(f.recipients, au.agentID)
	if f.ack && len(agents) == 0 {
		return nil, invalid("ack_required needs a recipient: address the message to an agent, role or group other than yourself")
	}
	p := f.p
	res := &preparedMessage{id: eventlog.NewMessageID(), author: au.agentID, priority: f.priority, recipients: f.recipients}
	res.event = &eventlog.Event{Type: eventlog.TypeMessageCreate, Shard: shardOf(au.agentID), Payload: eventlog.MessageCreate{
		MessageID: res.id, AgentID: au.agentID, SessionID: au.sessionID, ThreadID: threadID,
		Format: f.format, Content: p.Content, Structured: f.structured,
		Scopes: p.Scopes, Refs: f.refs, Tags: p.Tags, Priority: f.priority,
		ActingAs: au.actingAs, Disclose: p.Disclose && au.actingAs != "",
		IdempotencyKey: p.IdempotencyKey,
		Recipients:     agents, AckRequired: f.ack, AckWithin: f.ackWithin,
	}}
	return res, nil
}

// resolveMention resolves a mention m (addr normalized) and returns the
// address it resolved as: a legacy role:hash ID resolves as its role.
func (n *Node) resolveMention(m, addr string) (string, rpc.Recipient, bool) {
	if rc, ok := n.dirc.Resolve(addr); ok {
		return addr, rc, true
	}
	if role, _, legacy := identity.ParseLegacyID(trimAt(m)); legacy {
		rc, ok := n.dirc.Resolve(role)
		return role, rc, ok
	}
	return addr, rpc.Recipient{}, false
}

// refresh runs Options.Refresh, bounded by RefreshTimeout. Its failure
// is only logged: the caller decides on what the directory holds.
func (n *Node) refresh(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, n.opts.RefreshTimeout)
	defer cancel()
	if err := n.opts.Refresh(ctx); err != nil && n.opts.Logger != nil {
		n.opts.Logger.Debug("thrum: refresh for an unknown recipient", "err", err)
	}
}

func normalizeStructured(raw json.RawMessage) json.RawMessage {
	if s := strings.TrimSpace(string(raw)); s == "" || s == "null" {
		return nil
	}
	return raw
}

// markActive fills each recipient's Active list from last_seen_at.
func (n *Node) markActive(ctx context.Context, rs []rpc.Recipient) {
	if len(rs) == 0 {
		return
	}
	seen := n.lastSeen(ctx)
	for i := range rs {
		for _, id := range rs[i].Agents {
			if n.status(seen[id]) == "active" {
				rs[i].Active = append(rs[i].Active, id)
			}
		}
	}
}

// lastSeen returns every agent's last_seen_at, at most a second old.
func (n *Node) lastSeen(ctx context.Context) map[string]string {
	n.seenMu.Lock()
	defer n.seenMu.Unlock()
	if n.seen != nil && time.Since(n.seenTime) < time.Second {
		return n.seen
	}
	seen, err := n.store.LastSeen(ctx)
	if err != nil {
		return n.seen // best effort: recipients are still reported
	}
	n.seen, n.seenTime = seen, time.Now()
	return seen
}

// body is a message's body as results show it; one that no team key
// held here opens says whose it is and what would open it.
func body(m *store.Message) rpc.Body {
	if m.Sealed != "" {
		return rpc.Body{Format: m.Format, Content: "encrypted message from " + m.AgentID + " (import the team key)", Sealed: m.Sealed}
	}
	return rpc.Body{Format: m.Format, Content: m.Content, Structured: m.Structured}
}

// pairs is scopes or refs as a result holds them: [] for none.
func pairs(ps []rpc.Pair) []rpc.Pair {
	if ps == nil {
		return []rpc.Pair{}
	}
	return ps
}

func tagsOf(m *store.Message) []string {
	if t := m.TagList(); t != nil {
		return t
	}
	return []string{}
}

// summary is a message as listings return it; local holds the
// identities registered here (localIdentities).
func (n *Node) summary(m *store.Message, local map[string]bool) rpc.MessageSummary {
	return rpc.MessageSummary{
		MessageID: m.MessageID, ThreadID: m.ThreadID, AgentID: m.AgentID, Body: body(m),
		CreatedAt: m.CreatedAt, UpdatedAt: m.UpdatedAt, Deleted: m.Deleted, IsRead: m.IsRead,
		Priority: m.Priority, Scopes: pairs(m.Scopes), Refs: pairs(m.Refs), Tags: tagsOf(m), Version: m.Version,
		AckRequired: m.AckRequired, Sender: n.sender(m, local),
	}
}

// readerOf is whose read state a query reports: the caller, if any.
func readerOf(ctx context.Context) string {
	if c, ok := CallerFrom(ctx); ok {
		return identity.NormalizeAgentID(c.AgentID)
	}
	return ""
}

// GetMessage returns one message in full, deleted or not, with its
// receipts. It marks nothing read: looking is not delivering.
func (n *Node) GetMessage(ctx context.Context, p *rpc.GetMessageParams) (*rpc.GetMessageResult, error) {
	if p.MessageID == "" {
		return nil, invalid("message_id is required")
	}
	d, err := n.messageDetail(ctx, p.MessageID, readerOf(ctx))
	if err != nil {
		return nil, err
	}
	if d.Receipts, err = n.receipts(ctx, p.MessageID); err != nil {
		return nil, err
	}
	return &rpc.GetMessageResult{Message: *d}, nil
}

// messageDetail is a message as message.get returns it, is_read as reader
// sees it.
func (n *Node) messageDetail(ctx context.Context, id, reader string) (*rpc.MessageDetail, error) {
	m, err := n.store.Message(ctx, id, reader)
	if isNotFound(err) {
		return nil, notFound("message not found: %s", id)
	}
	if err != nil {
		return nil, internal("get message", err)
	}
	local, err := n.localIdentities(ctx)
	if err != nil {
		return nil, err
	}
	d := rpc.MessageDetail{
		MessageID: m.MessageID, ThreadID: m.ThreadID,
		Author: rpc.Author{AgentID: m.AgentID, SessionID: m.SessionID},
		Body:   body(m), Scopes: pairs(m.Scopes), Refs: pairs(m.Refs),
		Metadata:  rpc.MessageMetadata{DeletedAt: m.DeletedAt, DeleteReason: m.DeleteReason},
		CreatedAt: m.CreatedAt, UpdatedAt: m.UpdatedAt, Deleted: m.Deleted,
		Priority: m.Priority, Tags: tagsOf(m), Version: m.Version, IsRead: m.IsRead,
		AckRequired: m.AckRequired, AckDue: m.AckDue, Sender: n.sender(m, local),
	}
	if m.Disclose {
		d.DisclosedVia = m.ActingAs
	}
	return &d, nil
}

// maxOffset bounds the offset of a page: no list is longer, so a page
// past it is as empty as any page past the end.
const maxOffset = math.MaxInt32

// pageParams validates and defaults page and page_size, and returns the
// offset of the page's first item, computed without overflow: a page far
// past the end (up to math.MaxInt) is empty, never page 1.
func pageParams(page, size int) (int, int, int, error) {
	if size == 0 {
		size = DefaultPageSize
	}
	if size < 1 || size > MaxPageSize {
		return 0, 0, 0, invalid("invalid page_size %d: use 1 to %d", size, MaxPageSize)
	}
	if page == 0 {
		page = 1
	}
	if page < 1 {
		return 0, 0, 0, invalid("invalid page %d: pages start at 1", page)
	}
	offset := maxOffset
	if page-1 <= maxOffset/size {
		offset = (page - 1) * size
	}
	return page, size, offset, nil
}

func totalPages(total, size int) int { return (total + size - 1) / size }

// ListMessages lists messages with filters, paging and sorting. mentions
// and unread act for the caller; mention_role and unread_for_agent name
// the agent explicitly. A mention filter matches a message addressed to
// the agent by name, by role, through a group, or to everyone — resolved
// now, so group changes apply to earlier messages too.
func (n *Node) ListMessages(ctx context.Context, p *rpc.ListMessagesParams) (*rpc.ListMessagesResult, error) {
	page, size, offset, err := pageParams(p.Page, p.PageSize)
	if err != nil {
		return nil, err
	}
	f := store.MessageFilter{
		ThreadID: p.ThreadID, AuthorID: identity.NormalizeAgentID(p.AuthorID),
		IncludeDeleted: p.IncludeDeleted, Limit: size, Offset: offset,
	}
	switch p.SortBy {
	case "", "created_at", "updated_at":
		f.SortBy = p.SortBy
	default:
		return nil, invalid("invalid sort_by %q: must be \"created_at\" or \"updated_at\"", p.SortBy)
	}
	switch p.SortOrder {
	case "", "desc":
	case "asc":
		f.Asc = true
	default:
		return nil, invalid("invalid sort_order %q: must be \"asc\" or \"desc\"", p.SortOrder)
	}
	f.Scope, f.Ref = p.Scope, p.Ref
	f.Reader = readerOf(ctx)
	if p.UnreadForAgent != "" {
		f.Reader = identity.NormalizeAgentID(p.UnreadForAgent)
		f.Unread = true
	}
	if p.Unread {
		if f.Reader == "" {
			return nil, unauthenticated("the unread filter needs the current agent: pass caller_agent_id or use unread_for_agent")
		}
		f.Unread = true
	}
	if f.Mentions, err = n.mentionFilter(ctx, p.MentionRole, p.Mentions); err != nil {
		return nil, err
	}
	pg, err := n.messages(ctx, f)
	if err != nil {
		return nil, err
	}
	out := &rpc.ListMessagesResult{
		Messages: pg.Messages, Total: pg.Total, Unread: pg.Unread,
		Page: page, PageSize: size, TotalPages: totalPages(pg.Total, size),
	}
	return out, nil
}

// mentionFilter resolves a listing's or search's mention filters to the
// mention values a message must hold one of (nil: no filter): those of
// mentionRole (a role, or an agent's ID: everything addressed to it),
// narrowed by mine to what is addressed to the caller.
func (n *Node) mentionFilter(ctx context.Context, mentionRole string, mine bool) ([]string, error) {
	var targets []string
	if mentionRole != "" {
		targets = n.dirc.MentionTargets(trimAt(mentionRole))
	}
	if mine {
		me := readerOf(ctx)
		if me == "" {
			return nil, unauthenticated("the mentions filter needs the current agent: pass caller_agent_id or use mention_role")
		}
		own := n.dirc.Targets(me)
		if targets != nil {
			own = intersection(targets, own)
		}
		targets = own
	}
	return targets, nil
}

type messagePage struct {
	Messages      []rpc.MessageSummary
	Total, Unread int
}

// messages runs a listing: the index picks the page and counts, the
// projection supplies the page's rows. While the index is still building
// from the projection after start, SQLite picks them (the same answer,
// slower), so a listing never waits for the build; it waits only for a
// snapshot's load, which is quicker than SQLite's answer.
// SQLite answers too while a body waits for a team key
// (Projector.sealedWait), which it does not count unread.
func (n *Node) messages(ctx context.Context, f store.MessageFilter) (*messagePage, error) {
	var ids []string
	var total, unread int
	var err error
	if f.Reader != "" && n.proj.sealedWait.Load() {
		// The index would count what waits for a team key unread.
		ids, total, unread, err = n.store.MessageIDs(ctx, f)
	} else if ids, total, unread, err = n.idx.List(ctx, f); errors.Is(err, msgindex.ErrBuilding) {
		ids, total, unread, err = n.store.MessageIDs(ctx, f)
	}
	switch {
	case errors.Is(err, msgindex.ErrClosed):
		return nil, rpcUnavailable()
	case err != nil && ctx.Err() != nil:
		return nil, err
	case err != nil:
		return nil, internal("message index", err)
	}
	rows, err := n.store.MessagesByID(ctx, ids, f.Reader)
	if err != nil {
		return nil, internal("list messages", err)
	}
	var local map[string]bool // the senders' words: none to give on an empty page, the common one
	if len(rows) > 0 {
		if local, err = n.localIdentities(ctx); err != nil {
			return nil, err
		}
	}
	out := &messagePage{Messages: make([]rpc.MessageSummary, 0, len(rows)), Total: total, Unread: unread}
	for _, m := range rows {
		out.Messages = append(out.Messages, n.summary(m, local))
	}
	return out, nil
}

func intersection(a, b []string) []string {
	out := []string{}
	for _, x := range a {
		for _, y := range b {
			if x == y {
				out = append(out, x)
				break
			}
		}
	}
	return out
}

// ownMessage loads a message the caller may change: it exists, is not
// deleted, and the caller wrote it.
func (n *Node) ownMessage(ctx context.Context, id, verb string) (*store.Message, author, error) {
	if id == "" {
		return nil, author{}, invalid("message_id is required")
	}
	m, err := n.store.Message(ctx, id, "")
	if isNotFound(err) {
		return nil, author{}, notFound("message not found: %s", id)
	}
	if err != nil {
		return nil, author{}, internal(verb+" message", err)
	}
	me, err := n.registeredCaller(ctx, strings.TrimSuffix(verb, "e")+"ing a message") // editing, deleting
	if err != nil {
		return nil, author{}, err
	}
	if m.AgentID != me && !(m.ActingAs != "" && m.ActingAs == me) {
		return nil, author{}, forbidden("only message author can %s: %s was written by %s", verb, id, m.AgentID)
	}
	if m.Deleted {
		if verb == "edit" {
			return nil, author{}, conflict("cannot edit deleted message: %s", id)
		}
		return nil, author{}, conflict("message already deleted: %s", id)
	}
	au := author{agentID: me}
	if a, _ := n.dirc.Agent(me); a.Kind == rpc.KindAgent {
		_, s, err := n.callerSession(ctx)
		if err != nil {
			return nil, author{}, err
		}
		au.sessionID = s.SessionID
	}
	return m, au, nil
}

// EditMessage replaces a message's content and/or structured data. Only
// its author may, and not once deleted. Each edit is kept with its before
// and after; Version counts them.
func (n *Node) EditMessage(ctx context.Context, p *rpc.EditMessageParams) (*rpc.EditMessageResult, error) {
	if p.MessageID == "" {
		return nil, invalid("message_id is required")
	}
	if p.Content == nil && len(normalizeStructured(p.Structured)) == 0 {
		return nil, invalid("at least one of content or structured must be provided")
	}
	if p.Content != nil && *p.Content == "" {
		return nil, invalid("content cannot be empty: delete the message instead")
	}
	if p.Content != nil && len(*p.Content) > n.opts.MaxContentBytes {
		return nil, tooLarge("content is %d bytes: the limit is %d", len(*p.Content), n.opts.MaxContentBytes)
	}
	if err := checkStructured(p.Structured); err != nil {
		return nil, err
	}
	m, au, err := n.ownMessage(ctx, p.MessageID, "edit")
	if err != nil {
		return nil, err
	}
	e := &eventlog.Event{Type: eventlog.TypeMessageEdit, Shard: shardOf(m.AgentID), Payload: eventlog.MessageEdit{
		MessageID: m.MessageID, AgentID: au.agentID, SessionID: au.sessionID,
		Content: p.Content, Structured: normalizeStructured(p.Structured),
	}}
	// The latest edit stands (by time): this one is dated after the one
	// shown, even when that came from a machine whose clock is ahead.
	if last, err := eventlog.ParseTime(m.UpdatedAt); err == nil && !time.Now().After(last) {
		e.Time = last.Add(time.Nanosecond)
	}
	if err := n.append(ctx, e); err != nil {
		return nil, err
	}
	return &rpc.EditMessageResult{MessageID: m.MessageID, UpdatedAt: e.Timestamp(), Version: m.Version + 1}, nil
}

// DeleteMessage soft-deletes a message: it stays in the log and in
// message.get, flagged, and leaves listings.
func (n *Node) DeleteMessage(ctx context.Context, p *rpc.DeleteMessageParams) (*rpc.DeleteMessageResult, error) {
	if len(p.Reason) > maxPairLen {
		return nil, tooLarge("reason is too long: at most %d bytes", maxPairLen)
	}
	m, au, err := n.ownMessage(ctx, p.MessageID, "delete")
	if err != nil {
		return nil, err
	}
	e := &eventlog.Event{Type: eventlog.TypeMessageDelete, Shard: shardOf(m.AgentID), Payload: eventlog.MessageDelete{
		MessageID: m.MessageID, AgentID: au.agentID, Reason: p.Reason,
	}}
	if err := n.append(ctx, e); err != nil {
		return nil, err
	}
	return &rpc.DeleteMessageResult{MessageID: m.MessageID, DeletedAt: e.Timestamp()}, nil
}

// readerSession returns the caller, who must be registered, and the
// session its reads are recorded in. Reads are keyed by (message,
// session). Users have no sessions: their ID stands in, so that two
// users' reads never collide.
func (n *Node) readerSession(ctx context.Context, what string) (me, sid string, err error) {
	me, err = n.registeredCaller(ctx, what)
	if err != nil {
		return "", "", err
	}
	sid = me
	if a, _ := n.dirc.Agent(me); a.Kind != rpc.KindUser {
		_, s, err := n.callerSession(ctx)
		if err != nil {
			return "", "", err
		}
		sid = s.SessionID
	}
	return me, sid, nil
}

// messageDetails returns the messages ids as message.get does, leaving
// out those that are gone.
func (n *Node) messageDetails(ctx context.Context, ids []string, reader string) ([]rpc.MessageDetail, error) {
	var out []rpc.MessageDetail
	for _, id := range ids {
		d, err := n.messageDetail(ctx, id, reader)
		if isNotFound(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, *d)
	}
	return out, nil
}

func dedupe(in []string) []string {
	seen := make(map[string]bool, len(in))
	out := make([]string, 0, len(in))
	for _, s := range in {
		if s != "" && !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}
