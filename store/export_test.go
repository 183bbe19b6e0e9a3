package store

import (
	"testing"

	"github.com/jmoiron/sqlx"
)

// SetVersion rewrites the schema version recorded in the file at path.
func SetVersion(t *testing.T, path, v string) {
	t.Helper()
	db, err := sqlx.Open("sqlite", dsn(path, false))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`UPDATE meta SET value = ? WHERE key = 'schema_version'`, v); err != nil {
		t.Fatal(err)
	}
}
