package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/eventlog/admit"
	"github.com/thrumhq/thrum/eventlog/gitsync"
	"github.com/thrumhq/thrum/internal/gitwork"
	"github.com/thrumhq/thrum/rpc"
)

// DoctorCmd checks the event log against the projection.
type DoctorCmd struct {
	Rebuild bool `help:"Replace the projection with one rebuilt from the log, then check again."`
	Verify  bool `help:"Also check every event's signature again, with the keys this clone trusts (admission checked each once; start and rebuild never do)."`
}

func (c *DoctorCmd) Help() string {
	return `Reads every line of the event log, reports each one that is not a valid
event (file and line), then rebuilds the projection from the log into a
temporary file and compares it with the live one row by row, naming the
log line behind each difference. This finds what a daemon start does not
check: a line changed in place before the projection's checkpoint.

The daemon must be stopped: doctor opens the data directory itself.
Exit status 0 means no problems (after --rebuild, in the rebuilt
projection); 1 means problems are listed.

The log is the truth. A difference in the projection is repaired by
--rebuild. A line that is not a valid event stops every start: keep a
copy of the file, fix or delete the line, and run doctor again. An event
in a shard it does not belong in (a message in another agent's file, a
credential outside local.jsonl) is a problem too: sync takes no such
event from the remote any more, so one in the log came from an older
thrum or a hand edit.

Doctor also lists what sync refused from the remote (events that break
the authorship or field rules, claim an agent registered on this
machine or change a group made here; files that are none of the log's):
they sit in the log directory's quarantine.jsonl, never applied. They
are not problems of this log and do not change the exit status; they
say that someone who can push to the remote wrote events as others.
Lines that wait for their author's key (its registration has not
arrived) sit there too, counted apart: they are imported when it does.
Doctor shows the team's keyring (thrum-keys on origin/HEAD), what it
could not read, and keys first seen that it overrides. With --verify it
checks every signature in the log again; one that does not verify is a
problem.

Before it opens the log, doctor (like the daemon) moves aside what a
clone an older thrum made took from the remote (symbolic links, special
files, the remote's lines of a local.jsonl) and lists it.

Examples:
  thrum daemon stop && thrum doctor && thrum daemon start
  thrum doctor --rebuild
  thrum doctor --verify
  thrum doctor --json`
}

func (c *DoctorCmd) Run(ctx context.Context, g *Globals) error {
	l, err := resolveLayout(ctx, g)
	if err != nil {
		return err
	}
	if !l.initialized() {
		return withCode(exitError, "%s is not set up for thrum: run `thrum init`", l.Root)
	}
	if _, err := health(ctx, l); err == nil {
		return withCode(exitError, "the daemon is running (pid %d): stop it with `thrum daemon stop`, run doctor, then `thrum daemon start`", readPID(l.PIDFile))
	}
	if _, err := l.repairLog(ctx); err != nil {
		return fmt.Errorf("doctor: repair the log: %w", err)
	}
	open := func() (*thrum.Node, error) {
		keys, err := l.keys()
		if err != nil {
			return nil, err
		}
		repo := gitwork.New(l.Root)
		opts := &thrum.Options{DBPath: l.DB, RepoID: l.RepoID(ctx), GitRepo: repo, IdentityDir: l.IDs, Signer: keys}
		if l.Git {
			opts.Keyring = repo.Keyring
		}
		return thrum.Open(ctx, l.LogDir, opts)
	}
	removeDB := func() error {
		for _, s := range []string{"", "-wal", "-shm"} {
			if err := os.Remove(l.DB + s); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
		return nil
	}
	n, err := open()
	var ce *eventlog.CorruptError
	switch {
	case errors.As(err, &ce):
		// The log itself is damaged: list every bad line.
		rep, verr := thrum.VerifyLog(ctx, l.LogDir)
		if verr != nil {
			return fmt.Errorf("doctor: %w (and checking the log failed: %v)", err, verr)
		}
		return c.report(ctx, g, l, nil, rep, false)
	case err != nil && c.Rebuild:
		g.hint("thrum: the projection did not open (%v): rebuilding it from the log", err)
		if err := removeDB(); err != nil {
			return fmt.Errorf("doctor: %w", err)
		}
		if n, err = open(); err != nil {
			return fmt.Errorf("doctor: %w", err)
		}
	case err != nil:
		return fmt.Errorf("doctor: %w; `thrum doctor --rebuild` replaces the projection", err)
	}
	rep, err := n.Verify(ctx)
	if err != nil {
		n.Close()
		return fmt.Errorf("doctor: %w", err)
	}
	if !c.Rebuild || !rep.OK() && rep.Lines > rep.Events {
		defer n.Close()
		return c.report(ctx, g, l, n, rep, false)
	}
	if !g.JSON {
		c.print(textWriter{g.stdout}, l, rep)
	}
	n.Close()
	if err := removeDB(); err != nil {
		return fmt.Errorf("doctor: %w", err)
	}
	if n, err = open(); err != nil { // Open replays the whole log into a new projection
		return fmt.Errorf("doctor: rebuild: %w", err)
	}
	defer n.Close()
	rep, err = n.Verify(ctx)
	if err != nil {
		return fmt.Errorf("doctor: %w", err)
	}
	return c.report(ctx, g, l, n, rep, true)
}

// report prints rep, the signatures (with --verify) and the keyring of
// n (nil when the log did not open), and what sync refused, and returns
// the exit status.
func (c *DoctorCmd) report(ctx context.Context, g *Globals, l *layout, n *thrum.Node, rep *thrum.VerifyReport, rebuilt bool) error {
	refused, err := admit.ReadQuarantine(l.LogDir)
	if err != nil {
		return fmt.Errorf("doctor: %w", err)
	}
	counts, waiting := admit.CountRefusals(refused)
	var sigs *thrum.SignatureReport
	var ring *rpc.KeyringStatus
	machine := ""
	if n != nil {
		machine = n.Machine()
		if c.Verify {
			if sigs, err = n.VerifySignatures(ctx); err != nil {
				return fmt.Errorf("doctor: %w", err)
			}
			rep.Problems = append(rep.Problems, sigs.Problems...)
		}
		if ring, err = n.KeyringStatus(ctx); err != nil {
			return fmt.Errorf("doctor: %w", err)
		}
	}
	adopted, err := gitsync.ReadAdopted(l.adopted())
	if err != nil {
		return fmt.Errorf("doctor: %w", err)
	}
	nats := doctorNATS(ctx, g, l, machine)
	if g.JSON {
		if adopted == nil {
			adopted = []gitsync.Adoption{}
		}
		if err := g.out(map[string]any{"ok": rep.OK(), "rebuilt": rebuilt, "report": rep,
			"refused": len(refused) - waiting, "refusals": syncRefusals(counts), "waiting": waiting, "adopted": adopted,
			"signatures": sigs, "keyring": ring, "nats": nats, "hook_failures": hookFailuresJSON(l)}, nil); err != nil {
			return err
		}
	} else {
		w := textWriter{g.stdout}
		if nats != nil {
			fmt.Fprintln(w, nats.line())
		}
		if rebuilt {
			fmt.Fprintf(w, "Rebuilt %s from the log.\n", l.DB)
		}
		c.print(w, l, rep)
		if sigs != nil {
			fmt.Fprintf(w, "Signatures: %d verified, %d unsigned (written before their writers signed), %d naming no one.\n", sigs.Verified, sigs.Unsigned, sigs.Anonymous)
		}
		printKeyring(w, ring)
		for _, s := range rep.Sealed {
			if s.Held {
				fmt.Fprintf(w, "Warning: %d %s sealed with team key %s %s not open with it: moved from another event, or damaged. Their bodies cannot be read.\n",
					s.Events, plural(s.Events, "event", "events"), s.Key, plural(s.Events, "does", "do"))
			} else {
				fmt.Fprintf(w, "Warning: %d %s sealed with team key %s, which this clone does not hold: their bodies stay unread until it is imported (thrum key import FILE).\n",
					s.Events, plural(s.Events, "event", "events"), s.Key)
			}
		}
		if waiting > 0 {
			fmt.Fprintf(w, "%d %s from the remote wait for their author's key (its registration has not arrived); they are imported when it does.\n",
				waiting, plural(waiting, "event", "events"))
		}
		if k := len(refused) - waiting; k > 0 {
			fmt.Fprintf(w, "Sync refused %d %s from the remote (kept in %s, never applied):\n",
				k, plural(k, "event", "events"), filepath.Join(l.LogDir, admit.QuarantineFile))
			for _, r := range counts {
				fmt.Fprintf(w, "  %d × %s: %s\n", r.Count, r.File, r.Reason)
			}
			g.hint("Someone who can push to the remote's %s branch wrote those events as others: each refusal in the file names the remote commit it came in.", SyncBranch)
		}
		if len(adopted) > 0 {
			fmt.Fprintf(w, "Moved out of the log directory, never read (%d):\n", len(adopted))
			for _, a := range adopted {
				fmt.Fprintf(w, "  %s %s: %s → %s\n", a.At, a.Path, a.Why, a.MovedTo)
			}
		}
		if line := hookFailuresLine(l); line != "" {
			fmt.Fprintln(w, line)
		}
		if !rep.OK() && rep.Lines == rep.Events && !rebuilt {
			g.hint("Rebuild the projection from the log with: thrum doctor --rebuild")
		}
		if rep.Lines > rep.Events {
			g.hint("The log is the truth: keep a copy of each file named above, fix or delete its bad lines, and run thrum doctor again.")
		}
	}
	if !rep.OK() {
		return &codeError{code: exitError, err: errSilent}
	}
	return nil
}

func (c *DoctorCmd) print(w io.Writer, l *layout, rep *thrum.VerifyReport) {
	fmt.Fprintf(w, "Checked %d lines (%d events) of the log in %s against %s\n", rep.Lines, rep.Events, l.LogDir, l.DB)
	for _, r := range rep.Repairs {
		fmt.Fprintf(w, "  repaired: %s\n", r)
	}
	for _, p := range rep.Problems {
		fmt.Fprintf(w, "  %s\n", p)
	}
	if rep.OK() {
		fmt.Fprintln(w, "No problems found.")
	} else {
		fmt.Fprintf(w, "%d problem(s).\n", len(rep.Problems))
	}
}

// printKeyring says what the team's keyring holds (nothing without one).
func printKeyring(w io.Writer, ring *rpc.KeyringStatus) {
	if ring == nil || !ring.Present && ring.Changed == nil {
		return
	}
	if ring.Present {
		fmt.Fprintf(w, "The team's keyring (%s on origin/HEAD, blob %.12s): %d %s.\n", gitwork.KeyringFile, ring.Version, ring.Entries, plural(ring.Entries, "key", "keys"))
	} else {
		fmt.Fprintf(w, "The team's keyring (%s on origin/HEAD) is gone.\n", gitwork.KeyringFile)
	}
	if ch := ring.Changed; ch != nil {
		from, to := ch.From, ch.To
		for _, v := range []*string{&from, &to} {
			if *v == "" {
				*v = "none"
			}
		}
		fmt.Fprintf(w, "  changed at %s: %.12s → %.12s\n", ch.At, from, to)
	}
	for _, p := range ring.Problems {
		fmt.Fprintf(w, "  skipped: %s\n", p)
	}
	for _, o := range ring.Overrides {
		fmt.Fprintf(w, "  over first use: %s\n", o)
	}
}
