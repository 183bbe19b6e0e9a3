package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/thrumhq/thrum/internal/thrumtest"
	"github.com/thrumhq/thrum/rpc"
)

// remoteObjects returns every object of a bare repository, whole, as
// git cat-file --batch-all-objects --batch prints them.
func remoteObjects(t *testing.T, bare string) []byte {
	t.Helper()
	cmd := exec.Command("git", "-C", bare, "cat-file", "--batch-all-objects", "--batch")
	cmd.Env = append(os.Environ(), thrumtest.GitEnv()...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git cat-file: %v", err)
	}
	return out
}

// TestSealedSyncEndToEnd runs two clones with the real binary. After
// `thrum sync encrypt` on a, no object of the bare remote holds a body
// a sent (one sent before does: git keeps history); b, without the key,
// shows the placeholder, says in key status what waits, and delivers
// nothing; after `thrum key import` of the file `thrum key export`
// wrote, b reads and searches the message, and `thrum wait` delivers it
// once.
func TestSealedSyncEndToEnd(t *testing.T) {
	t.Parallel()
	thrumBin := thrumtest.Binary(t)
	remote := thrumtest.GitRemote(t)
	dirA, dirB := remote.Clone("a"), remote.Clone("b")
	a := &syncCLI{thrumCLI: &thrumCLI{t: t, repo: dirA, bin: thrumBin}, name: "a", agent: "alice"}
	b := &syncCLI{thrumCLI: &thrumCLI{t: t, repo: dirB, bin: thrumBin}, name: "b", agent: "bob"}
	for _, c := range []*syncCLI{a, b} {
		c.do("", "init")
		c.startDaemon("--sync-interval", "1h")
	}
	a.do("", "quickstart", "--name", "alice", "--role", "implementer", "--module", "auth")
	b.do("", "quickstart", "--name", "bob", "--role", "reviewer", "--module", "auth")
	sync := func() {
		a.forceSync()
		b.forceSync()
		a.forceSync()
	}
	sync()
	const before, token = "cleartext-heron-1138", "sealed-ibex-5712"
	a.do("alice", "send", "said before sealing: "+before, "--to", "@bob")
	sync()
	b.do("bob", "wait", "--timeout", "10s") // delivered: the queue is empty again

	out := a.do("", "sync", "encrypt").stdout
	t.Logf("a: thrum sync encrypt:\n%s", out)
	contains(t, "sync encrypt", out, "sealed from now on", "Keep a backup")
	a.do("alice", "send", "the launch code is "+token, "--to", "@bob")
	sync()

	objects := remoteObjects(t, remote.Path)
	if bytes.Contains(objects, []byte(token)) {
		t.Fatal("the bare remote holds a sealed body")
	}
	if !bytes.Contains(objects, []byte(before)) {
		t.Error("the remote lacks the body sent before sealing: is this the remote's history?")
	}
	if !bytes.Contains(objects, []byte(`"sealed":{"content":"`)) {
		t.Error("the remote holds no sealed line")
	}

	inbox := b.do("bob", "inbox").stdout
	t.Logf("b, keyless: thrum inbox:\n%s", inbox)
	contains(t, "b inbox", inbox, "encrypted message from alice (import the team key)")
	var st rpc.KeyStatus
	b.json(&st, "", "key", "status")
	if st.Waiting != 1 || st.Sealing != "" {
		t.Errorf("b key status: %+v", st)
	}
	status := b.do("", "key", "status").stdout
	t.Logf("b: thrum key status:\n%s", status)
	contains(t, "b key status", status, "1 message waits for the team key")
	status = b.do("", "sync", "status").stdout
	t.Logf("b: thrum sync status:\n%s", status)
	contains(t, "b sync status", status, "Sealed: 1 message waits for the team key")
	if r := b.withEnv(map[string]string{"THRUM_NAME": "bob"}, "wait", "--timeout", "1s"); r.code == 0 {
		t.Fatalf("b delivered a message no key opens:\n%s", r)
	}
	// Marking all read goes until nothing is unread: what waits for the
	// key is not, and stays for the import to deliver.
	b.do("bob", "message", "read", "--all")

	file := filepath.Join(t.TempDir(), "team.age")
	pass := filepath.Join(t.TempDir(), "pass")
	if err := os.WriteFile(pass, []byte("correct horse battery staple\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out = a.do("", "key", "export", file, "--passphrase-file", pass).stdout
	contains(t, "key export", out, "Wrote 1 team key", "Keep a backup")
	if raw, _ := os.ReadFile(file); !bytes.HasPrefix(raw, []byte("age-encryption.org/v1")) {
		t.Fatalf("the exported file is not an age file:\n%s", raw)
	}
	if r := b.withEnv(nil, "key", "import", file, "--passphrase-file", os.DevNull); r.code == 0 {
		t.Fatal("a key file opened with an empty passphrase")
	}
	out = b.do("", "key", "import", file, "--passphrase-file", pass).stdout
	t.Logf("b: thrum key import:\n%s", out)
	contains(t, "key import", out, "Imported 1 new team key; 1 message opened, queued for delivery")

	got := b.do("bob", "wait", "--timeout", "10s").stdout
	t.Logf("b: thrum wait after the import:\n%s", got)
	contains(t, "b wait", got, token)
	if r := b.withEnv(map[string]string{"THRUM_NAME": "bob"}, "wait", "--timeout", "1s"); r.code == 0 {
		t.Fatalf("b delivered the message twice:\n%s", r)
	}
	var found rpc.SearchMessagesResult
	b.json(&found, "bob", "search", token)
	if len(found.Results) != 1 {
		t.Errorf("b finds the opened message %d times", len(found.Results))
	}
	if strings.Contains(b.do("bob", "inbox").stdout, "encrypted message") {
		t.Error("b still shows the placeholder")
	}
	// b seals its own sends now, with the imported key.
	b.do("bob", "send", "reply "+token+"-b", "--to", "@alice")
	b.forceSync()
	if bytes.Contains(remoteObjects(t, remote.Path), []byte(token+"-b")) {
		t.Error("b's send after the import left in clear")
	}

	// A rotation on a, given to b's machine through sync: b takes it on
	// its owner's word, and reads what the new key seals.
	contains(t, "key rotate", a.do("", "key", "rotate").stdout, "seals from now on", "1 older key still open")
	contains(t, "key grant", a.do("", "key", "grant", "bob").stdout, "Granted 2 team keys to machine")
	a.do("alice", "send", "rotated "+token+"-r", "--to", "@bob")
	sync()
	status = b.do("", "key", "status").stdout
	t.Logf("b: thrum key status with a grant:\n%s", status)
	contains(t, "b key status", status, "granted 1 new key", "thrum key accept")
	out = b.do("", "key", "accept").stdout
	t.Logf("b: thrum key accept:\n%s", out)
	contains(t, "key accept", out, "Took 1 new team key; 1 message opened")
	contains(t, "b wait after accept", b.do("bob", "wait", "--timeout", "10s").stdout, token+"-r")
	if bytes.Contains(remoteObjects(t, remote.Path), []byte(token+"-r")) {
		t.Error("a's send after the rotation left in clear")
	}
}
