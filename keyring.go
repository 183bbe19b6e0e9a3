package thrum

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/rpc"
	"github.com/thrumhq/thrum/store"
)

// The team's keyring: a thrum-keys file at the root of the repository,
// as its default branch has it (Options.Keyring), one identity and key a
// line:
//
//	# whose key is whose
//	alice    Xy3…43 characters of base64url…
//	user:leon Ab9…
//
// An identity it lists signs with the keys it lists, and only those (or
// one the owner trusted here): the keyring is honoured over the first
// key seen. Lines that do not parse are skipped and reported.

// keyring is a parsed thrum-keys file.
type keyring struct {
	version  string
	keys     map[string][]ed25519.PublicKey
	entries  int
	problems []string
}

// maxKeyringBytes bounds the keyring read: a committed file is outside
// input.
const maxKeyringBytes = 1 << 20

// parseKeyring reads a thrum-keys file.
func parseKeyring(text []byte, version string) *keyring {
	kr := &keyring{version: version, keys: map[string][]ed25519.PublicKey{}}
	if len(text) > maxKeyringBytes {
		kr.problems = append(kr.problems, fmt.Sprintf("thrum-keys is over %d bytes: only its first %d are read", maxKeyringBytes, maxKeyringBytes))
		text = text[:maxKeyringBytes]
	}
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(nil, maxKeyringBytes)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 || !(len(f) == 2 || strings.HasPrefix(f[2], "#")) {
			kr.problem(n, "want an identity and its key")
			continue
		}
		if err := eventlog.CheckFields(&eventlog.Event{Type: eventlog.TypeKeyTrust, Payload: eventlog.KeyTrust{AgentID: f[0], Key: f[1]}}, time.Time{}); err != nil {
			kr.problem(n, err.Error())
			continue
		}
		k, _ := eventlog.DecodeKey(f[1])
		kr.keys[f[0]] = append(kr.keys[f[0]], k)
		kr.entries++
	}
	return kr
}

func (kr *keyring) problem(line int, what string) {
	if len(kr.problems) < 20 {
		kr.problems = append(kr.problems, fmt.Sprintf("thrum-keys line %d: %s", line, what))
	}
}

// readKeyring returns the team's keyring (nil if the node has none, or
// the file is not there), read again only when its version changed. A
// change is logged and kept for KeyringStatus.
func (n *Node) readKeyring(ctx context.Context) (*keyring, error) {
	if n.opts.Keyring == nil {
		return nil, nil
	}
	text, version, err := n.opts.Keyring(ctx)
	if err != nil {
		return nil, internal("read the team's keyring (thrum-keys)", err)
	}
	n.ringMu.Lock()
	defer n.ringMu.Unlock()
	if n.ring != nil && n.ring.version == version {
		return n.ringOrNil(), nil
	}
	prev := n.ring
	n.ring = parseKeyring(text, version)
	n.ringSeen = text != nil
	if prev != nil {
		n.ringChanged = &rpc.KeyringChange{From: prev.version, To: version, At: eventlog.FormatTime(n.now())}
		if n.opts.Logger != nil {
			n.opts.Logger.Warn("thrum: the team's keyring (thrum-keys) changed: it decides whose key is whose from now on",
				"from", prev.version, "to", version, "entries", n.ring.entries)
		}
	}
	return n.ringOrNil(), nil
}

// ringOrNil is the keyring read last, nil if there is no file. Called
// with ringMu held.
func (n *Node) ringOrNil() *keyring {
	if !n.ringSeen {
		return nil
	}
	return n.ring
}

// KeyringStatus says what the team's keyring (Options.Keyring) holds
// now and when it last changed: nil if the node has none. It reads the
// keyring if it changed.
func (n *Node) KeyringStatus(ctx context.Context) (*rpc.KeyringStatus, error) {
	if n.opts.Keyring == nil {
		return nil, nil
	}
	if _, err := n.readKeyring(ctx); err != nil {
		return nil, err
	}
	n.ringMu.Lock()
	ring := n.ring
	st := &rpc.KeyringStatus{Present: n.ringSeen, Version: ring.version, Entries: ring.entries,
		Problems: append([]string{}, ring.problems...), Changed: n.ringChanged, Overrides: []string{}}
	n.ringMu.Unlock()
	for _, id := range slices.Sorted(maps.Keys(ring.keys)) {
		rows, err := n.store.Keys(ctx, id)
		if err != nil {
			return nil, internal("read keys", err)
		}
		for _, r := range rows {
			k, err := eventlog.DecodeKey(r.Key)
			if err == nil && r.Source == store.KeyRegistered && !slices.ContainsFunc(ring.keys[id], func(t ed25519.PublicKey) bool { return t.Equal(k) }) {
				st.Overrides = append(st.Overrides, fmt.Sprintf("%s: a registration brought key %s (from machine %s), which thrum-keys does not list: its events are refused", id, r.Key, r.Machine))
			}
		}
	}
	return st, nil
}
