package thrum

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"
	"time"

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/rpc"
	"github.com/thrumhq/thrum/store"
)

// Storage faults (DESIGN.md, "Durability and storage faults").
//
// A batch that is durable in the log but fails to apply stays pending: the
// next apply, by the committer or by retryLoop, applies the pending events
// first, in the same transaction as anything newer, so the projection's
// checkpoint never passes an event it has not applied. While events are
// pending, new writes are refused before they reach the log; retryLoop
// applies the pending events as soon as the projection accepts them (when
// space returns on a full disk), and writes resume by themselves.

// faultState is the node's record of a failed log write (the projector
// keeps the events that failed to apply).
type faultState struct {
	writeErr error     // the last failed log write, until one succeeds; guarded by faultMu
	writeAt  time.Time // when it failed
}

// retryLoop applies pending events after an apply failure, and probes the
// log's disk after a failed write, backing off from 50 ms to 2 s, until
// both are well again or the node closes.
func (n *Node) retryLoop() {
	defer close(n.retryDone)
	for {
		select {
		case <-n.quit:
			return
		case <-n.proj.kick:
		}
		for delay := 50 * time.Millisecond; ; delay = min(2*delay, 2*time.Second) {
			select {
			case <-n.quit:
				return
			case <-time.After(delay):
			}
			if n.proj.retry() && n.probeWrite() {
				break
			}
		}
	}
}

// refuseWrites returns the error a write gets while the projection is
// behind the log.
func (n *Node) refuseWrites() error {
	if _, err := n.proj.failure(); err != nil {
		return n.applyFailure(err)
	}
	return nil
}

// applyFailure is the error of a write whose batch, or an earlier one,
// failed to apply.
func (n *Node) applyFailure(err error) error {
	if isDiskFull(err) {
		return storageFailure(err, rpc.Errorf(rpc.CodeStorageFull,
			"disk full: no space left on the device holding %s; committed writes are safe in the log and are applied when space is freed; until then writes are refused (retry with the same idempotency_key)",
			n.opts.DBPath))
	}
	return storageFailure(err, rpc.Errorf(rpc.CodeUnavailable,
		"the projection cannot apply committed writes (%v); they are safe in the log and are retried; until then writes are refused (retry with the same idempotency_key)", err))
}

// writeFailure records a failed log write and returns its error for the
// caller: nothing of the failed batch stays in the log.
func (n *Node) writeFailure(err error) error {
	n.faultMu.Lock()
	n.fault.writeErr, n.fault.writeAt = err, n.now()
	n.faultMu.Unlock()
	select {
	case n.proj.kick <- struct{}{}:
	default:
	}
	if isDiskFull(err) {
		where := n.dir
		var pe *fs.PathError
		if errors.As(err, &pe) {
			where = pe.Path
		}
		return storageFailure(err, rpc.Errorf(rpc.CodeStorageFull, "disk full: no space left on the device holding %s; nothing was written: free space and retry", where))
	}
	if errors.Is(err, eventlog.ErrBroken) {
		return storageFailure(err, rpc.Errorf(rpc.CodeUnavailable,
			"the event log could not undo a failed write and refuses writes until thrum is restarted (%v)", err))
	}
	return storageFailure(err, rpc.Errorf(rpc.CodeInternal,
		"storage error: the event log could not be written (%v); nothing was written: retry", err))
}

// storageFailure is a failure, err, of the node's own storage: unlike an
// internal error, the whole of wire's message (which names the cause)
// reaches a remote caller, as the owner needs it to act, and in Go
// errors.Is finds err as well as wire's code.
func storageFailure(err error, wire *rpc.Error) error {
	return &causedError{text: wire.Message, err: err, wire: wire}
}

// probeWrite checks, after a failed log write, whether the log's directory
// takes writes again (eventlog.Log.Probe), and if so clears the failure;
// it reports whether no failure is left.
func (n *Node) probeWrite() bool {
	n.faultMu.Lock()
	failed, broken := n.fault.writeErr != nil, errors.Is(n.fault.writeErr, eventlog.ErrBroken)
	n.faultMu.Unlock()
	if !failed {
		return true
	}
	if broken { // the log refuses appends until it is reopened: no probe clears that
		return false
	}
	if n.log.Probe() != nil {
		return false
	}
	n.writeSucceeded()
	return true
}

// writeSucceeded clears a recorded write failure.
func (n *Node) writeSucceeded() {
	n.faultMu.Lock()
	n.fault.writeErr = nil
	n.faultMu.Unlock()
}

// problems describes what makes the node degraded now, for health.
func (n *Node) problems() []string {
	var out []string
	if k, err := n.proj.failure(); err != nil {
		what := "the projection cannot apply them"
		if isDiskFull(err) {
			what = "disk full at " + n.opts.DBPath
		}
		out = append(out, fmt.Sprintf("%d committed event(s) not yet in the projection (%s: %v): writes are refused until a retry applies them", k, what, err))
	}
	n.faultMu.Lock()
	werr, at := n.fault.writeErr, n.fault.writeAt
	n.faultMu.Unlock()
	if werr != nil {
		what := "the last write to the event log failed"
		if isDiskFull(werr) {
			what = "disk full: the last write to the event log failed"
		}
		out = append(out, fmt.Sprintf("%s at %s (%v); this clears when the disk takes writes again", what, ts(at), werr))
	}
	return out
}

// isDiskFull reports an error caused by a full device or quota.
func isDiskFull(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) || store.IsFull(err)
}
