package main

import (
	"context"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/eventlog/admit"
	"github.com/thrumhq/thrum/eventlog/natsync"
)

// admission hands what NATS brings to the node's one admission.
type admission struct{ g *admit.Gate }

func newAdmission(n *thrum.Node) admission { return admission{n.Admission()} }

func (a admission) Admit(ctx context.Context, src natsync.Source, shard string, lines [][]byte) (int, error) {
	r, err := a.g.Admit(ctx, admit.Source{File: src.File, Commit: src.Commit}, shard, lines)
	if r == nil {
		return 0, err
	}
	return len(r.Imported), err
}
