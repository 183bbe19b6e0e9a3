package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/thrumhq/thrum/internal/thrumtest"
)

// cliMainEnv makes the test binary act as the thrum CLI. `daemon start`
// re-executes os.Executable() — under go test that is this binary — with
// `daemon run`, so TestMain sets the variable for every child it spawns.
const cliMainEnv = "THRUM_CLI_MAIN"

func TestMain(m *testing.M) {
	// A fuzz worker is this binary too, run by go test itself.
	if os.Getenv(cliMainEnv) == "1" && !slices.Contains(os.Args[1:], "-test.fuzzworker") {
		main() // signal.NotifyContext + run + os.Exit, exactly as the binary
		return
	}
	os.Setenv(cliMainEnv, "1")
	// The binary tests share one build (thrumtest.Binary), removed here.
	os.Exit(thrumtest.Main(m))
}

// result is what one thrum invocation did.
type result struct {
	args           []string
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("thrum %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(r.args, " "), r.code, r.stdout, r.stderr)
}

// thrumCLI runs thrum against one repository, in-process through runEnv
// (bin == "") or through the built binary.
type thrumCLI struct {
	t     testing.TB
	repo  string
	bin   string
	stdin string // the binary's standard input
}

// as runs thrum with THRUM_NAME=name (none when name is ""). --repo is
// always given, so nothing depends on the test's working directory.
func (c *thrumCLI) as(name string, args ...string) result {
	c.t.Helper()
	env := map[string]string{}
	if name != "" {
		env["THRUM_NAME"] = name
	}
	return c.withEnv(env, args...)
}

// withEnv runs thrum with exactly these THRUM_* variables set.
func (c *thrumCLI) withEnv(env map[string]string, args ...string) result {
	c.t.Helper()
	full := append([]string{"--repo", c.repo}, args...)
	r := result{args: args}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if c.bin == "" {
		var out, errb bytes.Buffer
		r.code = runEnv(ctx, full, &out, &errb, func(k string) string { return env[k] })
		r.stdout, r.stderr = out.String(), errb.String()
		return r
	}
	var out, errb bytes.Buffer
	var err error
	for try := 0; ; try++ {
		cmd := exec.CommandContext(ctx, c.bin, full...)
		cmd.Dir = c.repo
		cmd.Env = cleanEnv()
		for k, v := range env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		cmd.Stdout, cmd.Stderr = &out, &errb
		cmd.Stdin = strings.NewReader(c.stdin)
		err = cmd.Run()
		// A wrapper script this test wrote is "busy" while a process
		// another test forks holds it open, until that one execs.
		if !errors.Is(err, syscall.ETXTBSY) || try == 20 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	r.stdout, r.stderr = out.String(), errb.String()
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		c.t.Fatalf("thrum %s: %v", strings.Join(args, " "), err)
	}
	return r
}

// run runs thrum with no THRUM_NAME.
func (c *thrumCLI) run(args ...string) result {
	c.t.Helper()
	return c.as("", args...)
}

// ok runs thrum as name and fails the test unless it exits 0.
func (c *thrumCLI) ok(name string, args ...string) result {
	c.t.Helper()
	r := c.as(name, args...)
	if r.code != 0 {
		c.t.Fatalf("want exit 0, got:\n%s", r)
	}
	return r
}

// okJSON runs thrum --json as name, expects exit 0 and decodes stdout into v.
func (c *thrumCLI) okJSON(v any, name string, args ...string) result {
	c.t.Helper()
	r := c.ok(name, append([]string{"--json"}, args...)...)
	if err := json.Unmarshal([]byte(r.stdout), v); err != nil {
		c.t.Fatalf("stdout is not JSON (%v):\n%s", err, r)
	}
	return r
}

// fails runs thrum as name and checks the exit code and that stderr
// contains every one of want.
func (c *thrumCLI) fails(code int, name string, args []string, want ...string) result {
	c.t.Helper()
	r := c.as(name, args...)
	if r.code != code {
		c.t.Errorf("want exit %d, got:\n%s", code, r)
		return r
	}
	for _, w := range want {
		if !strings.Contains(r.stderr, w) {
			c.t.Errorf("stderr lacks %q:\n%s", w, r)
		}
	}
	return r
}

// cleanEnv is the process environment without THRUM_* variables, so a
// developer's own THRUM_NAME cannot leak into the binary tests.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "THRUM_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// contains fails the test unless s contains every one of want.
func contains(t testing.TB, what, s string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(s, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, s)
		}
	}
}

// lacks fails the test if s contains any of bad.
func lacks(t testing.TB, what, s string, bad ...string) {
	t.Helper()
	for _, b := range bad {
		if strings.Contains(s, b) {
			t.Errorf("%s has %q but should not:\n%s", what, b, s)
		}
	}
}

// startDaemon runs `daemon start --json` with flags and registers a cleanup that
// stops the daemon: `daemon stop`, then SIGKILL by the recorded pid and by
// the pid file if anything is still alive. It also fails the test if the
// daemon's log shows a data race or a panic. It returns the parsed status.
func startDaemon(t testing.TB, c *thrumCLI, flags ...string) map[string]any {
	t.Helper()
	pidFile := filepath.Join(c.repo, ".thrum", "var", "thrum.pid")
	logFile := filepath.Join(c.repo, ".thrum", "var", "daemon.log")
	var pid int
	t.Cleanup(func() {
		r := c.run("daemon", "stop")
		if r.code != 0 {
			t.Errorf("cleanup: %s", r)
		}
		for _, p := range []int{pid, pidFromFile(pidFile)} {
			if p > 0 && alive(p) && !zombie(p) {
				t.Errorf("cleanup: daemon pid %d still alive after daemon stop: killing it", p)
				syscall.Kill(p, syscall.SIGKILL)
			}
		}
		if b, err := os.ReadFile(logFile); err == nil {
			for _, bad := range []string{"WARNING: DATA RACE", "panic:", "level=ERROR"} {
				if bytes.Contains(b, []byte(bad)) {
					t.Errorf("daemon log has %q:\n%s", bad, b)
				}
			}
		}
	})
	var st map[string]any
	r := c.okJSON(&st, "", append([]string{"daemon", "start"}, flags...)...)
	n, ok := st["pid"].(float64)
	if !ok || n <= 0 {
		t.Fatalf("daemon start --json has no pid:\n%s", r)
	}
	pid = int(n)
	return st
}

func pidFromFile(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

// jsonField reads a dotted path ("health.status") out of decoded JSON;
// ok is false when a key on the way is missing.
func jsonField(v any, path string) (_ any, ok bool) {
	for _, k := range strings.Split(path, ".") {
		m, isMap := v.(map[string]any)
		if !isMap {
			return nil, false
		}
		if v, ok = m[k]; !ok {
			return nil, false
		}
	}
	return v, true
}

// hasKeys fails the test unless the JSON object v has every key path.
func hasKeys(t testing.TB, what string, v any, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if _, ok := jsonField(v, k); !ok {
			b, _ := json.Marshal(v)
			t.Errorf("%s --json lacks %q: %s", what, k, b)
		}
	}
}

// str returns the string at a dotted path, or "".
func str(v any, path string) string {
	x, _ := jsonField(v, path)
	s, _ := x.(string)
	return s
}

// num returns the number at a dotted path, or -1.
func num(v any, path string) float64 {
	x, _ := jsonField(v, path)
	if n, ok := x.(float64); ok {
		return n
	}
	return -1
}
