package jsonrpc

import (
	"errors"
	"sync"
)

// errBudget is returned while reading a request when the server's budget
// of bytes held for requests is spent.
var errBudget = errors.New("request budget spent")

// decodeFactor is how many times its size a request is charged while it is
// handled: the bytes read, the decoded envelope's copy of the params, the
// handler's decoded params and what the handler derives from them.
const decodeFactor = 4

// budget is the server-wide cap on bytes held for requests being read or
// handled. Every connection draws on it, so the memory requests can pin is
// bounded however many connections there are.
type budget struct {
	mu   sync.Mutex
	max  int64
	used int64
}

func (b *budget) take(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.max {
		return false
	}
	b.used += n
	return true
}

func (b *budget) give(n int64) {
	b.mu.Lock()
	b.used -= n
	b.mu.Unlock()
}

// inUse reports the bytes currently held, for tests.
func (b *budget) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// charge is what one connection holds of the budget for its current
// request. It is used by one goroutine at a time.
type charge struct {
	b *budget
	n int64
}

// take charges n more bytes, or returns errBudget.
func (c *charge) take(n int) error {
	if !c.b.take(int64(n)) {
		return errBudget
	}
	c.n += int64(n)
	return nil
}

// release gives back everything charged.
func (c *charge) release() {
	if c.n > 0 {
		c.b.give(c.n)
		c.n = 0
	}
}
