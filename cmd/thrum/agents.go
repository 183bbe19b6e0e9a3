package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/thrumhq/thrum/rpc"
)

// AgentCmd groups agent operations.
type AgentCmd struct {
	List    AgentListCmd    `cmd:"" help:"List agents with active/offline status."`
	Whoami  AgentWhoamiCmd  `cmd:"" help:"Show the current identity and session."`
	Delete  AgentDeleteCmd  `cmd:"" help:"Delete an agent (its messages stay)."`
	Cleanup AgentCleanupCmd `cmd:"" help:"Find and delete orphaned agents."`
}

// AgentListCmd lists agents; the global --role and --module filter it.
type AgentListCmd struct{}

func (c *AgentListCmd) Help() string {
	return "Examples:\n  thrum agent list\n  thrum agent list --role reviewer"
}

func (c *AgentListCmd) Run(ctx context.Context, g *Globals) error {
	p := &rpc.ListAgentsParams{Role: g.Role, Module: g.Module}
	g.Role, g.Module = "", "" // filters here, not an identity selector
	return call(ctx, g, false, func(s *session) (any, error) {
		return s.c.ListAgents(ctx, p)
	}, func(w io.Writer, v any) {
		r := v.(*rpc.ListAgentsResult)
		if len(r.Agents) == 0 {
			fmt.Fprintln(w, "No agents registered.")
			g.hint("Register one: thrum quickstart --name NAME --role ROLE --module MODULE")
			return
		}
		now := time.Now()
		t := table(w, "AGENT", "KIND", "ROLE", "MODULE", "STATUS", "LAST SEEN")
		for _, a := range r.Agents {
			seen := "never"
			if a.LastSeenAt != "" {
				seen = ago(a.LastSeenAt, now)
			}
			t.row("@"+a.AgentID, a.Kind, a.Role, a.Module, a.Status, seen)
		}
		t.flush()
	})
}

type AgentWhoamiCmd struct{}

func (c *AgentWhoamiCmd) Run(ctx context.Context, g *Globals) error {
	s, err := connectAs(ctx, g)
	if err != nil {
		return err
	}
	defer s.close()
	r, err := s.c.Whoami(ctx, &rpc.WhoamiParams{})
	if err != nil {
		return err
	}
	r.Source = string(s.source)
	return g.out(r, func(w io.Writer) {
		fmt.Fprintf(w, "Agent:   @%s\n  Role:    %s\n  Module:  %s\n  Source:  %s\n", r.AgentID, r.Role, r.Module, r.Source)
		if r.SessionID != "" {
			fmt.Fprintf(w, "  Session: %s (since %s)\n", r.SessionID, ago(r.SessionStart, time.Now()))
		} else {
			fmt.Fprintln(w, "  Session: none (thrum session start)")
		}
	})
}

type AgentDeleteCmd struct {
	Name  string `arg:"" help:"Agent name."`
	Force bool   `help:"Confirm the deletion."`
}

func (c *AgentDeleteCmd) Help() string {
	return "Removes the agent and its identity file; its messages stay in the log.\n\nExamples:\n  thrum agent delete old_agent --force\n  thrum agent delete old_agent --force --json"
}

func (c *AgentDeleteCmd) Run(ctx context.Context, g *Globals) error {
	if !c.Force {
		return withCode(exitUsage, "refusing to delete agent %s without --force", c.Name)
	}
	return call(ctx, g, false, func(s *session) (any, error) {
		return s.c.DeleteAgent(ctx, &rpc.DeleteAgentParams{Name: c.Name})
	}, func(w io.Writer, v any) {
		fmt.Fprintf(w, "> %s\n", v.(*rpc.DeleteAgentResult).Message)
	})
}

type AgentCleanupCmd struct {
	DryRun    bool `help:"Only list orphans."`
	Force     bool `help:"Delete the orphans found."`
	Threshold int  `default:"30" help:"Days without activity that make an agent stale."`
}

func (c *AgentCleanupCmd) Help() string {
	return `An agent is never an orphan while it is active or while its identity file
exists in any worktree of the repository (git worktree list). Otherwise it is
an orphan when the worktree it worked in is gone or it has not been seen for
--threshold days; WHY says which. Agents registered over RPC never had an
identity file: that alone does not make them orphans. Without --force this
only lists them.

Examples:
  thrum agent cleanup --dry-run
  thrum agent cleanup --force --threshold 14`
}

func (c *AgentCleanupCmd) Run(ctx context.Context, g *Globals) error {
	return call(ctx, g, false, func(s *session) (any, error) {
		return s.c.CleanupAgents(ctx, &rpc.CleanupAgentsParams{DryRun: c.DryRun || !c.Force, Force: c.Force, Threshold: c.Threshold})
	}, func(w io.Writer, v any) {
		r := v.(*rpc.CleanupAgentsResult)
		if len(r.Orphans) > 0 {
			t := table(w, "AGENT", "ROLE", "DAYS IDLE", "MESSAGES", "WHY")
			for _, o := range r.Orphans {
				t.row("@"+o.AgentID, o.Role, fmt.Sprint(o.DaysSinceLastSeen), fmt.Sprint(o.MessageCount), o.Reason)
			}
			t.flush()
		}
		fmt.Fprintln(w, r.Message)
	})
}
