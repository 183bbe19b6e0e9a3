package thrum

import (
	"context"
	"crypto"
	"crypto/ed25519"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/eventlog/admit"
	"github.com/thrumhq/thrum/identity"
	"github.com/thrumhq/thrum/internal/keystore"
	"github.com/thrumhq/thrum/rpc"
	"github.com/thrumhq/thrum/store"
)

// Signing. The node signs every event it writes for another machine to
// read (all but the local shard's) in its write path, over the line's
// exact bytes (eventlog.ParseSig), with one of the keys it holds:
//
//   - a machine key (MachineKey), made at the first open, whose public
//     key is the machine's ID: it signs what the machine writes in its
//     own name (a group's changes, and the registrations that bind an
//     identity's key to this machine: eventlog.MachineSigned);
//   - a key per identity (agent or user) registered here, made at its
//     registration: it signs that identity's events (eventlog.Signer);
//   - an event that names no one (an application's), or an identity
//     this machine holds no key for, is signed by the machine's key, and
//     other machines take it as that machine's word only.
//
// Admission verifies what other machines wrote (admitSignature in
// synctrust.go); start and rebuild never check a signature again.

// Signer holds the keys a node signs with (Options.Signer). Its
// methods may be called concurrently.
type Signer interface {
	// Key returns the key of id (an agent or user ID, or MachineKey),
	// making one if create is set and id has none; without create, an
	// id with no key returns nil and no error. The key's Public must be
	// an ed25519.PublicKey and its Sign must take crypto.Hash(0), as an
	// ed25519.PrivateKey's does.
	Key(id string, create bool) (crypto.Signer, error)
}

// MachineKey is the ID under which a Signer keeps the machine's key (no
// identity's ID has an @).
const MachineKey = "@machine"

// DefaultKeyDir is where a node without Options.Signer keeps its keys:
// this directory in its data directory (sync never commits it: only the
// log's segment files are).
const DefaultKeyDir = "keys"

// openSigner sets up the node's keys: Options.Signer, or a key store in
// DefaultKeyDir in the data directory.
func (n *Node) openSigner() error {
	if n.opts.Signer != nil {
		n.signer = n.opts.Signer
		return nil
	}
	ks, err := keystore.Open(filepath.Join(n.dir, DefaultKeyDir))
	if err != nil {
		return err
	}
	n.signer = ks
	return nil
}

// publicKey returns the public key of a Signer's key.
func publicKey(k crypto.Signer) (ed25519.PublicKey, error) {
	pub, ok := k.Public().(ed25519.PublicKey)
	if !ok || len(pub) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("the signer's key is a %T, not an Ed25519 key", k.Public())
	}
	return pub, nil
}

// signWith returns what signs an event's line with k (eventlog.Event.Sign).
func (n *Node) signWith(k crypto.Signer, pub ed25519.PublicKey) func([]byte) (eventlog.Sig, error) {
	kid := eventlog.KeyID(pub)
	return func(unsigned []byte) (eventlog.Sig, error) {
		sig, err := k.Sign(nil, eventlog.SignedMessage(n.opts.RepoID, unsigned), crypto.Hash(0))
		if err != nil {
			return eventlog.Sig{}, fmt.Errorf("sign a line: %w", err)
		}
		return eventlog.Sig{KeyID: kid, Sig: sig}, nil
	}
}

// sign sets the key that signs e as the log writes it: the machine's
// for the events the machine writes in its own name or that name no one
// (or an identity this machine holds no key for), else the key of the
// identity that acted. The local shard's events are not signed: no
// other machine reads them.
func (n *Node) sign(e *eventlog.Event) error {
	if e.Shard == eventlog.LocalShard || n.signOff {
		return nil
	}
	k, pub := n.machineKey, n.machinePub
	if _, ok := eventlog.MachineSigned(e); !ok {
		if id := eventlog.Signer(e); id != "" {
			ik, err := n.signer.Key(id, false)
			if err != nil {
				return internal("read a signing key", err)
			}
			if ik != nil {
				if pub, err = publicKey(ik); err != nil {
					return internal("read a signing key", err)
				}
				k = ik
			}
		}
	}
	e.Sign = n.signWith(k, pub)
	return nil
}

// identityKey returns the public key of an identity registered here,
// making its key if it has none: what its registration carries.
func (n *Node) identityKey(id string) (string, error) {
	k, err := n.signer.Key(id, true)
	if err != nil {
		return "", internal("make a signing key", err)
	}
	pub, err := publicKey(k)
	if err != nil {
		return "", internal("make a signing key", err)
	}
	return eventlog.EncodeKey(pub), nil
}

// registration returns the events that register an identity (reg, to
// which it adds the identity's key and this machine) and, when the key is
// new to a known identity (one with events from before it had a key),
// the seals of its legacy (sealLegacy). Called with ctlMu held.
func (n *Node) registration(ctx context.Context, typ string, reg eventlog.AgentRegister, known bool) ([]*eventlog.Event, error) {
	key, err := n.identityKey(reg.AgentID)
	if err != nil {
		return nil, err
	}
	reg.Key, reg.Machine, reg.KEM = key, n.machine, n.kem
	evs := []*eventlog.Event{{Type: typ, Payload: reg}}
	if !known {
		return evs, nil
	}
	keys, err := n.store.Keys(ctx, reg.AgentID)
	if err != nil {
		return nil, internal("read keys", err)
	}
	if slices.ContainsFunc(keys, func(k store.Key) bool { return k.Key == key && k.Source == store.KeyRegistered }) {
		return evs, nil
	}
	seals, err := n.sealLegacy(ctx, map[string]bool{reg.AgentID: true})
	if err != nil {
		return nil, err
	}
	return append(evs, seals...), nil
}

// sealLegacy returns the seals of the identities in ids: for each, the
// unsigned events the log holds whose author it is (eventlog.Author),
// named by their eventlog.LegacyHash, at most eventlog.MaxListLen to a
// seal. Once an identity's key is pinned, another machine takes an
// unsigned event of it only if a seal names it: a line forged into its
// shard later is refused wherever it stands. It reads the whole log, once
// per identity that had a life before keys.
func (n *Node) sealLegacy(ctx context.Context, ids map[string]bool) ([]*eventlog.Event, error) {
	hashes := map[string][]string{}
	_, err := n.log.Scan(ctx, nil, func(e *eventlog.Event) error {
		if e.Shard == eventlog.LocalShard || eventlog.Signed(e.Raw) {
			return nil
		}
		if a := eventlog.Author(e); ids[a] {
			hashes[a] = append(hashes[a], eventlog.LegacyHash(e.Raw))
		}
		return nil
	})
	if err != nil {
		return nil, internal("seal unsigned events", err)
	}
	var evs []*eventlog.Event
	for _, id := range slices.Sorted(maps.Keys(hashes)) {
		hs := hashes[id]
		for len(hs) > 0 {
			k := min(len(hs), eventlog.MaxListLen)
			evs = append(evs, &eventlog.Event{Type: eventlog.TypeAgentSeal, Payload: eventlog.AgentSeal{AgentID: id, Hashes: hs[:k]}})
			hs = hs[k:]
		}
	}
	return evs, nil
}

// ensureKeys gives every identity registered here (with a credential)
// that has no key in the log yet (one registered before events were
// signed) its key: a registration that brings it, and the seals of its
// legacy, all at once.
func (n *Node) ensureKeys(ctx context.Context) error {
	ids, err := n.store.Credentialed(ctx)
	if err != nil {
		return internal("list identities", err)
	}
	n.ctlMu.Lock()
	defer n.ctlMu.Unlock()
	var regs []*eventlog.Event
	legacy := map[string]bool{}
	for _, id := range ids {
		a, err := n.store.Agent(ctx, id)
		if isNotFound(err) {
			continue // deleted: nothing of it is written any more
		}
		if err != nil {
			return internal("read an identity", err)
		}
		key, err := n.identityKey(id)
		if err != nil {
			return err
		}
		keys, err := n.store.Keys(ctx, id)
		if err != nil {
			return internal("read keys", err)
		}
		if slices.ContainsFunc(keys, func(k store.Key) bool { return k.Key == key && k.Source == store.KeyRegistered }) {
			continue
		}
		regs = append(regs, &eventlog.Event{Type: eventlog.TypeAgentUpdate, Payload: eventlog.AgentRegister{
			AgentID: a.AgentID, Kind: a.Kind, Name: a.Name, Role: a.Role, Module: a.Module, Display: a.Display,
			RepoID: a.RepoID, Key: key, Machine: n.machine, KEM: n.kem,
		}})
		legacy[id] = true
	}
	if len(regs) == 0 {
		return nil
	}
	seals, err := n.sealLegacy(ctx, legacy)
	if err != nil {
		return err
	}
	if n.opts.Logger != nil {
		n.opts.Logger.Info("thrum: events are signed now: made the keys of the identities registered here, and sealed their unsigned events",
			"identities", len(regs), "seals", len(seals))
	}
	return n.append(ctx, append(regs, seals...)...)
}

// Message senders (rpc.MessageDetail.Sender): how far a message is known
// to be its author's. The projection records whether a message's line is
// signed, the same on every clone; whether its writer is registered here
// is this clone's own.
func (n *Node) sender(m *store.Message, local map[string]bool) string {
	writer := m.AgentID
	if m.ActingAs != "" {
		writer = m.ActingAs
	}
	switch {
	case local[writer]:
		return rpc.SenderLocal
	case m.Signed && m.ActingAs == "":
		return rpc.SenderVerified
	}
	// Sent as its author by another (acting_as): the writer's key signed
	// it, not the author's, and any key's first use is trusted.
	return rpc.SenderUnverified
}

// localIdentities returns the identities registered here (with a
// credential): whose messages this machine wrote.
func (n *Node) localIdentities(ctx context.Context) (map[string]bool, error) {
	ids, err := n.store.Credentialed(ctx)
	if err != nil {
		return nil, internal("list identities", err)
	}
	out := make(map[string]bool, len(ids))
	for _, id := range ids {
		out[id] = true
	}
	return out, nil
}

// TrustAgent records the owner's word that a key is an identity's: a key
// other than the one this clone trusts for it (its first seen, or the
// keyring's), such as the new key of an identity that lost its old one
// or registered on another machine. The key goes to the local shard
// (trust is each clone's own), and every line the quarantine holds is
// judged again: those the key lets in are imported, each once. Without
// p.Key, the one new key of the identity that a refused registration
// brought is trusted; with none or several, it is an error that says so.
func (n *Node) TrustAgent(ctx context.Context, p *rpc.TrustAgentParams) (*rpc.TrustAgentResult, error) {
	if p.Name == "" {
		return nil, invalid("name is required")
	}
	id := identity.NormalizeAgentID(p.Name)
	pending, err := n.pendingKeys(ctx, id)
	if err != nil {
		return nil, err
	}
	key := p.Key
	if key == "" {
		switch len(pending) {
		case 0:
			return nil, notFound("no new key of %s waits for your word: this clone refused no registration of it for its key", id)
		case 1:
			key = pending[0].Key
		default:
			ks := make([]string, len(pending))
			for i, k := range pending {
				ks[i] = k.Key + " (machine " + k.Machine + ")"
			}
			return nil, conflict("%d new keys of %s wait: name the one to trust (key): %s", len(pending), id, strings.Join(ks, ", "))
		}
	}
	e := &eventlog.Event{Type: eventlog.TypeKeyTrust, Shard: eventlog.LocalShard, Payload: eventlog.KeyTrust{AgentID: id, Key: key}}
	if err := eventlog.CheckFields(e, n.now()); err != nil {
		return nil, invalid("%v", err)
	}
	if err := n.append(ctx, e); err != nil {
		return nil, err
	}
	imported, err := n.gate.Rejudge(ctx)
	if err != nil {
		return nil, internal("admit what the key lets in", err)
	}
	if pending, err = n.pendingKeys(ctx, id); err != nil {
		return nil, err
	}
	return &rpc.TrustAgentResult{AgentID: id, Key: key, Imported: imported, Pending: pending}, nil
}

// signedByMachine reports whether e is signed by the key of the machine
// it names.
func (n *Node) signedByMachine(e *eventlog.Event, machine string) bool {
	k, ok := eventlog.MachineKey(machine)
	sig, unsigned, signed, err := eventlog.ParseSig(e.Raw)
	return ok && signed && err == nil && eventlog.VerifyLine(n.opts.RepoID, sig, unsigned, k)
}

// pendingKeys returns the new keys of an identity that the quarantine
// holds refused registrations of (signed by the machines they name), and
// that the owner has not trusted here.
func (n *Node) pendingKeys(ctx context.Context, id string) ([]rpc.PendingKey, error) {
	rs, err := admit.ReadQuarantine(n.log.Dir())
	if err != nil {
		return nil, internal("read the quarantine", err)
	}
	rows, err := n.store.Keys(ctx, id)
	if err != nil {
		return nil, internal("read keys", err)
	}
	seen := map[string]bool{}
	for _, r := range rows {
		if r.Source == store.KeyTrusted {
			seen[r.Key] = true
		}
	}
	out := []rpc.PendingKey{}
	for _, r := range rs {
		e, err := eventlog.DecodeLine([]byte(r.Line))
		if err != nil || r.Wait || (e.Type != eventlog.TypeAgentRegister && e.Type != eventlog.TypeAgentUpdate) {
			continue
		}
		reg, err := eventlog.PayloadAs[eventlog.AgentRegister](e)
		if err != nil || reg.AgentID != id || reg.Key == "" || seen[reg.Key] || !n.signedByMachine(e, reg.Machine) {
			continue
		}
		seen[reg.Key] = true
		out = append(out, rpc.PendingKey{Key: reg.Key, Machine: reg.Machine, At: r.At})
	}
	return out, nil
}

// SignatureReport is what VerifySignatures found.
type SignatureReport struct {
	Verified  int       `json:"verified"`  // signed lines whose signature verifies
	Unsigned  int       `json:"unsigned"`  // lines from before their writers signed
	Anonymous int       `json:"anonymous"` // signed lines that name no one (an application's), not checked
	Problems  []Problem `json:"problems"`  // lines whose signature does not verify, or names no key known here
}

// VerifySignatures checks again the signature of every line of the log
// (the local shard's aside) with the keys this clone trusts, as
// admission did once: start and rebuild never check one (at a million
// events that would cost half a minute). A line this machine wrote is
// checked with its own keys. It is for thrum doctor --verify.
func (n *Node) VerifySignatures(ctx context.Context) (*SignatureReport, error) {
	v, err := n.newKeyView(ctx)
	if err != nil {
		return nil, err
	}
	rep := &SignatureReport{Problems: []Problem{}}
	_, err = n.log.Scan(ctx, nil, func(e *eventlog.Event) error {
		if e.Shard == eventlog.LocalShard {
			return nil
		}
		bad := func(format string, args ...any) {
			rep.Problems = append(rep.Problems, Problem{File: eventlog.ShardPath(e.Shard),
				Message: fmt.Sprintf("event %s (a %s by %q): ", e.ID, e.Type, eventlog.Author(e)) + fmt.Sprintf(format, args...)})
		}
		sig, unsigned, signed, err := eventlog.ParseSig(e.Raw)
		switch {
		case err != nil:
			bad("%v", err)
			return nil
		case !signed:
			rep.Unsigned++
			return nil
		}
		var keys []ed25519.PublicKey
		if machine, ok := eventlog.MachineSigned(e); ok {
			if k, ok := eventlog.MachineKey(machine); ok {
				keys = []ed25519.PublicKey{k}
			}
		} else if id := eventlog.Signer(e); id == "" {
			rep.Anonymous++
			return nil
		} else if keys, err = v.trusted(ctx, id); err != nil {
			return err
		}
		for _, k := range append(keys, n.machinePub) { // this machine's own word, too
			if eventlog.VerifyLine(n.opts.RepoID, sig, unsigned, k) {
				rep.Verified++
				return nil
			}
		}
		bad("its signature (key %s) does not verify with any key this clone trusts for its writer", sig.KeyID)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("verify signatures: %w", err)
	}
	return rep, nil
}
