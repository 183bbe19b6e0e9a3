package eventlog

import (
	"bytes"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// testKeys is a TeamKeys held in memory.
type testKeys struct {
	mu      sync.Mutex
	held    map[string]*TeamKey
	sealing *TeamKey
}

func newTestKeys(t testing.TB, seal bool) *testKeys {
	t.Helper()
	k := &testKeys{held: map[string]*TeamKey{}}
	k.add(t, seal)
	return k
}

// add makes a new key; with seal it seals from now on.
func (k *testKeys) add(t testing.TB, seal bool) *TeamKey {
	t.Helper()
	secret := make([]byte, TeamKeyLen)
	rand.Read(secret)
	tk, err := NewTeamKey(secret)
	if err != nil {
		t.Fatal(err)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.held[tk.ID()] = tk
	if seal {
		k.sealing = tk
	}
	return tk
}

func (k *testKeys) TeamKey(id string) *TeamKey {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.held[id]
}

func (k *testKeys) Sealing() *TeamKey {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.sealing
}

const bodyToken = "zebra-quartz-4711"

func sealedCreate(shard string) *Event {
	return &Event{Type: TypeMessageCreate, Shard: shard, Payload: MessageCreate{
		MessageID: "msg_1", AgentID: "alice", SessionID: "ses_1", Format: "markdown", Priority: "normal",
		Content: "say " + bodyToken, Structured: json.RawMessage(`{"k":"` + bodyToken + `"}`),
		Scopes: []Pair{{Type: "repo", Value: "thrum"}},
	}}
}

// The log's lines carry ciphertext for the body and clear text for the
// envelope; a log with the key reads the body, one without sees Sealed.
func TestSealedBodiesLeaveOnlyCiphertextInTheLog(t *testing.T) {
	dir := t.TempDir()
	keys := newTestKeys(t, true)
	l := openLog(t, dir, &Options{TeamKeys: keys})
	edit := "now " + bodyToken
	byPointer := sealedCreate("alice")
	p := byPointer.Payload.(MessageCreate)
	byPointer.Payload = &p
	appendOK(t, l, sealedCreate("alice"), sealedCreate(LocalShard), byPointer,
		&Event{Type: TypeMessageEdit, Shard: "alice", Payload: MessageEdit{MessageID: "msg_1", AgentID: "alice", Content: &edit}})
	raw := readFile(t, filepath.Join(dir, ShardPath("alice")))
	if strings.Contains(raw, bodyToken) {
		t.Fatalf("a sealed shard holds the body in clear:\n%s", raw)
	}
	for _, clear := range []string{`"agent_id":"alice"`, `"message_id":"msg_1"`, `"scopes":[{"type":"repo","value":"thrum"}]`, `"sealed":{"content":"`} {
		if !strings.Contains(raw, clear) {
			t.Errorf("the sealed line lacks %s:\n%s", clear, raw)
		}
	}
	if local := readFile(t, filepath.Join(dir, ShardPath(LocalShard))); !strings.Contains(local, bodyToken) {
		t.Errorf("the local shard, which never leaves, was sealed:\n%s", local)
	}

	evs, _ := scanAll(t, l, nil)
	var opened []string
	for _, e := range evs {
		switch p := e.decoded.(type) {
		case MessageCreate:
			if p.Sealed != nil || !strings.Contains(p.Content, bodyToken) || !strings.Contains(string(p.Structured), bodyToken) {
				t.Errorf("the create did not open: %+v", p)
			}
			opened = append(opened, p.Content)
		case MessageEdit:
			if p.Sealed != nil || p.Content == nil || *p.Content != edit || p.Structured != nil {
				t.Errorf("the edit did not open: %+v", p)
			}
			opened = append(opened, *p.Content)
		}
	}
	if len(opened) != 4 {
		t.Fatalf("opened %v, want the four bodies", opened)
	}
	l.Close()

	keyless := openLog(t, dir, nil)
	evs, _ = scanAll(t, keyless, nil)
	for _, e := range evs {
		if e.Shard != "alice" {
			continue
		}
		switch p := e.decoded.(type) {
		case MessageCreate:
			if p.Sealed == nil || p.Content != "" || p.Structured != nil || p.Sealed.KeyID() != keys.sealing.ID() {
				t.Errorf("a keyless log shows %+v, want the sealed fields and no body", p)
			}
		case MessageEdit:
			if p.Sealed == nil || p.Content != nil {
				t.Errorf("a keyless log shows %+v, want the sealed edit", p)
			}
		}
		if err := CheckFields(e, time.Now()); err != nil {
			t.Errorf("admission would refuse a sealed line: %v", err)
		}
		// A key held later opens the event decoded before it.
		if !e.Open(keys) {
			t.Errorf("event %s does not open once the key is held", e.ID)
		}
		if p, _ := PayloadAs[MessageCreate](e); e.Type == TypeMessageCreate && p.Content != "say "+bodyToken {
			t.Errorf("opened later: %q", p.Content)
		}
	}
}

// A sealed field opens only in the event, and as the field, it was
// sealed for: moved into another event (or another field, or with
// another author) it fails, and so does a flipped bit.
func TestSealedFieldOpensOnlyWhereItWasSealed(t *testing.T) {
	keys := newTestKeys(t, true)
	k := keys.sealing
	f := sealField(k, "01EVENTA", TypeMessageCreate, "alice", "content", []byte(bodyToken))
	if got, err := openField(keys, "01EVENTA", TypeMessageCreate, "alice", "content", f); err != nil || string(got) != bodyToken {
		t.Fatalf("openField in its own event: %q, %v", got, err)
	}
	for name, c := range map[string][4]string{
		"another event":  {"01EVENTB", TypeMessageCreate, "alice", "content"},
		"another type":   {"01EVENTA", TypeMessageEdit, "alice", "content"},
		"another author": {"01EVENTA", TypeMessageCreate, "mallory", "content"},
		"another field":  {"01EVENTA", TypeMessageCreate, "alice", "structured"},
	} {
		if _, err := openField(keys, c[0], c[1], c[2], c[3], f); err == nil {
			t.Errorf("%s: a moved ciphertext opened", name)
		}
	}
	b, _ := b64.DecodeString(f)
	b[len(b)-1] ^= 1
	if _, err := openField(keys, "01EVENTA", TypeMessageCreate, "alice", "content", b64.EncodeToString(b)); err == nil {
		t.Error("a flipped bit opened")
	}
	other := newTestKeys(t, true)
	if _, err := openField(other, "01EVENTA", TypeMessageCreate, "alice", "content", f); !errors.Is(err, ErrNoTeamKey) {
		t.Errorf("without its key: %v, want ErrNoTeamKey", err)
	}

	// The same through the log: a line whose sealed member is another
	// event's stays sealed after decoding.
	dir := t.TempDir()
	l := openLog(t, dir, &Options{TeamKeys: keys})
	a, b2 := sealedCreate("alice"), sealedCreate("alice")
	appendOK(t, l, a, b2)
	l.Close()
	path := filepath.Join(dir, ShardPath("alice"))
	lines := bytes.Split(bytes.TrimSpace([]byte(readFile(t, path))), []byte("\n"))
	i := bytes.Index(lines[0], []byte(`"sealed":`))
	j := bytes.Index(lines[1], []byte(`"sealed":`))
	moved := append(append([]byte{}, lines[1][:j]...), lines[0][i:]...) // a's sealed member in b's line
	writeFile(t, path, string(lines[0])+"\n"+string(moved)+"\n")
	l = openLog(t, dir, &Options{TeamKeys: keys})
	evs, _ := scanAll(t, l, nil)
	if p := evs[0].decoded.(MessageCreate); p.Sealed != nil {
		t.Errorf("the untouched line did not open")
	}
	if p := evs[1].decoded.(MessageCreate); p.Sealed == nil || p.Content != "" {
		t.Errorf("a ciphertext moved into another event opened: %+v", p)
	}
}

// Old keys keep opening what they sealed after a new key seals.
func TestRotatedKeysKeepOldBodiesReadable(t *testing.T) {
	dir := t.TempDir()
	keys := newTestKeys(t, true)
	first := keys.sealing
	l := openLog(t, dir, &Options{TeamKeys: keys})
	appendOK(t, l, sealedCreate("alice"))
	second := keys.add(t, true)
	appendOK(t, l, sealedCreate("alice"))
	evs, _ := scanAll(t, l, nil)
	for _, e := range evs {
		if p := e.decoded.(MessageCreate); p.Sealed != nil || !strings.Contains(p.Content, bodyToken) {
			t.Errorf("event %s: %+v", e.ID, p)
		}
	}
	lines := strings.Split(readFile(t, filepath.Join(dir, ShardPath("alice"))), "\n")
	for i, k := range []*TeamKey{first, second} { // a field's first 6 bytes are its key's ID's
		if !strings.Contains(lines[i], `"sealed":{"content":"`+k.ID()[:8]) {
			t.Errorf("line %d is not sealed with key %s: %s", i, k.ID(), lines[i])
		}
	}
}

// The overhead of a sealed field is fixed: key ID, nonce and tag.
func TestSealedFieldOverhead(t *testing.T) {
	keys := newTestKeys(t, true)
	for _, n := range []int{0, 1, 100, 4096} {
		f := sealField(keys.sealing, "01E", TypeMessageCreate, "a", "content", make([]byte, n))
		b, err := b64.DecodeString(f)
		if err != nil || len(b) != n+SealOverhead {
			t.Errorf("%d bytes sealed into %d (%v), want %d", n, len(b), err, n+SealOverhead)
		}
	}
	if SealOverhead > 48 {
		t.Errorf("SealOverhead is %d, over the 48-byte budget", SealOverhead)
	}
}

// CheckFields holds a sealed member to its encoding.
func TestCheckFieldsSealed(t *testing.T) {
	keys := newTestKeys(t, true)
	good := sealField(keys.sealing, "01E", TypeMessageCreate, "alice", "content", []byte("x"))
	other := sealField(newTestKeys(t, true).sealing, "01E", TypeMessageCreate, "alice", "structured", []byte("{}"))
	create := func(content string, s *Sealed) *Event {
		return &Event{Type: TypeMessageCreate, Payload: MessageCreate{MessageID: "m", AgentID: "alice", Priority: "normal", Content: content, Sealed: s}}
	}
	for name, c := range map[string]struct {
		e  *Event
		ok bool
	}{
		"sealed":              {create("", &Sealed{Content: good}), true},
		"clear":               {create("hi", nil), true},
		"clear and sealed":    {create("hi", &Sealed{Content: good}), false},
		"empty sealed":        {create("", &Sealed{}), false},
		"not base64":          {create("", &Sealed{Content: "!!"}), false},
		"too short":           {create("", &Sealed{Content: b64.EncodeToString(make([]byte, SealOverhead-1))}), false},
		"two keys":            {create("", &Sealed{Content: good, Structured: other}), false},
		"edit sealed":         {&Event{Type: TypeMessageEdit, Payload: MessageEdit{MessageID: "m", AgentID: "alice", Sealed: &Sealed{Content: good}}}, true},
		"edit clear + sealed": {&Event{Type: TypeMessageEdit, Payload: MessageEdit{MessageID: "m", AgentID: "alice", Structured: json.RawMessage(`{}`), Sealed: &Sealed{Content: good}}}, false},
	} {
		err := CheckFields(c.e, time.Now())
		if (err == nil) != c.ok {
			t.Errorf("%s: CheckFields = %v, want ok %v", name, err, c.ok)
		}
	}
}

// FuzzOpenSealed feeds any bytes to the decoder of sealed fields, alone
// and inside a line: it never panics, and what opens is what was sealed.
func FuzzOpenSealed(f *testing.F) {
	keys := newTestKeys(f, true)
	f.Add(sealField(keys.sealing, "01E", TypeMessageCreate, "alice", "content", []byte("hello")), "01E")
	f.Add("", "01E")
	f.Add(b64.EncodeToString(make([]byte, SealOverhead)), "x")
	f.Fuzz(func(t *testing.T, sealed, id string) {
		plain, err := openField(keys, id, TypeMessageCreate, "alice", "content", sealed)
		if err == nil {
			again := sealField(keys.sealing, id, TypeMessageCreate, "alice", "content", plain)
			if back, err := openField(keys, id, TypeMessageCreate, "alice", "content", again); err != nil || !bytes.Equal(back, plain) {
				t.Fatalf("sealed again, %q opens as %q, %v", plain, back, err)
			}
		}
		s, _ := json.Marshal(sealed)
		line := []byte(`{"event_id":"` + "01E" + `","type":"message.create","timestamp":"2026-01-01T00:00:00.000000000Z","message_id":"m","agent_id":"alice","content":"","priority":"normal","sealed":{"content":` + string(s) + `,"structured":` + string(s) + `}}`)
		e, err := DecodeLine(line)
		if err != nil {
			return
		}
		_ = CheckFields(e, time.Now())
		e.decodePayload(keys)
		_ = e.Open(keys)
	})
}

// A grant opens only with the key of the machine it was made for, in
// the repository and from the machine it names.
func TestGrantOpensOnlyForItsMachine(t *testing.T) {
	to, _ := ecdh.X25519().GenerateKey(rand.Reader)
	other, _ := ecdh.X25519().GenerateKey(rand.Reader)
	w, err := WrapKeys(EncodeKEM(to.PublicKey()), "repo", "A", "B", []byte("keys"))
	if err != nil {
		t.Fatal(err)
	}
	g := KeyGrant{Machine: "A", To: "B", KEM: EncodeKEM(to.PublicKey()), Wrapped: w}
	if got, err := UnwrapKeys(to, "repo", g); err != nil || string(got) != "keys" {
		t.Fatalf("UnwrapKeys: %q, %v", got, err)
	}
	if _, err := UnwrapKeys(other, "repo", g); err == nil {
		t.Error("another machine's key opened the grant")
	}
	for name, bad := range map[string]KeyGrant{
		"from another": {Machine: "C", To: "B", Wrapped: w},
		"to another":   {Machine: "A", To: "C", Wrapped: w},
	} {
		if _, err := UnwrapKeys(to, "repo", bad); err == nil {
			t.Errorf("%s: the grant opened", name)
		}
	}
	if _, err := UnwrapKeys(to, "another repo", g); err == nil {
		t.Error("the grant opened in another repository")
	}
}

// FuzzUnwrapKeys feeds any wrapped bytes to the grant decoder.
func FuzzUnwrapKeys(f *testing.F) {
	to, _ := ecdh.X25519().GenerateKey(rand.Reader)
	w, _ := WrapKeys(EncodeKEM(to.PublicKey()), "repo", "A", "B", []byte("keys"))
	f.Add(w)
	f.Add("")
	f.Add("AAAA")
	f.Fuzz(func(t *testing.T, wrapped string) {
		got, err := UnwrapKeys(to, "repo", KeyGrant{Machine: "A", To: "B", Wrapped: wrapped})
		if err == nil && wrapped != w && string(got) == "keys" {
			t.Fatalf("a changed grant %q opened", wrapped)
		}
		line := []byte(`{"event_id":"01E","type":"key.grant","timestamp":"2026-01-01T00:00:00.000000000Z","machine":"A","to":"B","kem":"` + EncodeKEM(to.PublicKey()) + `","wrapped":` + strconvQuote(wrapped) + `}`)
		if e, err := DecodeLine(line); err == nil {
			_ = CheckFields(e, time.Now())
		}
	})
}

func strconvQuote(s string) string { b, _ := json.Marshal(s); return string(b) }
