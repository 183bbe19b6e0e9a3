// Package admit is the one way a line written on another machine enters
// an event log, whatever carried it (git today, a stream next): a
// transport hands a Gate the raw lines it found for one shard, and the
// Gate decides, imports and quarantines. A transport judges nothing and
// keeps no quarantine of its own.
//
// A Gate takes each line through these steps, in this order:
//
//   - a line whose event ID the shard already holds (or that an earlier
//     line of the call brings) is dropped: it is here already
//     (eventlog.Log.Lacks; Import checks again in the committer, so two
//     transports racing leave each event once);
//   - a line longer than eventlog.MaxLineBytes, or that is not an event,
//     is refused;
//   - the log's rules: where an event may be (eventlog.CheckShard), and
//     what its fields may hold (eventlog.CheckFields: grammars, enums,
//     bounds, a time at most a day ahead of this clock);
//   - the node's rules (Options.Judge): who it may claim to be, what
//     it may change;
//   - the lines left are imported (eventlog.Log.Import), the refused ones
//     kept in the quarantine (QuarantineFile), never applied.
package admit

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/thrumhq/thrum/eventlog"
)

// Judge decides whether an event that another machine wrote may enter
// shard, after the log's own rules passed it: a non-empty reason refuses
// it; an error means it could not tell (the call fails, nothing of it is
// imported, and the transport tries again later).
type Judge func(ctx context.Context, shard string, e *eventlog.Event) (reason string, err error)

// Options configure a Gate. A nil *Options means all defaults.
type Options struct {
	// Judge, if set, holds each event to the node's rules (a thrum
	// node's Gate, Node.Admission, has its own). Default: the log's
	// rules alone.
	Judge Judge
	// Logger receives a warning for each batch of new refusals. Nil
	// means silent.
	Logger *slog.Logger
	// Now is this machine's clock: refusals are dated by it, and an
	// event may be at most eventlog.MaxFuture ahead of it. Default
	// time.Now.
	Now func() time.Time
}

// Source says where a transport found the lines it hands a Gate, as the
// quarantine records it.
type Source struct {
	File   string // the remote's file (git), or the stream's subject
	Commit string // the source's version: a git commit, a stream sequence
}

// Result is what Admit did with a call's lines.
type Result struct {
	Imported []*eventlog.Event // appended to the log, in order (and applied)
	Refused  []Refusal         // kept out, quarantined
	Held     int               // lines whose event the shard already held
}

// Gate admits lines from other machines into one log. Its methods may be
// called concurrently, by any number of transports; a log has one Gate,
// since the Gate owns the log's quarantine file.
type Gate struct {
	log  *eventlog.Log
	opts Options

	mu sync.Mutex // guards q
	q  *quarantine
}

// New returns the Gate of a log, with the quarantine earlier Gates kept
// in its directory.
func New(log *eventlog.Log, opts *Options) (*Gate, error) {
	g := &Gate{log: log}
	if opts != nil {
		g.opts = *opts
	}
	if g.opts.Now == nil {
		g.opts.Now = time.Now
	}
	q, err := loadQuarantine(log.Dir())
	if err != nil {
		return nil, err
	}
	g.q = q
	return g, nil
}

// Admit takes the raw lines (without newlines) that a transport found
// for one shard, from src: it imports those that may enter the log and
// quarantines the rest (see the package doc). An error (a write that
// failed, a Judge that could not tell) imports nothing of the lines not
// imported yet; the transport brings them again later.
func (g *Gate) Admit(ctx context.Context, src Source, shard string, lines [][]byte) (*Result, error) {
	res := &Result{}
	lacked, err := g.log.Lacks(shard, lines)
	if err != nil {
		return nil, fmt.Errorf("admit: %w", err)
	}
	now := eventlog.FormatTime(g.opts.Now())
	var ok [][]byte
	for _, line := range lacked {
		reason, err := g.judge(ctx, shard, line)
		if err != nil {
			return nil, fmt.Errorf("admit %s: %w", src.File, err)
		}
		if reason != "" {
			res.Refused = append(res.Refused, newRefusal(now, src, line, reason))
			continue
		}
		ok = append(ok, line)
	}
	if err := g.quarantine(src, res.Refused); err != nil {
		return nil, err
	}
	if len(ok) > 0 {
		if res.Imported, err = g.log.Import(ctx, shard, ok); err != nil {
			return res, fmt.Errorf("admit %s: import: %w", src.File, err)
		}
	}
	// Held: found in the shard before judging, or brought meanwhile by
	// another transport (Import dropped it).
	res.Held = len(lines) - len(res.Imported) - len(res.Refused)
	return res, nil
}

// judge returns why a line may not enter shard ("" if it may).
func (g *Gate) judge(ctx context.Context, shard string, line []byte) (string, error) {
	if len(line) > eventlog.MaxLineBytes {
		return fmt.Sprintf("a line of over %d bytes: longer than any event", eventlog.MaxLineBytes), nil
	}
	e, err := eventlog.DecodeLine(line)
	if err != nil {
		return "not an event: " + err.Error(), nil
	}
	if err := eventlog.CheckShard(shard, e); err != nil {
		return err.Error(), nil
	}
	if err := eventlog.CheckFields(e, g.opts.Now()); err != nil {
		return fmt.Sprintf("a %s in %s: %v", e.Type, eventlog.ShardPath(shard), err), nil
	}
	if g.opts.Judge != nil {
		return g.opts.Judge(ctx, shard, e)
	}
	return "", nil
}

// RefuseFile quarantines a whole file a transport found where the log
// keeps none of its own (a symbolic link, a path outside the log, the
// local shard), so that it is reported like a refused line; nothing of
// it is read. It is kept once per file and reason.
func (g *Gate) RefuseFile(src Source, reason string) error {
	r := newRefusal(eventlog.FormatTime(g.opts.Now()), src, []byte("file "+src.File+": "+reason), reason)
	r.Line, r.Bytes = "", 0
	return g.quarantine(src, []Refusal{r})
}

// Refusals returns how many lines the quarantine holds (those earlier
// Gates kept included, and those refused past its bound this process)
// and why, by source file and reason, the most recent first (at most
// MaxRefusalGroups).
func (g *Gate) Refusals() (int, []RefusalCount) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.q.total, g.q.counts(MaxRefusalGroups)
}

// quarantine keeps and counts refused lines, and logs those it had not
// refused before.
func (g *Gate) quarantine(src Source, refused []Refusal) error {
	if len(refused) == 0 {
		return nil
	}
	g.mu.Lock()
	before := g.q.total
	err := g.q.add(refused)
	n := g.q.total - before
	g.mu.Unlock()
	if n > 0 && g.opts.Logger != nil {
		g.opts.Logger.Warn("admit: refused events from another machine; they are quarantined, not applied",
			"file", src.File, "count", n, "reason", refused[0].Reason, "quarantine", filepath.Join(g.log.Dir(), QuarantineFile))
	}
	return err
}
