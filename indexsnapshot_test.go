package thrum_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/internal/thrumtest"
	"github.com/thrumhq/thrum/rpc"
)

// A node saves its message index when it closes and loads it at the next
// open: listings after a restart equal those before it. A snapshot older
// than the log (here: put back after more messages were sent, as a crash
// leaves the last one saved while running) is loaded too, and the log
// past it applied, so nothing sent since is missing from listings. A
// torn snapshot is refused, and the index built from the projection.
func TestIndexSnapshotAcrossRestarts(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	snap := filepath.Join(dir, thrum.DefaultDBName+".index")

	n := thrumtest.OpenNodeIn(t, dir, nil)
	thrumtest.Register(t, n, "ann", "planner", "m")
	bob := thrumtest.Register(t, n, "bob", "reviewer", "m")
	var sent []string
	for i := range 20 {
		r, err := n.SendMessage(thrum.AsAgent(ctx, "ann"), &rpc.SendMessageParams{Content: fmt.Sprintf("m%d", i), Mentions: []string{"@reviewer"}})
		if err != nil {
			t.Fatal(err)
		}
		sent = append(sent, r.MessageID)
	}
	if _, err := n.MarkRead(thrum.AsAgent(ctx, bob.ID), &rpc.MarkReadParams{MessageIDs: sent[:7]}); err != nil {
		t.Fatal(err)
	}
	list := func(n *thrum.Node) *rpc.ListMessagesResult {
		t.Helper()
		r, err := n.ListMessages(thrum.AsAgent(ctx, bob.ID), &rpc.ListMessagesParams{MentionRole: "reviewer", PageSize: 100})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	before := list(n)
	if before.Total != 20 || before.Unread != 13 {
		t.Fatalf("before: total %d unread %d, want 20 and 13", before.Total, before.Unread)
	}
	// Close saves the index only once it is built (it builds in the
	// background after Open): reopen and wait until it was.
	for i := 0; ; i++ {
		n.Close()
		if _, err := os.Stat(snap); err == nil || i == 100 {
			break
		}
		n = thrumtest.OpenNodeIn(t, dir, nil)
		time.Sleep(20 * time.Millisecond)
	}
	old, err := os.ReadFile(snap)
	if err != nil {
		t.Fatalf("no index snapshot after Close: %v", err)
	}

	n = thrumtest.OpenNodeIn(t, dir, nil)
	if after := list(n); !reflect.DeepEqual(after, before) {
		t.Fatalf("after a restart the listing differs:\nbefore %+v\nafter  %+v", before, after)
	}
	if _, err := n.SendMessage(thrum.AsAgent(ctx, "ann"), &rpc.SendMessageParams{Content: "new", Mentions: []string{"@reviewer"}}); err != nil {
		t.Fatal(err)
	}
	n.Close()

	// The older snapshot, put back: loaded, and the message sent since
	// applied from the log, from the very first listing.
	if err := os.WriteFile(snap, old, 0o600); err != nil {
		t.Fatal(err)
	}
	var logged strings.Builder
	lg := slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelDebug}))
	n = thrumtest.OpenNodeIn(t, dir, &thrum.Options{Logger: lg})
	if r := list(n); r.Total != 21 || r.Unread != 14 {
		t.Fatalf("listing with an older snapshot: total %d unread %d, want 21 and 14", r.Total, r.Unread)
	}
	n.Close()
	if !strings.Contains(logged.String(), "message index loaded") || strings.Contains(logged.String(), "building the message index") {
		t.Fatalf("the older snapshot was not loaded:\n%s", logged.String())
	}

	// A torn snapshot is refused: the index is built from SQLite.
	if err := os.WriteFile(snap, old[:len(old)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	logged.Reset()
	n = thrumtest.OpenNodeIn(t, dir, &thrum.Options{Logger: lg})
	if r := list(n); r.Total != 21 || r.Unread != 14 {
		t.Fatalf("with a torn snapshot: total %d unread %d, want 21 and 14", r.Total, r.Unread)
	}
	n.Close()
	if !strings.Contains(logged.String(), "building the message index") {
		t.Fatalf("a torn snapshot was not refused:\n%s", logged.String())
	}
}

// Warm is closed once listings stop waiting for the node's start: on a
// first open (the index builds from the projection) and on a reopen (it
// loads the snapshot Close saved), after which a listing has what was
// sent before.
func TestNodeWarm(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	warm := func(n *thrum.Node) {
		t.Helper()
		select {
		case <-n.Warm():
		case <-time.After(10 * time.Second):
			t.Fatal("the node is not warm 10 s after Open")
		}
	}
	n := thrumtest.OpenNodeIn(t, dir, nil)
	warm(n)
	thrumtest.Register(t, n, "ann", "planner", "m")
	thrumtest.Register(t, n, "bob", "reviewer", "m")
	if _, err := n.SendMessage(thrum.AsAgent(ctx, "ann"), &rpc.SendMessageParams{Content: "hi", Mentions: []string{"@reviewer"}}); err != nil {
		t.Fatal(err)
	}
	n.Close()

	n = thrumtest.OpenNodeIn(t, dir, nil)
	warm(n)
	r, err := n.ListMessages(thrum.AsAgent(ctx, "bob"), &rpc.ListMessagesParams{MentionRole: "reviewer"})
	if err != nil || r.Total != 1 {
		t.Fatalf("listing after a warm reopen: %+v, %v; want the one message", r, err)
	}
}
