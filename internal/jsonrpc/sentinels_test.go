package jsonrpc

// Sentinels for the tests' errors.Is checks, as package rpc declares them
// for thrum's callers.
var (
	ErrInvalidRequest = &Error{Code: CodeInvalidRequest, Message: "invalid request"}
	ErrMethodNotFound = &Error{Code: CodeMethodNotFound, Message: "method not found"}
	ErrInvalidParams  = &Error{Code: CodeInvalidParams, Message: "invalid params"}
	ErrInternal       = &Error{Code: CodeInternal, Message: "internal error"}
	ErrLimitExceeded  = &Error{Code: CodeLimitExceeded, Message: "limit exceeded"}
)
