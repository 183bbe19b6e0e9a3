// Package keystore keeps a node's keys in a private directory (0700):
// its signing keys, one Ed25519 key per identity, each in a file of its
// own (0600), made the first time it is asked for; and the team keys
// that seal message bodies, with the machine's X25519 key that receives
// them from another machine (team.go). A process that can read
// the directory can sign as every identity in it: the keys prove what
// this user's thrum wrote, not which of the user's processes asked.
package keystore

import (
	"crypto"
	"crypto/ecdh"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/thrumhq/thrum/internal/private"
)

// Store is a directory of keys. Its methods may be called concurrently.
type Store struct {
	dir      string
	mu       sync.Mutex
	keys     map[string]ed25519.PrivateKey
	teamKeys teamKeys         // team.go
	kem      *ecdh.PrivateKey // team.go
}

// Open returns the store in dir, making the directory (0700) if needed.
// A directory another user owns or can write is refused.
func Open(dir string) (*Store, error) {
	if err := private.Dir(dir); err != nil {
		return nil, fmt.Errorf("keystore: %w", err)
	}
	return &Store{dir: dir, keys: map[string]ed25519.PrivateKey{}}, nil
}

// validName reports whether id can name a key file: the characters of
// identity IDs, and @ (which no identity uses, for the machine's key).
func validName(id string) bool {
	if id == "" || len(id) > 128 || id[0] == '.' || id[0] == '-' {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == ':' || c == '@') {
			return false
		}
	}
	return true
}

// Key returns id's key, reading it from its file, or making it (a new
// random key, written and synced before it is returned) if create is
// set and id has none. Without create, an id with no key returns nil
// and no error.
func (s *Store) Key(id string, create bool) (crypto.Signer, error) {
	if !validName(id) {
		return nil, fmt.Errorf("keystore: %q cannot name a key", id)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if k, ok := s.keys[id]; ok {
		return k, nil
	}
	path := filepath.Join(s.dir, id+".key")
	k, err := read(path)
	if errors.Is(err, fs.ErrNotExist) && create {
		k, err = s.make(path)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("keystore: %w", err)
	}
	s.keys[id] = k
	return k, nil
}

// read reads the key kept at path: its seed, base64.
func read(path string) (ed25519.PrivateKey, error) {
	b, err := readSmall(path)
	if err != nil {
		return nil, err
	}
	seed, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("%s does not hold a key (an Ed25519 seed in base64): move it aside to make a new key, which the other clones take only on their owner's word", path)
	}
	return ed25519.NewKeyFromSeed(seed), nil
}

// make writes a new key at path, never over a file that is there.
func (s *Store) make(path string) (ed25519.PrivateKey, error) {
	seed := make([]byte, ed25519.SeedSize)
	rand.Read(seed) // never fails
	if err := s.writeNew(path, []byte(base64.StdEncoding.EncodeToString(seed)+"\n")); err != nil {
		return nil, err
	}
	return ed25519.NewKeyFromSeed(seed), nil
}

// writeNew writes a new key file at path, never over a file that is
// there, synced with its directory before it returns; on failure it
// leaves no file.
func (s *Store) writeNew(path string, b []byte) error {
	f, err := private.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = syncDir(s.dir)
	}
	if err != nil {
		os.Remove(path)
	}
	return err
}

// readSmall reads a key file, the owner's alone.
func readSmall(path string) ([]byte, error) {
	f, err := private.OpenFile(path, os.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, 1024))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
