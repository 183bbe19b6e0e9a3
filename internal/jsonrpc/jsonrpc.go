// Package jsonrpc is a JSON-RPC 2.0 engine, both sides: a Server that
// serves newline-delimited JSON on Unix sockets and in-process pipes and one
// message per frame on WebSockets, with batches, server push notifications
// and limits; and a Client for the same transports. It knows no methods:
// the caller registers them with Server.Handle. thrum's methods, their
// params and results and its error codes are package rpc, the contract;
// thrum.RPCServer binds them to a node on this engine.
//
// Guarantees: requests of one connection are handled in order, one at a
// time, and each reply is written whole on its own line (or frame);
// notifications a handler queues before replying are written before the
// reply; notifying never blocks (a connection that does not keep up is
// closed); bad input gets the JSON-RPC error its kind calls for and never
// takes the server down.
package jsonrpc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"strconv"
	"unicode/utf8"
)

// HandlerFunc answers one method call. params is the raw "params" member of
// the request (nil when absent); it is the handler's own copy. The returned
// value is marshalled as the "result" member (nil becomes null). An error is
// sent as the "error" member: an *Error anywhere in its chain keeps its
// code, message and data; anything else is logged and sent as -32603
// "internal error", its text kept out of the reply. For a notification (a
// request without an id) the result and the error are dropped.
//
// The ctx is cancelled when the connection ends or the server is closed;
// ConnFromContext(ctx) returns the connection the call arrived on.
type HandlerFunc func(ctx context.Context, params json.RawMessage) (any, error)

// DecodeParams unmarshals a request's params into p, a pointer to a
// struct: absent or null means all defaults; anything but an object, or
// a field of the wrong type, is a -32602 error naming the field.
func DecodeParams(raw json.RawMessage, p any) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil
	}
	if raw[0] != '{' {
		return Errorf(CodeInvalidParams, "params must be an object with named fields")
	}
	if err := json.Unmarshal(raw, p); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return Errorf(CodeInvalidParams, "invalid params: %s must be %s, not %s", te.Field, jsonKind(te.Type.Kind().String()), te.Value)
		}
		return Errorf(CodeInvalidParams, "invalid params: %v", err)
	}
	return nil
}

// jsonKind names, for a caller, the JSON kind a Go kind decodes from.
func jsonKind(k string) string {
	switch k {
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "int", "int64", "int32", "uint", "uint64", "float64":
		return "a number"
	case "slice":
		return "an array"
	case "struct", "map", "ptr":
		return "an object"
	}
	return k
}

const jsonrpcVersion = "2.0"

// request is one decoded JSON-RPC request object.
type request struct {
	id     json.RawMessage // raw JSON of the id (string, number or null); nil when absent
	method string
	params json.RawMessage
}

func (r *request) isNotification() bool { return r.id == nil }

// errInvalidRequest describes why a JSON value is not a request object. The
// id is the request's id when it could be read (for the reply), else nil.
type errInvalidRequest struct {
	id  json.RawMessage
	msg string
}

// decodeRequest decodes one JSON value, already known to be valid JSON, into
// a request. It is strict: member names are case-sensitive, "jsonrpc" must
// be "2.0", "method" a string, "params" an object or an array if present and
// "id" a string, a number or null if present.
func decodeRequest(raw []byte) (*request, *errInvalidRequest) {
	if len(raw) == 0 || raw[0] != '{' {
		return nil, &errInvalidRequest{msg: "invalid request: not a JSON object"}
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, &errInvalidRequest{msg: "invalid request: not a JSON object"}
	}
	var r request
	if id, ok := m["id"]; ok {
		if !validID(id) {
			return nil, &errInvalidRequest{msg: "invalid request: id must be a string, a number or null"}
		}
		r.id = id
	}
	var version string
	if v, ok := m["jsonrpc"]; !ok || json.Unmarshal(v, &version) != nil || version != jsonrpcVersion {
		return nil, &errInvalidRequest{id: r.id, msg: `invalid request: "jsonrpc" must be "2.0"`}
	}
	meth, ok := m["method"]
	if !ok || meth[0] != '"' || json.Unmarshal(meth, &r.method) != nil {
		return nil, &errInvalidRequest{id: r.id, msg: `invalid request: "method" must be a string`}
	}
	if p, ok := m["params"]; ok {
		if p[0] != '{' && p[0] != '[' {
			return nil, &errInvalidRequest{id: r.id, msg: `invalid request: "params" must be an object or an array`}
		}
		r.params = p
	}
	return &r, nil
}

// validID reports whether raw (a valid JSON value) may be a request id.
func validID(raw json.RawMessage) bool {
	if len(raw) == 0 {
		return false
	}
	switch c := raw[0]; {
	case c == '"', c == '-', c >= '0' && c <= '9':
		return true
	case c == 'n':
		return string(raw) == "null"
	}
	return false
}

// appendResult appends a success response.
func appendResult(dst []byte, id, result json.RawMessage) []byte {
	dst = append(dst, `{"jsonrpc":"2.0","id":`...)
	dst = appendID(dst, id)
	dst = append(dst, `,"result":`...)
	dst = append(dst, result...)
	return append(dst, '}')
}

// appendError appends an error response; a nil id is sent as null.
func appendError(dst []byte, id json.RawMessage, e *Error) []byte {
	b, err := json.Marshal(e)
	if err != nil { // Data that does not marshal: send the error without it
		b, _ = json.Marshal(&Error{Code: e.Code, Message: e.Message})
	}
	dst = append(dst, `{"jsonrpc":"2.0","id":`...)
	dst = appendID(dst, id)
	dst = append(dst, `,"error":`...)
	dst = append(dst, b...)
	return append(dst, '}')
}

func appendID(dst []byte, id json.RawMessage) []byte {
	if id == nil {
		return append(dst, "null"...)
	}
	return append(dst, id...)
}

// encodeError is a whole error response as its own slice.
func encodeError(id json.RawMessage, e *Error) []byte { return appendError(nil, id, e) }

// encodeNotification encodes a notification (a request without an id).
func encodeNotification(method string, params any) ([]byte, error) {
	return encodeRequest(nil, method, params)
}

// encodeRequest encodes a request with the given id (nil for a
// notification). Params that marshal to null are left out.
func encodeRequest(id json.RawMessage, method string, params any) ([]byte, error) {
	m, err := json.Marshal(method)
	if err != nil {
		return nil, err
	}
	b := append(make([]byte, 0, 64), `{"jsonrpc":"2.0"`...)
	if id != nil {
		b = append(b, `,"id":`...)
		b = append(b, id...)
	}
	b = append(b, `,"method":`...)
	b = append(b, m...)
	if params != nil {
		p, err := json.Marshal(params)
		if err != nil {
			return nil, fmt.Errorf("marshal params: %w", err)
		}
		if string(p) != "null" {
			b = append(b, `,"params":`...)
			b = append(b, p...)
		}
	}
	return append(b, '}'), nil
}

// isSpace reports JSON whitespace.
func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

// trimSpace trims JSON whitespace from both ends.
func trimSpace(b []byte) []byte {
	for len(b) > 0 && isSpace(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

// loneSurrogate reports whether valid JSON holds a \u escape of a UTF-16
// surrogate that is not half of a pair.
func loneSurrogate(b []byte) bool {
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		i++ // the escaped character; in valid JSON there is one
		if b[i] != 'u' {
			continue
		}
		r := hex4(b[i+1:])
		i += 4
		switch {
		case r >= 0xDC00 && r <= 0xDFFF:
			return true
		case r >= 0xD800 && r <= 0xDBFF:
			if i+6 >= len(b) || b[i+1] != '\\' || b[i+2] != 'u' {
				return true
			}
			if lo := hex4(b[i+3:]); lo < 0xDC00 || lo > 0xDFFF {
				return true
			}
			i += 6
		}
	}
	return false
}

// hex4 decodes four hex digits (valid JSON guarantees them).
func hex4(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		}
	}
	return r
}

// idOf returns the id of msg, a request object refused as a whole, if
// the id can be echoed exactly (it is valid UTF-8 and has no lone
// surrogate escape), else nil. The refusal then reaches its caller, whose
// client would otherwise never see an answer to its call (an error with
// a null id belongs to no call).
func idOf(msg []byte) json.RawMessage {
	if msg[0] != '{' {
		return nil // a batch: refused as a whole, with a null id
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(msg, &m) != nil {
		return nil
	}
	id := m["id"]
	if id == nil || !validID(id) || !utf8.Valid(id) || loneSurrogate(id) {
		return nil
	}
	return id
}

// handleMessage decodes one message — a request, a notification or a batch —
// runs it and returns the encoded reply, or nil when no reply is due (a
// notification, or a batch of notifications). It never panics on any input.
func (s *Server) handleMessage(ctx context.Context, msg []byte) []byte {
	msg = trimSpace(msg)
	if !json.Valid(msg) {
		return encodeError(nil, &Error{Code: CodeParseError, Message: "parse error: the request is not valid JSON"})
	}
	// encoding/json would replace invalid UTF-8 and lone surrogate escapes
	// with U+FFFD, silently changing what the caller sent: refuse them.
	if !utf8.Valid(msg) {
		return encodeError(idOf(msg), &Error{Code: CodeParseError, Message: "parse error: the request is not valid UTF-8"})
	}
	if loneSurrogate(msg) {
		return encodeError(idOf(msg), &Error{Code: CodeParseError, Message: `parse error: the request has a \u escape of a lone UTF-16 surrogate, which is not a character`})
	}
	if msg[0] != '[' {
		return s.handleOne(ctx, nil, msg)
	}
	var batch []json.RawMessage
	if err := json.Unmarshal(msg, &batch); err != nil { // cannot happen after json.Valid
		return encodeError(nil, &Error{Code: CodeParseError, Message: "parse error: the request is not valid JSON"})
	}
	if len(batch) == 0 {
		return encodeError(nil, &Error{Code: CodeInvalidRequest, Message: "invalid request: empty batch"})
	}
	if len(batch) > s.opts.MaxBatch {
		return encodeError(nil, Errorf(CodeInvalidRequest, "batch too large: limit is %d requests", s.opts.MaxBatch))
	}
	// Requests of a batch run in order, like requests on one connection.
	out := []byte{'['}
	for _, raw := range batch {
		n := len(out)
		if n > 1 {
			out = append(out, ',')
		}
		if r := s.handleOne(ctx, out, raw); len(r) > len(out) {
			out = r
		} else {
			out = out[:n]
		}
	}
	if len(out) == 1 {
		return nil
	}
	return append(out, ']')
}

// handleOne runs one request (valid JSON) and appends its response to dst;
// it returns dst unchanged when no response is due.
func (s *Server) handleOne(ctx context.Context, dst []byte, raw []byte) []byte {
	req, bad := decodeRequest(raw)
	if bad != nil {
		return appendError(dst, bad.id, &Error{Code: CodeInvalidRequest, Message: bad.msg})
	}
	result, e := s.call(ctx, req)
	if req.isNotification() {
		return dst
	}
	if e != nil {
		return appendError(dst, req.id, e)
	}
	return appendResult(dst, req.id, result)
}

// call runs the handler of req and returns its encoded result or its error.
func (s *Server) call(ctx context.Context, req *request) (result json.RawMessage, e *Error) {
	h := s.handler(req.method)
	if h == nil {
		return nil, Errorf(CodeMethodNotFound, "method not found: %s", strconv.Quote(req.method))
	}
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("rpc: handler panicked", "method", req.method, "panic", p, "stack", string(debug.Stack()))
			result, e = nil, &Error{Code: CodeInternal, Message: "internal error"}
		}
	}()
	v, err := h(ctx, req.params)
	if err != nil {
		return nil, s.wireError(req.method, err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		s.log.Error("rpc: cannot marshal result", "method", req.method, "err", err)
		return nil, &Error{Code: CodeInternal, Message: "internal error"}
	}
	return b, nil
}

// wireError converts a handler's error for the wire, logging those that are
// not *Error (they are faults of the server, and their text stays here).
func (s *Server) wireError(method string, err error) *Error {
	var e *Error
	if errors.As(err, &e) && e != nil {
		return e
	}
	s.log.Error("rpc: handler failed", "method", method, "err", err)
	return &Error{Code: CodeInternal, Message: "internal error"}
}

// errLineTooLong is returned by lineReader for a line over its limit.
var errLineTooLong = errors.New("line too long")

// lineReader splits a stream into newline-terminated lines of bounded size.
// A final line without a newline is returned before io.EOF. The bytes of a
// line are charged to charge (if set) as they are read, so a line is
// refused the moment the server's budget runs out, never buffered whole
// first; arm (if set) is called with true when a line has begun but is not
// yet complete, and with false when it is, so the transport can time out a
// line left half sent.
type lineReader struct {
	br     *bufio.Reader
	max    int
	buf    []byte
	charge *charge
	arm    func(on bool)
}

// lineReaderBuf is the size of a line reader's buffer: lines that fit are
// returned without a copy; longer ones are assembled in a growing buffer.
const lineReaderBuf = 16 << 10

func newLineReader(r io.Reader, max int) *lineReader {
	return &lineReader{br: bufio.NewReaderSize(r, min(max+1, lineReaderBuf)), max: max}
}

// next returns the next line without its '\n'. The slice is valid until the
// next call.
func (r *lineReader) next() ([]byte, error) {
	if cap(r.buf) > 64<<10 { // do not keep a large buffer for an idle conn
		r.buf = nil
	}
	r.buf = r.buf[:0]
	if r.arm != nil {
		// Wait for the line's first byte without a deadline (an idle
		// connection is fine); from there the whole line must arrive in time.
		if _, err := r.br.Peek(1); err != nil {
			return nil, err
		}
		if b, _ := r.br.Peek(r.br.Buffered()); bytes.IndexByte(b, '\n') < 0 {
			r.arm(true)
			defer r.arm(false)
		}
	}
	for {
		frag, err := r.br.ReadSlice('\n')
		n := len(frag)
		if err == nil {
			n-- // drop the '\n'
		}
		if len(r.buf)+n > r.max {
			return nil, errLineTooLong
		}
		if err == nil && len(r.buf) == 0 {
			// The whole line is in the buffer: no copy.
			if r.charge != nil {
				if cerr := r.charge.take(n); cerr != nil {
					return nil, cerr
				}
			}
			return frag[:n], nil
		}
		if len(r.buf)+n > cap(r.buf) {
			// Grow by doubling, charging each new buffer whole: the old one
			// is garbage until collected, and counts until the request ends.
			c := min(max(2*cap(r.buf), len(r.buf)+n, lineReaderBuf), r.max)
			if r.charge != nil {
				if cerr := r.charge.take(c); cerr != nil {
					return nil, cerr
				}
			}
			nb := make([]byte, len(r.buf), c)
			copy(nb, r.buf)
			r.buf = nb
		}
		r.buf = append(r.buf, frag[:n]...)
		switch {
		case err == nil:
			return r.buf, nil
		case errors.Is(err, bufio.ErrBufferFull):
		case errors.Is(err, io.EOF) && len(r.buf) > 0:
			return r.buf, nil // the last line lacked its newline; EOF comes next call
		default:
			return nil, err
		}
	}
}

// discardLogger is the logger of a nil *slog.Logger option.
var discardLogger = slog.New(slog.DiscardHandler)
