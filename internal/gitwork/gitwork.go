// Package gitwork reads a git repository's work context by running git:
// the worktrees of the repository, what one worktree is doing (branch,
// unmerged commits, changed files), and the user's name and email. The
// reference binary hands it to the node as thrum.Options.GitRepo; the
// thrum library itself never runs git.
package gitwork

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/thrumhq/thrum/eventlog"
)

// gitTimeout bounds each git command.
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

// Repo is the git repository whose working tree (any of its worktrees)
// is at Dir ("" for the current directory). Its methods may be called
// concurrently.
type Repo struct {
	Dir string

	mu       sync.Mutex // guards the keyring read last
	ring     []byte
	ringBlob string
}

// New returns the repository whose working tree is at dir.
func New(dir string) *Repo { return &Repo{Dir: dir} }

// Worktrees lists the repository's worktrees as `git worktree list`
// names them.
func (r *Repo) Worktrees(ctx context.Context) ([]string, error) {
	out, err := gitOutput(ctx, r.Dir, "worktree", "list", "--porcelain")
	if err != nil {
		return nil, err
	}
	var paths []string
	for _, l := range lines(out) {
		if p, ok := strings.CutPrefix(l, "worktree "); ok {
			paths = append(paths, filepath.Clean(p))
		}
	}
	return paths, nil
}

// User returns git config's user.name and user.email ("" when unset).
func (r *Repo) User(ctx context.Context) (name, email string) {
	name, _ = gitOutput(ctx, r.Dir, "config", "user.name")
	email, _ = gitOutput(ctx, r.Dir, "config", "user.email")
	return name, email
}

// Context extracts the work context of the worktree at dir: branch,
// commits not on the main branch, uncommitted files and all changed files.
// It returns ok=false if dir is not a git worktree. The caller fills the
// session and agent.
func (r *Repo) Context(ctx context.Context, dir string) (c eventlog.SessionContext, ok bool) {
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
	sort.Strings(c.ChangedFiles)
	return c, true
}

// KeyringFile is the team's keyring at the root of the repository
// (thrum.Options.Keyring).
const KeyringFile = "thrum-keys"

// MaxKeyringBytes bounds what Keyring reads of the file (one more byte,
// so that the reader can tell it was longer): whoever can push to the
// default branch commits any file there.
const MaxKeyringBytes = 1 << 20

// Keyring returns the team's keyring as the default branch of the
// remote origin has it (origin/HEAD:thrum-keys), never the worktree's
// copy, which any branch or local edit could change: its text (nil if
// there is none, or origin/HEAD is not set) and its blob's ID as the
// version. thrum.Options.Keyring takes it.
func (r *Repo) Keyring(ctx context.Context) ([]byte, string, error) {
	blob, err := gitOutput(ctx, r.Dir, "rev-parse", "--verify", "--quiet", "refs/remotes/origin/HEAD:"+KeyringFile)
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == 1 {
		return nil, "", nil // no origin/HEAD, or no file there
	}
	if err != nil {
		return nil, "", fmt.Errorf("read %s from origin/HEAD: %w", KeyringFile, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if blob == r.ringBlob {
		return r.ring, blob, nil
	}
	// Only a file is a keyring: a directory or a submodule committed
	// under its name is none.
	entry, err := gitOutput(ctx, r.Dir, "ls-tree", "refs/remotes/origin/HEAD", "--", KeyringFile)
	if err != nil {
		return nil, "", fmt.Errorf("read %s from origin/HEAD: %w", KeyringFile, err)
	}
	if f := strings.Fields(entry); len(f) < 3 || f[1] != "blob" {
		return nil, "", nil
	}
	text, err := readBounded(ctx, r.Dir, MaxKeyringBytes+1, "cat-file", "blob", blob)
	if err != nil {
		return nil, "", fmt.Errorf("read %s from origin/HEAD: %w", KeyringFile, err)
	}
	r.ring, r.ringBlob = text, blob
	return r.ring, blob, nil
}

// readBounded runs git in dir and returns at most max bytes of its
// output: what is past them is never read (git is stopped).
func readBounded(ctx context.Context, dir string, max int64, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, gitTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(io.LimitReader(out, max))
	if int64(len(b)) == max {
		_ = cmd.Process.Kill() // the rest is not read
		_ = cmd.Wait()
		return b, err
	}
	if werr := cmd.Wait(); err == nil {
		err = werr
	}
	return b, err
}
