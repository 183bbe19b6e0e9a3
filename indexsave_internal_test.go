package thrum

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/thrumhq/thrum/rpc"
)

// A running node saves its message index as the log grows, without a
// Close: a start after a crash then replays only the log past it.
func TestIndexSavedWhileRunning(t *testing.T) {
	defer func(check, age time.Duration, least int) {
		indexSaveCheck, indexSaveAge, indexSaveMin = check, age, least
	}(indexSaveCheck, indexSaveAge, indexSaveMin)
	indexSaveCheck, indexSaveAge, indexSaveMin = 5*time.Millisecond, time.Hour, 10

	ctx := context.Background()
	dir := t.TempDir()
	n, err := Open(ctx, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if _, err := n.RegisterAgent(ctx, &rpc.RegisterAgentParams{Name: "ann", Role: "planner", Module: "m"}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.StartSession(ctx, &rpc.StartSessionParams{AgentID: "ann"}); err != nil {
		t.Fatal(err)
	}
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
	waitSaved(0) // built from the (empty) projection: saved at once
	before, err := os.Stat(snap)
	if err != nil {
		t.Fatalf("no snapshot after the build: %v", err)
	}
	for i := range 9 { // under the threshold: not saved for it
		if _, err := n.SendMessage(AsAgent(ctx, "ann"), &rpc.SendMessageParams{Content: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(50 * time.Millisecond)
	if got, _ := n.idx.Unsaved(); got != 9 {
		t.Fatalf("%d events unsaved after 9 sends under a threshold of 10, want 9", got)
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
