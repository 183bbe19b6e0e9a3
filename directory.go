package thrum

import (
	"context"
	"sort"
	"sync"

	"github.com/thrumhq/thrum/identity"
	"github.com/thrumhq/thrum/rpc"
	"github.com/thrumhq/thrum/store"
)

// directory is an in-memory copy of the agents and groups tables: small,
// read on every send and notification, reloaded after each commit that
// changes them.
type directory struct {
	mu      sync.RWMutex
	agents  map[string]store.Agent
	byRole  map[string][]string // role → agent IDs (kind agent), sorted
	groups  map[string]store.Group
	members map[string][]store.Member // group → direct members
}

func (d *directory) reload(ctx context.Context, st *store.Store) error {
	agents, err := st.Agents(ctx, "", "")
	if err != nil {
		return err
	}
	groups, err := st.Groups(ctx)
	if err != nil {
		return err
	}
	members, err := st.Members(ctx, "")
	if err != nil {
		return err
	}
	am := make(map[string]store.Agent, len(agents))
	byRole := map[string][]string{}
	for _, a := range agents {
		am[a.AgentID] = a
		if a.Kind == "agent" && a.Role != "" {
			byRole[a.Role] = append(byRole[a.Role], a.AgentID)
		}
	}
	gm := make(map[string]store.Group, len(groups))
	for _, g := range groups {
		gm[g.Name] = g
	}
	mm := map[string][]store.Member{}
	for _, m := range members {
		mm[m.Group] = append(mm[m.Group], m)
	}
	d.mu.Lock()
	d.agents, d.byRole, d.groups, d.members = am, byRole, gm, mm
	d.mu.Unlock()
	return nil
}

func (d *directory) agent(id string) (store.Agent, bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	a, ok := d.agents[id]
	return a, ok
}

func (d *directory) hasGroup(name string) bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	_, ok := d.groups[name]
	return ok
}

func (d *directory) hasRole(role string) bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return len(d.byRole[role]) > 0
}

// targets returns the mention values that reach agent id: its ID, its
// role, every group holding it directly or through its role, and
// everyone. Membership is resolved now, at read time.
func (d *directory) targets(id string) []string {
	d.mu.RLock()
	defer d.mu.RUnlock()
	a, ok := d.agents[id]
	out := []string{id}
	if !ok {
		return out
	}
	if a.Role != "" && a.Role != id {
		out = append(out, a.Role)
	}
	if a.Kind == "agent" {
		out = append(out, EveryoneGroup)
	}
	for g, ms := range d.members {
		for _, m := range ms {
			if m.Type == rpc.MemberAgent && m.ID == id || m.Type == rpc.MemberRole && a.Role != "" && m.ID == a.Role {
				out = append(out, g)
				break
			}
		}
	}
	return out
}

// roleTargets returns the mention values that reach every agent of a
// role: the role, the groups holding the role, and everyone.
func (d *directory) roleTargets(role string) []string {
	d.mu.RLock()
	defer d.mu.RUnlock()
	out := []string{role, EveryoneGroup}
	for g, ms := range d.members {
		for _, m := range ms {
			if m.Type == rpc.MemberRole && m.ID == role {
				out = append(out, g)
				break
			}
		}
	}
	return out
}

// mentionTargets interprets a mention_role filter or subscription value:
// an agent's ID means everything addressed to that agent; anything else is
// a role.
func (d *directory) mentionTargets(v string) []string {
	v = identity.NormalizeAgentID(v)
	if _, ok := d.agent(v); ok {
		return d.targets(v)
	}
	return d.roleTargets(v)
}

// resolve finds whom an address reaches now. addr is normalized (no "@").
// ok is false when it names no agent, role or group.
func (d *directory) resolve(addr string) (rpc.Recipient, bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	r := rpc.Recipient{Address: addr, Agents: []string{}, Active: []string{}}
	if addr == EveryoneGroup {
		r.Kind = "everyone"
		for id, a := range d.agents {
			if a.Kind == "agent" {
				r.Agents = append(r.Agents, id)
			}
		}
		sort.Strings(r.Agents)
		return r, true
	}
	if _, ok := d.agents[addr]; ok {
		r.Kind = "agent"
		r.Agents = append(r.Agents, addr)
		return r, true
	}
	if ids := d.byRole[addr]; len(ids) > 0 {
		r.Kind = "role"
		r.Agents = append(r.Agents, ids...)
		return r, true
	}
	if _, ok := d.groups[addr]; ok {
		r.Kind = "group"
		r.Agents = d.expandLocked(addr)
		return r, true
	}
	return r, false
}

// expand returns the agent IDs a group reaches now, sorted.
func (d *directory) expand(group string) []string {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.expandLocked(group)
}

func (d *directory) expandLocked(group string) []string {
	set := map[string]bool{}
	if group == EveryoneGroup {
		for id, a := range d.agents {
			if a.Kind == "agent" {
				set[id] = true
			}
		}
	}
	for _, m := range d.members[group] {
		switch m.Type {
		case rpc.MemberAgent:
			set[m.ID] = true
		case rpc.MemberRole:
			for _, id := range d.byRole[m.ID] {
				set[id] = true
			}
		}
	}
	out := make([]string, 0, len(set))
	for id := range set {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}
