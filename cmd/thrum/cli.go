package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/alecthomas/kong"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/identity"
	"github.com/thrumhq/thrum/rpc"
)

// Exit codes.
const (
	exitOK         = 0
	exitError      = 1
	exitUsage      = 2
	exitNoDaemon   = 3
	exitNoIdentity = 4
)

// Globals are the flags every command takes.
type Globals struct {
	JSON    bool   `help:"Print machine-readable JSON on stdout."`
	Quiet   bool   `short:"q" help:"Print only what was asked for: no hints, tips or next-page line; send and reply print just the new ID."`
	Verbose bool   `short:"v" help:"Print debug output on stderr."`
	Role    string `help:"Agent role, to select an identity (or THRUM_ROLE)."`
	Module  string `help:"Agent module, to select an identity (or THRUM_MODULE)."`
	AgentID string `name:"agent-id" help:"Agent name: selects .thrum/identities/NAME.json (or THRUM_NAME)."`
	Repo    string `default:"." help:"Repository or directory thrum works in." type:"path"`
	Home    string `help:"Directory for thrum's runtime state (default: REPO/.thrum; or THRUM_HOME)." type:"path"`
	// CallTimeout bounds every call to the daemon that does not wait by
	// design, so a stopped or wedged daemon fails a command, saying so.
	CallTimeout time.Duration `name:"call-timeout" default:"10s" help:"How long to wait for the daemon to answer a call (or THRUM_CALL_TIMEOUT)."`

	stdout, stderr io.Writer
	// roleFlag is whether --role is on the command line, not only in
	// THRUM_ROLE: group add and remove take only the flag as a member.
	roleFlag bool
	// repoFlag is whether --repo is on the command line: a hook without it
	// works in the directory its host names.
	repoFlag bool
	// agentFlag is whether --agent-id is on the command line, not only in
	// THRUM_NAME: setup writes the flag's agent into the host's files.
	agentFlag bool
	// buildChecked is whether this run compared its build with the
	// daemon's (checkBuild).
	buildChecked bool
	env          func(string) string
	// daemon is the layout of the daemon connect dialled, for noAnswer.
	daemon *layout
}

// CLI is the command tree.
type CLI struct {
	Globals
	VersionFlag kong.VersionFlag `name:"version" help:"Print thrum's version and exit."`

	Init       InitCmd       `cmd:"" help:"Prepare thrum in this repository or directory."`
	Daemon     DaemonCmd     `cmd:"" help:"Start, stop and inspect the daemon."`
	Quickstart QuickstartCmd `cmd:"" help:"Register an agent, start its session and write its identity file."`
	Send       SendCmd       `cmd:"" help:"Send a message."`
	Reply      ReplyCmd      `cmd:"" help:"Reply to a message (which acknowledges it)."`
	Ack        AckCmd        `cmd:"" help:"Acknowledge a message addressed to you."`
	Sent       SentCmd       `cmd:"" help:"List your sent messages with their receipts."`
	Inbox      InboxCmd      `cmd:"" help:"List messages with read/unread indicators."`
	Search     SearchCmd     `cmd:"" help:"Find messages by their words."`
	Message    MessageCmd    `cmd:"" help:"Get, edit, delete or mark messages read."`
	Group      GroupCmd      `cmd:"" help:"Manage groups of agents and roles."`
	Agent      AgentCmd      `cmd:"" help:"List, inspect, delete and clean up agents."`
	Session    SessionCmd    `cmd:"" help:"Manage work sessions."`
	Thread     ThreadCmd     `cmd:"" help:"Create, list and read threads."`
	Sync       SyncCmd       `cmd:"" help:"Inspect and trigger sync between machines (git, NATS)."`
	Key        KeyCmd        `cmd:"" help:"Show, rotate, export and import the team keys that seal message bodies."`
	Mcp        McpCmd        `cmd:"" help:"Run the MCP server for an agent."`
	Setup      SetupCmd      `cmd:"" help:"Add thrum's MCP server and hooks to an agent host's configuration."`
	Wait       WaitCmd       `cmd:"" help:"Wait for a message for the agent and print it (--follow: each one as it arrives)."`
	Hook       HookCmd       `cmd:"" help:"Answer a coding agent host's hook with the agent's unread messages."`
	Doctor     DoctorCmd     `cmd:"" help:"Check the event log against the projection; rebuild the projection."`
	Web        WebCmd        `cmd:"" help:"Print a one-time login URL for the web console (--open opens it)."`
	Version    VersionCmd    `cmd:"" help:"Print thrum's version."`
}

// codeError carries an exit code through kong's Run.
type codeError struct {
	code int
	err  error
}

func (e *codeError) Error() string { return e.err.Error() }
func (e *codeError) Unwrap() error { return e.err }

func withCode(code int, format string, args ...any) error {
	return &codeError{code: code, err: fmt.Errorf(format, args...)}
}

type kongExit int

// run is the whole program: parse args, run the command, print errors.
// It returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) (code int) {
	return runEnv(ctx, args, stdout, stderr, os.Getenv)
}

func runEnv(ctx context.Context, args []string, stdout, stderr io.Writer, env func(string) string) (code int) {
	var cli CLI
	cli.stdout, cli.stderr, cli.env = stdout, stderr, env
	cli.roleFlag, cli.repoFlag = hasFlag(args, "--role"), hasFlag(args, "--repo")
	cli.agentFlag = hasFlag(args, "--agent-id")
	defer func() {
		if r := recover(); r != nil {
			c, ok := r.(kongExit)
			if !ok {
				panic(r)
			}
			code = int(c)
		}
	}()
	parser, err := kong.New(&cli,
		kong.Name("thrum"),
		kong.Description("Persistent messaging for AI coding agents."),
		kong.Vars{"version": strings.TrimSuffix(versionText(thrum.CurrentBuild()), "\n")},
		kong.Writers(stdout, stderr),
		kong.Exit(func(c int) { panic(kongExit(c)) }),
		kong.ConfigureHelp(kong.HelpOptions{Compact: true}),
		kong.UsageOnError(),
		kong.Resolvers(envResolver(env)),
		kong.BindTo(ctx, (*context.Context)(nil)),
	)
	if err != nil {
		fmt.Fprintf(stderr, "thrum: %v\n", err)
		return exitError
	}
	// thrum help [COMMAND] prints help, as --help does.
	if i := firstArg(args); i < len(args) && args[i] == "help" {
		args = append(slices.Delete(slices.Clone(args), i, i+1), "--help")
	}
	kctx, err := parser.Parse(args)
	var pe *kong.ParseError
	if errors.As(err, &pe) && pe.Context.Selected() == nil && strings.HasPrefix(err.Error(), "expected one of") {
		// thrum without a command: the overview, as thrum help prints it.
		_, err = parser.Parse([]string{"--help"})
	}
	if err != nil {
		fmt.Fprintf(stderr, "thrum: %v\n", err)
		return exitUsage
	}
	err = kctx.Run(&cli.Globals)
	if err == nil {
		return exitOK
	}
	return report(&cli.Globals, err)
}

// firstArg is the index in args of the first that is neither a global
// flag nor its value: the command.
func firstArg(args []string) int {
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "--repo" || a == "--home" || a == "--role" || a == "--module" || a == "--agent-id":
			i++
		case !strings.HasPrefix(a, "-"):
			return i
		}
	}
	return len(args)
}

// hasFlag reports whether args name the long flag (as "--flag" or
// "--flag=value") before a "--" that ends the flags.
func hasFlag(args []string, flag string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if a == flag || strings.HasPrefix(a, flag+"=") {
			return true
		}
	}
	return false
}

// flagEnv maps global flags to the environment variables that set them
// when the flag is absent.
var flagEnv = map[string]string{
	"role":         "THRUM_ROLE",
	"module":       "THRUM_MODULE",
	"agent-id":     "THRUM_NAME",
	"home":         "THRUM_HOME",
	"call-timeout": "THRUM_CALL_TIMEOUT",
	"channel":      "THRUM_CHANNEL",  // mcp serve --channel
	"nats":         "THRUM_NATS_URL", // daemon start/run --nats
}

// envResolver fills flags from the environment through env, so tests can
// set variables without touching the process's own.
func envResolver(env func(string) string) kong.Resolver {
	return kong.ResolverFunc(func(_ *kong.Context, _ *kong.Path, flag *kong.Flag) (any, error) {
		if name, ok := flagEnv[flag.Name]; ok {
			if v := env(name); v != "" {
				return v, nil
			}
		}
		return nil, nil
	})
}

// report prints an error the way a person (or, with --json, a script)
// can act on, and returns the exit code.
func report(g *Globals, err error) int {
	err = noAnswer(g, err)
	code := exitError
	var ce *codeError
	if errors.As(err, &ce) {
		code = ce.code
	}
	if errors.Is(err, identity.ErrNoIdentity) {
		code = exitNoIdentity
	}
	if errors.Is(err, errSilent) {
		return code
	}
	var re *rpc.Error
	if g.JSON {
		out := map[string]any{"code": code, "message": withHint(g, err, unprefixed(err.Error()))}
		if errors.As(err, &re) {
			out["rpc_code"] = re.Code
			out["message"] = withHint(g, err, unprefixed(re.Message))
		}
		b, _ := json.Marshal(map[string]any{"error": out})
		fmt.Fprintln(g.stderr, string(b))
		return code
	}
	msg := err.Error()
	if errors.As(err, &re) {
		msg = re.Message
	}
	fmt.Fprintf(g.stderr, "thrum: %s\n", shown(withHint(g, err, unprefixed(msg))))
	return code
}

// unprefixed drops the library's "thrum: " from an error message, at its
// start and where one error wraps another, since report prints the prefix
// once itself.
func unprefixed(msg string) string {
	return strings.ReplaceAll(strings.TrimPrefix(msg, "thrum: "), ": thrum: ", ": ")
}

// out prints v as JSON when --json is set, else calls human with a
// writer that shows what it is given (shown): data never writes a
// control character to the owner's terminal, nor to a pipe.
func (g *Globals) out(v any, human func(w io.Writer)) error {
	if g.JSON {
		enc := json.NewEncoder(g.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	human(textWriter{g.stdout})
	return nil
}

// hint prints a tip on stderr unless --quiet or --json.
func (g *Globals) hint(format string, args ...any) {
	if g.Quiet || g.JSON {
		return
	}
	fmt.Fprintf(textWriter{g.stderr}, format+"\n", args...)
}

// debugf prints on stderr with --verbose.
func (g *Globals) debugf(format string, args ...any) {
	if g.Verbose {
		fmt.Fprintf(textWriter{g.stderr}, "thrum: "+format+"\n", args...)
	}
}
