package natsync_test

import (
	"context"
	"testing"
	"time"

	"github.com/thrumhq/thrum/eventlog/natsync"
)

func testConfig(ns *natsServer) natsync.Config {
	return natsync.Config{URL: ns.url(), Stream: "thrum-test", Subjects: "thrum.test"}
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
