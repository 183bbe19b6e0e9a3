package gitsync

import (
	"bufio"
	"bytes"
	"io"
	"strings"
	"testing"
)

// FuzzSendPack feeds sendPack whatever a receive-pack might write (the
// remote is any repository on disk): it must return, with an error or
// not, and never panic or read without bound.
func FuzzSendPack(f *testing.F) {
	zero, head := strings.Repeat("0", 40), strings.Repeat("1", 40)
	pkt := func(s string) string { var b bytes.Buffer; writePkt(&b, s); return b.String() }
	f.Add([]byte(pkt(zero+" refs/heads/a-sync\x00report-status quiet\n") + "0000" + pkt("unpack ok\n") + pkt("ok refs/heads/a-sync\n") + "0000"))
	f.Add([]byte(pkt(zero+" capabilities^{}\x00report-status\n") + "0000" + pkt("unpack error\n") + "0000"))
	f.Add([]byte("00zz"))
	f.Add([]byte("0003"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s := &Syncer{head: head}
		s.opts.Branch = "a-sync"
		s.pushBase = zero
		s.unpushed = []rawObject{{kind: "blob", data: []byte("x\n")}}
		s.sendPack(bufio.NewReader(bytes.NewReader(b)), io.Discard)
	})
}
