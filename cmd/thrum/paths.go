package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/eventlog/gitsync"
	"github.com/thrumhq/thrum/internal/dirlock"
	"github.com/thrumhq/thrum/internal/keystore"
	"github.com/thrumhq/thrum/internal/private"
)

// SyncBranch is the orphan branch that carries the event log.
const SyncBranch = "a-sync"

// layout is where thrum keeps things for one repository or directory.
type layout struct {
	Root    string // the working tree (or plain directory)
	Git     bool   // Root is in a git repository
	GitDir  string // the repository's common git dir
	Home    string // runtime state: .thrum
	LogDir  string // the event log: <git-common-dir>/thrum-sync/a-sync, or .thrum/log
	repoID  string // see (*layout).RepoID
	DB      string
	Socket  string
	WSPort  string
	PIDFile string
	LogFile string
	IDs     string // identity files
	Shared  string // the main worktree's .thrum, when this is a feature worktree
}

// resolveLayout works out the paths for g.Repo without creating anything.
func resolveLayout(ctx context.Context, g *Globals) (*layout, error) {
	repo, err := filepath.Abs(g.Repo)
	if err != nil {
		return nil, err
	}
	if st, err := os.Stat(repo); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("--repo %s is not a directory", g.Repo)
	}
	l := &layout{Root: repo}
	// One git process for both answers: every command resolves the layout.
	out, err := git(ctx, repo, "rev-parse", "--show-toplevel", "--git-common-dir")
	if err != nil && strings.Contains(err.Error(), "dubious ownership") {
		// Not "outside git": git would refuse every sync here too.
		return nil, fmt.Errorf("%s is in a git repository that another user owns, and git refuses to work in it (dubious ownership), so thrum could not sync its log through git; "+
			"if you trust the repository, run `git config --global --add safe.directory <its root>` and try again", repo)
	}
	if err == nil {
		top, common, ok := strings.Cut(out, "\n")
		if !ok || top == "" || common == "" {
			return nil, fmt.Errorf("git rev-parse --show-toplevel --git-common-dir in %s: unexpected output %q", repo, out)
		}
		if !filepath.IsAbs(common) {
			common = filepath.Join(repo, common)
		}
		l.Root, l.Git, l.GitDir = top, true, filepath.Clean(common)
		l.LogDir = filepath.Join(l.GitDir, "thrum-sync", SyncBranch)
	}
	l.Home = filepath.Join(l.Root, ".thrum")
	if g.Home != "" {
		l.Home = g.Home
	}
	if !l.Git {
		l.LogDir = filepath.Join(l.Home, "log")
	}
	// A feature worktree of the same repository shares the main
	// worktree's daemon (one log, one projection, one socket), while its
	// identities stay its own; .thrum/redirect records it.
	v := filepath.Join(l.Home, "var")
	if err := l.share(g.Home == ""); err != nil {
		return nil, err
	}
	if l.Shared != "" {
		v = filepath.Join(l.Shared, "var")
	}
	l.DB = filepath.Join(v, "messages.db")
	l.Socket = filepath.Join(v, "thrum.sock")
	l.WSPort = filepath.Join(v, "ws.port")
	l.PIDFile = filepath.Join(v, "thrum.pid")
	l.LogFile = filepath.Join(v, "daemon.log")
	l.IDs = filepath.Join(l.Home, "identities")
	return l, nil
}

// share sets l.Shared to the main worktree's .thrum when this is another
// worktree of the same repository (same git common directory) and either
// auto (no --home) or .thrum/redirect asks for it. A redirect may name
// only that directory, which must be this user's: a committed redirect
// naming anything else (another project's .thrum, say) would bind this
// checkout to that project's daemon and hand its messages to the agents
// here, so it is refused, never followed.
func (l *layout) share(auto bool) error {
	var main string // the main worktree's .thrum, "" if none or this one
	if l.Git && filepath.Base(l.GitDir) == ".git" {
		if m := filepath.Join(filepath.Dir(l.GitDir), ".thrum"); m != l.Home {
			main = m
		}
	}
	redirect := filepath.Join(l.Home, "redirect")
	b, err := os.ReadFile(redirect)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if target := strings.TrimSpace(string(b)); target != "" {
		if main == "" || filepath.Clean(target) != main {
			return fmt.Errorf("%s names %s, which is not the .thrum of this repository's main worktree: thrum follows a redirect only there, so that no committed file can bind this checkout to another daemon; remove %s and try again",
				redirect, target, redirect)
		}
		auto = true
	}
	if !auto || main == "" {
		return nil
	}
	if err := private.CheckDir(main); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	l.Shared = main
	return nil
}

// RepoID identifies the repository: the first 16 hex digits of its
// first commit (rootCommit), the same on every clone, or outside git a
// hash of the log's path. Signatures and the NATS stream name it, so it
// must not change: the first use records it in this clone's git config
// (repoIDKey), where no commit can reach, and later ones read it there,
// whatever history a branch merges since; init refuses a repository
// with no commit. It costs a git process, so only the commands that
// need it ask.
func (l *layout) RepoID(ctx context.Context) string {
	if l.repoID != "" {
		return l.repoID
	}
	sum := sha256.Sum256([]byte(l.LogDir))
	l.repoID = hex.EncodeToString(sum[:8])
	if !l.Git {
		return l.repoID
	}
	if id, err := git(ctx, l.Root, "config", "--get", repoIDKey); err == nil && len(id) == 16 && isHex(id) {
		l.repoID = id
	} else if first, err := rootCommit(ctx, l.Root); err == nil {
		l.repoID = first[:16]
		git(ctx, l.Root, "config", "--local", repoIDKey, l.repoID) // else computed again next time
	}
	return l.repoID
}

// repoIDKey is where RepoID records the repository's ID.
const repoIDKey = "thrum.repoid"

func isHex(s string) bool {
	_, err := hex.DecodeString(s)
	return err == nil
}

// rootCommit is the oldest commit with no parent in HEAD's history (by
// commit time, then hash): where a branch merged another history, that
// history's root is the newer, so every clone and branch names the same.
func rootCommit(ctx context.Context, root string) (string, error) {
	out, err := git(ctx, root, "log", "--max-parents=0", "--format=%ct %H", "HEAD")
	if err != nil {
		return "", err
	}
	var oldest string
	var when int64
	for _, line := range strings.Split(out, "\n") {
		t, hash, _ := strings.Cut(line, " ")
		ct, err := strconv.ParseInt(t, 10, 64)
		if err != nil || len(hash) < 16 {
			continue
		}
		if oldest == "" || ct < when || ct == when && hash < oldest {
			oldest, when = hash, ct
		}
	}
	if oldest == "" {
		return "", fmt.Errorf("no commit in HEAD's history")
	}
	return oldest, nil
}

// keys opens the node's key store: .thrum/var/keys (the main
// worktree's, for a feature worktree), never in the synced log.
func (l *layout) keys() (*keystore.Store, error) {
	return keystore.Open(filepath.Join(filepath.Dir(l.DB), thrum.DefaultKeyDir))
}

// initialized reports whether init has run here.
func (l *layout) initialized() bool {
	st, err := os.Stat(l.LogDir)
	return err == nil && st.IsDir()
}

func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return strings.TrimSpace(out.String()), nil
}

// setup creates the runtime directories and the log's home. In a git
// repository that is a worktree of the orphan branch a-sync inside the
// git dir, made with plumbing so that the user's working tree, index and
// current branch are never touched; .thrum/ is excluded through
// .git/info/exclude rather than a .gitignore in the working tree.
func (l *layout) setup(ctx context.Context) (created []string, err error) {
	if l.Git {
		if _, err := rootCommit(ctx, l.Root); err != nil {
			const why = "thrum names a repository by its first commit, the same on every clone, and signs each event with that name"
			if ref, _ := git(ctx, l.Root, "for-each-ref", "--count=1", "--format=%(refname)", "refs/heads/", "refs/remotes/"); ref != "" {
				branch := strings.TrimPrefix(ref, "refs/heads/")
				if r, ok := strings.CutPrefix(ref, "refs/remotes/"); ok {
					_, branch, _ = strings.Cut(r, "/")
				}
				return nil, fmt.Errorf("HEAD in %s names no commit (a branch not made yet): %s; check out the branch you work on (git switch %s, say), then run thrum init again", l.Root, why, branch)
			}
			return nil, fmt.Errorf("%s has no commit yet: %s; make a first commit (git commit --allow-empty -m 'first commit'), then run thrum init again", l.Root, why)
		}
		l.RepoID(ctx) // recorded now, before any branch merges another history
	}
	dirs := []string{l.Home, filepath.Join(l.Home, "var"), l.IDs}
	if l.Shared != "" {
		dirs = []string{l.Home, l.IDs} // the runtime state is the main worktree's
	}
	if !l.Git {
		dirs = append(dirs, l.LogDir)
	}
	for _, d := range dirs {
		if _, err := os.Lstat(d); errors.Is(err, os.ErrNotExist) {
			created = append(created, d)
		}
		// Each directory is this user's alone, or refused by name: one
		// another user could write may hold what they planted.
		if err := private.Dir(d); err != nil {
			return nil, err
		}
	}
	if !l.Git {
		return created, nil
	}
	if l.Shared != "" {
		if err := private.Dir(filepath.Join(l.Shared, "var")); err != nil {
			return nil, err
		}
	}
	if err := private.Dir(filepath.Dir(l.LogDir)); err != nil { // thrum-sync
		return nil, err
	}
	if err := l.exclude(); err != nil {
		return nil, err
	}
	if l.Shared != "" {
		redirect := filepath.Join(l.Home, "redirect")
		if _, err := os.Stat(redirect); errors.Is(err, os.ErrNotExist) {
			if err := os.WriteFile(redirect, []byte(l.Shared+"\n"), 0o600); err != nil {
				return nil, err
			}
			created = append(created, redirect+" (shares "+l.Shared+")")
		}
	}
	made, err := gitsync.MakeWorktree(ctx, l.Root, l.LogDir, SyncBranch)
	if err != nil {
		return nil, err
	}
	if made {
		created = append(created, l.LogDir+" (worktree of branch "+SyncBranch+")")
	}
	return created, nil
}

// exclude adds .thrum/ to .git/info/exclude once.
func (l *layout) exclude() error {
	rel, err := filepath.Rel(l.Root, l.Home)
	if err != nil || strings.HasPrefix(rel, "..") {
		return nil // runtime state outside the tree: nothing to hide
	}
	line := "/" + filepath.ToSlash(rel) + "/"
	path := filepath.Join(l.GitDir, "info", "exclude")
	b, _ := os.ReadFile(path)
	for _, have := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(have) == line {
			return nil
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	prefix := ""
	if len(b) > 0 && !bytes.HasSuffix(b, []byte("\n")) {
		prefix = "\n"
	}
	_, err = fmt.Fprintf(f, "%s# thrum runtime state\n%s\n", prefix, line)
	return err
}

// adopted is where repairLog moves what the log directory may not hold.
func (l *layout) adopted() string { return filepath.Join(filepath.Dir(l.DB), "adopted") }

// repairLog undoes, before the log is opened, what a clone that an older
// thrum made let the remote plant in it (gitsync.Repair), holding the
// log's lock so that no daemon has it open. A local shard that lost the
// remote's lines needs a new projection: the old one is removed, and the
// next open rebuilds it from the log.
func (l *layout) repairLog(ctx context.Context) (*gitsync.Repaired, error) {
	if !l.Git {
		return &gitsync.Repaired{}, nil
	}
	lock, err := dirlock.Lock(l.LogDir)
	if err != nil {
		return nil, err
	}
	defer lock.Close()
	rep, err := gitsync.Repair(ctx, l.LogDir, l.adopted())
	if err != nil {
		return nil, err
	}
	if rep.LocalRewritten {
		for _, s := range []string{"", "-wal", "-shm"} {
			if err := os.Remove(l.DB + s); err != nil && !errors.Is(err, os.ErrNotExist) {
				return nil, err
			}
		}
	}
	return rep, nil
}
