package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"go/format"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/thrumhq/thrum/internal/thrumtest"
)

// readmeBlock is one fenced code block of README.md.
type readmeBlock struct {
	section string // the "## " heading it is under
	lang    string // what follows the opening fence: sh, go, json, …
	text    string // its content, with a final newline
}

// readmeBlocks returns README.md's fenced code blocks, in order.
func readmeBlocks(t testing.TB) []readmeBlock {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var blocks []readmeBlock
	var cur *readmeBlock
	section := ""
	for _, l := range strings.SplitAfter(string(b), "\n") {
		switch {
		case cur != nil && strings.TrimSpace(l) == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.text += l
		case strings.HasPrefix(l, "```"):
			cur = &readmeBlock{section: section, lang: strings.TrimSpace(strings.TrimPrefix(l, "```"))}
		case strings.HasPrefix(l, "## "):
			section = strings.TrimSpace(strings.TrimPrefix(l, "## "))
		}
	}
	if cur != nil {
		t.Fatalf("README.md: the %s block under %q is not closed", cur.lang, cur.section)
	}
	return blocks
}

// shellLines are a shell block's lines, with backslash continuations
// joined and blank lines dropped.
func shellLines(text string) []string {
	var lines []string
	cont := ""
	for _, l := range strings.Split(text, "\n") {
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

// quickstartBlock returns the lines of the README's Quickstart block: the
// first shell block of the section whose heading begins "Quickstart".
func quickstartBlock(t testing.TB) []string {
	t.Helper()
	for _, b := range readmeBlocks(t) {
		if strings.HasPrefix(b.section, "Quickstart") && b.lang == "sh" {
			return shellLines(b.text)
		}
	}
	t.Fatal("README.md has no ```sh block under a ## Quickstart heading")
	return nil
}

// TestReadmeQuickstart runs the README's Quickstart block as written, line
// by line in one shell, with the built binary first on PATH, in a fresh
// git repository (`git init` and one commit) and in a plain directory, with no
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
				// `git init` and one commit; no global configuration.
				thrumtest.Git(t, dir, "init", "-q")
				thrumtest.GitUser(t, dir)
				thrumtest.Git(t, dir, "commit", "-q", "--allow-empty", "-m", "first commit")
			}
			outs := runQuickstart(t, dir, lines)
			// What the block promises, checked on the lines' own output.
			matches(t, "daemon start", outs[lineOf(t, lines, "thrum daemon start")], `(?m)^  websocket: ws://127\.0\.0\.1:\d+/ws$`)
			inbox := outs[lineOf(t, lines, "THRUM_NAME=bob   thrum inbox")]
			contains(t, "bob's inbox", inbox, "● msg_", "Auth module complete, tests pass", "Showing 1-1 of 1 message (1 unread)\n")
			mine := outs[lineOf(t, lines, "THRUM_NAME=alice thrum inbox")]
			contains(t, "alice's inbox", mine, "Looks good, merging now", "Auth module complete, tests pass", "↳ ● msg_")
			checkGrouped(t, mine, idAfter(t, inbox, "│ ● "), idAfter(t, mine, "↳ ● "))
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
// daemon left running by a failure is stopped. PATH is path, then the
// built binary's directory, then the test's PATH.
func runQuickstart(t *testing.T, dir string, lines []string, path ...string) []string {
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
	path = append(path, filepath.Dir(thrumBin), os.Getenv("PATH"))
	cmd.Env = append(cleanEnv(), "PATH="+strings.Join(path, string(os.PathListSeparator)),
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

// TestReadmeGoProgram builds and runs the README's Go block, read from
// README.md, as a program of this module, and compares what it prints
// with the text block that follows it. The block must be gofmt'd.
func TestReadmeGoProgram(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a program")
	}
	t.Parallel()
	blocks := readmeBlocks(t)
	var ran int
	for i, b := range blocks {
		if b.lang != "go" {
			continue
		}
		ran++
		if formatted, err := format.Source([]byte(b.text)); err != nil {
			t.Fatalf("the Go block under %q does not parse: %v", b.section, err)
		} else if string(formatted) != b.text {
			t.Errorf("the Go block under %q is not gofmt'd; gofmt makes it:\n%s", b.section, formatted)
		}
		if i+1 >= len(blocks) || blocks[i+1].lang != "text" || blocks[i+1].section != b.section {
			t.Fatalf("the Go block under %q is not followed by a text block of what it prints", b.section)
		}
		want := blocks[i+1].text
		src := filepath.Join(t.TempDir(), "main.go")
		if err := os.WriteFile(src, []byte(b.text), 0o644); err != nil {
			t.Fatal(err)
		}
		goCmd, err := exec.LookPath("go")
		if err != nil {
			t.Fatal("no go command to build the README's program with")
		}
		root, err := filepath.Abs(filepath.Join("..", ".."))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		// Run from the module's root, so the program's imports are this
		// module's packages, as they are for a module that requires it.
		cmd := exec.CommandContext(ctx, goCmd, "run", src)
		cmd.Dir, cmd.Env = root, append(cleanEnv(), "CGO_ENABLED=0")
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("go run of the README's Go block under %q: %v\nstdout:\n%s\nstderr:\n%s", b.section, err, out.String(), errb.String())
		}
		if out.String() != want {
			t.Errorf("the README's Go block printed:\n%s\nthe README says it prints:\n%s", out.String(), want)
		}
		t.Logf("the README's Go program printed:\n%s", out.String())
	}
	if ran == 0 {
		t.Fatal("README.md has no Go block")
	}
}

// TestReadmeJSONBlocks: every JSON example in the README is valid JSON.
func TestReadmeJSONBlocks(t *testing.T) {
	n := 0
	for _, b := range readmeBlocks(t) {
		if b.lang != "json" {
			continue
		}
		n++
		if !json.Valid([]byte(b.text)) {
			t.Errorf("the JSON block under %q is not valid JSON:\n%s", b.section, b.text)
		}
	}
	if n == 0 {
		t.Fatal("README.md has no JSON block")
	}
}

// TestReadmeCommandBlocks runs every later README shell block made of
// thrum commands (sync, search, sends, the web console, doctor) the way a
// reader would after the Quickstart: in a clone with a git remote, after
// the Quickstart's lines up to its `thrum daemon stop`, in one shell.
// Every line must exit 0. `thrum web --open` runs an xdg-open first on
// PATH that records the URL it was given.
func TestReadmeCommandBlocks(t *testing.T) {
	t.Parallel()
	quick := quickstartBlock(t)
	lines := quick[:len(quick)-1] // up to its daemon stop
	isThrum := regexp.MustCompile(`^(THRUM_[A-Z]+=\S+\s+)*thrum\s`)
	var blocks []string
	seenQuickstart := false
	for _, b := range readmeBlocks(t) {
		if b.lang != "sh" {
			continue
		}
		if strings.HasPrefix(b.section, "Quickstart") {
			seenQuickstart = true
			continue
		}
		ls := shellLines(b.text)
		if !seenQuickstart || len(ls) == 0 || !slices.ContainsFunc(ls, func(l string) bool { return isThrum.MatchString(l) }) {
			continue
		}
		for _, l := range ls {
			if !isThrum.MatchString(l) {
				t.Fatalf("the shell block under %q mixes thrum commands with others: %q", b.section, l)
			}
		}
		blocks = append(blocks, b.section)
		lines = append(lines, ls...)
	}
	for _, want := range []string{"Sync across machines", "Search", "Watch and join in a browser: `thrum web`", "Check the log: `thrum doctor`", "Upgrading"} {
		if !slices.Contains(blocks, want) {
			t.Errorf("no thrum command block under %q (blocks run: %q)", want, blocks)
		}
	}
	lines = append(lines, "thrum daemon stop")

	remote := thrumtest.GitRemote(t)
	dir := remote.Clone("work")
	bin := t.TempDir()
	opened := filepath.Join(t.TempDir(), "opened")
	if err := os.WriteFile(filepath.Join(bin, "xdg-open"), []byte("#!/bin/sh\necho \"$@\" >> '"+opened+"'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	outs := runQuickstart(t, dir, lines, bin)
	contains(t, "sync status", outs[lineOf(t, lines, "thrum sync status")], "synced")
	contains(t, "search for a phrase by bob", outs[lineOf(t, lines, `--author bob`)], "No messages match")
	contains(t, "the keyed send", outs[lineOf(t, lines, "--idempotency-key")], "> Message sent: msg_", "To @everyone (everyone): 2 agents")
	matches(t, "thrum web", outs[lineOf(t, lines, "thrum web  ")], `http://127\.0\.0\.1:\d+/#login=\S+`)
	if b, err := os.ReadFile(opened); err != nil || !regexp.MustCompile(`^http://127\.0\.0\.1:\d+/#login=\S+\n$`).Match(b) {
		t.Errorf("thrum web --open gave xdg-open %q (%v), want the login URL", b, err)
	}
	contains(t, "doctor", outs[lineOf(t, lines, "thrum doctor  ")], "No problems found.")
	contains(t, "daemon restart", outs[lineOf(t, lines, "thrum daemon restart")], "Daemon stopped (pid ", "Daemon started (pid ")
	if out := thrumtest.Git(t, remote.Path, "branch", "--list", "a-sync"); !strings.Contains(out, "a-sync") {
		t.Errorf("the remote has no a-sync branch after sync force: %q", out)
	}
}

// TestReadmeEmbedSteps follows the README's steps for embedding, in its
// order, in a module of its own: the code that imports thrum first (the
// README's Go program), then go mod edit and go mod tidy, which keeps
// the require line only because the code imports thrum; then it builds.
func TestReadmeEmbedSteps(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program in a module of its own")
	}
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	if i, j := strings.Index(readme, "write the code that imports thrum first"), strings.Index(readme, "`go mod tidy`"); i < 0 || j < i {
		t.Fatal("the README's Install should say to write the code that imports thrum first, then go mod tidy")
	}
	var program string
	for _, bl := range readmeBlocks(t) {
		if bl.lang == "go" {
			program = bl.text
		}
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(program), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"mod", "init", "example.com/app"},
		{"mod", "edit", "-require", "github.com/thrumhq/thrum@v0.0.0", "-replace", "github.com/thrumhq/thrum=" + root},
		{"mod", "tidy"},
		{"build", "-o", os.DevNull, "."},
	} {
		cmd := exec.Command("go", args...)
		cmd.Dir, cmd.Env = dir, append(cleanEnv(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	if mod, _ := os.ReadFile(filepath.Join(dir, "go.mod")); !strings.Contains(string(mod), "require github.com/thrumhq/thrum v0.0.0") {
		t.Errorf("go mod tidy dropped the require line:\n%s", mod)
	}
}
