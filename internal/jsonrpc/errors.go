package jsonrpc

import "fmt"

// The JSON-RPC 2.0 error codes this package sends, and the codes of the
// implementation-defined server range it uses for its limits and for a
// credential refused in a WebSocket's handshake (-32002). Package
// rpc declares the same values as thrum's contract, with thrum's own codes
// beside them.
const (
	CodeParseError      = -32700 // the bytes are not JSON
	CodeInvalidRequest  = -32600 // JSON, but not a JSON-RPC 2.0 request
	CodeMethodNotFound  = -32601 // no such method
	CodeInvalidParams   = -32602 // a parameter is missing, malformed or out of range
	CodeInternal        = -32603 // a fault of the server, not of the request
	CodeUnauthenticated = -32002 // a credential is needed, or the one given was refused
	CodeLimitExceeded   = -32006 // a size, count or rate limit was hit
	CodeUnavailable     = -32007 // the server is shutting down
)

// Error is a JSON-RPC error object. It keeps its code across the wire:
// errors.Is matches any two *Error values with the same code, so a check
// holds for an error built locally and for one decoded from a reply alike.
// Package rpc re-declares it (rpc.Error) as thrum's one error type.
type Error struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
}

// Error returns the message, which is what the wire carries.
func (e *Error) Error() string { return e.Message }

// Is reports whether target is an *Error with the same code, so that a
// sentinel matches any error of its kind.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// Errorf returns an *Error with the given code and a formatted message.
func Errorf(code int, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}
