package gitwork_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/thrumhq/thrum/internal/gitwork"
	"github.com/thrumhq/thrum/internal/thrumtest"
)

// clonePushed returns a clone whose origin/HEAD holds what write put
// in the upstream repository's tree, committed and pushed to main.
func clonePushed(t *testing.T, write func(dir string)) string {
	t.Helper()
	up := thrumtest.GitRepo(t)
	write(up)
	thrumtest.Git(t, up, "add", "-A")
	thrumtest.Git(t, up, "commit", "-q", "-m", "keyring")
	clone := filepath.Join(t.TempDir(), "clone")
	thrumtest.Git(t, filepath.Dir(clone), "clone", "-q", up, clone)
	return clone
}

// Whoever can push to the default branch commits any thrum-keys: a
// directory of that name is no keyring (and stops nothing), and a huge
// file is read only as far as the keyring's bound.
func TestKeyringFromTheRemoteIsBounded(t *testing.T) {
	dir := clonePushed(t, func(dir string) {
		if err := os.MkdirAll(filepath.Join(dir, gitwork.KeyringFile), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, gitwork.KeyringFile, "x"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	})
	text, _, err := gitwork.New(dir).Keyring(context.Background())
	if err != nil || text != nil {
		t.Errorf("a directory thrum-keys: %q, %v; want no keyring and no error", text, err)
	}
	dir = clonePushed(t, func(dir string) {
		big := bytes.Repeat([]byte("# padding padding padding padding\n"), (8<<20)/34)
		if err := os.WriteFile(filepath.Join(dir, gitwork.KeyringFile), big, 0o644); err != nil {
			t.Fatal(err)
		}
	})
	text, _, err = gitwork.New(dir).Keyring(context.Background())
	if err != nil || len(text) > gitwork.MaxKeyringBytes+1 {
		t.Errorf("an 8 MiB thrum-keys: read %d bytes, %v; want at most %d", len(text), err, gitwork.MaxKeyringBytes+1)
	}
}
