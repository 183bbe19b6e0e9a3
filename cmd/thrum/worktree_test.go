package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/thrumhq/thrum/internal/thrumtest"
)

// TestFeatureWorktreeSharesDaemon: a linked worktree of the repository
// reaches the main worktree's daemon (one log, one projection) through
// .thrum/redirect, and keeps identities of its own.
func TestFeatureWorktreeSharesDaemon(t *testing.T) {
	t.Parallel()
	thrumBin := thrumtest.Binary(t)
	repo := thrumtest.GitRepo(t)
	main := &thrumCLI{t: t, repo: repo, bin: thrumBin}
	main.ok("", "init")
	startDaemon(t, main)
	main.ok("", "quickstart", "--name", "alice", "--role", "implementer", "--module", "auth")

	feat := filepath.Join(t.TempDir(), "feature")
	thrumtest.Git(t, repo, "worktree", "add", "-q", "-b", "feature", feat)
	fc := &thrumCLI{t: t, repo: feat, bin: thrumBin}
	r := fc.ok("", "init")
	contains(t, "init in the feature worktree", r.stdout, "redirect (shares "+filepath.Join(repo, ".thrum")+")")
	b, err := os.ReadFile(filepath.Join(feat, ".thrum", "redirect"))
	if err != nil || strings.TrimSpace(string(b)) != filepath.Join(repo, ".thrum") {
		t.Fatalf("redirect file: %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(feat, ".thrum", "var")); !os.IsNotExist(err) {
		t.Errorf("the feature worktree got runtime state of its own: %v", err)
	}

	// No second daemon: the feature worktree talks to the main one.
	fc.ok("", "quickstart", "--name", "bob", "--role", "reviewer", "--module", "auth")
	fc.ok("", "send", "from the feature branch", "--to", "@alice")
	r = main.ok("alice", "inbox", "--unread")
	contains(t, "alice's inbox", r.stdout, "from the feature branch", "@bob")

	// Identities stay per worktree.
	if _, err := os.Stat(filepath.Join(feat, ".thrum", "identities", "bob.json")); err != nil {
		t.Errorf("bob's identity is not in the feature worktree: %v", err)
	}
	if _, err := os.Stat(filepath.Join(repo, ".thrum", "identities", "bob.json")); !os.IsNotExist(err) {
		t.Errorf("bob's identity leaked into the main worktree: %v", err)
	}
	r = fc.ok("", "agent", "whoami")
	contains(t, "whoami in the feature worktree", r.stdout, "@bob")
	if s := thrumtest.Git(t, feat, "status", "--porcelain"); s != "" {
		t.Errorf("feature worktree is dirty: %q", s)
	}
}
