package thrum

import (
	"context"

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/identity"
)

// Machine returns this log's machine ID (see eventlog.Machine): what a
// group records as the machine that made it, and what a live transport
// names this machine by.
func (n *Node) Machine() string { return n.machine }

// WroteHere reports whether this machine wrote an event of its log, as
// a live transport asks before publishing it. An event that names its
// machine (a group's) was written there. Otherwise it was written here
// if it is claimed by an identity registered here (one with a
// credential here, which writes its events here and nowhere else: the
// admission refuses them from any other machine), by the owner or the
// node itself, or by no one; one claimed only by identities of other
// machines came by sync. The owner's events of other machines that name
// no machine look like this one's and are published again: that costs a
// duplicate, which every log drops.
func (n *Node) WroteHere(ctx context.Context, e *eventlog.Event) (bool, error) {
	var m struct {
		Machine string `json:"machine"`
	}
	if e.Decode(&m) == nil && m.Machine != "" {
		return m.Machine == n.machine, nil
	}
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
