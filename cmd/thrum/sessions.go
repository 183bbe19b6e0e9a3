package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/thrumhq/thrum/rpc"
)

// SessionCmd groups session operations. They act on the current agent's
// active session unless --session names one.
type SessionCmd struct {
	Start     SessionStartCmd     `cmd:"" help:"Start a session (ending any left open)."`
	End       SessionEndCmd       `cmd:"" help:"End the current session."`
	List      SessionListCmd      `cmd:"" help:"List sessions."`
	Heartbeat SessionHeartbeatCmd `cmd:"" help:"Mark the session active; add or remove scopes and refs."`
	Intent    SessionIntentCmd    `cmd:"" help:"Set what the agent is working on (empty clears)."`
	Task      SessionTaskCmd      `cmd:"" help:"Set the current task (empty clears)."`
}

type SessionStartCmd struct {
	Scope    []string `help:"Scope as type:value (repeatable)."`
	Ref      []string `help:"Ref as type:value (repeatable)."`
	Worktree string   `help:"Worktree path: heartbeats then record its git context." type:"path"`
}

func (c *SessionStartCmd) Run(ctx context.Context, g *Globals) error {
	scopes, err := parsePairs("--scope", c.Scope)
	if err != nil {
		return err
	}
	refs, err := parsePairs("--ref", c.Ref)
	if err != nil {
		return err
	}
	if c.Worktree != "" {
		refs = append(refs, rpc.Pair{Type: rpc.RefWorktree, Value: c.Worktree})
	}
	s, err := connectAs(ctx, g)
	if err != nil {
		return err
	}
	defer s.close()
	r, err := s.c.StartSession(ctx, &rpc.StartSessionParams{AgentID: s.id.AgentID, Scopes: scopes, Refs: refs})
	if err != nil {
		return err
	}
	return g.out(r, func(w io.Writer) { fmt.Fprintf(w, "> Session started: %s\n", r.SessionID) })
}

// current returns the session to act on.
func current(ctx context.Context, s *session, explicit string) (string, error) {
	if explicit != "" {
		return explicit, nil
	}
	w, err := s.c.Whoami(ctx, &rpc.WhoamiParams{})
	if err != nil {
		return "", err
	}
	if w.SessionID == "" {
		return "", fmt.Errorf("%s has no active session: start one with `thrum session start`", w.AgentID)
	}
	return w.SessionID, nil
}

type sessionArg struct {
	Session string `help:"Session ID (default: the current agent's active session)."`
}

type SessionEndCmd struct {
	sessionArg
	Reason string `default:"normal" enum:"normal,crash,superseded" help:"Why it ends: normal, crash or superseded."`
}

func (c *SessionEndCmd) Run(ctx context.Context, g *Globals) error {
	return call(ctx, g, true, func(s *session) (any, error) {
		id, err := current(ctx, s, c.Session)
		if err != nil {
			return nil, err
		}
		return s.c.EndSession(ctx, &rpc.EndSessionParams{SessionID: id, Reason: c.Reason})
	}, func(w io.Writer, v any) {
		r := v.(*rpc.EndSessionResult)
		fmt.Fprintf(w, "> Session ended: %s (%s)\n", r.SessionID, (time.Duration(r.DurationMs) * time.Millisecond).Round(time.Second))
	})
}

type SessionListCmd struct {
	Agent  string `help:"Only this agent's sessions."`
	Active bool   `help:"Only active sessions."`
}

func (c *SessionListCmd) Run(ctx context.Context, g *Globals) error {
	return call(ctx, g, false, func(s *session) (any, error) {
		return s.c.ListSessions(ctx, &rpc.ListSessionsParams{AgentID: c.Agent, ActiveOnly: c.Active})
	}, func(w io.Writer, v any) {
		r := v.(*rpc.ListSessionsResult)
		if len(r.Sessions) == 0 {
			fmt.Fprintln(w, "No sessions.")
			return
		}
		now := time.Now()
		t := table(w, "SESSION", "AGENT", "STATUS", "STARTED", "INTENT")
		for _, x := range r.Sessions {
			t.row(x.SessionID, "@"+x.AgentID, x.Status, ago(x.StartedAt, now), x.Intent)
		}
		t.flush()
	})
}

type SessionHeartbeatCmd struct {
	sessionArg
	AddScope    []string `help:"Scope to add, type:value (repeatable)."`
	RemoveScope []string `help:"Scope to remove (repeatable)."`
	AddRef      []string `help:"Ref to add (repeatable)."`
	RemoveRef   []string `help:"Ref to remove (repeatable)."`
}

func (c *SessionHeartbeatCmd) Run(ctx context.Context, g *Globals) error {
	var lists [4][]rpc.Pair
	for i, in := range [][]string{c.AddScope, c.RemoveScope, c.AddRef, c.RemoveRef} {
		ps, err := parsePairs("--scope/--ref", in)
		if err != nil {
			return err
		}
		lists[i] = ps
	}
	return call(ctx, g, true, func(s *session) (any, error) {
		id, err := current(ctx, s, c.Session)
		if err != nil {
			return nil, err
		}
		return s.c.Heartbeat(ctx, &rpc.HeartbeatParams{SessionID: id, AddScopes: lists[0], RemoveScopes: lists[1],
			AddRefs: lists[2], RemoveRefs: lists[3]})
	}, func(w io.Writer, v any) {
		fmt.Fprintf(w, "> Heartbeat: %s\n", v.(*rpc.HeartbeatResult).SessionID)
	})
}

type SessionIntentCmd struct {
	sessionArg
	Intent string `arg:"" optional:"" help:"Intent text; omit to clear."`
}

func (c *SessionIntentCmd) Run(ctx context.Context, g *Globals) error {
	return call(ctx, g, true, func(s *session) (any, error) {
		id, err := current(ctx, s, c.Session)
		if err != nil {
			return nil, err
		}
		return s.c.SetIntent(ctx, &rpc.SetIntentParams{SessionID: id, Intent: &c.Intent})
	}, func(w io.Writer, v any) {
		if r := v.(*rpc.SetIntentResult); r.Intent == "" {
			fmt.Fprintln(w, "> Intent cleared")
		} else {
			fmt.Fprintf(w, "> Intent set: %s\n", r.Intent)
		}
	})
}

type SessionTaskCmd struct {
	sessionArg
	Task string `arg:"" optional:"" help:"Task identifier; omit to clear."`
}

func (c *SessionTaskCmd) Run(ctx context.Context, g *Globals) error {
	return call(ctx, g, true, func(s *session) (any, error) {
		id, err := current(ctx, s, c.Session)
		if err != nil {
			return nil, err
		}
		return s.c.SetTask(ctx, &rpc.SetTaskParams{SessionID: id, CurrentTask: &c.Task})
	}, func(w io.Writer, v any) {
		if r := v.(*rpc.SetTaskResult); r.CurrentTask == "" {
			fmt.Fprintln(w, "> Task cleared")
		} else {
			fmt.Fprintf(w, "> Task set: %s\n", r.CurrentTask)
		}
	})
}
