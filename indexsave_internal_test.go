package thrum

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/thrumhq/thrum/internal/msgindex"
	"github.com/thrumhq/thrum/rpc"
)

// fastIndexSaves makes nodes opened during the test check every 5 ms
// whether to save their message index, and save it past 10 events.
func fastIndexSaves(t *testing.T) {
	was := indexSavePolicy
	t.Cleanup(func() { indexSavePolicy = was })
	indexSavePolicy = msgindex.SavePolicy{Min: 10, Age: time.Hour, Check: 5 * time.Millisecond}
}

// A running node saves its message index as the log grows, without a
// Close: a start after a crash then replays only the log past it.
func TestIndexSavedWhileRunning(t *testing.T) {
	fastIndexSaves(t)

	ctx := context.Background()
	dir := t.TempDir()
	n, err := Open(ctx, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	snap := n.indexSnapshot()
	waitSaved := func(want uint64) {
		t.Helper()
		for i := 0; ; i++ {
			unsaved, onDisk := n.idx.Unsaved()
			if onDisk && unsaved <= want {
				break
			}
			if i == 1000 {
				t.Fatalf("the index was not saved while running: %d events unsaved (a snapshot on disk: %v)", unsaved, onDisk)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitSaved(2) // built from the (empty) projection: saved at once (the machine ID and the everyone group may come after)
	before, err := os.Stat(snap)
	if err != nil {
		t.Fatalf("no snapshot after the build: %v", err)
	}
	if _, err := n.RegisterAgent(ctx, &rpc.RegisterAgentParams{Name: "ann", Role: "planner", Module: "m"}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.StartSession(ctx, &rpc.StartSessionParams{AgentID: "ann"}); err != nil {
		t.Fatal(err)
	}
	// Every event counts (a start after a crash replays them all), not
	// only messages: up to 9, under the threshold, nothing is saved.
	base, _ := n.idx.Unsaved()
	for i := base; i < 9; i++ {
		if _, err := n.SendMessage(AsAgent(ctx, "ann"), &rpc.SendMessageParams{Content: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(50 * time.Millisecond)
	if got, _ := n.idx.Unsaved(); got != 9 {
		t.Fatalf("%d events unsaved under a threshold of 10, want 9 (%d before the sends)", got, base)
	}
	if _, err := n.SendMessage(AsAgent(ctx, "ann"), &rpc.SendMessageParams{Content: "10th"}); err != nil {
		t.Fatal(err)
	}
	waitSaved(0)
	after, err := os.Stat(snap)
	if err != nil || after.Size() <= before.Size() {
		t.Fatalf("the snapshot did not grow with 10 messages: %v → %v (%v)", before.Size(), after, err)
	}
}

// The save policy promises that a start after a crash replays at most
// SavePolicy.Min events (or Age's worth) of the log past the
// snapshot. Load replays every event past the snapshot's positions, of
// any type, so every event must count toward the next save, not only
// message events: a node that logs only heartbeats, session starts,
// agent updates and the like must still move its snapshot forward.
func TestIndexSavedAfterNonMessageEvents(t *testing.T) {
	fastIndexSaves(t)

	ctx := context.Background()
	n, err := Open(ctx, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if _, err := n.RegisterAgent(ctx, &rpc.RegisterAgentParams{Name: "ann", Role: "planner", Module: "m"}); err != nil {
		t.Fatal(err)
	}
	ses, err := n.StartSession(ctx, &rpc.StartSessionParams{AgentID: "ann"})
	if err != nil {
		t.Fatal(err)
	}
	snap := n.indexSnapshot()
	for i := 0; ; i++ { // the save after the build
		if _, onDisk := n.idx.Unsaved(); onDisk {
			if _, err := os.Stat(snap); err == nil {
				break
			}
		}
		if i == 1000 {
			t.Fatal("the index was not saved after its build")
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // let a save in flight finish
	before, err := os.ReadFile(snap)
	if err != nil {
		t.Fatal(err)
	}
	for range 30 { // three times the threshold
		if _, err := n.Heartbeat(ctx, &rpc.HeartbeatParams{SessionID: ses.SessionID}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; ; i++ {
		after, err := os.ReadFile(snap)
		if err == nil && !bytes.Equal(after, before) {
			return // saved: its positions moved past the heartbeats
		}
		if i == 100 {
			unsaved, onDisk := n.idx.Unsaved()
			t.Fatalf("30 heartbeats past the snapshot under a threshold of 10 events, and it was not saved (Unsaved() = %d, %v): a start after a crash replays them all", unsaved, onDisk)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
