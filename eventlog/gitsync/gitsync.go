// Package gitsync carries an event log between machines through git: the
// log's directory is a worktree of an orphan branch (a-sync), and a Syncer
// commits local events, fetches the remote's, merges them and pushes.
//
// The merge is a union of events by event ID, done by thrum rather than by
// git, so it never conflicts: for each remote segment file, the lines
// this log lacks are appended to the local shard through the log's own writer
// (eventlog.Log.Import), which makes them durable, applies them to the
// projection and notifies subscribers exactly once. Local files are only
// ever appended to, so the projection's byte-offset checkpoints stay
// valid. The merged tree is committed with both heads as parents, which
// makes the push a fast-forward for the remote.
//
// Every step is one of git's own commands: git fast-import writes a
// round's blobs, trees and commit as one pack and moves the branch, git
// push and git fetch move them, git ls-remote asks whether the remote
// moved, git diff-tree and git cat-file --batch read what it holds.
//
// A round's cost follows what is new: it writes a blob only for the
// segment files that grew (only a shard's last segment ever does), pushes
// without fetching when the push is a fast-forward, fetches only when the
// remote's branch moved since it last looked, reads no remote file equal
// to HEAD's, and checks a remote file that grew since the last merge only
// past the offset merged then (its old bytes proven unchanged by a hash).
// The Syncer repacks its repository every Options.PackEvery rounds.
//
// Every remote line goes through the log's admission (Options.Gate, see
// package admit), which imports what may enter the log and quarantines
// the rest: kept aside in the log directory, counted in Status, never
// applied. A remote file that is not one of the log's segment files
// (a symbolic link, the local shard, a path outside the log) is never
// read; it is reported the same way. Nothing of the remote's tree is
// ever checked out: its lines reach the log's files only through
// admission.
//
// The Syncer runs git with explicit arguments in the worktree only: the
// user's working tree, index and current branch are never touched.
package gitsync

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/eventlog/admit"
	"github.com/thrumhq/thrum/internal/private"
)

// Defaults of Options.
const (
	DefaultRemote    = "origin"
	DefaultBranch    = "a-sync"
	DefaultInterval  = 60 * time.Second
	DefaultDebounce  = 500 * time.Millisecond
	DefaultPackEvery = 8
	maxPushTries     = 5
)

// Options configure a Syncer. A nil *Options means all defaults.
type Options struct {
	// Remote is the git remote to sync with. Default DefaultRemote.
	Remote string
	// Branch is the sync branch. Default DefaultBranch.
	Branch string
	// Interval is how often to sync without new local events (to pick up
	// the remote's). Default DefaultInterval.
	Interval time.Duration
	// Debounce is how long after a local event the sync starts, so that a
	// burst of events makes one commit. Default DefaultDebounce.
	Debounce time.Duration
	// Logger receives sync failures. Nil means silent.
	Logger *slog.Logger
	// PackEvery is how many rounds that committed local events or imported
	// the remote's pass between repacks of the sync repository (git repack
	// -d --geometric=2), which merge the small pack each commit is
	// written as, storing each file's versions as deltas of each other.
	// Default DefaultPackEvery; negative never packs.
	PackEvery int
	// Gate admits the remote's lines into the log: the one admission
	// that every transport of the log shares (a thrum node's is
	// Node.Admission). Default: a Gate of the log with its own rules
	// alone (admit.New(log, nil)).
	Gate *admit.Gate
}

// Sync states, as sync.status reports them.
const (
	StateStopped = "stopped" // Run is not running
	StateIdle    = "idle"    // running, no sync finished yet
	StateSynced  = "synced"  // the last round succeeded
	StateError   = "error"   // the last round failed (see LastError)
)

// Status is a snapshot of a Syncer.
type Status struct {
	Running    bool
	State      string
	LastSyncAt time.Time
	LastError  string
	Interval   time.Duration // Options.Interval: how often a round runs without new events
	NextRound  time.Time     // when the next timed round is due (zero while Run is not running)
	Pending    bool          // local events not synced yet
	Rounds     int           // rounds completed successfully
	Commits    int           // commits created
	Imported   int           // remote events imported
	Checked    int           // lines of remote shard files read and checked against the log
	Packs      int           // repacks of the sync repository
	// Refused counts the remote lines and files kept out of the log
	// (admit.QuarantineFile), those kept before included; Refusals says
	// why, by file and reason, the most recent first (see
	// admit.Gate.Refusals).
	Refused  int
	Refusals []admit.RefusalCount
	// Waiting counts the remote lines that wait for their author's key
	// (admit.Gate.Waiting).
	Waiting int
}

// Syncer syncs one log worktree with a remote. Notify, Force and Status
// may be called concurrently with Run.
type Syncer struct {
	dir string // the worktree (the log's directory)
	// remoteDir is where git talks to the remote: the main worktree,
	// where a remote's relative path means what its user meant (git
	// reads it from the top of the worktree it runs in).
	remoteDir string
	log       *eventlog.Log
	opts      Options
	branch    string // the ref HEAD names: what the Syncer commits to

	trigger chan struct{} // a sync is wanted (debounced)
	force   chan struct{} // a sync is wanted now

	mu      sync.Mutex
	status  Status
	running bool
	ticked  time.Time // when Run's ticker started or last fired

	// Rounds started and finished (successful or not), the last one's
	// error, and a channel closed when a round finishes: what Refresh
	// waits on.
	started, finished uint64
	lastErr           error
	roundDone         chan struct{}

	roundMu sync.Mutex            // one round at a time
	merged  map[string]mergedBlob // remote segment path → the remote blob last merged

	// HEAD as the Syncer last committed or read it ("" = unknown), the
	// length of each segment file in its tree (nil = unknown), and the
	// paths in its tree that are none of the log's own files (a clone
	// that an older thrum made by checking out the remote's tree whole
	// holds what the remote planted): the next commit deletes them.
	head    string
	staged  map[string]int64
	foreign []string
	// What the Syncer knows of the remote's branch: the commit it last
	// pushed there or fetched and merged from there, and a HEAD it had
	// then that the remote's branch contains ("" = unknown).
	remoteSeen, remoteHas string

	// Packing (see maybePack): rounds that committed or imported since the
	// last repack.
	sincePack int
}

// mergedBlob is what a round remembers of the remote version of a shard
// it merged: the blob, the length of its whole lines and their SHA-256.
// A later version of the file that starts with the same bytes (checked
// by the hash) is read only from that offset on.
type mergedBlob struct {
	blob string
	size int64
	sum  [sha256.Size]byte
}

// New returns a Syncer for the log whose directory is a worktree of the
// sync branch, with that branch checked out. A worktree has one Syncer at
// a time (a thrum node holds its directory's lock): New removes the git
// lock files that a Syncer's git commands leave behind when they die with
// it (see removeStaleLocks).
func New(log *eventlog.Log, opts *Options) (*Syncer, error) {
	s := &Syncer{dir: log.Dir(), log: log, trigger: make(chan struct{}, 1), force: make(chan struct{}, 1), roundDone: make(chan struct{}),
		merged: map[string]mergedBlob{}}
	if opts != nil {
		s.opts = *opts
	}
	if s.opts.Remote == "" {
		s.opts.Remote = DefaultRemote
	}
	if s.opts.Branch == "" {
		s.opts.Branch = DefaultBranch
	}
	if s.opts.Interval <= 0 {
		s.opts.Interval = DefaultInterval
	}
	if s.opts.Debounce <= 0 {
		s.opts.Debounce = DefaultDebounce
	}
	if s.opts.PackEvery == 0 {
		s.opts.PackEvery = DefaultPackEvery
	}
	ctx := context.Background()
	out, err := s.git(ctx, "rev-parse", "--is-inside-work-tree", "--git-dir", "--git-common-dir", "--symbolic-full-name", "HEAD")
	if err != nil {
		return nil, fmt.Errorf("gitsync: %s is not a git worktree: %w", s.dir, err)
	}
	lines := strings.Split(out, "\n") // paths may hold spaces
	if len(lines) != 4 || lines[0] != "true" {
		return nil, fmt.Errorf("gitsync: %s is not a git worktree (git rev-parse: %q)", s.dir, out)
	}
	if s.branch = lines[3]; !strings.HasPrefix(s.branch, "refs/heads/") {
		return nil, fmt.Errorf("gitsync: the worktree %s has no branch checked out (HEAD is detached): check out the sync branch %s there", s.dir, s.opts.Branch)
	}
	common := lines[2]
	if !filepath.IsAbs(common) {
		common = filepath.Join(s.dir, common)
	}
	if s.remoteDir = common; filepath.Base(common) == ".git" {
		s.remoteDir = filepath.Dir(common)
	}
	if err := s.removeStaleLocks(lines[1], lines[2]); err != nil {
		return nil, fmt.Errorf("gitsync: %w", err)
	}
	if s.opts.Gate == nil {
		if s.opts.Gate, err = admit.New(log, nil); err != nil {
			return nil, fmt.Errorf("gitsync: %w", err)
		}
	}
	s.status.State = StateStopped
	return s, nil
}

// removeStaleLocks deletes the lock files of the worktree's HEAD, of its
// branch and of the sync branch's remote-tracking ref. A git command
// killed with its Syncer (a crash, SIGKILL, the OOM killer) leaves them
// behind, and git then refuses every later commit or fetch ("Unable to
// create '….lock': File exists"), so sync would stop for good. They
// belong to the Syncer: HEAD is the worktree's own, the branch is checked
// out here (so no other worktree updates it), and the remote-tracking ref
// is written by a fetch or push for a moment at most.
func (s *Syncer) removeStaleLocks(gitDir, common string) error {
	abs := func(p string) string {
		if !filepath.IsAbs(p) {
			p = filepath.Join(s.dir, p)
		}
		return filepath.Clean(p)
	}
	for _, p := range []string{
		filepath.Join(abs(gitDir), "HEAD.lock"),
		filepath.Join(abs(common), filepath.FromSlash(s.branch)+".lock"),
		filepath.Join(abs(common), "refs", "remotes", s.opts.Remote, filepath.FromSlash(s.opts.Branch)+".lock"),
	} {
		err := os.Remove(p)
		if err == nil && s.opts.Logger != nil {
			s.opts.Logger.Warn("gitsync: removed a stale git lock left by a crash", "file", p)
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove stale git lock: %w", err)
		}
	}
	return nil
}

// HasRemote reports whether the repository at dir has the named remote.
func HasRemote(ctx context.Context, dir, remote string) bool {
	out, err := run(ctx, dir, nil, "remote")
	if err != nil {
		return false
	}
	for _, r := range strings.Fields(out) {
		if r == remote {
			return true
		}
	}
	return false
}

// Notify tells the Syncer that local events were committed. It never
// blocks.
func (s *Syncer) Notify() {
	s.mu.Lock()
	s.status.Pending = true
	s.mu.Unlock()
	select {
	case s.trigger <- struct{}{}:
	default:
	}
}

// Force asks for a sync now, without waiting for it. It reports whether
// the request was queued (false: one is queued already).
func (s *Syncer) Force() bool {
	select {
	case s.force <- struct{}{}:
		return true
	default:
		return false
	}
}

// Refresh asks Run for a round now and waits until a round that started
// after the call has finished: the remote's events as of the call are
// then in the log (and applied, when the log's OnCommit applies). It
// returns that round's error, or ctx's when ctx ends first; the round
// itself goes on in Run and is never cut short, so no git command is
// killed halfway. Without Run running it waits until ctx ends.
func (s *Syncer) Refresh(ctx context.Context) error {
	s.mu.Lock()
	want := s.started + 1
	s.mu.Unlock()
	s.Force()
	for {
		s.mu.Lock()
		if s.finished >= want {
			err := s.lastErr
			s.mu.Unlock()
			return err
		}
		done := s.roundDone
		s.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Status returns the Syncer's state.
func (s *Syncer) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.status
	st.Running = s.running
	st.Interval = s.opts.Interval
	if s.running {
		st.NextRound = s.ticked.Add(s.opts.Interval)
	}
	st.Refused, st.Refusals = s.opts.Gate.Refusals()
	st.Waiting = s.opts.Gate.Waiting()
	if !s.running {
		st.State = StateStopped
	} else if st.State == StateStopped {
		st.State = StateIdle
	}
	return st
}

// Run syncs on triggers and every Interval until ctx ends. A failed round
// is recorded in Status and retried at the next trigger; nothing is lost
// while the remote is unreachable.
func (s *Syncer) Run(ctx context.Context) error {
	tick := time.NewTicker(s.opts.Interval)
	defer tick.Stop()
	s.mu.Lock()
	s.running, s.ticked = true, time.Now()
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.running = false
		s.mu.Unlock()
	}()
	s.round(ctx) // catch up with the remote at start
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.force:
		case <-tick.C:
			s.mu.Lock()
			s.ticked = time.Now()
			s.mu.Unlock()
		case <-s.trigger:
			// Debounce: let a burst of events finish, unless forced.
			select {
			case <-time.After(s.opts.Debounce):
			case <-s.force:
			case <-ctx.Done():
				return nil
			}
		}
		s.round(ctx)
	}
}

func (s *Syncer) round(ctx context.Context) {
	if err := s.SyncOnce(ctx); err != nil && ctx.Err() == nil && s.opts.Logger != nil {
		s.opts.Logger.Warn("gitsync: sync failed; will retry", "err", err)
	}
}

// SyncOnce runs one round: commit local events, fetch, import the remote's
// new events, commit the merge, push (retrying a push race). Rounds never
// overlap. The outcome is recorded in Status (LastError, LastSyncAt,
// Rounds), whether the round was Run's or the caller's.
func (s *Syncer) SyncOnce(ctx context.Context) (err error) {
	s.roundMu.Lock()
	defer s.roundMu.Unlock()
	s.mu.Lock()
	s.status.Pending = false
	s.started++
	// This round commits every event notified so far: a trigger queued
	// before it would only start a second round with nothing new.
	select {
	case <-s.trigger:
	default:
	}
	before := s.status.Commits + s.status.Imported
	s.mu.Unlock()
	// Deferred in this order so that the round is recorded (which ends a
	// Refresh's wait, on the send path) before a repack runs.
	defer func() {
		s.mu.Lock()
		wrote := s.status.Commits+s.status.Imported != before
		s.mu.Unlock()
		if wrote {
			s.sincePack++
		}
		s.maybePack(ctx)
	}()
	defer func() { s.record(ctx, err) }()
	var rejected error
	for try := 0; try < maxPushTries; try++ {
		var pushed bool
		pushed, rejected, err = s.attempt(ctx, try == 0)
		if err != nil || pushed {
			return err
		}
	}
	// Keep git's words: a remote that refuses every push (a protected
	// branch, a hook) looks like a lost race from here.
	return fmt.Errorf("gitsync: push kept losing races after %d tries: %w (last: %v)", maxPushTries, errPushRejected, rejected)
}

// record notes the outcome of a round in Status. A round cut short by the
// end of its context is not a failure of sync: it is not recorded.
func (s *Syncer) record(ctx context.Context, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.finished, s.lastErr = s.started, err // rounds never overlap
	close(s.roundDone)
	s.roundDone = make(chan struct{})
	switch {
	case err == nil:
		s.status.State, s.status.LastError, s.status.LastSyncAt = StateSynced, "", time.Now()
		s.status.Rounds++
	case ctx.Err() == nil:
		s.status.State, s.status.LastError = StateError, err.Error()
	}
}

// maybePack repacks the sync repository every PackEvery rounds that
// wrote objects. Each commit stores every changed segment file as a new
// blob, in a pack of its own (git has no append); packing stores the
// versions of a file as deltas of each other, so the repository grows by
// about the new lines per round. --geometric=2 merges packs only as they
// double, so a repack costs what is new, not a copy of the history. It
// runs in the Syncer's round, never on the send path; a failure is
// logged, not a failed round.
func (s *Syncer) maybePack(ctx context.Context) {
	if s.opts.PackEvery < 0 || s.sincePack < s.opts.PackEvery || ctx.Err() != nil {
		return
	}
	s.sincePack = 0
	if _, err := s.git(ctx, "-c", "pack.threads=1", "repack", "-d", "-q", "--geometric=2"); err != nil {
		if s.opts.Logger != nil {
			s.opts.Logger.Warn("gitsync: repack failed; will retry", "err", err)
		}
		return
	}
	s.mu.Lock()
	s.status.Packs++
	s.mu.Unlock()
}

var errPushRejected = errors.New("push rejected")

// attempt is one fetch-merge-commit-push. pushed is false when the push
// lost a race (rejected says how) and the round should be tried again.
//
// With first (a round's first attempt), local events are first committed
// on HEAD alone and pushed without a fetch: a push that the remote takes
// as a fast-forward proves that HEAD already has every commit of the
// remote, so there is nothing to merge, and the round costs no fetch. A
// first attempt with nothing local to commit asks the remote where its
// branch is (git ls-remote): if that is where the Syncer last left it or
// found it, with HEAD pushed, there is nothing to do. Everything else, a
// failed push included (the remote moved on, or cannot be reached),
// fetches and merges.
func (s *Syncer) attempt(ctx context.Context, first bool) (pushed bool, rejected, err error) {
	if first {
		committed, err := s.commitLocal(ctx)
		if err != nil {
			return false, nil, err
		}
		if committed {
			// Any failure (a refusal, an unreachable remote) takes the
			// way below, which reports it if it lasts.
			if ok, _, _ := s.push(ctx); ok {
				return true, nil, nil
			}
		} else if s.remoteSeen != "" && s.remoteHas == s.head {
			if tip, err := s.lsRemote(ctx); err == nil && tip == s.remoteSeen {
				return true, nil, nil // nothing new on either side
			}
		}
	}
	remoteRef := "refs/remotes/" + s.opts.Remote + "/" + s.opts.Branch
	remote := "" // the remote's head; "" while it has no sync branch (the push creates it)
	_, err = s.remoteGit(ctx, "fetch", "--quiet", "--no-tags", "--no-auto-maintenance", "--no-write-fetch-head",
		"--negotiation-tip="+s.branch, s.opts.Remote, "+refs/heads/"+s.opts.Branch+":"+remoteRef)
	switch {
	case err == nil:
		if remote, err = s.git(ctx, "rev-parse", "--verify", remoteRef+"^{commit}"); err != nil {
			return false, nil, fmt.Errorf("rev-parse: %w", err)
		}
		if _, err := s.merge(ctx, remote); err != nil {
			return false, nil, err
		}
		s.remoteSeen = remote
	case !strings.Contains(err.Error(), "couldn't find remote ref"):
		return false, nil, fmt.Errorf("fetch: %w", err)
	}
	needPush, err := s.commit(ctx, remote)
	if err != nil {
		return false, nil, err
	}
	if !needPush {
		s.remoteHas = s.head
		return true, nil, nil
	}
	return s.push(ctx)
}

// push pushes HEAD to the remote's sync branch. pushed is false when the
// remote refused it as not a fast-forward (rejected says how). Hooks of
// the user's repository (pre-push) are not run for the sync branch.
func (s *Syncer) push(ctx context.Context) (pushed bool, rejected, err error) {
	if _, err := s.remoteGit(ctx, "push", "--quiet", "--no-verify", s.opts.Remote, s.head+":refs/heads/"+s.opts.Branch); err != nil {
		if strings.Contains(err.Error(), "rejected") || strings.Contains(err.Error(), "fetch first") || strings.Contains(err.Error(), "non-fast-forward") {
			return false, err, nil
		}
		return false, nil, fmt.Errorf("push: %w", err)
	}
	s.remoteSeen, s.remoteHas = s.head, s.head
	return true, nil, nil
}

// lsRemote returns the commit of the remote's sync branch ("" if it has
// none).
func (s *Syncer) lsRemote(ctx context.Context) (string, error) {
	ref := "refs/heads/" + s.opts.Branch
	out, err := s.remoteGit(ctx, "ls-remote", s.opts.Remote, ref)
	if err != nil {
		return "", fmt.Errorf("ls-remote: %w", err)
	}
	for _, row := range strings.Split(out, "\n") {
		if id, name, ok := strings.Cut(row, "\t"); ok && name == ref {
			return id, nil
		}
	}
	return "", nil
}

// commitLocal commits the segment files that changed since HEAD on
// HEAD alone, and reports whether there were any.
func (s *Syncer) commitLocal(ctx context.Context) (bool, error) {
	paths, files, err := s.changed(ctx)
	if err != nil || len(paths) == 0 && len(s.foreign) == 0 {
		return false, err
	}
	return true, s.fastImport(ctx, paths, files, []string{s.head})
}

// commit records the segment files in a commit and reports whether there
// is something to push. A commit is made when the files changed, or when
// HEAD must be pushed but the remote (its head; "" if it has no sync
// branch) moved on; its parents are HEAD and, when the remote has commits
// HEAD lacks, the remote head too, so that the push is a fast-forward.
// With nothing new on either side it makes no commit: two clones never
// trade empty merges.
func (s *Syncer) commit(ctx context.Context, remote string) (needPush bool, err error) {
	paths, files, err := s.changed(ctx)
	if err != nil {
		return false, err
	}
	changed := len(paths) > 0 || len(s.foreign) > 0
	parents := []string{s.head}
	if remote == "" {
		needPush = true // create the remote branch
	} else {
		base, err := s.mergeBase(ctx, s.head, remote)
		if err != nil {
			return false, err
		}
		remoteHasHead, headHasRemote := base == s.head, base == remote
		needPush = changed || !remoteHasHead
		if needPush && !headHasRemote {
			parents = append(parents, remote)
		}
	}
	if !changed && len(parents) == 1 {
		return needPush, nil // HEAD as it is is what to push (or nothing)
	}
	return true, s.fastImport(ctx, paths, files, parents)
}

// mergeBase returns the best common ancestor of commits a and b ("" if
// they have none: two clones that each started the branch).
func (s *Syncer) mergeBase(ctx context.Context, a, b string) (string, error) {
	if a == b {
		return a, nil
	}
	cmd := gitCmd(ctx, s.dir, nil, "merge-base", a, b)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == 1 && out.Len() == 0 && errb.Len() == 0 {
		return "", nil // unrelated histories
	}
	if err != nil {
		return "", fmt.Errorf("git merge-base: %v: %s", err, strings.TrimSpace(errb.String()))
	}
	return strings.TrimSpace(out.String()), nil
}

// changed returns the segment files whose durable length differs from
// their blob's in HEAD, sorted, and the durable length of every segment
// file. The local part of the log never leaves the machine: it is never
// committed.
func (s *Syncer) changed(ctx context.Context) ([]string, map[string]int64, error) {
	if err := s.readHead(ctx); err != nil {
		return nil, nil, err
	}
	files := s.log.Files()
	var paths []string
	for rel, n := range files {
		if shard, _, _ := eventlog.ParseSegmentPath(rel); shard != eventlog.LocalShard && s.staged[rel] != n {
			paths = append(paths, rel)
		}
	}
	sort.Strings(paths)
	return paths, files, nil
}

// readHead reads HEAD and the length of each file in its tree, unless
// known. A segment file is only ever appended to and HEAD's blobs are
// written from the files' durable bytes, so a file whose length is its
// blob's is the blob.
func (s *Syncer) readHead(ctx context.Context) error {
	if s.head != "" {
		return nil
	}
	head, err := s.git(ctx, "rev-parse", "--verify", s.branch+"^{commit}")
	if err != nil {
		return fmt.Errorf("rev-parse: %w", err)
	}
	out, err := s.gitIO(ctx, nil, "ls-tree", "-r", "-l", "-z", "--full-tree", head)
	if err != nil {
		return fmt.Errorf("ls-tree: %w", err)
	}
	staged := map[string]int64{}
	var alien []string
	for _, rec := range bytes.Split(out, []byte{0}) {
		meta, path, ok := strings.Cut(string(rec), "\t")
		f := strings.Fields(meta) // mode, type, object, size
		if !ok || len(f) != 4 {
			continue
		}
		shard, _, isSegment := eventlog.ParseSegmentPath(path)
		n, err := strconv.ParseInt(f[3], 10, 64)
		if foreign(f[0], shard, isSegment) != "" || f[1] != "blob" || err != nil {
			alien = append(alien, path)
			continue
		}
		staged[path] = n
	}
	s.head, s.staged, s.foreign = head, staged, alien
	return nil
}

// fastImport commits the first files[p] bytes of each of paths (on top of
// the tree of parents[0]) with the given parents, through one git
// fast-import: the blobs, trees and commit become one pack, and the branch
// moves to the commit only if it still is at parents[0] or behind it
// (never backwards: fast-import refuses a branch that moved elsewhere). A
// batch still being written, which may yet be undone, is never committed:
// only the durable bytes.
func (s *Syncer) fastImport(ctx context.Context, paths []string, files map[string]int64, parents []string) error {
	// The input streams to fast-import a file at a time: a first commit
	// of a whole log is never held in memory.
	var head bytes.Buffer
	msg := s.message(parents)
	fmt.Fprintf(&head, "commit %s\nmark :1\ncommitter thrum <thrum@localhost> %d +0000\ndata %d\n%s\nfrom %s\n",
		s.branch, time.Now().Unix(), len(msg), msg, parents[0])
	for _, p := range parents[1:] {
		fmt.Fprintf(&head, "merge %s\n", p)
	}
	for _, p := range s.foreign {
		fmt.Fprintf(&head, "D %s\n", quotePath(p))
	}
	in := []io.Reader{&head}
	prefixes := make([]*filePrefix, 0, len(paths))
	defer func() { // those a failed fast-import left open
		for _, p := range prefixes {
			p.close()
		}
	}()
	for _, rel := range paths {
		path := filepath.Join(s.dir, filepath.FromSlash(rel))
		// A file cut short is refused here: fast-import, given less than
		// it was promised, would fail and leave a crash report each round.
		if fi, err := os.Lstat(path); err != nil {
			return fmt.Errorf("commit %s: %w", rel, err)
		} else if fi.Size() < files[rel] {
			return fmt.Errorf("commit %s: the file is %d bytes, shorter than the %d to commit", rel, fi.Size(), files[rel])
		}
		p := &filePrefix{path: path, left: files[rel]}
		prefixes = append(prefixes, p)
		in = append(in, strings.NewReader(fmt.Sprintf("M 100644 inline %s\ndata %d\n", rel, files[rel])), p, strings.NewReader("\n"))
	}
	in = append(in, strings.NewReader("\nget-mark :1\ndone\n"))
	// The commit stays a pack, however small: exploding it into loose
	// objects (fast-import's default under 100 objects) costs another
	// process and a file per object.
	out, err := s.gitIO(ctx, io.MultiReader(in...), "-c", "fastimport.unpackLimit=0", "fast-import", "--quiet", "--done", "--date-format=raw")
	for i, p := range prefixes {
		if p.err != nil { // the cause: fast-import saw only its input end early
			err = fmt.Errorf("commit %s: %w", paths[i], p.err)
			break
		}
	}
	if err != nil {
		s.head, s.staged = "", nil // read them again next time
		return fmt.Errorf("fast-import: %w", err)
	}
	s.head, s.foreign = strings.TrimSpace(string(out)), nil
	for _, rel := range paths {
		s.staged[rel] = files[rel]
	}
	s.mu.Lock()
	s.status.Commits++
	s.mu.Unlock()
	return nil
}

// quotePath writes a path as git fast-import reads one: C-style quoted
// if it holds a quote, a backslash, or a byte outside printable ASCII
// (a remote may name a file with any byte but NUL).
func quotePath(p string) string {
	plain := !strings.HasPrefix(p, `"`)
	for i := 0; i < len(p) && plain; i++ {
		plain = p[i] >= 0x20 && p[i] < 0x7f && p[i] != '\\'
	}
	if plain {
		return p
	}
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c >= 0x7f:
			fmt.Fprintf(&b, "\\%03o", c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// filePrefix reads the first left bytes of the file at path, opening it
// at its first Read and closing it once they are read.
type filePrefix struct {
	path string
	left int64
	f    *os.File
	err  error // why it stopped short
}

func (p *filePrefix) Read(b []byte) (int, error) {
	if p.left == 0 {
		p.close()
		return 0, io.EOF
	}
	if p.f == nil {
		if p.f, p.err = private.OpenFile(p.path, os.O_RDONLY); p.err != nil { // never through a link
			return 0, p.err
		}
	}
	n, err := p.f.Read(b[:min(int64(len(b)), p.left)])
	p.left -= int64(n)
	if err == io.EOF && p.left > 0 {
		err = fmt.Errorf("the file ends %d bytes short of what is committed", p.left)
	}
	if err != nil && err != io.EOF {
		p.err = err
		return n, err
	}
	return n, nil
}

func (p *filePrefix) close() {
	if p.f != nil {
		p.f.Close()
		p.f = nil
	}
}

func (s *Syncer) message(parents []string) string {
	host, _ := os.Hostname()
	if len(parents) > 1 {
		return "thrum: sync from " + host + " (merge)"
	}
	return "thrum: sync from " + host
}

// remoteFile is a segment file of the remote's tree that a merge reads.
type remoteFile struct {
	path, shard, blob string
	skip              int64             // bytes known from the last merge: only hashed
	sum               [sha256.Size]byte // their SHA-256
}

// merge imports, shard by shard, the remote's events this log lacks.
//
// Its cost follows what is new on the remote, not the history: a remote
// file whose blob is the one in HEAD's tree (what this clone committed
// and pushed: every line of it is in the local file) is not even listed;
// one whose blob is the one last merged is not read; one that grew from
// the version last merged is streamed once, its old bytes only hashed
// (to prove they are unchanged) and only the new lines checked and
// imported. Anything else (a first sight, a rewritten file) is read and
// checked in full. One git cat-file reads every file a round needs.
func (s *Syncer) merge(ctx context.Context, remote string) (int, error) {
	// The remote's files that differ from HEAD's: a file whose blob is
	// the one in HEAD (ours, committed from the local file, so every line
	// of it is here) is not even listed.
	if err := s.readHead(ctx); err != nil {
		return 0, err
	}
	out, err := s.gitIO(ctx, nil, "diff-tree", "-r", "-z", "--no-renames", s.head, remote)
	if err != nil {
		return 0, fmt.Errorf("diff-tree: %w", err)
	}
	var todo []remoteFile
	for rec := range diffTree(out) {
		f, path := strings.Fields(rec.meta), rec.path
		if len(f) != 5 || (f[4] != "A" && f[4] != "M" && f[4] != "T") {
			continue // not a file the remote has
		}
		shard, _, isSegment := eventlog.ParseSegmentPath(path)
		if reason := foreign(f[1], shard, isSegment); reason != "" {
			if err := s.opts.Gate.RefuseFile(admit.Source{File: path, Commit: remote}, reason); err != nil {
				return 0, err
			}
			continue
		}
		prev := s.merged[path]
		if prev.blob == f[3] {
			continue // unchanged since the last merge
		}
		rf := remoteFile{path: path, shard: shard, blob: f[3]}
		if prev.blob != "" {
			rf.skip, rf.sum = prev.size, prev.sum // a shorter file fails the prefix check
		}
		todo = append(todo, rf)
	}
	imported, again, err := s.readRemote(ctx, remote, todo)
	if err == nil && len(again) > 0 {
		// Files whose old bytes changed (rewritten): read them in full.
		for i := range again {
			again[i].skip = 0
		}
		var n int
		n, _, err = s.readRemote(ctx, remote, again)
		imported += n
	}
	if imported > 0 {
		s.mu.Lock()
		s.status.Imported += imported
		s.mu.Unlock()
	}
	return imported, err
}

// diffRecord is one file of git diff-tree -z's output: its metadata
// (":mode mode object object status") and path.
type diffRecord struct{ meta, path string }

// diffTree reads git diff-tree -r -z output: records of metadata and
// path, each ended by a NUL (a path may hold any byte but NUL).
func diffTree(out []byte) func(yield func(diffRecord) bool) {
	return func(yield func(diffRecord) bool) {
		parts := strings.Split(string(out), "\x00")
		for i := 0; i+1 < len(parts); i += 2 {
			if !yield(diffRecord{meta: parts[i], path: parts[i+1]}) {
				return
			}
		}
	}
}

// foreign says why a file of the remote's tree (its git mode, and the
// shard of which it is a segment, if it is one) is none of the log's own
// files, "" if it is one: the log's files are regular files at the
// paths of the segments of events.jsonl and the agents' shards. A
// symbolic link, a submodule, the local shard (this machine's alone) or
// any other path is never read.
func foreign(mode, shard string, isSegment bool) string {
	switch {
	case mode == "120000":
		return "a symbolic link: the log holds regular files only; it was not read"
	case !strings.HasPrefix(mode, "100"):
		return "not a regular file (git mode " + mode + "): the log holds regular files only; it was not read"
	case !isSegment:
		return "not a file of the log (events.jsonl, messages/<agent>.jsonl and their segments); it was not read"
	case shard == eventlog.LocalShard:
		return "the local shard belongs to the machine that wrote it: it is never synced; it was not read"
	}
	return ""
}

var errPrefixChanged = errors.New("the remote file's old bytes changed")

// readRemote streams the remote files through one git cat-file --batch
// and imports the lines of each that this log lacks. A file whose first
// skip bytes do not hash to sum is returned in again, not imported.
func (s *Syncer) readRemote(ctx context.Context, commit string, files []remoteFile) (imported int, again []remoteFile, err error) {
	if len(files) == 0 {
		return 0, nil, nil
	}
	var ids bytes.Buffer
	for _, f := range files {
		ids.WriteString(f.blob + "\n")
	}
	cmd := gitCmd(ctx, s.dir, nil, "cat-file", "--batch")
	cmd.Stdin = &ids
	var errb bytes.Buffer
	cmd.Stderr = &errb
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return 0, nil, err
	}
	if err := cmd.Start(); err != nil {
		return 0, nil, fmt.Errorf("cat-file: %w", err)
	}
	defer func() {
		if err != nil {
			_ = cmd.Process.Kill()
		}
		werr := cmd.Wait()
		if err == nil && werr != nil {
			err = fmt.Errorf("cat-file: %v: %s", werr, strings.TrimSpace(errb.String()))
		}
	}()
	br := bufio.NewReaderSize(stdout, 256<<10)
	for _, f := range files {
		header, err := br.ReadString('\n')
		if err != nil {
			return imported, again, fmt.Errorf("read %s: cat-file: %w", f.path, err)
		}
		fields := strings.Fields(header) // object, type, size
		if len(fields) != 3 || fields[0] != f.blob || fields[1] != "blob" {
			return imported, again, fmt.Errorf("read %s: cat-file answered %q", f.path, strings.TrimSpace(header))
		}
		size, err := strconv.ParseInt(fields[2], 10, 64)
		if err != nil {
			return imported, again, fmt.Errorf("read %s: cat-file answered %q", f.path, strings.TrimSpace(header))
		}
		body := io.LimitReader(br, size)
		n, err := s.mergeFile(ctx, commit, f, body)
		if _, cerr := io.Copy(io.Discard, body); err == nil {
			err = cerr
		}
		if _, cerr := br.ReadByte(); err == nil && cerr != nil { // the newline after the content
			err = cerr
		}
		switch {
		case errors.Is(err, errPrefixChanged):
			again = append(again, f)
		case err != nil:
			return imported, again, err
		}
		imported += n
	}
	return imported, again, nil
}

// mergeFile imports the lines of one remote file (read from r, at the
// remote's commit) that this log lacks and may take, quarantines those
// it may not, and remembers the version merged.
func (s *Syncer) mergeFile(ctx context.Context, commit string, f remoteFile, r io.Reader) (imported int, err error) {
	full := sha256.New()
	size, checked, err := s.scanBlob(r, full, f.skip, f.sum, func(lines [][]byte) error {
		res, err := s.opts.Gate.Admit(ctx, admit.Source{File: f.path, Commit: commit}, f.shard, lines)
		if res != nil {
			imported += len(res.Imported)
		}
		return err
	})
	s.mu.Lock()
	s.status.Checked += checked
	s.mu.Unlock()
	if err != nil {
		return imported, err
	}
	m := mergedBlob{blob: f.blob, size: size}
	full.Sum(m.sum[:0])
	s.merged[f.path] = m
	return imported, nil
}

// scanBlob reads a remote shard file from r. The first skip bytes are
// only hashed, and must hash to want; the whole lines after them go to
// flush (admission), admit.BatchBytes at a time. Every whole line,
// prefix included, is fed to full; size is the length of the whole lines
// (an unterminated tail is not an event yet and is read again next time).
func (s *Syncer) scanBlob(r io.Reader, full hash.Hash, skip int64, want [sha256.Size]byte, flush func([][]byte) error) (size int64, checked int, err error) {
	if skip > 0 {
		pre := sha256.New()
		if _, err := io.CopyN(io.MultiWriter(pre, full), r, skip); err != nil {
			return 0, 0, errPrefixChanged
		}
		var got [sha256.Size]byte
		if pre.Sum(got[:0]); got != want {
			return 0, 0, errPrefixChanged
		}
	}
	br := bufio.NewReaderSize(r, 256<<10)
	size = skip
	var lines [][]byte
	held := 0
	for {
		line, n, rerr := readLine(br, full)
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return size, checked, rerr
		}
		checked++
		size += n
		line = bytes.TrimSuffix(line, []byte("\n"))
		lines = append(lines, line)
		if held += len(line); held >= admit.BatchBytes {
			if err := flush(lines); err != nil {
				return size, checked, err
			}
			lines, held = nil, 0
		}
	}
	if len(lines) > 0 {
		if err := flush(lines); err != nil {
			return size, checked, err
		}
	}
	return size, checked, nil
}

// readLine reads a line from br, its newline included: n bytes, of which
// it returns at most eventlog.MaxLineBytes and one more (a longer line is
// no event, and a remote file may hold one of any length). Every byte
// read goes to h. At the end of the input it returns io.EOF, and the
// bytes of an unterminated last line are not counted.
func readLine(br *bufio.Reader, h hash.Hash) (line []byte, n int64, err error) {
	for {
		chunk, err := br.ReadSlice('\n')
		h.Write(chunk)
		n += int64(len(chunk))
		if room := eventlog.MaxLineBytes + 1 - len(line); room > 0 {
			line = append(line, chunk[:min(len(chunk), room)]...)
		}
		switch err {
		case nil:
			return line, n, nil
		case bufio.ErrBufferFull:
			continue
		}
		return nil, 0, err
	}
}

func (s *Syncer) git(ctx context.Context, args ...string) (string, error) {
	b, err := s.gitIO(ctx, nil, args...)
	return strings.TrimSpace(string(b)), err
}

// gitIO runs git with args, stdin as its standard input, and returns its
// standard output; a failure carries git's own words.
func (s *Syncer) gitIO(ctx context.Context, stdin io.Reader, args ...string) ([]byte, error) {
	cmd := gitCmd(ctx, s.dir, nil, args...)
	cmd.Stdin = stdin
	return runGit(cmd, args)
}

// remoteGit is git talking to the remote (fetch, push, ls-remote), run
// in remoteDir: a remote added as ../shared.git from the repository's
// root is found from there, not from the log's worktree. These commands
// name their refs in full, so they touch no working tree.
func (s *Syncer) remoteGit(ctx context.Context, args ...string) (string, error) {
	b, err := runGit(gitCmd(ctx, s.remoteDir, nil, args...), args)
	return strings.TrimSpace(string(b)), err
}

// runGit runs cmd (git with args) and returns its standard output; a
// failure carries git's own words.
func runGit(cmd *exec.Cmd, args []string) ([]byte, error) {
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		name := args[0]
		if name == "-c" && len(args) > 2 {
			name = args[2]
		}
		return nil, fmt.Errorf("git %s: %v: %s", name, err, strings.TrimSpace(errb.String()))
	}
	return out.Bytes(), nil
}

// gitCmd is git with args in dir, with env added to the environment,
// never prompting. The package runs git only through it.
func gitCmd(ctx context.Context, dir string, env []string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "GIT_TERMINAL_PROMPT=0"), env...)
	// Stopped (a daemon stopping mid-round), git is asked to end, not
	// killed: it then removes the lock files it holds, which would
	// otherwise fail every later command, the final round at the stop
	// included (New removes them only at the next start). One that has
	// not ended after gitStopWait is killed.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = gitStopWait
	return cmd
}

// gitStopWait is how long a stopped git command has to end.
const gitStopWait = 5 * time.Second
