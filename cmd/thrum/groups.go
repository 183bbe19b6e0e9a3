package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/thrumhq/thrum/rpc"
)

// GroupCmd groups the group operations.
type GroupCmd struct {
	Create  GroupCreateCmd  `cmd:"" help:"Create a group."`
	Delete  GroupDeleteCmd  `cmd:"" help:"Delete a group (not @everyone)."`
	Add     GroupAddCmd     `cmd:"" help:"Add an agent or a role to a group."`
	Remove  GroupRemoveCmd  `cmd:"" help:"Remove an agent or a role from a group."`
	List    GroupListCmd    `cmd:"" help:"List groups."`
	Info    GroupInfoCmd    `cmd:"" help:"Show a group and its members."`
	Members GroupMembersCmd `cmd:"" help:"List a group's members (--expand resolves them to agents)."`
}

type GroupCreateCmd struct {
	Name        string `arg:"" help:"Group name (a-z, 0-9, _)."`
	Description string `help:"What the group is for."`
}

func (c *GroupCreateCmd) Help() string {
	return ownerNote + "\n\nExamples:\n  thrum group create reviewers --description \"Code review team\"\n  THRUM_NAME=alice thrum group create backend"
}

// ownerNote is the help text of the commands that change groups.
const ownerNote = `Groups are the repository owner's to manage: without --agent-id or
THRUM_NAME the change is made by the owner (created_by "owner"), over the
daemon's Unix socket, which only the owner can reach. Naming an agent
makes the change as that agent.`

func (c *GroupCreateCmd) Run(ctx context.Context, g *Globals) error {
	return call(ctx, g, false, func(s *session) (any, error) {
		return s.c.CreateGroup(ctx, &rpc.CreateGroupParams{Name: c.Name, Description: c.Description})
	}, func(w io.Writer, v any) {
		fmt.Fprintf(w, "> Group created: @%s\n", v.(*rpc.CreateGroupResult).Name)
	})
}

type GroupDeleteCmd struct {
	Name string `arg:"" help:"Group name."`
}

func (c *GroupDeleteCmd) Help() string {
	return ownerNote + "\n\nExamples:\n  thrum group delete reviewers\n  thrum group delete reviewers --json"
}

func (c *GroupDeleteCmd) Run(ctx context.Context, g *Globals) error {
	return call(ctx, g, false, func(s *session) (any, error) {
		return s.c.DeleteGroup(ctx, &rpc.DeleteGroupParams{Name: c.Name})
	}, func(w io.Writer, v any) {
		fmt.Fprintf(w, "> Group deleted: @%s\n", v.(*rpc.DeleteGroupResult).Name)
	})
}

// memberArgs are how add and remove name a member: "@alice" (an agent) or
// --role reviewer (the global --role flag: for these two commands it names
// the member, not the caller's identity). THRUM_ROLE, which an agent's
// environment may well set, names neither.
type memberArgs struct {
	Group  string `arg:"" help:"Group name."`
	Member string `arg:"" optional:"" help:"Agent, as @name; or give --role ROLE to add every agent of a role, now and later."`
}

func (m *memberArgs) params(g *Globals) (*rpc.GroupMembership, error) {
	role := ""
	if g.roleFlag {
		role = g.Role
	}
	g.Role, g.Module = "", "" // not an identity selector here
	switch {
	case m.Member != "" && role != "":
		return nil, withCode(exitUsage, "name either an agent (@name) or --role ROLE, not both")
	case role != "":
		return &rpc.GroupMembership{Group: m.Group, MemberType: rpc.MemberRole, MemberID: role}, nil
	case m.Member != "":
		return &rpc.GroupMembership{Group: m.Group, MemberType: rpc.MemberAgent, MemberID: m.Member}, nil
	}
	return nil, withCode(exitUsage, "name a member: an agent as @name, or --role ROLE")
}

type GroupAddCmd struct{ memberArgs }

func (c *GroupAddCmd) Help() string {
	return ownerNote + "\n\nExamples:\n  thrum group add reviewers @alice\n  thrum group add reviewers --role reviewer"
}

func (c *GroupAddCmd) Run(ctx context.Context, g *Globals) error {
	p, err := c.params(g)
	if err != nil {
		return err
	}
	return call(ctx, g, false, func(s *session) (any, error) { return s.c.AddGroupMember(ctx, p) }, func(w io.Writer, v any) {
		r := v.(*rpc.GroupMembership)
		fmt.Fprintf(w, "> Added %s %s to @%s\n", r.MemberType, r.MemberID, r.Group)
	})
}

type GroupRemoveCmd struct{ memberArgs }

func (c *GroupRemoveCmd) Help() string {
	return ownerNote + "\n\nExamples:\n  thrum group remove reviewers @alice\n  thrum group remove reviewers --role reviewer"
}

func (c *GroupRemoveCmd) Run(ctx context.Context, g *Globals) error {
	p, err := c.params(g)
	if err != nil {
		return err
	}
	return call(ctx, g, false, func(s *session) (any, error) { return s.c.RemoveGroupMember(ctx, p) }, func(w io.Writer, v any) {
		r := v.(*rpc.GroupMembership)
		fmt.Fprintf(w, "> Removed %s %s from @%s\n", r.MemberType, r.MemberID, r.Group)
	})
}

type GroupListCmd struct{}

func (c *GroupListCmd) Run(ctx context.Context, g *Globals) error {
	return call(ctx, g, false, func(s *session) (any, error) { return s.c.ListGroups(ctx, &rpc.ListGroupsParams{}) }, func(w io.Writer, v any) {
		r := v.(*rpc.ListGroupsResult)
		tw := table(w, "GROUP", "MEMBERS", "DESCRIPTION")
		for _, gr := range r.Groups {
			members := fmt.Sprint(gr.MemberCount)
			if gr.Name == "everyone" {
				members += " (all agents)"
			}
			tw.row("@"+gr.Name, members, gr.Description)
		}
		tw.flush()
	})
}

type GroupInfoCmd struct {
	Name string `arg:"" help:"Group name."`
}

func (c *GroupInfoCmd) Run(ctx context.Context, g *Globals) error {
	return call(ctx, g, false, func(s *session) (any, error) {
		return s.c.GroupInfo(ctx, &rpc.GroupInfoParams{Name: c.Name})
	}, func(w io.Writer, v any) {
		r := v.(*rpc.GroupInfoResult)
		fmt.Fprintf(w, "Group: @%s\n", r.Name)
		if r.Description != "" {
			fmt.Fprintf(w, "  Description: %s\n", r.Description)
		}
		fmt.Fprintf(w, "  Created:     %s by %s\n", r.CreatedAt, r.CreatedBy)
		fmt.Fprintf(w, "  Members:     %s\n", members(r.Members, r.Name))
	})
}

func members(ms []rpc.GroupMember, group string) string {
	if len(ms) == 0 {
		if group == "everyone" {
			return "every agent"
		}
		return "none"
	}
	s := make([]string, len(ms))
	for i, m := range ms {
		if m.Type == rpc.MemberRole {
			s[i] = "role:" + m.ID
		} else {
			s[i] = "@" + m.ID
		}
	}
	return strings.Join(s, ", ")
}

type GroupMembersCmd struct {
	Name   string `arg:"" help:"Group name."`
	Expand bool   `help:"Resolve roles (and @everyone) to the agents they reach now."`
}

func (c *GroupMembersCmd) Run(ctx context.Context, g *Globals) error {
	return call(ctx, g, false, func(s *session) (any, error) {
		return s.c.GroupMembers(ctx, &rpc.GroupMembersParams{Name: c.Name, Expand: c.Expand})
	}, func(w io.Writer, v any) {
		r := v.(*rpc.GroupMembersResult)
		name := strings.TrimPrefix(c.Name, "@")
		fmt.Fprintf(w, "Members of @%s: %s\n", name, members(r.Members, name))
		if c.Expand {
			if len(r.ExpandedAgents) == 0 {
				fmt.Fprintln(w, "Reaches: no agents")
			} else {
				fmt.Fprintf(w, "Reaches: %s\n", strings.Join(r.ExpandedAgents, ", "))
			}
		}
	})
}
