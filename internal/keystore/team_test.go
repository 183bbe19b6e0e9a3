package keystore_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/thrumhq/thrum/internal/keystore"
)

// Team keys are kept 0600 across a reopen; the newest seals, every one
// opens; a key added twice is kept once; a damaged file holds no key
// rather than a wrong one.
func TestTeamKeysAreKeptAndTheNewestSeals(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "keys")
	s, err := keystore.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if s.Sealing() != nil {
		t.Fatal("a new store seals")
	}
	first, err := s.NewTeamKey()
	if err != nil {
		t.Fatal(err)
	}
	second, err := s.NewTeamKey()
	if err != nil {
		t.Fatal(err)
	}
	if s.Sealing().ID() != second.ID() || s.TeamKey(first.ID()) == nil {
		t.Fatalf("sealing %s, want the newest %s, with the first still held", s.Sealing().ID(), second.ID())
	}
	fi, err := os.Stat(filepath.Join(dir, keystore.TeamFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("team file: %v, %v", fi, err)
	}

	again, err := keystore.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if again.Sealing() == nil || again.Sealing().ID() != second.ID() || again.TeamKey(first.ID()) == nil {
		t.Fatal("the keys did not survive a reopen")
	}
	secrets, err := again.TeamSecrets()
	if err != nil || len(secrets) != 2 {
		t.Fatalf("TeamSecrets: %d, %v", len(secrets), err)
	}
	other, _ := keystore.Open(filepath.Join(t.TempDir(), "other"))
	added, err := other.AddTeamKeys(append(secrets, secrets...))
	if err != nil || len(added) != 2 || other.Sealing().ID() != second.ID() {
		t.Fatalf("AddTeamKeys: %v, %v; sealing %v", added, err, other.Sealing())
	}
	if added, err := other.AddTeamKeys(secrets); err != nil || len(added) != 0 {
		t.Fatalf("keys added again: %v, %v", added, err)
	}
	parsed, err := keystore.ParseTeamKeys(bytes.NewReader(keystore.FormatTeamKeys(secrets)))
	if err != nil || len(parsed) != 2 || !bytes.Equal(parsed[1].Secret, secrets[1].Secret) {
		t.Fatalf("a formatted file parses as %v, %v", parsed, err)
	}

	if err := os.WriteFile(filepath.Join(dir, keystore.TeamFile), []byte("not a key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	damaged, _ := keystore.Open(dir)
	if damaged.Sealing() != nil || damaged.TeamKey(first.ID()) != nil {
		t.Fatal("a damaged team file gave a key")
	}
	if _, err := damaged.TeamSecrets(); err == nil {
		t.Fatal("a damaged team file read without an error")
	}
}

// The machine's X25519 key is made once, kept 0600, the same after a
// reopen.
func TestKEMKeyIsMadeOnce(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "keys")
	s, _ := keystore.Open(dir)
	k, err := s.KEMKey()
	if err != nil {
		t.Fatal(err)
	}
	again, _ := keystore.Open(dir)
	k2, err := again.KEMKey()
	if err != nil || !k.Equal(k2) {
		t.Fatalf("a reopened store has another KEM key (%v)", err)
	}
	if fi, err := os.Stat(filepath.Join(dir, keystore.KEMFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("KEM file: %v, %v", fi, err)
	}
}

// FuzzParseTeamKeys reads any bytes as a team key file (a grant's
// plaintext is whatever its maker wrapped): it never panics, and what
// parses formats back to the same keys.
func FuzzParseTeamKeys(f *testing.F) {
	f.Add([]byte("2026-01-01T00:00:00Z AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\n"))
	f.Add([]byte("# comment\n\nnot a key\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		keys, err := keystore.ParseTeamKeys(bytes.NewReader(b))
		if err != nil {
			return
		}
		again, err := keystore.ParseTeamKeys(bytes.NewReader(keystore.FormatTeamKeys(keys)))
		if err != nil || len(again) != len(keys) {
			t.Fatalf("formatted keys do not parse back: %v", err)
		}
		for i := range keys {
			if !bytes.Equal(again[i].Secret, keys[i].Secret) || !again[i].Made.Equal(keys[i].Made) {
				t.Fatalf("key %d changed", i)
			}
		}
	})
}
