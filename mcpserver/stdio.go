package mcpserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The SDK's stdio transport ends the session on a line it cannot decode.
// A host that writes one bad line would lose its agent's messaging, so
// the stream is screened first: a line that is not JSON is answered with
// a JSON-RPC parse error (-32700), a line that is JSON but not a JSON-RPC
// message with an invalid-request error (-32600), and dropped; the
// session goes on.

// maxStdioLine bounds one inbound line, as the SDK's own transport does.
const maxStdioLine = mcp.DefaultMaxLineLength

// ServeStdio serves MCP on newline-delimited JSON-RPC read from r and
// written to w — a host's pipe to the process, os.Stdin and os.Stdout —
// until r ends or ctx does, as Run does. A malformed line is answered with
// a JSON-RPC error and the session goes on. ServeStdio closes r when the
// session ends if r is an io.Closer; it never closes w. It is Run with
// NewLineTransport, so a caller needs no go-sdk import.
func (s *Server) ServeStdio(ctx context.Context, r io.Reader, w io.Writer) error {
	rc, ok := r.(io.ReadCloser)
	if !ok {
		rc = io.NopCloser(r)
	}
	return s.Run(ctx, NewLineTransport(rc, nopCloser{w}))
}

// NewLineTransport returns a transport on a newline-delimited stream
// that answers malformed lines instead of ending the session.
func NewLineTransport(r io.ReadCloser, w io.WriteCloser) mcp.Transport {
	lw := &lineWriter{w: w}
	return &mcp.IOTransport{Reader: &screen{src: r, in: bufio.NewReaderSize(r, 64<<10), out: lw}, Writer: lw, MaxLineLength: -1}
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// lineWriter serializes whole writes: the SDK writes one message with its
// newline per Write, and screen's replies go between them, never inside.
type lineWriter struct {
	mu sync.Mutex
	w  io.WriteCloser
}

func (l *lineWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (l *lineWriter) Close() error { return l.w.Close() }

// screen passes on the well-formed lines of src and answers the others.
type screen struct {
	src     io.Closer
	in      *bufio.Reader
	out     io.Writer
	pending []byte // the rest of a passed line not yet read
}

func (s *screen) Read(p []byte) (int, error) {
	for len(s.pending) == 0 {
		line, err := s.line()
		if len(line) > 0 {
			if ok := s.check(line); ok {
				s.pending = append(line, '\n')
			}
		}
		if err != nil {
			if len(s.pending) > 0 {
				break
			}
			return 0, err
		}
	}
	n := copy(p, s.pending)
	s.pending = s.pending[n:]
	return n, nil
}

func (s *screen) Close() error { return s.src.Close() }

// line reads one line without its newline; an over-long one is skipped
// and answered.
func (s *screen) line() ([]byte, error) {
	var buf []byte
	tooLong := false
	for {
		chunk, err := s.in.ReadSlice('\n')
		if !tooLong {
			if len(buf)+len(chunk) > maxStdioLine {
				tooLong, buf = true, nil
			} else {
				buf = append(buf, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if tooLong {
			s.reply(nil, jsonrpc.CodeParseError, "parse error: line exceeds the limit")
			buf = nil
		}
		return bytes.TrimSpace(buf), err
	}
}

// check reports whether line is a JSON-RPC message (or batch of them),
// answering it if not.
func (s *screen) check(line []byte) bool {
	if !json.Valid(line) {
		s.reply(nil, jsonrpc.CodeParseError, "parse error: the line is not JSON")
		return false
	}
	var batch []json.RawMessage
	if line[0] == '[' {
		if json.Unmarshal(line, &batch) != nil || len(batch) == 0 {
			s.reply(nil, jsonrpc.CodeInvalidRequest, "invalid request: an empty or malformed batch")
			return false
		}
	} else {
		batch = []json.RawMessage{line}
	}
	for _, m := range batch {
		var probe struct {
			JSONRPC string          `json:"jsonrpc"`
			ID      json.RawMessage `json:"id"`
			Method  *string         `json:"method"`
			Result  json.RawMessage `json:"result"`
			Error   json.RawMessage `json:"error"`
		}
		err := json.Unmarshal(m, &probe)
		switch {
		case err != nil:
		case probe.JSONRPC != "2.0":
			err = errors.New(`jsonrpc must be "2.0"`)
		case probe.Method == nil && (len(probe.ID) == 0 || (probe.Result == nil && probe.Error == nil)):
			err = errors.New("neither a request nor a response")
		default:
			_, err = jsonrpc.DecodeMessage(m)
		}
		if err != nil {
			s.reply(probe.ID, jsonrpc.CodeInvalidRequest, "invalid request: "+err.Error())
			return false
		}
	}
	return true
}

func (s *screen) reply(id json.RawMessage, code int, msg string) {
	if len(id) == 0 || (id[0] != '"' && (id[0] < '0' || id[0] > '9') && id[0] != '-') {
		id = json.RawMessage("null")
	}
	b, _ := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}{JSONRPC: "2.0", ID: id, Error: struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}{code, msg}})
	_, _ = s.out.Write(append(b, '\n'))
}
