package admit_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/eventlog/admit"
)

// FuzzAdmit hands a gate the lines of any bytes as a remote shard file
// would hold them. Every line is accounted for once (held, imported or
// refused); nothing is imported twice; every imported line is in the
// shard byte for byte, passes the log's rules (place and fields), and
// reads back; and the
// same lines again import nothing.
//
//	go test ./eventlog/admit -run '^$' -fuzz FuzzAdmit -fuzztime 60s
func FuzzAdmit(f *testing.F) {
	now := time.Now()
	for _, seed := range [][]byte{
		message("alice"),
		bytes.Join([][]byte{message("alice"), message("alice"), message("bob")}, []byte("\n")),
		line(eventlog.TypeMessageRead, now, `"agent_id":"alice","session_id":"ses_1","message_ids":["msg_1"],"via":"<script>alert(1)</script>"`),
		line(eventlog.TypeMessageAck, now.Add(-9829*24*time.Hour), `"agent_id":"alice","session_id":"ses_1","message_id":"msg_1"`),
		line(eventlog.TypeCredentialAdd, now, `"agent_id":"alice","token_hash":"x"`),
		line(eventlog.TypeGroupDelete, now, `"name":"backend","agent_id":"owner"`),
		[]byte(`{"event_id":"01J0000000000000000000000","type":"message.create","timestamp":"x"}`),
		[]byte(`{"event_id":"\u0030","type":"t","timestamp":"2026-01-01T00:00:00Z","agent_id":"alice"}`),
		[]byte("\x00\xff{\n\n}"),
	} {
		f.Add(seed, false)
		f.Add(seed, true)
	}
	f.Fuzz(func(t *testing.T, data []byte, events bool) {
		shard := "alice"
		if events {
			shard = ""
		}
		l := openLog(t)
		g := newGate(t, l, &admit.Options{Judge: eachEvent(func(*eventlog.Event) admit.Verdict { return admit.Verdict{} })})
		lines := bytes.Split(data, []byte("\n"))
		src := admit.Source{File: eventlog.ShardPath(shard), Commit: "fuzz"}
		res, err := g.Admit(t.Context(), src, shard, lines)
		if err != nil {
			t.Fatalf("Admit: %v", err)
		}
		if got := res.Held + len(res.Imported) + len(res.Refused); got != len(lines) {
			t.Fatalf("%d lines, %d accounted for (%d held, %d imported, %d refused)", len(lines), got, res.Held, len(res.Imported), len(res.Refused))
		}
		have := map[string]bool{}
		var want [][]byte
		for _, e := range res.Imported {
			if have[e.ID] {
				t.Fatalf("event %q imported twice", e.ID)
			}
			have[e.ID] = true
			if err := eventlog.CheckShard(shard, e); err != nil {
				t.Fatalf("imported %q: %v", e.Raw, err)
			}
			if err := eventlog.CheckFields(e, time.Now()); err != nil {
				t.Fatalf("imported %q: %v", e.Raw, err)
			}
			want = append(want, e.Raw)
		}
		if len(want) > 0 {
			if got := shardLines(t, l, shard); !equalLines(got, want) {
				t.Fatalf("the shard holds %q, want %q", got, want)
			}
		}
		n := 0
		if _, err := l.Scan(t.Context(), nil, func(*eventlog.Event) error { n++; return nil }); err != nil || n != len(want) {
			t.Fatalf("Scan: %d events, %v; want %d", n, err, len(want))
		}
		again, err := g.Admit(t.Context(), src, shard, lines)
		if err != nil || len(again.Imported) != 0 {
			t.Fatalf("Admit again: %d imported, %v; want none", len(again.Imported), err)
		}
	})
}

func equalLines(a, b [][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}
