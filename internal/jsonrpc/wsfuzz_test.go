package jsonrpc

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// FuzzWebSocketFrames writes arbitrary bytes, as raw frames, on an
// upgraded WebSocket: headers, lengths, masks, opcodes, fragments and
// payloads all come from the fuzzer. Whatever they are, the server must
// never panic and must give back every byte it charged to its budget once
// the connections end.
func FuzzWebSocketFrames(f *testing.F) {
	frame := func(op byte, fin bool, payload string) []byte {
		b := []byte{op}
		if fin {
			b[0] |= 0x80
		}
		n := len(payload)
		switch {
		case n < 126:
			b = append(b, 0x80|byte(n))
		case n <= 0xFFFF:
			b = append(b, 0x80|126)
			b = binary.BigEndian.AppendUint16(b, uint16(n))
		default:
			b = append(b, 0x80|127)
			b = binary.BigEndian.AppendUint64(b, uint64(n))
		}
		b = append(b, 0, 0, 0, 0) // a zero mask: the payload goes as is
		return append(b, payload...)
	}
	f.Add(frame(1, true, `{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	f.Add(frame(1, true, `{"jsonrpc":"2.0","id":1,"method":"echo","params":{"s":"\ud800"}}`))
	f.Add(append(frame(1, false, `{"jsonrpc":"2.0",`), frame(0, true, `"id":1,"method":"ping"}`)...))
	f.Add(frame(1, true, "\xff\xfe"))
	f.Add(frame(2, true, `[{"jsonrpc":"2.0","id":1,"method":"ping"}]`))
	f.Add(frame(9, true, "ping"))
	f.Add(frame(8, true, "\x03\xe8bye"))
	f.Add([]byte{0x81, 0xFF, 0x7F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}) // a length of 2^63-1
	f.Add(frame(1, true, strings.Repeat("x", 5000)))

	s, _ := testServer(f, &ServerOptions{MaxLineBytes: 4096, MaxPendingBytes: 64 << 10, LineTimeout: 100 * time.Millisecond, MaxUnauthConns: 64})
	s.Unhandle("slow")
	addr := strings.TrimPrefix(serveWS(f, s), "ws://")

	f.Fuzz(func(t *testing.T, raw []byte) {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		nc.SetDeadline(time.Now().Add(5 * time.Second))
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr, nil)
		req.Header.Set("Upgrade", "websocket")
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Sec-WebSocket-Version", "13")
		req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
		if err := req.Write(nc); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(nc)
		resp, err := http.ReadResponse(br, req)
		if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("handshake: %v %v", resp, err)
		}
		go nc.Write(raw)
		// Take what the server answers for a moment, then hang up: a
		// server that stopped answering shows in the budget check below,
		// and a panic fails the run.
		nc.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		io.Copy(io.Discard, br)
	})
	// Every byte charged was given back.
	s.Close()
	deadline := time.Now().Add(10 * time.Second)
	for s.budget.inUse() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := s.budget.inUse(); n != 0 {
		f.Fatalf("the budget holds %d bytes after the connections ended", n)
	}
}
