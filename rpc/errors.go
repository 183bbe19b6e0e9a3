package rpc

import "github.com/thrumhq/thrum/internal/jsonrpc"

// JSON-RPC 2.0 error codes, and thrum's own codes in the range the
// specification reserves for implementation-defined server errors.
const (
	CodeParseError     = jsonrpc.CodeParseError     // -32700: the bytes are not JSON
	CodeInvalidRequest = jsonrpc.CodeInvalidRequest // -32600: JSON, but not a JSON-RPC 2.0 request
	CodeMethodNotFound = jsonrpc.CodeMethodNotFound // -32601: no such method (or not on this transport setup)
	CodeInvalidParams  = jsonrpc.CodeInvalidParams  // -32602: a parameter is missing, malformed or out of range
	CodeInternal       = jsonrpc.CodeInternal       // -32603: a fault of the server, not of the request
	CodeServerError    = -32000                     // generic server error
	CodeTransport      = -32001                     // the method is not available on this transport

	CodeUnauthenticated = jsonrpc.CodeUnauthenticated // -32002: the call needs an identity and none was given, or the credential was refused
	CodeForbidden       = -32003                      // the identity may not do this
	CodeNotFound        = -32004                      // the named thing does not exist
	CodeConflict        = -32005                      // the thing exists already, or its state forbids the change
	CodeLimitExceeded   = jsonrpc.CodeLimitExceeded   // -32006: a size, count or rate limit was hit
	CodeUnavailable     = jsonrpc.CodeUnavailable     // -32007: the server is shutting down or not ready
	CodeStorageFull     = -32008                      // the disk is full: the message says where; writes resume when space is freed
	CodeIdempotencyKey  = -32009                      // the idempotency key was used for a different request: the message and data name what it made
	CodeDeadlinePassed  = -32010                      // the deadline the caller gave passed before the call acted: nothing was done
)

// Error is the one error type of thrum: a JSON-RPC error object
// {"code", "message", "data"}, with Code one of the Code constants, Message
// a sentence for the caller, and Data optional details. It keeps its code
// across the wire: its Is method matches any *Error with the same code, so
// errors.Is(err, ErrNotFound) holds for an error built locally and for one
// decoded from a daemon's reply alike. Error returns Message.
//
// It is the JSON-RPC engine's error type, so that the engine and the
// client send and decode it without a conversion.
type Error = jsonrpc.Error

// Errorf returns an *Error with the given code and a formatted message.
func Errorf(code int, format string, args ...any) *Error {
	return jsonrpc.Errorf(code, format, args...)
}

// Sentinels for errors.Is. Their messages are generic; errors returned by
// thrum carry a specific message with the same code.
var (
	ErrParse           = &Error{Code: CodeParseError, Message: "parse error"}
	ErrInvalidRequest  = &Error{Code: CodeInvalidRequest, Message: "invalid request"}
	ErrMethodNotFound  = &Error{Code: CodeMethodNotFound, Message: "method not found"}
	ErrInvalidParams   = &Error{Code: CodeInvalidParams, Message: "invalid params"}
	ErrInternal        = &Error{Code: CodeInternal, Message: "internal error"}
	ErrWrongTransport  = &Error{Code: CodeTransport, Message: "method not available on this transport"}
	ErrUnauthenticated = &Error{Code: CodeUnauthenticated, Message: "no caller identity"}
	ErrForbidden       = &Error{Code: CodeForbidden, Message: "forbidden"}
	ErrNotFound        = &Error{Code: CodeNotFound, Message: "not found"}
	ErrConflict        = &Error{Code: CodeConflict, Message: "conflict"}
	ErrLimitExceeded   = &Error{Code: CodeLimitExceeded, Message: "limit exceeded"}
	ErrUnavailable     = &Error{Code: CodeUnavailable, Message: "unavailable"}
	ErrStorageFull     = &Error{Code: CodeStorageFull, Message: "disk full"}
	ErrIdempotencyKey  = &Error{Code: CodeIdempotencyKey, Message: "idempotency key reused for a different request"}
	ErrDeadlinePassed  = &Error{Code: CodeDeadlinePassed, Message: "deadline passed"}
)

// ErrConnClosed is (or is wrapped in) the error of a Client call on a
// connection that has ended.
var ErrConnClosed = jsonrpc.ErrConnClosed
