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
//   - the node's rules (Options.Judge), over the call's events at once:
//     whose key signed it, who it may claim to be, what it may change.
//     The Judge may also say an event waits: it cannot be judged yet
//     (its author's key has not arrived). A waiting line is neither
//     imported nor refused (Result.Waiting counts it): the Gate keeps it
//     whole in the quarantine, marked as waiting, and judges it again
//     whenever an import brings keys (a registration, a seal), whichever
//     transport brought them. No transport has to bring it again: git's
//     would not (a clone's merge commits its own files, so a line it did
//     not import leaves the remote's tip with its next push);
//   - the lines left are imported (eventlog.Log.Import), the refused ones
//     kept in the quarantine (QuarantineFile), never applied. Rejudge
//     takes the quarantined lines through admission again, when the
//     node's rules changed (the owner trusted a key).
package admit

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/thrumhq/thrum/eventlog"
)

// Judge decides whether the events that another machine wrote may enter
// shard, after the log's own rules passed them: one Verdict per event,
// in the order given (the order the transport found them in). An error
// means it could not tell (the call fails, nothing of it is imported,
// and the transport tries again later).
type Judge func(ctx context.Context, shard string, evs []*eventlog.Event) ([]Verdict, error)

// Verdict is a Judge's word on one event: the zero Verdict takes it.
type Verdict struct {
	Refuse string // why it may not enter, if it may not
	Wait   string // why it cannot be judged yet, if it cannot
}

// BatchBytes is how many bytes of lines a transport hands Admit at once,
// at most (and a line more): what an import holds beside the log at its
// peak is about its events decoded, judged and applied, a few times the
// bytes of its lines, so a remote file or a stream message of any size
// is admitted a slice at a time.
const BatchBytes = 256 << 10

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
	// Waiting counts the lines that cannot be judged yet (see the
	// package doc): the transport must bring them again.
	Waiting int
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
	res, err := g.admit(ctx, src, shard, lines)
	if err != nil || !slices.ContainsFunc(res.Imported, eventlog.BringsKeys) {
		return res, err
	}
	// Keys arrived: the lines that waited for them are judged again.
	if _, err := g.again(ctx, true); err != nil {
		return res, err
	}
	return res, nil
}

// admit is Admit without judging again the lines that wait.
func (g *Gate) admit(ctx context.Context, src Source, shard string, lines [][]byte) (*Result, error) {
	res := &Result{}
	lacked, err := g.log.Lacks(shard, lines)
	if err != nil {
		return nil, fmt.Errorf("admit: %w", err)
	}
	now := eventlog.FormatTime(g.opts.Now())
	var evs []*eventlog.Event
	var evLines [][]byte
	for _, line := range lacked {
		e, reason := g.check(shard, line)
		if reason != "" {
			res.Refused = append(res.Refused, newRefusal(now, src, shard, line, reason))
			continue
		}
		evs, evLines = append(evs, e), append(evLines, line)
	}
	ok := evLines
	var waiting []Refusal
	if g.opts.Judge != nil && len(evs) > 0 {
		vs, err := g.opts.Judge(ctx, shard, evs)
		if err != nil {
			return nil, fmt.Errorf("admit %s: %w", src.File, err)
		}
		if len(vs) != len(evs) {
			return nil, fmt.Errorf("admit %s: the judge gave %d verdicts on %d events", src.File, len(vs), len(evs))
		}
		ok = nil
		for i, v := range vs {
			switch {
			case v.Refuse != "":
				res.Refused = append(res.Refused, newRefusal(now, src, shard, evLines[i], v.Refuse))
			case v.Wait != "":
				waiting = append(waiting, newWait(now, src, shard, evLines[i], v.Wait))
			default:
				ok = append(ok, evLines[i])
			}
		}
	}
	res.Waiting = len(waiting)
	if err := g.quarantine(src, append(res.Refused[:len(res.Refused):len(res.Refused)], waiting...)); err != nil {
		return nil, err
	}
	if len(ok) > 0 {
		if res.Imported, err = g.log.Import(ctx, shard, ok); err != nil {
			return res, fmt.Errorf("admit %s: import: %w", src.File, err)
		}
	}
	// Held: found in the shard before judging, or brought meanwhile by
	// another transport (Import dropped it).
	res.Held = len(lines) - len(res.Imported) - len(res.Refused) - res.Waiting
	return res, nil
}

// check holds a line to the log's own rules: it returns the event, or
// why the line may not enter shard.
func (g *Gate) check(shard string, line []byte) (*eventlog.Event, string) {
	if len(line) > eventlog.MaxLineBytes {
		return nil, fmt.Sprintf("a line of over %d bytes: longer than any event", eventlog.MaxLineBytes)
	}
	e, err := eventlog.DecodeLine(line)
	if err != nil {
		return nil, "not an event: " + err.Error()
	}
	if err := eventlog.CheckShard(shard, e); err != nil {
		return nil, err.Error()
	}
	if err := eventlog.CheckFields(e, g.opts.Now()); err != nil {
		return nil, fmt.Sprintf("a %s in %s: %v", e.Type, eventlog.ShardPath(shard), err)
	}
	return e, ""
}

// Rejudge takes the lines the quarantine holds whole through admission
// again, for when the node's rules changed (the owner trusted a key): it
// imports those admitted now, each once, drops from the quarantine every
// line whose event the log holds now, and returns how many it imported.
// A refused line the quarantine cut to its bound is judged again only
// when a transport brings it again.
func (g *Gate) Rejudge(ctx context.Context) (int, error) { return g.again(ctx, false) }

// again judges the quarantine's whole lines again (only those that wait,
// with waiting), until no more keys arrive.
func (g *Gate) again(ctx context.Context, waiting bool) (int, error) {
	imported := 0
	for range 8 { // a seal may wait for a registration that waited too
		n, keys, err := g.againOnce(ctx, waiting)
		imported += n
		if err != nil || !keys {
			return imported, err
		}
		waiting = true
	}
	return imported, nil
}

// againOnce is one pass of again: it reports whether what it imported
// brought keys.
func (g *Gate) againOnce(ctx context.Context, waiting bool) (imported int, keys bool, err error) {
	g.mu.Lock()
	if waiting && g.q.waits == 0 {
		g.mu.Unlock()
		return 0, false, nil // nothing waits: the quarantine need not be read
	}
	rs, err := ReadQuarantine(g.log.Dir())
	g.mu.Unlock()
	if err != nil {
		return 0, false, err
	}
	type group struct {
		src   Source
		lines [][]byte
	}
	var order []string
	groups := map[string]*group{}
	for _, r := range rs {
		shard, ok := r.shard()
		if !ok || r.EventID == "" || len(r.Line) != r.Bytes || waiting && !r.Wait {
			continue
		}
		gr := groups[shard]
		if gr == nil {
			gr = &group{src: Source{File: r.File, Commit: r.Commit}}
			groups[shard] = gr
			order = append(order, shard)
		}
		gr.lines = append(gr.lines, []byte(r.Line))
	}
	// The shared shard first: registrations come from there.
	sort.SliceStable(order, func(i, j int) bool { return order[i] == "" && order[j] != "" })
	for _, shard := range order {
		gr := groups[shard]
		res, err := g.admit(ctx, gr.src, shard, gr.lines)
		if err != nil {
			return imported, keys, err
		}
		imported += len(res.Imported)
		keys = keys || slices.ContainsFunc(res.Imported, eventlog.BringsKeys)
		lacked, err := g.log.Lacks(shard, gr.lines)
		if err != nil {
			return imported, keys, err
		}
		held := map[string]bool{} // in the log now, however they came
		for _, l := range gr.lines {
			held[eventlog.LineID(l)] = true
		}
		for _, l := range lacked {
			delete(held, eventlog.LineID(l))
		}
		refused := map[string]Refusal{}
		for _, r := range res.Refused {
			refused[r.EventID] = r
		}
		g.mu.Lock()
		err = g.q.settle(held, refused)
		g.mu.Unlock()
		if err != nil {
			return imported, keys, err
		}
	}
	return imported, keys, nil
}

// RefuseFile quarantines a whole file a transport found where the log
// keeps none of its own (a symbolic link, a path outside the log, the
// local shard), so that it is reported like a refused line; nothing of
// it is read. It is kept once per file and reason.
func (g *Gate) RefuseFile(src Source, reason string) error {
	r := newRefusal(eventlog.FormatTime(g.opts.Now()), src, "", []byte("file "+src.File+": "+reason), reason)
	r.Shard = nil
	r.Line, r.Bytes = "", 0
	return g.quarantine(src, []Refusal{r})
}

// Refusals returns how many lines the quarantine holds refused (those
// earlier Gates kept included, and those refused past its bound this
// process) and why, by source file and reason, the most recent first
// (at most MaxRefusalGroups). Lines that wait are not among them
// (Waiting).
func (g *Gate) Refusals() (int, []RefusalCount) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.q.total, g.q.counts(MaxRefusalGroups)
}

// Waiting returns how many lines the quarantine holds that wait: they
// could not be judged yet, and are judged again when keys arrive.
func (g *Gate) Waiting() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.q.waits
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
