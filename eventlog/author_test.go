package eventlog

import (
	"strings"
	"testing"
)

// line is an event line of typ with the given payload fields.
func line(typ, fields string) []byte {
	if fields != "" {
		fields = "," + fields
	}
	return []byte(`{"event_id":"01JAAAAAAAAAAAAAAAAAAAAAAA","type":"` + typ + `","timestamp":"2025-01-02T03:04:05.000000006Z"` + fields + `}`)
}

// TestCheckShard: where each kind of event may enter from another
// machine, and what the refusal says.
func TestCheckShard(t *testing.T) {
	for _, c := range []struct {
		shard, typ, fields string
		refused            string // "" = admitted
	}{
		{"alice", TypeMessageCreate, `"agent_id":"alice"`, ""},
		{"alice", TypeMessageCreate, `"agent_id":"alice","acting_as":"user:bob"`, ""},
		{"alice", TypeMessageRead, `"agent_id":"alice"`, ""},
		{"alice", TypeMessageAck, `"agent_id":"alice","message_id":"msg_1"`, ""},
		{"bob", TypeMessageAck, `"agent_id":"alice","message_id":"msg_1"`, "an agent's shard holds only its own events"},
		{"", TypeMessageAck, `"agent_id":"alice","message_id":"msg_1"`, "message events belong in their author's shard"},
		{"bob", TypeMessageCreate, `"agent_id":"alice"`, `a message.create by "alice" in messages/bob.jsonl: an agent's shard holds only its own events`},
		{"bob", TypeMessageEdit, `"agent_id":"alice"`, "an agent's shard holds only its own events"},
		{"bob", TypeMessageCreate, ``, `by ""`},
		{"agent_role_x", TypeMessageCreate, `"agent_id":"agent:role:x"`, ""}, // a legacy ID's shard
		{"alice", TypeAgentRegister, `"agent_id":"alice"`, "only message events belong in an agent's shard"},
		{"alice", "app.audit", `"agent_id":"alice"`, ""}, // unknown types: by agent_id
		{"alice", "app.audit", `"agent_id":"bob"`, "an agent's shard holds only its own events"},
		{"", TypeMessageCreate, `"agent_id":"alice"`, "message events belong in their author's shard, messages/alice.jsonl"},
		{"", TypeAgentRegister, `"agent_id":"alice","token_hash":"x"`, ""},
		{"", TypeGroupCreate, `"name":"g","created_by":"owner"`, ""},
		{"", "app.audit", `"x":1`, ""},
		{"", TypeCredentialAdd, `"agent_id":"alice","token_hash":"x"`, "a credential.add in events.jsonl: credentials are local to the machine that issued them"},
		{"alice", TypeCredentialAdd, `"agent_id":"alice","token_hash":"x"`, "credentials are local"},
		{LocalShard, TypeCredentialAdd, `"agent_id":"alice","token_hash":"x"`, "the local shard belongs to this machine"},
		{LocalShard, TypeMessageCreate, `"agent_id":"alice"`, "the local shard belongs to this machine"},
	} {
		e, err := DecodeLine(line(c.typ, c.fields))
		if err != nil {
			t.Fatal(err)
		}
		err = CheckShard(c.shard, e)
		switch {
		case c.refused == "" && err != nil:
			t.Errorf("%s in %s (%s): refused: %v", c.typ, ShardPath(c.shard), c.fields, err)
		case c.refused != "" && (err == nil || !strings.Contains(err.Error(), c.refused)):
			t.Errorf("%s in %s (%s): %v, want %q", c.typ, ShardPath(c.shard), c.fields, err, c.refused)
		}
	}
}

// TestCheckPlace: in the log itself, credentials belong in the local
// shard, which holds anything this machine wrote; the rest is as for
// CheckShard.
func TestCheckPlace(t *testing.T) {
	for _, c := range []struct {
		shard, typ, fields string
		ok                 bool
	}{
		{LocalShard, TypeCredentialAdd, `"agent_id":"alice","token_hash":"x"`, true},
		{LocalShard, "local.note", ``, true},
		{"", TypeCredentialAdd, `"agent_id":"alice","token_hash":"x"`, false},
		{"alice", TypeMessageCreate, `"agent_id":"alice"`, true},
		{"bob", TypeMessageCreate, `"agent_id":"alice"`, false},
	} {
		e, err := DecodeLine(line(c.typ, c.fields))
		if err != nil {
			t.Fatal(err)
		}
		if err := CheckPlace(c.shard, e); (err == nil) != c.ok {
			t.Errorf("%s in %s: %v, want ok %v", c.typ, ShardPath(c.shard), err, c.ok)
		}
	}
}

// TestLocalShardPaths: the local shard's files are segments of their
// own shard, which no agent's shard name can reach, and Import refuses
// it.
func TestLocalShardPaths(t *testing.T) {
	for rel, want := range map[string]string{
		LocalFile:                 LocalShard,
		"local/000001.jsonl":      LocalShard,
		"messages/@local.jsonl":   "",
		"messages/local.jsonl":    "local",
		"messages/.local.jsonl":   ".local",
		"messages/local/x.jsonl":  "",
		EventsFile:                "",
		"events/000002.jsonl":     "",
		"local/000001.jsonl.lock": "",
	} {
		shard, _, ok := ParseSegmentPath(rel)
		if want == "" {
			if ok && shard == LocalShard {
				t.Errorf("%s parses as the local shard", rel)
			}
			continue
		}
		if !ok || shard != want {
			t.Errorf("ParseSegmentPath(%s) = %q, %v; want %q", rel, shard, ok, want)
		}
	}
	if ShardPath(LocalShard) != LocalFile || SegmentPath(LocalShard, 2) != "local/000002.jsonl" {
		t.Errorf("the local shard's paths: %s, %s", ShardPath(LocalShard), SegmentPath(LocalShard, 2))
	}
	l, err := Open(t.TempDir(), &Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := l.Import(t.Context(), LocalShard, [][]byte{line(TypeCredentialAdd, `"agent_id":"a","token_hash":"x"`)}); err == nil {
		t.Error("Import into the local shard succeeded")
	}
	if _, err := l.Import(t.Context(), "bob", [][]byte{line(TypeMessageCreate, `"agent_id":"alice"`)}); err == nil {
		t.Error("Import of alice's message into bob's shard succeeded")
	}
}

// FuzzCheckShard feeds any line a remote may hold to the authorship
// rules: they must answer, never panic.
func FuzzCheckShard(f *testing.F) {
	f.Add(line(TypeMessageCreate, `"agent_id":"alice","acting_as":"user:x"`), "alice")
	f.Add(line(TypeThreadCreate, `"created_by":7`), "")
	f.Add(line("app.x", `"agent_id":null`), "bob")
	f.Add(line(TypeCredentialAdd, `"agent_id":"alice"`), LocalShard)
	f.Fuzz(func(t *testing.T, b []byte, shard string) {
		e, err := DecodeLine(b)
		if err != nil {
			return
		}
		_ = CheckShard(shard, e)
		_ = CheckPlace(shard, e)
		_ = Claims(e)
	})
}
