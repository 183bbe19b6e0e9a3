// Package fault is the seam through which tests inject storage failures
// into the event log and the projection. The log and the store call Check
// before each write, fsync and apply; while no hook is set, Check costs
// one atomic load and returns nil.
//
// The hook is process-wide, so that a test of any package in the module can
// fail the storage of a Node it opened. A test that sets it must not run in
// parallel with others that write, and should fail only paths under its own
// temporary directory.
package fault

import "sync/atomic"

// Operations passed to a hook.
const (
	LogWrite   = "log.write"   // appending a batch's lines to a shard (path: the shard file), or Log.Probe's write
	LogSync    = "log.sync"    // fsyncing a shard; path is the shard file
	StoreApply = "store.apply" // committing an applied batch; path is the database file
)

// Hook decides whether an operation on path fails, and with which error.
type Hook func(op, path string) error

var hook atomic.Pointer[Hook]

// Set installs h (nil removes it) and returns a function that restores the
// previous hook.
func Set(h Hook) (restore func()) {
	var p *Hook
	if h != nil {
		p = &h
	}
	old := hook.Swap(p)
	return func() { hook.Store(old) }
}

// Check returns the error the hook injects for op on path, or nil.
func Check(op, path string) error {
	if h := hook.Load(); h != nil {
		return (*h)(op, path)
	}
	return nil
}
