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

// git runs git in dir and returns its trimmed stdout.
func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", append([]string{"-C", dir}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return strings.TrimSpace(out.String()), nil
}

// currentBranch is the branch checked out in worktree.
func currentBranch(ctx context.Context, worktree string) (string, error) {
	b, err := git(ctx, worktree, "symbolic-ref", "--quiet", "--short", "HEAD")
	if err != nil {
		return "", fmt.Errorf("%s has no branch checked out (detached HEAD?): %w", worktree, err)
	}
	return b, nil
}

// FeedbackFile is the file send_feedback commits on the coder's branch.
const FeedbackFile = "REVIEW_FEEDBACK.md"

// commitFeedback writes the feedback to FeedbackFile in the coder's
// worktree and commits that file alone, authored by the reviewer: the
// coder sees it through git (git log, git show) on their own branch.
// Other changes in the worktree, staged or not, are left as they are,
// and the coder's hooks are not run for it (it is not the coder's code).
func commitFeedback(ctx context.Context, worktree string, f *feedback) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "# Review feedback: iteration %d\n\n", f.Iteration)
	fmt.Fprintf(&b, "- Reviewer: %s\n- Type: %s\n", f.Reviewer, f.Type)
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
	if err := os.WriteFile(filepath.Join(worktree, FeedbackFile), []byte(b.String()), 0o644); err != nil {
		return "", err
	}
	if _, err := git(ctx, worktree, "add", "--", FeedbackFile); err != nil {
		return "", err
	}
	msg := fmt.Sprintf("Review feedback (iteration %d, %s) from %s", f.Iteration, f.Type, f.Reviewer)
	author := fmt.Sprintf("%s <%s@reviewloop.invalid>", f.Reviewer, f.Reviewer)
	if _, err := git(ctx, worktree, "commit", "--quiet", "--no-verify", "--author", author, "-m", msg, "--", FeedbackFile); err != nil {
		return "", err
	}
	return git(ctx, worktree, "rev-parse", "HEAD")
}

// PullRequester opens a pull request for a branch. GitPush, the one
// shipped, pushes the branch to the repository's remote; a forge client
// (GitHub, Gitea) would implement the same method and fill URL and
// Number. A *Refusal it returns reaches the agent as is; any other error
// is a PUSH_FAILED error.
type PullRequester interface {
	OpenPullRequest(ctx context.Context, req PullRequestSpec) (*PullRequest, error)
}

// PullRequestSpec is what create_pull_request asks for.
type PullRequestSpec struct {
	Worktree    string // the caller's worktree
	Branch      string // its current branch
	Base        string // the branch to merge into
	Title       string
	Description string
}

// PullRequest is what a PullRequester opened.
type PullRequest struct {
	Branch string `json:"branch_name" jsonschema:"the branch proposed for merging"`
	Base   string `json:"base_branch" jsonschema:"the branch to merge into"`
	Remote string `json:"remote" jsonschema:"where the branch was pushed"`
	Commit string `json:"commit" jsonschema:"the commit pushed"`
	Ahead  int    `json:"commits_ahead" jsonschema:"commits on the branch that the remote's base lacks"`
	URL    string `json:"pr_url,omitempty" jsonschema:"the pull request's page, when a forge made one"`
	Number int    `json:"pr_number,omitempty" jsonschema:"the forge's pull request number, when a forge made one"`
}

// GitPush is the PullRequester that needs no forge: it checks that the
// branch has commits its base on the remote lacks, and pushes it there.
type GitPush struct {
	Remote string // default "origin"
}

// OpenPullRequest pushes req.Branch to the remote.
func (g GitPush) OpenPullRequest(ctx context.Context, req PullRequestSpec) (*PullRequest, error) {
	remote := g.Remote
	if remote == "" {
		remote = "origin"
	}
	if req.Branch == req.Base {
		return nil, &Refusal{Code: "NOTHING_TO_MERGE", Message: fmt.Sprintf("the current branch is the base branch %q: work on a branch of your own", req.Base)}
	}
	if _, err := git(ctx, req.Worktree, "fetch", "--quiet", remote, req.Base); err != nil {
		return nil, err
	}
	n, err := git(ctx, req.Worktree, "rev-list", "--count", "FETCH_HEAD..HEAD")
	if err != nil {
		return nil, err
	}
	ahead, _ := strconv.Atoi(n)
	if ahead == 0 {
		return nil, &Refusal{Code: "NOTHING_TO_MERGE", Message: fmt.Sprintf("branch %q has no commits that %s/%s lacks", req.Branch, remote, req.Base)}
	}
	if _, err := git(ctx, req.Worktree, "push", "--quiet", remote, "HEAD:refs/heads/"+req.Branch); err != nil {
		return nil, err
	}
	head, err := git(ctx, req.Worktree, "rev-parse", "HEAD")
	if err != nil {
		return nil, err
	}
	return &PullRequest{Branch: req.Branch, Base: req.Base, Remote: remote, Commit: head, Ahead: ahead}, nil
}
