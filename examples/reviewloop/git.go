package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// git runs git in dir, with no shell, and returns its trimmed stdout.
// What an agent chose (a branch name, a coder's branch) reaches it only
// as data: after "--", behind a fixed prefix such as "refs/heads/", and
// for branch names only once checkBranch passed them.
func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", append([]string{"-C", dir}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return strings.TrimSpace(out.String()), nil
}

// checkBranch refuses a name git would not take for a branch (git
// check-ref-format --branch): with it go names that begin with "-" (an
// option), hold ":" or "*" (a refspec), "..", "@{" or a space (a
// revision range or expression), or begin or end with "/".
func checkBranch(ctx context.Context, dir, name string) error {
	if !strings.HasPrefix(name, "-") {
		if out, err := git(ctx, dir, "check-ref-format", "--branch", name); err == nil && out == name {
			return nil
		}
	}
	return fmt.Errorf("%q is not a branch name git accepts", name)
}

// currentBranch is the branch checked out in worktree.
func currentBranch(ctx context.Context, worktree string) (string, error) {
	ref, err := git(ctx, worktree, "symbolic-ref", "--quiet", "HEAD")
	branch, ok := strings.CutPrefix(ref, "refs/heads/")
	if err != nil || !ok {
		return "", fmt.Errorf("%s has no branch checked out (detached HEAD?)", worktree)
	}
	return branch, checkBranch(ctx, worktree, branch)
}

// FeedbackFile is the file send_feedback commits on the coder's branch.
const FeedbackFile = "REVIEW_FEEDBACK.md"

// commitFeedback writes the feedback to FeedbackFile at the top of the
// coder's worktree and commits that file alone, authored by the reviewer:
// the coder sees it through git (git log, git show) on its own branch.
// Other changes in the worktree, staged or not, are left as they are, and
// the worktree's hooks are not run (it is not the coder's commit).
func commitFeedback(ctx context.Context, worktree string, f *Feedback) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "# Review feedback: iteration %d\n\n- Reviewer: %s\n- Type: %s\n", f.Iteration, f.Reviewer, f.Type)
	if f.Priority != "" {
		fmt.Fprintf(&b, "- Priority: %s\n", f.Priority)
	}
	fmt.Fprintf(&b, "\n%s\n", strings.TrimSpace(f.Feedback))
	if len(f.ActionableItems) > 0 {
		b.WriteString("\n## Actionable items\n\n")
		for _, it := range f.ActionableItems {
			fmt.Fprintf(&b, "- [ ] %s\n", it)
		}
	}
	top, err := git(ctx, worktree, "rev-parse", "--show-toplevel")
	if err != nil {
		return "", err
	}
	if err := replaceFile(top, FeedbackFile, b.String()); err != nil {
		return "", err
	}
	msg := fmt.Sprintf("Review feedback (iteration %d, %s) from %s", f.Iteration, f.Type, f.Reviewer)
	author := fmt.Sprintf("%s <%s@reviewloop.invalid>", f.Reviewer, f.Reviewer)
	if _, err := git(ctx, top, "-c", "core.hooksPath=/dev/null", "add", "--", FeedbackFile); err != nil {
		return "", err
	}
	if _, err := git(ctx, top, "-c", "core.hooksPath=/dev/null", "commit", "--quiet", "--author", author, "-m", msg, "--", FeedbackFile); err != nil {
		return "", err
	}
	return git(ctx, top, "rev-parse", "HEAD")
}

// replaceFile puts a new regular file dir/name holding data in place of
// whatever is there, without writing through it: the data goes to a new
// file in dir (created exclusively, which follows no symlink), which is
// then renamed over name (which replaces a symlink or hard link rather
// than following it, and fails on a directory).
func replaceFile(dir, name, data string) error {
	f, err := os.CreateTemp(dir, "."+name+".*")
	if err != nil {
		return err
	}
	_, err = f.WriteString(data)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), filepath.Join(dir, name))
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

// push proposes branch of worktree for merging into base: it checks that
// the branch's head has commits that base on the remote lacks, and pushes
// that head to the remote's branch of the same name.
func push(ctx context.Context, worktree, remote, branch, base string) (*PullRequest, error) {
	if branch == base {
		return nil, refuse("NOTHING_TO_MERGE", "the current branch is the base branch %q: work on a branch of your own", base)
	}
	head, err := git(ctx, worktree, "rev-parse", "HEAD")
	if err != nil {
		return nil, err
	}
	if _, err := git(ctx, worktree, "fetch", "--quiet", "--", remote, "refs/heads/"+base); err != nil {
		return nil, err
	}
	n, err := git(ctx, worktree, "rev-list", "--count", "FETCH_HEAD.."+head)
	if err != nil {
		return nil, err
	}
	ahead, _ := strconv.Atoi(n)
	if ahead == 0 {
		return nil, refuse("NOTHING_TO_MERGE", "branch %q has no commits that %s/%s lacks", branch, remote, base)
	}
	if _, err := git(ctx, worktree, "push", "--quiet", "--", remote, head+":refs/heads/"+branch); err != nil {
		return nil, err
	}
	return &PullRequest{Branch: branch, Base: base, Remote: remote, Commit: head, Ahead: ahead}, nil
}
