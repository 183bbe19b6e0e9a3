package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/thrumhq/thrum/internal/thrumtest"
)

// trap is a command an injected git option would run: a script that
// leaves a mark, then does the job git expected (so a call it hijacked
// could still look like a success).
type trap struct{ mark, script string }

func newTrap(t *testing.T) trap {
	dir := t.TempDir()
	tr := trap{mark: filepath.Join(dir, "ran"), script: filepath.Join(dir, "pack")}
	body := "#!/bin/sh\ntouch '" + tr.mark + "'\ncase \"$0$*\" in *receive*) exec git-receive-pack \"$@\";; esac\nexec git-upload-pack \"$@\"\n"
	if err := os.WriteFile(tr.script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return tr
}

// sprung fails the test if the trap's command ran.
func (tr trap) sprung(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(tr.mark); err == nil {
		t.Fatal("a command an agent put in a tool argument ran")
	}
}

// injections are values that git, given them as arguments, would read as
// an option (running a command), a refspec, a revision, or a path outside
// the repository.
func (tr trap) injections() []string {
	return []string{
		"--upload-pack=touch " + tr.mark, "--upload-pack=" + tr.script, "--receive-pack=" + tr.script, "--exec=" + tr.script,
		"-c", "--", "-",
		"main:refs/heads/evil", "+refs/heads/*:refs/heads/*", "HEAD:evil",
		"main..HEAD", "@{-1}", "HEAD", "main^{tree}",
		"../../etc/passwd", "/etc/passwd", "refs/heads/../../evil", "feature-a/../../../evil",
		"main\n--upload-pack=touch " + tr.mark,
	}
}

// TestArgumentsAreData gives every argument of every review tool values
// that git would act on, as a coder and as a reviewer: each call is
// refused with a clear code or keeps the value as text, no injected
// command runs, no ref appears, the branch and the remote change only as
// the call intends, and the audit records each call with what it asked.
func TestArgumentsAreData(t *testing.T) {
	l := newLoop(t, Config{})
	remote := thrumtest.GitRemote(t)
	aliceWT := worktree(t, remote, "alice", "feature-a")
	l.connect("alice", "coder", aliceWT)
	l.connect("bob", "reviewer", "")
	tr := newTrap(t)
	bad := tr.injections()
	all := strings.Join(bad, "\n")

	// Text arguments are kept as text: in the review thread, the feedback
	// file and the pull request.
	req := l.call("alice", "request_review", map[string]any{"completion_message": all, "reviewer_prompt": all}, "ok")
	for _, v := range bad {
		l.call("bob", "send_feedback", map[string]any{"coder": v, "feedback": "x", "feedback_type": "needs_work"}, "NOT_YOUR_REVIEW")
		l.call("bob", "send_feedback", map[string]any{"feedback": "x", "feedback_type": v}, "INVALID_ARGUMENT")
		l.call("bob", "send_feedback", map[string]any{"feedback": "x", "feedback_type": "needs_work", "priority": v}, "INVALID_ARGUMENT")
		l.call("alice", "create_pull_request", map[string]any{"title": "t", "description": "d", "base_branch": v}, "INVALID_ARGUMENT")
		l.call("alice", "create_pull_request", map[string]any{"title": "t", "description": "d", "coder": v}, "NOT_YOUR_BRANCH")
		l.call("bob", "create_pull_request", map[string]any{"title": "t", "description": "d", "coder": v}, "NOT_YOUR_REVIEW")
		l.call("bob", "list_audit", map[string]any{"tool": v, "agent": v}, "ok")
		l.call("bob", "review_status", map[string]any{v: v}, "INVALID_ARGUMENT")
	}
	tr.sprung(t)
	fb := l.call("bob", "send_feedback", map[string]any{"feedback": all, "feedback_type": "approved", "actionable_items": bad}, "ok")
	file, err := os.ReadFile(filepath.Join(aliceWT, FeedbackFile))
	if err != nil || !bytes.Contains(file, []byte(all)) || !bytes.Contains(file, []byte("- [ ] "+bad[0]+"\n")) {
		t.Fatalf("%s: %v\n%s", FeedbackFile, err, file)
	}
	if files := thrumtest.Git(t, aliceWT, "show", "--name-only", "--format=", fb["git_commit_hash"].(string)); files != FeedbackFile {
		t.Fatalf("the feedback commit holds %q", files)
	}
	for _, v := range bad {
		l.call("bob", "create_pull_request", map[string]any{"title": "t", "description": "d", "base_branch": v}, "INVALID_ARGUMENT")
	}
	pr := l.call("bob", "create_pull_request", map[string]any{"title": all, "description": all}, "ok")
	if pr["title"] != all || pr["description"] != all || pr["branch_name"] != "feature-a" || pr["base_branch"] != "main" {
		t.Fatalf("pull request %v", pr)
	}
	l.call("alice", "review_status", map[string]any{}, "ok")
	tr.sprung(t)

	// Only the pushed branch is new, here and on the remote.
	if refs := thrumtest.Git(t, aliceWT, "for-each-ref", "--format=%(refname)", "refs/heads", "refs/tags"); refs != "refs/heads/feature-a\nrefs/heads/main" {
		t.Errorf("alice's refs:\n%s", refs)
	}
	if refs := thrumtest.Git(t, aliceWT, "ls-remote", "--refs", remote.Path); strings.Count(refs, "\n") != 1 ||
		!strings.Contains(refs, "\trefs/heads/feature-a") || !strings.Contains(refs, "\trefs/heads/main") {
		t.Errorf("the remote's refs:\n%s", refs)
	}
	w := l.call("alice", "wait_for_message", map[string]any{"timeout": 5}, "ok")
	if msg, _ := w["message"].(map[string]any); msg == nil || !strings.Contains(msg["content"].(string), all) {
		t.Errorf("the review thread lost the text: %v (request %v)", w, req)
	}

	// The audit has every call: what was asked, and why it was refused.
	checkAudit(t, l.call("bob", "list_audit", nil, "ok")["records"], l.calls[:len(l.calls)-1], 8*len(bad))

	// Long arguments are kept cut, still valid text, with the hash of the whole.
	l.call("bob", "send_feedback", map[string]any{"coder": "nobody", "feedback": strings.Repeat("é", 5000), "feedback_type": "needs_work"}, "NOT_YOUR_REVIEW")
	recs := l.app.state.auditRecords("send_feedback", "bob", 1)
	if r := recs[0]; len(r.Args) > maxAuditArgs+len("…") || !strings.HasSuffix(r.Args, "é…") || !utf8.ValidString(r.Args) || r.Code != "NOT_YOUR_REVIEW" {
		t.Errorf("the audit of a long call: %.80q… (%d bytes), code %s", r.Args, len(r.Args), r.Code)
	}

	// A tool name is the agent's too; printed, it moves no terminal.
	if _, err := l.cs["bob"].CallTool(l.ctx, &mcp.CallToolParams{Name: "x\x1b[2J\x1b]0;pwned\a\u009b", Arguments: map[string]any{"a": "\u202e"}}); err == nil {
		t.Fatal("an unknown tool was called")
	}
	var out bytes.Buffer
	if err := printAudit(&out, l.app.state.auditRecords("", "", 0), false); err != nil {
		t.Fatal(err)
	}
	if i := strings.IndexFunc(out.String(), func(r rune) bool { return r != '\n' && !unicode.IsGraphic(r) }); i >= 0 {
		t.Fatalf("the printed audit holds %q", out.String()[i:min(i+8, out.Len())])
	}
}

// TestBranchNamesAreChecked: a coder's own branch is named by its
// worktree, which the coder controls; one git would refuse to create
// (here an option) is refused too, and never reaches a command line.
func TestBranchNamesAreChecked(t *testing.T) {
	l := newLoop(t, Config{})
	remote := thrumtest.GitRemote(t)
	tr := newTrap(t)
	wt := worktree(t, remote, "mallory", "feature-m")
	thrumtest.Git(t, wt, "symbolic-ref", "HEAD", "refs/heads/--upload-pack="+tr.script)
	thrumtest.Git(t, wt, "commit", "-q", "--allow-empty", "-m", "on a branch named as an option")
	l.connect("mallory", "coder", wt)
	l.connect("bob", "reviewer", "")
	l.call("mallory", "request_review", nil, "GIT_FAILED")
	l.call("mallory", "create_pull_request", map[string]any{"title": "t", "description": "d"}, "GIT_FAILED")
	tr.sprung(t)
	if refs := thrumtest.Git(t, wt, "ls-remote", "--refs", remote.Path); strings.Count(refs, "\n") != 0 {
		t.Errorf("the remote's refs:\n%s", refs)
	}
	checkAudit(t, l.call("bob", "list_audit", nil, "ok")["records"], l.calls[:len(l.calls)-1], 0)
}

// TestFeedbackFileIsReplacedNotWrittenThrough: the coder owns its
// worktree, and may have put a symlink, a hard link or a directory where
// the reviewer's REVIEW_FEEDBACK.md goes. The feedback never writes
// outside the worktree: a link is replaced by a regular file, a directory
// makes the call fail cleanly. None of the worktree's hooks run for the
// reviewer's commit.
func TestFeedbackFileIsReplacedNotWrittenThrough(t *testing.T) {
	l := newLoop(t, Config{MaxIterations: 10})
	remote := thrumtest.GitRemote(t)
	aliceWT := worktree(t, remote, "alice", "feature-a")
	l.connect("alice", "coder", aliceWT)
	l.connect("bob", "reviewer", "")
	outside := t.TempDir()
	victim := filepath.Join(outside, "precious")
	feedbackFile := filepath.Join(aliceWT, FeedbackFile)
	const precious = "precious\n"
	hookRan := filepath.Join(outside, "hook ran")
	for _, hook := range []string{"pre-commit", "prepare-commit-msg", "commit-msg", "post-commit", "post-index-change", "reference-transaction"} {
		if err := os.WriteFile(filepath.Join(aliceWT, ".git", "hooks", hook), []byte("#!/bin/sh\necho "+hook+" >> '"+hookRan+"'\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}

	for _, c := range []struct {
		name string
		trap func() error
		want string
	}{
		{"symlink to a file outside", func() error { return os.Symlink(victim, feedbackFile) }, "ok"},
		{"dangling symlink outside", func() error { return os.Symlink(filepath.Join(outside, "new"), feedbackFile) }, "ok"},
		{"relative symlink outside", func() error {
			rel, err := filepath.Rel(aliceWT, victim)
			if err != nil {
				return err
			}
			return os.Symlink(rel, feedbackFile)
		}, "ok"},
		{"hard link to a file outside", func() error { return os.Link(victim, feedbackFile) }, "ok"},
		{"directory", func() error {
			if err := os.Mkdir(feedbackFile, 0o755); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(feedbackFile, "inside"), []byte(precious), 0o644)
		}, "GIT_FAILED"},
	} {
		t.Logf("the coder put a %s in place of %s", c.name, FeedbackFile)
		if err := os.WriteFile(victim, []byte(precious), 0o644); err != nil {
			t.Fatal(err)
		}
		l.call("alice", "request_review", nil, "ok")
		os.RemoveAll(feedbackFile)
		if err := c.trap(); err != nil {
			t.Fatal(err)
		}
		l.call("bob", "send_feedback", map[string]any{"feedback": "not through a link", "feedback_type": "needs_work"}, c.want)
		if b, err := os.ReadFile(victim); err != nil || string(b) != precious {
			t.Fatalf("the file outside the worktree now holds %q (%v)", b, err)
		}
		if ents, _ := os.ReadDir(outside); len(ents) != 1 {
			b, _ := os.ReadFile(hookRan)
			t.Fatalf("the directory outside holds %v (hooks that ran: %q)", ents, b)
		}
		if leftovers, _ := filepath.Glob(filepath.Join(aliceWT, "."+FeedbackFile+"*")); len(leftovers) != 0 {
			t.Fatalf("left behind: %v", leftovers)
		}
		if c.want != "ok" {
			if b, err := os.ReadFile(filepath.Join(feedbackFile, "inside")); err != nil || string(b) != precious {
				t.Fatalf("the coder's directory changed: %q %v", b, err)
			}
			l.call("bob", "send_feedback", map[string]any{"feedback": "after the failure", "feedback_type": "needs_work"}, "GIT_FAILED")
			os.RemoveAll(feedbackFile)
			l.call("bob", "send_feedback", map[string]any{"feedback": "once it is gone", "feedback_type": "needs_work"}, "ok")
		}
		if fi, err := os.Lstat(feedbackFile); err != nil || !fi.Mode().IsRegular() {
			t.Fatalf("%s is %v (%v), want a regular file", FeedbackFile, fi, err)
		}
		if entry := thrumtest.Git(t, aliceWT, "ls-tree", "HEAD", FeedbackFile); !strings.HasPrefix(entry, "100644 blob ") {
			t.Fatalf("committed as %q, want a regular file", entry)
		}
	}
}

// FuzzCheckBranch: a name checkBranch accepts is a plain branch name,
// which git can read as nothing else: not an option, a refspec, a
// revision expression or a path out of refs/heads.
func FuzzCheckBranch(f *testing.F) {
	for _, s := range append(trap{"/tmp/mark", "/tmp/script"}.injections(), "main", "feature/x", "é", "a.b/c", "@", "refs/heads/main") {
		f.Add(s)
	}
	dir := thrumtest.GitRepo(f)
	f.Fuzz(func(t *testing.T, name string) {
		if checkBranch(t.Context(), dir, name) != nil {
			return
		}
		if name == "" || name[0] == '-' || name[0] == '/' || name[len(name)-1] == '/' || name[len(name)-1] == '.' ||
			strings.ContainsAny(name, ": ~^?*[\\\x7f") || strings.Contains(name, "..") || strings.Contains(name, "@{") ||
			strings.IndexFunc(name, func(r rune) bool { return r < ' ' }) >= 0 {
			t.Fatalf("checkBranch accepted %q", name)
		}
	})
}
