package thrum

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/eventlog/admit"
	"github.com/thrumhq/thrum/identity"
	"github.com/thrumhq/thrum/store"
)

// Admission returns the node's admission of lines from other machines:
// the one Gate that every transport (gitsync, a stream) hands what it
// brings, which holds each line to the log's rules and the node's
// (admitSynced) and keeps the quarantine.
func (n *Node) Admission() *admit.Gate { return n.gate }

// admitSynced is the node's part of admission (admit.Options.Judge),
// after the log's shard and field rules passed the events of one call.
// Registrations and seals are judged first, in the order found, so that
// the keys and seals they bring hold for every other event of the call,
// wherever it stands; then the rest. Each event is held to:
//
//   - who it may claim to be: no identity registered on this machine
//     (one with a credential here: an agent or a user), which writes its
//     events here and nowhere else;
//   - what it may change: a read or an acknowledgement dated before its
//     message (as this machine has it) is refused, since no agent reads
//     a message before it was sent; so is a group event that changes a
//     group it may not (groupRule);
//   - whose key signed it (admitSignature).
func (n *Node) admitSynced(ctx context.Context, shard string, evs []*eventlog.Event) ([]admit.Verdict, error) {
	v, err := n.newKeyView(ctx)
	if err != nil {
		return nil, err
	}
	for _, e := range evs {
		if eventlog.Signed(e.Raw) {
			v.signs[eventlog.Signer(e)] = true
		}
	}
	out := make([]admit.Verdict, len(evs))
	for _, first := range []bool{true, false} {
		for i, e := range evs {
			if eventlog.BringsKeys(e) != first {
				continue
			}
			vd, err := n.judgeSynced(ctx, v, shard, e)
			if err != nil {
				return nil, err
			}
			out[i] = vd
			if vd == (admit.Verdict{}) {
				if err := v.learn(ctx, e); err != nil {
					return nil, err
				}
			}
		}
	}
	return out, nil
}

// judgeSynced holds one event to the node's rules (see admitSynced).
func (n *Node) judgeSynced(ctx context.Context, v *keyView, shard string, e *eventlog.Event) (admit.Verdict, error) {
	refuse := func(reason string) (admit.Verdict, error) { return admit.Verdict{Refuse: reason}, nil }
	if reason, err := n.groupRule(ctx, e); reason != "" || err != nil {
		return admit.Verdict{Refuse: reason}, err
	}
	if latest, err := n.receiptFloor(ctx, e); err != nil {
		return admit.Verdict{}, err
	} else if e.Time.Before(latest) {
		return refuse(fmt.Sprintf("a %s by %q in %s dated %s, before its message (%s)",
			e.Type, eventlog.Author(e), eventlog.ShardPath(shard), e.Timestamp(), eventlog.FormatTime(latest)))
	}
	for _, id := range eventlog.Claims(e) {
		cands := []string{id}
		if norm := identity.NormalizeAgentID(id); norm != id {
			cands = append(cands, norm)
		}
		for _, cand := range cands {
			local, err := n.store.HasCredential(ctx, cand)
			if err != nil {
				return admit.Verdict{}, internal("check a synced event", err)
			}
			if local {
				return refuse(fmt.Sprintf("a %s by %q in %s: %s is registered on this machine, which alone writes its events",
					e.Type, id, eventlog.ShardPath(shard), cand))
			}
		}
	}
	return n.admitSignature(ctx, v, shard, e)
}

// admitSignature holds an event to its signature:
//
//   - an event the machine writes in its own name (eventlog.MachineSigned)
//     is signed by the key of the machine it names, whose ID is its key;
//   - any other is signed by a key this clone trusts for the identity
//     that acted (eventlog.Signer): the team's keyring's for an identity
//     it lists, else those the identity's registrations brought (the
//     first of which was trusted on first use), and any the owner
//     trusted here. An identity with no key here yet waits: its
//     registration has not arrived;
//   - a registration may bring a new key for its identity only if the
//     identity has none here yet (trust on first use), or the key is one
//     of those trusted; it must bring one if the identity has one, and
//     come from the machine whose registration first brought it;
//   - an event that names no one (an application's) claims no one, and
//     is taken signed or not;
//   - an unsigned event (admitUnsigned) is legacy.
func (n *Node) admitSignature(ctx context.Context, v *keyView, shard string, e *eventlog.Event) (admit.Verdict, error) {
	where := fmt.Sprintf("a %s by %q in %s", e.Type, eventlog.Author(e), eventlog.ShardPath(shard))
	refuse := func(format string, args ...any) (admit.Verdict, error) {
		return admit.Verdict{Refuse: where + ": " + fmt.Sprintf(format, args...)}, nil
	}
	sig, unsigned, signed, err := eventlog.ParseSig(e.Raw)
	if err != nil {
		return refuse("%v", err)
	}
	machine, byMachine := eventlog.MachineSigned(e)
	if !signed {
		return n.admitUnsigned(ctx, v, where, e, machine, byMachine)
	}
	var pub ed25519.PublicKey
	switch id := eventlog.Signer(e); {
	case byMachine:
		k, ok := eventlog.MachineKey(machine)
		if !ok {
			return refuse("signed, but it names machine %q, whose ID is not its key: the machine that signs such an event is named by its key", machine)
		}
		if sig.KeyID != eventlog.KeyID(k) {
			return refuse("not signed by machine %s, which it names and which alone writes it", machine)
		}
		pub = k
	case id == "":
		return admit.Verdict{}, nil
	default:
		keys, err := v.trusted(ctx, id)
		if err != nil {
			return admit.Verdict{}, err
		}
		if len(keys) == 0 {
			return admit.Verdict{Wait: fmt.Sprintf("%s: the key of %s has not arrived yet (its registration)", where, id)}, nil
		}
		for _, k := range keys {
			if eventlog.KeyID(k) == sig.KeyID {
				pub = k
				break
			}
		}
		if pub == nil {
			return refuse("signed by a key (ID %s) this clone does not trust for %s: a forgery, or a new key of %s, which is taken on the owner's word", sig.KeyID, id, id)
		}
	}
	if !eventlog.VerifyLine(n.opts.RepoID, sig, unsigned, pub) {
		return refuse("its signature does not verify: the line was changed after it was signed (or signed for another repository than %q)", n.opts.RepoID)
	}
	if e.Type == eventlog.TypeAgentRegister || e.Type == eventlog.TypeAgentUpdate {
		p, err := eventlog.PayloadAs[eventlog.AgentRegister](e)
		if err != nil {
			return admit.Verdict{}, nil
		}
		keys, err := v.trusted(ctx, p.AgentID)
		if err != nil {
			return admit.Verdict{}, err
		}
		if p.Key == "" {
			if len(keys) > 0 {
				return refuse("a registration of %s from machine %s that brings no key, where this clone trusts one: only its own machine registers it, with its key", p.AgentID, machine)
			}
			return admit.Verdict{}, nil
		}
		k, _ := eventlog.DecodeKey(p.Key) // CheckFields passed it
		if len(keys) > 0 && !slices.ContainsFunc(keys, func(t ed25519.PublicKey) bool { return t.Equal(k) }) {
			return refuse("a new key for %s (%s, from machine %s), where this clone trusts another: a key changes only on the owner's word, or the team's thrum-keys",
				p.AgentID, p.Key, machine)
		}
		if m := v.machines[p.AgentID][p.Key]; m != "" && m != machine {
			return refuse("%s's key %s, which machine %s registered, from machine %s: only the machine that holds a key registers its identity with it",
				p.AgentID, p.Key, m, machine)
		}
	}
	return admit.Verdict{}, nil
}

// admitUnsigned holds an unsigned event to the legacy rules: one that
// names a machine whose ID is its key is refused (such a machine signs
// all it writes); one whose author has no key here is taken (written
// before its author signed: shown as unverified), unless the same call
// brings events its author signed: then it waits for the author's key
// and seal; once the author's key is trusted here, it is taken only if
// one of the author's seals names it, wherever it stands in the file.
func (n *Node) admitUnsigned(ctx context.Context, v *keyView, where string, e *eventlog.Event, machine string, byMachine bool) (admit.Verdict, error) {
	if _, keyed := eventlog.MachineKey(machine); byMachine && keyed {
		return admit.Verdict{Refuse: fmt.Sprintf("%s: unsigned, but it names machine %s, which signs all it writes", where, machine)}, nil
	}
	id := eventlog.Author(e)
	if id == "" {
		return admit.Verdict{}, nil
	}
	keys, err := v.trusted(ctx, id)
	if err != nil {
		return admit.Verdict{}, err
	}
	if len(keys) == 0 {
		if v.signs[id] {
			return admit.Verdict{Wait: fmt.Sprintf("%s: unsigned, and %s signs the events that follow: it waits for %s's key and seal", where, id, id)}, nil
		}
		return admit.Verdict{}, nil
	}
	sealed, err := v.sealed(ctx, id, eventlog.LegacyHash(e.Raw))
	if err != nil || sealed {
		return admit.Verdict{}, err
	}
	return admit.Verdict{Refuse: fmt.Sprintf("%s: unsigned, but %s signs its events (its key is trusted here) and no seal of its names this one: written since, or forged", where, id)}, nil
}

// keyView is what one admission call knows of keys and seals: the
// store's, the keyring's, and what the call's earlier events brought.
type keyView struct {
	n    *Node
	ring *keyring
	keys map[string][]ed25519.PublicKey // trusted keys by identity, as loaded and learned
	// machines holds, by identity and key, the machine whose
	// registration first brought the key: the one that holds it.
	machines map[string]map[string]string
	seals    map[string]map[string]bool // hashes sealed by this call's events, by identity
	signs    map[string]bool            // identities that signed events of this call
}

// newKeyView returns a view of the keys this clone trusts now: the
// store's and the keyring's.
func (n *Node) newKeyView(ctx context.Context) (*keyView, error) {
	ring, err := n.readKeyring(ctx)
	if err != nil {
		return nil, err
	}
	return &keyView{n: n, ring: ring, keys: map[string][]ed25519.PublicKey{}, machines: map[string]map[string]string{},
		seals: map[string]map[string]bool{}, signs: map[string]bool{}}, nil
}

// trusted returns the keys this clone trusts for an identity: the
// keyring's if it lists the identity, else those its registrations
// brought; and those the owner trusted here.
func (v *keyView) trusted(ctx context.Context, id string) ([]ed25519.PublicKey, error) {
	if ks, ok := v.keys[id]; ok {
		return ks, nil
	}
	rows, err := v.n.store.Keys(ctx, id)
	if err != nil {
		return nil, internal("read keys", err)
	}
	var out []ed25519.PublicKey
	listed := false
	if v.ring != nil {
		out = append(out, v.ring.keys[id]...)
		listed = len(out) > 0
	}
	v.machines[id] = map[string]string{}
	for _, r := range rows {
		if r.Source == store.KeyRegistered && v.machines[id][r.Key] == "" {
			v.machines[id][r.Key] = r.Machine
		}
		if r.Source == store.KeyRegistered && listed {
			continue
		}
		if k, err := eventlog.DecodeKey(r.Key); err == nil {
			out = append(out, k)
		}
	}
	v.keys[id] = out
	return out, nil
}

// sealed reports whether a seal names an identity's unsigned event.
func (v *keyView) sealed(ctx context.Context, id, hash string) (bool, error) {
	if v.seals[id][hash] {
		return true, nil
	}
	ok, err := v.n.store.Sealed(ctx, id, hash)
	if err != nil {
		return false, internal("read seals", err)
	}
	return ok, nil
}

// learn takes in what an admitted event brings: a registration's key, a
// seal's hashes.
func (v *keyView) learn(ctx context.Context, e *eventlog.Event) error {
	switch e.Type {
	case eventlog.TypeAgentRegister, eventlog.TypeAgentUpdate:
		p, err := eventlog.PayloadAs[eventlog.AgentRegister](e)
		if err != nil || p.Key == "" {
			return nil
		}
		ks, err := v.trusted(ctx, p.AgentID)
		if err != nil {
			return err
		}
		if k, err := eventlog.DecodeKey(p.Key); err == nil && !slices.ContainsFunc(ks, func(t ed25519.PublicKey) bool { return t.Equal(k) }) {
			v.keys[p.AgentID] = append(ks, k)
		}
		if v.machines[p.AgentID][p.Key] == "" {
			v.machines[p.AgentID][p.Key] = p.Machine
		}
	case eventlog.TypeAgentSeal:
		p, err := eventlog.PayloadAs[eventlog.AgentSeal](e)
		if err != nil {
			return nil
		}
		if v.seals[p.AgentID] == nil {
			v.seals[p.AgentID] = map[string]bool{}
		}
		for _, h := range p.Hashes {
			v.seals[p.AgentID][h] = true
		}
	}
	return nil
}

// ensureMachine sets this machine's key and ID: the ID is the machine
// key's public key (eventlog.MachineID), recorded in the local shard.
// A log from before machine keys holds a random ID there, which a new
// record supersedes; the old IDs stay this machine's (n.oldMachines):
// the groups made under one are its own here, though no other machine
// can tell they come from it.
func (n *Node) ensureMachine(ctx context.Context) error {
	k, err := n.signer.Key(MachineKey, true)
	if err != nil {
		return fmt.Errorf("machine key: %w", err)
	}
	if n.machinePub, err = publicKey(k); err != nil {
		return fmt.Errorf("machine key: %w", err)
	}
	n.machineKey, n.machine = k, eventlog.MachineID(n.machinePub)
	from := n.log.Positions()
	from[eventlog.LocalFile] = 0
	last := ""
	_, err = n.log.Scan(ctx, from, func(e *eventlog.Event) error {
		if e.Type != eventlog.TypeMachine || e.Shard != eventlog.LocalShard {
			return nil
		}
		if p, err := eventlog.PayloadAs[eventlog.Machine](e); err == nil && eventlog.CheckFields(e, n.now()) == nil {
			last = p.MachineID
			if p.MachineID != n.machine && !slices.Contains(n.oldMachines, p.MachineID) {
				n.oldMachines = append(n.oldMachines, p.MachineID)
			}
		}
		return nil
	})
	if err != nil || last == n.machine {
		return err
	}
	return n.append(ctx, &eventlog.Event{Type: eventlog.TypeMachine, Shard: eventlog.LocalShard, Payload: eventlog.Machine{MachineID: n.machine}})
}

// ownMachine reports whether a machine ID is this machine's, now or
// before it had a key.
func (n *Node) ownMachine(id string) bool {
	return id == n.machine || slices.Contains(n.oldMachines, id)
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
	if n.ownMachine(machine) {
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
	switch {
	case g.Machine == "" || n.ownMachine(g.Machine):
		return fmt.Sprintf("a %s of group %s, which this machine created (or one made before machines were recorded): only this machine changes it", e.Type, name), nil
	case g.Machine == machine:
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
