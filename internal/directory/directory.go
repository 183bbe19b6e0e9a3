// Package directory is the node's in-memory copy of the agents and
// groups tables: small, read on every send and notification, reloaded
// from the projection after each commit that changes them. It resolves
// addresses (an agent, a role, a group, everyone) to agents.
package directory

import (
	"context"
	"sort"
	"sync"

	"github.com/thrumhq/thrum/identity"
	"github.com/thrumhq/thrum/rpc"
	"github.com/thrumhq/thrum/store"
)

// Everyone is the built-in group that holds every agent.
const Everyone = "everyone"

// A Directory is the agents and groups of one node. Its zero value is
// empty and ready; it may be used from several goroutines.
type Directory struct {
	mu      sync.RWMutex
	agents  map[string]store.Agent
	byRole  map[string][]string // role → agent IDs (kind agent), sorted
	groups  map[string]store.Group
	members map[string][]store.Member // group → direct members
}

// Reload replaces the directory with the projection's current tables.
func (d *Directory) Reload(ctx context.Context, st *store.Store) error {
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

// Agent returns the agent with ID id.
func (d *Directory) Agent(id string) (store.Agent, bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	a, ok := d.agents[id]
	return a, ok
}

// HasGroup reports whether a group is named name.
func (d *Directory) HasGroup(name string) bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	_, ok := d.groups[name]
	return ok
}

// HasRole reports whether an agent has the role.
func (d *Directory) HasRole(role string) bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return len(d.byRole[role]) > 0
}

// Targets returns the mention values that reach agent id: its ID, its
// role, every group holding it directly or through its role, and
// everyone. Membership is resolved now, at read time.
func (d *Directory) Targets(id string) []string {
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
		out = append(out, Everyone)
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

// RoleTargets returns the mention values that reach every agent of a
// role: the role, the groups holding the role, and everyone.
func (d *Directory) RoleTargets(role string) []string {
	d.mu.RLock()
	defer d.mu.RUnlock()
	out := []string{role, Everyone}
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

// MentionTargets interprets a mention_role filter or subscription value:
// an agent's ID means everything addressed to that agent; anything else is
// a role.
func (d *Directory) MentionTargets(v string) []string {
	v = identity.NormalizeAgentID(v)
	if _, ok := d.Agent(v); ok {
		return d.Targets(v)
	}
	return d.RoleTargets(v)
}

// Resolve finds whom an address reaches now. addr is normalized (no "@").
// ok is false when it names no agent, role or group.
func (d *Directory) Resolve(addr string) (rpc.Recipient, bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	r := rpc.Recipient{Address: addr, Agents: []string{}, Active: []string{}}
	if addr == Everyone {
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

// Expand returns the agent IDs a group reaches now, sorted.
func (d *Directory) Expand(group string) []string {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.expandLocked(group)
}

func (d *Directory) expandLocked(group string) []string {
	set := map[string]bool{}
	if group == Everyone {
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

// IsMember reports whether group has the direct member (typ, id).
func (d *Directory) IsMember(group, typ, id string) bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	for _, m := range d.members[group] {
		if m.Type == typ && m.ID == id {
			return true
		}
	}
	return false
}
