// Package natsync carries an event log between machines live, through a
// NATS JetStream stream: each machine publishes the lines it writes and
// reads the others', so an event reaches another machine in milliseconds
// instead of at its next git round. Git stays the archive; the two may
// carry the same event, and the log keeps it once.
//
// Publishing. A Syncer publishes every line this machine wrote to a shard
// that syncs (never the local shard, never a line it imported), as the
// exact bytes of the log, on one subject per machine and shard:
// <Subjects>.<machine>.<shard>. A message holds a run of consecutive
// lines of one shard (up to the server's max_payload) with the shard
// offset of its first line in a header, and carries the stream sequence
// the subject's last message had, so each subject has one writer: a
// copied clone, or a stream reset under it, is refused by the server and
// reported, never interleaved. One message per subject is in flight at a
// time, many subjects at once. The published position is a position in
// the log, saved lazily: after a crash it publishes again, and after a
// reconnect it asks the stream for each subject's last message, since a
// server acknowledges before it fsyncs (JetStream's sync_interval), and
// publishes again what the stream lost. Publishing never blocks the log:
// it reads what was committed, whenever the server is there.
//
// Consuming. An ordered consumer (an ephemeral consumer the client
// recreates from its own position: no state on the server per clone)
// reads the stream from the sequence this clone recorded after its last
// import. A batch of messages goes through the one admission every
// remote line goes through (Admission), per shard, after dropping this
// machine's own subjects. An agent's shard is appended to only at its
// author's offset, so it stays byte-identical to the author's file on
// every clone: lines this log already has are dropped by offset, and a
// message past the end of the local shard (a gap) waits for a git round
// (Options.Refresh) or, failing that, is left to git. A stream that was
// made again (another creation time), or that dropped messages this clone
// had not read, forces a git round before the consumer goes on; without
// git, Status counts the messages missed.
//
// The server and the stream are the caller's to trust as little as a git
// remote: what arrives is admitted like a git merge's lines. A Syncer
// never creates, purges or deletes the stream (InitStream does, for its
// owner).
package natsync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/eventlog/admit"
)

// Defaults.
const (
	// DefaultMaxAge is how long InitStream's stream keeps a message.
	DefaultMaxAge = 30 * 24 * time.Hour
	// DefaultBatch is how many stream messages one import takes at most.
	DefaultBatch = 256
	// DefaultRetry is how long a Syncer waits before trying again after
	// a failure that is not the connection's (which nats.go retries).
	DefaultRetry = 2 * time.Second
	// DefaultGapWait bounds the git round a gap waits for.
	DefaultGapWait = 30 * time.Second

	// HeaderOffset is the header of a message that gives the offset of
	// its first line in its author's shard.
	HeaderOffset = "Thrum-Offset"

	eventsToken = "@events" // the subject token of events.jsonl ("" shard)
	stateEvery  = time.Second
	lookEvery   = 30 * time.Second // how often an idle consumer looks at the stream
	heartbeat   = 5 * time.Second
	maxRunsOut  = 256                    // messages in flight at once (one per subject)
	roundBytes  = 2 << 20                // what one round reads of a shard at most
	roundGap    = 20 * time.Millisecond  // the least time between two publishing passes
	batchBytes  = admit.BatchBytes       // what one import takes at most (a message more)
	batchLull   = 500 * time.Microsecond // a batch ends when no message came for this long
	headroom    = 512                    // bytes of a message that are not its lines
)

// Sync states, as Status reports them.
const (
	StateStopped    = "stopped"    // Run is not running
	StateConnecting = "connecting" // no connection to the server yet (or again)
	StateLive       = "live"       // connected, and the last step succeeded
	StateError      = "error"      // the last step failed (see LastError)
)

// Config says which server and stream. Every clone of a repository uses
// the same Stream and Subjects.
type Config struct {
	// URL is the server: nats://host:port, tls://host:port for TLS, or
	// several separated by commas (a cluster). Required.
	URL string
	// CredsFile, if set, is a credentials file (a user JWT and its nkey
	// seed) to authenticate with.
	CredsFile string
	// Domain, if set, is the JetStream domain of the stream (a leaf
	// node's).
	Domain string
	// Insecure allows a plain nats:// URL to a host that is not this
	// machine without credentials, whose events would cross the network
	// in the clear to a server that asks no one who they are.
	Insecure bool
	// Stream is the stream's name. Required.
	Stream string
	// Subjects is the prefix of the stream's subjects; the stream takes
	// <Subjects>.>. Required.
	Subjects string
}

// Check reports what is wrong with the configuration, if anything: a
// missing field, names NATS refuses, or a plain connection across the
// network without credentials (see Insecure).
func (c *Config) Check() error {
	switch {
	case c.URL == "":
		return errors.New("natsync: no server URL")
	case c.Stream == "" || strings.ContainsAny(c.Stream, ".*> \t\r\n/\\"):
		return fmt.Errorf("natsync: stream name %q: use letters, digits, - and _", c.Stream)
	case !validSubject(c.Subjects):
		return fmt.Errorf("natsync: subject prefix %q: use tokens of letters, digits, - and _ separated by dots", c.Subjects)
	}
	for _, one := range strings.Split(c.URL, ",") {
		u, err := url.Parse(strings.TrimSpace(one))
		if err != nil || u.Host == "" {
			return fmt.Errorf("natsync: server URL %q: want nats://host:port or tls://host:port", one)
		}
		switch u.Scheme {
		case "tls", "wss":
			continue
		case "nats", "ws":
		default:
			return fmt.Errorf("natsync: server URL %q: the scheme must be nats, tls, ws or wss", one)
		}
		if loopback(u.Hostname()) || c.CredsFile != "" || u.User != nil || c.Insecure {
			continue
		}
		return fmt.Errorf("natsync: server %s is on another machine over a plain connection, without credentials: the log's events would cross the network in the clear to a server that checks no one; use TLS (tls://), give credentials, or allow it explicitly", u.Host)
	}
	return nil
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func validSubject(s string) bool {
	if s == "" {
		return false
	}
	for _, tok := range strings.Split(s, ".") {
		if tok == "" {
			return false
		}
		for _, c := range tok {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// Admission is the one admission of lines another machine wrote (a
// thrum node's admit.Gate, shared with git sync): it imports those of
// one shard that may enter the log, drops those the log holds, and
// quarantines the rest. An error imports nothing more; the Syncer reads
// the same messages again later.
type Admission interface {
	Admit(ctx context.Context, src admit.Source, shard string, lines [][]byte) (*admit.Result, error)
}

// Options configure a Syncer. Machine and Admission are required.
type Options struct {
	// Machine names this clone in its subjects (a thrum node's Machine).
	// Two clones must never share one: a copied clone is caught by the
	// stream, and stops publishing.
	Machine string
	// Admission takes what arrives from other machines.
	Admission Admission
	// Local reports whether this machine wrote an event (it publishes
	// only those), for the lines it reads back from the log: those
	// committed before Committed told it of each commit. Nil means
	// every event of a shard that syncs.
	Local func(ctx context.Context, e *eventlog.Event) (bool, error)
	// Refresh, if set, runs a git round and returns when it is done:
	// what a gap in an agent's shard, a reset stream or messages the
	// stream dropped wait for. Nil: there is no other way to those
	// events, and Status counts them as missed.
	Refresh func(ctx context.Context) error
	// StateFile keeps the Syncer's positions between runs ("": none;
	// every run then starts as the first).
	StateFile string
	// Logger receives failures and what was left to git. Nil means
	// silent.
	Logger *slog.Logger
	// Batch caps the stream messages of one import. Default
	// DefaultBatch.
	Batch int
	// Retry is the wait after a failure. Default DefaultRetry.
	Retry time.Duration
}

// Status is a snapshot of a Syncer.
type Status struct {
	State     string
	Server    string // the URL connected to, credentials hidden
	Stream    string
	MaxAge    time.Duration // the stream's retention (0: unknown or none)
	LastError string
	// Published counts the messages (runs of lines) published since
	// Run started; Unpublished is how many bytes of this machine's
	// shards wait to be published (as of the last round).
	Published   int
	Unpublished int64
	// Imported counts events imported from the stream since Run
	// started; Lag is how many stream messages came after the last one
	// imported (as the last one said).
	Imported int
	Lag      uint64
	// TooLarge counts events over the server's max_payload, left to git.
	TooLarge int
	// Gaps counts messages of an agent's shard that started past the
	// end of the shard here and were left to git.
	Gaps int
	// Missed counts stream messages gone before this clone read them,
	// with no git remote to bring their events.
	Missed uint64
}

// Syncer publishes a log's lines to a stream and imports the others'.
// Notify, Status and Refresh may be called concurrently with Run.
type Syncer struct {
	log  *eventlog.Log
	cfg  Config
	opts Options

	pubWake chan struct{} // local events were committed, or the connection came back
	conWake chan struct{} // the connection came back

	// Lock order: mu is taken last (never held across I/O).
	mu       sync.Mutex
	st       *state
	dirty    bool // st changed since it was saved
	status   Status
	js       jetstream.JetStream // while Run runs
	progress chan struct{}       // closed and replaced on each import and publish
	// Publishing passes started, and the last one that published all
	// there was (what Refresh waits for).
	pubStarted, pubDone uint64
	pubCheck            bool // a (re)connection, or the consumer saw the stream made again

	// This machine's lines as they are committed, by shard, and
	// the bytes all of them hold (see Committed).
	tails    map[string]*tail
	tailHeld int64

	// The publisher's own (see wroteHere): Options.Local's answers by
	// author, and the local shard's end when they were given.
	local    map[string]bool
	localEnd int64
}

// New returns a Syncer for the log, with the state an earlier one left
// in Options.StateFile.
func New(log *eventlog.Log, cfg *Config, opts *Options) (*Syncer, error) {
	s := &Syncer{log: log, cfg: *cfg, tails: map[string]*tail{}, pubWake: make(chan struct{}, 1), conWake: make(chan struct{}, 1), progress: make(chan struct{})}
	if opts != nil {
		s.opts = *opts
	}
	if err := s.cfg.Check(); err != nil {
		return nil, err
	}
	if s.opts.Machine == "" || !validSubject(s.opts.Machine) || strings.Contains(s.opts.Machine, ".") {
		return nil, fmt.Errorf("natsync: machine name %q: use letters, digits, - and _", s.opts.Machine)
	}
	if s.opts.Admission == nil {
		return nil, errors.New("natsync: no admission for what arrives")
	}
	if s.opts.Batch <= 0 {
		s.opts.Batch = DefaultBatch
	}
	if s.opts.Retry <= 0 {
		s.opts.Retry = DefaultRetry
	}
	st, err := loadState(s.opts.StateFile)
	if err != nil {
		return nil, err
	}
	if st.Stream != s.cfg.Stream {
		st = &state{Stream: s.cfg.Stream, Subjects: map[string]*subjectState{}}
	}

	s.st = st
	s.status = Status{State: StateStopped, Stream: s.cfg.Stream, Missed: st.Missed}
	return s, nil
}

// Notify tells the Syncer that events were committed. It never blocks.
func (s *Syncer) Notify() { wake(s.pubWake) }

func wake(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// Status returns the Syncer's state.
func (s *Syncer) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.status
}

// Run connects to the server and publishes and imports until ctx ends.
// It returns an error only for a connection it cannot even try (bad
// credentials file, bad options); a server that is down or refuses is
// retried and shown in Status.
func (s *Syncer) Run(ctx context.Context) error {
	opts := []nats.Option{
		nats.Name("thrum " + s.opts.Machine),
		nats.MaxReconnects(-1),
		nats.RetryOnFailedConnect(true),
		nats.ReconnectWait(time.Second),
		// The log is the queue: nothing is buffered while disconnected.
		nats.ReconnectBufSize(-1),
		nats.ConnectHandler(func(*nats.Conn) { s.connected() }),
		nats.ReconnectHandler(func(*nats.Conn) { s.connected() }),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				s.fail(fmt.Errorf("disconnected: %w", err))
			}
		}),
		// A connection refused (a server down, credentials refused)
		// while it tries again.
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) { s.fail(err) }),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { s.fail(err) }),
	}
	s.setState(StateConnecting)
	nc, js, err := dial(&s.cfg, opts...)
	if err != nil {
		s.fail(err)
		s.setState(StateStopped)
		return err
	}
	s.mu.Lock()
	s.js = js
	s.mu.Unlock()
	if nc.IsConnected() {
		s.connected()
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); s.publishLoop(ctx, nc, js) }()
	go func() { defer wg.Done(); s.consumeLoop(ctx, nc, js) }()
	tick := time.NewTicker(stateEvery)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			s.save()
			continue
		case <-ctx.Done():
		}
		break
	}
	wg.Wait()
	nc.Close()
	s.save()
	s.mu.Lock()
	s.js = nil
	s.status.State = StateStopped
	s.mu.Unlock()
	return nil
}

// connected runs on nats.go's goroutine when the connection is made or
// made again: both loops then check the stream before going on.
func (s *Syncer) connected() {
	s.mu.Lock()
	if s.status.State == StateConnecting || s.status.State == StateError {
		s.status.State = StateLive
	}
	s.pubCheck = true // the server may have lost what it acknowledged
	s.mu.Unlock()
	wake(s.conWake)
	wake(s.pubWake)
}

func (s *Syncer) setState(state string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status.State = state
}

// fail records an error in Status and the log.
func (s *Syncer) fail(err error) {
	if err == nil {
		return
	}
	s.mu.Lock()
	changed := s.status.LastError != err.Error()
	s.status.State, s.status.LastError = StateError, err.Error()
	s.mu.Unlock()
	if changed && s.opts.Logger != nil {
		s.opts.Logger.Warn("natsync: will retry", "err", err)
	}
}

// ok records a step that worked.
func (s *Syncer) ok(nc *nats.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status.State, s.status.LastError = StateLive, ""
	s.status.Server = nc.ConnectedUrlRedacted()
}

// advancedLocked wakes Refresh's waiters.
func (s *Syncer) advancedLocked() {
	close(s.progress)
	s.progress = make(chan struct{})
	s.dirty = true
}

func (s *Syncer) save() {
	s.mu.Lock()
	if !s.dirty {
		s.mu.Unlock()
		return
	}
	st := s.st.clone()
	s.dirty = false
	s.mu.Unlock()
	if err := st.save(s.opts.StateFile); err != nil {
		s.fail(err)
	}
}

// sleep waits d, or less if ctx ends or c is woken.
func sleep(ctx context.Context, d time.Duration, c chan struct{}) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-c:
	case <-ctx.Done():
	}
}

// Refresh returns once the events this log committed before the call
// are in the stream, and the stream's messages as of the call are
// imported; or with ctx's error, or the connection's when there is none.
func (s *Syncer) Refresh(ctx context.Context) error {
	s.mu.Lock()
	js := s.js
	s.mu.Unlock()
	if js == nil {
		return errors.New("natsync: not running")
	}
	str, err := js.Stream(ctx, s.cfg.Stream)
	if err != nil {
		return fmt.Errorf("natsync: %w", err)
	}
	info := str.CachedInfo()
	s.mu.Lock()
	want := s.pubStarted + 1
	s.mu.Unlock()
	s.Notify()
	for {
		s.mu.Lock()
		done := s.st.Created.Equal(info.Created) && s.st.PubCreated.Equal(info.Created) && s.st.Seq >= info.State.LastSeq && s.pubDone >= want
		wait := s.progress
		s.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// subject is the subject of this machine's lines of a shard.
func (s *Syncer) subject(shard string) string {
	return s.cfg.Subjects + "." + s.opts.Machine + "." + shardToken(shard)
}

// shardToken is a shard's name as a subject token: shard names may hold
// dots, which subjects may not ("~" is in no shard name).
func shardToken(shard string) string {
	if shard == "" {
		return eventsToken
	}
	return strings.ReplaceAll(shard, ".", "~")
}

// parseSubject returns the machine and shard of a subject under the
// prefix (ok false for anything else).
func (s *Syncer) parseSubject(subject string) (machine, shard string, ok bool) {
	rest, found := strings.CutPrefix(subject, s.cfg.Subjects+".")
	if !found {
		return "", "", false
	}
	machine, tok, found := strings.Cut(rest, ".")
	if !found || machine == "" || tok == "" || strings.Contains(tok, ".") {
		return "", "", false
	}
	if tok == eventsToken {
		return machine, "", true
	}
	shard = strings.ReplaceAll(tok, "~", ".")
	// Only an agent's shard, by the log's own rule for its file names.
	if got, n, ok := eventlog.ParseSegmentPath(eventlog.ShardPath(shard)); !ok || n != 0 || got != shard || shard == "" || shard == eventlog.LocalShard {
		return "", "", false
	}
	return machine, shard, true
}
