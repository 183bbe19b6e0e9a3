package store_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/store"
)

// rawDB opens the projection file with a second, plain connection.
func rawDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func hasIndex(t *testing.T, path, name string) bool {
	t.Helper()
	var n int
	if err := rawDB(t, path).QueryRow(`SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND name = ?`, name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// The contract's idx_messages_session exists on a new
// projection, on a rebuilt one, and on one made before the index (which
// gains it on open, without a rebuild), and session filtering uses it.
func TestMessagesSessionIndex(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "p.db")
	st, err := store.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !hasIndex(t, path, "idx_messages_session") {
		t.Fatal("a new projection has no idx_messages_session")
	}
	var plan strings.Builder
	rows, err := rawDB(t, path).Query(`EXPLAIN QUERY PLAN SELECT message_id FROM messages WHERE session_id = ? ORDER BY created_at`, "ses_1")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan.WriteString(detail + "\n")
	}
	rows.Close()
	if !strings.Contains(plan.String(), "idx_messages_session") {
		t.Fatalf("filtering by session does not use the index:\n%s", plan.String())
	}
	st.Close()

	// A projection of the same version made before the index existed.
	if _, err := rawDB(t, path).Exec(`DROP INDEX idx_messages_session`); err != nil {
		t.Fatal(err)
	}
	st, err = store.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	if !hasIndex(t, path, "idx_messages_session") {
		t.Fatal("reopening an existing projection did not add idx_messages_session")
	}

	lg, _ := events(t)
	rb := filepath.Join(t.TempDir(), "rebuilt.db")
	r, err := store.Rebuild(ctx, lg, rb, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	if !hasIndex(t, rb, "idx_messages_session") {
		t.Fatal("a rebuilt projection has no idx_messages_session")
	}
}

// message_reads has no foreign key to messages (DESIGN.md, "Decisions").
// A read synced from another clone can be applied before the message it reads; it must be
// kept, not refused, and count once the message arrives.
func TestReadBeforeItsMessageIsKept(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "p.db")
	st, err := store.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	lg, err := eventlog.Open(t.TempDir(), &eventlog.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	read := &eventlog.Event{Type: eventlog.TypeMessageRead, Shard: "bob", Payload: eventlog.MessageRead{AgentID: "bob", SessionID: "ses_b", MessageIDs: []string{"msg_1"}}}
	create := &eventlog.Event{Type: eventlog.TypeMessageCreate, Shard: "alice", Payload: eventlog.MessageCreate{MessageID: "msg_1", AgentID: "alice", SessionID: "ses_a",
		Format: "markdown", Content: "hi", Priority: "normal"}}
	for _, e := range []*eventlog.Event{read, create} {
		if err := lg.Append(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Apply(ctx, []*eventlog.Event{read}); err != nil {
		t.Fatalf("a read of a message not yet applied was refused: %v", err)
	}
	if err := st.Apply(ctx, []*eventlog.Event{create}); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := rawDB(t, path).QueryRow(`SELECT COUNT(*) FROM message_reads r JOIN messages m ON m.message_id = r.message_id WHERE r.agent_id = 'bob'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("bob's early read: %d rows, want 1", n)
	}
}
