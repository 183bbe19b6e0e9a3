package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/thrumhq/thrum/identity"
	"github.com/thrumhq/thrum/internal/jsonedit"
)

// SetupCmd writes thrum's MCP server and hooks into an agent host's own
// configuration files.
type SetupCmd struct {
	Host    string `arg:"" enum:"claude,codex,cursor,gemini,opencode" help:"The host: claude, codex, cursor, gemini or opencode."`
	Agent   string `placeholder:"NAME" help:"The agent the host works as: its MCP server and hooks get --agent-id NAME (without it, they take THRUM_NAME or the one identity file when the host starts them)."`
	DryRun  bool   `name:"dry-run" help:"Print the changes as a diff and write nothing."`
	Channel bool   `help:"Claude Code: say how to start a session with the channel, which pushes each message into it (the channel is chosen per launch, never written into the files)."`
	User    bool   `help:"Write the host's files in your home directory, for every project, instead of this project's."`
	NoWake  bool   `name:"no-wake" help:"Claude Code, Codex and opencode: do not wake an idle session when mail comes (the MCP server's --wake; opencode's plugin)."`
}

func (c *SetupCmd) Help() string {
	return `Adds thrum to the host's configuration: the MCP server (thrum mcp serve)
and, where the host has command hooks, hooks that hand unread messages to
the agent (thrum hook HOST EVENT). It merges into what is there: other
servers, hooks, keys, their order, layout and comments stay as they were,
and a second run changes nothing. A file it cannot parse stops it before
anything is written. It needs no daemon.

It writes only regular files of yours inside the project (with --user,
your home directory): a symlink that leads out of it, a special file or
another user's file stops it. A second run with other flags shows what
it changes. Only thrum's own entries change: your path to thrum and
your words around a hook command stay.

Without --agent the entries name no agent, so project files can be
committed: in each worktree thrum acts as THRUM_NAME or the one identity
file there. With --agent (or --agent-id) they are that agent's: keep
such files out of git.

  claude    .mcp.json, .claude/settings.json, .claude/agents/thrum-listener.md
            (--user: ~/.claude.json, ~/.claude/...)
  codex     .codex/config.toml, .codex/hooks.json  (--user: ~/.codex/)
  cursor    .cursor/mcp.json, .cursor/hooks.json  (--user: ~/.cursor/)
  gemini    .gemini/settings.json  (--user: ~/.gemini/settings.json)
  opencode  opencode.json, .opencode/plugins/thrum.js
            (--user: ~/.config/opencode/)

Examples:
  thrum setup claude --agent alice
  thrum setup claude --dry-run
  thrum setup codex --user --agent alice`
}

// setupHost is what setup writes for one host.
type setupHost struct {
	name  string // as the user knows it
	files func(s *setupSpec) []setupFile
	check func(s *setupSpec) []string // what to do before the check message works
}

// setupSpec is one run's choices.
type setupSpec struct {
	host    string
	agent   string // "" when the host should resolve it
	channel bool
	noWake  bool
	user    bool
	root    string // the project
	home    string // the user's home directory
	env     func(string) string
}

// setupFile is one file setup merges into, under base (the project, the
// home directory, or a host's own directory there): an edit of a JSON (or
// JSONC) document, or of its text.
type setupFile struct {
	base, path string
	what       string // what thrum adds there, for the report
	jsonc      bool
	json       func(d *jsonedit.Doc) error
	text       func(src []byte) ([]byte, error)
}

var setupHosts = map[string]setupHost{
	"claude": {name: "Claude Code", files: claudeFiles, check: func(s *setupSpec) []string {
		var notes []string
		if !s.user {
			notes = append(notes, `start Claude Code in this project: trust the folder ("Yes, proceed"; the preselected "No, exit" quits), then at "New MCP server found in this project: thrum" choose "Use this MCP server": the preselected "Continue without using this MCP server" leaves thrum's tools off`)
		}
		if s.channel {
			notes = append(notes, "for the channel, start each session that should have it as `THRUM_CHANNEL=1 claude --dangerously-load-development-channels server:thrum`")
		}
		return notes
	}},
	"codex": {name: "Codex", files: codexFiles, check: func(s *setupSpec) []string {
		var notes []string
		if !s.user {
			notes = append(notes, "Codex reads .codex/ only in a project you trust: start codex here and trust it")
		}
		return append(notes, "in the Codex TUI, open /hooks and trust thrum's hooks: `codex exec` skips hooks not trusted there, and trust is per command, so trust them again whenever setup changes one")
	}},
	"cursor": {name: "Cursor", files: cursorFiles, check: func(*setupSpec) []string {
		return []string{"enable the thrum server in Cursor's MCP settings if Cursor lists it as disabled"}
	}},
	"gemini": {name: "Gemini CLI", files: geminiFiles, check: func(*setupSpec) []string {
		return []string{"Gemini CLI reads .gemini/settings.json only in a trusted folder: start gemini here and trust the folder (`gemini -p` refuses an untrusted one, and --skip-trust loads no project hooks); after you trust it, Gemini CLI exits to restart: start it again"}
	}},
	"opencode": {name: "opencode", files: opencodeFiles, check: func(s *setupSpec) []string {
		if s.noWake {
			notes := []string{"opencode has no command hooks: the agent reads messages when it calls check_messages or wait_for_message"}
			if _, err := os.Lstat(opencodePluginPath(s)); err == nil {
				notes = append(notes, "delete "+opencodePluginPath(s)+" (an earlier setup wrote it; opencode loads every plugin there) for no wake")
			}
			return notes
		}
		return []string{"opencode has no command hooks: thrum's plugin rings an idle session when mail comes (once it has a session: before the first prompt nothing rings), and the agent reads messages when it calls check_messages or wait_for_message"}
	}},
}

// hostHookEvents are the events setup hooks, for each host, in the host's
// own spelling: every pair thrum hook answers (hookEvents), whose help
// lists them.
var hostHookEvents = func() map[string][]string {
	m := map[string][]string{}
	for _, h := range hookEvents {
		m[h.host] = append(m[h.host], h.name)
	}
	return m
}()

// kebab spells a host's event name as thrum hook takes it:
// UserPromptSubmit is user-prompt-submit.
func kebab(event string) string {
	var b strings.Builder
	for i, r := range event {
		if r >= 'A' && r <= 'Z' {
			if i > 0 {
				b.WriteByte('-')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

func (s *setupSpec) agentArgs() []string {
	if s.agent == "" {
		return nil
	}
	return []string{"--agent-id", s.agent}
}

// mcpArgs are the arguments of the MCP server's command, thrum: with
// --wake HOST in Claude Code and Codex (not with --no-wake). The channel
// is not among them: it is chosen per launch (THRUM_CHANNEL=1), since a
// project's .mcp.json is shared.
func (s *setupSpec) mcpArgs() []string {
	args := []string{"mcp", "serve"}
	if (s.host == "claude" || s.host == "codex") && !s.noWake {
		args = append(args, "--wake="+s.host)
	}
	return append(args, s.agentArgs()...)
}

func (s *setupSpec) hookCommand(event string) string {
	return strings.Join(append([]string{"thrum", "hook", s.host, kebab(event)}, s.agentArgs()...), " ")
}

// hookCommandFrom is an existing thrum hook command with this run's agent:
// the user's path to thrum and other words stay, only --agent-id changes.
func (s *setupSpec) hookCommandFrom(old string) string {
	f := strings.Fields(old)
	out := slices.Clone(f[:4])
	for i := 4; i < len(f); i++ {
		switch {
		case f[i] == "--agent-id" && i+1 < len(f):
			i++
		case strings.HasPrefix(f[i], "--agent-id="):
		default:
			out = append(out, f[i])
		}
	}
	out = append(out, s.agentArgs()...)
	if slices.Equal(out, f) {
		return old
	}
	return strings.Join(out, " ")
}

// hookEntry is thrum's hook for event: its command, the host's timeout
// from hookTimeout (Claude Code and Codex take seconds, Gemini CLI
// milliseconds), and the line Codex shows while it runs and names it by.
func (s *setupSpec) hookEntry(event string) hookCommand {
	h := hookCommand{Type: "command", Command: s.hookCommand(event)}
	switch t := hookTimeout[s.host]; s.host {
	case "claude", "codex":
		h.Timeout = int64(t / time.Second)
	case "gemini":
		h.Timeout = t.Milliseconds()
	case "cursor":
		h.Type = "" // Cursor's entries have no type
	}
	if s.host == "codex" {
		h.StatusMessage = "thrum: checking messages"
	}
	return h
}

// base is the directory the host's files are in: the project, or with
// --user the home directory.
func (s *setupSpec) base() string {
	if s.user {
		return s.home
	}
	return s.root
}

// file is a setupFile at rel (project) or, with --user, at user under the
// home directory.
func (s *setupSpec) file(project, user string) setupFile {
	if s.user {
		return setupFile{base: s.home, path: filepath.Join(s.home, user)}
	}
	return setupFile{base: s.root, path: filepath.Join(s.root, project)}
}

func claudeFiles(s *setupSpec) []setupFile {
	server := s.file(".mcp.json", ".claude.json")
	server.what = "the MCP server thrum"
	server.json = func(d *jsonedit.Doc) error {
		return mergeServer(d, []any{"mcpServers", "thrum"}, "type", "stdio", "command", "thrum", "args", s.mcpArgs())
	}
	hooks := s.file(".claude/settings.json", ".claude/settings.json")
	hooks.what = hooksWhat(s.host) + "; thrum's tools allowed"
	// A headless claude -p cannot ask for a tool's permission and refuses
	// it: thrum's tools are allowed by the server's rule, as Gemini CLI's
	// setup trusts the server.
	hooks.json = func(d *jsonedit.Doc) error {
		if err := groupedHooks(d, s); err != nil {
			return err
		}
		return ensureMember(d, claudeToolsRule, "permissions", "allow")
	}
	listener := s.file(".claude/agents/thrum-listener.md", ".claude/agents/thrum-listener.md")
	listener.what = "the sub-agent thrum-listener"
	listener.text = func([]byte) ([]byte, error) { return []byte(listenerAgent("thrum-listener", "mcp__thrum__")), nil }
	return []setupFile{server, hooks, listener}
}

// listenerAgent is the Claude Code sub-agent that waits in the background
// for the agent's messages, named name, calling thrum's tools by prefix:
// mcp__thrum__ where thrum setup wrote the server, mcp__plugin_thrum_thrum__
// in the plugin, whose agents/message-listener.md a test checks against
// this text.
func listenerAgent(name, prefix string) string {
	return strings.NewReplacer("{{name}}", name, "{{tool}}", prefix).Replace(`---
name: {{name}}
description: Waits in the background for thrum messages addressed to this agent and reports them. Launch it as a background task; re-launch it after it returns.
tools: {{tool}}check_messages, {{tool}}wait_for_message
model: haiku
---

You watch this agent's thrum inbox so the main agent does not have to poll.

1. Call ` + "`{{tool}}check_messages`" + `. If it returns ` + "`status: \"messages\"`" + `,
   report them (format below) and stop.
2. Otherwise call ` + "`{{tool}}wait_for_message`" + ` with ` + "`timeout: 300`" + `.
   - ` + "`status: \"message_received\"`" + `: report the message and stop.
   - ` + "`status: \"timeout\"`" + `: reply exactly ` + "`NO_MESSAGES_TIMEOUT`" + ` and stop.
   - ` + "`status: \"shutdown\"`" + `: the MCP server is stopping; reply exactly
     ` + "`LISTENER_SHUTDOWN`" + ` and stop.
   - ` + "`queue_overflow`" + ` in the result: some messages wait unread; add a line
     ` + "`MORE_UNREAD: call check_messages`" + ` to your report.
3. If a tool returns an error, reply ` + "`LISTENER_ERROR: <the error text>`" + ` and
   stop. Never retry in a loop, never send messages, never take other
   actions.

Report each message as:

` + "```" + `
MESSAGES_RECEIVED
FROM: <from> (<from_role>)
PRIORITY: <priority>
CONTENT: <content>
TIMESTAMP: <timestamp>
` + "```" + `

separating several messages with a blank line. Copy the content exactly;
do not summarize it.
`)
}

func codexFiles(s *setupSpec) []setupFile {
	base, dir := s.base(), filepath.Join(s.base(), ".codex")
	if h := s.env("CODEX_HOME"); s.user && h != "" {
		base, dir = h, h
	}
	return []setupFile{
		{base: base, path: filepath.Join(dir, "config.toml"), what: "the MCP server thrum",
			text: func(src []byte) ([]byte, error) { return codexServer(src, s.mcpArgs()) }},
		{base: base, path: filepath.Join(dir, "hooks.json"), what: hooksWhat(s.host),
			json: func(d *jsonedit.Doc) error { return groupedHooks(d, s) }},
	}
}

func cursorFiles(s *setupSpec) []setupFile {
	server := s.file(".cursor/mcp.json", ".cursor/mcp.json")
	server.what = "the MCP server thrum"
	server.json = func(d *jsonedit.Doc) error {
		return mergeServer(d, []any{"mcpServers", "thrum"}, "command", "thrum", "args", s.mcpArgs())
	}
	hooks := s.file(".cursor/hooks.json", ".cursor/hooks.json")
	hooks.what = hooksWhat(s.host)
	return []setupFile{
		server,
		{base: hooks.base, path: hooks.path, what: hooks.what,
			json: func(d *jsonedit.Doc) error {
				if _, ok := d.Get("version"); !ok {
					if _, err := d.Set(1, "version"); err != nil {
						return err
					}
				}
				// Cursor lists commands under each event, with no groups.
				for _, ev := range hostHookEvents[s.host] {
					if err := ensureHook(d, s, ev, []any{"hooks", ev}, nil, s.hookEntry(ev)); err != nil {
						return err
					}
				}
				return nil
			}},
	}
}

func geminiFiles(s *setupSpec) []setupFile {
	f := s.file(".gemini/settings.json", ".gemini/settings.json")
	f.jsonc = true
	f.what = "the MCP server thrum, trusted; " + hooksWhat(s.host)
	// Headless gemini -p leaves out every tool that would ask for
	// approval; a trusted server's tools ask for none.
	f.json = func(d *jsonedit.Doc) error {
		if err := mergeServer(d, []any{"mcpServers", "thrum"}, "command", "thrum", "args", s.mcpArgs(), "trust", true); err != nil {
			return err
		}
		return groupedHooks(d, s)
	}
	return []setupFile{f}
}

// opencodeDir is where opencode's configuration goes, and the directory
// setup may create it under: the project's root, or with --user the
// user's opencode configuration directory.
func opencodeDir(s *setupSpec) (base, dir string) {
	if !s.user {
		return s.root, s.root
	}
	if x := s.env("XDG_CONFIG_HOME"); x != "" {
		return x, filepath.Join(x, "opencode")
	}
	return s.home, filepath.Join(s.home, ".config", "opencode")
}

func opencodeFiles(s *setupSpec) []setupFile {
	base, dir := opencodeDir(s)
	// opencode reads opencode.json or opencode.jsonc: merge into the one there.
	path := filepath.Join(dir, "opencode.json")
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		if _, err := os.Stat(filepath.Join(dir, "opencode.jsonc")); err == nil {
			path = filepath.Join(dir, "opencode.jsonc")
		}
	}
	files := []setupFile{{
		base: base, path: path, jsonc: true, what: "the MCP server thrum",
		json: func(d *jsonedit.Doc) error {
			// opencode's command is the whole argv: the user's path to
			// thrum, if it is one, stays first.
			argv := append([]string{"thrum"}, s.mcpArgs()...)
			if v, _ := d.Get("mcp", "thrum", "command", 0); isThrumBinary(fmt.Sprint(v)) {
				argv[0] = fmt.Sprint(v)
			}
			return mergeObject(d, []any{"mcp", "thrum"}, "type", "local", "command", argv, "enabled", true)
		},
	}}
	if s.noWake {
		return files
	}
	return append(files, setupFile{
		base: base, path: opencodePluginPath(s), what: "the plugin that wakes an idle session",
		text: func([]byte) ([]byte, error) { return opencodePlugin(s), nil },
	})
}

// opencodePluginPath is where thrum's opencode plugin goes: a directory
// opencode loads every plugin of.
func opencodePluginPath(s *setupSpec) string {
	_, dir := opencodeDir(s)
	if !s.user {
		dir = filepath.Join(dir, ".opencode")
	}
	return filepath.Join(dir, "plugins", "thrum.js")
}

// opencodePlugin is thrum's opencode plugin, the whole file: it runs
// `thrum wait --follow --wake` and puts each line, the doorbell's fixed
// ring, before the agent's session as its next prompt
// (client.session.promptAsync), the session being the last top-level one
// created or updated. A ring that fails forgets the session; the mail
// waits for the next. It claims nothing: check_messages does.
func opencodePlugin(s *setupSpec) []byte {
	argv, _ := json.Marshal(append([]string{"thrum", "wait", "--follow", "--wake"}, s.agentArgs()...))
	return []byte(`// thrum wakes this agent's idle opencode session when mail comes: it puts
// one line of thrum's own before the session as its next prompt,
//   thrum: 2 new messages (newest msg_… from bob); call check_messages
// and claims nothing (check_messages brings the messages). Written by
// thrum setup opencode, which rewrites it; --no-wake leaves it out.
import { spawn } from "node:child_process"
import { createInterface } from "node:readline"

const bell = ` + string(argv) + `

export const ThrumWake = async ({ client }) => {
  let session // the agent's session: the last top-level one created or updated
  const p = spawn(bell[0], bell.slice(1), { stdio: ["ignore", "pipe", "ignore"] })
  p.on("error", () => {})
  createInterface({ input: p.stdout }).on("line", (text) => {
    const id = session
    if (!id) return
    client.session
      .promptAsync({ path: { id }, body: { parts: [{ type: "text", text }] } })
      .then((r) => r.error && session === id && (session = undefined), () => session === id && (session = undefined))
  })
  return {
    event: async ({ event }) => {
      const info = event.properties?.info
      if (!info || info.parentID) return
      if (event.type === "session.created" || event.type === "session.updated") session = info.id
      if (event.type === "session.deleted" && info.id === session) session = undefined
    },
  }
}
`)
}

func hooksWhat(host string) string {
	return "hooks on " + strings.Join(hostHookEvents[host], ", ")
}

// claudeToolsRule is Claude Code's permission rule for every tool of the
// MCP server thrum.
const claudeToolsRule = "mcp__thrum"

// ensureMember appends v to the array at path unless it holds v already.
func ensureMember(d *jsonedit.Doc, v any, path ...any) error {
	if l, ok := d.Get(path...); ok {
		if l, ok := l.([]any); ok && slices.Contains(l, v) {
			return nil
		}
	}
	return d.Append(v, path...)
}

// mergeObject sets each key, value pair of kv in the object at path,
// creating it if needed; other members of that object stay.
func mergeObject(d *jsonedit.Doc, path []any, kv ...any) error {
	for i := 0; i < len(kv); i += 2 {
		if _, err := d.Set(kv[i+1], slices.Concat(path, kv[i:i+1])...); err != nil {
			return err
		}
	}
	return nil
}

// mergeServer sets the key, value pairs of kv in thrum's MCP server at
// path, but keeps a command there that is a thrum of the user's own
// (/opt/bin/thrum).
func mergeServer(d *jsonedit.Doc, path []any, kv ...any) error {
	if v, _ := d.Get(slices.Concat(path, []any{"command"})...); isThrumBinary(fmt.Sprint(v)) {
		i := slices.Index(kv, any("command"))
		kv = slices.Delete(kv, i, i+2)
	}
	return mergeObject(d, path, kv...)
}

// isThrumBinary reports whether command names a thrum binary.
func isThrumBinary(command string) bool {
	return strings.TrimSuffix(filepath.Base(command), ".exe") == "thrum"
}

// hookGroup and hookCommand are a hook in the layout Claude Code, Codex
// and Gemini CLI share: a group (matching every occasion, as it has no
// matcher) of commands under each event.
type hookGroup struct {
	Hooks []hookCommand `json:"hooks"`
}

type hookCommand struct {
	Type          string `json:"type,omitempty"`
	Command       string `json:"command"`
	Timeout       int64  `json:"timeout,omitempty"`
	StatusMessage string `json:"statusMessage,omitempty"`
}

func groupedHooks(d *jsonedit.Doc, s *setupSpec) error {
	for _, ev := range hostHookEvents[s.host] {
		if err := ensureHook(d, s, ev, []any{"hooks", ev}, []any{"hooks"}, hookGroup{Hooks: []hookCommand{s.hookEntry(ev)}}); err != nil {
			return err
		}
	}
	return nil
}

// ensureHook makes sure the array at list holds thrum's hook for event:
// an entry whose command runs thrum hook HOST EVENT gets this run's agent
// and thrum's other fields, the rest of its command kept; without one,
// entry is appended. Entries hold their command themselves (inner nil) or
// in the array at inner.
func ensureHook(d *jsonedit.Doc, s *setupSpec, event string, list, inner []any, entry any) error {
	v, _ := d.Get(list...)
	entries, _ := v.([]any)
	for i := range entries {
		at := slices.Concat(list, []any{i})
		commands := [][]any{at} // where the entry's commands are
		if inner != nil {
			commands = nil
			v, _ := d.Get(slices.Concat(at, inner)...)
			l, _ := v.([]any)
			for j := range l {
				commands = append(commands, slices.Concat(at, inner, []any{j}))
			}
		}
		for _, c := range commands {
			path := slices.Concat(c, []any{"command"})
			if v, _ := d.Get(path...); isThrumHook(fmt.Sprint(v), s.host, event) {
				if _, err := d.Set(s.hookCommandFrom(fmt.Sprint(v)), path...); err != nil {
					return err
				}
				h := s.hookEntry(event)
				if h.Timeout != 0 {
					if _, err := d.Set(h.Timeout, slices.Concat(c, []any{"timeout"})...); err != nil {
						return err
					}
				}
				if h.StatusMessage != "" {
					if _, err := d.Set(h.StatusMessage, slices.Concat(c, []any{"statusMessage"})...); err != nil {
						return err
					}
				}
				return nil
			}
		}
	}
	if err := d.Append(entry, list...); err != nil {
		return fmt.Errorf("adding a hook for %s: %w", event, err)
	}
	return nil
}

// isThrumHook reports whether command runs thrum hook host event.
func isThrumHook(command, host, event string) bool {
	f := strings.Fields(command)
	return len(f) >= 4 && filepath.Base(f[0]) == "thrum" && f[1] == "hook" && f[2] == host && f[3] == kebab(event)
}

// codexServer adds [mcp_servers.thrum] to a Codex config.toml, or
// updates the one there: its args, and its command unless that is a thrum
// of the user's own. It edits the text, so the user's comments and layout
// stay, and checks that the result parses to the same settings but
// thrum's; where the table is written in a way it does not edit (an inline
// table), it says what to set instead.
func codexServer(src []byte, args []string) ([]byte, error) {
	has, err := codexThrum(src)
	if err != nil {
		return nil, err
	}
	nl := "\n"
	if bytes.Contains(src, []byte("\r\n")) {
		nl = "\r\n"
	}
	var out []byte
	if has == nil {
		var b bytes.Buffer
		b.Write(src)
		if len(src) > 0 {
			if !bytes.HasSuffix(src, []byte("\n")) {
				b.WriteString(nl)
			}
			b.WriteString(nl)
		}
		fmt.Fprintf(&b, "[mcp_servers.thrum]%scommand = \"thrum\"%sargs = %s%s", nl, nl, tomlStrings(args), nl)
		out = b.Bytes()
	} else {
		cmd, _ := has["command"].(string)
		got, _ := has["args"].([]any)
		if isThrumBinary(cmd) && slices.Equal(anyStrings(got), args) {
			return src, nil
		}
		set := map[string]string{"args": tomlStrings(args)}
		if !isThrumBinary(cmd) {
			set["command"] = `"thrum"`
		}
		out = tomlSetKeys(src, set, nl)
	}
	if err := codexSameBut(src, out, args); err != nil {
		return nil, fmt.Errorf("cannot write [mcp_servers.thrum] (%v): set command = \"thrum\" and args = %s in it, then run thrum setup again", err, tomlStrings(args))
	}
	return out, nil
}

var (
	tomlThrumHeader = regexp.MustCompile(`^[ \t]*\[[ \t]*mcp_servers[ \t]*\.[ \t]*(thrum|"thrum")[ \t]*\][ \t]*(#.*)?$`)
	tomlHeader      = regexp.MustCompile(`^[ \t]*\[`)
	tomlKey         = regexp.MustCompile(`^[ \t]*("?)([A-Za-z0-9_-]+)("?)[ \t]*=[ \t]*`)
)

// tomlSetKeys sets the keys of set (to TOML value text) in the table
// [mcp_servers.thrum] of src: a key's value is replaced where it is, a
// missing key is added after the table's header. Without such a header
// it returns src unchanged.
func tomlSetKeys(src []byte, set map[string]string, nl string) []byte {
	lines := strings.SplitAfter(string(src), "\n")
	head := slices.IndexFunc(lines, func(l string) bool { return tomlThrumHeader.MatchString(strings.TrimRight(l, "\r\n")) })
	if head < 0 {
		return src
	}
	done := map[string]bool{}
	for i := head + 1; i < len(lines) && !tomlHeader.MatchString(lines[i]); i++ {
		m := tomlKey.FindStringSubmatchIndex(lines[i])
		if m == nil || lines[i][m[2]:m[3]] != lines[i][m[6]:m[7]] {
			continue
		}
		key := lines[i][m[4]:m[5]]
		v, ok := set[key]
		if !ok || done[key] {
			continue
		}
		rest := strings.Join(lines[i:], "")
		end := m[1] + tomlValueEnd(rest[m[1]:])
		lines = append(lines[:i], strings.SplitAfter(rest[:m[1]]+v+rest[end:], "\n")...)
		done[key] = true
	}
	var add strings.Builder
	for _, k := range slices.Sorted(maps.Keys(set)) {
		if !done[k] {
			fmt.Fprintf(&add, "%s = %s%s", k, set[k], nl)
		}
	}
	if add.Len() > 0 {
		if !strings.HasSuffix(lines[head], "\n") {
			lines[head] += nl
		}
		lines = slices.Insert(lines, head+1, add.String())
	}
	return []byte(strings.Join(lines, ""))
}

// tomlValueEnd is the length of the TOML value that s starts with: a
// string, or an array up to its closing bracket (over lines, past
// strings and comments), or else the rest of the line before a comment.
func tomlValueEnd(s string) int {
	depth := 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\'':
			q := string(c)
			if strings.HasPrefix(s[i:], q+q+q) {
				q += q + q
			}
			j := i + len(q)
			for j < len(s) && !strings.HasPrefix(s[j:], q) {
				if c == '"' && s[j] == '\\' {
					j++
				}
				j++
			}
			i = j + len(q) - 1
			if depth == 0 {
				return min(i+1, len(s))
			}
		case c == '#':
			for i < len(s) && s[i] != '\n' {
				i++
			}
			if depth == 0 {
				return i
			}
		case c == '[':
			depth++
		case c == ']':
			if depth--; depth == 0 {
				return i + 1
			}
		case (c == '\n' || c == '\r') && depth == 0:
			return i
		}
	}
	return len(s)
}

// codexSameBut checks that edited parses to what src does, but with
// thrum's server running thrum (or the user's own thrum) with args.
func codexSameBut(src, edited []byte, args []string) error {
	var before, after map[string]any
	if _, err := toml.Decode(string(src), &before); err != nil {
		return err
	}
	if _, err := toml.Decode(string(edited), &after); err != nil {
		return err
	}
	srv, _ := after["mcp_servers"].(map[string]any)
	thrum, _ := srv["thrum"].(map[string]any)
	cmd, _ := thrum["command"].(string)
	got, _ := thrum["args"].([]any)
	if !isThrumBinary(cmd) || !slices.Equal(anyStrings(got), args) {
		return errors.New("the edit did not take")
	}
	for _, m := range []map[string]any{before, after} {
		if srv, ok := m["mcp_servers"].(map[string]any); ok {
			if thrum, ok := srv["thrum"].(map[string]any); ok {
				delete(thrum, "command")
				delete(thrum, "args")
				if len(thrum) == 0 {
					delete(srv, "thrum")
				}
			}
			if len(srv) == 0 {
				delete(m, "mcp_servers")
			}
		}
	}
	if !reflect.DeepEqual(before, after) {
		return errors.New("the edit changed other settings")
	}
	return nil
}

// codexThrum parses a Codex config and returns its thrum server, if any.
func codexThrum(src []byte) (map[string]any, error) {
	var cfg map[string]any
	if _, err := toml.Decode(string(src), &cfg); err != nil {
		return nil, err
	}
	servers, _ := cfg["mcp_servers"].(map[string]any)
	srv, _ := servers["thrum"].(map[string]any)
	return srv, nil
}

func anyStrings(v []any) []string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i], _ = x.(string)
	}
	return s
}

// tomlStrings writes a TOML array of strings; TOML's basic strings escape
// as Go's do for the names and words setup writes.
func tomlStrings(s []string) string {
	q := make([]string, len(s))
	for i, x := range s {
		q[i] = strconv.Quote(x)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// setupChange is one file's planned change.
type setupChange struct {
	Path    string `json:"path"`
	What    string `json:"adds"`
	Created bool   `json:"created"`
	Changed bool   `json:"changed"`
	Diff    string `json:"diff,omitempty"`

	real     string // where to write: path resolved inside its base
	old, new []byte
	mode     fs.FileMode
}

// plan works out each file's new content without writing anything.
func (s *setupSpec) plan(files []setupFile) ([]*setupChange, error) {
	var out []*setupChange
	for _, f := range files {
		ch := &setupChange{Path: s.show(f.path), What: f.what, mode: 0o644}
		real, err := confine(f.base, f.path)
		if err != nil {
			return nil, err
		}
		ch.real = real
		old, mode, exists, err := readSetupFile(real)
		if err != nil {
			return nil, fmt.Errorf("%s %w", ch.Path, err)
		}
		ch.Created = !exists
		if exists {
			ch.old, ch.mode = old, mode
		}
		// A byte-order mark stays where it is, out of the parsers' way.
		src, hasBOM := bytes.CutPrefix(ch.old, bom)
		var edited []byte
		if f.text != nil {
			edited, err = f.text(src)
		} else {
			edited, err = editJSON(src, f)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", ch.Path, err)
		}
		if hasBOM {
			edited = slices.Concat(bom, edited)
		}
		ch.new = edited
		ch.Changed = !bytes.Equal(ch.old, ch.new) || ch.Created
		if ch.Changed {
			ch.Diff = unifiedDiff(ch.Path, string(ch.old), string(ch.new), ch.Created)
		}
		out = append(out, ch)
	}
	return out, nil
}

func editJSON(src []byte, f setupFile) ([]byte, error) {
	d, err := jsonedit.Parse(src, f.jsonc)
	if err != nil {
		return nil, err
	}
	if v, _ := d.Get(); !isObject(v) {
		return nil, errors.New("the file holds no JSON object: setup merges into an object")
	}
	if err := f.json(d); err != nil {
		return nil, err
	}
	return d.Bytes(), nil
}

func isObject(v any) bool { _, ok := v.(map[string]any); return ok }

// show is how a path appears in the report: relative to the project, or
// under ~ for the home directory.
func (s *setupSpec) show(path string) string {
	if rel, err := filepath.Rel(s.root, path); err == nil && !s.user && !strings.HasPrefix(rel, "..") {
		return filepath.ToSlash(rel)
	}
	if rel, err := filepath.Rel(s.home, path); err == nil && !strings.HasPrefix(rel, "..") {
		return "~/" + filepath.ToSlash(rel)
	}
	return path
}

func (c *SetupCmd) Run(ctx context.Context, g *Globals) error {
	host := setupHosts[c.Host]
	if c.Channel && c.Host != "claude" {
		return withCode(exitUsage, "--channel is for claude only: %s has no channels", host.name)
	}
	l, err := resolveLayout(ctx, g)
	if err != nil {
		return err
	}
	if g.agentFlag { // thrum setup --agent-id NAME means --agent NAME
		if c.Agent != "" && c.Agent != g.AgentID {
			return withCode(exitUsage, "--agent %s and --agent-id %s name two agents: give one", c.Agent, g.AgentID)
		}
		c.Agent = g.AgentID
	}
	if c.NoWake && c.Host != "claude" && c.Host != "codex" && c.Host != "opencode" {
		return withCode(exitUsage, "--no-wake is for claude, codex and opencode: thrum wakes no idle %s session", host.name)
	}
	s := &setupSpec{host: c.Host, channel: c.Channel, noWake: c.NoWake, user: c.User, root: l.Root, env: g.env}
	if s.home = g.env("HOME"); s.home == "" {
		if s.home, err = os.UserHomeDir(); err != nil && c.User {
			return fmt.Errorf("--user: %w", err)
		}
	}
	agent, err := c.agent(l, g)
	if err != nil {
		return err
	}
	s.agent = c.Agent
	changes, err := s.plan(host.files(s))
	if err != nil {
		return fmt.Errorf("%w: nothing was written; fix or move the file, then run thrum setup again", err)
	}
	var todo []*setupChange
	for _, ch := range changes {
		if ch.Changed {
			todo = append(todo, ch)
		}
	}
	changed := len(todo)
	if !c.DryRun {
		if err := commit(todo); err != nil {
			return fmt.Errorf("%w: nothing was changed", err)
		}
	}
	to := "@" + agent
	if agent == "" {
		to = "@NAME"
	}
	check := host.check(s)
	if _, err := exec.LookPath("thrum"); err != nil {
		check = append([]string{"thrum is not on PATH: put its directory on PATH, or the host cannot start it"}, check...)
	}
	send := "from another shell: thrum send --to " + to + " 'ping'"
	if len(check) > 0 {
		send = "then, " + send
	}
	check = append(check, send)
	res := map[string]any{"host": c.Host, "dry_run": c.DryRun, "changed": changed > 0, "files": changes, "check": check}
	// Project files that name an agent are that worktree's, not the team's.
	var personal []string
	for _, ch := range changes {
		if c.Agent != "" && !c.User && bytes.Contains(ch.new, []byte("--agent-id")) {
			personal = append(personal, ch.Path)
		}
	}
	if len(personal) > 0 {
		res["personal"] = personal
	}
	return g.out(res, func(w io.Writer) {
		c.report(w, host, changes, changed, check)
		if len(personal) > 0 {
			they, them := "they are", "them"
			if len(personal) == 1 {
				they, them = "it is", "it"
			}
			fmt.Fprintf(w, "Do not commit %s: %s for %s alone (list %s in .git/info/exclude). Without --agent, setup writes files that name no agent, which the team can share.\n",
				strings.Join(personal, ", "), they, c.Agent, them)
		}
	})
}

func (c *SetupCmd) report(w io.Writer, host setupHost, changes []*setupChange, changed int, check []string) {
	// What changes in a file that was there is shown whole: a run with
	// other flags may take out what an earlier one wrote.
	for _, ch := range changes {
		if ch.Changed && (c.DryRun || !ch.Created) {
			fmt.Fprint(w, ch.Diff)
		}
	}
	verb := map[bool]string{true: "created", false: "updated"}
	if c.DryRun {
		verb = map[bool]string{true: "would create", false: "would update"}
	}
	for _, ch := range changes {
		if ch.Changed {
			fmt.Fprintf(w, "%s %s: %s\n", verb[ch.Created], ch.Path, ch.What)
		} else {
			fmt.Fprintf(w, "%s: already set up\n", ch.Path)
		}
	}
	switch {
	case c.DryRun:
		fmt.Fprintln(w, "Dry run: nothing was written.")
	case changed == 0:
		fmt.Fprintf(w, "thrum is already set up for %s: nothing changed.\n", host.name)
	}
	fmt.Fprintln(w, "To check it:")
	for _, line := range check {
		fmt.Fprintf(w, "  %s\n", line)
	}
}

// agent checks the agent the host will work as, without a daemon: the one
// named by --agent must have its identity file here. Without --agent it
// returns the agent the host would resolve, or "" with a note on stderr.
func (c *SetupCmd) agent(l *layout, g *Globals) (string, error) {
	if c.Agent != "" {
		if err := identity.ValidateName(c.Agent); err != nil {
			return "", withCode(exitUsage, "--agent: %v", err)
		}
		if _, err := os.Stat(identity.Path(l.IDs, c.Agent)); err != nil {
			return "", withCode(exitNoIdentity, "no agent %s here (no %s): create it with `thrum quickstart --name %s --role ROLE --module MODULE`, then run thrum setup again",
				c.Agent, identity.Path(l.IDs, c.Agent), c.Agent)
		}
		return c.Agent, nil
	}
	f, _, err := identity.Resolve(l.IDs, identity.Selector{})
	if err != nil {
		g.hint("Note: %v; the host resolves the agent when it starts thrum: pass --agent NAME, set THRUM_NAME, or create one with `thrum quickstart --name NAME --role ROLE --module MODULE`", err)
		return "", nil
	}
	if f.Name == "" {
		return f.AgentID, nil
	}
	return f.Name, nil
}
