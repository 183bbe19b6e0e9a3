package thrum_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/eventlog/admit"
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

// TestVerifyListsEventsThatBreakTheFieldRules: a log that holds what an
// older thrum took from a remote (a read whose via is a script, an
// acknowledgement dated years before its message, a 20,000-character
// thread ID) opens and rebuilds as it stands, and Verify (thrum doctor)
// names each line.
func TestVerifyListsEventsThatBreakTheFieldRules(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, eventlog.MessagesDir), 0o700); err != nil {
		t.Fatal(err)
	}
	lines := []string{
		thrumtest.EventLine(t, eventlog.TypeMessageCreate, map[string]any{"message_id": "msg_1", "agent_id": "bob",
			"session_id": "s", "format": "markdown", "content": "hi", "priority": "normal", "thread_id": strings.Repeat("x", 20000)}),
		thrumtest.EventLine(t, eventlog.TypeMessageRead, map[string]any{"agent_id": "bob", "session_id": "s", "message_ids": []string{"msg_1"},
			"via": "<script>alert(1)</script>"}),
	}
	if err := os.WriteFile(filepath.Join(dir, eventlog.ShardPath("bob")), []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(t.TempDir(), "m.db")
	for _, when := range []string{"first open", "rebuilt"} {
		n, err := thrum.Open(context.Background(), dir, &thrum.Options{DBPath: db, NoSync: true})
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		rep, err := n.Verify(context.Background())
		n.Close()
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, p := range rep.Problems {
			got = append(got, p.String())
		}
		want := []string{`messages/bob.jsonl:1: a message.create whose thread_id "xxx`, `messages/bob.jsonl:2: a message.read whose via "<script>`}
		if len(got) != len(want) {
			t.Fatalf("%s: Verify problems:\n%s\nwant %d", when, strings.Join(got, "\n"), len(want))
		}
		for i := range want {
			if !strings.HasPrefix(got[i], want[i]) {
				t.Errorf("%s: problem %d = %q, want it to start %q", when, i, got[i], want[i])
			}
		}
		for _, f := range []string{db, db + "-wal", db + "-shm"} {
			os.Remove(f)
		}
	}
}

// A message from a machine whose clock runs ahead is read here before
// its time: the read takes the message's time, so that no machine refuses
// it as dated before its message.
func TestReadOfAMessageDatedAheadTakesItsTime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n, err := thrum.Open(ctx, t.TempDir(), &thrum.Options{DBPath: filepath.Join(t.TempDir(), "m.db"), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if _, err := n.RegisterAgent(ctx, &rpc.RegisterAgentParams{Name: "alice", Role: "dev", Module: "m"}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.StartSession(thrum.AsAgent(ctx, "alice"), &rpc.StartSessionParams{AgentID: "alice"}); err != nil {
		t.Fatal(err)
	}
	ahead := time.Now().Add(2 * time.Hour).UTC()
	line := thrumtest.EventLine(t, eventlog.TypeMessageCreate, map[string]any{"message_id": "msg_ahead", "agent_id": "bob",
		"session_id": "ses_b", "format": "markdown", "content": "from the future", "priority": "normal",
		"refs": []map[string]string{{"type": "mention", "value": "alice"}}, "recipients": []string{"alice"}})
	line = strings.Replace(line, eventlog.FormatTime(time.Now())[:13], eventlog.FormatTime(ahead)[:13], 1)
	res, err := n.Admission().Admit(ctx, admit.Source{File: eventlog.ShardPath("bob")}, "bob", [][]byte{[]byte(line)})
	if err != nil || len(res.Imported) != 1 {
		t.Fatalf("admit a message dated 2 hours ahead: %+v, %v", res, err)
	}
	msgTime := res.Imported[0].Time
	if _, err := n.MarkRead(thrum.AsAgent(ctx, "alice"), &rpc.MarkReadParams{MessageIDs: []string{"msg_ahead"}}); err != nil {
		t.Fatal(err)
	}
	var read *eventlog.Event
	_, err = n.EventLog().Scan(ctx, nil, func(e *eventlog.Event) error {
		if e.Type == eventlog.TypeMessageRead {
			read = e
		}
		return nil
	})
	if err != nil || read == nil {
		t.Fatalf("no message.read in the log (%v)", err)
	}
	if read.Time.Before(msgTime) {
		t.Errorf("the read is dated %s, before its message (%s)", read.Timestamp(), eventlog.FormatTime(msgTime))
	}
}

// The log's enums (what admission and the local API hold events to) are
// the API's.
func TestLogEnumsAreTheAPIs(t *testing.T) {
	if want := []string{rpc.PriorityLow, rpc.PriorityNormal, rpc.PriorityHigh, rpc.PriorityCritical}; !slices.Equal(eventlog.Priorities, want) {
		t.Errorf("eventlog.Priorities = %v, want %v", eventlog.Priorities, want)
	}
	vias := []string{rpc.ViaWaitForMessage, rpc.ViaCheckMessages, rpc.ViaChannel, rpc.ViaHook, rpc.ViaStream, rpc.ViaMarkRead, rpc.ViaReply, rpc.ViaAck}
	if !slices.Equal(eventlog.Vias, vias) {
		t.Errorf("eventlog.Vias = %v, want %v", eventlog.Vias, vias)
	}
}
