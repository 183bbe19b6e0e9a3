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
	Trust   AgentTrustCmd   `cmd:"" help:"Take an agent's new key, on your word, and what it signed."`
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

type AgentTrustCmd struct {
	Name string `arg:"" help:"Agent (or user:NAME) whose new key to trust."`
	Key  string `help:"The key to trust (as sync status and doctor show it); needed when several new keys wait."`
}

func (c *AgentTrustCmd) Help() string {
	return `A clone trusts the first key it sees for an agent (or the one the team's
thrum-keys file lists). A registration that brings another key, and
everything that key signs, is refused until you say the key is the
agent's: after it lost its old key, say, or registered on another
machine. Check the key with the agent's owner first: whoever can push to
the remote can bring a key too. This records your word on this clone
only, then takes in what the quarantine held for want of it.

Examples:
  thrum agent trust alice
  thrum agent trust alice --key Xy3…`
}

func (c *AgentTrustCmd) Run(ctx context.Context, g *Globals) error {
	return call(ctx, g, false, func(s *session) (any, error) {
		return s.c.TrustAgent(ctx, &rpc.TrustAgentParams{Name: c.Name, Key: c.Key})
	}, func(w io.Writer, v any) {
		r := v.(*rpc.TrustAgentResult)
		fmt.Fprintf(w, "> Trusted key %s for @%s on this clone; %d %s it signed taken in.\n", r.Key, r.AgentID, r.Imported, plural(r.Imported, "event", "events"))
		for _, k := range r.Pending {
			fmt.Fprintf(w, "  Still waiting for your word: key %s (machine %s)\n", k.Key, k.Machine)
		}
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
