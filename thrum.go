package thrum

import (
	"context"
	"crypto"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"time"

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/eventlog/admit"
	"github.com/thrumhq/thrum/internal/directory"
	"github.com/thrumhq/thrum/internal/dirlock"
	"github.com/thrumhq/thrum/internal/keystore"
	"github.com/thrumhq/thrum/internal/msgindex"
	"github.com/thrumhq/thrum/internal/private"
	"github.com/thrumhq/thrum/rpc"
	"github.com/thrumhq/thrum/store"
)

// Version is the version of thrum reported by health. A release build
// may set it: go build -ldflags "-X github.com/thrumhq/thrum.Version=…".
var Version = "0.1.0"

// CurrentBuild is the build of the running program, as health reports
// it: Version, and the version control stamps that the go command
// records in a binary built in a git checkout (for an embedding program,
// its own repository's).
func CurrentBuild() rpc.Build {
	b := rpc.Build{Version: Version}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		case "vcs.time":
			b.VCSTime = s.Value
		}
	}
	return b
}

// Defaults of Options.
const (
	DefaultMaxContentBytes  = 256 << 10 // message content
	DefaultSubscriberQueue  = 1024      // notifications buffered per Subscription
	DefaultMaxSubscriptions = 256       // per Subscription
	DefaultActiveWindow     = 2 * time.Minute
	DefaultDBName           = "messages.db"
	DefaultCleanupDays      = 30
	DefaultRefreshTimeout   = 2 * time.Second
)

// Options configure a Node. A nil *Options means all defaults; the struct
// is copied by Open.
type Options struct {
	// Logger receives warnings and errors. Nil means silent.
	Logger *slog.Logger

	// DBPath is the SQLite projection's file. Default: messages.db in the
	// data directory.
	DBPath string

	// RepoID identifies the repository the node serves (health, unnamed
	// agent IDs). Default empty.
	RepoID string

	// GitRepo, if set, supplies the git work context: the user for
	// user.identify, and the context a heartbeat records for a session's
	// worktree, asked only about the worktrees of the node's repository
	// (GitRepo.Worktrees), never another path a caller names. The
	// library never runs git itself. Default: none (user.identify finds
	// no user, heartbeats record no context).
	GitRepo GitRepo

	// IdentityDir is where identity files live (.thrum/identities).
	// agent.delete removes the agent's file from it, and agent.cleanup
	// never deletes an agent whose file is in it. Default: none.
	IdentityDir string

	// IdentityDirs, if set, lists the other directories where identity
	// files of this node's agents live: with git worktrees sharing one
	// node, each worktree's .thrum/identities. It is called on each
	// agent.cleanup and agent.delete, so worktrees added while the node
	// runs count. agent.cleanup fails rather than guess when it returns an
	// error. The node never looks for such directories itself. Default:
	// IdentityDir alone.
	IdentityDirs func(ctx context.Context) ([]string, error)

	// MaxContentBytes caps a message's content. Default
	// DefaultMaxContentBytes.
	MaxContentBytes int

	// SubscriberQueue is the notification queue of a Subscription made by
	// Listen; a Subscription whose queue is full is closed rather than
	// slowing writers. Default DefaultSubscriberQueue.
	SubscriberQueue int

	// MaxSubscriptions caps the filters (Subscribe calls) of one
	// Subscription. Default
	// DefaultMaxSubscriptions.
	MaxSubscriptions int

	// SyncState, if set, reports the sync state for health ("synced",
	// "pending" or "error"). Default: always "synced".
	SyncState func() string

	// OnCommit, if set, is called with each batch the log committed, once
	// it is applied, in log order: events made here and events a sync
	// imported (Event.Imported tells them apart). Sync loops use it: as
	// their trigger, and the NATS publisher for this machine's lines. It
	// runs on the commit path, must not block, and must not change the
	// events or keep the slice.
	OnCommit func(batch []*eventlog.Event)

	// Refresh, if set, brings in events made elsewhere and returns once
	// they are applied: for the reference daemon, a git sync round (fetch
	// and merge) with the remote. A message.send or thread.create that
	// names a recipient nobody here has calls it once, waiting at most
	// RefreshTimeout, then resolves the names again, so an agent that
	// registered on another clone is found without a manual sync. A name
	// still unknown after it (or a Refresh that failed or ran out of time)
	// is the usual not-found error. Refresh must return when its ctx
	// ends. Default: none.
	Refresh func(ctx context.Context) error

	// RefreshTimeout bounds the wait for Refresh. Default
	// DefaultRefreshTimeout.
	RefreshTimeout time.Duration

	// NoSync skips fsync of the log: for tests and benchmarks only.
	NoSync bool

	// Now is the clock. Default time.Now.
	Now func() time.Time

	// Signer holds the keys the node signs its events with: the
	// machine's (MachineKey) and one per identity registered here, made
	// when first asked for. Whoever can read them can write as this
	// machine. Default: key files (0600) in DefaultKeyDir in the data
	// directory. Lose them, and the node makes new keys, which other
	// clones take only on their owner's word.
	Signer Signer

	// Keyring, if set, returns the team's keyring: the text of the
	// thrum-keys file as the repository's default branch has it (nil if
	// it has none), and the version read (a commit or blob ID), which
	// the node compares to know when the file changed. Admission calls
	// it for each batch of another machine's lines; what it lists is
	// honoured over the keys first seen (see KeyringStatus). The library
	// never runs git: the reference CLI reads origin/HEAD. Default: no
	// keyring.
	Keyring func(ctx context.Context) (text []byte, version string, err error)
}

// Node is an open thrum data directory: the event log, the projector of
// its read models and the notifier, with every domain operation as a
// method. All methods may be called concurrently. Operations that act as
// "the current agent" take the caller from ctx (see WithCaller).
type Node struct {
	dir     string
	opts    Options
	log     *eventlog.Log
	proj    *Projector
	store   *store.Store         // proj's
	dirc    *directory.Directory // proj's: agents and groups in memory, for addressing
	idx     *msgindex.Index      // proj's: messages in memory, for listing
	lock    io.Closer            // the data directory's flock, if Open took it
	gate    *admit.Gate          // what every line from another machine goes through (synctrust.go)
	machine string               // this machine's ID: its key, encoded (synctrust.go)
	// oldMachines are the IDs this machine had before its key (random
	// ones, from before machine keys).
	oldMachines []string
	signer      Signer            // the keys the node signs with (signing.go)
	machineKey  crypto.Signer     // the machine's key: signer's MachineKey
	machinePub  ed25519.PublicKey // its public key
	signOff     bool              // events go unsigned: the benchmarks' baseline (export_test.go)
	kem         string            // the machine's X25519 key for team keys, encoded; "" without a key store (sealing.go)

	// The team's keyring as read last (keyring.go).
	ringMu      sync.Mutex
	ring        *keyring
	ringSeen    bool // the file was there
	ringChanged *rpc.KeyringChange
	started     time.Time

	ctlMu sync.Mutex // serializes check-then-write operations on agents, sessions and groups
	keys  keyLocks   // serialize calls with the same idempotency key
	subs  notifier

	worktrees worktreeCache
	bg        sync.WaitGroup     // the index build
	stopBg    context.CancelFunc // cancels it

	claims readClaims // arbitrates message.markRead (claims.go)
	ackMu  sync.Mutex // serializes AckMessage (receipts.go)
	// standing claims a send fills in its own commit (message.claimNext)
	standing standingClaims

	// sessCache maps an agent to its active session; sessGen counts
	// invalidations, so a read that raced one is not cached.
	sessMu    sync.Mutex
	sessCache map[string]*store.Session
	sessGen   uint64

	// lastSeen caches every agent's last_seen_at for a second: enough for
	// an active/offline status with a two-minute window.
	seenMu   sync.Mutex
	seen     map[string]string
	seenTime time.Time

	// Storage faults (storage.go): a failed log write, until one
	// succeeds; retryLoop retries the projector's pending events and
	// probes the log's disk when kicked, until quit.
	faultMu   sync.Mutex
	fault     faultState
	quit      chan struct{}
	retryDone chan struct{}

	closeOnce sync.Once
	closeErr  error
}

// LockFile is the file in a data directory that Open locks, so that two
// processes never write one log.
const LockFile = ".lock" // internal/dirlock.File too

// ErrLocked is returned by Open when another process has the data
// directory open.
var ErrLocked = dirlock.ErrLocked

// Open opens the data directory dir (creating it if needed) and takes
// its lock (ErrLocked if another process has it): the event log in dir,
// the SQLite store at opts.DBPath, and a Projector over the store. It is
// New over parts made with the defaults. Any log tail past the store's
// checkpoint is applied before Open returns (ctx bounds that replay), and
// a torn final line is repaired (see Repairs).
func Open(ctx context.Context, dir string, opts *Options) (*Node, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.DBPath == "" {
		o.DBPath = filepath.Join(dir, DefaultDBName)
	}
	lock, err := dirlock.Lock(dir)
	if err != nil {
		return nil, err
	}
	// The projection holds every message body: 0600 in a directory
	// made 0700 (SQLite gives its -wal and -shm files the database's mode).
	if err := os.MkdirAll(filepath.Dir(o.DBPath), private.DirMode); err != nil {
		lock.Close()
		return nil, fmt.Errorf("thrum: open: %w", err)
	}
	if f, err := private.OpenFile(o.DBPath, os.O_CREATE|os.O_RDWR); err != nil {
		lock.Close()
		return nil, fmt.Errorf("thrum: open: %w", err)
	} else {
		f.Close()
	}
	// The message index's snapshot needs only its file to be read and
	// decoded: that runs while the projection and the log open.
	pre := msgindex.StartReading(msgindex.SnapshotPath(o.DBPath))
	st, err := store.Open(o.DBPath, &store.Options{Logger: o.Logger})
	if errors.Is(err, store.ErrOutdated) {
		// The projection is a cache of the log: drop it and replay.
		if o.Logger != nil {
			o.Logger.Warn("thrum: rebuilding the projection from the log", "reason", err)
		}
		for _, suffix := range []string{"", "-wal", "-shm"} {
			os.Remove(o.DBPath + suffix)
		}
		st, err = store.Open(o.DBPath, &store.Options{Logger: o.Logger})
	}
	if err != nil {
		pre.Wait()
		lock.Close()
		return nil, fmt.Errorf("thrum: open: %w", err)
	}
	// The key store holds the keys that sign and the team keys that
	// seal: the log seals and opens bodies with it (sealing.go). A team
	// key file that does not read stops the start: sealing silently off
	// would send bodies in clear.
	ks, err := keystore.Open(filepath.Join(dir, DefaultKeyDir))
	if err == nil {
		_, err = ks.TeamSecrets()
	}
	if err != nil {
		pre.Wait()
		st.Close()
		lock.Close()
		return nil, fmt.Errorf("thrum: open: %w", err)
	}
	if o.Signer == nil {
		o.Signer = ks
	}
	p := NewProjector(st)
	lg, err := eventlog.Open(dir, &eventlog.Options{Logger: o.Logger, Stage: p.Stage, NoSync: o.NoSync, TeamKeys: ks})
	if err != nil {
		pre.Wait()
		st.Close()
		lock.Close()
		return nil, fmt.Errorf("thrum: open: %w", err)
	}
	n, err := newNode(ctx, lg, p, &o, lock, pre)
	if err != nil {
		return nil, err
	}
	return n, nil
}

// New returns a Node over its parts: lg, an open event log whose
// eventlog.Options.Stage is p.Stage (or OnCommit p.Commit), and p, the Projector of an open
// store (and of any projections an embedder adds). The node owns both
// from here: Close closes them, and so does a failed New (unless p
// already serves a node, which is an error). opts.DBPath is ignored (the
// store's path is used). Unlike Open, New takes no lock on the data directory: the
// caller keeps other processes from writing lg. The store catches up
// with the log, and the extra projections replay it, before New returns.
func New(ctx context.Context, lg *EventLog, p *Projector, opts *Options) (*Node, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	return newNode(ctx, lg, p, &o, nil, nil)
}

// newNode assembles a node; on failure it closes lg, p's store and lock.
func newNode(ctx context.Context, lg *eventlog.Log, p *Projector, opts *Options, lock io.Closer, pre *msgindex.Reading) (*Node, error) {
	if p.n.Load() != nil {
		return nil, errors.New("thrum: the projector already serves a node")
	}
	n := &Node{dir: lg.Dir(), opts: *opts, log: lg, proj: p, store: p.store, dirc: p.dirc, idx: p.idx, lock: lock,
		started: time.Now(), sessCache: map[string]*store.Session{}}
	o := &n.opts
	o.DBPath = p.store.Path()
	if o.MaxContentBytes <= 0 {
		o.MaxContentBytes = DefaultMaxContentBytes
	}
	if o.SubscriberQueue <= 0 {
		o.SubscriberQueue = DefaultSubscriberQueue
	}
	if o.MaxSubscriptions <= 0 {
		o.MaxSubscriptions = DefaultMaxSubscriptions
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.RefreshTimeout <= 0 {
		o.RefreshTimeout = DefaultRefreshTimeout
	}
	n.subs.init(n)
	n.keys.init()
	n.quit, n.retryDone = make(chan struct{}), make(chan struct{})
	bg, stop := context.WithCancel(context.WithoutCancel(ctx))
	n.stopBg = stop
	go n.retryLoop()
	p.n.Store(n)
	// The message index loads the snapshot saved last (as the log grew,
	// or at Close) and applies the log past it (listings wait the few
	// milliseconds this takes). It needs only the log, so it runs while
	// the projection catches up. Without a usable snapshot the index
	// builds in the background from the projection once that has caught
	// up, and listings are answered from SQLite until it is built. Open
	// (and a daemon's first answers) wait for neither. Close cancels
	// both.
	caughtUp := make(chan struct{})
	n.bg.Add(2)
	policy := indexSavePolicy
	go func() {
		defer n.bg.Done()
		n.idx.SaveLoop(bg, n.indexSnapshot(), policy, n.opts.Logger)
	}()
	go func() {
		defer n.bg.Done()
		if n.idx.Restore(bg, n.indexSnapshot(), pre, n.log, n.opts.Logger) {
			return
		}
		select {
		case <-caughtUp:
			n.idx.Build(bg, n.store)
		case <-bg.Done():
		}
	}()
	if _, err := n.store.CatchUp(ctx, lg); err != nil {
		n.Close()
		return nil, fmt.Errorf("thrum: open: replay log: %w", err)
	}
	close(caughtUp)
	if err := p.replayExtra(ctx, lg); err != nil {
		n.Close()
		return nil, fmt.Errorf("thrum: open: replay log: %w", err)
	}
	if err := n.dirc.Reload(ctx, n.store); err != nil {
		n.Close()
		return nil, fmt.Errorf("thrum: open: %w", err)
	}
	// A team key added while the node was closed opens what waited.
	if _, err := n.reopenSealed(ctx); err != nil {
		n.Close()
		return nil, fmt.Errorf("thrum: open: %w", err)
	}
	if err := n.openSigner(); err != nil {
		n.Close()
		return nil, fmt.Errorf("thrum: open: %w", err)
	}
	if err := n.openKEM(); err != nil {
		n.Close()
		return nil, fmt.Errorf("thrum: open: %w", err)
	}
	// Old tokens are adopted first: only while the log has no local
	// shard, which the machine's ID then starts.
	if err := n.adoptIdentityTokens(ctx); err != nil {
		n.Close()
		return nil, fmt.Errorf("thrum: open: %w", err)
	}
	if err := n.ensureMachine(ctx); err != nil {
		n.Close()
		return nil, fmt.Errorf("thrum: open: %w", err)
	}
	if err := n.ensureKeys(ctx); err != nil {
		n.Close()
		return nil, fmt.Errorf("thrum: open: %w", err)
	}
	if err := n.ensureEveryone(ctx); err != nil {
		n.Close()
		return nil, fmt.Errorf("thrum: open: %w", err)
	}
	gate, err := admit.New(lg, &admit.Options{Judge: n.admitSynced, Logger: n.opts.Logger, Now: n.opts.Now})
	if err != nil {
		n.Close()
		return nil, fmt.Errorf("thrum: open: %w", err)
	}
	n.gate = gate
	return n, nil
}

// EveryoneGroup is the built-in group that holds every agent.
const EveryoneGroup = "everyone" // internal/directory.Everyone too

func (n *Node) ensureEveryone(ctx context.Context) error {
	if n.dirc.HasGroup(EveryoneGroup) {
		return nil
	}
	return n.append(ctx, &eventlog.Event{Type: eventlog.TypeGroupCreate, Payload: eventlog.GroupCreate{
		Name: EveryoneGroup, Description: "Every registered agent", CreatedBy: "system", Machine: n.machine,
	}})
}

// Close stops the node: subscriptions are closed, the index build is
// cancelled, the log and the store are closed. It is idempotent.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		n.subs.closeAll()
		n.stopBg()
		n.bg.Wait()
		close(n.quit)
		<-n.retryDone
		var errs []error
		if n.log != nil {
			errs = append(errs, n.log.Close())
		}
		n.idx.SaveIfChanged(n.indexSnapshot(), n.opts.Logger) // nothing commits now
		n.idx.Close()
		if n.store != nil {
			errs = append(errs, n.store.Close())
		}
		if n.lock != nil {
			errs = append(errs, n.lock.Close()) // releases the flock
		}
		n.closeErr = errors.Join(errs...)
	})
	return n.closeErr
}

// Warm is closed once listings no longer wait for the node's start: the
// message index is loaded from its snapshot and made current with the
// log, or (with no usable snapshot) it has begun to build from the
// projection, which answers listings until it is built; or the node is
// closed. A program embedding the node can hold back work that would
// slow the start until then, as the reference daemon holds back garbage
// collection.
func (n *Node) Warm() <-chan struct{} { return n.idx.Settled() }

// indexSnapshot is the file where the node saves the message index for
// the next Open, beside the projection's database; "" if the database has
// no file.
func (n *Node) indexSnapshot() string {
	if n.store == nil {
		return ""
	}
	return msgindex.SnapshotPath(n.store.Path())
}

// indexSavePolicy is when a running node saves its message index (a
// variable so that a test can shorten it; a node reads it once, at open).
var indexSavePolicy = msgindex.DefaultSavePolicy

// Dir returns the data directory (the log's home).
func (n *Node) Dir() string { return n.dir }

// EventLog returns the node's event log, for inspection and replay.
func (n *Node) EventLog() *EventLog { return n.log }

// EventLog is the append-only log of a node, the source of truth: open
// one with eventlog.Open, with its Options.Stage set to a Projector's
// Stage (or OnCommit to its Commit), and hand both to New (Open does all three). It is package
// eventlog's Log, named here as the first of the node's parts.
type EventLog = eventlog.Log

// Repairs reports the torn log tails that Open moved aside.
func (n *Node) Repairs() []eventlog.Repair { return n.log.Repairs() }

// Rebuild rebuilds the projection from the log into path (which must not
// be the live database) and returns it; the caller closes it. It is how a
// projection is checked against the log, and the first step of replacing a
// damaged one.
func (n *Node) Rebuild(ctx context.Context, path string) (*store.Store, error) {
	if filepath.Clean(path) == filepath.Clean(n.opts.DBPath) {
		return nil, errors.New("thrum: rebuild: path is the live projection")
	}
	return store.Rebuild(ctx, n.log, path, nil)
}

// Health reports the node's status.
func (n *Node) Health(ctx context.Context, _ *rpc.HealthParams) (*rpc.HealthResult, error) {
	status := "ok"
	problems := n.problems()
	if len(problems) > 0 {
		status = "degraded"
	}
	var repairs []string
	for _, r := range n.log.Repairs() {
		repairs = append(repairs, r.String())
	}
	sync := "synced"
	if n.opts.SyncState != nil {
		sync = n.opts.SyncState()
	}
	return &rpc.HealthResult{
		Status:    status,
		UptimeMs:  time.Since(n.started).Milliseconds(),
		Build:     CurrentBuild(),
		RepoID:    n.opts.RepoID,
		SyncState: sync,
		Problems:  problems,
		Repairs:   repairs,
	}, nil
}

// now returns the node's clock.
func (n *Node) now() time.Time { return n.opts.Now() }

func ts(t time.Time) string { return eventlog.FormatTime(t) }

// shardOf names the log shard of an agent's message events.
func shardOf(agentID string) string { return eventlog.AgentShard(agentID) }
