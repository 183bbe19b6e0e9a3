package thrum_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/rpc"
)

// appRecords is an embedder's read model of its own events.
type appRecords struct {
	mu   sync.Mutex
	seen map[string]bool
	got  []string // "type:note", in log order
}

func (r *appRecords) Apply(_ context.Context, batch []*eventlog.Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range batch {
		if e.Type != "app.test.note" || r.seen[e.ID] {
			continue
		}
		var p struct{ Note string }
		if err := e.Decode(&p); err != nil {
			return err
		}
		r.seen[e.ID] = true
		r.got = append(r.got, p.Note)
	}
	return nil
}

func (r *appRecords) notes() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.got...)
}

// TestAppendEvent: an application event is durable, seen by the
// embedder's projection when AppendEvent returns and again on replay,
// ignored by thrum's own read models (Verify finds the log and the
// projection equal), and a type outside the application namespace or a
// payload that would overwrite the envelope is refused.
func TestAppendEvent(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	recs := &appRecords{seen: map[string]bool{}}
	n, _ := newFromParts(t, dir, "messages.db", recs)

	e, err := n.AppendEvent(ctx, "app.test.note", map[string]string{"note": "first"})
	if err != nil {
		t.Fatal(err)
	}
	if e.ID == "" || e.Time.IsZero() {
		t.Fatalf("event not assigned an ID and time: %+v", e)
	}
	if got := recs.notes(); len(got) != 1 || got[0] != "first" {
		t.Fatalf("projection after AppendEvent: %q, want [first]", got)
	}
	if _, err := n.RegisterAgent(ctx, &rpc.RegisterAgentParams{Name: "alice", Role: "dev", Module: "core"}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.AppendEvent(ctx, "app.test.note", struct {
		Note string `json:"note"`
	}{"second"}); err != nil {
		t.Fatal(err)
	}

	for _, bad := range []struct {
		typ     string
		payload any
	}{
		{"message.create", map[string]string{"note": "x"}},
		{"app.", map[string]string{"note": "x"}},
		{"app", map[string]string{"note": "x"}},
		{"app.has space", map[string]string{"note": "x"}},
		{"app.test.note", []string{"not", "an", "object"}},
		{"app.test.note", nil},
		{"app.test.note", map[string]string{"type": "agent.register"}},
		{"app.test.note", map[string]string{"event_id": "01J"}},
		{"app.test.note", make(chan int)},
	} {
		if _, err := n.AppendEvent(ctx, bad.typ, bad.payload); !errors.Is(err, thrum.ErrInvalidParams) {
			t.Errorf("AppendEvent(%q, %#v) = %v, want ErrInvalidParams", bad.typ, bad.payload, err)
		}
	}
	rep, err := n.Verify(ctx)
	if err != nil || !rep.OK() {
		t.Fatalf("Verify: %v %+v", err, rep)
	}
	if rep.Events < 4 { // everyone group, two notes, alice
		t.Fatalf("Verify read %d events, want at least 4", rep.Events)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}

	// Reopened, a fresh projection replays the log: both notes, in order,
	// and none of the refused ones.
	again := &appRecords{seen: map[string]bool{}}
	n, _ = newFromParts(t, dir, "messages.db", again)
	defer n.Close()
	if got := again.notes(); len(got) != 2 || got[0] != "first" || got[1] != "second" {
		t.Fatalf("replayed notes: %q, want [first second]", got)
	}
}
