package gitsync

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Moving HEAD without git update-ref. HEAD names the sync branch, whose
// ref is a file under the common git directory (or a line of
// packed-refs). The Syncer moves it as git's files backend does: it
// creates "<ref>.lock" exclusively (git, or another Syncer, holding the
// lock makes it fail), checks that the ref still holds the old value,
// writes the new one to the lock file, appends to the reflogs of the
// branch and of HEAD, and renames the lock file over the ref. A
// repository whose refs are not files (reftable), or whose HEAD is not a
// branch, goes through update-ref.

// headRef is what setHead needs: the ref file of the branch HEAD names,
// packed-refs, and the two reflogs.
type headRef struct {
	name, file, packed string
	logs               [2]string // the branch's reflog and HEAD's
}

// findHeadRef resolves HEAD in the worktree's git directory gitDir and
// the repository's common directory; nil when refs are not plain files.
func findHeadRef(gitDir, common string) *headRef {
	if _, err := os.Stat(filepath.Join(common, "reftable")); !errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	b, err := os.ReadFile(filepath.Join(gitDir, "HEAD"))
	if err != nil {
		return nil
	}
	name, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "ref: ")
	if !ok || !strings.HasPrefix(name, "refs/heads/") || strings.Contains(name, "..") {
		return nil
	}
	return &headRef{
		name:   name,
		file:   filepath.Join(common, filepath.FromSlash(name)),
		packed: filepath.Join(common, "packed-refs"),
		logs:   [2]string{filepath.Join(common, "logs", filepath.FromSlash(name)), filepath.Join(gitDir, "logs", "HEAD")},
	}
}

// setHead moves HEAD's branch from old to c.
func (s *Syncer) setHead(ctx context.Context, c, old string) error {
	if s.headRef == nil {
		_, err := s.git(ctx, "update-ref", "-m", "thrum sync", "HEAD", c, old)
		return err
	}
	return s.headRef.update(c, old)
}

func (r *headRef) update(c, old string) error {
	lock := r.file + ".lock"
	f, err := os.OpenFile(lock, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o666)
	if err != nil {
		return fmt.Errorf("lock %s: %w", r.name, err)
	}
	done := false
	defer func() {
		if !done {
			f.Close()
			os.Remove(lock)
		}
	}()
	cur, err := r.read()
	if err != nil {
		return err
	}
	if cur != old {
		return fmt.Errorf("%s is at %s, not %s", r.name, cur, old)
	}
	if _, err := f.WriteString(c + "\n"); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	_, off := time.Now().Zone()
	sign := '+'
	if off < 0 {
		sign, off = '-', -off
	}
	entry := fmt.Sprintf("%s %s thrum <thrum@localhost> %d %c%02d%02d\tthrum sync\n", old, c, time.Now().Unix(), sign, off/3600, off%3600/60)
	for _, l := range r.logs {
		if err := appendFile(l, entry); err != nil {
			return fmt.Errorf("reflog: %w", err)
		}
	}
	if err := os.Rename(lock, r.file); err != nil {
		return err
	}
	done = true
	return nil
}

// read returns the ref's value: its file's, else its packed-refs line's.
func (r *headRef) read() (string, error) {
	b, err := os.ReadFile(r.file)
	if err == nil {
		return strings.TrimSpace(string(b)), nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	p, err := os.ReadFile(r.packed)
	if err != nil {
		return "", fmt.Errorf("%s: no loose ref, and packed-refs: %w", r.name, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(p))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if id, name, ok := strings.Cut(sc.Text(), " "); ok && name == r.name {
			return id, nil
		}
	}
	return "", fmt.Errorf("%s: not found", r.name)
}

func appendFile(path, s string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o666)
	if errors.Is(err, fs.ErrNotExist) {
		if err = os.MkdirAll(filepath.Dir(path), 0o777); err == nil {
			f, err = os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o666)
		}
	}
	if err != nil {
		return err
	}
	_, err = f.WriteString(s)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
