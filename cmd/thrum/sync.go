package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/thrumhq/thrum/eventlog/gitsync"
	"github.com/thrumhq/thrum/rpc"
)

// SyncCmd groups git sync commands.
type SyncCmd struct {
	Status SyncStatusCmd `cmd:"" help:"Show the sync loop's state."`
	Force  SyncForceCmd  `cmd:"" help:"Sync now (--wait: until the round is done)."`
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
round, when it ran, the interval and when the next timed round is due,
and what sync refused from the remote. With no remote (or thrum.local
set), sync is off: the log stays on this machine.

Exit codes: 0 synced, idle or off; 1 the last round failed.

Examples:
  thrum sync status
  thrum sync status --json`
}

func (c *SyncStatusCmd) Run(ctx context.Context, g *Globals) error {
	off, failed := false, false
	err := call(ctx, g, false, func(s *session) (any, error) {
		r, err := s.c.SyncStatus(ctx, &rpc.SyncStatusParams{})
		if errors.Is(err, rpc.ErrMethodNotFound) {
			// Nothing to sync with is a state, not a failure.
			off = true
			return &rpc.SyncStatusResult{SyncState: "off", Refusals: []rpc.SyncRefusal{}}, nil
		}
		failed = err == nil && r.SyncState == gitsync.StateError
		return r, err
	}, func(w io.Writer, v any) {
		r := v.(*rpc.SyncStatusResult)
		if off {
			fmt.Fprintln(w, "Sync: off (no git remote, or thrum.local is set): the log stays on this machine")
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
		printRefusals(w, r.Refused, r.Refusals)
		if r.Waiting > 0 {
			fmt.Fprintf(w, "  Waiting: %d %s from the remote wait for their author's key (its registration has not arrived)\n", r.Waiting, plural(r.Waiting, "event", "events"))
		}
		printKeyring(indent{w}, r.Keyring)
	})
	if err == nil && failed {
		return &codeError{code: exitError, err: errSilent} // the output said why
	}
	return err
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
