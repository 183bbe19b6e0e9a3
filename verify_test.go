package thrum_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/internal/thrumtest"
	"github.com/thrumhq/thrum/rpc"
)

// TestVerifyFindsWhatAStartDoesNot damages a message shard by hand: a
// same-length overwrite before the checkpoint, which a start cannot notice
// and Verify finds by line; then a garbage line, which stops the start
// naming that line, and which VerifyLog lists.
func TestVerifyFindsWhatAStartDoesNot(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	n := thrumtest.OpenNodeIn(t, dir, &thrum.Options{NoSync: true})
	thrumtest.Register(t, n, "alice", "dev", "m")
	for _, c := range []string{"hello one", "hello two", "hello three"} {
		if _, err := n.SendMessage(thrum.AsAgent(ctx, "alice"), &rpc.SendMessageParams{Content: c}); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := n.Verify(ctx)
	if err != nil || !rep.OK() || rep.Events < 5 {
		t.Fatalf("Verify of a sound node: %+v %v", rep, err)
	}
	n.Close()

	shard := filepath.Join(dir, "messages", "alice.jsonl")
	b, err := os.ReadFile(shard)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(shard, []byte(strings.Replace(string(b), "hello two", "jello two", 1)), 0o644)
	n, err = thrum.Open(context.Background(), dir, &thrum.Options{NoSync: true})
	if err != nil {
		t.Fatalf("a same-length overwrite before the checkpoint stopped the start: %v", err)
	}
	rep, err = n.Verify(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Problems) != 1 {
		t.Fatalf("Verify found %d problems, want 1: %v", len(rep.Problems), rep.Problems)
	}
	p := rep.Problems[0]
	if p.File != "messages/alice.jsonl" || p.Line != 2 || !strings.Contains(p.Message, "jello two") || !strings.Contains(p.Message, "hello two") {
		t.Fatalf("problem = %s, want messages/alice.jsonl:2 naming both contents", p)
	}
	n.Close()

	lines := strings.SplitAfter(string(b), "\n")
	os.WriteFile(shard, []byte(lines[0]+"garbage\n"+strings.Join(lines[1:], "")), 0o644)
	_, err = thrum.Open(context.Background(), dir, &thrum.Options{NoSync: true})
	if err == nil || !strings.Contains(err.Error(), "messages/alice.jsonl:2:") {
		t.Fatalf("start with a garbage line 2 = %v, want it named", err)
	}
	rep, err = thrum.VerifyLog(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Problems) != 1 || rep.Problems[0].File != "messages/alice.jsonl" || rep.Problems[0].Line != 2 {
		t.Fatalf("VerifyLog = %+v, want the garbage at messages/alice.jsonl:2", rep.Problems)
	}
}
