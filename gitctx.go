package thrum

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/thrumhq/thrum/eventlog"
)

// gitTimeout bounds each git command of a heartbeat.
const gitTimeout = 3 * time.Second

func gitOutput(ctx context.Context, dir string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, gitTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := cmd.Run(); err != nil {
		return "", err
	}
	return strings.TrimSpace(out.String()), nil
}

func lines(s string) []string {
	out := []string{}
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// gitContext extracts the work context of the worktree at dir: branch,
// commits not on the main branch, uncommitted files and all changed files.
// It returns ok=false if dir is not a git worktree.
func gitContext(ctx context.Context, dir string) (c eventlog.SessionContext, ok bool) {
	branch, err := gitOutput(ctx, dir, "rev-parse", "--abbrev-ref", "HEAD")
	if err != nil {
		return c, false
	}
	c.Branch, c.WorktreePath = branch, dir
	c.UnmergedCommits, c.UncommittedFiles, c.ChangedFiles = []eventlog.Commit{}, []string{}, []string{}
	base := ""
	for _, b := range []string{"main", "master", "origin/main", "origin/master"} {
		if _, err := gitOutput(ctx, dir, "rev-parse", "--verify", "--quiet", b); err == nil {
			base = b
			break
		}
	}
	changed := map[string]bool{}
	if base != "" && base != branch {
		if out, err := gitOutput(ctx, dir, "log", "--format=%H%x09%s", base+"..HEAD"); err == nil {
			for _, l := range lines(out) {
				h, s, _ := strings.Cut(l, "\t")
				c.UnmergedCommits = append(c.UnmergedCommits, eventlog.Commit{Hash: h, Subject: s})
			}
		}
		if out, err := gitOutput(ctx, dir, "diff", "--name-only", base+"...HEAD"); err == nil {
			for _, f := range lines(out) {
				changed[f] = true
			}
		}
	}
	if out, err := gitOutput(ctx, dir, "status", "--porcelain"); err == nil {
		for _, l := range lines(out) {
			if len(l) > 3 {
				f := strings.TrimSpace(l[2:])
				if _, after, found := strings.Cut(f, " -> "); found {
					f = after
				}
				c.UncommittedFiles = append(c.UncommittedFiles, f)
				changed[f] = true
			}
		}
	}
	for f := range changed {
		c.ChangedFiles = append(c.ChangedFiles, f)
	}
	sortStrings(c.ChangedFiles)
	return c, true
}

func decodeJSONInto(s string, v any) {
	if s != "" {
		_ = json.Unmarshal([]byte(s), v) // written by the projection from typed values
	}
}

// worktreeCache is the list of the node's own repository's worktrees, the
// only directories the node runs git in: a path a caller names (a session's
// worktree ref) is used only if it is one of them, so no caller can make
// the daemon run git, and the programs a repository's config may name,
// anywhere else.
type worktreeCache struct {
	mu    sync.Mutex
	at    time.Time
	paths map[string]bool
}

// worktreeRefresh is how often the list may be re-read when a path is
// missing from it (a worktree added since).
const worktreeRefresh = time.Second

// ownWorktree returns dir, cleaned, if it is a worktree of the node's
// repository (Options.RepoDir) as `git worktree list` names it.
func (n *Node) ownWorktree(ctx context.Context, dir string) (string, bool) {
	if dir == "" || !filepath.IsAbs(dir) {
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
	out, err := gitOutput(ctx, n.opts.RepoDir, "worktree", "list", "--porcelain")
	if err != nil {
		c.paths = nil
		return "", false
	}
	c.paths = map[string]bool{}
	for _, l := range lines(out) {
		if p, ok := strings.CutPrefix(l, "worktree "); ok {
			c.paths[filepath.Clean(p)] = true
			if real, err := filepath.EvalSymlinks(p); err == nil {
				c.paths[real] = true
			}
		}
	}
	return dir, c.paths[dir]
}
