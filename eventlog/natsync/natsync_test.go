package natsync_test

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/thrumhq/thrum/eventlog/admit"
	"github.com/thrumhq/thrum/eventlog/natsync"
)

func testConfig(ns *natsServer) natsync.Config {
	return natsync.Config{URL: ns.url(), Stream: "thrum-test", Subjects: "thrum.test"}
}

// twoMachines starts a server with the stream and machines a and b,
// with alice registered on a and bob on b, each known to the other.
func twoMachines(t testing.TB) (*natsServer, natsync.Config, *machine, *machine) {
	t.Helper()
	ns := startServer(t, nil)
	cfg := testConfig(ns)
	initStream(t, cfg)
	a, b := newMachine(t, "a", cfg), newMachine(t, "b", cfg)
	a.register("alice")
	b.register("bob")
	settle(t, a, b)
	return ns, cfg, a, b
}

func initStream(t testing.TB, cfg natsync.Config) *natsync.StreamInfo {
	t.Helper()
	info, created, err := natsync.InitStream(context.Background(), &cfg, nil)
	if err != nil || !created {
		t.Fatalf("InitStream: created %v, %v", created, err)
	}
	return info
}

// TestLiveBetweenMachines: a message alice sends on A is in bob's inbox
// on B without any git round, and bob's reply in alice's; afterwards
// both logs hold the same events, each agent's shard byte-identical on
// both, and neither refused anything (their own events coming back are
// not mistaken for forgeries).
func TestLiveBetweenMachines(t *testing.T) {
	ns := startServer(t, nil)
	cfg := testConfig(ns)
	info := initStream(t, cfg)
	if info.MaxAge != natsync.DefaultMaxAge || info.Replicas != 1 || info.MaxMsgSize <= 0 {
		t.Errorf("stream = %+v", info)
	}
	a, b := newMachine(t, "a", cfg), newMachine(t, "b", cfg)
	a.register("alice")
	b.register("bob")
	waitFor(t, 10*time.Second, "bob's registration on a", func() bool { return a.knows("bob") })
	waitFor(t, 10*time.Second, "alice's registration on b", func() bool { return b.knows("alice") })
	settle(t, a, b) // the imports are applied to every read model, not only SQLite

	id := a.send("alice", "bob", "hello over NATS")
	waitFor(t, 10*time.Second, "alice's message on b", func() bool { return b.has(id) })
	reply := b.send("bob", "alice", "hello back")
	waitFor(t, 10*time.Second, "bob's reply on a", func() bool { return a.has(reply) })

	settle(t, a, b)
	for _, m := range []*machine{a, b} {
		st := m.s.Status()
		if st.State != natsync.StateLive || st.LastError != "" || st.Published == 0 || st.Imported == 0 {
			t.Errorf("%s: status %+v", m.name, st)
		}
		if n := m.gate.refusals(); n != 0 {
			t.Errorf("%s refused %d lines", m.name, n)
		}
	}
	sameLogs(t, a, b)
}

// TestPartitionHealed: with the server gone, sends on both machines
// succeed as before (the local fsync is the acknowledgement) and nothing
// arrives; once it is back, everything written meanwhile arrives, once:
// from the lines the publisher holds, or, when they outgrew what it
// holds, from the log.
func TestPartitionHealed(t *testing.T) {
	t.Run("held", testPartitionHealed)
	t.Run("outgrown", func(t *testing.T) {
		natsync.SetTailBytes(t, 2048)
		testPartitionHealed(t)
	})
}

func testPartitionHealed(t *testing.T) {
	ns, _, a, b := twoMachines(t)

	ns.stop()
	var ids []string
	for i := range 20 {
		start := time.Now()
		ids = append(ids, a.send("alice", "bob", fmt.Sprintf("while apart %d", i)), b.send("bob", "alice", fmt.Sprintf("back %d", i)))
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("two sends took %v with the server down", d)
		}
	}
	waitFor(t, 10*time.Second, "a to see the server gone", func() bool { return a.s.Status().State != natsync.StateLive })
	if b.has(ids[0]) || a.has(ids[1]) {
		t.Fatal("a message crossed with the server down")
	}
	ns.start()
	settle(t, a, b)
	for _, id := range ids {
		if !a.has(id) || !b.has(id) {
			t.Fatalf("message %s is missing after the partition healed", id)
		}
	}
	sameLogs(t, a, b)
}

// TestUntoldCommitPublished: a commit the publisher was not told of (it
// takes this machine's lines as they are committed) is found in the log
// and published, not taken for another machine's lines.
func TestUntoldCommitPublished(t *testing.T) {
	_, _, a, b := twoMachines(t)
	first := a.send("alice", "bob", "told")
	a.mu.Lock()
	a.cur = nil
	a.mu.Unlock()
	untold := a.send("alice", "bob", "untold")
	a.mu.Lock()
	a.cur = a.s
	a.mu.Unlock()
	last := a.send("alice", "bob", "told again")
	settle(t, a, b)
	for _, id := range []string{first, untold, last} {
		if !b.has(id) {
			t.Fatalf("b lacks %s", id)
		}
	}
	sameLogs(t, a, b)
}

// TestBacklogAndToldLinesInOnePass: lines written while no publisher
// ran and lines committed since it started are all published after one
// wake: a pass that reads the backlog from the log goes on with what
// it was told.
func TestBacklogAndToldLinesInOnePass(t *testing.T) {
	_, _, a, b := twoMachines(t)
	a.stopSync()
	ids := []string{a.send("alice", "bob", "while no publisher ran")}
	a.start(nil)
	ids = append(ids, a.send("alice", "bob", "told"))
	for _, id := range ids {
		// Polling b wakes no publisher (settle would).
		waitFor(t, 10*time.Second, "b to have "+id, func() bool { return b.has(id) })
	}
}

// TestImportedAfterOwnRunNotPending: this machine's lines on
// events.jsonl followed, before the publisher's pass, by imported lines:
// the pass goes past both, and nothing of this machine's is reported
// unpublished (health would say "pending" until the next send).
func TestImportedAfterOwnRunNotPending(t *testing.T) {
	ns, _, a, b := twoMachines(t)

	ns.stop()
	waitFor(t, 10*time.Second, "a to see the server gone", func() bool { return a.s.Status().State != natsync.StateLive })
	a.register("carol") // a's line on events.jsonl
	b.register("dave")
	lines := bytes.Split(bytes.TrimSuffix(shardBytes(t, b.n.EventLog(), ""), []byte("\n")), []byte("\n"))
	if r, err := a.gate.Admit(context.Background(), admit.Source{File: "git"}, "", lines); err != nil || len(r.Imported) == 0 {
		t.Fatalf("import into a: %v %+v", err, r)
	}
	ns.start()
	waitFor(t, 10*time.Second, "b to know carol", func() bool { return b.knows("carol") })
	waitFor(t, 5*time.Second, "a to have nothing unpublished", func() bool { return a.s.Status().Unpublished == 0 })
}

// TestStreamMadeAgain: the stream deleted and made again under running
// machines: each gives the new stream all it wrote, and a machine that
// starts afterwards with an empty log gets everything from it.
func TestStreamMadeAgain(t *testing.T) {
	ns, cfg, a, b := twoMachines(t)
	before := a.send("alice", "bob", "before")
	settle(t, a, b)

	nc, err := nats.Connect(ns.url())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	if err := js.DeleteStream(context.Background(), cfg.Stream); err != nil {
		t.Fatal(err)
	}
	after := b.send("bob", "alice", "while there is no stream")
	// The server may still be removing the old stream's files.
	waitFor(t, 10*time.Second, "the stream made again", func() bool {
		_, created, err := natsync.InitStream(context.Background(), &cfg, nil)
		return err == nil && created
	})
	settle(t, a, b)
	if !a.has(after) {
		t.Fatal("a lacks what b sent while the stream was gone")
	}
	c := newMachine(t, "c", cfg)
	settle(t, a, b, c)
	if !c.has(before) || !c.has(after) {
		t.Fatal("a machine that came after the new stream lacks what was written before it")
	}
	sameLogs(t, a, b, c)
}

// TestCredentialsRefused: a server that requires a user and password
// refuses a machine without them (Status says so, nothing crosses) and
// takes one with them.
func TestCredentialsRefused(t *testing.T) {
	ns := startServer(t, func(o *server.Options) { o.Username, o.Password = "thrum", "s3cret" })
	good := testConfig(ns)
	good.URL = "nats://thrum:s3cret@127.0.0.1:" + strconv.Itoa(ns.port)
	initStream(t, good)
	bad := good
	bad.URL = "nats://thrum:wrong@127.0.0.1:" + strconv.Itoa(ns.port)
	a, b := newMachine(t, "a", bad), newMachine(t, "b", good)
	a.register("alice")
	b.register("bob")
	defer func() { t.Logf("a: %+v", a.s.Status()) }()
	waitFor(t, 10*time.Second, "a to report the refusal", func() bool {
		st := a.s.Status()
		return st.State != natsync.StateLive && strings.Contains(strings.ToLower(st.LastError), "authorization")
	})
	time.Sleep(200 * time.Millisecond)
	if a.knows("bob") || b.knows("alice") {
		t.Fatal("events crossed with refused credentials")
	}
	if st := b.s.Status(); st.State != natsync.StateLive {
		t.Errorf("b, with the right password: %+v", st)
	}
}

// TestConfigRefusesPlainRemote: a plain nats:// connection to another
// machine without credentials is refused unless allowed; TLS, loopback,
// credentials or Insecure pass.
func TestConfigRefusesPlainRemote(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  natsync.Config
		ok   bool
	}{
		{"plain remote", natsync.Config{URL: "nats://nats.example.com:4222"}, false},
		{"one plain remote of a cluster", natsync.Config{URL: "tls://a.example.com:4222,nats://b.example.com:4222"}, false},
		{"tls", natsync.Config{URL: "tls://nats.example.com:4222"}, true},
		{"loopback", natsync.Config{URL: "nats://127.0.0.1:4222"}, true},
		{"localhost", natsync.Config{URL: "nats://localhost:4222"}, true},
		{"creds file", natsync.Config{URL: "nats://nats.example.com:4222", CredsFile: "/x.creds"}, true},
		{"user in URL", natsync.Config{URL: "nats://u:p@nats.example.com:4222"}, true},
		{"insecure", natsync.Config{URL: "nats://nats.example.com:4222", Insecure: true}, true},
		{"http", natsync.Config{URL: "http://127.0.0.1:4222"}, false},
		{"no host", natsync.Config{URL: "nats://"}, false},
	} {
		c.cfg.Stream, c.cfg.Subjects = "thrum-x", "thrum.x"
		err := c.cfg.Check()
		if (err == nil) != c.ok {
			t.Errorf("%s: Check() = %v, want ok %v", c.name, err, c.ok)
		}
	}
	for _, bad := range []natsync.Config{
		{URL: "nats://127.0.0.1:4222", Stream: "a.b", Subjects: "thrum.x"},
		{URL: "nats://127.0.0.1:4222", Stream: "s", Subjects: "thrum.>"},
		{URL: "nats://127.0.0.1:4222", Stream: "s", Subjects: "thrum..x"},
	} {
		if err := bad.Check(); err == nil {
			t.Errorf("Check(%+v) passed", bad)
		}
	}
}

// TestAnotherShardRefused: a client that publishes into an agent's shard
// lines that are not its own (alice's message in bob's shard; a message
// as bob, who is registered on b) is refused on b exactly as a git merge
// would refuse it: the lines never enter b's log.
func TestAnotherShardRefused(t *testing.T) {
	ns := startServer(t, nil)
	cfg := testConfig(ns)
	initStream(t, cfg)
	a, b := newMachine(t, "a", cfg), newMachine(t, "b", cfg)
	a.register("alice")
	b.register("bob")
	b.send("bob", "bob", "bob's first")
	settle(t, a, b)

	nc, err := nats.Connect(ns.url())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	end := int64(len(shardBytes(t, b.n.EventLog(), "bob")))
	forged := map[string]string{
		"01M8AAAAAAAAAAAAAAAAAAAAAA": `{"event_id":"01M8AAAAAAAAAAAAAAAAAAAAAA","type":"message.create","timestamp":"2026-11-29T00:00:00.000000000Z","message_id":"msg_01M8AAAAAAAAAAAAAAAAAAAAAA","agent_id":"alice","body":{"format":"markdown","content":"alice in bob's shard"}}`,
		"01M8BBBBBBBBBBBBBBBBBBBBBB": `{"event_id":"01M8BBBBBBBBBBBBBBBBBBBBBB","type":"message.create","timestamp":"2026-11-29T00:00:00.000000000Z","message_id":"msg_01M8BBBBBBBBBBBBBBBBBBBBBB","agent_id":"bob","body":{"format":"markdown","content":"not bob at all"}}`,
	}
	for _, line := range forged {
		msg := &nats.Msg{Subject: cfg.Subjects + ".evil.bob", Data: []byte(line + "\n"), Header: nats.Header{natsync.HeaderOffset: []string{strconv.FormatInt(end, 10)}}}
		if _, err := js.PublishMsg(context.Background(), msg); err != nil {
			t.Fatal(err)
		}
		settle(t, a, b)
	}
	ids := logIDs(t, b.n.EventLog())
	for id := range forged {
		if ids["messages/bob.jsonl"][id] {
			t.Errorf("b admitted the forged event %s", id)
		}
	}
	if n := b.gate.refusals(); n < 2 {
		t.Errorf("b refused %d lines, want the 2 forged ones", n)
	}
}

// TestCopiedCloneStops: two clones publishing as the same machine (a
// copied directory) cannot interleave on its subjects: the stream
// refuses one, which says so and stops publishing.
func TestCopiedCloneStops(t *testing.T) {
	ns := startServer(t, nil)
	cfg := testConfig(ns)
	initStream(t, cfg)
	a, copied := newMachine(t, "a", cfg), newMachine(t, "a", cfg)
	a.register("alice")
	copied.register("carol")
	a.send("alice", "alice", "one")
	copied.send("carol", "carol", "two")
	waitFor(t, 20*time.Second, "one of them to report the other writer", func() bool {
		return strings.Contains(a.s.Status().LastError, "another clone publishes as this machine") ||
			strings.Contains(copied.s.Status().LastError, "another clone publishes as this machine")
	})
	// And the subject never took both: every message on it is one
	// clone's lines at their offset.
	nc, err := nats.Connect(ns.url())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	str, err := js.Stream(context.Background(), cfg.Stream)
	if err != nil {
		t.Fatal(err)
	}
	writers := map[string]int{}
	for seq := uint64(1); seq <= str.CachedInfo().State.LastSeq; seq++ {
		m, err := str.GetMsg(context.Background(), seq)
		if err != nil || m.Subject != cfg.Subjects+".a.@events" {
			continue
		}
		off, _ := strconv.ParseInt(m.Header.Get(natsync.HeaderOffset), 10, 64)
		for _, c := range []*machine{a, copied} {
			if b := shardBytes(t, c.n.EventLog(), ""); int64(len(b)) >= off+int64(len(m.Data)) && bytes.Equal(b[off:off+int64(len(m.Data))], m.Data) {
				writers[c.name+fmt.Sprintf("%p", c)]++
			}
		}
	}
	if len(writers) != 1 {
		t.Errorf("the subject of a's events took the lines of %d clones: %v", len(writers), writers)
	}
}

// TestLostMessagesPublishedAgain: messages the stream acknowledged and
// then lost (a server that had not fsynced them) are published again
// when the publisher next looks at its subjects, and reach a machine
// that had not read them.
func TestLostMessagesPublishedAgain(t *testing.T) {
	ns := startServer(t, nil)
	cfg := testConfig(ns)
	nc, err := nats.Connect(ns.url())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	// As InitStream makes it, but deleting is allowed: the test plays the
	// server that lost a message.
	str, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: cfg.Stream, Subjects: []string{cfg.Subjects + ".>"}, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	a, b := newMachine(t, "a", cfg), newMachine(t, "b", cfg)
	a.register("alice")
	b.register("bob")
	settle(t, a, b)
	b.stopSync()
	id := a.send("alice", "bob", "lost by the server")
	settle(t, a)
	last, err := str.GetLastMsgForSubject(context.Background(), cfg.Subjects+".a.alice")
	if err != nil || !strings.Contains(string(last.Data), id) {
		t.Fatalf("a's last message on alice's subject: %v %v", last, err)
	}
	if err := str.DeleteMsg(context.Background(), last.Sequence); err != nil {
		t.Fatal(err)
	}
	a.stopSync()
	a.start(nil)
	b.start(nil)
	settle(t, a, b)
	if !b.has(id) {
		t.Fatal("b lacks the message the stream lost")
	}
	sameLogs(t, a, b)
}

// TestGapWaitsForGit: a machine whose copy of alice's shard ends before
// the stream's first message of it (the stream lost the earlier ones)
// leaves that message to git, counted, without writing it at the wrong
// place; with a git round that brings the earlier lines, it takes it.
func TestGapWaitsForGit(t *testing.T) {
	ns := startServer(t, nil)
	cfg := testConfig(ns)
	nc, err := nats.Connect(ns.url())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	str, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: cfg.Stream, Subjects: []string{cfg.Subjects + ".>"}, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	a := newMachine(t, "a", cfg)
	a.register("alice")
	first := a.send("alice", "alice", "first")
	settle(t, a)
	second := a.send("alice", "alice", "second")
	settle(t, a)
	// The stream loses alice's first message.
	m, err := str.GetMsg(context.Background(), 1, jetstream.WithGetMsgSubject(cfg.Subjects+".a.alice"))
	if err != nil {
		t.Fatal(err)
	}
	if err := str.DeleteMsg(context.Background(), m.Sequence); err != nil {
		t.Fatal(err)
	}

	c := newMachine(t, "c", cfg)
	settle(t, a, c)
	if c.has(second) || c.has(first) {
		t.Fatal("c took alice's second message past a gap")
	}
	if st := c.s.Status(); st.Gaps == 0 {
		t.Errorf("c's status counts no gap: %+v", st)
	}

	// With a "git round" that brings alice's shard as a has it, c takes
	// what follows the gap from the stream.
	d := newMachine(t, "d", cfg)
	d.stopSync()
	gitRound := func(ctx context.Context) error {
		lines := bytes.SplitAfter(shardBytes(t, a.n.EventLog(), "alice"), []byte("\n"))
		var ls [][]byte
		for _, l := range lines[:1] { // the line the stream lost
			ls = append(ls, bytes.TrimSuffix(l, []byte("\n")))
		}
		_, err := d.gate.Admit(ctx, admit.Source{File: "git"}, "alice", ls)
		return err
	}
	d.start(&natsync.Options{Refresh: gitRound})
	settle(t, a, d)
	if !d.has(first) || !d.has(second) {
		t.Fatal("d lacks alice's messages after the git round for the gap")
	}
	if got, want := shardBytes(t, d.n.EventLog(), "alice"), shardBytes(t, a.n.EventLog(), "alice"); !bytes.Equal(got, want) {
		t.Errorf("alice's shard on d differs from a's:\n%s\n%s", got, want)
	}
}

// TestLeastPrivileges: machines whose server users may do only what
// docs/sync.md lists for a daemon (publish on their own subjects, stream
// info, last messages, ordered consumers, replies) exchange messages;
// neither can delete the stream.
func TestLeastPrivileges(t *testing.T) {
	daemon := func(user, machine string) *server.User {
		return &server.User{Username: user, Password: "pw", Permissions: &server.Permissions{
			Publish: &server.SubjectPermission{Allow: []string{
				"thrum.test." + machine + ".>",
				"$JS.API.STREAM.INFO.thrum-test",
				"$JS.API.STREAM.MSG.GET.thrum-test",
				"$JS.API.CONSUMER.CREATE.thrum-test.>",
				"$JS.API.CONSUMER.MSG.NEXT.thrum-test.>",
				"$JS.API.CONSUMER.DELETE.thrum-test.>",
			}},
			Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>"}},
		}}
	}
	ns := startServer(t, func(o *server.Options) {
		o.Users = []*server.User{{Username: "admin", Password: "pw"}, daemon("ua", "a"), daemon("ub", "b")}
	})
	url := func(user string) string { return "nats://" + user + ":pw@127.0.0.1:" + strconv.Itoa(ns.port) }
	cfg := testConfig(ns)
	cfg.URL = url("admin")
	initStream(t, cfg)
	ca, cb := cfg, cfg
	ca.URL, cb.URL = url("ua"), url("ub")
	a, b := newMachine(t, "a", ca), newMachine(t, "b", cb)
	a.register("alice")
	b.register("bob")
	settle(t, a, b)
	id := a.send("alice", "bob", "with least privileges")
	settle(t, a, b)
	if !b.has(id) {
		t.Fatalf("b lacks the message: a %+v, b %+v", a.s.Status(), b.s.Status())
	}
	for _, m := range []*machine{a, b} {
		if st := m.s.Status(); st.LastError != "" {
			t.Errorf("%s: %+v", m.name, st)
		}
	}
	sameLogs(t, a, b)
	nc, err := nats.Connect(url("ua"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := js.DeleteStream(ctx, cfg.Stream); err == nil {
		t.Error("a daemon's user deleted the stream")
	}
}

// TestJunkOnAnotherSubjectLosesNothing: anyone who can publish puts
// lines for alice's shard, at the offset where it ends, on a subject of
// its own, just before alice's machine publishes her message there. A
// clone that reads both in one batch still takes alice's message: the
// junk is refused, and does not push alice's lines past the shard's end.
func TestJunkOnAnotherSubjectLosesNothing(t *testing.T) {
	ns := startServer(t, nil)
	cfg := testConfig(ns)
	initStream(t, cfg)
	a := newMachine(t, "a", cfg)
	a.register("alice")
	settle(t, a)
	nc, err := nats.Connect(ns.url())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	end := strconv.FormatInt(int64(len(shardBytes(t, a.n.EventLog(), "alice"))), 10)
	junk := &nats.Msg{Subject: cfg.Subjects + ".evil.alice", Data: []byte("junk\n"), Header: nats.Header{natsync.HeaderOffset: []string{end}}}
	if _, err := js.PublishMsg(context.Background(), junk); err != nil {
		t.Fatal(err)
	}
	id := a.send("alice", "alice", "after the junk")
	settle(t, a)
	c := newMachine(t, "c", cfg) // reads the stream from its start, in one batch
	settle(t, a, c)
	if !c.has(id) {
		t.Errorf("c lacks alice's message published after junk for her shard: status %+v", c.s.Status())
	}
}
