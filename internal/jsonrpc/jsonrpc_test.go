package jsonrpc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/coder/websocket"
)

// checkReply asserts that out is a well-formed reply: a response object or a
// non-empty array of them. It returns the error codes in it (0 for results).
func checkReply(t testing.TB, out []byte) []int {
	t.Helper()
	if !json.Valid(out) {
		t.Fatalf("reply is not valid JSON: %q", out)
	}
	var objs []json.RawMessage
	if out[0] == '[' {
		if err := json.Unmarshal(out, &objs); err != nil || len(objs) == 0 {
			t.Fatalf("batch reply is not a non-empty array: %q", out)
		}
	} else {
		objs = []json.RawMessage{out}
	}
	var codes []int
	for _, o := range objs {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(o, &m); err != nil {
			t.Fatalf("response is not an object: %q", o)
		}
		if string(m["jsonrpc"]) != `"2.0"` {
			t.Fatalf("response without jsonrpc 2.0: %q", o)
		}
		id, ok := m["id"]
		if !ok || !validID(id) {
			t.Fatalf("response without a valid id: %q", o)
		}
		_, hasResult := m["result"]
		e, hasError := m["error"]
		if hasResult == hasError || len(m) != 3 {
			t.Fatalf("response must have exactly one of result and error: %q", o)
		}
		if hasError {
			var eo struct {
				Code    *int
				Message *string
			}
			if err := json.Unmarshal(e, &eo); err != nil || eo.Code == nil || eo.Message == nil {
				t.Fatalf("malformed error object: %q", o)
			}
			codes = append(codes, *eo.Code)
		} else {
			codes = append(codes, 0)
		}
	}
	return codes
}

func FuzzServeLine(f *testing.F) {
	for _, tc := range protocolCases {
		f.Add([]byte(tc.in))
	}
	f.Add([]byte(""))
	f.Add([]byte("   "))
	f.Add([]byte(`[[]]`))
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"method":"echo","params":{"a":"\ud800"}}`))
	f.Add([]byte("{\"jsonrpc\":\"2.0\",\"id\":\"\xff\",\"method\":\"ping\"}"))
	s, _ := testServer(f, &ServerOptions{MaxBatch: 3})
	s.Unhandle("slow") // would wait for a gate
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, line []byte) {
		out := s.handleMessage(ctx, line)
		if out == nil {
			return // a notification, or a batch of them
		}
		codes := checkReply(t, out)
		if !json.Valid(trimSpace(line)) && (len(codes) != 1 || codes[0] != CodeParseError) {
			t.Fatalf("invalid JSON %q answered with %q", line, out)
		}
	})
}

func TestLineReader(t *testing.T) {
	c40, d41 := strings.Repeat("c", 40), strings.Repeat("d", 41)
	in := "a\n\nbb\r\n" + c40 + "\n" + d41 + "\n"
	for name, r := range map[string]io.Reader{
		"whole":       strings.NewReader(in),
		"byte a time": iotest.OneByteReader(strings.NewReader(in)),
	} {
		t.Run(name, func(t *testing.T) {
			lr := newLineReader(r, 40) // its buffer is smaller than a line: ErrBufferFull is exercised
			for _, want := range []string{"a", "", "bb\r", c40} {
				got, err := lr.next()
				if err != nil || string(got) != want {
					t.Fatalf("got %q, %v; want %q", got, err, want)
				}
			}
			if _, err := lr.next(); !errors.Is(err, errLineTooLong) {
				t.Fatalf("41 bytes over a limit of 40: %v", err)
			}
		})
	}
	lr := newLineReader(strings.NewReader("x\nlast"), 10)
	for _, want := range []string{"x", "last"} {
		if got, err := lr.next(); err != nil || string(got) != want {
			t.Fatalf("got %q, %v; want %q", got, err, want)
		}
	}
	if _, err := lr.next(); err != io.EOF {
		t.Fatalf("after the last line: %v, want EOF", err)
	}
}

// floodFrame is one random, mostly malformed frame and what it must get.
type floodFrame struct {
	msg      string
	want     int  // expected error code, 0 for a result
	silent   bool // a notification: no reply
	oversize bool // closes the connection
}

func randomFrame(r *rand.Rand, limit int) floodFrame {
	switch r.IntN(12) {
	case 0: // random bytes that are not JSON
		for {
			b := make([]byte, 1+r.IntN(64))
			for i := range b {
				b[i] = byte(r.IntN(256))
				if b[i] == '\n' {
					b[i] = 'n'
				}
			}
			b[0] = '{' // never whitespace-only, so never skipped
			if !json.Valid(b) {
				return floodFrame{msg: string(b), want: CodeParseError}
			}
		}
	case 1: // truncated request
		req := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"ping","params":{"k":"v"}}`, r.IntN(1000))
		return floodFrame{msg: req[:1+r.IntN(len(req)-2)], want: CodeParseError}
	case 2: // valid JSON, not an object
		vals := []string{`1`, `"s"`, `true`, `null`, `[1,2]`, `[[]]`, `-0.5e3`}
		v := vals[r.IntN(len(vals))]
		if v == `[1,2]` || v == `[[]]` { // a batch of non-objects: an array of errors
			return floodFrame{msg: v, want: CodeInvalidRequest}
		}
		return floodFrame{msg: v, want: CodeInvalidRequest}
	case 3: // wrong version or types
		bad := []string{
			`{"jsonrpc":"1.0","id":1,"method":"ping"}`,
			`{"jsonrpc":"2.0","id":1,"method":7}`,
			`{"jsonrpc":"2.0","id":[1],"method":"ping"}`,
			`{"jsonrpc":"2.0","id":1,"method":"echo","params":"p"}`,
			`{"id":1,"method":"ping"}`,
			`{}`,
		}
		return floodFrame{msg: bad[r.IntN(len(bad))], want: CodeInvalidRequest}
	case 4:
		return floodFrame{msg: fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"m%d"}`, r.IntN(1e6), r.IntN(1e6)), want: CodeMethodNotFound}
	case 5:
		return floodFrame{msg: `{"jsonrpc":"2.0","method":"nope","params":[1]}`, silent: true}
	case 6:
		return floodFrame{msg: `{"jsonrpc":"2.0","id":"f","method":"fail","params":{}}`, want: CodeInvalidParams}
	case 7:
		return floodFrame{msg: `[]`, want: CodeInvalidRequest}
	case 8:
		return floodFrame{msg: `{"jsonrpc":"2.0","id":"b","method":"boom"}`, want: CodeInternal}
	case 9: // random unicode and escapes inside a valid request
		s := make([]rune, r.IntN(20))
		for i := range s {
			s[i] = rune(r.IntN(0x10000))
		}
		p, _ := json.Marshal([]string{string(s)})
		return floodFrame{msg: fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"echo","params":%s}`, r.IntN(100), p)}
	case 10:
		if r.IntN(20) == 0 {
			return floodFrame{msg: `{"jsonrpc":"2.0","id":1,"method":"echo","params":["` + strings.Repeat("o", limit) + `"]}`, oversize: true}
		}
		return floodFrame{msg: `[{"jsonrpc":"2.0","id":1,"method":"nope"},{"jsonrpc":"2.0","method":"ping"}]`, want: CodeMethodNotFound}
	default:
		return floodFrame{msg: `{"jsonrpc":"2.0","id":"p","method":"ping"}`}
	}
}

// floodConn is a connection the flood test can reopen.
type floodConn interface {
	send(msg string) error
	recv() (string, error)
	close()
}

type unixFlood struct{ u *unixConn }

func (f *unixFlood) send(msg string) error { _, err := io.WriteString(f.u.nc, msg+"\n"); return err }
func (f *unixFlood) recv() (string, error) { return f.u.line() }
func (f *unixFlood) close()                { f.u.nc.Close() }

type wsFlood struct{ ws *websocket.Conn }

func (f *wsFlood) send(msg string) error {
	return f.ws.Write(context.Background(), websocket.MessageText, []byte(msg))
}
func (f *wsFlood) recv() (string, error) { return wsRead(f.ws) }
func (f *wsFlood) close()                { f.ws.CloseNow() }

// TestFlood sends 10,000 random, mostly malformed frames over one
// connection per transport (reopened when the server closes it after an
// oversize frame) and checks each reply's error code, then that the server
// still answers.
func TestFlood(t *testing.T) {
	checkLeaks(t)
	const frames, limit = 10000, 4096
	s, _ := testServer(t, &ServerOptions{MaxLineBytes: limit, MaxBatch: 3})
	path := serveUnix(t, s)
	url := serveWS(t, s)
	dialers := map[string]func(t *testing.T) floodConn{
		"unix":      func(t *testing.T) floodConn { return &unixFlood{dialUnix(t, path)} },
		"websocket": func(t *testing.T) floodConn { return &wsFlood{dialWS(t, url, nil)} },
	}
	for name, dial := range dialers {
		t.Run(name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, uint64(len(name))))
			c := dial(t)
			reopened := 0
			for i := range frames {
				f := randomFrame(r, limit)
				if err := c.send(f.msg); err != nil {
					t.Fatalf("frame %d: send: %v", i, err)
				}
				if f.oversize {
					got, err := c.recv()
					if name == "unix" && (err != nil || !strings.Contains(got, `"code":-32600`)) {
						t.Fatalf("frame %d: oversize line: %q, %v", i, got, err)
					}
					if name == "websocket" && closeStatus(err) != int(websocket.StatusMessageTooBig) {
						t.Fatalf("frame %d: oversize frame: %q, %v", i, got, err)
					}
					c.close()
					c = dial(t)
					reopened++
					continue
				}
				if f.silent { // prove there is no reply: the sentinel's comes next
					if err := c.send(sentinel); err != nil {
						t.Fatal(err)
					}
				}
				got, err := c.recv()
				if err != nil {
					t.Fatalf("frame %d %q: %v", i, f.msg, err)
				}
				if f.silent {
					if got != sentinelReply {
						t.Fatalf("frame %d %q: a notification got %s", i, f.msg, got)
					}
					continue
				}
				codes := checkReply(t, []byte(got))
				for _, code := range codes {
					if code != f.want {
						t.Fatalf("frame %d %q: got %s, want code %d", i, f.msg, got, f.want)
					}
				}
			}
			if err := c.send(sentinel); err != nil {
				t.Fatal(err)
			}
			if got, err := c.recv(); got != sentinelReply {
				t.Fatalf("after the flood: %q, %v", got, err)
			}
			c.close()
			if reopened == 0 {
				t.Fatal("no oversize frame was sent")
			}
		})
	}
}

func TestEncodeRequest(t *testing.T) {
	for _, tc := range []struct {
		id     string
		params any
		want   string
	}{
		{"", nil, `{"jsonrpc":"2.0","method":"m"}`},
		{"7", []int{1}, `{"jsonrpc":"2.0","id":7,"method":"m","params":[1]}`},
		{"8", json.RawMessage(nil), `{"jsonrpc":"2.0","id":8,"method":"m"}`},
	} {
		var id json.RawMessage
		if tc.id != "" {
			id = json.RawMessage(tc.id)
		}
		got, err := encodeRequest(id, "m", tc.params)
		if err != nil || string(got) != tc.want {
			t.Errorf("got %s, %v; want %s", got, err, tc.want)
		}
	}
	if _, err := encodeRequest(nil, "m", func() {}); err == nil {
		t.Error("unmarshallable params: no error")
	}
	// An *Error whose Data cannot be marshalled is sent without it.
	out := encodeError(json.RawMessage("1"), &Error{Code: -32000, Message: "m", Data: func() {}})
	if !bytes.Equal(out, []byte(`{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"m"}}`)) {
		t.Errorf("got %s", out)
	}
}
