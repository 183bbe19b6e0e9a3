package thrum

import (
	"context"

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/identity"
	"github.com/thrumhq/thrum/rpc"
	"github.com/thrumhq/thrum/store"
)

const maxDescription = 1024

// Owner is the created_by (and the actor in the log) of a group change
// made with no calling agent: over the daemon's Unix socket, which only
// the repository's owner can reach, or by a Go program calling the Node
// directly. A WebSocket caller always has an identity here, because the
// RPC server refuses changes from a WebSocket that has not authenticated.
const Owner = "owner"

// groupActor is who a group change is recorded as: the calling agent,
// which must be registered, or Owner when there is none.
func (n *Node) groupActor(ctx context.Context, what string) (string, error) {
	if _, ok := CallerFrom(ctx); !ok {
		return Owner, nil
	}
	return n.registeredCaller(ctx, what)
}

func checkGroupName(name string) error {
	if name == "" {
		return invalid("name is required")
	}
	if err := identity.ValidateRole("group name", trimAt(name)); err != nil {
		return invalid("%v", err)
	}
	return nil
}

// CreateGroup creates a group. Its name may not be taken by an agent or a
// role, so that an address means one thing.
func (n *Node) CreateGroup(ctx context.Context, p *rpc.CreateGroupParams) (*rpc.CreateGroupResult, error) {
	if err := checkGroupName(p.Name); err != nil {
		return nil, err
	}
	if len(p.Description) > maxDescription {
		return nil, tooLarge("description is too long: at most %d bytes", maxDescription)
	}
	name := trimAt(p.Name)
	me, err := n.groupActor(ctx, "creating a group")
	if err != nil {
		return nil, err
	}
	n.ctlMu.Lock()
	defer n.ctlMu.Unlock()
	if n.dirc.HasGroup(name) {
		return nil, conflict("group already exists: %s", name)
	}
	if _, ok := n.dirc.Agent(name); ok {
		return nil, conflict("%q is an agent's name: choose another group name", name)
	}
	if n.dirc.HasRole(name) {
		return nil, conflict("%q is a role: choose another group name", name)
	}
	e := &eventlog.Event{Type: eventlog.TypeGroupCreate, Payload: eventlog.GroupCreate{Name: name, Description: p.Description, CreatedBy: me, Machine: n.machine}}
	if err := n.append(ctx, e); err != nil {
		return nil, err
	}
	return &rpc.CreateGroupResult{Name: name, CreatedAt: e.Timestamp()}, nil
}

// DeleteGroup deletes a group and its memberships. everyone cannot be
// deleted.
func (n *Node) DeleteGroup(ctx context.Context, p *rpc.DeleteGroupParams) (*rpc.DeleteGroupResult, error) {
	if err := checkGroupName(p.Name); err != nil {
		return nil, err
	}
	name := trimAt(p.Name)
	if name == EveryoneGroup {
		return nil, forbidden("the everyone group is built in and cannot be deleted")
	}
	me, err := n.groupActor(ctx, "deleting a group")
	if err != nil {
		return nil, err
	}
	n.ctlMu.Lock()
	defer n.ctlMu.Unlock()
	if !n.dirc.HasGroup(name) {
		return nil, notFound("group not found: %s", name)
	}
	if err := n.ownGroup(ctx, name); err != nil {
		return nil, err
	}
	if err := n.append(ctx, &eventlog.Event{Type: eventlog.TypeGroupDelete, Payload: eventlog.GroupDelete{Name: name, AgentID: me, Machine: n.machine}}); err != nil {
		return nil, err
	}
	return &rpc.DeleteGroupResult{Name: name, Deleted: true}, nil
}

// checkMember validates a member change and returns the normalized group
// and member ID.
func (n *Node) checkMember(p *rpc.GroupMembership) (string, string, error) {
	if p.Group == "" {
		return "", "", invalid("group is required")
	}
	if err := checkGroupName(p.Group); err != nil {
		return "", "", err
	}
	group := trimAt(p.Group)
	if p.MemberType != rpc.MemberAgent && p.MemberType != rpc.MemberRole {
		return "", "", invalid("invalid member_type %q: use agent or role", p.MemberType)
	}
	if p.MemberID == "" {
		return "", "", invalid("member_id is required")
	}
	id := identity.NormalizeAgentID(p.MemberID)
	if err := identity.ValidateRole("member_id", id); err != nil {
		return "", "", invalid("%v", err)
	}
	if group == EveryoneGroup {
		return "", "", forbidden("the everyone group holds every agent already; its members cannot be changed")
	}
	if !n.dirc.HasGroup(group) {
		return "", "", notFound("group not found: %s", group)
	}
	return group, id, nil
}

// AddGroupMember adds an agent (by ID) or a role to a group. An agent must
// exist; a role need not have agents yet.
func (n *Node) AddGroupMember(ctx context.Context, p *rpc.GroupMembership) (*rpc.GroupMembership, error) {
	return n.changeMember(ctx, p, true)
}

// RemoveGroupMember removes a member from a group.
func (n *Node) RemoveGroupMember(ctx context.Context, p *rpc.GroupMembership) (*rpc.GroupMembership, error) {
	return n.changeMember(ctx, p, false)
}

func (n *Node) changeMember(ctx context.Context, p *rpc.GroupMembership, add bool) (*rpc.GroupMembership, error) {
	me, err := n.groupActor(ctx, "changing a group")
	if err != nil {
		return nil, err
	}
	n.ctlMu.Lock()
	defer n.ctlMu.Unlock()
	group, id, err := n.checkMember(p)
	if err != nil {
		return nil, err
	}
	if err := n.ownGroup(ctx, group); err != nil {
		return nil, err
	}
	member := n.isMember(group, p.MemberType, id)
	typ := eventlog.TypeGroupMemberAdd
	switch {
	case add && p.MemberType == rpc.MemberAgent && !n.isAgent(id):
		return nil, notFound("agent not found: %s", id)
	case add && member:
		return nil, conflict("%s %s is already a member of %s", p.MemberType, id, group)
	case !add && !member:
		return nil, notFound("%s %s is not a member of %s", p.MemberType, id, group)
	case !add:
		typ = eventlog.TypeGroupMemberDel
	}
	if err := n.append(ctx, &eventlog.Event{Type: typ, Payload: eventlog.GroupMember{
		Group: group, MemberType: p.MemberType, MemberID: id, AgentID: me, Machine: n.machine}}); err != nil {
		return nil, err
	}
	return &rpc.GroupMembership{Group: group, MemberType: p.MemberType, MemberID: id}, nil
}

// ownGroup refuses a change to a group another machine created: that
// machine alone changes it, and every other machine's sync refuses a
// change from elsewhere (groupRule, synctrust.go).
func (n *Node) ownGroup(ctx context.Context, name string) error {
	g, err := n.store.Group(ctx, name)
	if isNotFound(err) {
		return notFound("group not found: %s", name)
	}
	if err != nil {
		return internal("group", err)
	}
	if g.Machine != "" && !n.ownMachine(g.Machine) {
		return forbidden("group %s was created on another machine, which alone changes it: change it there", name)
	}
	return nil
}

func (n *Node) isAgent(id string) bool {
	a, ok := n.dirc.Agent(id)
	return ok && a.Kind == rpc.KindAgent
}

func (n *Node) isMember(group, typ, id string) bool { return n.dirc.IsMember(group, typ, id) }

func groupInfo(g *store.Group) rpc.GroupInfo {
	return rpc.GroupInfo{Name: g.Name, Description: g.Description, CreatedAt: g.CreatedAt, CreatedBy: g.CreatedBy, MemberCount: g.MemberCount}
}

// ListGroups lists every group with its direct member count; everyone's
// members are every agent, so its count is the number of agents.
func (n *Node) ListGroups(ctx context.Context, _ *rpc.ListGroupsParams) (*rpc.ListGroupsResult, error) {
	gs, err := n.store.Groups(ctx)
	if err != nil {
		return nil, internal("list groups", err)
	}
	out := &rpc.ListGroupsResult{Groups: make([]rpc.GroupInfo, 0, len(gs))}
	for i := range gs {
		gi := groupInfo(&gs[i])
		if gi.Name == EveryoneGroup {
			gi.MemberCount = len(n.dirc.Expand(EveryoneGroup))
		}
		out.Groups = append(out.Groups, gi)
	}
	return out, nil
}

func (n *Node) members(ctx context.Context, name string) (*store.Group, []rpc.GroupMember, error) {
	if err := checkGroupName(name); err != nil {
		return nil, nil, err
	}
	name = trimAt(name)
	g, err := n.store.Group(ctx, name)
	if isNotFound(err) {
		return nil, nil, notFound("group not found: %s", name)
	}
	if err != nil {
		return nil, nil, internal("group", err)
	}
	ms, err := n.store.Members(ctx, name)
	if err != nil {
		return nil, nil, internal("group", err)
	}
	out := make([]rpc.GroupMember, 0, len(ms))
	for _, m := range ms {
		out = append(out, rpc.GroupMember{Type: m.Type, ID: m.ID})
	}
	return g, out, nil
}

// GroupInfo returns a group and its direct members.
func (n *Node) GroupInfo(ctx context.Context, p *rpc.GroupInfoParams) (*rpc.GroupInfoResult, error) {
	g, ms, err := n.members(ctx, p.Name)
	if err != nil {
		return nil, err
	}
	return &rpc.GroupInfoResult{Name: g.Name, Description: g.Description, CreatedAt: g.CreatedAt, CreatedBy: g.CreatedBy, Members: ms}, nil
}

// GroupMembers returns a group's direct members and, with expand, the
// agent IDs it reaches now (roles resolved; everyone is every agent).
func (n *Node) GroupMembers(ctx context.Context, p *rpc.GroupMembersParams) (*rpc.GroupMembersResult, error) {
	g, ms, err := n.members(ctx, p.Name)
	if err != nil {
		return nil, err
	}
	out := &rpc.GroupMembersResult{Members: ms}
	if p.Expand {
		out.ExpandedAgents = n.dirc.Expand(g.Name)
	}
	return out, nil
}
