package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/thrumhq/thrum/internal/private"
)

// The files setup edits are a person's settings, in directories that may
// hold what anyone committed. So setup resolves each path inside the
// directory it belongs to (the project, or the home directory with
// --user), reads only regular files the person owns, up to a size and
// without blocking, and writes every file or none.

// setupFileMax is the most setup reads of one file. Host settings are
// kilobytes; Claude Code's ~/.claude.json, the largest, a few megabytes.
const setupFileMax = 16 << 20

// bom is the UTF-8 byte-order mark some editors put first; setup keeps it.
var bom = []byte("\uFEFF")

// confine returns where path, which lies under base, really is: each part
// that exists is resolved, and a symlink may lead anywhere inside base but
// not out of it. Parts that do not exist yet are kept as they are.
func confine(base, path string) (string, error) {
	realBase, err := filepath.EvalSymlinks(base)
	if err != nil {
		return "", err
	}
	if !within(base, path) {
		return "", fmt.Errorf("%s is not inside %s", path, base)
	}
	rel, _ := filepath.Rel(base, path)
	cur := realBase
	parts := strings.Split(rel, string(filepath.Separator))
	for i, part := range parts {
		next := filepath.Join(cur, part)
		st, err := os.Lstat(next)
		if errors.Is(err, fs.ErrNotExist) {
			return filepath.Join(append([]string{next}, parts[i+1:]...)...), nil
		}
		if err != nil {
			return "", err
		}
		if st.Mode()&fs.ModeSymlink != 0 {
			target, err := filepath.EvalSymlinks(next)
			if err != nil {
				return "", fmt.Errorf("%s is a symlink that leads nowhere (%v)", filepath.Join(base, filepath.Join(parts[:i+1]...)), err)
			}
			if !within(realBase, target) {
				return "", fmt.Errorf("%s is a symlink to %s, outside %s: setup writes only inside it", filepath.Join(base, filepath.Join(parts[:i+1]...)), target, base)
			}
			next = target
			if st, err = os.Stat(next); err != nil {
				return "", err
			}
		}
		if i < len(parts)-1 && !st.IsDir() {
			return "", fmt.Errorf("%s is not a directory", filepath.Join(base, filepath.Join(parts[:i+1]...)))
		}
		cur = next
	}
	return cur, nil
}

// within reports whether path is dir or lies under it.
func within(dir, path string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// readSetupFile reads the file at real, a path confine returned: a regular
// file the user owns, at most setupFileMax bytes. A special file is
// refused before it is opened (opening a device may do something); the
// open follows no link and waits for no writer (a FIFO put there since),
// and what it opened is checked again. exists is false when there is no
// file.
func readSetupFile(real string) (data []byte, mode fs.FileMode, exists bool, err error) {
	st, err := os.Lstat(real)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, false, nil
	}
	if err != nil {
		return nil, 0, false, err
	}
	if err := setupFileOK(st); err != nil {
		return nil, 0, false, err
	}
	f, err := openNoFollow(real)
	if err != nil {
		return nil, 0, false, err
	}
	defer f.Close()
	if st, err = f.Stat(); err != nil {
		return nil, 0, false, err
	}
	if err := setupFileOK(st); err != nil {
		return nil, 0, false, err
	}
	data, err = io.ReadAll(io.LimitReader(f, setupFileMax+1))
	if err != nil {
		return nil, 0, false, err
	}
	if len(data) > setupFileMax {
		return nil, 0, false, fmt.Errorf("grew past %d MiB while setup read it", setupFileMax>>20)
	}
	return data, st.Mode().Perm(), true, nil
}

// setupFileOK says what is wrong with a file setup would edit, if anything.
func setupFileOK(st fs.FileInfo) error {
	switch {
	case !st.Mode().IsRegular():
		return fmt.Errorf("is not a regular file (%s): setup edits only regular files", st.Mode().Type())
	case !ownedByUser(st):
		return errors.New("belongs to another user: setup edits only your own files")
	case st.Size() > setupFileMax:
		return fmt.Errorf("is %d bytes, more than setup reads (%d MiB): add thrum's entries by hand", st.Size(), setupFileMax>>20)
	}
	return nil
}

// commit writes every changed file or none. Each new text goes first to a
// temporary file beside its target, synced; only when all are written are
// they renamed over their targets, in order. If a rename fails, the files
// already replaced get their old text back, the ones created are removed,
// and so are the directories commit made.
func commit(changes []*setupChange) (err error) {
	var dirs []string // made by commit, outermost first
	temps := make([]string, len(changes))
	done := 0 // changes renamed into place
	defer func() {
		if err == nil {
			return
		}
		for i := done - 1; i >= 0; i-- {
			if rerr := changes[i].undo(); rerr != nil {
				err = fmt.Errorf("%w; restoring %s also failed: %v", err, changes[i].Path, rerr)
			}
		}
		for _, t := range temps {
			if t != "" {
				os.Remove(t)
			}
		}
		for i := len(dirs) - 1; i >= 0; i-- {
			os.Remove(dirs[i])
		}
	}()
	for i, ch := range changes {
		made, err := mkdirs(filepath.Dir(ch.real))
		dirs = append(dirs, made...)
		if err != nil {
			return fmt.Errorf("writing %s: %w", ch.Path, err)
		}
		if temps[i], err = private.WriteTemp(ch.real, ch.new, ch.mode); err != nil {
			return fmt.Errorf("writing %s: %w", ch.Path, err)
		}
	}
	for i, ch := range changes {
		if err := os.Rename(temps[i], ch.real); err != nil {
			return fmt.Errorf("writing %s: %w", ch.Path, err)
		}
		temps[i] = ""
		done++
	}
	return nil
}

// undo puts back what a committed change replaced.
func (ch *setupChange) undo() error {
	if ch.Created {
		return os.Remove(ch.real)
	}
	tmp, err := private.WriteTemp(ch.real, ch.old, ch.mode)
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, ch.real); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// mkdirs makes dir and its missing parents, returning those it made,
// outermost first.
func mkdirs(dir string) ([]string, error) {
	var missing []string
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil || d == filepath.Dir(d) {
			break
		}
		missing = append([]string{d}, missing...)
	}
	for i, d := range missing {
		if err := os.Mkdir(d, 0o755); err != nil {
			return missing[:i], err
		}
	}
	return missing, nil
}
