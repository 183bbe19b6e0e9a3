package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/thrumhq/thrum/identity"
	"github.com/thrumhq/thrum/internal/private"
	"github.com/thrumhq/thrum/rpc"
)

// session is what a command that talks to the daemon has: the layout, a
// connection, and (for commands that act as an agent) the identity.
type session struct {
	g  *Globals
	l  *layout
	c  *rpc.Client
	id *identity.File
	// source says how the identity was chosen, for agent whoami.
	source identity.Source
}

func (s *session) close() {
	if s.c != nil {
		s.c.Close()
	}
}

// connect dials the daemon for g.Repo. It fails with exit code 3 and the
// command to run when no daemon is running.
func connect(ctx context.Context, g *Globals) (*session, error) {
	l, err := resolveLayout(ctx, g)
	if err != nil {
		return nil, err
	}
	if !l.initialized() {
		return nil, withCode(exitNoDaemon, "%s is not set up for thrum: run `thrum init`, then `thrum daemon start`", l.Root)
	}
	// The socket (and the port file beside it) is trusted only in a
	// directory no other user can have planted it in.
	for _, d := range []string{l.Home, filepath.Dir(l.Socket), l.IDs} {
		if err := private.CheckDir(d); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
	}
	dctx, cancel := context.WithTimeout(ctx, g.CallTimeout)
	defer cancel()
	c, err := rpc.Dial(dctx, l.Socket, &rpc.ClientOptions{CallTimeout: g.CallTimeout})
	if err != nil {
		return nil, withCode(exitNoDaemon, "no daemon is running for %s: start it with `thrum daemon start`", l.Root)
	}
	g.daemon = l
	g.debugf("connected to %s", l.Socket)
	s := &session{g: g, l: l, c: c}
	s.checkBuild(ctx)
	return s, nil
}

// noAnswer turns a call to the daemon that timed out into what happened
// and what to do (exit code 3); other errors it returns as they are.
func noAnswer(g *Globals, err error) error {
	if g.daemon == nil || !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	l := g.daemon
	who := "the daemon"
	if pid := readPID(l.PIDFile); pid > 0 {
		who = fmt.Sprintf("the daemon (pid %d)", pid)
	}
	return withCode(exitNoDaemon, "%s did not answer on %s within %v: it may be stopped (SIGSTOP) or overloaded; see its log, %s, or restart it with `thrum daemon stop` and `thrum daemon start` (--call-timeout waits longer)",
		who, l.Socket, g.CallTimeout, l.LogFile)
}

// connectAs dials the daemon and binds the connection to the resolved
// identity (see identity.Resolve), so calls act as that agent.
func connectAs(ctx context.Context, g *Globals) (*session, error) {
	s, err := connect(ctx, g)
	if err != nil {
		return nil, err
	}
	if err := s.identify(ctx); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// selector is how the flags and the environment choose an identity.
func (g *Globals) selector() identity.Selector {
	return identity.Selector{
		Name:        g.AgentID,
		Role:        g.Role,
		Module:      g.Module,
		NameFromEnv: g.AgentID != "" && g.env("THRUM_NAME") == g.AgentID,
		RoleFromEnv: g.Role != "" && g.env("THRUM_ROLE") == g.Role,
	}
}

func (s *session) identify(ctx context.Context) error {
	sel := s.g.selector()
	f, src, err := identity.Resolve(s.l.IDs, sel)
	if err != nil && sel.Name != "" {
		return s.nameHint(ctx, sel.Name, err)
	}
	if err != nil {
		return err
	}
	s.id, s.source = f, src
	if _, err := s.c.Auth(ctx, &rpc.AuthParams{AgentID: f.AgentID, Token: f.Token}); err != nil {
		var re *rpc.Error
		if errors.As(err, &re) && (re.Code == rpc.CodeNotFound || re.Code == rpc.CodeUnauthenticated) {
			return withCode(exitNoIdentity, "identity %s is not known to this daemon (%s): run `thrum quickstart --name %s --role %s --module %s`",
				f.AgentID, re.Message, f.AgentID, f.Role, f.Module)
		}
		return err
	}
	s.g.debugf("acting as %s (%s)", f.AgentID, src)
	return nil
}

// nameHint is err, the failure to find the identity named name here,
// with the step that leads on: the underscore form of a name with a
// hyphen, the worktree the agent works in, or the nearest registered name.
func (s *session) nameHint(ctx context.Context, name string, err error) error {
	name = identity.NormalizeAgentID(name)
	if u := underscored(name); u != "" {
		return &hintedError{err, "did you mean " + u + "?"}
	}
	if elsewhere, _ := identityElsewhere(ctx, s.l, name); len(elsewhere) > 0 {
		return &hintedError{err, fmt.Sprintf("%s works in %s: run it there", name, worktreeOf(s.l, elsewhere[0]))}
	}
	var known []string // registered agents: this worktree's and the others'
	if r, err := s.c.ListAgents(ctx, &rpc.ListAgentsParams{}); err == nil {
		for _, a := range r.Agents {
			known = append(known, a.AgentID)
		}
	}
	if m := didYouMean(name, known); m != "" {
		return &hintedError{err, fmt.Sprintf("did you mean %s? (THRUM_NAME=%s)", m, m)}
	}
	return err
}

// worktreeOf is the worktree of an identity file (WORKTREE/.thrum/
// identities/NAME.json), relative to l's root when that is shorter.
func worktreeOf(l *layout, identityFile string) string {
	wt := filepath.Dir(filepath.Dir(filepath.Dir(identityFile)))
	if rel, err := filepath.Rel(l.Root, wt); err == nil && len(rel) < len(wt) {
		return rel
	}
	return wt
}
