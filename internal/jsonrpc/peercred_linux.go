//go:build linux

package jsonrpc

import (
	"net"
	"syscall"
)

// peerUID reads the peer's credentials of a Unix socket (SO_PEERCRED).
func peerUID(nc net.Conn) (uid int, ok bool) {
	uc, isUnix := nc.(*net.UnixConn)
	if !isUnix {
		return 0, false
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return 0, false
	}
	var cred *syscall.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil || cerr != nil || cred == nil {
		return 0, false
	}
	return int(cred.Uid), true
}
