package thrumtest

import (
	"bufio"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"
)

// RawWS is the client end of a WebSocket spoken by hand, so that a test
// controls every header of the handshake and every byte of a frame, which
// a well-behaved client library would never send: the security and attack
// suites' WebSocket client.
type RawWS struct {
	Conn net.Conn
	br   *bufio.Reader // holds what was read past the handshake's response
}

// WebSocket opcodes and close codes (RFC 6455 §5.2, §7.4.1).
const (
	WSOpText  = 0x1
	WSOpClose = 0x8

	wsOpCont = 0x0
	wsOpPing = 0x9
	wsOpPong = 0xA

	WSStatusNormal     = 1000
	WSStatusMessageBig = 1009
)

// rawIOTimeout bounds every raw read and write, so that a daemon that
// stops answering fails the test instead of hanging it.
const rawIOTimeout = 10 * time.Second

// Handshake connects to the WebSocket endpoint at wsURL
// ("ws://HOST:PORT/ws") and sends an opening handshake with the given Host
// header ("" for the address dialled) and extra headers, which may replace
// the handshake's own (to send a broken one). It returns the response
// (its body read into body) and, when the server switched protocols, the
// upgraded connection; otherwise the connection is closed. err is a
// failure to dial or to read a response at all.
func Handshake(wsURL, host string, hdr http.Header) (resp *http.Response, body string, ws *RawWS, err error) {
	u, err := url.Parse(wsURL)
	if err != nil {
		return nil, "", nil, err
	}
	nc, err := net.DialTimeout("tcp", u.Host, rawIOTimeout)
	if err != nil {
		return nil, "", nil, err
	}
	nc.SetDeadline(time.Now().Add(rawIOTimeout))
	key := make([]byte, 16)
	for i := range key {
		key[i] = byte(i * 7)
	}
	req := &http.Request{
		Method:     http.MethodGet,
		URL:        &url.URL{Scheme: "http", Host: u.Host, Path: u.Path},
		Host:       host,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     http.Header{},
	}
	for k, vs := range hdr {
		req.Header[k] = append([]string(nil), vs...)
	}
	for k, v := range map[string]string{
		"Upgrade":               "websocket",
		"Connection":            "Upgrade",
		"Sec-WebSocket-Version": "13",
		"Sec-WebSocket-Key":     base64.StdEncoding.EncodeToString(key),
	} {
		if req.Header.Get(k) == "" {
			req.Header.Set(k, v)
		}
	}
	if err := req.Write(nc); err != nil {
		nc.Close()
		return nil, "", nil, err
	}
	br := bufio.NewReader(nc)
	resp, err = http.ReadResponse(br, req)
	if err != nil {
		nc.Close()
		return nil, "", nil, fmt.Errorf("handshake (Host %q, %v): %w", host, hdr, err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		nc.Close()
		return resp, string(b), nil, nil
	}
	nc.SetDeadline(time.Time{})
	return resp, "", &RawWS{Conn: nc, br: br}, nil
}

// RawHandshake opens a WebSocket to wsURL with no credential and no
// Origin, as any local process could, for callers that cannot fail a test
// (goroutines of an attack). It returns the connection (nil unless
// upgraded) and the HTTP status (0 if there was none).
func RawHandshake(wsURL string) (*RawWS, int) {
	resp, _, ws, err := Handshake(wsURL, "", nil)
	if err != nil {
		return nil, 0
	}
	return ws, resp.StatusCode
}

// Close closes the connection without a close frame.
func (c *RawWS) Close() error { return c.Conn.Close() }

// WriteFrame writes one final, masked frame.
func (c *RawWS) WriteFrame(op byte, payload []byte) error {
	buf := make([]byte, 0, 14+len(payload))
	buf = append(buf, 0x80|op)
	switch n := len(payload); {
	case n < 126:
		buf = append(buf, 0x80|byte(n))
	case n <= 0xFFFF:
		buf = append(buf, 0x80|126)
		buf = binary.BigEndian.AppendUint16(buf, uint16(n))
	default:
		buf = append(buf, 0x80|127)
		buf = binary.BigEndian.AppendUint64(buf, uint64(n))
	}
	mask := [4]byte{0x5a, 0x13, 0xc7, 0x2e}
	buf = append(buf, mask[:]...)
	start := len(buf)
	buf = append(buf, payload...)
	// Mask 8 bytes at a time: frames of several MiB are sent under -race.
	p := buf[start:]
	m8 := binary.LittleEndian.Uint64(append(mask[:], mask[:]...))
	for len(p) >= 8 {
		binary.LittleEndian.PutUint64(p, binary.LittleEndian.Uint64(p)^m8)
		p = p[8:]
	}
	for i := range p {
		p[i] ^= mask[i%4]
	}
	c.Conn.SetWriteDeadline(time.Now().Add(rawIOTimeout))
	_, err := c.Conn.Write(buf)
	return err
}

// Send writes one text message.
func (c *RawWS) Send(msg []byte) error { return c.WriteFrame(WSOpText, msg) }

// Read returns the next data message, or for a close frame its opcode and
// payload; it answers pings on the way.
func (c *RawWS) Read() (op byte, msg []byte, err error) {
	c.Conn.SetReadDeadline(time.Now().Add(rawIOTimeout))
	var out []byte
	var first byte
	for {
		var h [2]byte
		if _, err := io.ReadFull(c.br, h[:]); err != nil {
			return 0, nil, err
		}
		fin, fop := h[0]&0x80 != 0, h[0]&0x0F
		if h[1]&0x80 != 0 {
			return 0, nil, errors.New("server sent a masked frame")
		}
		n := uint64(h[1] & 0x7F)
		switch n {
		case 126:
			var b [2]byte
			if _, err := io.ReadFull(c.br, b[:]); err != nil {
				return 0, nil, err
			}
			n = uint64(binary.BigEndian.Uint16(b[:]))
		case 127:
			var b [8]byte
			if _, err := io.ReadFull(c.br, b[:]); err != nil {
				return 0, nil, err
			}
			n = binary.BigEndian.Uint64(b[:])
		}
		if n > 64<<20 {
			return 0, nil, fmt.Errorf("server frame of %d bytes", n)
		}
		p := make([]byte, n)
		if _, err := io.ReadFull(c.br, p); err != nil {
			return 0, nil, err
		}
		switch fop {
		case wsOpPing:
			if err := c.WriteFrame(wsOpPong, p); err != nil {
				return 0, nil, err
			}
			continue
		case wsOpPong:
			continue
		case WSOpClose:
			return WSOpClose, p, nil
		case wsOpCont:
		default:
			first = fop
		}
		out = append(out, p...)
		if fin {
			return first, out, nil
		}
	}
}

// ReadReply returns the next data message; a close frame is a *WSClosed
// error carrying its status.
func (c *RawWS) ReadReply() ([]byte, error) {
	op, msg, err := c.Read()
	if err != nil {
		return nil, err
	}
	if op == WSOpClose {
		code := 1005 // no status
		if len(msg) >= 2 {
			code = int(binary.BigEndian.Uint16(msg))
		}
		return nil, &WSClosed{Code: code, Reason: string(msg[min(2, len(msg)):])}
	}
	return msg, nil
}

// CloseAck answers the server's close frame and ends the connection.
func (c *RawWS) CloseAck() {
	_ = c.WriteFrame(WSOpClose, binary.BigEndian.AppendUint16(nil, WSStatusNormal))
	c.Conn.Close()
}

// WSClosed is the server's close frame, as an error.
type WSClosed struct {
	Code   int
	Reason string
}

func (e *WSClosed) Error() string { return fmt.Sprintf("websocket closed: %d %s", e.Code, e.Reason) }
