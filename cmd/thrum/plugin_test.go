package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/thrumhq/thrum/mcpserver"
)

// pluginDir is the Claude Code plugin, from this package's directory.
var pluginDir = filepath.Join("..", "..", "integrations", "claude-plugin")

// decodeStrict decodes the JSON file at path into v, refusing fields v
// does not have: the plugin's files hold only what the documented schemas
// name (Claude Code drops an unknown manifest key and refuses an unknown
// key in a monitors or channels entry).
func decodeStrict(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if dec.More() {
		t.Fatalf("%s: data after the JSON value", path)
	}
}

// The plugin's files, as Claude Code's plugin reference documents them.
type (
	pluginManifest struct {
		Schema      string `json:"$schema"`
		Name        string `json:"name"`
		Version     string `json:"version"`
		Description string `json:"description"`
		Author      struct{ Name, Email, URL string }
		Homepage    string   `json:"homepage"`
		Repository  string   `json:"repository"`
		License     string   `json:"license"`
		Keywords    []string `json:"keywords"`
		Network     struct {
			Hosts []string `json:"hosts"`
		} `json:"network"`
		Channels []struct {
			Server      string         `json:"server"`
			DisplayName string         `json:"displayName"`
			UserConfig  map[string]any `json:"userConfig"`
		} `json:"channels"`
	}
	pluginMCP struct {
		MCPServers map[string]struct {
			Type    string            `json:"type"`
			Command string            `json:"command"`
			Args    []string          `json:"args"`
			Env     map[string]string `json:"env"`
		} `json:"mcpServers"`
	}
	pluginHooks struct {
		Description string `json:"description"`
		Hooks       map[string][]struct {
			Matcher string `json:"matcher"`
			Hooks   []struct {
				Type    string `json:"type"`
				Command string `json:"command"`
				Timeout int    `json:"timeout"`
			} `json:"hooks"`
		} `json:"hooks"`
	}
	pluginMonitor struct {
		Name        string `json:"name"`
		Command     string `json:"command"`
		Description string `json:"description"`
		When        string `json:"when"`
	}
	marketplace struct {
		Name        string `json:"name"`
		Description string `json:"description"`
		Owner       struct{ Name, Email string }
		Plugins     []struct {
			Name        string `json:"name"`
			Source      string `json:"source"`
			Description string `json:"description"`
		} `json:"plugins"`
	}
)

// TestClaudePlugin checks the plugin's files against the documented
// schemas and against thrum itself: every file parses; the MCP server
// pushes no channel (which would claim what a session may drop); the hooks are exactly what thrum setup claude
// writes; the listener uses only the server's tools; the marketplace at
// the repository's root offers this plugin; and every command the plugin
// runs is one the built binary has, with the flags it gives; and the
// plugin carries the project's license, since it is installed on its own.
func TestClaudePlugin(t *testing.T) {
	t.Parallel()
	license, err := os.ReadFile(filepath.Join("..", "..", "LICENSE"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(pluginDir, "LICENSE")); err != nil || !bytes.Equal(got, license) {
		t.Errorf("the plugin's LICENSE is not the project's (err %v)", err)
	}
	var m pluginManifest
	decodeStrict(t, filepath.Join(pluginDir, ".claude-plugin", "plugin.json"), &m)
	if !regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`).MatchString(m.Name) || m.Version == "" || m.Description == "" || m.Author.Name == "" {
		t.Errorf("plugin.json needs a kebab-case name, a version, a description and an author: %+v", m)
	}
	var servers pluginMCP
	decodeStrict(t, filepath.Join(pluginDir, ".mcp.json"), &servers)
	// A channel push claims the message; a session that does not allow the
	// channel drops it unseen. So the plugin declares no channel and its
	// server runs without --channel: the monitor and the hooks deliver.
	if len(m.Channels) != 0 {
		t.Errorf("plugin.json declares channels %+v: a session that does not allow them would lose what they claim", m.Channels)
	}
	srv, ok := servers.MCPServers["thrum"]
	if !ok {
		t.Fatalf(".mcp.json has no thrum server: %+v", servers.MCPServers)
	}
	if slices.Contains(srv.Args, "--channel") {
		t.Errorf("the plugin's server runs with --channel: %v", srv.Args)
	}
	commands := [][]string{append([]string{srv.Command}, srv.Args...)}

	var hooks pluginHooks
	decodeStrict(t, filepath.Join(pluginDir, "hooks", "hooks.json"), &hooks)
	for event, groups := range hooks.Hooks {
		if !slices.Contains(hostHookEvents["claude"], event) {
			t.Errorf("hook event %s: thrum setup claude hooks only %v", event, hostHookEvents["claude"])
		}
		for _, g := range groups {
			for _, h := range g.Hooks {
				if h.Type != "command" || !isThrumHook(h.Command, "claude", event) {
					t.Errorf("%s hook %+v does not run thrum hook claude %s", event, h, kebab(event))
				}
				commands = append(commands, strings.Fields(h.Command))
			}
		}
	}
	// The same hooks as thrum setup claude writes into a new project.
	c := newSetupCLI(t)
	if r := c.setup("claude"); r.code != 0 {
		t.Fatalf("setup claude:\n%s", r)
	}
	// (Its permission rule names the server as setup writes it; a
	// plugin's tools carry the plugin's prefix and are the user's to allow.)
	var want, got struct{ Hooks any }
	if b, err := os.ReadFile(filepath.Join(c.repo, ".claude", "settings.json")); err != nil || json.Unmarshal(b, &want) != nil {
		t.Fatalf("setup's .claude/settings.json: %v\n%s", err, b)
	}
	decodeStrict(t, filepath.Join(pluginDir, "hooks", "hooks.json"), &got)
	if !reflect.DeepEqual(got, want) || want.Hooks == nil {
		t.Errorf("hooks/hooks.json differs from the hooks thrum setup claude writes:\n%+v\nwant:\n%+v", got, want)
	}

	var monitors []pluginMonitor
	decodeStrict(t, filepath.Join(pluginDir, "monitors", "monitors.json"), &monitors)
	names := map[string]bool{}
	for _, mon := range monitors {
		if mon.Name == "" || mon.Command == "" || mon.Description == "" || names[mon.Name] {
			t.Errorf("monitor %+v: name (unique), command and description are required", mon)
		}
		if mon.When != "" && mon.When != "always" && !strings.HasPrefix(mon.When, "on-skill-invoke:") {
			t.Errorf("monitor %s: when %q is neither always nor on-skill-invoke:SKILL", mon.Name, mon.When)
		}
		names[mon.Name] = true
		commands = append(commands, strings.Fields(mon.Command))
	}
	if len(monitors) == 0 {
		t.Error("the plugin has no monitor")
	}

	agents, _ := filepath.Glob(filepath.Join(pluginDir, "agents", "*.md"))
	if len(agents) == 0 {
		t.Error("the plugin has no agents")
	}
	for _, a := range agents {
		checkAgent(t, a, pluginToolPrefix)
	}
	// The listener is thrum setup's, under the names Claude Code gives a
	// plugin's tools: with setup's names Claude Code refuses to start it.
	listener, _ := os.ReadFile(filepath.Join(pluginDir, "agents", "message-listener.md"))
	if want := listenerAgent("message-listener", pluginToolPrefix); string(listener) != want {
		t.Errorf("agents/message-listener.md differs from thrum setup's listener:\n%s\nwant:\n%s", listener, want)
	}

	var mk marketplace
	decodeStrict(t, filepath.Join("..", "..", ".claude-plugin", "marketplace.json"), &mk)
	if len(mk.Plugins) != 1 || mk.Plugins[0].Name != m.Name || filepath.Clean(filepath.Join("..", "..", mk.Plugins[0].Source)) != filepath.Clean(pluginDir) {
		t.Errorf("the marketplace does not offer this plugin: %+v", mk.Plugins)
	}

	checkCommands(t, commands)
}

// pluginToolPrefix is how Claude Code names the tools of the plugin
// thrum's server thrum: mcp__plugin_PLUGIN_SERVER__TOOL.
const pluginToolPrefix = "mcp__plugin_thrum_thrum__"

// checkAgent reads a sub-agent's front matter: a name, a description, and
// tools that are thrum's MCP tools (prefix then the tool's name) or Claude
// Code's.
func checkAgent(t *testing.T, path, prefix string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	front, _, ok := strings.Cut(strings.TrimPrefix(string(b), "---\n"), "\n---\n")
	if !ok || !strings.HasPrefix(string(b), "---\n") {
		t.Fatalf("%s has no front matter", path)
	}
	fields := map[string]string{}
	for _, line := range strings.Split(front, "\n") {
		k, v, _ := strings.Cut(line, ":")
		fields[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	if fields["name"] == "" || fields["description"] == "" {
		t.Errorf("%s: name and description are required: %v", path, fields)
	}
	for _, tool := range strings.Split(fields["tools"], ",") {
		tool = strings.TrimSpace(tool)
		if strings.HasPrefix(tool, "mcp__") && !strings.HasPrefix(tool, prefix) {
			t.Errorf("%s uses %s: thrum's tools are %sNAME there", path, tool, prefix)
		}
		name, isThrum := strings.CutPrefix(tool, prefix)
		if isThrum && !slices.Contains(mcpserver.ToolNames, name) {
			t.Errorf("%s uses %s: thrum's MCP server has no tool %s (it has %v)", path, tool, name, mcpserver.ToolNames)
		}
	}
}

// checkCommands runs the built binary's help and checks each command:
// thrum, a command its --help lists, flags that command's --help shows,
// and for thrum hook, a host and event its help names.
func checkCommands(t *testing.T, commands [][]string) {
	t.Helper()
	c := &thrumCLI{t: t, repo: t.TempDir(), bin: newSetupCLI(t).bin}
	top := c.run("--help")
	listed := helpCommands(top.stdout)
	if len(listed) < 20 {
		t.Fatalf("thrum --help lists %d commands:\n%s", len(listed), top.stdout)
	}
	for _, cmd := range commands {
		if len(cmd) < 2 || cmd[0] != "thrum" {
			t.Errorf("command %q does not run thrum", cmd)
			continue
		}
		sub := cmd[1]
		if len(cmd) > 2 && slices.Contains(listed, cmd[1]+" "+cmd[2]) {
			sub = cmd[1] + " " + cmd[2]
		}
		if !slices.Contains(listed, sub) && !slices.ContainsFunc(listed, func(l string) bool { return strings.HasPrefix(l, sub+" ") }) {
			t.Errorf("%q: thrum --help lists no %s command", strings.Join(cmd, " "), sub)
			continue
		}
		help := c.run(append(strings.Fields(sub), "--help")...).stdout
		for _, arg := range cmd {
			flag, _, _ := strings.Cut(arg, "=")
			if !strings.HasPrefix(flag, "--") || strings.Contains(help, flag) {
				continue
			}
			t.Errorf("%q: thrum %s --help shows no %s", strings.Join(cmd, " "), sub, flag)
		}
	}
	// Every hook setup writes, for every host, is one thrum hook takes.
	hookHelp := c.run("hook", "--help")
	for host, events := range hostHookEvents {
		for _, ev := range events {
			if !helpNames(hookHelp.stdout, host, kebab(ev)) {
				t.Errorf("thrum hook --help names no %s %s, which setup %s writes:\n%s", host, kebab(ev), host, hookHelp.stdout)
			}
		}
	}
}

// helpCommands reads the command paths from kong's "Commands:" list.
func helpCommands(help string) []string {
	_, list, _ := strings.Cut(help, "\nCommands:\n")
	var out []string
	for _, line := range strings.Split(list, "\n") {
		if !strings.HasPrefix(line, "  ") || strings.HasPrefix(line, "   ") {
			if strings.TrimSpace(line) != "" && !strings.HasPrefix(line, " ") {
				break // the next section
			}
			continue
		}
		name, _, _ := strings.Cut(strings.TrimSpace(line), "  ")
		out = append(out, name)
	}
	return out
}

// helpNames reports whether a line of help has both words: the host and
// the event, however the help lays its list out.
func helpNames(help, host, event string) bool {
	split := func(r rune) bool { return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') }
	for _, line := range strings.Split(help, "\n") {
		words := strings.FieldsFunc(line, split)
		if slices.Contains(words, host) && slices.Contains(words, event) {
			return true
		}
	}
	return false
}

// TestHelpNamesHookPairs checks the reading of thrum hook's help that
// TestClaudePlugin relies on, on the layouts such a help may use.
func TestHelpNamesHookPairs(t *testing.T) {
	t.Parallel()
	help := "Hosts and events:\n  claude  session-start|user-prompt-submit|post-tool-use|stop\n  codex: session-start, stop\n\nExamples:\n  thrum hook gemini after-agent\n"
	for _, pair := range [][2]string{{"claude", "post-tool-use"}, {"codex", "stop"}, {"gemini", "after-agent"}} {
		if !helpNames(help, pair[0], pair[1]) {
			t.Errorf("helpNames misses %s %s", pair[0], pair[1])
		}
	}
	for _, pair := range [][2]string{{"codex", "user-prompt-submit"}, {"cursor", "stop"}, {"claude", "start"}} {
		if helpNames(help, pair[0], pair[1]) {
			t.Errorf("helpNames finds %s %s, which the help does not name", pair[0], pair[1])
		}
	}
	got := helpCommands("Usage: thrum <command>\n\nCommands:\n  init                 Prepare.\n  daemon start         Start the daemon in the background and wait until it\n                       answers.\n  mcp serve            Serve.\n\nRun \"thrum <command> --help\" for more information.\n")
	if !slices.Equal(got, []string{"init", "daemon start", "mcp serve"}) {
		t.Errorf("helpCommands = %q", got)
	}
}
