package thrum

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/eventlog/admit"
	"github.com/thrumhq/thrum/identity"
)

// Admission returns the node's admission of lines from other machines:
// the one Gate that every transport (gitsync, a stream) hands what it
// brings, which holds each line to the log's rules and the node's
// (admitSynced) and keeps the quarantine.
func (n *Node) Admission() *admit.Gate { return n.gate }

// admitSynced is the node's part of admission (admit.Options.Judge),
// after the log's shard rules (eventlog.CheckShard) passed an event: an
// event that claims an identity registered on this machine (one with a
// credential here: an agent or a user) is refused, since that identity
// writes its events here and nowhere else. A non-empty reason refuses
// the event; an error means the node could not tell. A read or an
// acknowledgement dated before its message (as this machine has it) is
// refused too: no agent reads a message before it was sent. So is a
// group event that changes a group it may not (groupRule).
func (n *Node) admitSynced(ctx context.Context, shard string, e *eventlog.Event) (reason string, err error) {
	if reason, err := n.groupRule(ctx, e); reason != "" || err != nil {
		return reason, err
	}
	if latest, err := n.receiptFloor(ctx, e); err != nil {
		return "", err
	} else if e.Time.Before(latest) {
		return fmt.Sprintf("a %s by %q in %s dated %s, before its message (%s)",
			e.Type, eventlog.Author(e), eventlog.ShardPath(shard), e.Timestamp(), eventlog.FormatTime(latest)), nil
	}
	for _, id := range eventlog.Claims(e) {
		cands := []string{id}
		if norm := identity.NormalizeAgentID(id); norm != id {
			cands = append(cands, norm)
		}
		for _, cand := range cands {
			local, err := n.store.HasCredential(ctx, cand)
			if err != nil {
				return "", internal("check a synced event", err)
			}
			if local {
				return fmt.Sprintf("a %s by %q in %s: %s is registered on this machine, which alone writes its events",
					e.Type, id, eventlog.ShardPath(shard), cand), nil
			}
		}
	}
	return "", nil
}

// ensureMachine reads this machine's ID from the local shard, writing a
// new one there on the first open: what a group records as the machine
// that created it (see groupRule).
func (n *Node) ensureMachine(ctx context.Context) error {
	from := n.log.Positions()
	from[eventlog.LocalFile] = 0
	_, err := n.log.Scan(ctx, from, func(e *eventlog.Event) error {
		if e.Type != eventlog.TypeMachine || e.Shard != eventlog.LocalShard || n.machine != "" {
			return nil
		}
		if p, err := eventlog.PayloadAs[eventlog.Machine](e); err == nil && eventlog.CheckFields(e, n.now()) == nil {
			n.machine = p.MachineID
		}
		return nil
	})
	if err != nil || n.machine != "" {
		return err
	}
	id := eventlog.NewID()
	if err := n.append(ctx, &eventlog.Event{Type: eventlog.TypeMachine, Shard: eventlog.LocalShard, Payload: eventlog.Machine{MachineID: id}}); err != nil {
		return err
	}
	n.machine = id
	return nil
}

// groupRule says why a group event from another machine may not enter
// the log ("" if it may): it may not claim to come from this machine; a
// group created here (or before machines were recorded, which this
// machine cannot tell from its own) is changed only here; a group
// created on another machine only by events from that machine. A
// group.create of a group that exists changes nothing (the projection
// keeps the first) and is taken.
func (n *Node) groupRule(ctx context.Context, e *eventlog.Event) (string, error) {
	var name, machine string
	switch e.Type {
	case eventlog.TypeGroupCreate:
		p, err := eventlog.PayloadAs[eventlog.GroupCreate](e)
		if err != nil {
			return "", nil // CheckFields refuses it
		}
		name, machine = p.Name, p.Machine
	case eventlog.TypeGroupDelete:
		p, err := eventlog.PayloadAs[eventlog.GroupDelete](e)
		if err != nil {
			return "", nil
		}
		name, machine = p.Name, p.Machine
	case eventlog.TypeGroupMemberAdd, eventlog.TypeGroupMemberDel:
		p, err := eventlog.PayloadAs[eventlog.GroupMember](e)
		if err != nil {
			return "", nil
		}
		name, machine = p.Group, p.Machine
	default:
		return "", nil
	}
	if machine == n.machine {
		return fmt.Sprintf("a %s of group %s says it comes from this machine (%s), which writes its own events", e.Type, name, machine), nil
	}
	if e.Type == eventlog.TypeGroupCreate {
		return "", nil
	}
	g, err := n.store.Group(ctx, name)
	if isNotFound(err) {
		return "", nil // a group this machine does not know: nothing here to change
	}
	if err != nil {
		return "", internal("check a synced group event", err)
	}
	switch g.Machine {
	case n.machine, "":
		return fmt.Sprintf("a %s of group %s, which this machine created (or one made before machines were recorded): only this machine changes it", e.Type, name), nil
	case machine:
		return "", nil
	}
	return fmt.Sprintf("a %s of group %s from machine %q: the group was created on machine %s, which alone changes it", e.Type, name, machine, g.Machine), nil
}

// receiptFloor returns the time a read or an acknowledgement may not be
// dated before: the latest of its messages' times this node has (zero
// for another event, or messages it does not have yet).
func (n *Node) receiptFloor(ctx context.Context, e *eventlog.Event) (time.Time, error) {
	var ids []string
	switch e.Type {
	case eventlog.TypeMessageRead:
		p, err := eventlog.PayloadAs[eventlog.MessageRead](e)
		if err != nil {
			return time.Time{}, nil // CheckFields refuses it
		}
		ids = p.MessageIDs
	case eventlog.TypeMessageAck:
		p, err := eventlog.PayloadAs[eventlog.MessageAck](e)
		if err != nil {
			return time.Time{}, nil
		}
		ids = []string{p.MessageID}
	default:
		return time.Time{}, nil
	}
	latest, err := n.store.LatestMessageTime(ctx, ids)
	if err != nil || latest == "" {
		return time.Time{}, err
	}
	return eventlog.ParseTime(latest)
}

// adoptIdentityTokens carries the credentials of a log written before
// they were local, when tokens were hashed into the agent.register
// events of events.jsonl: those no longer authenticate, since anyone who
// can push to the remote could have written one. The tokens this
// machine's identity files hold (Options.IdentityDir and IdentityDirs)
// are its own, though: while the log has no local shard, each of them
// that such an event gave to the file's agent, and that the log did not
// revoke since, gets a credential in the local shard. Tokens held
// elsewhere (a program's own registration, a browser's user) stop
// working: their holders register again.
func (n *Node) adoptIdentityTokens(ctx context.Context) error {
	if segs, err := n.log.Segments(eventlog.LocalShard); err != nil || len(segs) > 0 {
		return err
	}
	dirs, err := n.identityDirs(ctx)
	if err != nil && n.opts.Logger != nil {
		n.opts.Logger.Warn("thrum: list identity directories; reading IdentityDir only", "err", err)
	}
	files, err := readIdentityFiles(dirs)
	if err != nil {
		return fmt.Errorf("read identity files: %w", err)
	}
	held := map[string]string{} // token hash → the agent whose file holds it
	for _, f := range files {
		if f.file != nil && f.file.Token != "" {
			held[identity.HashToken(f.file.Token)] = identity.NormalizeAgentID(f.file.AgentID)
		}
	}
	if len(held) == 0 {
		return nil
	}
	// The tokens events.jsonl gave out, as the projection applied them
	// then: an agent.register or agent.update adds one (revoke_tokens
	// drops the agent's earlier ones first), agent.cleanup drops them all.
	valid := map[string]string{} // token hash → agent
	from := n.log.Positions()
	from[eventlog.EventsFile] = 0
	_, err = n.log.Scan(ctx, from, func(e *eventlog.Event) error {
		var p struct {
			AgentID      string `json:"agent_id"`
			TokenHash    string `json:"token_hash"`
			RevokeTokens bool   `json:"revoke_tokens"`
		}
		switch e.Type {
		case eventlog.TypeAgentRegister, eventlog.TypeAgentUpdate, eventlog.TypeAgentCleanup:
			if err := e.Decode(&p); err != nil {
				return nil // the projection reports a payload that does not decode
			}
		default:
			return nil
		}
		if e.Type == eventlog.TypeAgentCleanup || p.RevokeTokens {
			for h, id := range valid {
				if id == p.AgentID {
					delete(valid, h)
				}
			}
		}
		if e.Type != eventlog.TypeAgentCleanup && p.TokenHash != "" {
			valid[p.TokenHash] = p.AgentID
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("read old credentials: %w", err)
	}
	var evs []*eventlog.Event
	for _, h := range slices.Sorted(maps.Keys(held)) {
		if id := held[h]; valid[h] == id {
			evs = append(evs, credential(id, h, false))
		}
	}
	if len(evs) == 0 {
		return nil
	}
	if n.opts.Logger != nil {
		n.opts.Logger.Info("thrum: credentials are local now: kept the tokens of this machine's identity files", "count", len(evs))
	}
	return n.append(ctx, evs...)
}
