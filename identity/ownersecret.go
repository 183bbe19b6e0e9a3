package identity

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/thrumhq/thrum/internal/private"
)

// OwnerSecretFile is the usual name of the owner's secret, in the
// daemon's var directory next to its socket.
const OwnerSecretFile = "owner.secret"

// LoadOwnerSecret returns the owner's secret kept at path, creating it
// (256 random bits, hex) with mode 0600, in a directory made 0700, if it
// is missing. A directory another user owns or can write is refused. A file that others could read, or that does not hold a
// secret, is replaced with a new one: a secret someone else may have seen
// is no secret. Give the result to thrum.RPCOptions.OwnerSecret.
func LoadOwnerSecret(path string) (string, error) {
	if err := private.Dir(filepath.Dir(path)); err != nil {
		return "", err
	}
	if st, err := os.Lstat(path); err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o077 == 0 {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", err
		}
		if s := strings.TrimSpace(string(b)); len(s) == 64 {
			if _, err := hex.DecodeString(s); err == nil {
				return s, nil
			}
		}
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", err
	}
	secret := hex.EncodeToString(raw[:])
	// A new file renamed over the old: never loosen, never follow a link
	// someone planted at path.
	if err := private.WriteFile(path, []byte(secret+"\n")); err != nil {
		return "", fmt.Errorf("owner secret: %w", err)
	}
	return secret, nil
}
