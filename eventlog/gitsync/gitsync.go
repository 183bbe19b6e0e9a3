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
// A round's cost follows what is new: it writes a blob only for the
// segment files that grew (only a shard's last segment ever does) and
// the trees over them, pushes without fetching when the push is a
// fast-forward, reads no remote file equal to HEAD's, and checks a remote
// file that grew since the last merge only past the offset merged then
// (its old bytes proven unchanged by a hash). The Syncer repacks its
// repository every Options.PackEvery rounds.
//
// The Syncer runs git with explicit arguments in the worktree only: the
// user's working tree, index and current branch are never touched.
package gitsync

import (
	"bufio"
	"bytes"
	"compress/zlib"
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
	"strings"
	"sync"
	"time"

	"github.com/thrumhq/thrum/eventlog"
)

// Defaults of Options.
const (
	DefaultRemote    = "origin"
	DefaultBranch    = "a-sync"
	DefaultInterval  = 60 * time.Second
	DefaultDebounce  = 500 * time.Millisecond
	DefaultPackEvery = 64
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
	// -d --geometric=2), which turn each round's loose objects — a new
	// blob of every changed segment file — into deltas in a pack. Default
	// DefaultPackEvery; negative never packs.
	PackEvery int
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
	Pending    bool // local events not synced yet
	Rounds     int  // rounds completed successfully
	Commits    int  // commits created
	Imported   int  // remote events imported
	Checked    int  // lines of remote shard files read and checked against the log
	Packs      int  // repacks of the sync repository
}

// Syncer syncs one log worktree with a remote. Notify, Force and Status
// may be called concurrently with Run.
type Syncer struct {
	dir  string // the worktree (the log's directory)
	log  *eventlog.Log
	opts Options

	trigger chan struct{} // a sync is wanted (debounced)
	force   chan struct{} // a sync is wanted now

	mu      sync.Mutex
	status  Status
	running bool

	// Rounds started and finished (successful or not), the last one's
	// error, and a channel closed when a round finishes: what Refresh
	// waits on.
	started, finished uint64
	lastErr           error
	roundDone         chan struct{}

	roundMu  sync.Mutex                     // one round at a time
	have     map[string]map[string]struct{} // shard name → event IDs in the local segments
	scanned  map[string]int64               // local segment path → its bytes read into have
	merged   map[string]mergedBlob          // remote segment path → the remote blob last merged
	head     string                         // HEAD as the Syncer last committed or read it ("" = unknown)
	headTree string

	// Staging (see stage): the object directory (when the repository
	// uses SHA-1 objects, which the Syncer then writes itself), the
	// durable length of each segment file as last staged (nil until the
	// first round) and the tree of the index then.
	objects string
	staged  map[string]int64
	tree    string
	dirs    map[string]*treeDir // that tree by directory, once the Syncer writes trees itself (see objects.go)
	zw      *zlib.Writer        // the compressor of those objects, reused
	fresh   []packObject        // objects written since the last pack
	headRef *headRef            // HEAD's branch as files, which the Syncer moves itself (nil: update-ref)

	// Packing (see maybePack): rounds that committed or imported since the
	// last repack.
	sincePack int

	// Direct pushes (see sendpack.go): the commit the remote's branch was
	// left at by the last push ("" = not known), the objects written
	// since, and the remote on disk (nil if it is not one).
	pushBase      string
	unpushed      []rawObject
	unpushedBytes int
	targetKnown   bool
	direct        *pushTarget
	directPushes  int // for tests
}

// mergedBlob is what a round remembers of the remote version of a shard
// it merged: the blob, the length of its whole lines and their SHA-256. A later version of the file that starts with the
// same bytes (checked by the hash) is read only from that offset on.
type mergedBlob struct {
	blob string
	size int64
	sum  [sha256.Size]byte
}

// New returns a Syncer for the log whose directory is a worktree of the
// sync branch. A worktree has one Syncer at a time (a thrum node holds
// its directory's lock): New removes the git lock files that a Syncer's
// git commands leave behind when they die with it (see removeStaleLocks).
func New(log *eventlog.Log, opts *Options) (*Syncer, error) {
	s := &Syncer{dir: log.Dir(), log: log, trigger: make(chan struct{}, 1), force: make(chan struct{}, 1), roundDone: make(chan struct{}),
		have: map[string]map[string]struct{}{}, scanned: map[string]int64{}, merged: map[string]mergedBlob{}}
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
	if _, err := s.git(context.Background(), "rev-parse", "--is-inside-work-tree"); err != nil {
		return nil, fmt.Errorf("gitsync: %s is not a git worktree: %w", s.dir, err)
	}
	if err := s.removeStaleLocks(context.Background()); err != nil {
		return nil, fmt.Errorf("gitsync: %w", err)
	}
	if format, err := s.git(context.Background(), "rev-parse", "--show-object-format"); err == nil && format == "sha1" {
		out, err := s.git(context.Background(), "rev-parse", "--git-common-dir", "--git-dir")
		if err != nil {
			return nil, fmt.Errorf("gitsync: %w", err)
		}
		dirs := strings.Split(out, "\n") // paths may hold spaces
		if len(dirs) != 2 {
			return nil, fmt.Errorf("gitsync: rev-parse --git-common-dir --git-dir: %q", out)
		}
		for i, d := range dirs {
			if !filepath.IsAbs(d) {
				dirs[i] = filepath.Join(s.dir, d)
			}
		}
		s.objects = filepath.Join(dirs[0], "objects")
		s.headRef = findHeadRef(dirs[1], dirs[0])
	}
	s.status.State = StateStopped
	return s, nil
}

// removeStaleLocks deletes the lock files of the worktree's index and
// HEAD, of the sync branch and of its remote-tracking ref. A git command
// killed with its Syncer (a crash, SIGKILL, the OOM killer) leaves them
// behind, and git then refuses every later add, commit or fetch ("Unable
// to create '….lock': File exists"), so sync would stop for good. They
// belong to the Syncer: the index and HEAD are the worktree's own, the
// branch is checked out here (so no other worktree updates it), and the
// remote-tracking ref is written by a fetch for a moment at most.
func (s *Syncer) removeStaleLocks(ctx context.Context) error {
	abs := func(p string) string {
		if !filepath.IsAbs(p) {
			p = filepath.Join(s.dir, p)
		}
		return filepath.Clean(p)
	}
	gitDir, err := s.git(ctx, "rev-parse", "--git-dir")
	if err != nil {
		return err
	}
	common, err := s.git(ctx, "rev-parse", "--git-common-dir")
	if err != nil {
		return err
	}
	branch := filepath.FromSlash(s.opts.Branch)
	for _, p := range []string{
		filepath.Join(abs(gitDir), "index.lock"),
		filepath.Join(abs(gitDir), "HEAD.lock"),
		filepath.Join(abs(common), "refs", "heads", branch+".lock"),
		filepath.Join(abs(common), "refs", "remotes", s.opts.Remote, branch+".lock"),
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
	cmd := exec.CommandContext(ctx, "git", "remote")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return false
	}
	for _, r := range strings.Fields(string(out)) {
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
	s.mu.Lock()
	s.running = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.running = false
		s.mu.Unlock()
	}()
	tick := time.NewTicker(s.opts.Interval)
	defer tick.Stop()
	s.round(ctx) // catch up with the remote at start
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.force:
		case <-tick.C:
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
	s.mu.Unlock()
	s.mu.Lock()
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
// loose blob (git has no append); packing stores the versions of a file
// as deltas of each other, so the repository grows by about the new
// lines per round. --geometric=2 packs the loose objects and merges
// existing packs only as they double, so a repack costs what is new, not
// a copy of the history. It runs in the Syncer's round, never on the
// send path; a failure is logged, not a failed round.
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
// With pushFirst, local events are first committed on HEAD alone and
// pushed without a fetch: a push that the remote takes as a fast-forward
// proves that HEAD already has every commit of the remote, so there is
// nothing to merge, and the round costs no fetch. Only a push that fails
// (the remote moved on, or cannot be reached), or a round with nothing
// local to push, fetches and merges.
func (s *Syncer) attempt(ctx context.Context, pushFirst bool) (pushed bool, rejected, err error) {
	var tree string // the files' tree, if staged and still current
	if pushFirst {
		var changed bool
		changed, tree, err = s.commitLocal(ctx)
		if err != nil {
			return false, nil, err
		}
		if changed {
			// Any failure (a refusal, an unreachable remote) takes the
			// way below, which reports it if it lasts.
			if ok, _, _ := s.push(ctx); ok {
				return true, nil, nil
			}
		}
	}
	remoteRef := "refs/remotes/" + s.opts.Remote + "/" + s.opts.Branch
	hasRemote := true
	if _, err := s.git(ctx, "fetch", "--quiet", "--no-auto-maintenance", "--no-write-fetch-head", s.opts.Remote, "+refs/heads/"+s.opts.Branch+":"+remoteRef); err != nil {
		if !strings.Contains(err.Error(), "couldn't find remote ref") {
			return false, nil, fmt.Errorf("fetch: %w", err)
		}
		hasRemote = false // the remote has no sync branch yet: our push creates it
	}
	if hasRemote {
		imported, err := s.merge(ctx, remoteRef)
		if err != nil {
			return false, nil, err
		}
		if imported > 0 {
			tree = "" // the files changed: stage them again
		}
	}
	needPush, err := s.commit(ctx, tree, remoteRef, hasRemote)
	if err != nil || !needPush {
		return err == nil, nil, err
	}
	return s.push(ctx)
}

// push pushes HEAD to the remote's sync branch. pushed is false when the
// remote refused it as not a fast-forward (rejected says how).
func (s *Syncer) push(ctx context.Context) (pushed bool, rejected, err error) {
	if ok, _ := s.pushDirect(ctx); ok {
		return true, nil, nil
	}
	s.forgetUnpushed() // whatever failed, git push knows better
	if _, err := s.git(ctx, "push", "--quiet", s.opts.Remote, "HEAD:refs/heads/"+s.opts.Branch); err != nil {
		if strings.Contains(err.Error(), "rejected") || strings.Contains(err.Error(), "fetch first") || strings.Contains(err.Error(), "non-fast-forward") {
			return false, err, nil
		}
		return false, nil, fmt.Errorf("push: %w", err)
	}
	s.pushed()
	return true, nil, nil
}

// refreshHave reads what was appended to a local shard's segments since
// the last look, so that have[shard] lists every event ID in the shard
// (a remote line may sit in another segment here than there). It is
// called only for a shard a merge must check: a Syncer whose remote
// brings nothing new keeps no IDs in memory.
func (s *Syncer) refreshHave(shard string) (map[string]struct{}, error) {
	ids := s.have[shard]
	if ids == nil {
		ids = map[string]struct{}{}
		s.have[shard] = ids
	}
	segs, err := s.log.Segments(shard)
	if err != nil {
		return nil, err
	}
	for _, rel := range segs {
		if err := s.readIDs(rel, ids); err != nil {
			return nil, err
		}
	}
	return ids, nil
}

// readIDs adds to ids the event IDs of a local segment past what was read
// of it before.
func (s *Syncer) readIDs(rel string, ids map[string]struct{}) error {
	f, err := os.Open(filepath.Join(s.dir, filepath.FromSlash(rel)))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	off := s.scanned[rel]
	if st, err := f.Stat(); err != nil || st.Size() <= off {
		return err // nothing new (a closed segment, once read, is never read again)
	}
	if _, err := f.Seek(off, 0); err != nil {
		return err
	}
	br := bufio.NewReaderSize(f, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if err != nil {
			break // a partial last line is read again next time
		}
		off += int64(len(line))
		if id := eventID(line[:len(line)-1]); id != "" {
			ids[id] = struct{}{}
		}
	}
	s.scanned[rel] = off
	return nil
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
// checked in full.
func (s *Syncer) merge(ctx context.Context, remoteRef string) (int, error) {
	// The remote's files that differ from HEAD's: a file whose blob is
	// the one in HEAD (ours, committed from the local file, so every line
	// of it is here) is not even listed.
	out, err := s.git(ctx, "diff-tree", "-r", "--no-renames", "HEAD", remoteRef)
	if err != nil {
		return 0, fmt.Errorf("diff-tree: %w", err)
	}
	imported := 0
	for _, row := range strings.Split(out, "\n") {
		meta, path, ok := strings.Cut(row, "\t")
		f := strings.Fields(meta)
		if !ok || len(f) != 5 || (f[4] != "A" && f[4] != "M") || !strings.HasPrefix(f[1], "100") {
			continue // not a file the remote has
		}
		shard, _, isSegment := eventlog.ParseSegmentPath(path)
		if !isSegment {
			continue
		}
		blob := f[3]
		prev := s.merged[path]
		if prev.blob == blob {
			continue // unchanged since the last merge
		}
		n, err := s.mergeBlob(ctx, path, shard, blob, prev)
		imported += n
		if err != nil {
			return imported, err
		}
	}
	if imported > 0 {
		s.mu.Lock()
		s.status.Imported += imported
		s.mu.Unlock()
	}
	return imported, nil
}

// mergeBlob imports the events of one remote shard file that this log
// lacks. When prev (the version last merged) is a proven prefix of it,
// only the bytes after prev are checked; otherwise every line is.
func (s *Syncer) mergeBlob(ctx context.Context, path, shard, blob string, prev mergedBlob) (int, error) {
	skip := int64(0)
	if prev.blob != "" && prev.size > 0 {
		skip = prev.size // a shorter file fails the prefix check
	}
	n, err := s.mergeFrom(ctx, path, shard, blob, skip, prev.sum)
	if errors.Is(err, errPrefixChanged) {
		n, err = s.mergeFrom(ctx, path, shard, blob, 0, prev.sum) // the file was rewritten: read it all
	}
	return n, err
}

var errPrefixChanged = errors.New("the remote file's old bytes changed")

// mergeFrom streams a remote blob. Its first skip bytes must hash to
// want (else errPrefixChanged) and are not checked line by line; the
// lines after them that this log lacks are imported. What is remembered
// is the blob's whole lines: their length and hash.
func (s *Syncer) mergeFrom(ctx context.Context, path, shard, blob string, skip int64, want [sha256.Size]byte) (int, error) {
	cmd := exec.CommandContext(ctx, "git", "cat-file", "blob", blob)
	cmd.Dir = s.dir
	cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0")
	var errb bytes.Buffer
	cmd.Stderr = &errb
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("read %s: %w", path, err)
	}
	full := sha256.New()
	lines, size, checked, err := s.scanBlob(stdout, full, path, shard, skip, want)
	if err != nil {
		_, _ = io.Copy(io.Discard, stdout)
		_ = cmd.Wait()
		return 0, err
	}
	if err := cmd.Wait(); err != nil {
		return 0, fmt.Errorf("read %s: git cat-file: %v: %s", path, err, strings.TrimSpace(errb.String()))
	}
	if len(lines) > 0 {
		if _, err := s.log.Import(ctx, shard, lines); err != nil {
			return 0, fmt.Errorf("import %s: %w", path, err)
		}
		ids := s.have[shard]
		for _, l := range lines {
			ids[eventID(l)] = struct{}{}
		}
	}
	s.mu.Lock()
	s.status.Checked += checked
	s.mu.Unlock()
	m := mergedBlob{blob: blob, size: size}
	full.Sum(m.sum[:0])
	s.merged[path] = m
	return len(lines), nil
}

// scanBlob reads a remote shard file from r. The first skip bytes are
// only hashed, and must hash to want; the whole lines after them that
// this log lacks are returned. Every whole line, prefix included, is fed
// to full; size is the length of the whole lines (an unterminated tail
// is not an event yet and is read again next time).
func (s *Syncer) scanBlob(r io.Reader, full hash.Hash, path, shard string, skip int64, want [sha256.Size]byte) (lines [][]byte, size int64, checked int, err error) {
	if skip > 0 {
		pre := sha256.New()
		if _, err := io.CopyN(io.MultiWriter(pre, full), r, skip); err != nil {
			return nil, 0, 0, errPrefixChanged
		}
		var got [sha256.Size]byte
		if pre.Sum(got[:0]); got != want {
			return nil, 0, 0, errPrefixChanged
		}
	}
	ids, err := s.refreshHave(shard)
	if err != nil {
		return nil, 0, 0, err
	}
	seen := map[string]struct{}{}
	br := bufio.NewReaderSize(r, 256<<10)
	size = skip
	for {
		line, rerr := br.ReadBytes('\n')
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return nil, 0, 0, rerr
		}
		full.Write(line)
		checked++
		start := size
		size += int64(len(line))
		line = line[:len(line)-1]
		id := eventID(line)
		if id == "" {
			return nil, 0, 0, fmt.Errorf("remote %s has a line that is not an event at byte %d: refusing to merge it", path, start)
		}
		if _, dup := ids[id]; dup {
			continue
		}
		if _, dup := seen[id]; dup {
			continue
		}
		seen[id] = struct{}{}
		lines = append(lines, line)
	}
	return lines, size, checked, nil
}

// commit records the shard files in a commit and reports whether there
// is something to push. A commit is made when the files changed, or when
// HEAD must be pushed but the remote moved on; its parents are HEAD and,
// when the remote has commits HEAD lacks, the remote head too, so that
// the push is a fast-forward. With nothing new on either side it makes
// no commit: two clones never trade empty merges.
func (s *Syncer) commit(ctx context.Context, tree, remoteRef string, hasRemote bool) (needPush bool, err error) {
	if tree == "" {
		if tree, err = s.stage(ctx); err != nil {
			return false, err
		}
	}
	head, headTree, rh, err := s.heads(ctx, remoteRef, hasRemote)
	if err != nil {
		return false, err
	}
	changed := tree != headTree
	parents := []string{head}
	if !hasRemote {
		needPush = true // create the remote branch
	} else {
		remoteHasHead := s.isAncestor(ctx, head, rh)
		headHasRemote := s.isAncestor(ctx, rh, head)
		needPush = changed || !remoteHasHead
		if needPush && !headHasRemote {
			parents = append(parents, rh)
		}
	}
	if !changed && len(parents) == 1 {
		return needPush, nil // HEAD as it is is what to push (or nothing)
	}
	return true, s.commitTree(ctx, tree, parents)
}

// commitLocal commits the shard files on HEAD alone, if they changed,
// and reports whether it did; tree is the files' tree either way.
func (s *Syncer) commitLocal(ctx context.Context) (changed bool, tree string, err error) {
	if tree, err = s.stage(ctx); err != nil {
		return false, "", err
	}
	head, headTree, _, err := s.heads(ctx, "", false)
	if err != nil || tree == headTree {
		return false, tree, err
	}
	return true, tree, s.commitTree(ctx, tree, []string{head})
}

// stage records the segment files in a tree and returns it. The first
// time, git add and write-tree make it from the worktree's index (git
// hashes what changed since the index was last written). After that, the
// Syncer writes the objects itself (objects.go): only the segment files
// whose durable length changed get a blob, of exactly their acknowledged
// bytes (a batch still being written, which may yet be undone, is never
// pushed), and only the trees over them are rewritten; with nothing new,
// staging does nothing.
func (s *Syncer) stage(ctx context.Context) (string, error) {
	files := s.log.Files()
	if s.staged == nil || s.objects == "" {
		if err := s.addAll(ctx); err != nil {
			return "", err
		}
		tree, err := s.git(ctx, "write-tree")
		if err != nil {
			return "", fmt.Errorf("write-tree: %w", err)
		}
		s.staged, s.tree, s.dirs = files, tree, nil
		return tree, nil
	}
	paths := make([]string, 0, 4)
	for rel, n := range files {
		if s.staged[rel] != n {
			paths = append(paths, rel)
		}
	}
	if len(paths) == 0 {
		return s.tree, nil
	}
	if s.dirs == nil {
		if err := s.loadTree(ctx, s.tree); err != nil {
			return "", err
		}
	}
	sort.Strings(paths)
	for _, rel := range paths {
		id, err := s.writeBlob(rel, files[rel])
		if err != nil {
			return "", fmt.Errorf("stage %s: %w", rel, err)
		}
		s.setBlob(rel, id)
	}
	tree, err := s.writeTree("")
	if err != nil {
		return "", fmt.Errorf("stage: %w", err)
	}
	s.staged, s.tree = files, tree
	return tree, nil
}

// addAll stages every segment file with git add.
func (s *Syncer) addAll(ctx context.Context) error {
	// git's pathspec "*" matches "/" too; not the .corrupt files beside
	// the segments.
	args := []string{"add", "--"}
	for _, spec := range []struct{ pathspec, glob string }{
		{eventlog.EventsFile, eventlog.EventsFile},
		{eventsDir + "/*.jsonl", eventsDir + "/*.jsonl"},
		{eventlog.MessagesDir + "/*.jsonl", eventlog.MessagesDir + "/*.jsonl"},
		{eventlog.MessagesDir + "/*.jsonl", eventlog.MessagesDir + "/*/*.jsonl"},
	} {
		if matches, _ := filepath.Glob(filepath.Join(s.dir, filepath.FromSlash(spec.glob))); len(matches) > 0 && args[len(args)-1] != spec.pathspec {
			args = append(args, spec.pathspec) // git fails on a pathspec that matches nothing
		}
	}
	if len(args) > 2 {
		if _, err := s.git(ctx, args...); err != nil {
			return fmt.Errorf("add: %w", err)
		}
	}
	return nil
}

// eventsDir holds the events shard's segments past the first.
var eventsDir = strings.TrimSuffix(eventlog.EventsFile, ".jsonl")

// heads returns HEAD, its tree and (if hasRemote) the remote head. HEAD
// and its tree are remembered from the Syncer's last commit (HEAD is the
// Syncer's: its update-ref names the old value, so a HEAD moved behind
// its back fails that and is read afresh).
func (s *Syncer) heads(ctx context.Context, remoteRef string, hasRemote bool) (head, tree, remote string, err error) {
	var names []string
	if s.head == "" {
		names = append(names, "HEAD", "HEAD^{tree}")
	}
	if hasRemote {
		names = append(names, remoteRef)
	}
	if len(names) == 0 {
		return s.head, s.headTree, "", nil
	}
	out, err := s.git(ctx, append([]string{"rev-parse"}, names...)...) // one git process for all
	if err != nil {
		return "", "", "", fmt.Errorf("rev-parse: %w", err)
	}
	ids := strings.Fields(out)
	if len(ids) != len(names) {
		return "", "", "", fmt.Errorf("rev-parse: %d IDs for %d names", len(ids), len(names))
	}
	if s.head == "" {
		s.head, s.headTree, ids = ids[0], ids[1], ids[2:]
	}
	if hasRemote {
		remote = ids[0]
	}
	return s.head, s.headTree, remote, nil
}

// commitTree commits tree with the given parents (the first is HEAD) and
// moves HEAD to it.
func (s *Syncer) commitTree(ctx context.Context, tree string, parents []string) error {
	cargs := []string{"commit-tree", tree, "-m", s.message(parents)}
	for _, p := range parents {
		cargs = append(cargs, "-p", p)
	}
	var c string
	var err error
	if s.dirs != nil { // the tree was written here: so is the commit
		c, err = s.writeCommit(tree, parents, s.message(parents))
		if err == nil {
			err = s.writePack()
		}
	} else {
		c, err = s.gitEnv(ctx, identityEnv, cargs...)
		s.forgetUnpushed() // its objects are git's: the next push is too
	}
	if err != nil {
		return fmt.Errorf("commit-tree: %w", err)
	}
	if err := s.setHead(ctx, c, parents[0]); err != nil {
		s.head, s.headTree = "", "" // read it again next time
		s.forgetUnpushed()
		return fmt.Errorf("update-ref: %w", err)
	}
	s.head, s.headTree = c, tree
	s.mu.Lock()
	s.status.Commits++
	s.mu.Unlock()
	return nil
}

func (s *Syncer) isAncestor(ctx context.Context, a, b string) bool {
	if a == b {
		return true
	}
	_, err := s.git(ctx, "merge-base", "--is-ancestor", a, b)
	return err == nil
}

func (s *Syncer) message(parents []string) string {
	host, _ := os.Hostname()
	if len(parents) > 1 {
		return "thrum: sync from " + host + " (merge)"
	}
	return "thrum: sync from " + host
}

// identityEnv lets commits work where user.name is not configured; a
// configured identity still wins for the author shown in git log.
var identityEnv = []string{
	"GIT_AUTHOR_NAME=thrum", "GIT_AUTHOR_EMAIL=thrum@localhost",
	"GIT_COMMITTER_NAME=thrum", "GIT_COMMITTER_EMAIL=thrum@localhost",
}

func (s *Syncer) git(ctx context.Context, args ...string) (string, error) {
	b, err := s.gitEnvBytes(ctx, nil, args...)
	return strings.TrimSpace(string(b)), err
}

func (s *Syncer) gitEnv(ctx context.Context, env []string, args ...string) (string, error) {
	b, err := s.gitEnvBytes(ctx, env, args...)
	return strings.TrimSpace(string(b)), err
}

func (s *Syncer) gitEnvBytes(ctx context.Context, env []string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = s.dir
	cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0")
	cmd.Env = append(cmd.Env, env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("git %s: %v: %s", args[0], err, strings.TrimSpace(errb.String()))
	}
	return out.Bytes(), nil
}

// eventID reads a line's event ID, "" if it is not an event.
func eventID(line []byte) string {
	// Lines thrum wrote start with their ID: take it without parsing the
	// line (Import validates every line it appends in full).
	const prefix = `{"event_id":"`
	if len(line) > len(prefix)+26 && string(line[:len(prefix)]) == prefix {
		if id := line[len(prefix) : len(prefix)+26]; line[len(prefix)+26] == '"' && bytes.IndexByte(id, '\\') < 0 {
			return string(id)
		}
	}
	e, err := eventlog.DecodeLine(line)
	if err != nil {
		return ""
	}
	return e.ID
}
