package main

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/thrumhq/thrum/internal/thrumtest"
)

// TestSendToRecipientOfAnotherClone: bob registered on
// clone b and b pushed; clone a has not synced since. `thrum send --to
// @bob` on a fetches and merges first and then delivers, with no `thrum
// sync force`; a name nobody has still gets the clear error.
func TestSendToRecipientOfAnotherClone(t *testing.T) {
	t.Parallel()
	thrumBin := thrumtest.Binary(t)
	remote := thrumtest.GitRemote(t)
	dirA, dirB := remote.Clone("a"), remote.Clone("b")

	a := &syncCLI{thrumCLI: &thrumCLI{t: t, repo: dirA, bin: thrumBin}, name: "a"}
	b := &syncCLI{thrumCLI: &thrumCLI{t: t, repo: dirB, bin: thrumBin}, name: "b"}
	// Rounds only when forced or on local events; the wait for an unknown
	// recipient is generous so that a busy machine cannot fail the test
	// (it ends as soon as the round does).
	for _, c := range []*syncCLI{a, b} {
		c.do("", "init")
		c.startDaemon("--sync-interval", "1h", "--sync-wait", "20s")
	}
	a.do("", "quickstart", "--name", "alice", "--role", "implementer", "--module", "auth")
	a.forceSync()
	b.do("", "quickstart", "--name", "bob", "--role", "reviewer", "--module", "auth")
	b.forceSync()
	if !strings.Contains(thrumtest.Git(t, remote.Path, "show", "a-sync:events.jsonl"), `"agent_id":"bob"`) {
		t.Fatal("bob's registration is not on the remote after sync force --wait in b")
	}
	var al map[string]any
	a.json(&al, "", "agent", "list")
	for _, ag := range al["agents"].([]any) {
		if str(ag, "agent_id") == "bob" {
			t.Fatal("a knows bob before the send: the test proves nothing")
		}
	}

	start := time.Now()
	var sent map[string]any
	a.json(&sent, "alice", "send", "Hello from a", "--to", "@bob")
	t.Logf("send to a recipient of another clone took %v", time.Since(start).Round(time.Millisecond))
	if !strings.HasPrefix(str(sent, "message_id"), "msg_") {
		t.Fatalf("send --json = %v", sent)
	}
	r := a.withEnv(map[string]string{"THRUM_NAME": "alice", "GIT_CONFIG_GLOBAL": os.DevNull, "GIT_CONFIG_NOSYSTEM": "1"}, "send", "anyone?", "--to", "@nobody")
	if r.code == 0 || !strings.Contains(r.stderr, "unknown recipient @nobody") {
		t.Fatalf("send to a name nobody has:\n%s", r)
	}
}
