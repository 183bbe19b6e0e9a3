package thrum_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/internal/thrumtest"
	"github.com/thrumhq/thrum/rpc"
)

// BenchmarkDirectoryChange is the cost of one registration and of one
// group member add on a node of 10,000 agents: each changes the
// in-memory directory, which must cost what the change does, not what
// the directory holds.
//
//	go test -run '^$' -bench DirectoryChange -benchtime 200x .
func BenchmarkDirectoryChange(b *testing.B) {
	const agents = 10_000
	ctx := context.Background()
	dir := b.TempDir()
	lg, err := eventlog.Open(dir, &eventlog.Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	var batch []*eventlog.Event
	for i := 0; i < agents; i++ {
		name := fmt.Sprintf("agent_%05d", i)
		role := benchRoles[i%len(benchRoles)]
		batch = append(batch, &eventlog.Event{Type: eventlog.TypeAgentRegister, Payload: eventlog.AgentRegister{
			AgentID: name, Kind: rpc.KindAgent, Name: name, Role: role, Module: "m"}})
	}
	batch = append(batch, &eventlog.Event{Type: eventlog.TypeGroupCreate, Payload: eventlog.GroupCreate{Name: "big", CreatedBy: thrum.Owner}})
	if err := lg.Append(ctx, batch...); err != nil {
		b.Fatal(err)
	}
	if err := lg.Close(); err != nil {
		b.Fatal(err)
	}
	n := thrumtest.OpenNodeIn(b, dir, &thrum.Options{NoSync: true})
	// -count reruns the sub-benchmarks on this one node: each change is a
	// new one.
	registered, added := 0, 0

	b.Run("agents=10000/register", func(b *testing.B) {
		for b.Loop() {
			registered++
			name := fmt.Sprintf("new_%07d", registered)
			if _, err := n.RegisterAgent(ctx, &rpc.RegisterAgentParams{Name: name, Role: "implementer", Module: "m"}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("agents=10000/member-add", func(b *testing.B) {
		for b.Loop() {
			if added == agents {
				b.Fatal("every agent is a member already: run fewer iterations")
			}
			id := fmt.Sprintf("agent_%05d", added)
			added++
			if _, err := n.AddGroupMember(ctx, &rpc.GroupMembership{Group: "big", MemberType: rpc.MemberAgent, MemberID: id}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
