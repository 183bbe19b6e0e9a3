package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/eventlog/gitsync"
	"github.com/thrumhq/thrum/eventlog/natsync"
	"github.com/thrumhq/thrum/rpc"
)

// SyncCmd groups sync commands.
type SyncCmd struct {
	Status  SyncStatusCmd  `cmd:"" help:"Show where the log goes and how each way out stands."`
	Force   SyncForceCmd   `cmd:"" help:"Sync now (--wait: until the round is done)."`
	Nats    SyncNATSCmd    `cmd:"" name:"nats" help:"Live delivery between machines through NATS: create the stream, accept a suggested server."`
	Encrypt SyncEncryptCmd `cmd:"" help:"Seal message bodies from now on: the remote and NATS hold ciphertext."`
}

// syncOff turns method-not-found into what it means here.
func syncOff(err error) error {
	if errors.Is(err, rpc.ErrMethodNotFound) {
		return errors.New("sync is off: this repository has no remote (add one with git remote add origin URL, then restart the daemon), or this clone is local (git config thrum.local)")
	}
	return err
}

type SyncStatusCmd struct{}

func (c *SyncStatusCmd) Help() string {
	return `Shows where the log goes and how sync stands: the state of the last git
round, when it ran, the interval and when the next timed round is due;
with NATS, its server, stream, what waits to be published and read, and
the last error; and what sync refused from the remote. With neither a
remote nor a NATS server (or with thrum.local set), sync is off: the log
stays on this machine.

Exit codes: 0 synced, idle or off; 1 the last git round or NATS step failed.

Examples:
  thrum sync status
  thrum sync status --json`
}

func (c *SyncStatusCmd) Run(ctx context.Context, g *Globals) error {
	off, failed, sealed := false, false, 0
	err := call(ctx, g, false, func(s *session) (any, error) {
		if st, err := s.c.KeyStatus(ctx, &rpc.KeyStatusParams{}); err == nil {
			sealed = st.Waiting // for the people reading; thrum key status --json has it all
		}
		r, err := s.c.SyncStatus(ctx, &rpc.SyncStatusParams{})
		if errors.Is(err, rpc.ErrMethodNotFound) {
			// Nothing to sync with is a state, not a failure.
			off = true
			return &rpc.SyncStatusResult{SyncState: "off", Refusals: []rpc.SyncRefusal{}}, nil
		}
		failed = err == nil && (r.SyncState == gitsync.StateError || r.NATS != nil && r.NATS.State == natsync.StateError)
		return r, err
	}, func(w io.Writer, v any) {
		r := v.(*rpc.SyncStatusResult)
		if off {
			fmt.Fprintln(w, "Sync: off (no git remote and no NATS server, or thrum.local is set): the log stays on this machine")
			return
		}
		fmt.Fprintf(w, "Sync: %s (running: %v)\n", r.SyncState, r.Running)
		now := time.Now()
		if r.LastSyncAt != "" {
			fmt.Fprintf(w, "  Last sync: %s\n", ago(r.LastSyncAt, now))
		}
		if r.IntervalMs > 0 {
			fmt.Fprintf(w, "  Interval: %s when idle (and %s after a local event)", time.Duration(r.IntervalMs)*time.Millisecond, gitsync.DefaultDebounce)
			if at, err := time.Parse(time.RFC3339Nano, r.NextSyncAt); err == nil {
				fmt.Fprintf(w, "; next round in %s", max(at.Sub(now), 0).Round(time.Second))
			}
			fmt.Fprintln(w)
		}
		if r.LastError != "" {
			fmt.Fprintf(w, "  Last error: %s\n", r.LastError)
		}
		if n := r.NATS; n != nil {
			printNATS(w, n)
		}
		printRefusals(w, r.Refused, r.Refusals)
		if r.Waiting > 0 {
			fmt.Fprintf(w, "  Waiting: %d %s from the remote wait for their author's key (its registration has not arrived)\n", r.Waiting, plural(r.Waiting, "event", "events"))
		}
		printKeyring(indent{w}, r.Keyring)
		if sealed > 0 {
			fmt.Fprintf(w, "  Sealed: %d %s for the team key: thrum key status says which; thrum key import FILE opens them\n", sealed, plural(sealed, "message waits", "messages wait"))
		}
	})
	if err == nil && failed {
		return &codeError{code: exitError, err: errSilent} // the output said why
	}
	return err
}

// printNATS says how live delivery through NATS stands.
func printNATS(w io.Writer, n *rpc.SyncNATS) {
	fmt.Fprintf(w, "  NATS: %s, server %s, stream %s", n.State, n.Server, n.Stream)
	if n.MaxAgeMs > 0 {
		fmt.Fprintf(w, " (keeps events %s)", time.Duration(n.MaxAgeMs)*time.Millisecond)
	}
	fmt.Fprintf(w, "\n    published %d %s, %d bytes waiting; imported %d %s, %d %s to read\n",
		n.Published, plural(n.Published, "message", "messages"), n.UnpublishedBytes, n.Imported, plural(n.Imported, "event", "events"), n.Lag, plural(int(n.Lag), "message", "messages"))
	if n.LastError != "" {
		fmt.Fprintf(w, "    last error: %s\n", n.LastError)
	}
	if n.TooLarge > 0 {
		fmt.Fprintf(w, "    %d %s over the server's max_payload, left to git\n", n.TooLarge, plural(n.TooLarge, "event", "events"))
	}
	if n.Gaps > 0 {
		fmt.Fprintf(w, "    %d %s began past the end of their shard here, left to git\n", n.Gaps, plural(n.Gaps, "message", "messages"))
	}
	if n.Missed > 0 {
		fmt.Fprintf(w, "    %d stream %s went before this clone read them, and no git remote brings their events\n", n.Missed, plural(int(n.Missed), "message", "messages"))
	}
}

// printRefusals says what sync refused from the remote, and why.
func printRefusals(w io.Writer, refused int, rs []rpc.SyncRefusal) {
	if refused == 0 {
		return
	}
	fmt.Fprintf(w, "  Refused: %d %s from the remote, kept out of the log (quarantined, not applied):\n", refused, plural(refused, "event", "events"))
	for _, r := range rs {
		fmt.Fprintf(w, "    %d × %s: %s\n", r.Count, r.File, r.Reason)
	}
}

type SyncForceCmd struct {
	Wait bool `help:"Return once a round started now has finished (exit 1 if it failed)."`
}

// syncWaitTimeout bounds sync force --wait: a round of fetch, merge and
// push with the remote.
const syncWaitTimeout = 5 * time.Minute

func (c *SyncForceCmd) Run(ctx context.Context, g *Globals) error {
	return call(ctx, g, false, func(s *session) (any, error) {
		ctx := ctx
		if c.Wait { // a round with the remote may take longer than a call
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, syncWaitTimeout)
			defer cancel()
		}
		r, err := s.c.SyncForce(ctx, &rpc.SyncForceParams{Wait: c.Wait})
		if err == nil && r.LastError != "" {
			return r, fmt.Errorf("sync failed: %s", r.LastError)
		}
		return r, syncOff(err)
	}, func(w io.Writer, v any) {
		r := v.(*rpc.SyncForceResult)
		if c.Wait {
			fmt.Fprintf(w, "> Synced (%s)\n", r.SyncState)
		} else if r.Triggered {
			fmt.Fprintln(w, "> Sync triggered")
		} else {
			fmt.Fprintf(w, "> Sync already running (%s)\n", r.SyncState)
		}
	})
}

// syncers are the daemon's ways out: git, NATS, either or both. The node
// is made before them (they need its log) and calls them through these
// methods, which do nothing until they are set.
type syncers struct {
	git  atomic.Pointer[gitsync.Syncer]
	nats atomic.Pointer[natsync.Syncer]
	node *thrum.Node // the team's keyring, for sync.status
}

// make builds the syncers that to names, without running them.
func (sy *syncers) make(n *thrum.Node, l *layout, to *leaves, interval time.Duration, logger *slog.Logger) error {
	sy.node = n
	var gs *gitsync.Syncer
	if to.gitSyncs() {
		var err error
		if gs, err = gitsync.New(n.EventLog(), &gitsync.Options{Interval: interval, Logger: logger, Gate: n.Admission()}); err != nil {
			return err
		}
	}
	if cfg := to.natsConfig(); cfg != nil {
		o := &natsync.Options{Machine: n.Machine(), Admission: n.Admission(), Local: n.WroteHere, Logger: logger,
			StateFile: filepath.Join(filepath.Dir(l.PIDFile), "nats.json")}
		if gs != nil {
			o.Refresh = gs.Refresh
		}
		ns, err := natsync.New(n.EventLog(), cfg, o)
		if err != nil {
			return fmt.Errorf("daemon: %w", err)
		}
		sy.nats.Store(ns)
	}
	if gs != nil {
		sy.git.Store(gs)
	}
	return nil
}

// on reports whether any syncer is there.
func (sy *syncers) on() bool { return sy.git.Load() != nil || sy.nats.Load() != nil }

// run runs the syncers until ctx ends; the channel is closed when they
// have returned.
func (sy *syncers) run(ctx context.Context, logger *slog.Logger) <-chan struct{} {
	var wg sync.WaitGroup
	if gs := sy.git.Load(); gs != nil {
		wg.Go(func() { gs.Run(ctx) })
	}
	if ns := sy.nats.Load(); ns != nil {
		wg.Go(func() {
			if err := ns.Run(ctx); err != nil {
				logger.Error("NATS sync stopped", "err", err)
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	return done
}

// committed is the node's OnCommit: git's round is due when events were
// made here; the NATS publisher takes this machine's lines.
func (sy *syncers) committed(batch []*eventlog.Event) {
	if gs := sy.git.Load(); gs != nil && slices.ContainsFunc(batch, madeHere) {
		gs.Notify()
	}
	if ns := sy.nats.Load(); ns != nil {
		ns.Committed(batch)
	}
}

func madeHere(e *eventlog.Event) bool { return !e.Imported() }

// refresh is the node's Refresh: a git round if there is git (it brings
// everything), else NATS caught up.
func (sy *syncers) refresh(ctx context.Context) error {
	if gs := sy.git.Load(); gs != nil {
		return gs.Refresh(ctx)
	}
	if ns := sy.nats.Load(); ns != nil {
		return ns.Refresh(ctx)
	}
	return errors.New("sync has not started yet")
}

// state is health's sync_state: "error" if a way out failed last,
// "pending" while one has events to send or take, else "synced".
func (sy *syncers) state() string {
	state := "synced"
	if gs := sy.git.Load(); gs != nil {
		switch st := gs.Status(); {
		case st.State == gitsync.StateError:
			return "error"
		case st.Pending || st.State == gitsync.StateIdle:
			state = "pending"
		}
	}
	if ns := sy.nats.Load(); ns != nil {
		switch st := ns.Status(); {
		case st.State == natsync.StateError:
			return "error"
		case st.State != natsync.StateLive || st.Lag > 0 || st.Unpublished > 0:
			state = "pending"
		}
	}
	return state
}

// SyncStatus answers sync.status: git's state as the spec has it, and
// NATS's beside it (with NATS alone, the top fields are NATS's).
func (sy *syncers) SyncStatus(ctx context.Context, _ *rpc.SyncStatusParams) (*rpc.SyncStatusResult, error) {
	ring, err := sy.node.KeyringStatus(ctx)
	if err != nil {
		return nil, err
	}
	// What the admission kept out or holds, whichever way it came.
	gate := sy.node.Admission()
	refused, counts := gate.Refusals()
	res := &rpc.SyncStatusResult{Refused: refused, Refusals: syncRefusals(counts), Waiting: gate.Waiting(), Keyring: ring}
	if gs := sy.git.Load(); gs != nil {
		st := gs.Status()
		res.Running, res.LastSyncAt, res.LastError, res.SyncState = st.Running, syncTime(st.LastSyncAt), st.LastError, st.State
		res.IntervalMs, res.NextSyncAt = st.Interval.Milliseconds(), syncTime(st.NextRound)
	}
	if ns := sy.nats.Load(); ns != nil {
		st := ns.Status()
		res.NATS = &rpc.SyncNATS{Server: st.Server, Stream: st.Stream, State: st.State, LastError: st.LastError, MaxAgeMs: st.MaxAge.Milliseconds(),
			Published: st.Published, UnpublishedBytes: st.Unpublished, Imported: st.Imported, Lag: st.Lag, TooLarge: st.TooLarge, Gaps: st.Gaps, Missed: st.Missed}
		if sy.git.Load() == nil {
			res.Running, res.LastError = st.State != natsync.StateStopped, st.LastError
			switch st.State {
			case natsync.StateLive:
				res.SyncState = gitsync.StateSynced
			case natsync.StateError:
				res.SyncState = gitsync.StateError
			case natsync.StateStopped:
				res.SyncState = gitsync.StateStopped
			default:
				res.SyncState = gitsync.StateIdle
			}
		}
	}
	return res, nil
}

// SyncForce answers sync.force: a git round now (with Wait, until it is
// done), and NATS woken (with Wait, until what was written before the
// call is published and the stream as of the call imported).
func (sy *syncers) SyncForce(ctx context.Context, p *rpc.SyncForceParams) (*rpc.SyncForceResult, error) {
	gs, ns := sy.git.Load(), sy.nats.Load()
	res := &rpc.SyncForceResult{Triggered: true}
	var errs []error
	if p.Wait {
		if gs != nil {
			errs = append(errs, gs.Refresh(ctx)) // a round that started after this call
		}
		if ns != nil {
			errs = append(errs, ns.Refresh(ctx))
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	} else {
		if gs != nil {
			res.Triggered = gs.Force()
		}
		if ns != nil {
			ns.Notify()
		}
	}
	if st, err := sy.SyncStatus(ctx, nil); err == nil {
		res.LastSyncAt, res.SyncState = st.LastSyncAt, st.SyncState
	}
	if err := errors.Join(errs...); err != nil {
		res.LastError = err.Error()
	}
	return res, nil
}

// final runs one last git round, so events of the final moments reach
// the remote (NATS published them as they came).
func (sy *syncers) final(logger *slog.Logger) {
	if gs := sy.git.Load(); gs != nil {
		fctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := gs.SyncOnce(fctx); err != nil {
			logger.Warn("final sync failed; it will happen at the next start", "err", err)
		}
	}
}
