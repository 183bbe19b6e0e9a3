package keystore

import (
	"bufio"
	"bytes"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/internal/private"
)

// TeamFile is the file of a store's team keys (eventlog.TeamKey): one
// line per key, "<made, RFC 3339> <secret, base64url>", oldest first.
// The newest seals; every one opens. Keys are only ever added: a lost
// key loses the bodies it sealed.
const TeamFile = "team.keys"

// TeamSecret is a team key's secret and when it was made, the newest
// being the one that seals.
type TeamSecret struct {
	Secret []byte
	Made   time.Time
}

// teamKeys are the team keys as read from TeamFile.
type teamKeys struct {
	loaded  bool
	secrets []TeamSecret
	byID    map[string]*eventlog.TeamKey
	sealing *eventlog.TeamKey
}

// team returns the team keys, read from TeamFile the first time. Called
// with s.mu held.
func (s *Store) team() (*teamKeys, error) {
	if s.teamKeys.loaded {
		return &s.teamKeys, nil
	}
	f, err := private.OpenFile(filepath.Join(s.dir, TeamFile), os.O_RDONLY)
	if errors.Is(err, fs.ErrNotExist) {
		s.teamKeys = teamKeys{loaded: true, byID: map[string]*eventlog.TeamKey{}}
		return &s.teamKeys, nil
	}
	if err != nil {
		return nil, fmt.Errorf("keystore: %w", err)
	}
	defer f.Close()
	secrets, err := ParseTeamKeys(io.LimitReader(f, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("keystore: %s: %w", filepath.Join(s.dir, TeamFile), err)
	}
	t := teamKeys{loaded: true}
	if err := t.set(secrets); err != nil {
		return nil, err
	}
	s.teamKeys = t
	return &s.teamKeys, nil
}

// set makes t hold secrets, sorted oldest first.
func (t *teamKeys) set(secrets []TeamSecret) error {
	slices.SortStableFunc(secrets, func(a, b TeamSecret) int { return a.Made.Compare(b.Made) })
	byID := map[string]*eventlog.TeamKey{}
	var sealing *eventlog.TeamKey
	for _, sec := range secrets {
		k, err := eventlog.NewTeamKey(sec.Secret)
		if err != nil {
			return fmt.Errorf("keystore: %w", err)
		}
		byID[k.ID()], sealing = k, k
	}
	t.secrets, t.byID, t.sealing = secrets, byID, sealing
	return nil
}

// ParseTeamKeys reads team keys as TeamFile and an exported key file hold
// them. Blank lines and lines starting with # are skipped.
func ParseTeamKeys(r io.Reader) ([]TeamSecret, error) {
	var out []TeamSecret
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		made, secret, ok := strings.Cut(line, " ")
		t, err := time.Parse(time.RFC3339Nano, made)
		b, berr := base64.RawURLEncoding.Strict().DecodeString(secret)
		if !ok || err != nil || berr != nil || len(b) != eventlog.TeamKeyLen {
			return nil, fmt.Errorf("line %d is not a team key: want a time (RFC 3339), a space and %d bytes of base64url", n, eventlog.TeamKeyLen)
		}
		out = append(out, TeamSecret{Secret: b, Made: t})
	}
	return out, sc.Err()
}

// FormatTeamKeys writes secrets as ParseTeamKeys reads them.
func FormatTeamKeys(secrets []TeamSecret) []byte {
	var b bytes.Buffer
	for _, s := range secrets {
		fmt.Fprintf(&b, "%s %s\n", s.Made.UTC().Format(time.RFC3339Nano), base64.RawURLEncoding.EncodeToString(s.Secret))
	}
	return b.Bytes()
}

// TeamKey returns the team key whose ID is id, or nil (an unreadable
// TeamFile holds none).
func (s *Store) TeamKey(id string) *eventlog.TeamKey {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, err := s.team()
	if err != nil {
		return nil
	}
	return t.byID[id]
}

// Sealing returns the newest team key, which seals, or nil if none is
// held (an unreadable TeamFile holds none).
func (s *Store) Sealing() *eventlog.TeamKey {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, err := s.team()
	if err != nil {
		return nil
	}
	return t.sealing
}

// TeamSecrets returns the team keys' secrets, oldest first.
func (s *Store) TeamSecrets() ([]TeamSecret, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, err := s.team()
	if err != nil {
		return nil, err
	}
	return slices.Clone(t.secrets), nil
}

// NewTeamKey makes a team key, newer than every held one, so it seals
// from now on.
func (s *Store) NewTeamKey() (*eventlog.TeamKey, error) {
	secret := make([]byte, eventlog.TeamKeyLen)
	rand.Read(secret) // never fails
	made := time.Now().UTC()
	s.mu.Lock()
	t, err := s.team()
	if err == nil && len(t.secrets) > 0 && !made.After(t.secrets[len(t.secrets)-1].Made) {
		made = t.secrets[len(t.secrets)-1].Made.Add(time.Millisecond)
	}
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if _, err := s.AddTeamKeys([]TeamSecret{{Secret: secret, Made: made}}); err != nil {
		return nil, err
	}
	return eventlog.NewTeamKey(secret)
}

// AddTeamKeys adds the keys of secrets not held yet, written and synced
// before it returns, and returns their IDs.
func (s *Store) AddTeamKeys(secrets []TeamSecret) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, err := s.team()
	if err != nil {
		return nil, err
	}
	all := slices.Clone(t.secrets)
	var added []string
	for _, sec := range secrets {
		k, err := eventlog.NewTeamKey(sec.Secret)
		if err != nil {
			return nil, fmt.Errorf("keystore: %w", err)
		}
		if t.byID[k.ID()] != nil || slices.Contains(added, k.ID()) {
			continue
		}
		all = append(all, sec)
		added = append(added, k.ID())
	}
	if len(added) == 0 {
		return nil, nil
	}
	var next teamKeys
	if err := next.set(all); err != nil {
		return nil, err
	}
	if err := private.WriteFile(filepath.Join(s.dir, TeamFile), FormatTeamKeys(next.secrets)); err != nil {
		return nil, fmt.Errorf("keystore: %w", err)
	}
	if err := syncDir(s.dir); err != nil {
		return nil, fmt.Errorf("keystore: %w", err)
	}
	next.loaded = true
	s.teamKeys = next
	return added, nil
}

// KEMFile is the file of the machine's X25519 key, with which it receives
// team keys that another machine wraps to it (HPKE): the seed, base64url.
const KEMFile = "machine.kem"

// KEMKey returns the machine's X25519 key, made the first time.
func (s *Store) KEMKey() (*ecdh.PrivateKey, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.kem != nil {
		return s.kem, nil
	}
	path := filepath.Join(s.dir, KEMFile)
	b, err := readSmall(path)
	if errors.Is(err, fs.ErrNotExist) {
		seed := make([]byte, 32)
		rand.Read(seed) // never fails
		b = []byte(base64.RawURLEncoding.EncodeToString(seed) + "\n")
		if err := s.writeNew(path, b); err != nil {
			return nil, fmt.Errorf("keystore: %w", err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("keystore: %w", err)
	}
	seed, err := base64.RawURLEncoding.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(seed) != 32 {
		return nil, fmt.Errorf("keystore: %s does not hold an X25519 key (32 bytes, base64url)", path)
	}
	k, err := ecdh.X25519().NewPrivateKey(seed)
	if err != nil {
		return nil, fmt.Errorf("keystore: %w", err)
	}
	s.kem = k
	return k, nil
}
