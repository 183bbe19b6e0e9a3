package store

import (
	"testing"

	"github.com/jmoiron/sqlx"
)

// SetVersion rewrites the schema version recorded in the file at path.
func SetVersion(t *testing.T, path, v string) {
	t.Helper()
	db, err := sqlx.Open("sqlite", dsn(path, false, false))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`UPDATE meta SET value = ? WHERE key = 'schema_version'`, v); err != nil {
		t.Fatal(err)
	}
}

// OpenBulk opens path as Rebuild does, loading without secondary indexes
// or search triggers; closing it without Rebuild's finish is a rebuild
// cut short.
func OpenBulk(path string) (*Store, error) { return Open(path, &Options{bulk: true}) }

// CheckpointCounts returns how many TRUNCATE checkpoints, and passive
// checkpoints under the applier's lock, the checkpoint loop has run.
func (s *Store) CheckpointCounts() (truncates, locked uint64) {
	return s.truncates.Load(), s.lockedCheckpoints.Load()
}

// WALMaxSize and WALHardMax are the checkpoint loop's bounds.
const (
	WALMaxSize = walMaxSize
	WALHardMax = walHardMax
)
