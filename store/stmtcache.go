package store

import (
	"context"
	"database/sql"
	"sync"

	"github.com/jmoiron/sqlx"
)

// maxCachedStmts bounds the prepared-statement cache. Query shapes are
// few (filters combine into a bounded set), so the cap is a guard, not a
// working limit.
const maxCachedStmts = 512

// stmtCache keeps read statements prepared: parsing SQL costs more than
// running the indexed lookups thrum does, so every read goes through it.
type stmtCache struct {
	db *sqlx.DB
	mu sync.Mutex
	m  map[string]*sqlx.Stmt
}

func (c *stmtCache) prepare(ctx context.Context, q string) (*sqlx.Stmt, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st, ok := c.m[q]; ok {
		return st, nil
	}
	st, err := c.db.PreparexContext(ctx, q)
	if err != nil {
		return nil, err
	}
	if c.m == nil {
		c.m = map[string]*sqlx.Stmt{}
	}
	if len(c.m) >= maxCachedStmts {
		for k, old := range c.m {
			old.Close()
			delete(c.m, k)
			break
		}
	}
	c.m[q] = st
	return st, nil
}

func (c *stmtCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, st := range c.m {
		st.Close()
	}
	c.m = nil
}

// get runs a single-row read through the cache.
func (s *Store) get(ctx context.Context, dest any, q string, args ...any) error {
	st, err := s.rc.prepare(ctx, q)
	if err != nil {
		return err
	}
	return st.GetContext(ctx, dest, args...)
}

// sel runs a multi-row read through the cache.
func (s *Store) sel(ctx context.Context, dest any, q string, args ...any) error {
	st, err := s.rc.prepare(ctx, q)
	if err != nil {
		return err
	}
	return st.SelectContext(ctx, dest, args...)
}

// query runs a read returning rows through the cache.
func (s *Store) query(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	st, err := s.rc.prepare(ctx, q)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(ctx, args...)
}
