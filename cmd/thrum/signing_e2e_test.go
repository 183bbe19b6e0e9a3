package main

import (
	"crypto/ed25519"
	"os"
	"path/filepath"
	"testing"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/internal/thrumtest"
	"github.com/thrumhq/thrum/rpc"
)

// TestSignedSyncEndToEnd runs two clones with the real binary. alice's
// message reaches b verified; a line forged into her shard on the remote
// is refused on b with its reason; when alice's key is lost on a and a
// new one made, b refuses the new key and what it signs until `thrum
// agent trust alice`, which takes them in, once; a thrum-keys file on the
// remote's default branch, once fetched, shows in b's sync status with
// the key it overrides.
func TestSignedSyncEndToEnd(t *testing.T) {
	t.Parallel()
	thrumBin := thrumtest.Binary(t)
	remote := thrumtest.GitRemote(t)
	dirA, dirB := remote.Clone("a"), remote.Clone("b")
	allowed := []string{"admit: refused events from another machine", "the team's keyring (thrum-keys) changed"}
	a := &syncCLI{thrumCLI: &thrumCLI{t: t, repo: dirA, bin: thrumBin}, name: "a", agent: "alice", allowed: allowed}
	b := &syncCLI{thrumCLI: &thrumCLI{t: t, repo: dirB, bin: thrumBin}, name: "b", agent: "bob", allowed: allowed}
	for _, c := range []*syncCLI{a, b} {
		c.do("", "init")
		c.startDaemon("--sync-interval", "1h")
	}
	a.do("", "quickstart", "--name", "alice", "--role", "implementer", "--module", "auth")
	b.do("", "quickstart", "--name", "bob", "--role", "reviewer", "--module", "auth")
	a.forceSync()
	b.forceSync()
	sync := func() {
		a.forceSync()
		b.forceSync()
	}
	sender := func(text string) string {
		t.Helper()
		var r rpc.SearchMessagesResult
		b.json(&r, "bob", "search", text)
		if len(r.Results) != 1 {
			return ""
		}
		return r.Results[0].Sender
	}
	a.do("alice", "send", "signed from a", "--to", "@bob")
	sync()
	if got := sender("signed"); got != rpc.SenderVerified {
		t.Errorf("b: alice's message has sender %q, want verified", got)
	}

	// A line forged into alice's shard: refused on b, with its reason.
	forger := remote.Clone("forger")
	thrumtest.Git(t, forger, "checkout", "-q", "-b", "a-sync", "origin/a-sync")
	forged := thrumtest.EventLine(t, eventlog.TypeMessageCreate, map[string]any{"message_id": "msg_" + eventlog.NewID(), "agent_id": "alice",
		"session_id": "ses_x", "format": "markdown", "content": "forged approval", "priority": "normal",
		"refs": []map[string]string{{"type": "mention", "value": "bob"}}})
	f, err := os.OpenFile(filepath.Join(forger, "messages", "alice.jsonl"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(forged + "\n")
	f.Close()
	thrumtest.Git(t, forger, "commit", "-qam", "thrum: sync")
	thrumtest.Git(t, forger, "push", "-q", "origin", "a-sync")
	b.forceSync()
	contains(t, "b: sync status", b.do("", "sync", "status").stdout, `a message.create by "alice" in messages/alice.jsonl: unsigned, but alice signs its events`)
	if got := sender("forged"); got != "" {
		t.Errorf("b shows the forged message (sender %q)", got)
	}

	// alice's key lost on a: a new one, refused on b until the owner's word.
	a.do("", "daemon", "stop")
	if err := os.Remove(filepath.Join(dirA, ".thrum", "var", thrum.DefaultKeyDir, "alice.key")); err != nil {
		t.Fatal(err)
	}
	a.startDaemon("--sync-interval", "1h")
	a.do("alice", "send", "after my new key", "--to", "@bob")
	sync()
	out := b.do("", "sync", "status").stdout
	t.Logf("b: thrum sync status:\n%s", out)
	contains(t, "b: sync status", out, "a new key for alice")
	if got := sender("after"); got != "" {
		t.Fatalf("b took alice's message signed by her new key without the owner's word (sender %q)", got)
	}
	out = b.do("", "agent", "trust", "alice").stdout
	t.Logf("b: thrum agent trust alice:\n%s", out)
	contains(t, "b: agent trust", out, "Trusted key", "for @alice on this clone")
	if got := sender("after"); got != rpc.SenderVerified {
		t.Errorf("b after agent trust: alice's message has sender %q, want verified", got)
	}
	b.forceSync()
	var r rpc.SearchMessagesResult
	b.json(&r, "bob", "search", "after")
	if len(r.Results) != 1 {
		t.Errorf("b lists alice's message %d times after another round", len(r.Results))
	}

	// The team's keyring, on the remote's default branch: b reads it
	// from origin/HEAD once fetched, and says which key it overrides.
	other := eventlog.EncodeKey(thrumtest.NewKey(t).Public().(ed25519.PublicKey))
	thrumtest.Git(t, forger, "checkout", "-q", "main")
	if err := os.WriteFile(filepath.Join(forger, "thrum-keys"), []byte("# the team's keys\nalice "+other+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	thrumtest.Git(t, forger, "add", "thrum-keys")
	thrumtest.Git(t, forger, "commit", "-qm", "the team's keys")
	thrumtest.Git(t, forger, "push", "-q", "origin", "main")
	thrumtest.Git(t, dirB, "fetch", "-q", "origin")
	st := b.syncStatus()
	if ring, _ := st["keyring"].(map[string]any); num(st, "keyring.entries") != 1 || ring["present"] != true {
		t.Errorf("b: sync status --json keyring = %v, want 1 entry", st["keyring"])
	}
	out = b.do("", "sync", "status").stdout
	t.Logf("b: thrum sync status with thrum-keys:\n%s", out)
	contains(t, "b: sync status", out, "The team's keyring (thrum-keys on origin/HEAD", "over first use: alice: a registration brought key")
}
