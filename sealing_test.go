package thrum_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/eventlog/admit"
	"github.com/thrumhq/thrum/inbox"
	"github.com/thrumhq/thrum/internal/thrumtest"
	"github.com/thrumhq/thrum/rpc"
)

const sealToken = "walrus-okapi-2931"

// sealingPair is machine A, which seals with a new team key, with alice
// registered, and machine B, with bob, who A knows of.
func sealingPair(t *testing.T) (a, b *thrum.Node) {
	t.Helper()
	a = thrumtest.OpenNode(t, &thrum.Options{NoSync: true})
	b = thrumtest.OpenNode(t, &thrum.Options{NoSync: true})
	thrumtest.Register(t, a, "alice", "implementer", "core")
	thrumtest.Register(t, b, "bob", "reviewer", "core")
	carry(t, b, a)
	r, err := a.NewKey(context.Background(), &rpc.KeyNewParams{})
	if err != nil || r.Made == "" || r.Sealing != r.Made {
		t.Fatalf("NewKey: %+v, %v", r, err)
	}
	return a, b
}

func importKeys(t *testing.T, from, to *thrum.Node) *rpc.KeyImportResult {
	t.Helper()
	ctx := context.Background()
	x, err := from.ExportKeys(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := to.ImportKeys(ctx, &rpc.KeyImportParams{Keys: x.Keys})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func logHolds(t *testing.T, n *thrum.Node, token string) bool {
	t.Helper()
	for _, ls := range shardLines(t, n) {
		for _, l := range ls {
			if bytes.Contains(l, []byte(token)) {
				return true
			}
		}
	}
	return false
}

func searchFinds(t *testing.T, n *thrum.Node, query string) int {
	t.Helper()
	r, err := n.SearchMessages(thrum.AsAgent(context.Background(), "bob"), &rpc.SearchMessagesParams{Query: query})
	if err != nil {
		t.Fatal(err)
	}
	return r.Total
}

// With a team key, what leaves a machine holds no body, and a clone with
// the key reads, searches and rebuilds everything, edits included.
func TestSealedBodiesReadByKeyHolders(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := sealingPair(t)
	importKeys(t, a, b)
	id := send(t, a, "alice", "bob", "the word is "+sealToken)
	edited := "now the word is " + sealToken + "-edited"
	if _, err := a.EditMessage(thrum.AsAgent(ctx, "alice"), &rpc.EditMessageParams{MessageID: id, Content: &edited}); err != nil {
		t.Fatal(err)
	}
	if logHolds(t, a, sealToken) {
		t.Fatal("a sealing machine's log holds a body in clear")
	}
	if m := message(t, a, id); m.Body.Content != edited {
		t.Errorf("the sender reads %q", m.Body.Content)
	}
	carry(t, a, b)
	if m := message(t, b, id); m == nil || m.Body.Content != edited || m.Body.Sealed != "" {
		t.Fatalf("the key holder reads %+v", m)
	}
	if n := searchFinds(t, b, sealToken+"-edited"); n != 1 {
		t.Errorf("search on the key holder finds %d", n)
	}
	if d := diffDumps(sharedDump(t, a), sharedDump(t, b)); d != "" {
		t.Errorf("the two key holders' projections differ:\n%s", d)
	}
	rebuilt, err := b.Rebuild(ctx, filepath.Join(t.TempDir(), "r.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer rebuilt.Close()
	if d := diffDumps(sharedDump(t, b), sharedTables(dumpProjection(t, rebuilt))); d != "" {
		t.Errorf("a rebuild differs:\n%s", d)
	}
}

// A clone without the key shows who sent a sealed message and that the
// team key would open it; it never fails, quarantines or delivers it:
// the message stays unread and unclaimable. Importing the key applies
// it again (no rebuild), pushes it, and it is delivered once.
func TestKeylessCloneWaitsForTheTeamKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := sealingPair(t)
	id := send(t, a, "alice", "bob", "the word is "+sealToken)
	edited := "the word was " + sealToken + "-edited"
	if _, err := a.EditMessage(thrum.AsAgent(ctx, "alice"), &rpc.EditMessageParams{MessageID: id, Content: &edited}); err != nil {
		t.Fatal(err)
	}
	sub := b.Listen(10)
	defer sub.Close()
	if _, err := b.Subscribe(thrum.AsAgent(ctx, "bob"), sub, &rpc.SubscribeParams{All: true}); err != nil {
		t.Fatal(err)
	}
	for s, res := range carry(t, a, b) {
		if len(res.Refused) > 0 {
			t.Fatalf("the keyless clone refused lines of %q: %+v", s, res.Refused)
		}
	}
	m := message(t, b, id)
	if m == nil || m.Body.Content != "encrypted message from alice (import the team key)" || m.Body.Sealed == "" || m.Body.Structured != "" {
		t.Fatalf("the keyless clone shows %+v", m)
	}
	if strings.Contains(m.Body.Content, sealToken) {
		t.Fatal("the keyless clone shows the body")
	}
	st, err := b.KeyStatus(ctx, nil)
	if err != nil || st.Waiting != 1 || len(st.WaitingFor) != 1 || st.Sealing != "" {
		t.Fatalf("KeyStatus: %+v, %v", st, err)
	}
	rep, err := b.Verify(ctx)
	if err != nil || !rep.OK() || len(rep.Sealed) != 1 || rep.Sealed[0].Events != 2 || rep.Sealed[0].Held || rep.Sealed[0].Key != st.WaitingFor[0].Key {
		t.Fatalf("doctor's check of the keyless clone: %+v, %v", rep, err)
	}
	bob := thrum.AsAgent(ctx, "bob")
	r, err := b.MarkRead(bob, &rpc.MarkReadParams{MessageIDs: []string{id}})
	if err != nil || r.MarkedCount != 0 {
		t.Fatalf("a sealed message was claimed: %+v, %v", r, err)
	}
	if m := message(t, b, id); m.IsRead {
		t.Error("a sealed message reads as read")
	}
	select {
	case nt := <-sub.C():
		t.Fatalf("a sealed message was pushed: %+v", nt)
	default:
	}

	imp := importKeys(t, a, b)
	if len(imp.Added) != 1 || imp.Reopened != 1 || imp.Waiting != 0 {
		t.Fatalf("ImportKeys: %+v", imp)
	}
	if m := message(t, b, id); m.Body.Content != edited || m.Body.Sealed != "" {
		t.Fatalf("after the import the clone shows %+v", m.Body)
	}
	select {
	case nt := <-sub.C():
		if nt.MessageID != id || !strings.Contains(nt.Preview, sealToken) {
			t.Errorf("pushed after the import: %+v", nt)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the opened message was not pushed")
	}
	if n := searchFinds(t, b, sealToken+"-edited"); n != 1 {
		t.Errorf("search after the import finds %d", n)
	}
	if rep, err := b.Verify(ctx); err != nil || !rep.OK() || len(rep.Sealed) != 0 {
		t.Errorf("doctor's check after the import: %+v, %v", rep, err)
	}
	for i, want := range []int{1, 0} {
		r, err := b.MarkRead(bob, &rpc.MarkReadParams{MessageIDs: []string{id}})
		if err != nil || r.MarkedCount != want {
			t.Fatalf("claim %d after the import: %+v, %v", i, r, err)
		}
	}
	rebuilt, err := b.Rebuild(ctx, filepath.Join(t.TempDir(), "r.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer rebuilt.Close()
	if d := diffDumps(sharedTables(dumpProjection(t, rebuilt)), sharedDump(t, b)); d != "" {
		t.Errorf("the projection after the import differs from a rebuild:\n%s", d)
	}
}

// Messages waiting for the team key are not unread work: an agent's
// check (a hook's, check_messages', thrum wait's) passes over them to
// what it can read, and a list of unread messages, which a "mark all
// read" repeats until it is empty, leaves them out. Once the key is
// imported, a check takes them, each once.
func TestWaitingBodiesDoNotHoldUpTheQueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := thrumtest.OpenNode(t, &thrum.Options{NoSync: true})
	b := thrumtest.OpenNode(t, &thrum.Options{NoSync: true})
	thrumtest.Register(t, a, "alice", "implementer", "core")
	bob := thrumtest.Register(t, b, "bob", "reviewer", "core")
	thrumtest.Register(t, b, "dana", "implementer", "core")
	carry(t, b, a)
	if _, err := a.NewKey(ctx, &rpc.KeyNewParams{}); err != nil {
		t.Fatal(err)
	}
	sealed := []string{send(t, a, "alice", "bob", "first "+sealToken), send(t, a, "alice", "bob", "second "+sealToken)}
	carry(t, a, b)
	clear := send(t, b, "dana", "bob", "written on bob's machine, in clear")

	r, err := b.ListMessages(thrum.AsAgent(ctx, "bob"), &rpc.ListMessagesParams{Mentions: true, Unread: true})
	if err != nil {
		t.Fatal(err)
	}
	if r.Total != 1 || r.Unread != 1 || len(r.Messages) != 1 || r.Messages[0].MessageID != clear {
		t.Errorf("bob's unread messages: %d, %d unread; want only %s", r.Total, r.Unread, clear)
	}
	dial := func(_ context.Context, onNote func(string, json.RawMessage)) (*rpc.Client, error) {
		return b.Dial(&rpc.ClientOptions{OnNotification: onNote}), nil
	}
	ib, err := inbox.New(ctx, dial, inbox.Identity{AgentID: bob.ID, Role: bob.Role, Token: bob.Token}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ib.Close()
	check := func() []string {
		t.Helper()
		r, err := ib.Check(ctx, inbox.CheckParams{Limit: 1, Via: rpc.ViaCheckMessages})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, m := range r.Messages {
			ids = append(ids, m.MessageID)
		}
		return ids
	}
	if got := check(); !slices.Equal(got, []string{clear}) {
		t.Fatalf("a check behind two waiting bodies took %v, want the clear message %s", got, clear)
	}
	if got := check(); got != nil {
		t.Fatalf("a check took %v of what no key opens", got)
	}
	importKeys(t, a, b)
	for _, want := range sealed {
		if got := check(); !slices.Equal(got, []string{want}) {
			t.Fatalf("after the import a check took %v, want %s", got, want)
		}
	}
	if got := check(); got != nil {
		t.Fatalf("a check took %v again", got)
	}
}

// A new key seals from its rotation on; the old one still opens what it
// sealed, here and on a clone that imports both, and after a rebuild.
func TestRotationKeepsOldMessagesReadable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := sealingPair(t)
	old := send(t, a, "alice", "bob", "before "+sealToken)
	r, err := a.NewKey(ctx, &rpc.KeyNewParams{Rotate: true})
	if err != nil || r.Made == "" || len(r.Keys) != 2 || r.Sealing != r.Made {
		t.Fatalf("rotate: %+v, %v", r, err)
	}
	again, err := a.NewKey(ctx, &rpc.KeyNewParams{})
	if err != nil || again.Made != "" {
		t.Fatalf("key.new without rotate made a key while one seals: %+v, %v", again, err)
	}
	young := send(t, a, "alice", "bob", "after "+sealToken)
	carry(t, a, b)
	importKeys(t, a, b)
	for _, n := range []*thrum.Node{a, b} {
		for id, want := range map[string]string{old: "before " + sealToken, young: "after " + sealToken} {
			if m := message(t, n, id); m.Body.Content != want {
				t.Errorf("%s reads %q, want %q", id, m.Body.Content, want)
			}
		}
	}
	if logHolds(t, a, sealToken) {
		t.Error("a body is in clear")
	}
}

// The team keys survive a restart, and a key file written while the node
// was closed opens, at the next start, what waited for it.
func TestTeamKeysSurviveARestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	a := thrumtest.OpenNode(t, &thrum.Options{NoSync: true})
	thrumtest.Register(t, a, "alice", "implementer", "core")
	b := thrumtest.OpenNodeIn(t, dir, &thrum.Options{NoSync: true})
	thrumtest.Register(t, b, "bob", "reviewer", "core")
	carry(t, b, a)
	if _, err := a.NewKey(ctx, &rpc.KeyNewParams{}); err != nil {
		t.Fatal(err)
	}
	id := send(t, a, "alice", "bob", sealToken)
	carry(t, a, b)
	if m := message(t, b, id); m.Body.Sealed == "" {
		t.Fatal("not sealed on the keyless clone")
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	keys, err := os.ReadFile(filepath.Join(a.Dir(), thrum.DefaultKeyDir, "team.keys"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, thrum.DefaultKeyDir, "team.keys"), keys, 0o600); err != nil {
		t.Fatal(err)
	}
	b = thrumtest.OpenNodeIn(t, dir, &thrum.Options{NoSync: true})
	if m := message(t, b, id); m.Body.Content != sealToken {
		t.Fatalf("after a restart with the key: %+v", m.Body)
	}
	if err := os.WriteFile(filepath.Join(dir, thrum.DefaultKeyDir, "team.keys"), []byte("damaged\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if _, err := thrum.Open(ctx, dir, &thrum.Options{NoSync: true}); err == nil {
		t.Fatal("a node opened with a damaged team key file: it would send in clear")
	}
}

// Property: machines that share the team keys, with sends and edits
// sealed and lines traded in any order and cut anywhere, end with the
// same projection, live and rebuilt; no line holds a body.
func TestSealSyncAnyOrderRebuildSame(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	seed := thrumtest.Seed(t)
	r := rand.New(rand.NewPCG(seed, 37))
	names := [][]string{{"alice", "amy"}, {"bob"}, {"carol"}}
	var ns []*thrum.Node
	for i := range names {
		n := thrumtest.OpenNode(t, &thrum.Options{NoSync: true})
		for _, name := range names[i] {
			thrumtest.Register(t, n, name, "implementer", "core")
		}
		ns = append(ns, n)
	}
	if _, err := ns[0].NewKey(ctx, &rpc.KeyNewParams{}); err != nil {
		t.Fatal(err)
	}
	for _, n := range ns[1:] {
		importKeys(t, ns[0], n)
	}
	var sent [][2]string // message ID, author
	for step := range 50 {
		i := r.IntN(len(ns))
		from := names[i][r.IntN(len(names[i]))]
		if len(sent) > 0 && r.IntN(4) == 0 {
			if m := sent[r.IntN(len(sent))]; slices.Contains(names[i], m[1]) {
				c := sealToken + " edit " + string(rune('a'+step%26))
				if _, err := ns[i].EditMessage(thrum.AsAgent(ctx, m[1]), &rpc.EditMessageParams{MessageID: m[0], Content: &c}); err != nil {
					t.Fatal(err)
				}
			}
		}
		sent = append(sent, [2]string{send(t, ns[i], from, "everyone", sealToken+" step "+string(rune('a'+step%26))), from})
		if r.IntN(3) == 0 {
			if j := r.IntN(len(ns)); j != i {
				trade(t, r, ns[i], ns[j])
			}
		}
		if step == 25 { // a rotation midway, carried to the others by hand
			if _, err := ns[0].NewKey(ctx, &rpc.KeyNewParams{Rotate: true}); err != nil {
				t.Fatal(err)
			}
			for _, n := range ns[1:] {
				importKeys(t, ns[0], n)
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
	// message_edits' id counts arrivals here: edits that crossed arrive
	// in another order on each machine.
	noEditIDs := func(d map[string][]string) map[string][]string {
		for i, row := range d["message_edits"] {
			if _, rest, ok := strings.Cut(row, " "); ok {
				d["message_edits"][i] = rest
			}
		}
		slices.Sort(d["message_edits"])
		return d
	}
	want := noEditIDs(sharedDump(t, ns[0]))
	for i, n := range ns {
		if logHolds(t, n, sealToken) {
			t.Errorf("machine %d's log holds a body in clear", i)
		}
		if st, err := n.KeyStatus(ctx, nil); err != nil || st.Waiting != 0 {
			t.Errorf("machine %d: %+v, %v", i, st, err)
		}
		if d := diffDumps(want, noEditIDs(sharedDump(t, n))); d != "" {
			t.Errorf("machine %d's projection differs from machine 0's (seed %d):\n%s", i, seed, d)
		}
		rebuilt, err := n.Rebuild(ctx, filepath.Join(t.TempDir(), "rebuilt.db"))
		if err != nil {
			t.Fatal(err)
		}
		if d := diffDumps(want, noEditIDs(sharedTables(dumpProjection(t, rebuilt)))); d != "" {
			t.Errorf("machine %d rebuilt differs (seed %d):\n%s", i, seed, d)
		}
		rebuilt.Close()
	}
	if !strings.Contains(strings.Join(want["messages"], "\n"), sealToken) {
		t.Error("the projection holds no body: nothing was opened")
	}
}

// A machine gives the team keys to another by name: wrapped to the key
// that machine published in its registrations, in a grant it signs. The
// other takes them on its owner's word and opens what waited; a third
// machine cannot; a grant in a machine's name that another key signed
// is refused.
func TestGrantGivesTheTeamKeysToAnotherMachine(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := sealingPair(t)
	c := thrumtest.OpenNode(t, &thrum.Options{NoSync: true})
	thrumtest.Register(t, c, "carol", "reviewer", "core")
	id := send(t, a, "alice", "bob", "granted "+sealToken)
	g, err := a.GrantKeys(ctx, &rpc.KeyGrantParams{To: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	stB, _ := b.KeyStatus(ctx, &rpc.KeyStatusParams{})
	if g.To != stB.Machine || g.Keys != 1 {
		t.Fatalf("GrantKeys: %+v, want b's machine %s", g, stB.Machine)
	}
	if _, err := a.GrantKeys(ctx, &rpc.KeyGrantParams{To: "carol"}); err == nil {
		t.Error("a granted keys to a machine it knows nothing of")
	}
	if logHolds(t, a, sealToken) {
		t.Fatal("a body is in clear")
	}
	carry(t, a, b)
	carry(t, a, c)
	if m := message(t, b, id); m.Body.Sealed == "" {
		t.Fatal("b opened the message before accepting the grant")
	}
	st, err := b.KeyStatus(ctx, &rpc.KeyStatusParams{})
	if err != nil || len(st.Grants) != 1 || len(st.Grants[0].Keys) != 1 || st.Waiting != 1 {
		t.Fatalf("b's key status: %+v, %v", st, err)
	}
	if stC, _ := c.KeyStatus(ctx, &rpc.KeyStatusParams{}); len(stC.Grants) != 0 {
		t.Errorf("c sees a grant made to b: %+v", stC.Grants)
	}
	if _, err := c.AcceptKeys(ctx, &rpc.KeyAcceptParams{}); err == nil {
		t.Error("c accepted a grant made to b")
	}
	r, err := b.AcceptKeys(ctx, &rpc.KeyAcceptParams{})
	if err != nil || len(r.Added) != 1 || r.Reopened != 1 || r.Sealing == "" || len(r.Grants) != 0 {
		t.Fatalf("AcceptKeys: %+v, %v", r, err)
	}
	if m := message(t, b, id); m.Body.Content != "granted "+sealToken {
		t.Errorf("b reads %+v", m.Body)
	}

	// A grant in a's name signed by another key: refused at admission.
	forged := thrumtest.EventLine(t, eventlog.TypeKeyGrant, map[string]any{"machine": g.To, "to": st.Machine,
		"kem": eventlog.EncodeKey(thrumtest.NewKey(t).Public().(ed25519.PublicKey)), "wrapped": "AAAA"})
	line := thrumtest.SignLine(t, forged, "", thrumtest.NewKey(t))
	res, err := c.Admission().Admit(ctx, admit.Source{File: eventlog.EventsFile, Commit: "test"}, "", [][]byte{[]byte(line)})
	if err != nil || len(res.Refused) != 1 {
		t.Errorf("a forged grant: %+v, %v", res, err)
	}
}
