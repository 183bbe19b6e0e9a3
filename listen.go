package thrum

import (
	"net"

	"github.com/thrumhq/thrum/internal/dirlock"
	"github.com/thrumhq/thrum/internal/unixsock"
)

// ListenUnix listens on a Unix socket at path for an RPCServer: the
// socket is created mode 0600, so only this user can connect (and the
// server checks each peer's user ID besides). A missing directory is
// made 0700; an existing one is never changed. A stale socket file left
// by a crashed process is replaced; a live one is an error, and so is
// any other kind of file at path (it is never removed).
func ListenUnix(path string) (net.Listener, error) { return unixsock.Listen(path) }

// LockFile is the file in a data directory that Open locks, so that two
// processes never write one log.
const LockFile = ".lock" // internal/dirlock.File too

// ErrLocked is returned by Open when another process has the data
// directory open.
var ErrLocked = dirlock.ErrLocked
