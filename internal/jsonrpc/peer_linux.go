//go:build linux

package jsonrpc

import (
	"encoding/binary"
	"net/netip"
	"syscall"
)

// peersKnown says whether tcpPeerUID can tell who is at the other
// end of a loopback TCP connection here.
const peersKnown = true

// sock_diag (linux/sock_diag.h, linux/inet_diag.h).
const (
	netlinkSockDiag   = 4  // NETLINK_SOCK_DIAG
	sockDiagByFamily  = 20 // SOCK_DIAG_BY_FAMILY
	inetDiagReqLen    = 56 // struct inet_diag_req_v2
	inetDiagMsgLen    = 72 // struct inet_diag_msg
	inetDiagMsgUID    = 64 // offset of idiag_uid in it
	inetDiagMsgState  = 1  // offset of idiag_state
	tcpTimeWait       = 6  // TCP_TIME_WAIT: a closed socket, whose uid is no one's
	inetDiagNoCookie  = 0xFFFFFFFF
	inetDiagAllStates = 0xFFFFFFFF
)

// tcpPeerUID returns the uid of the process at the other end of a TCP
// connection from this machine (the loopback port's): the owner of the
// peer's socket, whose local address is remote and whose remote address
// is local. It asks the kernel for that one socket by its address pair
// (sock_diag, as ss(8) does), which costs the same however many sockets
// the machine has; /proc/net/tcp lists them all, and a flood of
// connections fills it with thousands in TIME_WAIT. ok is false when the
// peer's socket is not found (it closed, or lives in another network
// namespace, or on another machine) or the kernel does not answer.
func tcpPeerUID(local, remote netip.AddrPort) (uid int, ok bool) {
	l, r := local.Addr().Unmap(), remote.Addr().Unmap()
	if !l.IsValid() || !r.IsValid() {
		return 0, false
	}
	if l.Is4() && r.Is4() {
		if uid, ok := sockDiag(syscall.AF_INET, l, local.Port(), r, remote.Port()); ok {
			return uid, true
		}
	}
	// An IPv6 socket, or an IPv4 peer that connected from one (its
	// addresses IPv4-mapped).
	return sockDiag(syscall.AF_INET6, netip.AddrFrom16(l.As16()), local.Port(), netip.AddrFrom16(r.As16()), remote.Port())
}

// sockDiag looks up the TCP socket of family whose local end is src:sport
// and remote end dst:dport, and returns its owner's uid.
func sockDiag(family int, dst netip.Addr, dport uint16, src netip.Addr, sport uint16) (int, bool) {
	if family == syscall.AF_INET6 && (src.Is4() || dst.Is4()) {
		return 0, false
	}
	fd, err := syscall.Socket(syscall.AF_NETLINK, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, netlinkSockDiag)
	if err != nil {
		return 0, false
	}
	defer syscall.Close(fd)
	tv := syscall.Timeval{Sec: 1} // the kernel answers at once; never hang on it
	_ = syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv)

	req := make([]byte, syscall.NLMSG_HDRLEN+inetDiagReqLen)
	ne := binary.NativeEndian
	ne.PutUint32(req[0:], uint32(len(req)))        // nlmsg_len
	ne.PutUint16(req[4:], sockDiagByFamily)        // nlmsg_type
	ne.PutUint16(req[6:], syscall.NLM_F_REQUEST)   // nlmsg_flags: one socket, not a dump
	ne.PutUint32(req[8:], 1)                       // nlmsg_seq
	d := req[syscall.NLMSG_HDRLEN:]                // inet_diag_req_v2
	d[0], d[1] = byte(family), syscall.IPPROTO_TCP // sdiag_family, sdiag_protocol
	ne.PutUint32(d[4:], inetDiagAllStates)         // idiag_states
	binary.BigEndian.PutUint16(d[8:], sport)       // id.idiag_sport
	binary.BigEndian.PutUint16(d[10:], dport)      // id.idiag_dport
	putAddr(d[12:28], src)                         // id.idiag_src
	putAddr(d[28:44], dst)                         // id.idiag_dst
	ne.PutUint32(d[48:], inetDiagNoCookie)         // id.idiag_cookie
	ne.PutUint32(d[52:], inetDiagNoCookie)
	if err := syscall.Sendto(fd, req, 0, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK}); err != nil {
		return 0, false
	}
	buf := make([]byte, 4096)
	n, _, err := syscall.Recvfrom(fd, buf, 0)
	if err != nil {
		return 0, false
	}
	msgs, err := syscall.ParseNetlinkMessage(buf[:n])
	if err != nil {
		return 0, false
	}
	for _, m := range msgs {
		if m.Header.Type != sockDiagByFamily || len(m.Data) < inetDiagMsgLen || m.Data[inetDiagMsgState] == tcpTimeWait {
			continue // NLMSG_ERROR (no such socket), or one no one owns
		}
		return int(ne.Uint32(m.Data[inetDiagMsgUID:])), true
	}
	return 0, false
}

// putAddr writes a in network order, as inet_diag_sockid holds it.
func putAddr(b []byte, a netip.Addr) {
	if a.Is4() {
		v := a.As4()
		copy(b, v[:])
		return
	}
	v := a.As16()
	copy(b, v[:])
}
