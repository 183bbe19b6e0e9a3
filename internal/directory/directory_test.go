package directory

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/rpc"
	"github.com/thrumhq/thrum/store"
)

// Random batches of agent and group events, applied to the projection
// and then to the directory one change at a time, leave the directory as
// a full reload from the projection would, and it resolves every address
// the same.
func TestApplyMatchesReload(t *testing.T) {
	ctx := context.Background()
	lg, err := eventlog.Open(t.TempDir(), &eventlog.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	st, err := store.Open(filepath.Join(t.TempDir(), "p.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r := rand.New(rand.NewPCG(1, 2))
	names := []string{"a1", "a2", "a3", "a4", "a5", "u1"}
	roles := []string{"dev", "ops", "qa"}
	groups := []string{"g1", "g2", "g3"}
	pick := func(xs []string) string { return xs[r.IntN(len(xs))] }
	event := func() *eventlog.Event {
		switch r.IntN(7) {
		case 0, 1:
			id := pick(names)
			kind := "agent"
			if id == "u1" {
				kind = "user"
			}
			typ := eventlog.TypeAgentRegister
			if r.IntN(2) == 0 {
				typ = eventlog.TypeAgentUpdate
			}
			return &eventlog.Event{Type: typ, Payload: eventlog.AgentRegister{AgentID: id, Kind: kind, Name: id, Role: pick(roles), Module: "m"}}
		case 2:
			return &eventlog.Event{Type: eventlog.TypeAgentCleanup, Payload: eventlog.AgentCleanup{AgentID: pick(names)}}
		case 3:
			return &eventlog.Event{Type: eventlog.TypeGroupCreate, Payload: eventlog.GroupCreate{Name: pick(groups), CreatedBy: "owner"}}
		case 4:
			return &eventlog.Event{Type: eventlog.TypeGroupDelete, Payload: eventlog.GroupDelete{Name: pick(groups), AgentID: "owner"}}
		}
		typ, mt, id := eventlog.TypeGroupMemberAdd, rpc.MemberAgent, pick(names)
		if r.IntN(3) == 0 {
			typ = eventlog.TypeGroupMemberDel
		}
		if r.IntN(2) == 0 {
			mt, id = rpc.MemberRole, pick(roles)
		}
		return &eventlog.Event{Type: typ, Payload: eventlog.GroupMember{Group: pick(groups), MemberType: mt, MemberID: id, AgentID: "owner"}}
	}
	var d Directory
	addrs := append(append(append([]string{Everyone, "nobody"}, names...), roles...), groups...)
	for round := 0; round < 300; round++ {
		batch := make([]*eventlog.Event, 1+r.IntN(4))
		for i := range batch {
			batch[i] = event()
		}
		if err := lg.Append(ctx, batch...); err != nil {
			t.Fatal(err)
		}
		if err := st.Apply(ctx, batch); err != nil {
			t.Fatal(err)
		}
		if err := d.Apply(ctx, st, batch); err != nil {
			t.Fatal(err)
		}
		var want Directory
		if err := want.Reload(ctx, st); err != nil {
			t.Fatal(err)
		}
		if diff := compare(&d, &want); diff != "" {
			t.Fatalf("round %d, after %v: %s", round, types(batch), diff)
		}
		for _, a := range addrs {
			got, gok := d.Resolve(a)
			exp, eok := want.Resolve(a)
			if gok != eok || !reflect.DeepEqual(got, exp) {
				t.Fatalf("round %d: Resolve(%s) = %+v %v, a reload gives %+v %v", round, a, got, gok, exp, eok)
			}
		}
	}
}

func types(evs []*eventlog.Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, fmt.Sprintf("%s %+v", e.Type, e.Payload))
	}
	return out
}

// compare describes how a differs from b, "" if it does not (members in
// any order; empty and missing entries alike).
func compare(a, b *Directory) string {
	norm := func(d *Directory) (map[string]store.Agent, map[string][]string, map[string]store.Group, map[string][]store.Member) {
		ms := map[string][]store.Member{}
		for g, m := range d.members {
			if len(m) > 0 {
				m = slices.Clone(m)
				slices.SortFunc(m, func(x, y store.Member) int { return cmpStr(x.Type+"/"+x.ID, y.Type+"/"+y.ID) })
				ms[g] = m
			}
		}
		roles := map[string][]string{}
		for r, ids := range d.byRole {
			if len(ids) > 0 {
				roles[r] = ids
			}
		}
		agents, groups := d.agents, d.groups
		if agents == nil {
			agents = map[string]store.Agent{}
		}
		if groups == nil {
			groups = map[string]store.Group{}
		}
		return agents, roles, groups, ms
	}
	a1, a2, a3, a4 := norm(a)
	b1, b2, b3, b4 := norm(b)
	switch {
	case !reflect.DeepEqual(a1, b1):
		return fmt.Sprintf("agents %v, want %v", a1, b1)
	case !reflect.DeepEqual(a2, b2):
		return fmt.Sprintf("roles %v, want %v", a2, b2)
	case !reflect.DeepEqual(a3, b3):
		return fmt.Sprintf("groups %v, want %v", a3, b3)
	case !reflect.DeepEqual(a4, b4):
		return fmt.Sprintf("members %v, want %v", a4, b4)
	}
	return ""
}

func cmpStr(x, y string) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}
