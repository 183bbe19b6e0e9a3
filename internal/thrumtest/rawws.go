package thrumtest

import (
	"bufio"
	"encoding/base64"
	"net"
	"net/http"
	"strings"
	"time"
)

// RawHandshake opens a TCP connection to the WebSocket at wsURL
// ("ws://HOST:PORT/ws") and upgrades it with no credential and no Origin,
// as a local process would, speaking no more than the handshake. It
// returns the connection (nil unless upgraded) and the HTTP status (0 if
// there was none).
func RawHandshake(wsURL string) (net.Conn, int) {
	host := strings.TrimSuffix(strings.TrimPrefix(wsURL, "ws://"), "/ws")
	nc, err := net.DialTimeout("tcp", host, 10*time.Second)
	if err != nil {
		return nil, 0
	}
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	req, _ := http.NewRequest(http.MethodGet, "http://"+host+"/ws", nil)
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Sec-WebSocket-Version", "13")
	req.Header.Set("Sec-WebSocket-Key", base64.StdEncoding.EncodeToString([]byte("0123456789abcdef")))
	if err := req.Write(nc); err != nil {
		nc.Close()
		return nil, 0
	}
	resp, err := http.ReadResponse(bufio.NewReader(nc), req)
	if err != nil {
		nc.Close()
		return nil, 0
	}
	nc.SetDeadline(time.Time{})
	if resp.StatusCode != http.StatusSwitchingProtocols {
		nc.Close()
		return nil, resp.StatusCode
	}
	return nc, resp.StatusCode
}
