// Package dirlock locks a data directory with flock, so that two
// processes never write one log, and tells who holds the lock.
package dirlock

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/thrumhq/thrum/internal/private"
)

// File is the file in a data directory that Lock locks, so that two
// processes never write one log.
const File = ".lock"

// ErrLocked is returned by Lock when another process has the data
// directory open.
var ErrLocked = errors.New("thrum: data directory in use")

// Lock takes an exclusive, non-blocking lock on dir/.lock and writes
// this process's ID into it. The kernel drops the lock when the process
// dies, so a crash never leaves the directory locked.
func Lock(dir string) (*os.File, error) {
	if err := private.Dir(dir); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, File)
	f, err := private.OpenFile(path, os.O_CREATE|os.O_RDWR)
	if err != nil {
		return nil, err
	}
	// A process that just closed its node may still hold the lock for a
	// moment through a child it is forking (the descriptor is copied until
	// exec closes it): retry briefly before calling it in use.
	var err2 error
	for try := 0; try < 20; try++ {
		if err2 = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err2 != syscall.EWOULDBLOCK {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := err2; err != nil {
		b, _ := os.ReadFile(path)
		f.Close()
		holder := strings.TrimSpace(string(b))
		if holder == "" {
			holder = "another process"
		} else {
			holder = "process " + holder
		}
		return nil, fmt.Errorf("%w: %s is open in %s (a running daemon?)", ErrLocked, dir, holder)
	}
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// Holder reports whether the data directory dir is open in a process
// (its lock is held) and, if so, that process's ID as it recorded it. It
// tells a live daemon from a pid file left behind by a crash: only the
// process holding the lock is the daemon of dir.
func Holder(dir string) (pid int, held bool, err error) {
	f, err := os.Open(filepath.Join(dir, File))
	if errors.Is(err, os.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	defer f.Close()
	// A shared lock is granted only if no one holds the exclusive one; it
	// is dropped at once (closing f would drop it too).
	switch err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); {
	case err == nil:
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		return 0, false, nil
	case err != syscall.EWOULDBLOCK:
		return 0, false, err
	}
	b, err := io.ReadAll(io.LimitReader(f, 32))
	if err != nil {
		return 0, true, err
	}
	pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	return pid, true, nil
}
