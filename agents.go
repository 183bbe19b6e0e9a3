package thrum

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/identity"
	"github.com/thrumhq/thrum/rpc"
	"github.com/thrumhq/thrum/store"
)

// callerID returns the caller's agent ID, or an error that says how to
// identify.
func (n *Node) callerID(ctx context.Context, what string) (string, error) {
	c, ok := CallerFrom(ctx)
	if !ok {
		return "", rpc.ReasonErrorf(rpc.CodeUnauthenticated, rpc.ReasonNoCaller, "%s needs the calling agent: pass caller_agent_id or call auth on the connection", what)
	}
	return identity.NormalizeAgentID(c.AgentID), nil
}

// registeredCaller returns the caller's ID if it names a registered agent
// or user.
func (n *Node) registeredCaller(ctx context.Context, what string) (string, error) {
	id, err := n.callerID(ctx, what)
	if err != nil {
		return "", err
	}
	if _, ok := n.dirc.Agent(id); !ok {
		return "", notRegistered("%s: agent %q is not registered", what, id)
	}
	return id, nil
}

// callerSession returns the caller and its session: the one pinned in the
// caller, else the agent's most recent active session.
func (n *Node) callerSession(ctx context.Context) (string, *store.Session, error) {
	id, err := n.callerID(ctx, "this call")
	if err != nil {
		return "", nil, err
	}
	c, _ := CallerFrom(ctx)
	if c.SessionID != "" {
		s, err := n.store.Session(ctx, c.SessionID)
		if err == nil && s.AgentID == id && s.EndedAt == "" {
			return id, s, nil
		}
	}
	s, err := n.activeSession(ctx, id)
	if err != nil {
		return "", nil, err
	}
	return id, s, nil
}

// activeSession returns an agent's most recent active session, from a
// cache that every commit touching sessions invalidates.
func (n *Node) activeSession(ctx context.Context, id string) (*store.Session, error) {
	n.sessMu.Lock()
	s, ok := n.sessCache[id]
	gen := n.sessGen
	n.sessMu.Unlock()
	if ok {
		return s, nil
	}
	ss, err := n.store.Sessions(ctx, id, true)
	if err != nil {
		return nil, internal("find session", err)
	}
	if len(ss) == 0 {
		return nil, rpc.ReasonErrorf(rpc.CodeConflict, rpc.ReasonNoSession, "no active session found for %s: start one with session.start", id)
	}
	n.sessMu.Lock()
	if n.sessGen == gen { // no session changed while we read: safe to keep
		n.sessCache[id] = &ss[0]
	}
	n.sessMu.Unlock()
	return &ss[0], nil
}

// RegisterAgent registers an agent, or updates it when the same agent
// returns (same role and module). Role and module are required, and what
// names allow is said on rpc.RegisterAgentParams. A different agent holding the ID is a
// conflict result unless force is set; re_register with a different role
// or module is a conflict error, since re_register claims to be the same
// agent. Successful registrations issue a token, the agent's secret for
// authenticating.
func (n *Node) RegisterAgent(ctx context.Context, p *rpc.RegisterAgentParams) (*rpc.RegisterAgentResult, error) {
	if err := identity.ValidateRole("role", p.Role); err != nil {
		return nil, invalid("%v", err)
	}
	if err := identity.ValidateRole("module", p.Module); err != nil {
		return nil, invalid("%v", err)
	}
	if p.Name != "" {
		if err := identity.ValidateName(p.Name); err != nil {
			return nil, invalid("%v", err)
		}
		if p.Name == p.Role {
			return nil, invalid("agent name %q equals its role: choose a name that differs from the role", p.Name)
		}
	}
	id := identity.AgentID(n.opts.RepoID, p.Role, p.Module, p.Name)
	n.ctlMu.Lock()
	defer n.ctlMu.Unlock()
	if n.dirc.HasGroup(id) {
		return nil, conflict("agent name %q is taken by a group: choose another name", id)
	}
	existing, err := n.store.Agent(ctx, id)
	if err != nil && !isNotFound(err) {
		return nil, internal("register agent", err)
	}
	status := "registered"
	typ := eventlog.TypeAgentRegister
	revoke := false
	if existing != nil {
		if existing.Kind != rpc.KindAgent {
			return nil, conflict("%q is a user, not an agent", id)
		}
		same := existing.Role == p.Role && existing.Module == p.Module
		if !same && p.ReRegister && !p.Force {
			// re_register says "the same agent returning"; a different
			// role or module says otherwise, and only force may take a
			// name over from another agent.
			return nil, conflict("cannot re-register %s as %s/%s: it is registered as %s/%s, so this is a different agent; re-register with its role and module, or use force to take the name over",
				id, p.Role, p.Module, existing.Role, existing.Module)
		}
		if !same && !p.Force {
			return &rpc.RegisterAgentResult{AgentID: id, Status: "conflict", Conflict: &rpc.AgentConflict{
				ExistingAgentID: existing.AgentID,
				RegisteredAt:    existing.RegisteredAt,
				LastSeenAt:      existing.LastSeenAt,
			}}, nil
		}
		status, typ = "updated", eventlog.TypeAgentUpdate
		revoke = !same && p.Force // a different agent takes the name over
	}
	token := identity.NewToken()
	evs, err := n.registration(ctx, typ, eventlog.AgentRegister{
		AgentID: id, Kind: rpc.KindAgent, Name: p.Name, Role: p.Role, Module: p.Module,
		Display: p.Display, RepoID: n.opts.RepoID,
	}, existing != nil)
	if err != nil {
		return nil, err
	}
	if err := n.append(ctx, append(evs, credential(id, identity.HashToken(token), revoke))...); err != nil {
		return nil, err
	}
	return &rpc.RegisterAgentResult{AgentID: id, Status: status, Token: token}, nil
}

// credential is the event that makes a token (by its hash) authenticate
// as id on this machine (and, with revoke, no earlier token): it goes to
// the local shard, which never syncs.
func credential(id, tokenHash string, revoke bool) *eventlog.Event {
	return &eventlog.Event{Type: eventlog.TypeCredentialAdd, Shard: eventlog.LocalShard, Payload: eventlog.Credential{
		AgentID: id, TokenHash: tokenHash, RevokeTokens: revoke,
	}}
}

// Authenticate returns the identity a token belongs to: one registered
// on this machine (credentials never sync).
func (n *Node) Authenticate(ctx context.Context, token string) (string, error) {
	if token == "" {
		return "", unauthenticated("token is required")
	}
	id, err := n.store.AgentByToken(ctx, identity.HashToken(token))
	if isNotFound(err) {
		return "", rpc.ReasonErrorf(rpc.CodeUnauthenticated, rpc.ReasonInvalidToken, "invalid token: register the agent again to get a new one")
	}
	if err != nil {
		return "", internal("authenticate", err)
	}
	return id, nil
}

func (n *Node) agentInfo(a *store.Agent) rpc.AgentInfo {
	return rpc.AgentInfo{
		AgentID: a.AgentID, Kind: a.Kind, Name: a.Name, Role: a.Role, Module: a.Module,
		Display: a.Display, RegisteredAt: a.RegisteredAt, LastSeenAt: a.LastSeenAt,
		Status: n.status(a.LastSeenAt), Local: a.Local,
	}
}

// status is "active" when lastSeen is within DefaultActiveWindow.
func (n *Node) status(lastSeen string) string {
	t, err := eventlog.ParseTime(lastSeen)
	if err != nil || n.now().Sub(t) >= DefaultActiveWindow {
		return "offline"
	}
	return "active"
}

// ListAgents lists agents and users, optionally by role and module.
func (n *Node) ListAgents(ctx context.Context, p *rpc.ListAgentsParams) (*rpc.ListAgentsResult, error) {
	agents, err := n.store.Agents(ctx, p.Role, p.Module)
	if err != nil {
		return nil, internal("list agents", err)
	}
	out := &rpc.ListAgentsResult{Agents: make([]rpc.AgentInfo, 0, len(agents))}
	for i := range agents {
		out.Agents = append(out.Agents, n.agentInfo(&agents[i]))
	}
	return out, nil
}

// Whoami reports the caller and its active session.
func (n *Node) Whoami(ctx context.Context, _ *rpc.WhoamiParams) (*rpc.WhoamiResult, error) {
	c, ok := CallerFrom(ctx)
	if !ok {
		return nil, rpc.ReasonErrorf(rpc.CodeUnauthenticated, rpc.ReasonNoCaller, "resolve identity: no agent identity: pass caller_agent_id or call auth on the connection")
	}
	id := identity.NormalizeAgentID(c.AgentID)
	a, err := n.store.Agent(ctx, id)
	if isNotFound(err) {
		return nil, notRegistered("resolve identity: agent %q is not registered", id)
	}
	if err != nil {
		return nil, internal("whoami", err)
	}
	src := c.Source
	if src == "" {
		src = string(identity.SourceIdentityFile)
	}
	out := &rpc.WhoamiResult{AgentID: a.AgentID, Role: a.Role, Module: a.Module, Display: a.Display, Source: src}
	if _, s, err := n.callerSession(ctx); err == nil {
		out.SessionID, out.SessionStart = s.SessionID, s.StartedAt
	}
	return out, nil
}

// ListContext lists the work contexts of active sessions.
func (n *Node) ListContext(ctx context.Context, p *rpc.ListContextParams) (*rpc.ListContextResult, error) {
	wcs, err := n.store.SessionWork(ctx, identity.NormalizeAgentID(p.AgentID), p.Branch, p.File)
	if err != nil {
		return nil, internal("list contexts", err)
	}
	out := &rpc.ListContextResult{Contexts: make([]rpc.WorkContext, 0, len(wcs))}
	for _, w := range wcs {
		c := rpc.WorkContext{
			SessionID: w.SessionID, AgentID: w.AgentID, Branch: w.Branch, WorktreePath: w.WorktreePath,
			GitUpdatedAt: w.GitUpdatedAt, CurrentTask: w.CurrentTask, TaskUpdatedAt: w.TaskUpdatedAt,
			Intent: w.Intent, IntentUpdatedAt: w.IntentUpdatedAt,
			UnmergedCommits: []rpc.CommitSummary{}, UncommittedFiles: []string{}, ChangedFiles: []string{},
		}
		decodeJSONInto(w.UnmergedCommits, &c.UnmergedCommits)
		decodeJSONInto(w.UncommittedFiles, &c.UncommittedFiles)
		decodeJSONInto(w.ChangedFiles, &c.ChangedFiles)
		out.Contexts = append(out.Contexts, c)
	}
	return out, nil
}

// DeleteAgent removes an agent: an agent.cleanup event, and its identity
// file from each identity directory (Options.IdentityDir and
// IdentityDirs). Its messages stay in the log and the projection: the
// log is append-only, and a rebuild must give the same projection.
func (n *Node) DeleteAgent(ctx context.Context, p *rpc.DeleteAgentParams) (*rpc.DeleteAgentResult, error) {
	if p.Name == "" {
		return nil, invalid("agent name is required")
	}
	name := identity.NormalizeAgentID(p.Name)
	if err := identity.ValidateRole("agent name", name); err != nil {
		return nil, invalid("invalid agent name: %v", err)
	}
	n.ctlMu.Lock()
	defer n.ctlMu.Unlock()
	a, err := n.store.Agent(ctx, name)
	if isNotFound(err) || err == nil && a.Kind != rpc.KindAgent {
		return nil, notFound("agent not found: %s", name)
	}
	if err != nil {
		return nil, internal("delete agent", err)
	}
	if err := n.deleteAgents(ctx, []string{name}, "deleted"); err != nil {
		return nil, err
	}
	return &rpc.DeleteAgentResult{AgentID: name, Deleted: true, Message: fmt.Sprintf("Agent %s deleted", name)}, nil
}

// deleteAgents appends agent.cleanup events (ending their sessions) and
// removes identity files. Called with ctlMu held.
func (n *Node) deleteAgents(ctx context.Context, ids []string, reason string) error {
	var evs []*eventlog.Event
	for _, id := range ids {
		ss, err := n.store.Sessions(ctx, id, true)
		if err != nil {
			return internal("delete agent", err)
		}
		for _, s := range ss {
			evs = append(evs, &eventlog.Event{Type: eventlog.TypeSessionEnd, Payload: eventlog.SessionEnd{
				SessionID: s.SessionID, AgentID: id, Reason: "superseded"}})
		}
		evs = append(evs, &eventlog.Event{Type: eventlog.TypeAgentCleanup, Payload: eventlog.AgentCleanup{AgentID: id, Reason: reason}})
	}
	if err := n.append(ctx, evs...); err != nil {
		return err
	}
	dirs, err := n.identityDirs(ctx)
	if err != nil && n.opts.Logger != nil {
		n.opts.Logger.Warn("thrum: list identity directories; removing identity files from IdentityDir only", "err", err)
	}
	for _, dir := range dirs {
		for _, id := range ids {
			if err := os.Remove(identity.Path(dir, id)); err != nil && !errors.Is(err, os.ErrNotExist) && n.opts.Logger != nil {
				n.opts.Logger.Warn("thrum: remove identity file", "agent", id, "err", err)
			}
		}
	}
	return nil
}

// identityDirs returns Options.IdentityDir and what Options.IdentityDirs
// lists, without duplicates. On an error it still returns IdentityDir.
func (n *Node) identityDirs(ctx context.Context) ([]string, error) {
	var dirs []string
	seen := map[string]bool{}
	add := func(d string) {
		if d = filepath.Clean(d); d != "." && !seen[d] {
			seen[d] = true
			dirs = append(dirs, d)
		}
	}
	if n.opts.IdentityDir != "" {
		add(n.opts.IdentityDir)
	}
	if n.opts.IdentityDirs == nil {
		return dirs, nil
	}
	more, err := n.opts.IdentityDirs(ctx)
	if err != nil {
		return dirs, err
	}
	for _, d := range more {
		if d != "" {
			add(d)
		}
	}
	return dirs, nil
}

// identityFile is an identity file found in an identity directory.
type identityFile struct {
	name string         // the agent its file name says
	file *identity.File // nil when the file does not parse
}

// readIdentityFiles returns the identity files in dirs.
func readIdentityFiles(dirs []string) ([]identityFile, error) {
	var out []identityFile
	for _, dir := range dirs {
		entries, err := os.ReadDir(dir)
		if errors.Is(err, os.ErrNotExist) {
			continue // a worktree without thrum identities
		}
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			name := e.Name()
			if e.IsDir() || !strings.HasSuffix(name, ".json") || strings.HasPrefix(name, ".") {
				continue
			}
			f, err := identity.Load(filepath.Join(dir, name))
			if err != nil {
				f = nil
			}
			out = append(out, identityFile{name: strings.TrimSuffix(name, ".json"), file: f})
		}
	}
	return out, nil
}

// identityHolders returns the agents that have an identity file in one
// of dirs: each file's agent_id, and its file name, so that a file that
// does not parse still protects the agent it is named after.
func identityHolders(dirs []string) (map[string]bool, error) {
	files, err := readIdentityFiles(dirs)
	if err != nil {
		return nil, err
	}
	held := map[string]bool{}
	for _, f := range files {
		held[identity.NormalizeAgentID(f.name)] = true
		if f.file != nil {
			held[identity.NormalizeAgentID(f.file.AgentID)] = true
		}
	}
	return held, nil
}

// CleanupAgents finds orphaned agents and deletes them when force is set
// and dry_run is not. An agent is never an orphan while it is active, or
// while an identity file of it exists in any identity directory (see
// Options.IdentityDir and IdentityDirs). Otherwise it is an orphan when
// the worktree its sessions recorded is gone, or it has not been seen for
// threshold days. A missing identity file alone does not make an orphan:
// agents registered over RPC (an MCP client, a web UI, a program
// embedding thrum) never had one, and the node cannot tell them from an
// agent whose file was lost. Each orphan's Reason says why.
func (n *Node) CleanupAgents(ctx context.Context, p *rpc.CleanupAgentsParams) (*rpc.CleanupAgentsResult, error) {
	if p.Threshold < 0 {
		return nil, invalid("threshold must be a number of days, 0 or more")
	}
	days := p.Threshold
	if days == 0 {
		days = DefaultCleanupDays
	}
	dirs, err := n.identityDirs(ctx)
	if err != nil {
		return nil, internal("cleanup: list identity directories", err)
	}
	held, err := identityHolders(dirs)
	if err != nil {
		return nil, internal("cleanup: read identity files", err)
	}
	n.ctlMu.Lock()
	defer n.ctlMu.Unlock()
	agents, err := n.store.Agents(ctx, "", "")
	if err != nil {
		return nil, internal("cleanup", err)
	}
	out := &rpc.CleanupAgentsResult{Orphans: []rpc.OrphanAgent{}, Deleted: []string{}, DryRun: p.DryRun || !p.Force}
	now := n.now()
	for _, a := range agents {
		if a.Kind != rpc.KindAgent || held[a.AgentID] || n.status(a.LastSeenAt) == "active" {
			continue
		}
		o := rpc.OrphanAgent{AgentID: a.AgentID, Role: a.Role, Module: a.Module, LastSeenAt: a.LastSeenAt}
		if t, err := eventlog.ParseTime(a.LastSeenAt); err == nil {
			o.DaysSinceLastSeen = int(now.Sub(t) / (24 * time.Hour))
		}
		wt := ""
		if wcs, err := n.store.SessionWork(ctx, a.AgentID, "", ""); err == nil && len(wcs) > 0 {
			wt = wcs[0].WorktreePath
			o.Worktree, o.Branch = filepath.Base(wt), wcs[0].Branch
			if wt != "" {
				_, err := os.Stat(wt)
				o.WorktreeMissing = errors.Is(err, os.ErrNotExist)
			}
		}
		stale := o.DaysSinceLastSeen >= days
		if !stale && !o.WorktreeMissing {
			continue
		}
		var why []string
		if len(dirs) > 0 {
			why = append(why, "no identity file in any worktree")
		}
		if o.WorktreeMissing {
			why = append(why, fmt.Sprintf("worktree %s is gone", wt))
		}
		why = append(why, fmt.Sprintf("days idle: %d", o.DaysSinceLastSeen))
		o.Reason = strings.Join(why, "; ")
		if o.MessageCount, err = n.store.MessageCount(ctx, a.AgentID); err != nil {
			return nil, internal("cleanup", err)
		}
		out.Orphans = append(out.Orphans, o)
	}
	if !out.DryRun && len(out.Orphans) > 0 {
		ids := make([]string, len(out.Orphans))
		for i, o := range out.Orphans {
			ids[i] = o.AgentID
		}
		if err := n.deleteAgents(ctx, ids, "cleanup"); err != nil {
			return nil, err
		}
		out.Deleted = ids
	}
	switch {
	case len(out.Orphans) == 0:
		out.Message = "No orphaned agents found"
	case out.DryRun:
		out.Message = fmt.Sprintf("Orphaned agents found: %d; run with force to delete them", len(out.Orphans))
	default:
		out.Message = fmt.Sprintf("Orphaned agents deleted: %d", len(out.Deleted))
	}
	return out, nil
}

var usernameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,32}$`)

// RegisterUser registers a human user (idempotently) and issues a token.
// The daemon offers it over WebSocket only.
func (n *Node) RegisterUser(ctx context.Context, p *rpc.RegisterUserParams) (*rpc.RegisterUserResult, error) {
	if p.Username == "" {
		return nil, invalid("username is required")
	}
	if strings.HasPrefix(p.Username, "agent:") {
		return nil, invalid("username cannot start with 'agent:' prefix")
	}
	if !usernameRE.MatchString(p.Username) {
		return nil, invalid("invalid username format: use 1-32 of a-z, A-Z, 0-9, _ and -")
	}
	id := "user:" + p.Username
	n.ctlMu.Lock()
	defer n.ctlMu.Unlock()
	existing, err := n.store.Agent(ctx, id)
	if err != nil && !isNotFound(err) {
		return nil, internal("register user", err)
	}
	status, typ, display := "registered", eventlog.TypeAgentRegister, p.Display
	if existing != nil {
		status, typ = "existing", eventlog.TypeAgentUpdate
		if display == "" {
			display = existing.Display
		}
	}
	token := identity.NewToken()
	evs, err := n.registration(ctx, typ, eventlog.AgentRegister{
		AgentID: id, Kind: rpc.KindUser, Name: p.Username, Display: display,
	}, existing != nil)
	if err != nil {
		return nil, err
	}
	if err := n.append(ctx, append(evs, credential(id, identity.HashToken(token), false))...); err != nil {
		return nil, err
	}
	return &rpc.RegisterUserResult{UserID: id, Username: p.Username, DisplayName: display, Token: token, Status: status}, nil
}

// IdentifyUser reads the user's name and email from Options.GitRepo
// (git config, for the reference binary).
func (n *Node) IdentifyUser(ctx context.Context, _ *rpc.IdentifyUserParams) (*rpc.IdentifyUserResult, error) {
	var name, email string
	if n.opts.GitRepo != nil {
		name, email = n.opts.GitRepo.User(ctx)
	}
	if name == "" {
		return nil, notFound("git config user.name not set: run git config user.name \"Your Name\"")
	}
	username := strings.ToLower(strings.Join(strings.Fields(name), "-"))
	username = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '-' {
			return r
		}
		return -1
	}, username)
	return &rpc.IdentifyUserResult{Username: username, Email: email, Display: name}, nil
}
