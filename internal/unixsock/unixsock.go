// Package unixsock makes a Unix socket only its owner can connect to.
package unixsock

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// Listen listens on a Unix socket at path: the socket is created mode
// 0600, so only this user can connect. A missing directory is made 0700;
// an existing one is left exactly as it is (it may be a shared directory
// such as /tmp, whose mode is its owner's business). A stale socket file
// left by a crashed process is replaced; a live one is an error, and so
// is any other kind of file at path (it is never removed).
func Listen(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	if st, err := os.Lstat(path); err == nil {
		if st.Mode().Type() != os.ModeSocket {
			return nil, fmt.Errorf("%s: exists and is not a socket: remove it or choose another path", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("%s: a daemon is already listening there", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, err
		}
	}
	old := syscall.Umask(0o177)
	l, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}
