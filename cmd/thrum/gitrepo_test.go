package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/thrumhq/thrum/internal/thrumtest"
)

// repoState is everything of a user's repository that thrum must leave
// alone.
type repoState struct {
	Head, Branch, Status, Diff, Cached, Index, Stash, Untracked string
	Refs, Worktrees, Ignored                                    []string
	Files                                                       map[string]string // path → mode and sha256, outside .git and .thrum
}

func snapshot(t *testing.T, repo string) repoState {
	t.Helper()
	s := repoState{
		Head:      thrumtest.Git(t, repo, "rev-parse", "HEAD"),
		Branch:    thrumtest.Git(t, repo, "symbolic-ref", "HEAD"),
		Status:    thrumtest.Git(t, repo, "status", "--porcelain=v1", "--untracked-files=all"),
		Diff:      thrumtest.Git(t, repo, "diff"),
		Cached:    thrumtest.Git(t, repo, "diff", "--cached"),
		Index:     thrumtest.Git(t, repo, "ls-files", "-s"),
		Stash:     thrumtest.Git(t, repo, "stash", "list"),
		Untracked: thrumtest.Git(t, repo, "ls-files", "--others", "--exclude-standard"),
		Refs:      lines(thrumtest.Git(t, repo, "for-each-ref", "--format=%(refname) %(objectname)")),
		Worktrees: lines(thrumtest.Git(t, repo, "worktree", "list", "--porcelain")),
		Ignored:   lines(thrumtest.Git(t, repo, "status", "--porcelain=v1", "--ignored")),
		Files:     map[string]string{},
	}
	err := filepath.WalkDir(repo, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repo, path)
		if d.IsDir() && (rel == ".git" || rel == ".thrum") {
			return filepath.SkipDir
		}
		if d.IsDir() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		s.Files[rel] = fi.Mode().String() + " " + hex.EncodeToString(sum[:])
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func lines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// TestGitRepoUntouched checks that init and a day of messaging leave the
// user's repository as it was: working tree, index, staged and unstaged
// changes, untracked files, HEAD, branch, stash and refs. Only the a-sync
// branch, its worktree under .git/thrum-sync/ and the .thrum/ exclude are
// added. It runs the built binary, daemon included.
func TestGitRepoUntouched(t *testing.T) {
	t.Parallel()
	repo := thrumtest.GitRepo(t)
	write := func(name, content string, mode os.FileMode) {
		p := filepath.Join(repo, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	// A repository with some history and work in progress of every kind.
	write("README.md", "# project\n", 0o644)
	write("src/auth/login.go", "package auth\n", 0o644)
	write("scripts/build.sh", "#!/bin/sh\necho build\n", 0o755)
	write(".gitignore", "*.log\n", 0o644)
	thrumtest.Git(t, repo, "add", ".")
	thrumtest.Git(t, repo, "commit", "-q", "-m", "add files")
	write("src/auth/login.go", "package auth\n\n// stashed\n", 0o644)
	thrumtest.Git(t, repo, "stash", "-q")
	thrumtest.Git(t, repo, "branch", "feature")
	write("README.md", "# project\n\nunstaged edit\n", 0o644)
	write("src/auth/token.go", "package auth\n// staged\n", 0o644)
	thrumtest.Git(t, repo, "add", "src/auth/token.go")
	write("src/auth/token.go", "package auth\n// staged, then edited\n", 0o644)
	write("notes.txt", "untracked\n", 0o644)
	write("build.log", "ignored\n", 0o644)

	before := snapshot(t, repo)
	if before.Cached == "" || before.Diff == "" || before.Untracked == "" || before.Stash == "" {
		t.Fatalf("the fixture lacks work in progress: %+v", before)
	}

	// The real binary, as a user runs it: this test is about what thrum
	// does to the repository, and the race-instrumented daemon and
	// in-process CLI (TestEndToEndRun covers them) would make its ~330
	// commands several times slower.
	thrumBin := thrumtest.Binary(t)
	c := &thrumCLI{t: t, repo: repo, bin: thrumBin}
	c.ok("", "init")
	c.ok("", "init") // twice: the exclude line is added once
	startDaemon(t, c)
	agents := []struct{ name, role, module string }{
		{"alice", "implementer", "auth"}, {"bob", "reviewer", "auth"}, {"carol", "tester", "ui"},
	}
	for _, a := range agents {
		c.ok("", "quickstart", "--name", a.name, "--role", a.role, "--module", a.module)
	}

	// A day of messaging.
	ops, sent, deleted := 0, 0, 0
	do := func(name string, args ...string) result {
		t.Helper()
		ops++
		return c.ok(name, args...)
	}
	send := func(name string, args ...string) string {
		t.Helper()
		sent++
		return idAfter(t, do(name, append([]string{"send"}, args...)...).stdout, "> Message sent: ")
	}
	do("alice", "group", "create", "backend", "--description", "Backend people")
	do("alice", "group", "add", "backend", "--role", "implementer")
	for i := 0; i < 45; i++ {
		m := send("alice", fmt.Sprintf("status %d: working on login", i), "--to", "@reviewer", "--scope", "module:auth", "--ref", fmt.Sprintf("issue:beads-%d", i))
		do("bob", "inbox", "--unread", "--page-size", "5")
		r := do("bob", "reply", m, fmt.Sprintf("ack %d", i))
		rep := idAfter(t, r.stdout, "> Reply sent: ")
		sent++
		if i%2 == 0 {
			do("alice", "inbox", "--mentions")
			do("carol", "inbox", "--page", "1")
		}
		if i%3 == 0 {
			send("carol", fmt.Sprintf("UI build %d is green ✓", i), "--to", "@everyone", "--priority", "low")
			do("alice", "reply", rep, "thanks")
			sent++
		}
		if i%4 == 0 {
			do("alice", "message", "edit", m, fmt.Sprintf("status %d: login done", i))
			do("bob", "message", "get", m)
		}
		if i%5 == 0 {
			do("bob", "message", "read", "--all")
			for _, a := range agents {
				do(a.name, "session", "heartbeat", "--add-scope", "module:"+a.module)
			}
			do("carol", "session", "intent", fmt.Sprintf("testing build %d", i))
		}
		if i%7 == 0 {
			x := send("bob", "to be deleted", "--to", "@backend")
			do("bob", "message", "delete", x, "--force")
			deleted++
		}
		if i%9 == 0 {
			do("alice", "group", "add", "backend", "@carol")
			do("alice", "group", "members", "backend", "--expand")
			do("alice", "group", "remove", "backend", "@carol")
		}
		if i%15 == 14 {
			for _, a := range agents {
				do(a.name, "session", "end")
				do(a.name, "session", "start", "--scope", "module:"+a.module)
			}
		}
		if i == 20 {
			do("bob", "thread", "create", "Release", "--to", "@implementer", "--message", "ship it?")
			sent++
		}
	}
	var inbox map[string]any
	c.okJSON(&inbox, "carol", "inbox", "--all", "--page-size", "1")
	if got := int(num(inbox, "total")); got != sent-deleted {
		t.Errorf("inbox total = %d, want %d sent - %d deleted", got, sent, deleted)
	}
	if ops < 250 {
		t.Errorf("only %d operations: not a day of messaging", ops)
	}
	t.Logf("%d operations, %d messages", ops, sent)

	after := snapshot(t, repo)

	// What thrum adds: the a-sync branch and its worktree, .thrum/ ignored.
	var syncRef string
	var refs []string
	for _, r := range after.Refs {
		if strings.HasPrefix(r, "refs/heads/a-sync ") {
			syncRef = r
			continue
		}
		refs = append(refs, r)
	}
	if syncRef == "" {
		t.Errorf("no a-sync branch after init: %v", after.Refs)
	}
	after.Refs = refs
	syncDir := filepath.Join(repo, ".git", "thrum-sync", "a-sync")
	wt := strings.Join(after.Worktrees, "\n")
	if !strings.Contains(wt, "worktree "+syncDir+"\n") || !strings.Contains(wt, "branch refs/heads/a-sync") {
		t.Errorf("no a-sync worktree at %s:\n%s", syncDir, wt)
	}
	if strings.Join(before.Worktrees, "\n") != strings.Join(after.Worktrees[:len(before.Worktrees)], "\n") {
		t.Errorf("the main worktree changed:\nbefore %v\nafter  %v", before.Worktrees, after.Worktrees)
	}
	after.Worktrees = after.Worktrees[:len(before.Worktrees)]
	var ignored []string
	thrumIgnored := false
	for _, l := range after.Ignored {
		if l == "!! .thrum/" {
			thrumIgnored = true
			continue
		}
		ignored = append(ignored, l)
	}
	if !thrumIgnored {
		t.Errorf(".thrum/ is not ignored: %v", after.Ignored)
	}
	after.Ignored = ignored
	for _, a := range agents {
		if _, err := os.Stat(filepath.Join(syncDir, "messages", a.name+".jsonl")); err != nil {
			t.Errorf("no message log for %s: %v", a.name, err)
		}
	}
	ex, err := os.ReadFile(filepath.Join(repo, ".git", "info", "exclude"))
	if err != nil || strings.Count(string(ex), "\n/.thrum/\n") != 1 {
		t.Errorf(".git/info/exclude should hold /.thrum/ once:\n%s (%v)", ex, err)
	}

	// Everything else is as it was.
	check := func(what string, b, a any) {
		t.Helper()
		if fmt.Sprint(b) != fmt.Sprint(a) {
			t.Errorf("%s changed:\nbefore:\n%v\nafter:\n%v", what, b, a)
		}
	}
	check("HEAD", before.Head, after.Head)
	check("current branch", before.Branch, after.Branch)
	check("git status --porcelain", before.Status, after.Status)
	check("git diff", before.Diff, after.Diff)
	check("git diff --cached", before.Cached, after.Cached)
	check("index (git ls-files -s)", before.Index, after.Index)
	check("stash", before.Stash, after.Stash)
	check("untracked files", before.Untracked, after.Untracked)
	check("refs", before.Refs, after.Refs)
	check("ignored files", before.Ignored, after.Ignored)
	var bf, af []string
	for k, v := range before.Files {
		bf = append(bf, k+" "+v)
	}
	for k, v := range after.Files {
		af = append(af, k+" "+v)
	}
	sort.Strings(bf)
	sort.Strings(af)
	check("working tree files", strings.Join(bf, "\n"), strings.Join(af, "\n"))
}
