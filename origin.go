package thrum

import (
	"context"

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/identity"
)

// WroteHere reports whether this machine wrote an event of its log, as
// a live transport asks before publishing it: an event claimed by an
// identity registered here (one with a credential here, which writes its
// events here and nowhere else: AdmitSynced refuses them from any other
// machine), by the owner or the node itself, or by no one. An event claimed only by
// identities of other machines came here by sync. The owner's and node's
// events of other machines look like this one's and are published
// again: that costs a duplicate, which every log drops.
func (n *Node) WroteHere(ctx context.Context, e *eventlog.Event) (bool, error) {
	claims := eventlog.Claims(e)
	if len(claims) == 0 {
		return true, nil
	}
	for _, id := range claims {
		if id == Owner || id == "system" { // the owner's, or the node's own (@everyone)
			return true, nil
		}
		for _, cand := range []string{id, identity.NormalizeAgentID(id)} {
			local, err := n.store.HasCredential(ctx, cand)
			if err != nil {
				return false, internal("check where an event was written", err)
			}
			if local {
				return true, nil
			}
		}
	}
	return false, nil
}
