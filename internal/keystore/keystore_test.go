package keystore_test

import (
	"crypto/ed25519"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/thrumhq/thrum/internal/keystore"
)

func pub(t *testing.T, s *keystore.Store, id string, create bool) ed25519.PublicKey {
	t.Helper()
	k, err := s.Key(id, create)
	if err != nil {
		t.Fatalf("Key(%q): %v", id, err)
	}
	if k == nil {
		return nil
	}
	return k.Public().(ed25519.PublicKey)
}

// A key is made once, 0600 in a 0700 directory, and is the same after a
// reopen and for callers racing to make it; without create, an identity
// with no key has none.
func TestKeysAreMadeOnceAndKept(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "keys")
	s, err := keystore.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if k := pub(t, s, "alice", false); k != nil {
		t.Fatal("alice has a key before one was made")
	}
	var wg sync.WaitGroup
	got := make([]ed25519.PublicKey, 8)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i] = pub(t, s, "user:leon", true)
		}()
	}
	wg.Wait()
	for _, k := range got[1:] {
		if !k.Equal(got[0]) {
			t.Fatal("racing callers got different keys")
		}
	}
	for path, want := range map[string]os.FileMode{dir: 0o700 | os.ModeDir, filepath.Join(dir, "user:leon.key"): 0o600} {
		if st, err := os.Stat(path); err != nil || st.Mode() != want {
			t.Errorf("%s: %v, mode %v; want %v", path, err, st.Mode(), want)
		}
	}
	again, err := keystore.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if k := pub(t, again, "user:leon", false); !k.Equal(got[0]) {
		t.Error("a reopened store reads another key")
	}
}

// A file that holds no key is an error that says so, never replaced;
// a name that could leave the directory is refused.
func TestBadKeyFilesAndNames(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "alice.key"), []byte("not a key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := keystore.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Key("alice", true); err == nil || !strings.Contains(err.Error(), "does not hold a key") {
		t.Errorf("a file that holds no key: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "alice.key")); string(b) != "not a key\n" {
		t.Error("the bad key file was replaced")
	}
	for _, id := range []string{"", "../x", "a/b", ".hidden", "-x"} {
		if _, err := s.Key(id, true); err == nil {
			t.Errorf("Key(%q) made a key", id)
		}
	}
}
