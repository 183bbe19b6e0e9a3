//go:build unix

package main

import (
	"io/fs"
	"os"
	"syscall"
)

// openNoFollow opens path for reading without following a final symlink
// and without waiting for a FIFO's writer.
func openNoFollow(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
}

// ownedByUser reports whether the file belongs to the user running thrum.
func ownedByUser(st fs.FileInfo) bool {
	s, ok := st.Sys().(*syscall.Stat_t)
	return ok && int(s.Uid) == os.Geteuid()
}
