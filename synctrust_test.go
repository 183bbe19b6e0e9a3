package thrum_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/identity"
	"github.com/thrumhq/thrum/internal/thrumtest"
	"github.com/thrumhq/thrum/rpc"
)

// TestOldLogCredentials opens a log written before credentials were
// local (token hashes in events.jsonl). It opens; the tokens this
// machine's identity files hold, which events.jsonl gave their agents and
// did not revoke since, keep authenticating (through credentials in the
// local shard); no other token from events.jsonl does. Reopened, and
// rebuilt from the log, the answers are the same; the agents whose
// tokens stopped register again for new ones.
func TestOldLogCredentials(t *testing.T) {
	t.Parallel()
	dir, ids := t.TempDir(), t.TempDir()
	db := filepath.Join(t.TempDir(), "m.db")
	tok := map[string]string{}
	for _, k := range []string{"alice", "bob", "carol-old", "carol", "dave", "erin"} {
		tok[k] = identity.NewToken()
	}
	reg := func(id, token string, revoke bool) string {
		return thrumtest.EventLine(t, eventlog.TypeAgentRegister, map[string]any{"agent_id": id, "kind": "agent", "name": id,
			"role": "implementer", "module": "m", "token_hash": identity.HashToken(token), "revoke_tokens": revoke})
	}
	lines := []string{
		reg("alice", tok["alice"], false),     // held in alice's file: kept
		reg("bob", tok["bob"], false),         // in no file: dropped
		reg("carol", tok["carol-old"], false), // in carol's file, then revoked: dropped
		reg("carol", tok["carol"], true),
		reg("erin", tok["erin"], false), // held, but erin was deleted since: dropped
		thrumtest.EventLine(t, eventlog.TypeAgentCleanup, map[string]any{"agent_id": "erin", "reason": "deleted"}),
	}
	if err := os.WriteFile(filepath.Join(dir, eventlog.EventsFile), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, token := range map[string]string{"alice": tok["alice"], "carol": tok["carol-old"], "dave": tok["dave"], "erin": tok["erin"]} {
		if err := identity.Save(ids, &identity.File{Name: name, AgentID: name, Role: "implementer", Module: "m", Token: token}); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	open := func() *thrum.Node {
		t.Helper()
		n, err := thrum.Open(ctx, dir, &thrum.Options{DBPath: db, NoSync: true, IdentityDir: ids})
		if err != nil {
			t.Fatalf("open a log from before local credentials: %v", err)
		}
		return n
	}
	check := func(n *thrum.Node, when string) {
		t.Helper()
		for k, token := range tok {
			id, err := n.Authenticate(ctx, token)
			if k == "alice" {
				if err != nil || id != "alice" {
					t.Errorf("%s: alice's token from her identity file: %q, %v", when, id, err)
				}
			} else if err == nil {
				t.Errorf("%s: the %s token from events.jsonl authenticates as %s", when, k, id)
			}
		}
	}
	n := open()
	check(n, "first open")
	r, err := n.RegisterAgent(ctx, &rpc.RegisterAgentParams{Name: "bob", Role: "implementer", Module: "m"})
	if err != nil || r.Status != "updated" {
		t.Fatalf("register bob again: %+v %v", r, err)
	}
	if id, err := n.Authenticate(ctx, r.Token); err != nil || id != "bob" {
		t.Errorf("bob's new token: %q, %v", id, err)
	}
	n.Close()
	n = open()
	check(n, "reopened")
	n.Close()
	for _, f := range []string{db, db + "-wal", db + "-shm"} {
		os.Remove(f)
	}
	n = open()
	defer n.Close()
	check(n, "rebuilt")
}

// TestVerifyReportsMisplacedEvents: a log that holds events where they do
// not belong (as a sync before authorship was checked could take them
// from the remote: a message of alice in bob's shard, a credential in
// events.jsonl) opens, and Verify (thrum doctor) names each one.
func TestVerifyReportsMisplacedEvents(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(rel string, lines ...string) {
		t.Helper()
		path := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(eventlog.EventsFile,
		thrumtest.EventLine(t, eventlog.TypeAgentRegister, map[string]any{"agent_id": "alice", "kind": "agent", "name": "alice", "role": "dev", "module": "m"}),
		thrumtest.EventLine(t, eventlog.TypeCredentialAdd, map[string]any{"agent_id": "alice", "token_hash": identity.HashToken(identity.NewToken())}))
	write(eventlog.ShardPath("alice"), thrumtest.EventLine(t, eventlog.TypeMessageCreate, map[string]any{"message_id": "msg_1", "agent_id": "alice",
		"session_id": "s", "format": "markdown", "content": "mine", "priority": "normal"}))
	write(eventlog.ShardPath("bob"), thrumtest.EventLine(t, eventlog.TypeMessageCreate, map[string]any{"message_id": "msg_2", "agent_id": "alice",
		"session_id": "s", "format": "markdown", "content": "not bob's", "priority": "normal"}))
	n, err := thrum.Open(context.Background(), dir, &thrum.Options{DBPath: filepath.Join(t.TempDir(), "m.db"), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	rep, err := n.Verify(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range rep.Problems {
		got = append(got, p.String())
	}
	want := []string{
		"events.jsonl:2: a credential.add in events.jsonl: credentials belong in the local shard, local.jsonl",
		`messages/bob.jsonl:1: a message.create by "alice" in messages/bob.jsonl: an agent's shard holds only its own events`,
	}
	if len(got) != len(want) {
		t.Fatalf("Verify problems:\n%s\nwant %d", strings.Join(got, "\n"), len(want))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("problem %d = %q, want it to start %q", i, got[i], want[i])
		}
	}
}
