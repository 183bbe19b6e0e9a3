package access

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/thrumhq/thrum/internal/jsonrpc"
	"github.com/thrumhq/thrum/rpc"
)

// Failed credential checks on the loopback port, which every local user
// and every page on a localhost origin can reach, are limited so that
// guessing is slowed, not only hopeless: the credentials are 256 random
// bits. The owner's socket and pipe are not limited.
const (
	// maxConnAuthFailures is how many failed auth calls one WebSocket may
	// make; after them its auth calls are refused unchecked.
	maxConnAuthFailures = 5
	// authFailureRate and authFailureBurst bound failed credential checks
	// (auth calls and handshake credentials) across the server: a burst,
	// then so many a second. While the budget is spent every credential
	// check is refused unchecked, a right one too, so a refusal tells a
	// guesser nothing.
	authFailureRate  = 10
	authFailureBurst = 20
)

// authLimit counts failed credential checks, server-wide, as a bucket
// that drains at authFailureRate a second.
type authLimit struct {
	mu    sync.Mutex
	level float64 // failed checks (and checks in flight) not yet drained
	last  time.Time
}

type authFailuresKey struct{}

// limitAuth runs op, the auth method, within the limits: on a
// WebSocket, a connection's failed calls and the server's budget.
func (p *Policy) limitAuth(ctx context.Context, a *rpc.AuthParams, op func(context.Context, *rpc.AuthParams) (*rpc.AuthResult, error)) (r *rpc.AuthResult, err error) {
	c := jsonrpc.ConnFromContext(ctx)
	if c == nil || c.Transport() != jsonrpc.TransportWebSocket || a.Token == "" && a.OwnerSecret == "" && a.LoginCode == "" && a.WebSession == "" {
		return op(ctx, a) // the owner's transports, or no credential to check
	}
	failures, _ := c.Value(authFailuresKey{}).(*int)
	if failures == nil {
		failures = new(int)
		c.SetValue(authFailuresKey{}, failures) // requests of one connection run one at a time
	}
	if *failures >= maxConnAuthFailures {
		return nil, rpc.Errorf(rpc.CodeLimitExceeded, "too many failed credentials on this connection (%d): open a new connection", *failures)
	}
	err = p.limit.check(func() error { r, err = op(ctx, a); return err })
	if refused(err) {
		*failures++
	}
	return r, err
}

// check runs try unless the budget of failures is spent, counting it as
// a failure if it returns -32002.
func (l *authLimit) check(try func() error) error {
	l.mu.Lock()
	now := time.Now()
	l.level -= now.Sub(l.last).Seconds() * authFailureRate
	l.last = now
	if l.level < 0 {
		l.level = 0
	}
	if l.level+1 > authFailureBurst {
		l.mu.Unlock()
		return rpc.Errorf(rpc.CodeLimitExceeded, "too many failed credentials on this server: it checks none for a moment; try again in a second")
	}
	l.level++ // held while try runs: concurrent checks cannot overshoot
	l.mu.Unlock()
	err := try()
	if !refused(err) {
		l.mu.Lock()
		l.level = max(l.level-1, 0)
		l.mu.Unlock()
	}
	return err
}

// refused reports whether err is a credential refused (-32002).
func refused(err error) bool {
	var e *rpc.Error
	return errors.As(err, &e) && e.Code == rpc.CodeUnauthenticated
}
