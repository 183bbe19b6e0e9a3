package thrum

import (
	"context"

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/identity"
	"github.com/thrumhq/thrum/rpc"
	"github.com/thrumhq/thrum/store"
)

// checkPairs validates scopes or refs given by a caller.
func checkPairs(what string, in []rpc.Pair) error {
	if len(in) > maxPairs {
		return tooLarge("too many %s: at most %d", what, maxPairs)
	}
	for _, p := range in {
		if p.Type == "" || p.Value == "" {
			return invalid("each of %s needs a type and a value, as {\"type\":\"module\",\"value\":\"auth\"}", what)
		}
		if len(p.Type) > maxPairLen || len(p.Value) > maxPairLen {
			return tooLarge("a %s entry is too long: type and value are at most %d bytes each", what, maxPairLen)
		}
	}
	return nil
}

const (
	maxPairs   = 100
	maxPairLen = 1024
)

// StartSession starts a session for an agent, first ending (reason
// "superseded") any sessions of that agent still open: they were
// orphaned by a crash or a lost terminal.
func (n *Node) StartSession(ctx context.Context, p *rpc.StartSessionParams) (*rpc.StartSessionResult, error) {
	if p.AgentID == "" {
		return nil, invalid("agent_id is required")
	}
	id := identity.NormalizeAgentID(p.AgentID)
	if a, ok := n.dirc.Agent(id); !ok || a.Kind != rpc.KindAgent {
		return nil, notFound("agent not found: %s is not registered", id)
	}
	if c, ok := CallerFrom(ctx); ok && identity.NormalizeAgentID(c.AgentID) != id {
		if a, _ := n.dirc.Agent(identity.NormalizeAgentID(c.AgentID)); a.Kind != rpc.KindUser {
			return nil, forbidden("%s may not start a session for %s", c.AgentID, id)
		}
	}
	if err := checkPairs("scopes", p.Scopes); err != nil {
		return nil, err
	}
	if err := checkPairs("refs", p.Refs); err != nil {
		return nil, err
	}
	n.ctlMu.Lock()
	defer n.ctlMu.Unlock()
	if a, ok := n.dirc.Agent(id); !ok || a.Kind != rpc.KindAgent {
		return nil, notFound("agent not found: %s is not registered", id)
	}
	open, err := n.store.Sessions(ctx, id, true)
	if err != nil {
		return nil, internal("start session", err)
	}
	var evs []*eventlog.Event
	for _, s := range open {
		evs = append(evs, &eventlog.Event{Type: eventlog.TypeSessionEnd, Payload: eventlog.SessionEnd{
			SessionID: s.SessionID, AgentID: id, Reason: "superseded"}})
	}
	sid := "ses_" + eventlog.NewID()
	start := &eventlog.Event{Type: eventlog.TypeSessionStart, Payload: eventlog.SessionStart{
		SessionID: sid, AgentID: id, Scopes: p.Scopes, Refs: p.Refs}}
	evs = append(evs, start)
	if err := n.append(ctx, evs...); err != nil {
		return nil, err
	}
	return &rpc.StartSessionResult{SessionID: sid, AgentID: id, StartedAt: start.Timestamp()}, nil
}

// openSession loads a session that must exist and not have ended, and
// checks the caller may act on it.
func (n *Node) openSession(ctx context.Context, id string) (*store.Session, error) {
	if id == "" {
		return nil, invalid("session_id is required")
	}
	s, err := n.store.Session(ctx, id)
	if isNotFound(err) {
		return nil, notFound("session not found: %s", id)
	}
	if err != nil {
		return nil, internal("get session", err)
	}
	if c, ok := CallerFrom(ctx); ok && identity.NormalizeAgentID(c.AgentID) != s.AgentID {
		if a, _ := n.dirc.Agent(identity.NormalizeAgentID(c.AgentID)); a.Kind != rpc.KindUser {
			return nil, forbidden("session %s belongs to %s", id, s.AgentID)
		}
	}
	if s.EndedAt != "" {
		return nil, conflict("session has already ended: %s", id)
	}
	return s, nil
}

var endReasons = map[string]bool{"normal": true, "crash": true, "superseded": true}

// EndSession ends a session.
func (n *Node) EndSession(ctx context.Context, p *rpc.EndSessionParams) (*rpc.EndSessionResult, error) {
	reason := p.Reason
	if reason == "" {
		reason = "normal"
	}
	if !endReasons[reason] {
		return nil, invalid("invalid reason %q: use normal, crash or superseded", p.Reason)
	}
	n.ctlMu.Lock()
	defer n.ctlMu.Unlock()
	s, err := n.openSession(ctx, p.SessionID)
	if err != nil {
		return nil, err
	}
	e := &eventlog.Event{Type: eventlog.TypeSessionEnd, Payload: eventlog.SessionEnd{SessionID: s.SessionID, AgentID: s.AgentID, Reason: reason}}
	if err := n.append(ctx, e); err != nil {
		return nil, err
	}
	var dur int64
	if t, err := eventlog.ParseTime(s.StartedAt); err == nil {
		dur = e.Time.Sub(t).Milliseconds()
	}
	return &rpc.EndSessionResult{SessionID: s.SessionID, EndedAt: e.Timestamp(), DurationMs: dur}, nil
}

// Heartbeat marks a session (and its agent) as seen, applies scope and
// ref changes, and, when the session has a worktree ref, records the git
// work context of that worktree.
func (n *Node) Heartbeat(ctx context.Context, p *rpc.HeartbeatParams) (*rpc.HeartbeatResult, error) {
	for _, err := range []error{
		checkPairs("add_scopes", p.AddScopes), checkPairs("remove_scopes", p.RemoveScopes),
		checkPairs("add_refs", p.AddRefs), checkPairs("remove_refs", p.RemoveRefs),
	} {
		if err != nil {
			return nil, err
		}
	}
	s, err := n.openSession(ctx, p.SessionID)
	if err != nil {
		return nil, err
	}
	hb := &eventlog.Event{Type: eventlog.TypeSessionHeartbeat, Payload: eventlog.SessionHeartbeat{
		SessionID: s.SessionID, AgentID: s.AgentID,
		AddScopes: p.AddScopes, RemoveScopes: p.RemoveScopes,
		AddRefs: p.AddRefs, RemoveRefs: p.RemoveRefs,
	}}
	evs := []*eventlog.Event{hb}
	if wc, ok := n.workContext(ctx, n.worktreeOf(ctx, s.SessionID, p)); ok {
		wc.SessionID, wc.AgentID = s.SessionID, s.AgentID
		evs = append(evs, &eventlog.Event{Type: eventlog.TypeSessionContext, Payload: wc})
	}
	if err := n.append(ctx, evs...); err != nil {
		return nil, err
	}
	return &rpc.HeartbeatResult{SessionID: s.SessionID, LastSeenAt: hb.Timestamp()}, nil
}

// worktreeOf returns the session's worktree ref after this heartbeat's
// changes, or "".
func (n *Node) worktreeOf(ctx context.Context, sid string, p *rpc.HeartbeatParams) string {
	for _, r := range p.AddRefs {
		if r.Type == rpc.RefWorktree {
			return r.Value
		}
	}
	refs, err := n.store.SessionPairs(ctx, sid, "refs")
	if err != nil {
		return ""
	}
	for _, r := range refs {
		if r.Type != rpc.RefWorktree {
			continue
		}
		removed := false
		for _, x := range p.RemoveRefs {
			if x.Type == r.Type && x.Value == r.Value {
				removed = true
			}
		}
		if !removed {
			return r.Value
		}
	}
	return ""
}

// SetIntent sets (or, with "", clears) a session's intent. The intent is
// required: a call without it is an error rather than a silent clear.
func (n *Node) SetIntent(ctx context.Context, p *rpc.SetIntentParams) (*rpc.SetIntentResult, error) {
	if p.SessionID == "" {
		return nil, invalid("session_id is required")
	}
	if p.Intent == nil {
		return nil, invalid("intent is required: pass \"\" to clear it")
	}
	intent := *p.Intent
	if len(intent) > maxPairLen*4 {
		return nil, tooLarge("intent is too long: at most %d bytes", maxPairLen*4)
	}
	s, err := n.openSession(ctx, p.SessionID)
	if err != nil {
		return nil, err
	}
	e := &eventlog.Event{Type: eventlog.TypeSessionIntent, Payload: eventlog.SessionIntent{SessionID: s.SessionID, AgentID: s.AgentID, Intent: intent}}
	if err := n.append(ctx, e); err != nil {
		return nil, err
	}
	return &rpc.SetIntentResult{SessionID: s.SessionID, Intent: intent, IntentUpdatedAt: e.Timestamp()}, nil
}

// SetTask sets (or, with "", clears) a session's current task. The task
// is required: a call without it is an error rather than a silent clear.
func (n *Node) SetTask(ctx context.Context, p *rpc.SetTaskParams) (*rpc.SetTaskResult, error) {
	if p.SessionID == "" {
		return nil, invalid("session_id is required")
	}
	if p.CurrentTask == nil {
		return nil, invalid("current_task is required: pass \"\" to clear it")
	}
	task := *p.CurrentTask
	if len(task) > maxPairLen {
		return nil, tooLarge("current_task is too long: at most %d bytes", maxPairLen)
	}
	s, err := n.openSession(ctx, p.SessionID)
	if err != nil {
		return nil, err
	}
	e := &eventlog.Event{Type: eventlog.TypeSessionTask, Payload: eventlog.SessionTask{SessionID: s.SessionID, AgentID: s.AgentID, Task: task}}
	if err := n.append(ctx, e); err != nil {
		return nil, err
	}
	return &rpc.SetTaskResult{SessionID: s.SessionID, CurrentTask: task, TaskUpdatedAt: e.Timestamp()}, nil
}

// ListSessions lists sessions, newest first.
func (n *Node) ListSessions(ctx context.Context, p *rpc.ListSessionsParams) (*rpc.ListSessionsResult, error) {
	ss, err := n.store.Sessions(ctx, identity.NormalizeAgentID(p.AgentID), p.ActiveOnly)
	if err != nil {
		return nil, internal("list sessions", err)
	}
	out := &rpc.ListSessionsResult{Sessions: make([]rpc.SessionInfo, 0, len(ss))}
	for _, s := range ss {
		status := "active"
		if s.EndedAt != "" {
			status = "ended"
		}
		out.Sessions = append(out.Sessions, rpc.SessionInfo{
			SessionID: s.SessionID, AgentID: s.AgentID, StartedAt: s.StartedAt, EndedAt: s.EndedAt,
			EndReason: s.EndReason, LastSeenAt: s.LastSeenAt, Intent: s.Intent, Status: status,
		})
	}
	return out, nil
}
