package thrum

import (
	"context"
	"encoding/base64"
	"maps"
	"slices"
	"time"

	"github.com/thrumhq/thrum/eventlog"
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
	t, err := n.teamKeys()
	if err != nil {
		return 0, nil
	}
	opened, err := n.proj.reopen(ctx, n.log, t)
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
	var held []string
	for id := range waiting {
		if keys.TeamKey(id) != nil {
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
	from := lg.Positions()
	for s := range from {
		from[s] = 0
	}
	if _, err := lg.Scan(ctx, from, func(e *eventlog.Event) error {
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
	var opened []*eventlog.Event
	for _, e := range evs {
		if e.Type == eventlog.TypeMessageCreate && !slices.Contains(still, messageOf(e)) {
			opened = append(opened, e)
		}
	}
	return opened, nil
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
