// Package directory is the node's in-memory copy of the agents and
// groups tables: read on every send and notification, loaded from the
// projection when the node opens, then changed by each committed event
// that changes an agent or a group (Apply), at the cost of that change.
// It resolves addresses (an agent, a role, a group, everyone) to agents.
package directory

import (
	"context"
	"errors"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/thrumhq/thrum/eventlog"
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

// Apply brings the directory up to date with evs, which st has applied:
// each agent or group an event names is read again from st (one row),
// and each membership change is made in place, so a change costs the
// same however many agents there are. Other events are skipped. If a
// read fails the whole directory is reloaded.
func (d *Directory) Apply(ctx context.Context, st *store.Store, evs []*eventlog.Event) error {
	if err := d.apply(ctx, st, evs); err != nil {
		return errors.Join(err, d.Reload(ctx, st))
	}
	return nil
}

func (d *Directory) apply(ctx context.Context, st *store.Store, evs []*eventlog.Event) error {
	for _, e := range evs {
		var err error
		switch e.Type {
		case eventlog.TypeAgentRegister, eventlog.TypeAgentUpdate:
			var p eventlog.AgentRegister
			if p, err = eventlog.PayloadAs[eventlog.AgentRegister](e); err == nil {
				err = d.readAgent(ctx, st, p.AgentID)
			}
		case eventlog.TypeAgentCleanup:
			var p eventlog.AgentCleanup
			if p, err = eventlog.PayloadAs[eventlog.AgentCleanup](e); err == nil {
				err = d.readAgent(ctx, st, p.AgentID)
			}
		case eventlog.TypeGroupCreate:
			var p eventlog.GroupCreate
			if p, err = eventlog.PayloadAs[eventlog.GroupCreate](e); err == nil {
				err = d.readGroup(ctx, st, p.Name)
			}
		case eventlog.TypeGroupDelete:
			var p eventlog.GroupDelete
			if p, err = eventlog.PayloadAs[eventlog.GroupDelete](e); err == nil {
				d.mu.Lock()
				delete(d.groups, p.Name)
				delete(d.members, p.Name)
				d.mu.Unlock()
			}
		case eventlog.TypeGroupMemberAdd, eventlog.TypeGroupMemberDel:
			var p eventlog.GroupMember
			if p, err = eventlog.PayloadAs[eventlog.GroupMember](e); err == nil {
				d.member(&p, e.Type == eventlog.TypeGroupMemberAdd)
			}
		default:
			if strings.HasPrefix(e.Type, "group.") { // one this version does not know
				err = d.Reload(ctx, st)
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// readAgent sets agent id as st has it now: changed, added, or gone.
func (d *Directory) readAgent(ctx context.Context, st *store.Store, id string) error {
	a, err := st.Agent(ctx, id)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if old, ok := d.agents[id]; ok {
		delete(d.agents, id)
		if ids := d.byRole[old.Role]; len(ids) > 0 {
			if i, found := slices.BinarySearch(ids, id); found {
				if ids = slices.Delete(ids, i, i+1); len(ids) == 0 {
					delete(d.byRole, old.Role)
				} else {
					d.byRole[old.Role] = ids
				}
			}
		}
	}
	if a == nil {
		return nil
	}
	if d.agents == nil {
		d.agents, d.byRole = map[string]store.Agent{}, map[string][]string{}
	}
	d.agents[id] = *a
	if a.Kind == "agent" && a.Role != "" {
		ids := d.byRole[a.Role]
		if i, found := slices.BinarySearch(ids, id); !found {
			d.byRole[a.Role] = slices.Insert(ids, i, id)
		}
	}
	return nil
}

// readGroup sets group name as st has it now.
func (d *Directory) readGroup(ctx context.Context, st *store.Store, name string) error {
	g, err := st.Group(ctx, name)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if g == nil {
		delete(d.groups, name)
		return nil
	}
	if d.groups == nil {
		d.groups = map[string]store.Group{}
	}
	d.groups[name] = *g
	return nil
}

// member adds or removes one direct member of a group, as the
// projection does (adding a member twice keeps one).
func (d *Directory) member(p *eventlog.GroupMember, add bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	ms := d.members[p.Group]
	i := slices.IndexFunc(ms, func(m store.Member) bool { return m.Type == p.MemberType && m.ID == p.MemberID })
	switch {
	case add && i < 0:
		if d.members == nil {
			d.members = map[string][]store.Member{}
		}
		d.members[p.Group] = append(ms, store.Member{Group: p.Group, Type: p.MemberType, ID: p.MemberID})
	case !add && i >= 0:
		d.members[p.Group] = slices.Delete(ms, i, i+1)
	default:
		return
	}
	if g, ok := d.groups[p.Group]; ok {
		g.MemberCount = len(d.members[p.Group])
		d.groups[p.Group] = g
	}
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
