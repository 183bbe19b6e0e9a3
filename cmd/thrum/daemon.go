package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/eventlog/admit"
	"github.com/thrumhq/thrum/identity"
	"github.com/thrumhq/thrum/internal/dirlock"
	"github.com/thrumhq/thrum/internal/gitwork"
	"github.com/thrumhq/thrum/internal/private"
	"github.com/thrumhq/thrum/internal/webui"
	"github.com/thrumhq/thrum/rpc"
)

// InitCmd prepares thrum in a repository or directory.
type InitCmd struct {
	Local bool `help:"Keep the log on this machine: never sync it (sets thrum.local in .git/config)."`
}

func (c *InitCmd) Help() string {
	return `In a git repository, init creates the orphan branch a-sync and checks it out
as a worktree inside the git directory (<git-common-dir>/thrum-sync/a-sync),
where the event log lives; your working tree, index and current branch are
not touched. The branch starts empty even when the remote has one: the
remote's events come in through sync, which checks each, and nothing of
the remote's tree is ever checked out. Runtime state goes to .thrum/,
which init adds to .git/info/exclude. Outside git, the log is .thrum/log.

With a git remote, the daemon pushes the log (every message body) to the
remote's a-sync branch: init says where. --local keeps it on this machine
(undo: git config --unset thrum.local).

Examples:
  thrum init && thrum daemon start
  thrum init --local
  thrum init --repo ~/src/project --json`
}

func (c *InitCmd) Run(ctx context.Context, g *Globals) error {
	l, err := resolveLayout(ctx, g)
	if err != nil {
		return err
	}
	created, err := l.setup(ctx)
	if err != nil {
		return fmt.Errorf("init: %w", err)
	}
	if c.Local {
		if err := setLocal(ctx, l); err != nil {
			return fmt.Errorf("init: %w", err)
		}
	}
	to, err := whereTo(ctx, l, envNATS(g))
	if err != nil {
		return fmt.Errorf("init: %w", err)
	}
	res := map[string]any{"root": l.Root, "git": l.Git, "log_dir": l.LogDir, "home": l.Home, "created": created, "shares": l.Shared, "leaves": to}
	if err := toldLeaves(l, to.line()); err != nil {
		return fmt.Errorf("init: %w", err)
	}
	return g.out(res, func(w io.Writer) {
		if len(created) == 0 {
			fmt.Fprintf(w, "thrum is already set up in %s\n", l.Root)
		} else {
			fmt.Fprintf(w, "Initialized thrum in %s\n", l.Root)
			for _, c := range created {
				fmt.Fprintf(w, "  created %s\n", c)
			}
		}
		if l.Shared != "" {
			fmt.Fprintf(w, "  this worktree shares the daemon and log of %s (see .thrum/redirect); its agents' identities are its own\n", filepath.Dir(l.Shared))
		}
		fmt.Fprintln(w, to.line())
		if h := to.historyLine(); h != "" {
			fmt.Fprintln(w, h)
		}
		next := "thrum quickstart --name NAME --role ROLE --module MODULE"
		if _, err := health(ctx, l); err == nil {
			g.hint("The daemon is running (pid %d). Next: %s", readPID(l.PIDFile), next)
		} else if pid, ok := lockedBy(l); ok {
			g.hint("This repository's daemon is already running (pid %d) but not answering here: %s", pid, notAnswering(l, pid, err))
		} else {
			g.hint("Next: thrum daemon start, then %s", next)
		}
	})
}

// DaemonCmd groups the daemon's lifecycle.
type DaemonCmd struct {
	Start   DaemonStartCmd   `cmd:"" help:"Start the daemon in the background and wait until it answers."`
	Stop    DaemonStopCmd    `cmd:"" help:"Stop the daemon gracefully."`
	Restart DaemonRestartCmd `cmd:"" help:"Stop the daemon and start it again with the flags it was started with."`
	Status  DaemonStatusCmd  `cmd:"" help:"Show whether the daemon runs: pid, uptime, socket, WebSocket port."`
	Run     DaemonRunCmd     `cmd:"" help:"Run the daemon in the foreground (what start runs)."`
}

// DaemonRunCmd runs the daemon in the foreground until interrupted.
type DaemonRunCmd struct {
	WSAddr       string        `name:"ws-addr" default:"127.0.0.1:0" help:"Loopback address of the WebSocket (port 0 picks a free one)."`
	SyncInterval time.Duration `default:"60s" help:"How often to sync with the git remote when idle."`
	SyncWait     time.Duration `default:"2s" help:"How long a send naming an unknown recipient waits for a sync with the git remote before refusing (0: no wait)."`
	natsFlags
	Autostarted bool `hidden:"" help:"Started by an agent's MCP server, not a person: sync only where a person was told the log goes."`
}

func (c *DaemonRunCmd) Help() string {
	return `Serves the JSON-RPC API on .thrum/var/thrum.sock (mode 0600) and on a
WebSocket at ws://ADDR/ws (loopback only; its port is written to
.thrum/var/ws.port), and the web console at http://ADDR/ (sign in with the
URL thrum web prints). Stops gracefully on SIGINT or SIGTERM.

Examples:
  thrum daemon run --ws-addr 127.0.0.1:9999
  thrum daemon run --sync-interval 5m --verbose`
}

func (c *DaemonRunCmd) Run(ctx context.Context, g *Globals) error {
	l, err := resolveLayout(ctx, g)
	if err != nil {
		return err
	}
	// Every start, not just the first: a directory another user made or
	// can write is refused before anything in it is used.
	if _, err := l.setup(ctx); err != nil {
		return fmt.Errorf("daemon: %w", err)
	}
	host, _, err := net.SplitHostPort(c.WSAddr)
	if err != nil {
		return withCode(exitUsage, "--ws-addr %q: %v", c.WSAddr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return withCode(exitUsage, "--ws-addr %q: the WebSocket listens on loopback only (127.0.0.1, ::1 or localhost)", c.WSAddr)
	}
	level := slog.LevelInfo
	if g.Verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(g.stderr, &slog.HandlerOptions{Level: level}))
	// Sync runs with a git remote (not in a local clone) and with a NATS
	// server. The syncers need the open log, and the node needs their
	// hooks: they meet through sy (sync.go).
	var sy syncers
	to, err := whereTo(ctx, l, &c.natsFlags)
	if err != nil {
		return fmt.Errorf("daemon: %w", err)
	}
	syncOn := to.gitSyncs() || to.natsConfig() != nil
	if syncOn && c.Autostarted {
		if why := untold(l, to); why != "" {
			syncOn = false
			logger.Warn("sync is off: " + why)
		}
	}
	keys, err := l.keys()
	if err != nil {
		return fmt.Errorf("daemon: %w", err)
	}
	repo := gitwork.New(l.Root)
	opts := &thrum.Options{Logger: logger, DBPath: l.DB, RepoID: l.RepoID(ctx), GitRepo: repo, IdentityDir: l.IDs,
		IdentityDirs: worktreeIdentityDirs(l), Signer: keys}
	if l.Git {
		opts.Keyring = repo.Keyring
	}
	if syncOn {
		opts.OnCommit = sy.committed
		opts.SyncState = func() string {
			if !sy.on() {
				return "pending"
			}
			return sy.state()
		}
		if c.SyncWait > 0 {
			// An unknown recipient may have registered on another clone:
			// a send waits up to SyncWait for a round with the remote.
			opts.RefreshTimeout = c.SyncWait
			opts.Refresh = sy.refresh
		}
	}
	// What a clone that an older thrum made let the remote plant is
	// moved aside before the log opens.
	repaired, err := l.repairLog(ctx)
	if err != nil {
		return fmt.Errorf("daemon: repair the log: %w", err)
	}
	for _, a := range repaired.Moved {
		logger.Warn("thrum: moved out of the log directory, never read", "path", a.Path, "why", a.Why, "moved_to", a.MovedTo)
	}
	if len(repaired.Dropped) > 0 {
		logger.Warn("thrum: dropped credentials that came from the remote's tree: these identities register again for new tokens", "identities", strings.Join(repaired.Dropped, ", "))
	}
	followHeap := os.Getenv("GOMEMLIMIT") == ""
	if followHeap {
		// Requests hold at most the server's budget; this keeps the
		// collector from letting garbage double the heap around it.
		debug.SetMemoryLimit(daemonMemoryLimit)
	}
	tuneGC := os.Getenv("GOGC") == ""
	if tuneGC {
		// No collection while the node starts (the memory limit still
		// bounds the heap): a cycle marking the index as it loaded held
		// the first listing back by 20-50 ms at 100k messages.
		debug.SetGCPercent(-1)
	}
	n, err := thrum.Open(ctx, l.LogDir, opts)
	if err != nil {
		if errors.Is(err, thrum.ErrLocked) {
			return withCode(exitError, "%w", err)
		}
		return err
	}
	defer n.Close() // the log reported its repairs through logger as it opened
	go func() {
		<-n.Warm() // closed by Close too
		if tuneGC {
			// Most of an idle daemon's heap is the long-lived message
			// index; collecting at half again its size, not twice, keeps
			// ~10 MiB less resident at 100k messages for a little more
			// GC work.
			debug.SetGCPercent(daemonGCPercent)
		}
		if followHeap {
			followLiveHeap(ctx)
		}
	}()
	// The owner's secret lets the owner's processes (and, through a login
	// the CLI hands it, the owner's browser) act for the owner over the
	// WebSocket; only a process that can read the owner's files has it.
	secret, err := identity.LoadOwnerSecret(filepath.Join(filepath.Dir(l.Socket), identity.OwnerSecretFile))
	if err != nil {
		return fmt.Errorf("daemon: owner secret: %w", err)
	}
	// The syncers are made (not run) before the server, which answers
	// sync.status and sync.force through them.
	if syncOn {
		if err := sy.make(n, l, to, c.SyncInterval, logger); err != nil {
			return err
		}
	}
	ropts := &thrum.RPCOptions{OwnerSecret: secret, Logger: logger, WebSessionFile: filepath.Join(filepath.Dir(l.Socket), "web.sessions")}
	if sy.on() {
		ropts.Sync = &sy
	}
	srv := n.RPCServer(ropts)
	ul, err := thrum.ListenUnix(l.Socket)
	if err != nil {
		return err
	}
	wl, was, err := listenWS(c.WSAddr, l.WSPort)
	if err != nil {
		ul.Close()
		return fmt.Errorf("daemon: websocket: %w", err)
	}
	port := wl.Addr().(*net.TCPAddr).Port
	if was != 0 {
		logger.Warn("the web console's port is taken: it moved; open the console again with thrum web", "was", was, "now", port)
	}
	mux := http.NewServeMux()
	mux.Handle("/ws", srv)
	mux.Handle("/", webui.Handler()) // the web console (thrum web signs a browser in)
	// Before the upgrade a connection is plain HTTP: small headers, a short
	// deadline, and caps on how many may be open, in all and of each other
	// local user (the RPC server refuses WebSockets over its own caps
	// after the upgrade).
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, MaxHeaderBytes: 16 << 10, IdleTimeout: 30 * time.Second}
	wl = srv.LimitListener(wl)
	if err := writeFile(l.WSPort, strconv.Itoa(port)); err != nil {
		return err
	}
	if err := writeFile(l.PIDFile, strconv.Itoa(os.Getpid())); err != nil {
		return err
	}
	defer os.Remove(l.PIDFile) // the port file stays: the next start binds that port again if it can
	flags, _ := json.Marshal(daemonFlags{WSAddr: c.WSAddr, SyncInterval: c.SyncInterval, SyncWait: c.SyncWait, Verbose: g.Verbose, natsFlags: c.natsFlags})
	if err := writeFile(flagsFile(l), string(flags)); err != nil {
		return err
	}

	syncCtx, stopSync := context.WithCancel(context.Background())
	defer stopSync()
	syncDone := sy.run(syncCtx, logger)

	errc := make(chan error, 2)
	go func() { errc <- srv.Serve(ul) }()
	go func() { errc <- hs.Serve(wl) }()
	logger.Info("thrum daemon ready", "pid", os.Getpid(), "socket", l.Socket, "ws", fmt.Sprintf("ws://%s/ws", wl.Addr()), "log", l.LogDir, "leaves", to.line())

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}
	logger.Info("thrum daemon stopping")
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hs.Shutdown(sctx)
	srv.Shutdown(sctx)
	os.Remove(l.Socket)
	stopSync()
	<-syncDone
	sy.final(logger)
	if serveErr != nil && !errors.Is(serveErr, thrum.ErrServerClosed) && !errors.Is(serveErr, http.ErrServerClosed) {
		return serveErr
	}
	return nil
}

// listenWS listens on addr. With port 0 (any) it first tries the port
// recorded in portFile by the last daemon, so that a web console left
// open finds the daemon again after a restart; was is that port when it
// was taken (0 if none was recorded, or it was free).
func listenWS(addr, portFile string) (l net.Listener, was int, err error) {
	host, port, _ := net.SplitHostPort(addr)
	if p := readPort(portFile); port == "0" && p > 0 {
		if l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(p))); err == nil {
			return l, 0, nil
		}
		was = p
	}
	l, err = net.Listen("tcp", addr)
	return l, was, err
}

// daemonFlags are the flags a daemon was started with, recorded by it
// (flagsFile) for daemon restart.
type daemonFlags struct {
	WSAddr       string        `json:"ws_addr"`
	SyncInterval time.Duration `json:"sync_interval"`
	SyncWait     time.Duration `json:"sync_wait"`
	Verbose      bool          `json:"verbose"`
	natsFlags                  // as given: the environment's THRUM_NATS_URL included
}

func flagsFile(l *layout) string { return filepath.Join(filepath.Dir(l.PIDFile), "daemon.flags") }

// followLiveHeap keeps the soft memory limit above what the live heap
// needs, until ctx ends. A fixed limit turns into a collector that never
// rests once the message index alone outgrows it (a daemon at 100k
// messages held to 20 MiB sent 466 messages/s against 1,821 unheld, at 7
// times the CPU per send): so every second the limit becomes twice the
// heap that was live at the last collection, plus the request budget,
// and never less than daemonMemoryLimit. Garbage does not raise it, so it
// still bites on garbage well beyond what GOGC allows, which is what it
// is for; a growing index raises it within a second.
func followLiveHeap(ctx context.Context) {
	live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		metrics.Read(live)
		debug.SetMemoryLimit(max(daemonMemoryLimit, 2*int64(live[0].Value.Uint64())+thrum.DefaultMaxPendingBytes))
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// daemonMemoryLimit is the floor of the daemon's soft memory limit
// (runtime/debug), and the limit itself until the node is warm
// (followLiveHeap raises it as the live heap grows): requests in flight
// hold at most thrum.DefaultMaxPendingBytes.
const daemonMemoryLimit = 64 << 20

// daemonGCPercent is the daemon's GOGC (see DESIGN.md, "Decisions").
const daemonGCPercent = 50

func writeFile(path, s string) error {
	return private.WriteFile(path, []byte(s+"\n"))
}

// readPort is the port in path (the ws.port file), or 0.
func readPort(path string) int { return readPID(path) }

func readPID(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// alive reports whether a process with pid exists.
func alive(pid int) bool {
	return pid > 0 && syscall.Kill(pid, 0) == nil
}

// DaemonStartCmd starts the daemon in the background.
type DaemonStartCmd struct {
	WSAddr       string        `name:"ws-addr" default:"127.0.0.1:0" help:"Loopback address of the WebSocket."`
	SyncInterval time.Duration `default:"60s" help:"How often to sync with the git remote when idle."`
	SyncWait     time.Duration `default:"2s" help:"How long a send naming an unknown recipient waits for a sync with the git remote before refusing (0: no wait)."`
	Timeout      time.Duration `default:"10s" help:"How long to wait for the daemon to answer."`
	natsFlags
	Autostarted bool `hidden:"" help:"Started by an agent's MCP server, not a person: sync only where a person was told the log goes."`

	verbose bool // run the daemon with --verbose (restart: it was)
}

func (c *DaemonStartCmd) Help() string {
	return `Starts "thrum daemon run" detached, logging to .thrum/var/daemon.log, and
returns once it answers health. Runs init first if needed.

Examples:
  thrum daemon start
  thrum daemon start --ws-addr 127.0.0.1:9999 --json`
}

func (c *DaemonStartCmd) Run(ctx context.Context, g *Globals) error {
	l, err := resolveLayout(ctx, g)
	if err != nil {
		return err
	}
	if _, err := l.setup(ctx); err != nil {
		return fmt.Errorf("daemon start: %w", err)
	}
	to, err := whereTo(ctx, l, &c.natsFlags) // refused here, not in the daemon's log
	if err != nil {
		return err
	}
	// Starts run one at a time: the one that finds no daemon starts it, the
	// others then find it running.
	unlock, err := startLock(ctx, filepath.Join(filepath.Dir(l.PIDFile), "start.lock"), c.Timeout+5*time.Second)
	if err != nil {
		return fmt.Errorf("daemon start: %w", err)
	}
	defer unlock()
	h, herr := health(ctx, l)
	if herr == nil {
		return alreadyRunning(g, l, readPID(l.PIDFile), h)
	}
	if pid, ok := lockedBy(l); ok { // busy or elsewhere, not gone: never start a second one
		return fmt.Errorf("this repository's daemon is already running (pid %d) but not answering here: %s", pid, notAnswering(l, pid, herr))
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	logf, err := private.OpenFile(l.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND)
	if err != nil {
		return err
	}
	defer logf.Close()
	logStart, _ := logf.Seek(0, io.SeekEnd) // this run's lines start here
	args := []string{"--repo", l.Root, "daemon", "run", "--ws-addr", c.WSAddr, "--sync-interval", c.SyncInterval.String(), "--sync-wait", c.SyncWait.String()}
	if c.Autostarted {
		args = append(args, "--autostarted")
	}
	if g.Home != "" {
		args = append([]string{"--home", g.Home}, args...)
	}
	if g.Verbose || c.verbose {
		args = append([]string{"--verbose"}, args...)
	}
	args = append(args, c.natsFlags.args()...)
	lastPort := 0 // the port an open console knows, which the daemon takes again if free
	if _, port, _ := net.SplitHostPort(c.WSAddr); port == "0" {
		lastPort = readPort(l.WSPort)
	}
	// The first start in this clone says where the log goes even if init
	// said it: the daemon is what sends it.
	_, err = os.Stat(flagsFile(l))
	first := errors.Is(err, os.ErrNotExist)
	cmd := exec.Command(exe, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = l.Root
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // survive the terminal
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("daemon start: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(c.Timeout)
	for {
		if h, err := health(ctx, l); err == nil {
			if pid := readPID(l.PIDFile); pid != cmd.Process.Pid {
				// Another daemon answers (one started by hand, not
				// through start): ours exits finding the directory in use.
				return alreadyRunning(g, l, pid, h)
			}
			st := statusJSON(l, cmd.Process.Pid, h)
			moved := lastPort > 0 && st["ws_port"] != lastPort
			if moved {
				st["ws_port_was"] = lastPort
			}
			// A start no person asked for tells no one: what it would
			// print is not recorded as told.
			announce := ""
			if !c.Autostarted {
				st["leaves"] = to
				if announce, err = to.announce(l, first); err != nil {
					return err
				}
			}
			return g.out(st, func(w io.Writer) {
				fmt.Fprintf(w, "Daemon started (pid %d)\n  socket:    %s\n", cmd.Process.Pid, l.Socket)
				if p, ok := st["ws_port"]; ok {
					fmt.Fprintf(w, "  websocket: %s\n", wsURL(c.WSAddr, p))
				}
				if moved {
					fmt.Fprintf(w, "  the web console's port %d was taken, so it moved to %v: open the console again with thrum web\n", lastPort, st["ws_port"])
				}
				if announce != "" {
					fmt.Fprintln(w, announce)
				}
				printHealthNotes(w, h)
			})
		}
		select {
		case err := <-exited:
			tail, _ := tailFile(l.LogFile, logStart, 10)
			return fmt.Errorf("daemon exited at start (%v); its log, %s, ends:\n%s\n(if it names a damaged file, `thrum doctor` lists every problem)", err, l.LogFile, tail)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("daemon did not answer within %v; see %s", c.Timeout, l.LogFile)
		}
	}
}

// wsURL is the daemon's WebSocket address: the host of --ws-addr with the
// port it listens on.
func wsURL(addr string, port any) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		host = "127.0.0.1"
	}
	return fmt.Sprintf("ws://%s/ws", net.JoinHostPort(host, fmt.Sprint(port)))
}

// alreadyRunning reports a daemon that a start found running.
func alreadyRunning(g *Globals, l *layout, pid int, h *rpc.HealthResult) error {
	st := statusJSON(l, pid, h)
	return g.out(st, func(w io.Writer) {
		fmt.Fprintf(w, "Daemon already running (pid %d)\n", pid)
		if p, ok := st["ws_port"]; ok {
			fmt.Fprintf(w, "  websocket: %s\n", wsURL("", p))
		}
		printHealthNotes(w, h)
	})
}

// printHealthNotes prints what health says was repaired and is wrong.
func printHealthNotes(w io.Writer, h *rpc.HealthResult) {
	for _, r := range h.Repairs {
		fmt.Fprintf(w, "  repaired: %s\n", r)
	}
	for _, p := range h.Problems {
		fmt.Fprintf(w, "  degraded: %s\n", p)
	}
}

// startLock takes an exclusive lock on path, waiting up to wait, and
// returns its release.
func startLock(ctx context.Context, path string, wait time.Duration) (func(), error) {
	f, err := private.OpenFile(path, os.O_CREATE|os.O_RDWR)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(wait)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if err != syscall.EWOULDBLOCK || time.Now().After(deadline) {
			f.Close()
			if err == syscall.EWOULDBLOCK {
				err = fmt.Errorf("another thrum daemon start has been running for %v", wait)
			}
			return nil, err
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// tailFile returns the last n lines of path from offset from on.
func tailFile(path string, from int64, n int) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	if from > 0 && from <= int64(len(b)) {
		b = b[from:]
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n"), nil
}

func health(ctx context.Context, l *layout) (*rpc.HealthResult, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	c, err := rpc.Dial(ctx, l.Socket, nil)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.Health(ctx, &rpc.HealthParams{})
}

func statusJSON(l *layout, pid int, h *rpc.HealthResult) map[string]any {
	out := map[string]any{"running": h != nil, "pid": pid, "socket": l.Socket, "log_dir": l.LogDir}
	if h != nil { // the port file outlives the daemon
		if p := readPort(l.WSPort); p > 0 {
			out["ws_port"] = p
		}
		out["health"] = h
	}
	return out
}

// notAnswering says why a daemon (pid) that holds this repository's log
// did not answer health on l.Socket (herr): it runs with other runtime
// state (another THRUM_HOME or --home), whose socket is not this one, or
// it is busy.
func notAnswering(l *layout, pid int, herr error) string {
	if deletedUnder(pid, filepath.Dir(l.Socket)) {
		return fmt.Sprintf("its runtime directory %s was deleted while it ran: stop it (thrum daemon stop) and start it again", filepath.Dir(l.Socket))
	}
	if readPID(l.PIDFile) == pid {
		return fmt.Sprintf("no answer on %s (%v): it may be busy; see its log, %s", l.Socket, herr, l.LogFile)
	}
	// The repository's own .thrum is where a daemon started without
	// THRUM_HOME keeps its state.
	main := l.Root
	if l.Git && filepath.Base(l.GitDir) == ".git" {
		main = filepath.Dir(l.GitDir)
	}
	if home := filepath.Join(main, ".thrum"); home != l.Home && readPID(filepath.Join(home, "var", "thrum.pid")) == pid {
		return fmt.Sprintf("its runtime state is in %s, not in %s: run thrum without THRUM_HOME or --home to use it, or stop it first (thrum daemon stop)", home, l.Home)
	}
	return fmt.Sprintf("it was started with another THRUM_HOME than %s: use that one, or stop it first (thrum daemon stop)", l.Home)
}

// deletedUnder reports whether process pid holds open a file under dir
// that was deleted: its runtime directory, removed under it (Linux's
// /proc only; elsewhere false).
func deletedUnder(pid int, dir string) bool {
	fds := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(fds)
	if err != nil {
		return false
	}
	for _, e := range ents {
		t, err := os.Readlink(filepath.Join(fds, e.Name()))
		if err == nil && strings.HasPrefix(t, dir+string(filepath.Separator)) && strings.HasSuffix(t, " (deleted)") {
			return true
		}
	}
	return false
}

// lockedBy returns the live process holding the data directory's lock:
// the daemon, answering or not.
func lockedBy(l *layout) (pid int, ok bool) {
	holder, held, err := dirlock.Holder(l.LogDir)
	if err != nil || !held || !alive(holder) {
		return 0, false
	}
	return holder, true
}

// DaemonStopCmd stops the daemon.
type DaemonStopCmd struct {
	Timeout time.Duration `default:"15s" help:"How long to wait for a graceful stop."`
}

func (c *DaemonStopCmd) Help() string {
	return "Sends SIGTERM and waits for the daemon to finish in-flight calls and exit.\n\nExamples:\n  thrum daemon stop\n  thrum daemon stop --timeout 1m"
}

func (c *DaemonStopCmd) Run(ctx context.Context, g *Globals) error {
	l, err := resolveLayout(ctx, g)
	if err != nil {
		return err
	}
	return stopDaemon(g, l, c.Timeout, g.out)
}

// stopDaemon stops l's daemon, waiting up to timeout, and reports what
// it did through out (Globals.out, or what restart makes of it).
func stopDaemon(g *Globals, l *layout, timeout time.Duration, out func(any, func(io.Writer)) error) error {
	pid := readPID(l.PIDFile)
	// Signal only the process that holds the data directory's lock: after
	// a crash the pid file may name an unrelated process that got its ID.
	holder, held, err := dirlock.Holder(l.LogDir)
	if err != nil {
		return fmt.Errorf("daemon stop: %w", err)
	}
	if !held || holder <= 0 || !alive(holder) {
		stale := pid > 0
		if stale {
			if err := os.Remove(l.PIDFile); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("daemon stop: %w", err)
			}
		}
		return out(map[string]any{"stopped": false, "running": false, "stale_pid_removed": stale, "pid": pid}, func(w io.Writer) {
			if stale {
				fmt.Fprintf(w, "Daemon is not running: removed the stale pid file (it named pid %d, which is not the daemon; nothing was signalled)\n", pid)
				return
			}
			fmt.Fprintln(w, "Daemon is not running")
		})
	}
	if pid > 0 && pid != holder {
		g.hint("the pid file names %d but the daemon is %d: stopping %d", pid, holder, holder)
	}
	pid = holder
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return fmt.Errorf("daemon stop: %w", err)
	}
	deadline := time.Now().Add(timeout)
	for alive(pid) && !zombie(pid) {
		if time.Now().After(deadline) {
			return fmt.Errorf("daemon (pid %d) did not stop within %v", pid, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return out(map[string]any{"stopped": true, "pid": pid}, func(w io.Writer) {
		fmt.Fprintf(w, "Daemon stopped (pid %d)\n", pid)
	})
}

// DaemonRestartCmd stops the daemon and starts it again.
type DaemonRestartCmd struct {
	Timeout time.Duration `default:"15s" help:"How long to wait for the daemon to stop, and then to answer."`
}

func (c *DaemonRestartCmd) Help() string {
	return `Stops the daemon (if it runs) and starts it with the flags it recorded at
its start (or daemon start's defaults), e.g. after installing a new thrum,
which every command asks for until then. Messages are kept, and the web
console's port when it is free, so an open console reconnects.

Examples:
  thrum daemon restart
  thrum daemon restart --json`
}

func (c *DaemonRestartCmd) Run(ctx context.Context, g *Globals) error {
	l, err := resolveLayout(ctx, g)
	if err != nil {
		return err
	}
	// daemon start's defaults, for a daemon that recorded no flags.
	f := daemonFlags{WSAddr: "127.0.0.1:0", SyncInterval: 60 * time.Second, SyncWait: 2 * time.Second}
	if b, err := os.ReadFile(flagsFile(l)); err == nil {
		if err := json.Unmarshal(b, &f); err != nil {
			return fmt.Errorf("daemon restart: %s: %w", flagsFile(l), err)
		}
	}
	err = stopDaemon(g, l, c.Timeout, func(v any, human func(io.Writer)) error {
		if !g.JSON && v.(map[string]any)["stopped"] == true {
			human(g.stdout) // one JSON document: start's
		}
		return nil
	})
	if err != nil {
		return err
	}
	start := &DaemonStartCmd{WSAddr: f.WSAddr, SyncInterval: f.SyncInterval, SyncWait: f.SyncWait, Timeout: c.Timeout, verbose: f.Verbose, natsFlags: f.natsFlags}
	return start.Run(ctx, g)
}

// zombie reports a process that exited but is not gone yet: not reaped
// (Z, as a child of a caller that has not waited, or of a slow init), or
// being reaped (X, while its parent's wait returns). Either is stopped
// for our purposes, though signalling it still succeeds.
func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state ...: comm may hold spaces and parentheses.
	_, after, ok := bytes.Cut(b[bytes.LastIndexByte(b, ')')+1:], []byte(" "))
	return ok && len(after) > 0 && (after[0] == 'Z' || after[0] == 'X')
}

// DaemonStatusCmd reports on the daemon.
type DaemonStatusCmd struct{}

func (c *DaemonStatusCmd) Run(ctx context.Context, g *Globals) error {
	l, err := resolveLayout(ctx, g)
	if err != nil {
		return err
	}
	h, herr := health(ctx, l)
	pid := readPID(l.PIDFile)
	if herr != nil {
		// A daemon that holds the lock is running, however busy it is.
		if holder, held := lockedBy(l); held {
			why := notAnswering(l, holder, herr)
			st := statusJSON(l, holder, nil)
			st["running"], st["answering"], st["error"] = true, false, why
			return g.out(st, func(w io.Writer) {
				fmt.Fprintf(w, "Daemon running (pid %d) but not answering here: %s\n", holder, why)
			})
		}
		st := statusJSON(l, pid, nil)
		st["hook_failures"] = hookFailuresJSON(l)
		if err := g.out(st, func(w io.Writer) {
			fmt.Fprintf(w, "Daemon is not running for %s\n", l.Root)
			if line := hookFailuresLine(l); line != "" {
				fmt.Fprintln(w, line)
			}
		}); err != nil {
			return err
		}
		g.hint("Start it with: thrum daemon start")
		return &codeError{code: exitNoDaemon, err: errSilent}
	}
	st := statusJSON(l, pid, h)
	st["hook_failures"] = hookFailuresJSON(l)
	return g.out(st, func(w io.Writer) {
		fmt.Fprintf(w, "Daemon running (pid %d)\n", pid)
		fmt.Fprintf(w, "  uptime:  %s\n", (time.Duration(h.UptimeMs) * time.Millisecond).Round(time.Second))
		fmt.Fprintf(w, "  socket:  %s\n", l.Socket)
		if p, ok := st["ws_port"]; ok {
			fmt.Fprintf(w, "  ws port: %v (ws://127.0.0.1:%v/ws)\n", p, p)
		}
		fmt.Fprintf(w, "  version: %s  status: %s  sync: %s\n", h.Version, h.Status, h.SyncState)
		if line := hookFailuresLine(l); line != "" {
			fmt.Fprintln(w, "  "+line)
		}
		printHealthNotes(w, h)
	})
}

func syncTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// syncRefusals is what sync.status and doctor report of the quarantine.
func syncRefusals(cs []admit.RefusalCount) []rpc.SyncRefusal {
	out := make([]rpc.SyncRefusal, 0, len(cs))
	for _, c := range cs {
		out = append(out, rpc.SyncRefusal{File: c.File, Reason: c.Reason, Count: c.Count, LastAt: syncTime(c.Last)})
	}
	return out
}

// errSilent marks an error already reported to the user.
var errSilent = errors.New("")
