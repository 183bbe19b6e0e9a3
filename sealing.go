package thrum

import (
	"bytes"
	"context"
	"crypto/ecdh"
	"encoding/base64"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/identity"
	"github.com/thrumhq/thrum/internal/keystore"
	"github.com/thrumhq/thrum/rpc"
)

// Sealed bodies. With a team key held, the log seals the content and
// structured data of every message and edit it writes for other machines
// (eventlog's seal.go: before the line is signed) and opens them wherever
// it decodes a line, so the projection, search and the index hold
// plaintext and a rebuild opens what a held key opens. The keys live in
// the node's key store (keystore's team.go), the log's
// eventlog.Options.TeamKeys, which Open sets.
//
// A body no held key opens is applied as it stands: the store marks the
// message sealed (store.Message.Sealed), results show who sent it and
// that the team key would open it, the notifier does not push it and
// no claim takes it, so it stays unread and queued. Importing a key
// applies those messages' events again (reopenSealed) and pushes them as
// if they had just arrived.

// teamKeyStore is what the node needs of its log's team keys; the key
// store is one.
type teamKeyStore interface {
	eventlog.TeamKeys
	NewTeamKey() (*eventlog.TeamKey, error)
	AddTeamKeys([]keystore.TeamSecret) ([]string, error)
	TeamSecrets() ([]keystore.TeamSecret, error)
	KEMKey() (*ecdh.PrivateKey, error)
}

// teamKeys returns the node's team keys, or an error if its log was
// opened without a key store as its TeamKeys (New with a log of the
// embedder's making).
func (n *Node) teamKeys() (teamKeyStore, error) {
	if t, ok := n.log.TeamKeys().(teamKeyStore); ok {
		return t, nil
	}
	return nil, rpc.Errorf(rpc.CodeUnavailable, "this node has no team keys: its event log was opened without the node's key store as its TeamKeys")
}

// KeyStatus says which team key seals, which are held, and how many
// messages wait for a key this clone does not hold.
func (n *Node) KeyStatus(ctx context.Context, _ *rpc.KeyStatusParams) (*rpc.KeyStatus, error) {
	st := &rpc.KeyStatus{Keys: []rpc.TeamKeyInfo{}, WaitingFor: []rpc.KeyWaiting{}}
	if t, err := n.teamKeys(); err == nil {
		secrets, err := t.TeamSecrets()
		if err != nil {
			return nil, internal("read the team keys", err)
		}
		for _, s := range secrets {
			k, err := eventlog.NewTeamKey(s.Secret)
			if err != nil {
				return nil, internal("read the team keys", err)
			}
			st.Keys = append(st.Keys, rpc.TeamKeyInfo{ID: k.ID(), Made: s.Made.UTC().Format(time.RFC3339)})
		}
		if k := t.Sealing(); k != nil {
			st.Sealing = k.ID()
		}
	}
	st.Machine, st.Grants = n.machine, []rpc.KeyOffer{}
	offers, err := n.offers(ctx)
	if err != nil {
		return nil, err
	}
	for _, o := range offers {
		st.Grants = append(st.Grants, o.KeyOffer)
	}
	waiting, err := n.store.SealedWaiting(ctx)
	if err != nil {
		return nil, internal("count sealed messages", err)
	}
	for _, id := range slices.Sorted(maps.Keys(waiting)) {
		st.Waiting += waiting[id]
		st.WaitingFor = append(st.WaitingFor, rpc.KeyWaiting{Key: id, Messages: waiting[id]})
	}
	return st, nil
}

// NewKey makes a team key: without p.Rotate only if none is held (which
// turns sealing on), else always (the new key seals; the old ones still
// open what they sealed). Bodies written before sealing was on stay in
// clear in every remote that has them.
func (n *Node) NewKey(ctx context.Context, p *rpc.KeyNewParams) (*rpc.KeyNewResult, error) {
	t, err := n.teamKeys()
	if err != nil {
		return nil, err
	}
	res := &rpc.KeyNewResult{}
	if p.Rotate || t.Sealing() == nil {
		k, err := t.NewTeamKey()
		if err != nil {
			return nil, internal("make a team key", err)
		}
		res.Made = k.ID()
		if n.opts.Logger != nil {
			n.opts.Logger.Info("thrum: message bodies are sealed from now on", "key", k.ID())
		}
	}
	st, err := n.KeyStatus(ctx, nil)
	if err != nil {
		return nil, err
	}
	res.KeyStatus = *st
	return res, nil
}

// ExportKeys returns every team key's secret, for another clone's
// ImportKeys: whoever has them reads every sealed body.
func (n *Node) ExportKeys(ctx context.Context, _ *rpc.KeyExportParams) (*rpc.KeyExportResult, error) {
	t, err := n.teamKeys()
	if err != nil {
		return nil, err
	}
	secrets, err := t.TeamSecrets()
	if err != nil {
		return nil, internal("read the team keys", err)
	}
	if len(secrets) == 0 {
		return nil, notFound("this clone holds no team key: bodies leave it in clear")
	}
	res := &rpc.KeyExportResult{}
	for _, s := range secrets {
		res.Keys = append(res.Keys, rpc.TeamSecret{Secret: base64.RawURLEncoding.EncodeToString(s.Secret), Made: s.Made.UTC().Format(time.RFC3339Nano)})
	}
	return res, nil
}

// ImportKeys adds team keys (another clone's ExportKeys) and applies
// again the messages that waited for them: their bodies open, search
// finds them, and they are pushed to their recipients as if they had
// just arrived, to be delivered once. From now on the newest key seals.
func (n *Node) ImportKeys(ctx context.Context, p *rpc.KeyImportParams) (*rpc.KeyImportResult, error) {
	t, err := n.teamKeys()
	if err != nil {
		return nil, err
	}
	if len(p.Keys) == 0 {
		return nil, invalid("keys is required: the team keys to import")
	}
	secrets := make([]keystore.TeamSecret, len(p.Keys))
	for i, k := range p.Keys {
		b, err := base64.RawURLEncoding.Strict().DecodeString(k.Secret)
		if err != nil || len(b) != eventlog.TeamKeyLen {
			return nil, invalid("keys[%d] is not a team key: want %d bytes of unpadded base64url", i, eventlog.TeamKeyLen)
		}
		made, err := time.Parse(time.RFC3339Nano, k.Made)
		if err != nil {
			return nil, invalid("keys[%d].made %q is not an RFC 3339 time", i, k.Made)
		}
		secrets[i] = keystore.TeamSecret{Secret: b, Made: made}
	}
	return n.addKeys(ctx, t, secrets)
}

// addKeys adds team keys, opens what waited for them and says so.
func (n *Node) addKeys(ctx context.Context, t teamKeyStore, secrets []keystore.TeamSecret) (*rpc.KeyImportResult, error) {
	added, err := t.AddTeamKeys(secrets)
	if err != nil {
		return nil, internal("keep the team keys", err)
	}
	res := &rpc.KeyImportResult{Added: added}
	if res.Added == nil {
		res.Added = []string{}
	}
	if res.Reopened, err = n.reopenSealed(ctx); err != nil {
		return nil, err
	}
	st, err := n.KeyStatus(ctx, nil)
	if err != nil {
		return nil, err
	}
	res.KeyStatus = *st
	return res, nil
}

// reopenSealed applies again the messages that wait for a team key now
// held (store.Store.Reopen), without a rebuild: one scan of the log for
// their creates and edits, which the log now opens. No batch is applied
// meanwhile, so no edit is lost between the scan and the store. The
// messages opened are pushed to subscribers as new; it returns how many
// there are.
func (n *Node) reopenSealed(ctx context.Context) (int, error) {
	var keys eventlog.TeamKeys // none: reopen still learns whether any body waits
	if t, err := n.teamKeys(); err == nil {
		keys = t
	}
	opened, err := n.proj.reopen(ctx, n.log, keys)
	if err != nil {
		return 0, internal("open the sealed messages", err)
	}
	if len(opened) > 0 {
		for c, ids := range n.subs.publishLocked(ctx, opened) {
			n.subs.drop(c, ids)
		}
	}
	return len(opened), nil
}

// reopen is reopenSealed under the projector's lock; it returns the
// creates of the messages that no longer wait.
func (p *Projector) reopen(ctx context.Context, lg *eventlog.Log, keys eventlog.TeamKeys) ([]*eventlog.Event, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	waiting, err := p.store.SealedWaiting(ctx)
	if err != nil {
		return nil, err
	}
	p.sealedWait.Store(len(waiting) > 0)
	var held []string
	for id := range waiting {
		if keys != nil && keys.TeamKey(id) != nil {
			held = append(held, id)
		}
	}
	if len(held) == 0 {
		return nil, nil
	}
	ids, err := p.store.SealedMessages(ctx, held)
	if err != nil {
		return nil, err
	}
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	var evs []*eventlog.Event
	if _, err := lg.Scan(ctx, nil, func(e *eventlog.Event) error {
		if !eventlog.Sealable(e.Type) || !want[messageOf(e)] {
			return nil
		}
		e.Raw = slices.Clone(e.Raw) // Scan reuses it
		e.Open(keys)
		evs = append(evs, e)
		return nil
	}); err != nil {
		return nil, err
	}
	if err := p.store.Reopen(ctx, evs); err != nil {
		return nil, err
	}
	still, err := p.store.SealedMessages(ctx, held)
	if err != nil {
		return nil, err
	}
	if waiting, err = p.store.SealedWaiting(ctx); err != nil {
		return nil, err
	}
	p.sealedWait.Store(len(waiting) > 0)
	var opened []*eventlog.Event
	for _, e := range evs {
		if e.Type == eventlog.TypeMessageCreate && !slices.Contains(still, messageOf(e)) {
			opened = append(opened, e)
		}
	}
	return opened, nil
}

// waitsForKey reports whether e is a create or an edit whose body no
// held team key opened.
func waitsForKey(e *eventlog.Event) bool {
	switch e.Type {
	case eventlog.TypeMessageCreate:
		p, _ := eventlog.PayloadAs[eventlog.MessageCreate](e)
		return p.Sealed != nil
	case eventlog.TypeMessageEdit:
		p, _ := eventlog.PayloadAs[eventlog.MessageEdit](e)
		return p.Sealed != nil
	}
	return false
}

// messageOf is the message a create or an edit is of.
func messageOf(e *eventlog.Event) string {
	switch e.Type {
	case eventlog.TypeMessageCreate:
		p, _ := eventlog.PayloadAs[eventlog.MessageCreate](e)
		return p.MessageID
	case eventlog.TypeMessageEdit:
		p, _ := eventlog.PayloadAs[eventlog.MessageEdit](e)
		return p.MessageID
	}
	return ""
}

// Team keys between machines (eventlog's seal.go): each machine has an
// X25519 key (the key store's), published in the registrations it
// signs. GrantKeys wraps the team keys to another machine's key with
// HPKE in a key.grant the granting machine signs; that machine's owner
// takes them with AcceptKeys. Neither side takes a key on the remote's
// word alone: whoever can push could grant a key of theirs, and a clone
// sealing with it would write for them.

// openKEM reads (or makes) the machine's X25519 key, which its
// registrations carry.
func (n *Node) openKEM() error {
	t, err := n.teamKeys()
	if err != nil {
		return nil // no key store: no team keys between machines
	}
	k, err := t.KEMKey()
	if err != nil {
		return err
	}
	n.kem = eventlog.EncodeKEM(k.PublicKey())
	return nil
}

// GrantKeys gives every team key held here to another machine, named by
// its ID or by an identity registered there: wrapped to the key that
// machine published, in an event it reads when it syncs, to take on its
// owner's word (AcceptKeys).
func (n *Node) GrantKeys(ctx context.Context, p *rpc.KeyGrantParams) (*rpc.KeyGrantResult, error) {
	t, err := n.teamKeys()
	if err != nil {
		return nil, err
	}
	if p.To == "" {
		return nil, invalid("to is required: the machine, or an identity registered there, to give the team keys to")
	}
	machine := p.To
	if _, ok := eventlog.MachineKey(p.To); !ok {
		id := identity.NormalizeAgentID(p.To)
		keys, err := n.store.Keys(ctx, id)
		if err != nil {
			return nil, internal("read keys", err)
		}
		machine = ""
		for _, k := range keys {
			if k.Machine != "" {
				machine = k.Machine // the latest registration's
			}
		}
		if machine == "" {
			return nil, notFound("no machine is known to have registered %s: name the machine by its ID", id)
		}
	}
	if machine == n.machine {
		return nil, invalid("%s is this machine, which holds the keys", machine)
	}
	kem, err := n.store.MachineKEM(ctx, machine)
	if err != nil {
		return nil, internal("read the machine's key", err)
	}
	if kem == "" {
		return nil, notFound("machine %s has published no key to receive team keys: it publishes one when an identity registers there", machine)
	}
	secrets, err := t.TeamSecrets()
	if err != nil {
		return nil, internal("read the team keys", err)
	}
	if len(secrets) == 0 {
		return nil, notFound("this clone holds no team key to give")
	}
	wrapped, err := eventlog.WrapKeys(kem, n.opts.RepoID, n.machine, machine, keystore.FormatTeamKeys(secrets))
	if err != nil {
		return nil, internal("wrap the team keys", err)
	}
	e := &eventlog.Event{Type: eventlog.TypeKeyGrant, Payload: eventlog.KeyGrant{Machine: n.machine, To: machine, KEM: kem, Wrapped: wrapped}}
	if err := n.append(ctx, e); err != nil {
		return nil, err
	}
	return &rpc.KeyGrantResult{To: machine, Keys: len(secrets)}, nil
}

// AcceptKeys takes the team keys granted to this machine by p.From (by
// the one machine whose grants wait, without it), opening what waited
// for them.
func (n *Node) AcceptKeys(ctx context.Context, p *rpc.KeyAcceptParams) (*rpc.KeyImportResult, error) {
	t, err := n.teamKeys()
	if err != nil {
		return nil, err
	}
	offers, err := n.offers(ctx)
	if err != nil {
		return nil, err
	}
	from := map[string]bool{}
	var secrets []keystore.TeamSecret
	for _, o := range offers {
		if p.From == "" || o.From == p.From {
			from[o.From] = true
			secrets = append(secrets, o.secrets...)
		}
	}
	switch {
	case len(from) == 0 && p.From != "":
		return nil, notFound("no grant of new team keys from machine %s waits here", p.From)
	case len(from) == 0:
		return nil, notFound("no grant of new team keys waits here")
	case len(from) > 1:
		return nil, conflict("grants from %d machines wait: name the one to take (from): %s", len(from), strings.Join(slices.Sorted(maps.Keys(from)), ", "))
	}
	return n.addKeys(ctx, t, secrets)
}

// offer is a grant to this machine that brings keys not held here.
type offer struct {
	rpc.KeyOffer
	secrets []keystore.TeamSecret
}

// offers returns the grants made to this machine's key that bring keys
// it does not hold. A grant that does not open is skipped: it was made
// for a key this machine no longer has.
func (n *Node) offers(ctx context.Context) ([]offer, error) {
	t, err := n.teamKeys()
	if err != nil || n.machine == "" {
		return nil, nil
	}
	grants, err := n.store.KeyGrantsTo(ctx, n.machine)
	if err != nil {
		return nil, internal("read key grants", err)
	}
	var priv *ecdh.PrivateKey
	var out []offer
	for _, g := range grants {
		if g.KEM != n.kem {
			continue
		}
		if priv == nil {
			if priv, err = t.KEMKey(); err != nil {
				return nil, internal("read the machine's key", err)
			}
		}
		plain, err := eventlog.UnwrapKeys(priv, n.opts.RepoID, eventlog.KeyGrant{Machine: g.Machine, To: g.To, KEM: g.KEM, Wrapped: g.Wrapped})
		if err != nil {
			continue
		}
		secrets, err := keystore.ParseTeamKeys(bytes.NewReader(plain))
		if err != nil {
			continue
		}
		o := offer{KeyOffer: rpc.KeyOffer{From: g.Machine, At: g.GrantedAt, Keys: []string{}}, secrets: secrets}
		for _, sec := range secrets {
			if k, err := eventlog.NewTeamKey(sec.Secret); err == nil && t.TeamKey(k.ID()) == nil {
				o.Keys = append(o.Keys, k.ID())
			}
		}
		if len(o.Keys) > 0 {
			out = append(out, o)
		}
	}
	return out, nil
}
