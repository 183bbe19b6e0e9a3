//go:build !linux

package jsonrpc

import "net"

// peerUID is not implemented on this system.
func peerUID(net.Conn) (uid int, ok bool) { return 0, false }
