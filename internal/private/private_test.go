package private_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/thrumhq/thrum/internal/private"
)

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

func TestDirMakesAndTightens(t *testing.T) {
	root := t.TempDir()
	made := filepath.Join(root, "a", "b")
	if err := private.Dir(made); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{filepath.Dir(made), made} {
		if m := mode(t, d); m != 0o700 {
			t.Errorf("%s: mode %v, want 0700", d, m)
		}
	}
	// The owner's directory that others may read is tightened; its
	// parent, which Dir did not make, is left alone.
	if err := os.Chmod(made, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := private.Dir(made); err != nil {
		t.Fatal(err)
	}
	if m := mode(t, made); m != 0o700 {
		t.Errorf("loose directory: mode %v after Dir, want 0700", m)
	}
	if m := mode(t, root); m != 0o755 {
		t.Errorf("the parent's mode became %v", m)
	}
}

func TestDirRefusesWritableByOthers(t *testing.T) {
	d := filepath.Join(t.TempDir(), "open")
	if err := os.Mkdir(d, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, m := range []os.FileMode{0o777, 0o770} {
		if err := os.Chmod(d, m); err != nil {
			t.Fatal(err)
		}
		err := private.Dir(d)
		if !errors.Is(err, private.ErrNotPrivate) {
			t.Fatalf("mode %v: %v, want ErrNotPrivate", m, err)
		}
		if err2 := private.CheckDir(d); !errors.Is(err2, private.ErrNotPrivate) {
			t.Fatalf("CheckDir, mode %v: %v", m, err2)
		}
		if mode(t, d) != m {
			t.Fatalf("a refused directory was changed to %v", mode(t, d))
		}
	}
}

func TestDirRefusesAnotherOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to give a directory to another user")
	}
	d := filepath.Join(t.TempDir(), "theirs")
	if err := os.Mkdir(d, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(d, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if err := private.Dir(d); !errors.Is(err, private.ErrNotPrivate) {
		t.Fatalf("%v, want ErrNotPrivate", err)
	}
	// A link of the owner's to it is no way around that.
	link := filepath.Join(filepath.Dir(d), "link")
	if err := os.Symlink(d, link); err != nil {
		t.Fatal(err)
	}
	if err := private.Dir(link); !errors.Is(err, private.ErrNotPrivate) {
		t.Fatalf("link: %v, want ErrNotPrivate", err)
	}
	f := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(f, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if _, err := private.OpenFile(f, os.O_RDWR); !errors.Is(err, private.ErrNotPrivate) {
		t.Fatalf("OpenFile: %v, want ErrNotPrivate", err)
	}
}

func TestOpenFileAndWriteFile(t *testing.T) {
	dir := t.TempDir()
	loose := filepath.Join(dir, "loose")
	if err := os.WriteFile(loose, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := private.OpenFile(loose, os.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if m := mode(t, loose); m != 0o600 {
		t.Errorf("opened file: mode %v, want 0600", m)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(loose, link); err != nil {
		t.Fatal(err)
	}
	if _, err := private.OpenFile(link, os.O_CREATE|os.O_RDWR); err == nil {
		t.Error("OpenFile followed a symbolic link")
	}
	if err := private.WriteFile(link, []byte("new")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(loose); string(b) != "x" {
		t.Errorf("WriteFile wrote through a link: the target holds %q", b)
	}
	if fi, err := os.Lstat(link); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
		t.Errorf("WriteFile: %v %v, want a regular 0600 file", fi.Mode(), err)
	}
}
