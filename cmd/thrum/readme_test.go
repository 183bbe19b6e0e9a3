package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/thrumhq/thrum/internal/thrumtest"
)

// quickstartBlock returns the lines of the README's Quickstart ```sh
// block: the first shell block after the "## Quickstart" heading, with
// backslash continuations joined and blank lines dropped.
func quickstartBlock(t testing.TB) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, "\n## Quickstart")
	if i < 0 {
		t.Fatal("README.md has no ## Quickstart section")
	}
	s = s[i:]
	start := strings.Index(s, "\n```sh\n")
	if start < 0 {
		t.Fatal("the Quickstart section has no ```sh block")
	}
	s = s[start+len("\n```sh\n"):]
	end := strings.Index(s, "\n```")
	if end < 0 {
		t.Fatal("the Quickstart's ```sh block is not closed")
	}
	var lines []string
	cont := ""
	for _, l := range strings.Split(s[:end], "\n") {
		if strings.HasSuffix(l, "\\") {
			cont += strings.TrimSuffix(l, "\\")
			continue
		}
		l = cont + l
		cont = ""
		if strings.TrimSpace(l) != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

// TestReadmeQuickstart runs the README's Quickstart block as written, line
// by line in one shell, with the built binary first on PATH, in a fresh
// git repository (just `git init`) and in a plain directory, with no
// THRUM_* variables and no global git configuration. Every line must exit 0. The block is read
// from README.md, so editing the README changes what this runs.
func TestReadmeQuickstart(t *testing.T) {
	t.Parallel()
	lines := quickstartBlock(t)
	if len(lines) < 10 || !strings.HasPrefix(lines[0], "thrum init") || !strings.HasPrefix(lines[len(lines)-1], "thrum daemon stop") {
		t.Fatalf("the Quickstart block should run from thrum init to thrum daemon stop:\n%s", strings.Join(lines, "\n"))
	}
	for _, where := range []string{"git repository", "plain directory"} {
		t.Run(strings.ReplaceAll(where, " ", "_"), func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			if where == "git repository" {
				// Just `git init`: no commit and no user configured.
				thrumtest.Git(t, dir, "init", "-q")
			}
			outs := runQuickstart(t, dir, lines)
			// What the block promises, checked on the lines' own output.
			matches(t, "daemon start", outs[lineOf(t, lines, "thrum daemon start")], `(?m)^  websocket: ws://127\.0\.0\.1:\d+/ws$`)
			inbox := outs[lineOf(t, lines, "THRUM_NAME=bob   thrum inbox")]
			contains(t, "bob's inbox", inbox, "● msg_", "Auth module complete, tests pass", "Showing 1-1 of 1 message (1 unread)\n")
			mentions := outs[lineOf(t, lines, "thrum inbox --mentions")]
			contains(t, "alice's inbox --mentions", mentions, "Looks good, merging now", "Auth module complete, tests pass", "↳ ● msg_")
			checkGrouped(t, mentions, idAfter(t, inbox, "│ ● "), idAfter(t, mentions, "↳ ● "))
			if b, err := os.ReadFile(filepath.Join(dir, ".thrum", "var", "daemon.log")); err != nil {
				t.Error(err)
			} else {
				lacks(t, "the daemon's log", string(b), "level=ERROR", "level=WARN", "panic:")
			}
			contains(t, "send to @backend", outs[lineOf(t, lines, `--to @backend`)], "To @backend (group): bob (active)")
		})
	}
}

// lineOf returns the index of the one line containing s.
func lineOf(t testing.TB, lines []string, s string) int {
	t.Helper()
	at := -1
	for i, l := range lines {
		if strings.Contains(l, s) {
			if at >= 0 {
				t.Fatalf("two Quickstart lines contain %q", s)
			}
			at = i
		}
	}
	if at < 0 {
		t.Fatalf("no Quickstart line contains %q", s)
	}
	return at
}

// runQuickstart runs lines in one bash in dir, stopping at the first that
// exits non-zero, and returns each line's output (stdout and stderr). A
// daemon left running by a failure is stopped.
func runQuickstart(t *testing.T, dir string, lines []string) []string {
	t.Helper()
	thrumBin := thrumtest.Binary(t)
	home := t.TempDir()
	var script strings.Builder
	for i, l := range lines {
		// A marker line on both streams before each line splits the output.
		fmt.Fprintf(&script, "echo '#~%d'; echo '#~%d' >&2\n%s\nrc=$?; if [ $rc -ne 0 ]; then echo \"#~exit $rc\" >&2; exit 97; fi\n", i, i, l)
	}
	t.Cleanup(func() {
		pidFile := filepath.Join(dir, ".thrum", "var", "thrum.pid")
		if p := pidFromFile(pidFile); p > 0 && alive(p) && !zombie(p) {
			t.Errorf("the daemon (pid %d) is still running after the Quickstart: stopping it", p)
			c := &thrumCLI{t: t, repo: dir, bin: thrumBin}
			c.run("daemon", "stop")
			if alive(p) && !zombie(p) {
				syscall.Kill(p, syscall.SIGKILL)
			}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "--noprofile", "--norc", "-c", script.String())
	cmd.Dir = dir
	cmd.Env = append(cleanEnv(), "PATH="+filepath.Dir(thrumBin)+string(os.PathListSeparator)+os.Getenv("PATH"),
		"HOME="+home, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL="+os.DevNull)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	outs := make([]string, len(lines))
	marker := regexp.MustCompile(`(?m)^#~(\d+)\n`)
	last := -1 // the last line started
	split := func(s string, stream string) {
		parts := marker.Split(s, -1)
		for k, id := range marker.FindAllStringSubmatch(s, -1) {
			var n int
			fmt.Sscan(id[1], &n)
			last = max(last, n)
			if parts[k+1] != "" {
				outs[n] += stream + parts[k+1]
			}
		}
	}
	split(out.String(), "")
	split(errb.String(), "[stderr]\n")
	if err != nil {
		if last < 0 {
			t.Fatalf("the Quickstart did not start: %v\n%s", err, errb.String())
		}
		t.Fatalf("the Quickstart stopped (%v) at line %d:\n  %s\noutput:\n%s", err, last+1, lines[last], outs[last])
	}
	return outs
}
