package thrum

import (
	"errors"
	"fmt"

	"github.com/thrumhq/thrum/rpc"
	"github.com/thrumhq/thrum/store"
)

// Sentinels for errors.Is. Every error a Node operation returns is an
// *rpc.Error (possibly wrapped) whose code matches one of these, so a check
// works the same in-process and after the error crossed a socket.
var (
	ErrInvalidParams   = rpc.ErrInvalidParams
	ErrUnauthenticated = rpc.ErrUnauthenticated
	ErrForbidden       = rpc.ErrForbidden
	ErrNotFound        = rpc.ErrNotFound
	ErrConflict        = rpc.ErrConflict
	ErrLimitExceeded   = rpc.ErrLimitExceeded
	ErrUnavailable     = rpc.ErrUnavailable
	ErrStorageFull     = rpc.ErrStorageFull
	ErrInternal        = rpc.ErrInternal
)

func invalid(format string, args ...any) error {
	return rpc.Errorf(rpc.CodeInvalidParams, format, args...)
}

func notFound(format string, args ...any) error {
	return rpc.Errorf(rpc.CodeNotFound, format, args...)
}

// notRegistered is notFound for a caller (or named agent) with no
// registration: its reason lets a client say how to register.
func notRegistered(format string, args ...any) error {
	return rpc.ReasonErrorf(rpc.CodeNotFound, rpc.ReasonAgentNotRegistered, format, args...)
}

func forbidden(format string, args ...any) error {
	return rpc.Errorf(rpc.CodeForbidden, format, args...)
}

func conflict(format string, args ...any) error {
	return rpc.Errorf(rpc.CodeConflict, format, args...)
}

func tooLarge(format string, args ...any) error {
	return rpc.Errorf(rpc.CodeLimitExceeded, format, args...)
}

func unauthenticated(format string, args ...any) error {
	return rpc.Errorf(rpc.CodeUnauthenticated, format, args...)
}

// internal wraps an unexpected failure: the caller sees a generic internal
// error, the cause stays in the chain (and in the log) for us.
func internal(op string, err error) error {
	if err == nil {
		return nil
	}
	var re *rpc.Error
	if errors.As(err, &re) {
		return err
	}
	if store.IsClosed(err) {
		return rpcUnavailable()
	}
	return &causedError{text: fmt.Sprintf("%s: %v", op, err), err: err,
		wire: &rpc.Error{Code: rpc.CodeInternal, Message: "internal error in " + op}}
}

// causedError has two faces, both in its chain: the *rpc.Error a remote
// caller gets (errors.As), and its Go cause (errors.Is).
type causedError struct {
	text string     // what Error says, to a Go caller and the log
	err  error      // the cause
	wire *rpc.Error // what a remote caller gets
}

func (e *causedError) Error() string   { return e.text }
func (e *causedError) Unwrap() []error { return []error{e.err, e.wire} }

// isNotFound reports a store lookup that found nothing.
func isNotFound(err error) bool { return errors.Is(err, store.ErrNotFound) }

func rpcUnavailable() error { return rpc.Errorf(rpc.CodeUnavailable, "thrum is shut down") }
