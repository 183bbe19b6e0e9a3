package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

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
	Channel bool   `help:"Claude Code: run the MCP server with --channel, which pushes each message into the session."`
	User    bool   `help:"Write the host's files in your home directory, for every project, instead of this project's."`
}

func (c *SetupCmd) Help() string {
	return `Adds thrum to the host's configuration: the MCP server (thrum mcp serve)
and, where the host has command hooks, hooks that hand unread messages to
the agent (thrum hook HOST EVENT). It merges into what is there: other
servers, hooks, keys, their order, layout and comments stay as they were,
and a second run changes nothing. A file it cannot parse stops it before
anything is written. It needs no daemon.

Without --agent the entries name no agent, so project files can be
committed: in each worktree thrum acts as THRUM_NAME or the one identity
file there. With --agent they are that agent's.

  claude    .mcp.json, .claude/settings.json  (--user: ~/.claude.json, ~/.claude/settings.json)
  codex     .codex/config.toml, .codex/hooks.json  (--user: ~/.codex/)
  cursor    .cursor/mcp.json, .cursor/hooks.json  (--user: ~/.cursor/)
  gemini    .gemini/settings.json  (--user: ~/.gemini/settings.json)
  opencode  opencode.json  (--user: ~/.config/opencode/opencode.json)

Examples:
  thrum setup claude --agent alice
  thrum setup claude --channel --dry-run
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
	user    bool
	root    string // the project
	home    string // the user's home directory
	env     func(string) string
}

// setupFile is one file setup merges into: an edit of a JSON (or JSONC)
// document, or of a TOML one.
type setupFile struct {
	path  string
	what  string // what thrum adds there, for the report
	jsonc bool
	json  func(d *jsonedit.Doc) error
	toml  func(src []byte) ([]byte, error)
}

var setupHosts = map[string]setupHost{
	"claude": {name: "Claude Code", files: claudeFiles, check: func(s *setupSpec) []string {
		var notes []string
		if !s.user {
			notes = append(notes, "start Claude Code in this project and approve the thrum MCP server when it asks")
		}
		if s.channel {
			notes = append(notes, "start it as `claude --dangerously-load-development-channels server:thrum` so the channel delivers")
		}
		return notes
	}},
	"codex": {name: "Codex", files: codexFiles, check: func(s *setupSpec) []string {
		notes := []string{"trust thrum's hooks when Codex lists them for review (/hooks)"}
		if !s.user {
			notes = append([]string{"Codex reads .codex/ only in a project you trust"}, notes...)
		}
		return notes
	}},
	"cursor": {name: "Cursor", files: cursorFiles, check: func(*setupSpec) []string {
		return []string{"enable the thrum server in Cursor's MCP settings if Cursor lists it as disabled"}
	}},
	"gemini": {name: "Gemini CLI", files: geminiFiles, check: func(*setupSpec) []string { return nil }},
	"opencode": {name: "opencode", files: opencodeFiles, check: func(*setupSpec) []string {
		return []string{"opencode has no command hooks: the agent reads messages when it calls check_messages or wait_for_message"}
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

// mcpArgs are the arguments of the MCP server's command, thrum.
func (s *setupSpec) mcpArgs() []string {
	args := []string{"mcp", "serve"}
	if s.channel {
		args = append(args, "--channel")
	}
	return append(args, s.agentArgs()...)
}

func (s *setupSpec) hookCommand(event string) string {
	return strings.Join(append([]string{"thrum", "hook", s.host, kebab(event)}, s.agentArgs()...), " ")
}

// path is project in the project, or with --user user in the home
// directory.
func (s *setupSpec) path(project, user string) string {
	if s.user {
		return filepath.Join(s.home, user)
	}
	return filepath.Join(s.root, project)
}

func claudeFiles(s *setupSpec) []setupFile {
	return []setupFile{
		{path: s.path(".mcp.json", ".claude.json"), what: "the MCP server thrum",
			json: func(d *jsonedit.Doc) error {
				return mergeObject(d, []any{"mcpServers", "thrum"}, "type", "stdio", "command", "thrum", "args", s.mcpArgs())
			}},
		{path: s.path(".claude/settings.json", ".claude/settings.json"), what: hooksWhat(s.host),
			json: func(d *jsonedit.Doc) error { return groupedHooks(d, s) }},
	}
}

func codexFiles(s *setupSpec) []setupFile {
	dir := filepath.Join(s.root, ".codex")
	if s.user {
		dir = filepath.Join(s.home, ".codex")
		if h := s.env("CODEX_HOME"); h != "" {
			dir = h
		}
	}
	return []setupFile{
		{path: filepath.Join(dir, "config.toml"), what: "the MCP server thrum",
			toml: func(src []byte) ([]byte, error) { return codexServer(src, s.mcpArgs()) }},
		{path: filepath.Join(dir, "hooks.json"), what: hooksWhat(s.host),
			json: func(d *jsonedit.Doc) error { return groupedHooks(d, s) }},
	}
}

func cursorFiles(s *setupSpec) []setupFile {
	return []setupFile{
		{path: s.path(".cursor/mcp.json", ".cursor/mcp.json"), what: "the MCP server thrum",
			json: func(d *jsonedit.Doc) error {
				return mergeObject(d, []any{"mcpServers", "thrum"}, "command", "thrum", "args", s.mcpArgs())
			}},
		{path: s.path(".cursor/hooks.json", ".cursor/hooks.json"), what: hooksWhat(s.host),
			json: func(d *jsonedit.Doc) error {
				if _, ok := d.Get("version"); !ok {
					if _, err := d.Set(1, "version"); err != nil {
						return err
					}
				}
				// Cursor lists commands under each event, with no groups.
				for _, ev := range hostHookEvents[s.host] {
					if err := ensureHook(d, s, ev, []any{"hooks", ev}, nil, map[string]string{"command": s.hookCommand(ev)}); err != nil {
						return err
					}
				}
				return nil
			}},
	}
}

func geminiFiles(s *setupSpec) []setupFile {
	return []setupFile{{
		path: s.path(".gemini/settings.json", ".gemini/settings.json"), jsonc: true,
		what: "the MCP server thrum; " + hooksWhat(s.host),
		json: func(d *jsonedit.Doc) error {
			if err := mergeObject(d, []any{"mcpServers", "thrum"}, "command", "thrum", "args", s.mcpArgs()); err != nil {
				return err
			}
			return groupedHooks(d, s)
		},
	}}
}

func opencodeFiles(s *setupSpec) []setupFile {
	dir := s.root
	if s.user {
		dir = filepath.Join(s.home, ".config", "opencode")
		if x := s.env("XDG_CONFIG_HOME"); x != "" {
			dir = filepath.Join(x, "opencode")
		}
	}
	// opencode reads opencode.json or opencode.jsonc: merge into the one there.
	path := filepath.Join(dir, "opencode.json")
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		if _, err := os.Stat(filepath.Join(dir, "opencode.jsonc")); err == nil {
			path = filepath.Join(dir, "opencode.jsonc")
		}
	}
	return []setupFile{{
		path: path, jsonc: true, what: "the MCP server thrum",
		json: func(d *jsonedit.Doc) error {
			return mergeObject(d, []any{"mcp", "thrum"}, "type", "local", "command", append([]string{"thrum"}, s.mcpArgs()...), "enabled", true)
		},
	}}
}

func hooksWhat(host string) string {
	return "hooks on " + strings.Join(hostHookEvents[host], ", ")
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

// hookGroup and hookCommand are a hook in the layout Claude Code, Codex
// and Gemini CLI share: a group (matching every occasion, as it has no
// matcher) of commands under each event.
type hookGroup struct {
	Hooks []hookCommand `json:"hooks"`
}

type hookCommand struct {
	Type    string `json:"type"`
	Command string `json:"command"`
}

func groupedHooks(d *jsonedit.Doc, s *setupSpec) error {
	for _, ev := range hostHookEvents[s.host] {
		cmd := s.hookCommand(ev)
		if err := ensureHook(d, s, ev, []any{"hooks", ev}, []any{"hooks"}, hookGroup{Hooks: []hookCommand{{Type: "command", Command: cmd}}}); err != nil {
			return err
		}
	}
	return nil
}

// ensureHook makes sure the array at list holds thrum's hook for event:
// an entry whose command runs thrum hook HOST EVENT gets this run's
// command; without one, entry is appended. Entries hold their command
// themselves (inner nil) or in the array at inner.
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
				_, err := d.Set(s.hookCommand(event), path...)
				return err
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

// codexServer adds [mcp_servers.thrum] to a Codex config.toml. It appends
// the table as text, so the user's comments and layout stay, after
// checking that the file parses and has no thrum server yet, and checks
// that the result parses with the server in it.
func codexServer(src []byte, args []string) ([]byte, error) {
	has, err := codexThrum(src)
	if err != nil {
		return nil, err
	}
	if has != nil {
		cmd, _ := has["command"].(string)
		got, _ := has["args"].([]any)
		if cmd == "thrum" && slices.Equal(anyStrings(got), args) {
			return src, nil
		}
		return nil, fmt.Errorf("[mcp_servers.thrum] is already there with other settings: set command = \"thrum\" and args = %s in it, or delete the table and run thrum setup again", tomlStrings(args))
	}
	nl := "\n"
	if bytes.Contains(src, []byte("\r\n")) {
		nl = "\r\n"
	}
	var b bytes.Buffer
	b.Write(src)
	if len(src) > 0 {
		if !bytes.HasSuffix(src, []byte("\n")) {
			b.WriteString(nl)
		}
		b.WriteString(nl)
	}
	fmt.Fprintf(&b, "[mcp_servers.thrum]%scommand = \"thrum\"%sargs = %s%s", nl, nl, tomlStrings(args), nl)
	if has, err := codexThrum(b.Bytes()); err != nil || has == nil {
		return nil, fmt.Errorf("cannot append [mcp_servers.thrum] (%v): add it by hand", err)
	}
	return b.Bytes(), nil
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

	real     string // where to write: path with symlinks resolved
	old, new []byte
	mode     fs.FileMode
}

// plan works out each file's new content without writing anything.
func (s *setupSpec) plan(files []setupFile) ([]*setupChange, error) {
	var out []*setupChange
	for _, f := range files {
		ch := &setupChange{Path: s.show(f.path), What: f.what, real: f.path, mode: 0o644}
		if r, err := filepath.EvalSymlinks(f.path); err == nil {
			ch.real = r
		}
		old, err := os.ReadFile(ch.real)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			ch.Created = true
		case err != nil:
			return nil, err
		default:
			ch.old = old
			if st, err := os.Stat(ch.real); err == nil {
				ch.mode = st.Mode().Perm()
			}
		}
		if f.toml != nil {
			ch.new, err = f.toml(ch.old)
		} else {
			ch.new, err = editJSON(ch.old, f)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", ch.Path, err)
		}
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

// write replaces the file atomically, keeping its mode, creating its
// directory if needed.
func (ch *setupChange) write() error {
	dir := filepath.Dir(ch.real)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(ch.real)+".thrum-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(ch.new); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(ch.mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), ch.real)
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
	s := &setupSpec{host: c.Host, channel: c.Channel, user: c.User, root: l.Root, env: g.env}
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
	changed := 0
	for _, ch := range changes {
		if ch.Changed {
			changed++
		}
	}
	if !c.DryRun {
		for _, ch := range changes {
			if ch.Changed {
				if err := ch.write(); err != nil {
					return fmt.Errorf("writing %s: %w", ch.Path, err)
				}
			}
		}
	}
	to := "@" + agent
	if agent == "" {
		to = "@NAME"
	}
	check := append(host.check(s), fmt.Sprintf("then, from another shell: thrum send --to %s 'ping'", to))
	if _, err := exec.LookPath("thrum"); err != nil {
		check = append([]string{"thrum is not on PATH: put its directory on PATH, or the host cannot start it"}, check...)
	}
	res := map[string]any{"host": c.Host, "dry_run": c.DryRun, "changed": changed > 0, "files": changes, "check": check}
	return g.out(res, func(w io.Writer) {
		c.report(w, host, changes, changed, check)
	})
}

func (c *SetupCmd) report(w io.Writer, host setupHost, changes []*setupChange, changed int, check []string) {
	if c.DryRun {
		for _, ch := range changes {
			if ch.Changed {
				fmt.Fprint(w, ch.Diff)
			}
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
