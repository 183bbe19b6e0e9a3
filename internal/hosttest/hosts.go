package hosttest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Host is an agent host CLI at a pinned version from npm, and the model
// API it speaks.
type Host struct {
	Name    string // as `thrum setup` and `thrum hook` name it
	Package string // on npm
	Version string
	Bin     string // the command in the package's node_modules/.bin
	API     string
}

// The hosts, at the versions the harness was written against. A new
// version is a change here and a live run (docs/hosts.md, "Checking a
// host").
var (
	Claude   = Host{"claude", "@anthropic-ai/claude-code", "2.1.328", "claude", APIAnthropic}
	Codex    = Host{"codex", "@openai/codex", "0.169.0", "codex", APIResponses}
	Gemini   = Host{"gemini", "@google/gemini-cli", "0.61.0", "gemini", APIGemini}
	OpenCode = Host{"opencode", "opencode-ai", "1.18.33", "opencode", APIChat}
	Hosts    = []Host{Claude, Codex, Gemini, OpenCode}
)

// LiveEnv is the variable that turns on the live part: THRUM_HOSTS=1.
const LiveEnv = "THRUM_HOSTS"

// Live skips the test unless THRUM_HOSTS=1: the live part needs the host
// CLIs from npm, tmux, and minutes.
func Live(t testing.TB) {
	t.Helper()
	if os.Getenv(LiveEnv) != "1" {
		t.Skip("live host test: runs the real host CLIs from npm against a mock model; set THRUM_HOSTS=1 to run it (docs/hosts.md, \"Checking a host\")")
	}
}

// CacheDir is where the hosts are installed: $THRUM_HOSTS_CACHE, else
// thrum/hosts in the user's cache directory.
func CacheDir() (string, error) {
	if d := os.Getenv("THRUM_HOSTS_CACHE"); d != "" {
		return d, nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, "thrum", "hosts"), nil
}

var installs sync.Map // Host.Name → *sync.Once-guarded install result

type installResult struct {
	once sync.Once
	path string
	err  error
}

// Path returns the host's executable, installing the pinned version into
// CacheDir with npm first if it is not there (npm reaches only its
// registry; nothing is installed globally).
func (h Host) Path(t testing.TB) string {
	t.Helper()
	v, _ := installs.LoadOrStore(h.Name, &installResult{})
	r := v.(*installResult)
	r.once.Do(func() { r.path, r.err = h.install() })
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.path
}

func (h Host) install() (string, error) {
	cache, err := CacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, h.Name+"-"+h.Version)
	bin := filepath.Join(dir, "node_modules", ".bin", h.Bin)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, "npm", "install", "--no-audit", "--no-fund", "--no-save", "--prefix", dir, h.Package+"@"+h.Version)
	if out, err := c.CombinedOutput(); err != nil {
		return "", fmt.Errorf("installing %s@%s into %s with npm: %w\n%s", h.Package, h.Version, dir, err, out)
	}
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("npm installed %s@%s but %s is missing", h.Package, h.Version, bin)
	}
	return bin, nil
}

// The mock model's fake key: hosts want one.
const mockKey = "sk-mock-hosttest-0123456789abcdefghij"

// Prepare makes the scene's HOME the host's first start already done,
// pointed at the mock model, with the repository trusted: what a user
// does once by hand. It does not run `thrum setup`.
func (s *Scene) Prepare(h Host) {
	s.T.Helper()
	s.prepare(h, true)
}

// PrepareUntrusted is Prepare without the repository's trust: the host
// asks for it at its first start there, as it asks a user who has just
// run `thrum setup` (see TrustAsPrinted).
func (s *Scene) PrepareUntrusted(h Host) {
	s.T.Helper()
	s.prepare(h, false)
}

func (s *Scene) prepare(h Host, trusted bool) {
	s.T.Helper()
	var err error
	switch h.Name {
	case "claude":
		projects := map[string]any{}
		if trusted {
			projects[s.Repo] = map[string]any{
				"hasTrustDialogAccepted":        true,
				"hasCompletedProjectOnboarding": true,
				"enabledMcpjsonServers":         []string{"thrum"},
				"allowedTools":                  []string{},
			}
		}
		s.Setenv("ANTHROPIC_BASE_URL="+s.Model.URL, "ANTHROPIC_API_KEY="+mockKey, "DISABLE_AUTOUPDATER=1",
			"DISABLE_TELEMETRY=1", "DISABLE_ERROR_REPORTING=1", "IS_SANDBOX=1", "ANTHROPIC_MODEL=claude-sonnet-4-5",
			"ANTHROPIC_SMALL_FAST_MODEL=claude-haiku-4-5")
		err = writeJSONFile(filepath.Join(s.Home, ".claude.json"), map[string]any{
			"hasCompletedOnboarding":        true,
			"theme":                         "dark",
			"bypassPermissionsModeAccepted": true,
			"customApiKeyResponses":         map[string]any{"approved": []string{mockKey[len(mockKey)-20:]}, "rejected": []string{}},
			"projects":                      projects,
		})
	case "codex":
		home := filepath.Join(s.Home, ".codex")
		s.Setenv("CODEX_HOME="+home, "MOCK_API_KEY="+mockKey)
		trust := ""
		if trusted {
			trust = fmt.Sprintf("\n[projects.%q]\ntrust_level = \"trusted\"\n", s.Repo)
		}
		err = writeFile(filepath.Join(home, "config.toml"), fmt.Sprintf(`model = "mock-model"
model_provider = "mock"
check_for_update_on_startup = false

[model_providers.mock]
name = "mock"
base_url = %q
wire_api = "responses"
env_key = "MOCK_API_KEY"
request_max_retries = 0
stream_max_retries = 0
%s`, s.Model.URL+"/v1", trust))
	case "gemini":
		s.Setenv("GEMINI_API_KEY="+mockKey, "GOOGLE_GEMINI_BASE_URL="+s.Model.URL, "GEMINI_CLI_NO_RELAUNCH=true")
		dir := filepath.Join(s.Home, ".gemini")
		folders := map[string]any{}
		if trusted {
			folders[s.Repo] = "TRUST_FOLDER"
		}
		err = errors.Join(
			writeJSONFile(filepath.Join(dir, "settings.json"), map[string]any{
				"security":  map[string]any{"auth": map[string]any{"selectedType": "gemini-api-key"}, "folderTrust": map[string]any{"enabled": true}},
				"general":   map[string]any{"disableAutoUpdate": true, "disableUpdateNag": true},
				"privacy":   map[string]any{"usageStatisticsEnabled": false},
				"telemetry": map[string]any{"enabled": false},
				"ui":        map[string]any{"hideTips": true, "hideBanner": true},
				// A fixed model: else a classifier request picks one.
				"model": map[string]any{"name": "gemini-2.5-flash"},
			}),
			writeJSONFile(filepath.Join(dir, "trustedFolders.json"), folders))
	case "opencode":
		s.Setenv("OPENCODE_DISABLE_AUTOUPDATE=true", "OPENCODE_DISABLE_MODELS_FETCH=true", "OPENCODE_DISABLE_SHARE=true")
		err = writeJSONFile(filepath.Join(s.Home, ".config", "opencode", "opencode.json"), map[string]any{
			"$schema":    "https://opencode.ai/config.json",
			"model":      "mock/mock-model",
			"autoupdate": false,
			"share":      "disabled",
			"permission": map[string]any{"edit": "allow", "bash": "allow", "webfetch": "allow"},
			"provider": map[string]any{"mock": map[string]any{
				"npm":     "@ai-sdk/openai-compatible",
				"name":    "mock",
				"options": map[string]any{"baseURL": s.Model.URL + "/v1", "apiKey": mockKey},
				"models":  map[string]any{"mock-model": map[string]any{"name": "mock-model", "tool_call": true}},
			}},
		})
	default:
		err = fmt.Errorf("no host %q", h.Name)
	}
	if err != nil {
		s.T.Fatal(err)
	}
}

func writeFile(path, text string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(text), 0o644)
}

func writeJSONFile(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return writeFile(path, string(b)+"\n")
}

// HeadlessArgs are the host's arguments for one non-interactive turn on
// prompt, with every tool allowed: `claude -p`, `codex exec`, `gemini
// -p`, `opencode run`.
func HeadlessArgs(h Host, prompt string) []string {
	switch h.Name {
	case "claude":
		return []string{"-p", prompt, "--output-format", "json", "--dangerously-skip-permissions"}
	case "codex":
		return []string{"exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", prompt}
	case "gemini":
		return []string{"--approval-mode", "yolo", "-p", prompt}
	case "opencode":
		return []string{"run", "--model", "mock/mock-model", prompt}
	}
	return nil
}

// Headless runs the host once on prompt (HeadlessArgs, or args when
// given) in the repository and returns its combined output; it fails the
// test if the host does not finish within d.
func (s *Scene) Headless(h Host, d time.Duration, args ...string) (string, error) {
	s.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	c := s.Command(ctx, h.Path(s.T), args...)
	c.WaitDelay = 5 * time.Second
	out, err := c.CombinedOutput()
	if ctx.Err() != nil {
		s.T.Fatalf("%s %s did not finish within %v:\n%s", h.Name, strings.Join(args, " "), d, out)
	}
	return string(out), err
}
