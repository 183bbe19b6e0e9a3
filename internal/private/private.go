// Package private makes and checks the directories and files thrum keeps
// for their owner alone: directories 0700 and files 0600 whatever the
// umask, owned by the user thrum runs as. A directory or file someone
// else owns, or that other users can write, is refused by name, never
// used: whoever could write there could have planted what thrum would
// read. The owner's own directory that others can only read or enter is
// tightened to 0700.
package private

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// DirMode and FileMode are the modes of what thrum makes.
const (
	DirMode  fs.FileMode = 0o700
	FileMode fs.FileMode = 0o600
)

// Error says why a path is not private to this user.
type Error struct {
	Path    string
	Problem string // "is owned by uid 1001", "is writable by other users"
}

func (e *Error) Error() string {
	fix := "remove it, or have its owner remove it, and try again"
	if strings.HasPrefix(e.Problem, "is writable") {
		fix = "if you trust everything in it, make it yours alone (mode 0700); otherwise remove it; then try again"
	}
	return fmt.Sprintf("%s %s: thrum keeps its files private to the user that runs it (uid %d) and will not use it; %s",
		e.Path, e.Problem, os.Geteuid(), fix)
}

// ErrNotPrivate matches every *Error with errors.Is.
var ErrNotPrivate = errors.New("not private to this user")

func (e *Error) Is(target error) bool { return target == ErrNotPrivate }

// Dir makes path a directory private to this user: the directories it
// creates (path and any missing parents) are 0700; existing parents are
// neither checked nor changed. An existing path must
// be a directory this user owns that no other user can write; if others
// can read or enter it, it is chmodded to 0700. A symbolic link at path
// is followed only when the link and its target are both this user's.
func Dir(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		// Missing parents are made 0700 too; existing ones (the
		// repository, a home directory) are the caller's and left as
		// they are.
		if err := os.MkdirAll(filepath.Dir(path), DirMode); err != nil {
			return err
		}
		if err := os.Mkdir(path, DirMode); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		fi, err = os.Lstat(path)
	}
	if err != nil {
		return err
	}
	if err := owned(path, fi); err != nil {
		return err
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		if fi, err = os.Stat(path); err != nil {
			return err
		}
		if err := owned(path, fi); err != nil {
			return err
		}
	}
	if !fi.IsDir() {
		return &Error{Path: path, Problem: "is not a directory"}
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return &Error{Path: path, Problem: fmt.Sprintf("is writable by other users (mode %04o)", fi.Mode().Perm())}
	}
	if fi.Mode().Perm() != DirMode {
		return os.Chmod(path, DirMode)
	}
	return nil
}

// CheckDir is Dir without making or changing anything: nil when path is
// a directory this user owns that no other user can write.
func CheckDir(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if err := owned(path, fi); err != nil {
		return err
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return &Error{Path: path, Problem: fmt.Sprintf("is writable by other users (mode %04o)", fi.Mode().Perm())}
	}
	return nil
}

// OpenFile opens path with flag (os.O_CREATE and the rest), creating it
// 0600. It never follows a symbolic link at path; an existing file must
// be this user's, and is chmodded to 0600 if others could read it.
func OpenFile(path string, flag int) (*os.File, error) {
	f, err := os.OpenFile(path, flag|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, FileMode)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err == nil {
		err = owned(path, fi)
	}
	if err == nil && fi.Mode().Perm() != FileMode {
		err = f.Chmod(FileMode)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// WriteFile replaces path with a new 0600 file holding data (written
// and synced beside it, then renamed over it), so a reader never sees it
// half written and a file or link someone else left there is never
// written through.
func WriteFile(path string, data []byte) error {
	tmp, err := WriteTemp(path, data, FileMode)
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// WriteTemp writes data, synced, with mode, to a new file beside path,
// for the caller to rename over it, and returns its name. thrum setup
// renames several only once all are written; mode is then the user's
// file's own.
func WriteTemp(path string, data []byte, mode fs.FileMode) (string, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return "", err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(mode)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

func owned(path string, fi fs.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil // no owner to check on this system
	}
	if int(st.Uid) != os.Geteuid() {
		return &Error{Path: path, Problem: fmt.Sprintf("is owned by uid %d", st.Uid)}
	}
	return nil
}
