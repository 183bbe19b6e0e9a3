package main

import (
	"context"
	"path/filepath"

	"github.com/thrumhq/thrum/internal/gitwork"
)

// worktreeIdentityDirs returns a function listing every directory where
// identity files of this repository's agents live: this layout's own,
// and .thrum/identities in each worktree `git worktree list` names. A
// feature worktree shares the main worktree's daemon (see .thrum/redirect)
// but keeps its identities, so agent.cleanup must look in all of them; it
// is asked on each call, so worktrees added while the daemon runs count.
// An error (git failing) makes cleanup refuse rather than guess.
func worktreeIdentityDirs(l *layout) func(context.Context) ([]string, error) {
	repo := gitwork.New(l.Root)
	return func(ctx context.Context) ([]string, error) {
		dirs := []string{l.IDs}
		if !l.Git {
			return dirs, nil
		}
		wts, err := repo.Worktrees(ctx)
		if err != nil {
			return nil, err
		}
		for _, wt := range wts {
			dirs = append(dirs, filepath.Join(wt, ".thrum", "identities"))
		}
		return dirs, nil
	}
}
