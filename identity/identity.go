// Package identity holds thrum's rules for agent names and IDs, and the
// identity files that let an agent prove who it is to a daemon.
//
// An agent's ID is its name. An agent registered without a name gets a
// stable ID derived from its repository, role and module (see AgentID). The
// legacy form "agent:role:hash" of the original implementation is accepted
// on input and mapped by NormalizeAgentID.
package identity

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"fmt"
	"strings"
)

// MaxNameLen is the longest agent name, role or module accepted.
const MaxNameLen = 64

// Reserved names cannot be taken by an agent: they are addresses or
// authors of thrum itself.
var Reserved = []string{"daemon", "system", "thrum", "all", "broadcast"}

// ValidateName checks an agent name: non-empty, at most MaxNameLen of
// a-z, 0-9 and _, and not reserved.
func ValidateName(name string) error {
	if err := validateToken("agent name", name); err != nil {
		return err
	}
	for _, r := range Reserved {
		if name == r {
			return fmt.Errorf("agent name %q is reserved: choose another (reserved: %s)", name, strings.Join(Reserved, ", "))
		}
	}
	return nil
}

// ValidateRole checks a role or module value: the same alphabet as names.
// what names the field in the error ("role", "module").
func ValidateRole(what, v string) error {
	return validateToken(what, v)
}

func validateToken(what, v string) error {
	if v == "" {
		return fmt.Errorf("%s is required", what)
	}
	if len(v) > MaxNameLen {
		return fmt.Errorf("%s %q is too long: at most %d characters", what, v, MaxNameLen)
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return fmt.Errorf("%s %q is invalid: use a-z, 0-9 and _", what, v)
		}
	}
	return nil
}

// IsValidName reports whether name passes ValidateName.
func IsValidName(name string) bool { return ValidateName(name) == nil }

var idEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// AgentID returns the ID of an agent. A named agent's ID is its name; an
// unnamed one gets role_<10 chars of base32(sha256(repoID|role|module))>,
// lower-cased so that it is itself a valid name and file name.
func AgentID(repoID, role, module, name string) string {
	if name != "" {
		return name
	}
	sum := sha256.Sum256([]byte(repoID + "|" + role + "|" + module))
	prefix := role
	if max := MaxNameLen - 11; len(prefix) > max {
		prefix = prefix[:max] // the hash covers the whole role
	}
	return prefix + "_" + strings.ToLower(idEncoding.EncodeToString(sum[:])[:10])
}

// NormalizeAgentID maps the accepted spellings of an agent ID to its
// canonical form: a leading "@" is dropped, and the legacy
// "agent:role:hash" (or "agent:role:module:hash") becomes "role_hash".
// Anything else is returned unchanged.
func NormalizeAgentID(s string) string {
	s = strings.TrimPrefix(strings.TrimSpace(s), "@")
	if role, hash, ok := ParseLegacyID(s); ok {
		return role + "_" + strings.ToLower(hash)
	}
	return s
}

// ParseLegacyID splits a legacy "agent:role[:module]:hash" ID.
func ParseLegacyID(s string) (role, hash string, ok bool) {
	if !strings.HasPrefix(s, "agent:") {
		return "", "", false
	}
	parts := strings.Split(s, ":")
	if len(parts) < 3 || parts[1] == "" || parts[len(parts)-1] == "" {
		return "", "", false
	}
	return parts[1], parts[len(parts)-1], true
}

// NewToken returns a fresh secret: 32 random bytes, hex encoded.
func NewToken() string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("identity: crypto/rand failed: " + err.Error()) // never happens on supported platforms
	}
	return hex.EncodeToString(b[:])
}

// HashToken returns the stored form of a token: hex(sha256(token)). Only
// hashes are kept in the event log, so a synced log never carries a usable
// secret.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}
