package jsonrpc

import (
	"net"
	"net/netip"
	"os"
	"testing"
)

// The peer of a loopback TCP connection is found by its address pair,
// over IPv4 and IPv6: here, this process's own user. A closed peer, or an
// address pair that is no connection, is no one's.
func TestTCPPeerUID(t *testing.T) {
	if !peersKnown {
		t.Skip("peers of TCP connections are not known on this system")
	}
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0"} {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Logf("%s: %v", addr, err)
			continue
		}
		defer l.Close()
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		s, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		local, remote := s.LocalAddr().(*net.TCPAddr).AddrPort(), s.RemoteAddr().(*net.TCPAddr).AddrPort()
		if uid, ok := tcpPeerUID(local, remote); !ok || uid != os.Getuid() {
			t.Errorf("%s: peer uid %d, %v; want %d, true", addr, uid, ok, os.Getuid())
		}
		if _, ok := tcpPeerUID(local, netip.AddrPortFrom(remote.Addr(), remote.Port()+1)); ok {
			t.Errorf("%s: a peer found for an address pair that is no connection", addr)
		}
		c.Close()
		s.Close()
		if uid, ok := tcpPeerUID(local, remote); ok {
			t.Errorf("%s: a closed peer (in TIME_WAIT) counts as uid %d", addr, uid)
		}
	}
}
