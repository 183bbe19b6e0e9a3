package thrum

import (
	"context"
	"encoding/json"
	"path/filepath"
	"sync"
	"time"

	"github.com/thrumhq/thrum/eventlog"
)

// GitRepo tells a node about the git repository it serves: its
// worktrees, what one of them is doing, and who the user is. The node
// never runs git itself; the reference binary supplies an implementation
// that does (internal/gitwork). The node asks Context only about the
// worktrees Worktrees lists, so a worktree path a caller names can never
// make it look anywhere else. Methods must return when ctx ends.
type GitRepo interface {
	// Worktrees lists the worktrees of the node's repository.
	Worktrees(ctx context.Context) ([]string, error)
	// Context extracts the work context of one of them: branch, commits
	// not on the main branch, uncommitted and changed files. ok is false
	// if there is none. The node fills the session and agent.
	Context(ctx context.Context, worktree string) (c eventlog.SessionContext, ok bool)
	// User returns the user's name and email ("" when unknown).
	User(ctx context.Context) (name, email string)
}

// worktreeCache is the list of the node's own repository's worktrees, the
// only directories the node asks the GitRepo about: a path a caller
// names (a session's worktree ref) is used only if it is one of them.
type worktreeCache struct {
	mu    sync.Mutex
	at    time.Time
	paths map[string]bool
}

// worktreeRefresh is how often the list may be re-read when a path is
// missing from it (a worktree added since).
const worktreeRefresh = time.Second

// ownWorktree returns dir, cleaned, if it is a worktree of the node's
// repository as Options.GitRepo lists them.
func (n *Node) ownWorktree(ctx context.Context, dir string) (string, bool) {
	if n.opts.GitRepo == nil || dir == "" || !filepath.IsAbs(dir) {
		return "", false
	}
	dir = filepath.Clean(dir)
	c := &n.worktrees
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.paths[dir] {
		return dir, true
	}
	if time.Since(c.at) < worktreeRefresh {
		return "", false
	}
	c.at = time.Now()
	list, err := n.opts.GitRepo.Worktrees(ctx)
	if err != nil {
		c.paths = nil
		return "", false
	}
	c.paths = map[string]bool{}
	for _, p := range list {
		c.paths[filepath.Clean(p)] = true
		if real, err := filepath.EvalSymlinks(p); err == nil {
			c.paths[real] = true
		}
	}
	return dir, c.paths[dir]
}

// workContext returns the work context of the worktree dir if it is one
// of the node's repository.
func (n *Node) workContext(ctx context.Context, dir string) (eventlog.SessionContext, bool) {
	wt, own := n.ownWorktree(ctx, dir)
	if !own {
		return eventlog.SessionContext{}, false
	}
	return n.opts.GitRepo.Context(ctx, wt)
}

func decodeJSONInto(s string, v any) {
	if s != "" {
		_ = json.Unmarshal([]byte(s), v) // written by the projection from typed values
	}
}
