package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/thrumhq/thrum/identity"
	"github.com/thrumhq/thrum/internal/thrumtest"
)

// Cleanup, the binary's half: the daemon is told every worktree's
// identity directory, including worktrees added after it started.
func TestWorktreeIdentityDirs(t *testing.T) {
	t.Parallel()
	repo := thrumtest.GitRepo(t)
	feat := filepath.Join(t.TempDir(), "feature")
	l, err := resolveLayout(context.Background(), &Globals{Repo: repo})
	if err != nil {
		t.Fatal(err)
	}
	list := worktreeIdentityDirs(l)
	thrumtest.Git(t, repo, "worktree", "add", "-q", "-b", "feature", feat)
	dirs, err := list(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	real := func(p string) string {
		if r, err := filepath.EvalSymlinks(filepath.Dir(filepath.Dir(p))); err == nil {
			return filepath.Join(r, ".thrum", "identities")
		}
		return p
	}
	for i := range dirs {
		dirs[i] = real(dirs[i])
	}
	for _, want := range []string{real(filepath.Join(repo, ".thrum", "identities")), real(filepath.Join(feat, ".thrum", "identities"))} {
		if !slices.Contains(dirs, want) {
			t.Errorf("identity dirs %v lack %s", dirs, want)
		}
	}
}

// The reported failure: `agent cleanup --force` deleted an agent of a
// feature worktree (its identity file lives there, not in the main
// worktree), which then was "not known to this daemon".
func TestCleanupKeepsFeatureWorktreeAgent(t *testing.T) {
	t.Parallel()
	thrumBin := thrumtest.Binary(t)
	repo := thrumtest.GitRepo(t)
	main := &thrumCLI{t: t, repo: repo, bin: thrumBin}
	main.ok("", "init")
	startDaemon(t, main)
	main.ok("", "quickstart", "--name", "alice", "--role", "implementer", "--module", "auth")
	fc := linkedWorktree(t, main)
	feat := fc.repo
	fc.ok("", "quickstart", "--name", "dan", "--role", "reviewer", "--module", "auth")

	var res struct {
		Orphans []map[string]any `json:"orphans"`
		Deleted []string         `json:"deleted"`
	}
	main.okJSON(&res, "", "agent", "cleanup", "--force")
	if len(res.Orphans) != 0 || len(res.Deleted) != 0 {
		t.Fatalf("cleanup found orphans among live agents: %+v", res)
	}
	r := fc.ok("", "agent", "whoami")
	contains(t, "whoami in the feature worktree after cleanup", r.stdout, "@dan")
	fc.ok("", "send", "still here", "--to", "@alice")
	if _, err := os.Stat(identity.Path(filepath.Join(feat, ".thrum", "identities"), "dan")); err != nil {
		t.Fatalf("dan's identity file: %v", err)
	}
}
