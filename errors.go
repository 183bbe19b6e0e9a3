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
	return &internalError{op: op, err: err}
}

type internalError struct {
	op  string
	err error
}

func (e *internalError) Error() string { return fmt.Sprintf("%s: %v", e.op, e.err) }
func (e *internalError) Unwrap() []error {
	return []error{e.err, &rpc.Error{Code: rpc.CodeInternal, Message: "internal error in " + e.op}}
}

// isNotFound reports a store lookup that found nothing.
func isNotFound(err error) bool { return errors.Is(err, store.ErrNotFound) }

func rpcUnavailable() error { return rpc.Errorf(rpc.CodeUnavailable, "thrum is shut down") }
