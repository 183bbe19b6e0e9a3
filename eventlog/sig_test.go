package eventlog

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"strings"
	"testing"
	"time"
)

// signer signs lines as a node does: with priv, for repoID.
func signer(priv ed25519.PrivateKey, repoID string) func([]byte) (Sig, error) {
	kid := KeyID(priv.Public().(ed25519.PublicKey))
	return func(unsigned []byte) (Sig, error) {
		s, err := priv.Sign(nil, SignedMessage(repoID, unsigned), crypto.Hash(0))
		return Sig{KeyID: kid, Sig: s}, err
	}
}

// signLine signs an unsigned line as the committer does.
func signLine(t testing.TB, unsigned []byte, sign func([]byte) (Sig, error)) []byte {
	t.Helper()
	s, err := sign(unsigned)
	if err != nil {
		t.Fatal(err)
	}
	return withSig(unsigned, s)
}

func newKey(t testing.TB) (ed25519.PublicKey, ed25519.PrivateKey) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return pub, priv
}

// A signed event's line is the line the log would write unsigned, with
// one member more at its end: the signature over exactly those bytes,
// which a verifier checks without encoding anything again. The member
// costs SigMemberLen bytes; an unsigned line has none.
func TestAppendSignedLineFormat(t *testing.T) {
	pub, priv := newKey(t)
	l := openLog(t, t.TempDir(), nil)
	ctx := context.Background()
	p := MessageCreate{MessageID: "msg_1", AgentID: "alice", SessionID: "ses_1", Format: "markdown", Content: "é \"quoted\" <b>\n,\"sig\":\"", Priority: "normal"}
	plain := &Event{Type: TypeMessageCreate, Shard: "alice", Payload: p}
	signed := &Event{Type: TypeMessageCreate, Shard: "alice", Payload: p, Sign: signer(priv, "repo1")}
	if err := l.Append(ctx, plain, signed); err != nil {
		t.Fatal(err)
	}
	if Signed(plain.Raw) {
		t.Errorf("an event appended without Sign reads as signed: %s", plain.Raw)
	}
	s, unsigned, ok, err := ParseSig(signed.Raw)
	if !ok || err != nil {
		t.Fatalf("ParseSig(%s) = signed %v, %v", signed.Raw, ok, err)
	}
	if !bytes.HasSuffix(signed.Raw, []byte(`,"sig":"`+s.String()+`"}`)) || len(signed.Raw)-len(unsigned) != SigMemberLen {
		t.Errorf("the signature is not the line's last member of %d bytes: %s", SigMemberLen, signed.Raw)
	}
	// The same event unsigned, with the signed one's ID and time, is
	// byte for byte what the signature covers.
	var buf bytes.Buffer
	again := &Event{ID: signed.ID, Type: signed.Type, Time: signed.Time, Payload: p}
	if err := again.encode(&buf, again.Payload); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(unsigned, bytes.TrimSuffix(buf.Bytes(), []byte("\n"))) {
		t.Errorf("the signature covers\n%s\nnot the encoded line\n%s", unsigned, buf.Bytes())
	}
	if !VerifyLine("repo1", s, unsigned, pub) {
		t.Error("the signature does not verify")
	}
	if VerifyLine("repo2", s, unsigned, pub) {
		t.Error("a signature made for one repository verifies for another")
	}
	// Scan reads back the very line, and decodes its payload.
	evs, _ := scanAll(t, l, nil)
	if len(evs) != 2 || !bytes.Equal(evs[1].Raw, signed.Raw) {
		t.Fatalf("Scan returned %d events, the signed one as %s", len(evs), evs[len(evs)-1].Raw)
	}
	if got, err := PayloadAs[MessageCreate](evs[1]); err != nil || got.Content != p.Content {
		t.Errorf("the signed line's payload decodes to %+v, %v", got, err)
	}
}

// A signer that fails fails its own Append call and writes nothing.
func TestAppendSignFailure(t *testing.T) {
	l := openLog(t, t.TempDir(), nil)
	boom := errors.New("no key")
	e := &Event{Type: TypeGroupCreate, Payload: GroupCreate{Name: "ops", CreatedBy: "owner"},
		Sign: func([]byte) (Sig, error) { return Sig{}, boom }}
	if err := l.Append(context.Background(), e); !errors.Is(err, boom) {
		t.Fatalf("Append with a failing signer: %v", err)
	}
	if evs, _ := scanAll(t, l, nil); len(evs) != 0 {
		t.Errorf("the log holds %d events after the failed Append", len(evs))
	}
}

// ParseSig tells an unsigned line from a signed one and a malformed
// signature, and never takes a "sig" inside the payload for the line's.
func TestParseSig(t *testing.T) {
	_, priv := newKey(t)
	var buf bytes.Buffer
	e := &Event{ID: NewID(), Type: TypeMessageCreate, Time: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC), Payload: MessageCreate{MessageID: "m", AgentID: "a", Priority: "normal"}}
	if err := e.encode(&buf, e.Payload); err != nil {
		t.Fatal(err)
	}
	good := signLine(t, bytes.TrimSuffix(buf.Bytes(), []byte("\n")), signer(priv, ""))
	cut := bytes.LastIndex(good, []byte(`,"sig":"`))
	for _, c := range []struct {
		name        string
		line        string
		signed, bad bool
	}{
		{"signed", string(good), true, false},
		{"unsigned", `{"event_id":"x","type":"t","timestamp":"2026-01-01T00:00:00Z"}`, false, false},
		{"sig in a nested object", `{"event_id":"x","type":"t","structured":{"a":1,"sig":"v"}}`, false, false},
		{"sig member too short", string(good[:cut]) + `,"sig":"abc.def"}`, true, true},
		{"sig not base64", string(good[:cut]) + `,"sig":"` + strings.Repeat("!", 11) + "." + strings.Repeat("*", 86) + `"}`, true, true},
		{"nothing after the key", `{"a":1,"sig":"}`, false, false},
		{"quote in the value", string(good[:cut]) + `,"sig":"a"b"}`, false, false},
	} {
		_, _, signed, err := ParseSig([]byte(c.line))
		if signed != c.signed || (err != nil) != c.bad {
			t.Errorf("%s: ParseSig = signed %v, err %v; want signed %v, bad %v", c.name, signed, err, c.signed, c.bad)
		}
		if Signed([]byte(c.line)) != c.signed {
			t.Errorf("%s: Signed = %v", c.name, !c.signed)
		}
	}
}

// FuzzVerify: no input makes ParseSig or VerifyLine panic, and a line
// verifies with a key only if it is, byte for byte, a line signed with
// that key: a changed body, ID, time or signature never does.
func FuzzVerify(f *testing.F) {
	seed := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, ed25519.SeedSize))
	pub := seed.Public().(ed25519.PublicKey)
	signedLines := map[string]bool{}
	for _, p := range []any{
		MessageCreate{MessageID: "msg_1", AgentID: "alice", Format: "markdown", Content: "ship it", Priority: "normal"},
		AgentRegister{AgentID: "alice", Kind: "agent", Key: EncodeKey(pub), Machine: EncodeKey(pub)},
		GroupMember{Group: "backend", MemberType: "agent", MemberID: "bob", AgentID: "owner", Machine: EncodeKey(pub)},
	} {
		var buf bytes.Buffer
		e := &Event{ID: "01J00000000000000000000000", Type: TypeMessageCreate, Time: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC), Payload: p}
		if err := e.encode(&buf, e.Payload); err != nil {
			f.Fatal(err)
		}
		line := signLine(f, bytes.TrimSuffix(buf.Bytes(), []byte("\n")), signer(seed, "repo"))
		signedLines[string(line)] = true
		f.Add(line)
		f.Add(bytes.Replace(line, []byte("ship it"), []byte("ship it!"), 1))
	}
	f.Add([]byte(`{"event_id":"x","type":"t","timestamp":"2026-01-01T00:00:00Z","sig":"AAAAAAAAAAA.` + strings.Repeat("A", 86) + `"}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		s, unsigned, signed, err := ParseSig(line)
		if !signed || err != nil {
			return
		}
		if VerifyLine("repo", s, unsigned, pub) && !signedLines[string(line)] {
			t.Fatalf("a line nobody signed verifies: %q", line)
		}
	})
}

// The signed line format, pinned: Ed25519 is deterministic, so a fixed
// key, event and repository give these exact bytes. A change here is a
// change of the log's format, which every clone must read.
func TestSignedLineGolden(t *testing.T) {
	key := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, ed25519.SeedSize))
	var buf bytes.Buffer
	e := &Event{ID: "01JGOLDEN00000000000000000", Type: TypeMessageCreate, Time: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC),
		Payload: MessageCreate{MessageID: "msg_1", AgentID: "alice", SessionID: "ses_1", Format: "markdown", Content: "ship it", Priority: "normal"}}
	if err := e.encode(&buf, e.Payload); err != nil {
		t.Fatal(err)
	}
	got := string(signLine(t, bytes.TrimSuffix(buf.Bytes(), []byte("\n")), signer(key, "0123456789abcdef")))
	const want = `{"event_id":"01JGOLDEN00000000000000000","type":"message.create","timestamp":"2026-11-29T12:00:00.000000000Z",` +
		`"message_id":"msg_1","agent_id":"alice","session_id":"ses_1","format":"markdown","content":"ship it","priority":"normal",` +
		`"sig":"NHUPmL1Z_Pw.Evg3zTkL-565r72T8Ng1MtiISTjv2eQSAoajM19sgr7nuD_bX-q0APgGBO8YRo-_RlB4M1LaFinlW9IDPNVDDg"}`
	if got != want {
		t.Errorf("signed line\n got: %s\nwant: %s", got, want)
	}
}
