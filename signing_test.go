package thrum_test

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/eventlog/admit"
	"github.com/thrumhq/thrum/identity"
	"github.com/thrumhq/thrum/inbox"
	"github.com/thrumhq/thrum/internal/frame"
	"github.com/thrumhq/thrum/internal/thrumtest"
	"github.com/thrumhq/thrum/rpc"
)

// Machines here are nodes in their own directories that trade lines the
// way a transport does: through the receiving node's Gate, a shard at a
// time, in an order the test chooses.

// shardLines returns a node's lines by shard (the local shard left out:
// it never leaves its machine), in file order.
func shardLines(t *testing.T, n *thrum.Node) map[string][][]byte {
	t.Helper()
	out := map[string][][]byte{}
	_, err := n.EventLog().Scan(context.Background(), nil, func(e *eventlog.Event) error {
		if e.Shard != eventlog.LocalShard {
			out[e.Shard] = append(out[e.Shard], append([]byte(nil), e.Raw...))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// carry hands to's Gate the lines of from's shards, in the order given
// (every shard, events.jsonl first, if none is given), and returns the
// results by shard.
func carry(t *testing.T, from, to *thrum.Node, shards ...string) map[string]*admit.Result {
	t.Helper()
	lines := shardLines(t, from)
	if len(shards) == 0 {
		for s := range lines {
			shards = append(shards, s)
		}
		slices.Sort(shards) // "" (events.jsonl) first
	}
	out := map[string]*admit.Result{}
	for _, s := range shards {
		res, err := to.Admission().Admit(context.Background(), admit.Source{File: eventlog.ShardPath(s), Commit: "test"}, s, lines[s])
		if err != nil {
			t.Fatalf("admit %s: %v", eventlog.ShardPath(s), err)
		}
		out[s] = res
	}
	return out
}

func send(t *testing.T, n *thrum.Node, from, to, content string) string {
	t.Helper()
	r, err := n.SendMessage(thrum.AsAgent(context.Background(), from), &rpc.SendMessageParams{Content: content, Mentions: []string{"@" + to}})
	if err != nil {
		t.Fatalf("%s sends: %v", from, err)
	}
	return r.MessageID
}

// message returns what message.get says of a message on n (nil if n
// lacks it).
func message(t *testing.T, n *thrum.Node, id string) *rpc.MessageDetail {
	t.Helper()
	r, err := n.GetMessage(context.Background(), &rpc.GetMessageParams{MessageID: id})
	if errors.Is(err, rpc.ErrNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return &r.Message
}

// reasons returns the reason of each line a node's quarantine holds, by
// event ID.
func reasons(t *testing.T, n *thrum.Node) map[string]admit.Refusal {
	t.Helper()
	rs, err := admit.ReadQuarantine(n.Dir())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]admit.Refusal{}
	for _, r := range rs {
		out[r.EventID] = r
	}
	return out
}

// A line written by a node ends in its signature, made with the key its
// author's registration brings, for the node's repository: the log as a
// clone reads it. The registration is signed by the machine, whose ID is
// its key.
func TestEventsAreSignedByTheirAuthorsKey(t *testing.T) {
	t.Parallel()
	a := thrumtest.OpenNode(t, &thrum.Options{NoSync: true, RepoID: "r1"})
	thrumtest.Register(t, a, "alice", "implementer", "core")
	thrumtest.Register(t, a, "bob", "reviewer", "core")
	id := send(t, a, "alice", "everyone", "hello")
	var key, machine string
	for shard, lines := range shardLines(t, a) {
		for _, l := range lines {
			e, err := eventlog.DecodeLine(l)
			if err != nil {
				t.Fatal(err)
			}
			if !eventlog.Signed(l) {
				t.Errorf("an unsigned line in %s: %s", eventlog.ShardPath(shard), l)
			}
			if p, err := eventlog.PayloadAs[eventlog.AgentRegister](e); err == nil && e.Type == eventlog.TypeAgentRegister && p.AgentID == "alice" {
				key, machine = p.Key, p.Machine
				mk, ok := eventlog.MachineKey(machine)
				s, unsigned, _, _ := eventlog.ParseSig(l)
				if !ok || !eventlog.VerifyLine("r1", s, unsigned, mk) {
					t.Errorf("alice's registration is not signed by machine %s, which it names", machine)
				}
			}
		}
	}
	pub, err := eventlog.DecodeKey(key)
	if err != nil {
		t.Fatalf("alice's registration brings no key: %v", err)
	}
	for _, l := range shardLines(t, a)["alice"] {
		s, unsigned, signed, err := eventlog.ParseSig(l)
		if !signed || err != nil || !eventlog.VerifyLine("r1", s, unsigned, pub) {
			t.Errorf("a line of alice's shard is not signed with her key: %s", l)
		}
		if eventlog.VerifyLine("r2", s, unsigned, pub) {
			t.Errorf("a line of alice's verifies for another repository: %s", l)
		}
	}
	if got := message(t, a, id).Sender; got != rpc.SenderLocal {
		t.Errorf("on its own machine alice's message has sender %q, want local", got)
	}
	// The keys are the node's own: 0600 in a 0700 directory.
	for _, f := range []string{"", "alice.key", thrum.MachineKey + ".key"} {
		st, err := os.Stat(filepath.Join(a.Dir(), thrum.DefaultKeyDir, f))
		want := os.FileMode(0o600)
		if f == "" {
			want = 0o700 | os.ModeDir
		}
		if err != nil || st.Mode() != want {
			t.Errorf("key store %q: %v, mode %v; want %v", f, err, st.Mode(), want)
		}
	}
}

// A message carried to a machine where its author is not registered is
// shown there as verified; forgeries in its author's shard are refused,
// each for its reason: unsigned once the author signs, signed by a key
// not the author's, and the author's own line replayed as a new message
// with a changed body. A registration that brings a new key for a known
// identity is refused until the owner's word.
func TestForgeriesInAnAuthorsShardAreRefused(t *testing.T) {
	t.Parallel()
	a := thrumtest.OpenNode(t, &thrum.Options{NoSync: true})
	b := thrumtest.OpenNode(t, &thrum.Options{NoSync: true})
	thrumtest.Register(t, a, "alice", "implementer", "core")
	thrumtest.Register(t, b, "bob", "reviewer", "core")
	real := send(t, a, "alice", "everyone", "the real alice")
	carry(t, a, b)
	if m := message(t, b, real); m == nil || m.Sender != rpc.SenderVerified {
		t.Fatalf("b: alice's message = %+v, want it, verified", m)
	}
	mallory := thrumtest.NewKey(t)
	forged := func(content string) string {
		return thrumtest.EventLine(t, eventlog.TypeMessageCreate, map[string]any{
			"message_id": "msg_" + eventlog.NewID(), "agent_id": "alice", "session_id": "ses_x", "format": "markdown",
			"content": content, "priority": "normal", "refs": []map[string]string{{"type": "mention", "value": "bob"}}})
	}
	realLine := string(shardLines(t, a)["alice"][0])
	replay := strings.Replace(strings.Replace(realLine, "the real alice", "approved: ship it", 1), eventlog.LineID([]byte(realLine)), eventlog.NewID(), 1)
	newKey := thrumtest.SignLine(t, thrumtest.EventLine(t, eventlog.TypeAgentUpdate, map[string]any{
		"agent_id": "alice", "kind": "agent", "name": "alice", "role": "implementer", "module": "core",
		"key": eventlog.EncodeKey(mallory.Public().(ed25519.PublicKey)), "machine": eventlog.MachineID(mallory.Public().(ed25519.PublicKey))}), "", mallory)
	cases := []struct{ name, shard, line, want string }{
		{"unsigned", "alice", forged("unsigned"), "unsigned, but alice signs its events"},
		{"another key", "alice", thrumtest.SignLine(t, forged("signed by mallory"), "", mallory), "this clone does not trust for alice"},
		{"replayed, changed", "alice", replay, "its signature does not verify"},
		{"another repository", "alice", thrumtest.SignLine(t, forged("for another repo"), "other-repo", mallory), "this clone does not trust for alice"},
		{"a new key", "", newKey, "a new key for alice"},
	}
	for _, c := range cases {
		res, err := b.Admission().Admit(context.Background(), admit.Source{File: eventlog.ShardPath(c.shard)}, c.shard, [][]byte{[]byte(c.line)})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Refused) != 1 || !strings.Contains(res.Refused[0].Reason, c.want) {
			t.Errorf("%s: imported %d, refused %+v; want it refused for %q", c.name, len(res.Imported), res.Refused, c.want)
		}
	}
}

// An event whose author's key has not arrived (its registration comes in
// a later call, through another file or transport) waits: it is neither
// imported nor refused, it is kept across a restart, and it is imported,
// once, when the registration is.
func TestAnEventWaitsForItsAuthorsKey(t *testing.T) {
	t.Parallel()
	a := thrumtest.OpenNode(t, &thrum.Options{NoSync: true})
	bDir := t.TempDir()
	b := thrumtest.OpenNodeIn(t, bDir, &thrum.Options{NoSync: true})
	thrumtest.Register(t, a, "alice", "implementer", "core")
	thrumtest.Register(t, b, "bob", "reviewer", "core")
	ids := []string{send(t, a, "alice", "everyone", "one"), send(t, a, "alice", "everyone", "two")}
	res := carry(t, a, b, "alice")["alice"]
	if res.Waiting != len(ids) || len(res.Imported) != 0 || len(res.Refused) != 0 {
		t.Fatalf("alice's shard before her registration: %d imported, %d refused, %d waiting; want %d waiting",
			len(res.Imported), len(res.Refused), res.Waiting, len(ids))
	}
	if got := b.Admission().Waiting(); got != len(ids) {
		t.Errorf("Gate.Waiting = %d, want %d", got, len(ids))
	}
	if n, _ := b.Admission().Refusals(); n != 0 {
		t.Errorf("Gate.Refusals counts %d lines that wait", n)
	}
	b.Close()
	b = thrumtest.OpenNodeIn(t, bDir, &thrum.Options{NoSync: true})
	if got := b.Admission().Waiting(); got != len(ids) {
		t.Errorf("after a restart, Gate.Waiting = %d, want %d", got, len(ids))
	}
	carry(t, a, b, "")
	for _, id := range ids {
		if m := message(t, b, id); m == nil || m.Sender != rpc.SenderVerified {
			t.Errorf("b: message %s once alice's registration arrived: %+v", id, m)
		}
	}
	if got := b.Admission().Waiting(); got != 0 {
		t.Errorf("Gate.Waiting = %d once the key arrived", got)
	}
	res = carry(t, a, b, "alice")["alice"]
	if len(res.Imported) != 0 || res.Held != len(ids) {
		t.Errorf("alice's shard again: %d imported, %d held; want each message once", len(res.Imported), res.Held)
	}
}

// A key change (alice's key lost on her machine, a new one made) is
// refused with everything it signs until the owner's word: then the
// registration and the messages are imported, each once, and what is
// carried again is held.
func TestKeyChangeTakenOnTheOwnersWord(t *testing.T) {
	t.Parallel()
	aDir := t.TempDir()
	a := thrumtest.OpenNodeIn(t, aDir, &thrum.Options{NoSync: true})
	b := thrumtest.OpenNode(t, &thrum.Options{NoSync: true})
	thrumtest.Register(t, a, "alice", "implementer", "core")
	thrumtest.Register(t, b, "bob", "reviewer", "core")
	carry(t, a, b)
	a.Close()
	if err := os.Remove(filepath.Join(aDir, thrum.DefaultKeyDir, "alice.key")); err != nil {
		t.Fatal(err)
	}
	a = thrumtest.OpenNodeIn(t, aDir, &thrum.Options{NoSync: true}) // a new key, in a new registration
	id := send(t, a, "alice", "everyone", "with my new key")
	carry(t, a, b)
	if message(t, b, id) != nil {
		t.Fatal("b took a message signed by alice's new key without the owner's word")
	}
	rs := reasons(t, b)
	var refusedReg bool
	for _, r := range rs {
		refusedReg = refusedReg || strings.Contains(r.Reason, "a new key for alice")
	}
	if !refusedReg {
		t.Fatalf("b's quarantine lacks the registration with the new key: %+v", rs)
	}
	ctx := context.Background()
	if _, err := b.TrustAgent(ctx, &rpc.TrustAgentParams{Name: "bob"}); !errors.Is(err, rpc.ErrNotFound) {
		t.Errorf("trust bob, who has no new key: %v, want not found", err)
	}
	r, err := b.TrustAgent(ctx, &rpc.TrustAgentParams{Name: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Imported < 2 || len(r.Pending) != 0 {
		t.Errorf("trust alice: %+v, want the registration and the message imported, nothing pending", r)
	}
	if m := message(t, b, id); m == nil || m.Sender != rpc.SenderVerified {
		t.Errorf("b: alice's message after the owner's word: %+v", m)
	}
	for eid, q := range reasons(t, b) {
		t.Errorf("b's quarantine still holds %s: %s", eid, q.Reason)
	}
	res := carry(t, a, b)
	for s, r := range res {
		if len(r.Imported) != 0 {
			t.Errorf("%s carried again: %d imported", eventlog.ShardPath(s), len(r.Imported))
		}
	}
	if n := countMessages(t, b, "alice"); n != 1 {
		t.Errorf("b lists %d messages from alice, want 1", n)
	}
}

func countMessages(t *testing.T, n *thrum.Node, author string) int {
	t.Helper()
	r, err := n.ListMessages(context.Background(), &rpc.ListMessagesParams{AuthorID: author, PageSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	return r.Total
}

// The team's keyring is honoured over first use: a clone whose keyring
// lists another key for alice refuses her registration and what she
// signs, and one whose keyring lists hers takes them. A change of the
// keyring shows in KeyringStatus.
func TestKeyringOverridesFirstUse(t *testing.T) {
	t.Parallel()
	a := thrumtest.OpenNode(t, &thrum.Options{NoSync: true})
	thrumtest.Register(t, a, "alice", "implementer", "core")
	id := send(t, a, "alice", "everyone", "hi")
	var aliceKey string
	for _, l := range shardLines(t, a)[""] {
		if e, _ := eventlog.DecodeLine(l); e.Type == eventlog.TypeAgentRegister {
			p, _ := eventlog.PayloadAs[eventlog.AgentRegister](e)
			aliceKey = p.Key
		}
	}
	other := eventlog.EncodeKey(thrumtest.NewKey(t).Public().(ed25519.PublicKey))
	ring, version := "# the team's keys\nalice "+other+"\nbroken line\n", "v1"
	keyring := func(context.Context) ([]byte, string, error) { return []byte(ring), version, nil }
	b := thrumtest.OpenNode(t, &thrum.Options{NoSync: true, Keyring: keyring})
	carry(t, a, b)
	if message(t, b, id) != nil {
		t.Error("b took alice's message, signed by a key its keyring does not list")
	}
	st, err := b.KeyringStatus(context.Background())
	if err != nil || !st.Present || st.Entries != 1 || len(st.Problems) != 1 || st.Changed != nil {
		t.Errorf("KeyringStatus = %+v, %v; want 1 entry, 1 problem, no change", st, err)
	}
	ring, version = "alice "+aliceKey+"\n", "v2"
	if st, _ := b.KeyringStatus(context.Background()); st.Changed == nil || st.Changed.From != "v1" || st.Changed.To != "v2" {
		t.Errorf("KeyringStatus after a change = %+v, want the change from v1 to v2", st)
	}
	c := thrumtest.OpenNode(t, &thrum.Options{NoSync: true, Keyring: keyring})
	carry(t, a, c)
	if m := message(t, c, id); m == nil || m.Sender != rpc.SenderVerified {
		t.Errorf("c, whose keyring lists alice's key: %+v", m)
	}
}

// legacyNode opens a node on a log an older thrum wrote (nothing
// signed): alice registered here with two messages, carol registered on
// another machine with one. The node gives alice a key and seals her
// unsigned events.
func legacyNode(t *testing.T) (*thrum.Node, []string) {
	t.Helper()
	dir, ids := t.TempDir(), t.TempDir()
	token := identity.NewToken()
	msg := func(author, content string) (string, string) {
		id := "msg_" + eventlog.NewID()
		return id, thrumtest.EventLine(t, eventlog.TypeMessageCreate, map[string]any{"message_id": id, "agent_id": author,
			"session_id": "ses_old", "format": "markdown", "content": content, "priority": "normal",
			"refs": []map[string]string{{"type": "mention", "value": "bob"}}})
	}
	id1, m1 := msg("alice", "from the old days")
	id2, m2 := msg("alice", "also old")
	id3, m3 := msg("carol", "carol's old one")
	files := map[string][]string{
		eventlog.EventsFile: {
			thrumtest.EventLine(t, eventlog.TypeAgentRegister, map[string]any{"agent_id": "alice", "kind": "agent", "name": "alice",
				"role": "implementer", "module": "core", "token_hash": identity.HashToken(token)}),
			thrumtest.EventLine(t, eventlog.TypeAgentRegister, map[string]any{"agent_id": "carol", "kind": "agent", "name": "carol",
				"role": "implementer", "module": "core"}),
		},
		eventlog.ShardPath("alice"): {m1, m2},
		eventlog.ShardPath("carol"): {m3},
	}
	for rel, lines := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, rel)), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, rel), []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := identity.Save(ids, &identity.File{Name: "alice", AgentID: "alice", Role: "implementer", Module: "core", Token: token}); err != nil {
		t.Fatal(err)
	}
	n := thrumtest.OpenNodeIn(t, dir, &thrum.Options{NoSync: true, IdentityDir: ids})
	return n, []string{id1, id2, id3}
}

// The legacy seal: on a clone, alice's unsigned events from before her
// key are taken (shown unverified) because her first signed events seal
// them; a forged unsigned line inserted before her first signed event is
// refused; carol, who has no key yet, keeps her unsigned legacy. Every
// clone, whatever order the shards come in, rebuilds to the same
// projection of what they share.
func TestLegacySealAndMixedShards(t *testing.T) {
	t.Parallel()
	a, old := legacyNode(t)
	if _, err := a.StartSession(context.Background(), &rpc.StartSessionParams{AgentID: "alice"}); err != nil {
		t.Fatal(err)
	}
	id := send(t, a, "alice", "everyone", "signed now")
	forgedID := "msg_" + eventlog.NewID()
	forged := thrumtest.EventLine(t, eventlog.TypeMessageCreate, map[string]any{"message_id": forgedID, "agent_id": "alice",
		"session_id": "ses_old", "format": "markdown", "content": "slipped in before her first signed one", "priority": "normal"})
	lines := shardLines(t, a)
	alice := lines["alice"]
	firstSigned := slices.IndexFunc(alice, eventlog.Signed)
	lines["alice"] = slices.Insert(slices.Clone(alice), firstSigned, []byte(forged))
	orders := [][]string{{"", "alice", "carol"}, {"carol", "alice", ""}, {"alice", "", "carol"}}
	var clones []*thrum.Node
	for i, order := range orders {
		c := thrumtest.OpenNode(t, &thrum.Options{NoSync: true})
		// Twice in the order given: a line that waited is imported by
		// the time its key came, whatever the order.
		for range 2 {
			for _, s := range order {
				if _, err := c.Admission().Admit(context.Background(), admit.Source{File: eventlog.ShardPath(s)}, s, lines[s]); err != nil {
					t.Fatal(err)
				}
			}
		}
		for _, mid := range old {
			if m := message(t, c, mid); m == nil || m.Sender != rpc.SenderUnverified {
				t.Errorf("clone %d (order %q): legacy message %s = %+v, want it, unverified", i, order, mid, m)
			}
		}
		if m := message(t, c, id); m == nil || m.Sender != rpc.SenderVerified {
			t.Errorf("clone %d: alice's signed message = %+v, want it, verified", i, m)
		}
		if m := message(t, c, forgedID); m != nil {
			t.Errorf("clone %d (order %q) took the unsigned line forged before alice's first signed one", i, order)
		}
		if r := reasons(t, c)[eventlog.LineID([]byte(forged))]; !strings.Contains(r.Reason, "no seal of its names this one") {
			t.Errorf("clone %d: the forged line's refusal: %+v", i, r)
		}
		clones = append(clones, c)
	}
	// On a, alice's legacy messages are local, as ever.
	if m := message(t, a, old[0]); m.Sender != rpc.SenderLocal {
		t.Errorf("a: alice's legacy message has sender %q, want local", m.Sender)
	}
	want := sharedDump(t, clones[0])
	for i, c := range append(clones, a) {
		rebuilt, err := c.Rebuild(context.Background(), filepath.Join(t.TempDir(), "rebuilt.db"))
		if err != nil {
			t.Fatal(err)
		}
		got := sharedTables(dumpProjection(t, rebuilt))
		rebuilt.Close()
		if d := diffDumps(want, got); d != "" {
			t.Errorf("node %d rebuilds to another projection of the shared log:\n%s", i, d)
		}
	}
}

// sharedTables keeps the tables of what every clone shares: the
// messages and their receipts, identities and their keys and seals.
func sharedTables(d map[string][]string) map[string][]string {
	out := map[string][]string{}
	for _, tb := range []string{"messages", "message_scopes", "message_refs", "message_reads", "message_acks", "message_edits", "seals"} {
		out[tb] = d[tb]
	}
	for _, row := range d["keys"] {
		if strings.Contains(row, `"registration"`) {
			out["keys"] = append(out["keys"], row)
		}
	}
	return out
}

func sharedDump(t *testing.T, n *thrum.Node) map[string][]string {
	t.Helper()
	return sharedTables(dumpProjection(t, thrum.ProjectionOf(n)))
}

// Property: machines that sign what they write, with lines traded in any
// order and cut anywhere, end with the same projection of what they
// share, live and rebuilt, and nothing of one another's refused or left
// waiting.
func TestSignSyncAnyOrderRebuildSame(t *testing.T) {
	t.Parallel()
	seed := thrumtest.Seed(t)
	r := rand.New(rand.NewPCG(seed, 36))
	const machines = 3
	var ns []*thrum.Node
	names := [][]string{{"alice", "amy"}, {"bob"}, {"carol", "cid"}}
	for i := range machines {
		n := thrumtest.OpenNode(t, &thrum.Options{NoSync: true})
		for _, name := range names[i] {
			thrumtest.Register(t, n, name, "implementer", "core")
		}
		ns = append(ns, n)
	}
	for step := range 60 {
		i := r.IntN(machines)
		from := names[i][r.IntN(len(names[i]))]
		to := "everyone"
		if r.IntN(2) == 0 {
			to = names[i][r.IntN(len(names[i]))]
		}
		send(t, ns[i], from, to, "step "+string(rune('a'+step%26)))
		if r.IntN(4) == 0 { // trade some lines now, in a random order and cut
			j := r.IntN(machines)
			if j != i {
				trade(t, r, ns[i], ns[j])
			}
		}
	}
	for range 2 {
		for i := range ns {
			for j := range ns {
				if i != j {
					trade(t, r, ns[i], ns[j])
				}
			}
		}
	}
	want := sharedDump(t, ns[0])
	for i, n := range ns {
		if w := n.Admission().Waiting(); w != 0 {
			t.Errorf("machine %d: %d lines still wait", i, w)
		}
		if k, rs := n.Admission().Refusals(); k != 0 {
			t.Errorf("machine %d refused %d lines: %+v", i, k, rs)
		}
		if d := diffDumps(want, sharedDump(t, n)); d != "" {
			t.Errorf("machine %d's projection differs from machine 0's (seed %d):\n%s", i, seed, d)
		}
		rebuilt, err := n.Rebuild(context.Background(), filepath.Join(t.TempDir(), "rebuilt.db"))
		if err != nil {
			t.Fatal(err)
		}
		if d := diffDumps(want, sharedTables(dumpProjection(t, rebuilt))); d != "" {
			t.Errorf("machine %d rebuilt differs (seed %d):\n%s", i, seed, d)
		}
		rebuilt.Close()
	}
}

// trade carries from's lines to to, shards in a random order, each cut
// into random pieces.
func trade(t *testing.T, r *rand.Rand, from, to *thrum.Node) {
	t.Helper()
	lines := shardLines(t, from)
	var shards []string
	for s := range lines {
		shards = append(shards, s)
	}
	slices.Sort(shards)
	r.Shuffle(len(shards), func(i, j int) { shards[i], shards[j] = shards[j], shards[i] })
	for _, s := range shards {
		ls := lines[s]
		for len(ls) > 0 {
			k := 1 + r.IntN(len(ls))
			if _, err := to.Admission().Admit(context.Background(), admit.Source{File: eventlog.ShardPath(s)}, s, ls[:k]); err != nil {
				t.Fatal(err)
			}
			ls = ls[k:]
		}
	}
}

// The frame an agent is shown says what the node knows of the sender: a
// message from another machine signed by its author's key is verified,
// one from before its author signed is unverified, one written here is
// local.
func TestFrameSaysTheSender(t *testing.T) {
	t.Parallel()
	a, old := legacyNode(t)
	if _, err := a.StartSession(context.Background(), &rpc.StartSessionParams{AgentID: "alice"}); err != nil {
		t.Fatal(err)
	}
	signed := send(t, a, "alice", "everyone", "signed now")
	b := thrumtest.OpenNode(t, &thrum.Options{NoSync: true})
	bob := thrumtest.Register(t, b, "bob", "reviewer", "core")
	thrumtest.Register(t, b, "dana", "implementer", "core")
	carry(t, a, b)
	here := send(t, b, "dana", "bob", "written on bob's machine")
	dial := func(_ context.Context, onNote func(string, json.RawMessage)) (*rpc.Client, error) {
		return b.Dial(&rpc.ClientOptions{OnNotification: onNote}), nil
	}
	ib, err := inbox.New(context.Background(), dial, inbox.Identity{AgentID: bob.ID, Role: bob.Role, Token: bob.Token}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ib.Close()
	r, err := ib.Check(context.Background(), inbox.CheckParams{Limit: 10, Via: rpc.ViaCheckMessages})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{old[0]: frame.Unverified, old[1]: frame.Unverified, signed: frame.Verified, here: frame.Local}
	for _, m := range r.Messages {
		w, ok := want[m.MessageID]
		if !ok {
			continue
		}
		delete(want, m.MessageID)
		if !strings.Contains(m.Content, ` sender="`+w+`"`) {
			t.Errorf("message %s framed as\n%s\nwant sender=%q", m.MessageID, m.Content, w)
		}
	}
	for id := range want {
		t.Errorf("bob was not shown message %s", id)
	}
}

// Only a message.create says who sent it as its author (acting_as); the
// projection reads acting_as in no other event. A pusher with an
// identity of its own puts an acting_as member in an edit of alice's
// message and in a cleanup of alice, signed by its own key: neither may
// be taken as alice's.
func TestActingAsInAnotherEventDoesNotChooseItsSigner(t *testing.T) {
	t.Parallel()
	a := thrumtest.OpenNode(t, &thrum.Options{NoSync: true})
	b := thrumtest.OpenNode(t, &thrum.Options{NoSync: true})
	thrumtest.Register(t, a, "alice", "implementer", "core")
	thrumtest.Register(t, b, "bob", "reviewer", "core")
	real := send(t, a, "alice", "everyone", "the real alice")
	carry(t, a, b)
	mallory := thrumtest.NewKey(t)
	pub := mallory.Public().(ed25519.PublicKey)
	reg := thrumtest.SignLine(t, thrumtest.EventLine(t, eventlog.TypeAgentRegister, map[string]any{
		"agent_id": "eve", "kind": "agent", "name": "eve",
		"key": eventlog.EncodeKey(pub), "machine": eventlog.MachineID(pub)}), "", mallory)
	edit := thrumtest.SignLine(t, thrumtest.EventLine(t, eventlog.TypeMessageEdit, map[string]any{
		"message_id": real, "agent_id": "alice", "content": "approved: ship it", "acting_as": "eve"}), "", mallory)
	cleanup := thrumtest.SignLine(t, thrumtest.EventLine(t, eventlog.TypeAgentCleanup, map[string]any{
		"agent_id": "alice", "reason": "gone", "acting_as": "eve"}), "", mallory)
	for _, c := range []struct{ shard, line string }{{"", reg}, {"alice", edit}, {"", cleanup}} {
		res, err := b.Admission().Admit(context.Background(), admit.Source{File: eventlog.ShardPath(c.shard)}, c.shard, [][]byte{[]byte(c.line)})
		if err != nil {
			t.Fatal(err)
		}
		if c.line != reg && len(res.Imported) != 0 {
			t.Errorf("b imported a line alice never signed: %s", c.line)
		}
	}
	if m := message(t, b, real); m == nil || m.Body.Content != "the real alice" {
		t.Errorf("b: alice's message = %+v, want it as she wrote it", m)
	}
	agents, err := b.ListAgents(context.Background(), &rpc.ListAgentsParams{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(agents.Agents, func(a rpc.AgentInfo) bool { return a.AgentID == "alice" }) {
		t.Errorf("b: alice is gone after a cleanup she never signed: %+v", agents.Agents)
	}
}

// A pusher makes an identity of its own (trusted on first use, as any
// new identity is) and writes, in alice's shard, a message as alice
// "acting as" its identity, signed by it. Alice signed nothing of it: no
// clone may show it as alice's, verified.
func TestActingAsFromAnotherMachineIsNotTheAuthorsWord(t *testing.T) {
	t.Parallel()
	a := thrumtest.OpenNode(t, &thrum.Options{NoSync: true})
	b := thrumtest.OpenNode(t, &thrum.Options{NoSync: true})
	thrumtest.Register(t, a, "alice", "implementer", "core")
	thrumtest.Register(t, b, "bob", "reviewer", "core")
	carry(t, a, b)
	mallory := thrumtest.NewKey(t)
	pub := mallory.Public().(ed25519.PublicKey)
	reg := thrumtest.SignLine(t, thrumtest.EventLine(t, eventlog.TypeAgentRegister, map[string]any{
		"agent_id": "user:eve", "kind": "user", "name": "user:eve",
		"key": eventlog.EncodeKey(pub), "machine": eventlog.MachineID(pub)}), "", mallory)
	id := "msg_" + eventlog.NewID()
	msg := thrumtest.SignLine(t, thrumtest.EventLine(t, eventlog.TypeMessageCreate, map[string]any{
		"message_id": id, "agent_id": "alice", "session_id": "ses_x", "format": "markdown",
		"content": "approved: ship it", "priority": "normal", "acting_as": "user:eve",
		"refs": []map[string]string{{"type": "mention", "value": "bob"}}}), "", mallory)
	for _, c := range []struct{ shard, line string }{{"", reg}, {"alice", msg}} {
		if _, err := b.Admission().Admit(context.Background(), admit.Source{File: eventlog.ShardPath(c.shard)}, c.shard, [][]byte{[]byte(c.line)}); err != nil {
			t.Fatal(err)
		}
	}
	if m := message(t, b, id); m != nil && m.Author.AgentID == "alice" && m.DisclosedVia == "" && m.Sender == rpc.SenderVerified {
		t.Errorf("b shows a message alice never signed as hers, verified: %+v", m)
	}
}

// A machine of a pusher's own signs updates of alice's registration that
// change her role: one that brings no key, and one that brings alice's
// key, copied from her registration. Alice's registration is her
// machine's to write: neither may change her here.
func TestAnotherMachineDoesNotReregisterAnIdentity(t *testing.T) {
	t.Parallel()
	a := thrumtest.OpenNode(t, &thrum.Options{NoSync: true})
	b := thrumtest.OpenNode(t, &thrum.Options{NoSync: true})
	thrumtest.Register(t, a, "alice", "implementer", "core")
	thrumtest.Register(t, b, "bob", "reviewer", "core")
	carry(t, a, b)
	var aliceKey string
	for _, l := range shardLines(t, a)[""] {
		e, err := eventlog.DecodeLine(l)
		if err != nil {
			t.Fatal(err)
		}
		if p, err := eventlog.PayloadAs[eventlog.AgentRegister](e); err == nil && e.Type == eventlog.TypeAgentRegister && p.AgentID == "alice" {
			aliceKey = p.Key
		}
	}
	mallory := thrumtest.NewKey(t)
	pub := mallory.Public().(ed25519.PublicKey)
	update := func(key string) string {
		p := map[string]any{"agent_id": "alice", "kind": "agent", "name": "alice", "role": "deployer", "module": "core",
			"machine": eventlog.MachineID(pub)}
		if key != "" {
			p["key"] = key
		}
		return thrumtest.SignLine(t, thrumtest.EventLine(t, eventlog.TypeAgentUpdate, p), "", mallory)
	}
	for name, line := range map[string]string{"no key": update(""), "alice's key": update(aliceKey)} {
		res, err := b.Admission().Admit(context.Background(), admit.Source{File: eventlog.EventsFile}, "", [][]byte{[]byte(line)})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Imported) != 0 {
			t.Errorf("%s: b took an update of alice's registration from machine %s", name, eventlog.MachineID(pub))
		}
	}
	agents, err := b.ListAgents(context.Background(), &rpc.ListAgentsParams{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ag := range agents.Agents {
		if ag.AgentID == "alice" && ag.Role != "implementer" {
			t.Errorf("b: alice's role is %q, want implementer", ag.Role)
		}
	}
}
func TestVerifySignaturesVerifiesANodesOwnLog(t *testing.T) {
	t.Parallel()
	a := thrumtest.OpenNode(t, &thrum.Options{NoSync: true, RepoID: "r1"})
	thrumtest.Register(t, a, "alice", "implementer", "core")
	send(t, a, "alice", "everyone", "hello")
	rep, err := a.VerifySignatures(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Verified == 0 || rep.Unsigned != 0 || len(rep.Problems) != 0 {
		t.Errorf("a node's own log verifies as %+v, want every line verified", rep)
	}
}
