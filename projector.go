package thrum

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/internal/directory"
	"github.com/thrumhq/thrum/internal/msgindex"
	"github.com/thrumhq/thrum/store"
)

// A Projection is a read model that a Projector keeps current: Apply gets
// every committed batch of the log, in log order, after the store has
// applied it. Apply must be idempotent: a batch that failed to apply
// anywhere is applied again, with anything committed after it, until
// every projection takes it (see "Durability and storage faults" in
// DESIGN.md); while it fails, the node refuses writes. Read a payload
// with eventlog.PayloadAs: the log has decoded it once for every
// projection. A *store.Store is a Projection.
type Projection interface {
	Apply(ctx context.Context, batch []*eventlog.Event) error
}

// A Projector applies the batches the event log commits to a node's read
// models, in log order and once each: the SQLite store, the projections
// an embedder adds, then the node's in-memory message index and
// directory, and finally its notifier, which wakes subscribers. Give its
// Stage to the log as eventlog.Options.Stage (or its Commit as OnCommit,
// which applies a batch only after it is durable instead of while it is
// fsynced), and both to New.
//
// A batch that is durable in the log but fails to apply stays pending:
// the next commit, or a retry, applies the pending events first, in the
// same call as anything newer, so no projection's checkpoint passes an
// event it has not applied.
type Projector struct {
	store *store.Store
	extra []Projection
	idx   *msgindex.Index
	dirc  *directory.Directory

	// n is the node the Projector serves, set by New: its caches and
	// notifier run after each applied batch, and it shapes the error of
	// a failed apply.
	n atomic.Pointer[Node]

	mu       sync.Mutex        // serializes applying batches
	pending  []*eventlog.Event // durable, not applied, in log order
	applyErr error             // why pending is not applied
	behind   atomic.Bool       // pending is not empty
	// sealedWait: some message's body waits for a team key. The message
	// index counts such a message unread; the projection does not (it is
	// nobody's to claim yet), so listings ask the projection meanwhile
	// (Node.messages). Set before a batch holding one is applied, and
	// from the projection at open and after a key opens messages.
	sealedWait atomic.Bool
	kick       chan struct{} // a retry is wanted
}

// NewProjector returns the Projector of the store st and the extra
// projections, which it applies in order after st.
func NewProjector(st *store.Store, extra ...Projection) *Projector {
	return &Projector{
		store: st,
		extra: extra,
		idx:   msgindex.New(),
		dirc:  &directory.Directory{},
		kick:  make(chan struct{}, 1),
	}
}

// retry tries once to apply the pending events; it reports whether none
// are left.
func (p *Projector) retry() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.pending) == 0 {
		return true
	}
	evs := p.pending
	if err := p.apply(context.Background(), evs); err != nil {
		p.applyErr = err
		return false
	}
	if lg := p.logger(); lg != nil {
		lg.Info("thrum: applied the events that had failed to apply; writes resume", "events", len(evs))
	}
	p.pending, p.applyErr = nil, nil
	p.behind.Store(false)
	p.inMemory(evs)
	return true
}

// failure returns why committed events wait to be applied and how many
// do, or nil.
func (p *Projector) failure() (pending int, err error) {
	if !p.behind.Load() {
		return 0, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.pending), p.applyErr
}

// replayExtra applies the whole log to the extra projections, in
// batches: they are kept from the start of the log, not from the store's
// checkpoint.
func (p *Projector) replayExtra(ctx context.Context, lg *eventlog.Log) error {
	if len(p.extra) == 0 {
		return nil
	}
	batch := make([]*eventlog.Event, 0, store.DefaultRebuildBatch)
	flush := func() error {
		for _, x := range p.extra {
			if err := x.Apply(ctx, batch); err != nil {
				return fmt.Errorf("projection %T: %w", x, err)
			}
		}
		batch = batch[:0]
		return nil
	}
	if _, err := lg.Scan(ctx, nil, func(e *eventlog.Event) error {
		e.Raw = append([]byte(nil), e.Raw...) // Scan reuses it; a projection may keep the event
		batch = append(batch, e)
		if len(batch) == cap(batch) {
			return flush()
		}
		return nil
	}); err != nil {
		return err
	}
	return flush()
}

// changesDirectory reports whether e changes who the agents and groups
// are, so the in-memory directory must be reloaded.
func changesDirectory(e *eventlog.Event) bool {
	switch e.Type {
	case eventlog.TypeAgentRegister, eventlog.TypeAgentUpdate, eventlog.TypeAgentCleanup:
		return true
	}
	return strings.HasPrefix(e.Type, "group.")
}

func (p *Projector) logger() *slog.Logger {
	if n := p.n.Load(); n != nil {
		return n.opts.Logger
	}
	return nil
}
