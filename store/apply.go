package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/internal/fault"
)

// applier holds the prepared statements of Apply, on the writer
// connection.
type applier struct {
	mu    sync.Mutex
	path  string // the database file, for fault injection
	w     *sqlx.DB
	stmts map[string]*sqlx.Stmt

	// The hot tables' row buffers, kept from batch to batch (under mu) so
	// that an import does not grow them again for every batch.
	msgRows, scopeRows, refRows, readRows rowBuf
}

// statements used by apply, by name.
var applySQL = map[string]string{
	"checkpoint": `INSERT INTO checkpoints(shard, offset, event_id) VALUES(?, ?, ?)
		ON CONFLICT(shard) DO UPDATE SET offset = max(offset, excluded.offset),
		event_id = CASE WHEN excluded.offset >= offset THEN excluded.event_id ELSE event_id END`,

	"agent.upsert": `INSERT INTO agents(agent_id, kind, name, role, module, display, repo_id, registered_at, last_seen_at)
		VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT(agent_id) DO UPDATE SET kind = excluded.kind, name = excluded.name, role = excluded.role,
		module = excluded.module, display = excluded.display, repo_id = excluded.repo_id,
		last_seen_at = max(last_seen_at, excluded.last_seen_at)`,
	"agent.seen":   `UPDATE agents SET last_seen_at = ? WHERE agent_id = ? AND last_seen_at < ?`,
	"agent.delete": `DELETE FROM agents WHERE agent_id = ?`,
	"token.add":    `INSERT OR IGNORE INTO tokens(token_hash, agent_id) VALUES(?, ?)`,
	"token.delete": `DELETE FROM tokens WHERE agent_id = ?`,

	"session.start": `INSERT OR IGNORE INTO sessions(session_id, agent_id, started_at, last_seen_at) VALUES(?, ?, ?, ?)`,
	"session.end": `UPDATE sessions SET ended_at = ?, end_reason = ?, last_seen_at = max(last_seen_at, ?)
		WHERE session_id = ? AND ended_at = ''`,
	"session.seen":      `UPDATE sessions SET last_seen_at = ? WHERE session_id = ? AND last_seen_at < ?`,
	"session.scope.add": `INSERT OR IGNORE INTO session_scopes(session_id, scope_type, scope_value) VALUES(?, ?, ?)`,
	"session.scope.del": `DELETE FROM session_scopes WHERE session_id = ? AND scope_type = ? AND scope_value = ?`,
	"session.ref.add":   `INSERT OR IGNORE INTO session_refs(session_id, ref_type, ref_value) VALUES(?, ?, ?)`,
	"session.ref.del":   `DELETE FROM session_refs WHERE session_id = ? AND ref_type = ? AND ref_value = ?`,
	"session.intent":    `UPDATE sessions SET intent = ?, intent_updated_at = ? WHERE session_id = ?`,
	"session.task":      `UPDATE sessions SET current_task = ?, task_updated_at = ? WHERE session_id = ?`,
	"session.context": `INSERT INTO work_contexts(session_id, agent_id, branch, worktree_path, unmerged_commits,
		uncommitted_files, changed_files, git_updated_at) VALUES(?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT(session_id) DO UPDATE SET branch = excluded.branch, worktree_path = excluded.worktree_path,
		unmerged_commits = excluded.unmerged_commits, uncommitted_files = excluded.uncommitted_files,
		changed_files = excluded.changed_files, git_updated_at = excluded.git_updated_at`,

	"message.body": `SELECT rowid, body_content, body_structured FROM messages WHERE message_id = ?`,
	// An edit of a message the search index holds: its old words out,
	// the new in (an external content index is told the old text).
	"search.mark":         `SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'search_indexed'`,
	"search.delete":       `INSERT INTO messages_fts(messages_fts, rowid, body_content, body_structured) VALUES('delete', ?, ?, ?)`,
	"search.insert":       `INSERT INTO messages_fts(rowid, body_content, body_structured) VALUES(?, ?, ?)`,
	"search.plain.delete": `INSERT INTO messages_fts_plain(messages_fts_plain, rowid, body_content, body_structured) VALUES('delete', ?, ?, ?)`,
	"search.plain.insert": `INSERT INTO messages_fts_plain(rowid, body_content, body_structured) VALUES(?, ?, ?)`,
	"message.edit": `INSERT OR IGNORE INTO message_edits(event_id, message_id, edited_at, edited_by, session_id,
		old_content, new_content, old_structured, new_structured, sets) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
	// Which fields an edit later than (edited_at, event_id) has set.
	"message.later-edits": `SELECT COALESCE(MAX(sets & 1), 0) != 0 AS content, COALESCE(MAX(sets & 2), 0) != 0 AS structured
		FROM message_edits WHERE message_id = ? AND (edited_at > ? OR (edited_at = ? AND event_id > ?))`,
	// updated_at is the latest edit's time, version the number of edits.
	"message.edited": `UPDATE messages SET body_content = ?, body_structured = ?,
		updated_at = MAX(COALESCE(updated_at, ''), ?), version = version + 1 WHERE message_id = ?`,
	// A message whose body (or an edit of it) no held key opens; Reopen
	// sets its body again from its create and applies its edits again.
	"message.sealed":      `UPDATE messages SET sealed = ? WHERE message_id = ? AND sealed = ''`,
	"message.reopen":      `UPDATE messages SET body_content = ?, body_structured = ?, sealed = ?, version = 0, updated_at = NULL WHERE message_id = ?`,
	"message.edits.clear": `DELETE FROM message_edits WHERE message_id = ?`,
	"message.delete":      `UPDATE messages SET deleted = 1, deleted_at = ?, delete_reason = ? WHERE message_id = ? AND deleted = 0`,
	"message.ack":         `INSERT OR IGNORE INTO message_acks(message_id, agent_id, acked_at, note, reply_id) VALUES(?, ?, ?, ?, ?)`,

	"thread.create": `INSERT OR IGNORE INTO threads(thread_id, title, created_by, created_at) VALUES(?, ?, ?, ?)`,
	"thread.scope":  `INSERT OR IGNORE INTO thread_scopes(thread_id, scope_type, scope_value) VALUES(?, ?, ?)`,

	"idem.thread": `INSERT INTO idempotency_keys(caller, key, kind, thread_id, message_id, created_at) VALUES(?, ?, 'thread', ?, '', ?)
		ON CONFLICT(caller, key) DO UPDATE SET kind = 'thread', thread_id = excluded.thread_id, message_id = '',
		created_at = excluded.created_at`,
	// A message right after its thread.create with the same key (one
	// thread.create call) completes the thread's row; any other replaces it.
	"idem.message": `INSERT INTO idempotency_keys(caller, key, kind, thread_id, message_id, created_at) VALUES(?, ?, 'message', ?, ?, ?)
		ON CONFLICT(caller, key) DO UPDATE SET
		kind = CASE WHEN kind = 'thread' AND message_id = '' AND thread_id = excluded.thread_id THEN 'thread' ELSE 'message' END,
		created_at = CASE WHEN kind = 'thread' AND message_id = '' AND thread_id = excluded.thread_id THEN created_at ELSE excluded.created_at END,
		thread_id = excluded.thread_id, message_id = excluded.message_id`,

	"group.create": `INSERT OR IGNORE INTO groups(name, description, created_at, created_by, machine) VALUES(?, ?, ?, ?, ?)`,
	"group.delete": `DELETE FROM groups WHERE name = ?`,
	"group.purge":  `DELETE FROM group_members WHERE group_name = ?`,
	"member.add":   `INSERT OR IGNORE INTO group_members(group_name, member_type, member_id, added_at) VALUES(?, ?, ?, ?)`,
	"member.del":   `DELETE FROM group_members WHERE group_name = ? AND member_type = ? AND member_id = ?`,

	"machine.kem": `INSERT INTO machine_kems(machine, kem, added_at) VALUES(?, ?, ?)
		ON CONFLICT(machine) DO UPDATE SET kem = excluded.kem, added_at = excluded.added_at WHERE excluded.added_at >= added_at`,
	"key.grant": `INSERT OR IGNORE INTO key_grants(event_id, machine, to_machine, kem, wrapped, granted_at) VALUES(?, ?, ?, ?, ?, ?)`,
	"key.add":   `INSERT OR IGNORE INTO keys(agent_id, key, source, machine, added_at) VALUES(?, ?, ?, ?, ?)`,
	"seal.add":  `INSERT OR IGNORE INTO seals(agent_id, hash) VALUES(?, ?)`,
}

func newApplier(w *sqlx.DB, path string) (*applier, error) {
	a := &applier{w: w, path: path, stmts: map[string]*sqlx.Stmt{},
		msgRows: msgRows, scopeRows: scopeRows, refRows: refRows, readRows: readRows}
	for name, q := range applySQL {
		st, err := w.Preparex(q)
		if err != nil {
			a.close()
			return nil, fmt.Errorf("prepare %s: %w", name, err)
		}
		a.stmts[name] = st
	}
	// The row inserts of both sizes flush uses, keyed by their SQL.
	for _, b := range []rowBuf{msgRows, scopeRows, refRows, readRows} {
		for _, k := range []int{1, rowsPerInsert} {
			q := b.query(k)
			st, err := w.Preparex(q)
			if err != nil {
				a.close()
				return nil, fmt.Errorf("prepare %s: %w", q, err)
			}
			a.stmts[q] = st
		}
	}
	return a, nil
}

func (a *applier) close() error {
	for _, st := range a.stmts {
		st.Close()
	}
	a.stmts = nil
	return nil
}

// stage runs a batch's statements in a transaction and returns it open,
// holding the applier's lock until commit or rollback: no other
// connection sees any of it before commit. On error nothing is left open.
func (a *applier) stage(ctx context.Context, evs []*eventlog.Event) (tx *sqlx.Tx, err error) {
	a.mu.Lock()
	defer func() {
		if err != nil {
			a.mu.Unlock()
		}
	}()
	tx, err = a.w.BeginTxx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("store: apply: %w", err)
	}
	defer func() {
		if err != nil {
			tx.Rollback()
		}
	}()
	t := a.on(tx)
	ends, lastIDs := map[string]int64{}, map[string]string{}
	for _, e := range evs {
		if e.Type != eventlog.TypeMessageCreate && e.Type != eventlog.TypeMessageRead {
			if err := t.flushRows(ctx); err != nil {
				return nil, fmt.Errorf("store: apply: %w", err)
			}
		}
		if err := t.event(ctx, e); err != nil {
			return nil, fmt.Errorf("store: apply %s %s: %w", e.Type, e.ID, err)
		}
		if rel := eventlog.ShardPath(e.Shard); e.Offset > ends[rel] {
			ends[rel], lastIDs[rel] = e.Offset, e.ID
		}
	}
	if err := t.flushRows(ctx); err != nil {
		return nil, fmt.Errorf("store: apply: %w", err)
	}
	if err := t.flushSeen(ctx); err != nil {
		return nil, fmt.Errorf("store: apply: last seen: %w", err)
	}
	for shard, off := range ends {
		if err := t.exec(ctx, "checkpoint", shard, off, lastIDs[shard]); err != nil {
			return nil, fmt.Errorf("store: apply: checkpoint: %w", err)
		}
	}
	return tx, nil
}

// commit commits a transaction stage returned, and releases the lock.
func (a *applier) commit(tx *sqlx.Tx) error {
	defer a.mu.Unlock()
	if err := fault.Check(fault.StoreApply, a.path); err != nil {
		tx.Rollback()
		return fmt.Errorf("store: apply: commit: %w", err)
	}
	if err := tx.Commit(); err != nil {
		tx.Rollback() // no-op if Commit ended it
		return fmt.Errorf("store: apply: commit: %w", err)
	}
	return nil
}

// rollback undoes a transaction stage returned, and releases the lock.
func (a *applier) rollback(tx *sqlx.Tx) {
	defer a.mu.Unlock()
	tx.Rollback()
}

type txApplier struct {
	tx    *sqlx.Tx
	a     *applier
	stmts map[string]*sqlx.Stmt

	agentSeen, sessionSeen map[string]string // latest activity in this batch

	// Rows of the hot tables, inserted many per statement (see flushRows):
	// per-statement overhead dominates the cost of a row in SQLite.
	msgRows, scopeRows, refRows, readRows *rowBuf // the applier's
}

// on returns the applier of a transaction of a's, with a's row buffers
// emptied of rows a failed batch left. Called with a.mu held.
func (a *applier) on(tx *sqlx.Tx) *txApplier {
	t := &txApplier{tx: tx, a: a, stmts: map[string]*sqlx.Stmt{}, agentSeen: map[string]string{}, sessionSeen: map[string]string{},
		msgRows: &a.msgRows, scopeRows: &a.scopeRows, refRows: &a.refRows, readRows: &a.readRows}
	for _, b := range t.rowBufs() {
		b.reset()
	}
	return t
}

func (t *txApplier) rowBufs() []*rowBuf {
	return []*rowBuf{t.msgRows, t.scopeRows, t.refRows, t.readRows}
}

// The hot tables' row buffers, empty.
var (
	msgRows = rowBuf{cols: 17, head: `INSERT OR IGNORE INTO messages(message_id, agent_id, session_id, thread_id, created_at,
			body_format, body_content, body_structured, priority, tags, acting_as, disclose,
			recipients, ack_required, ack_due, signed, sealed) VALUES`}
	scopeRows = rowBuf{cols: 3, head: `INSERT OR IGNORE INTO message_scopes(message_id, scope_type, scope_value) VALUES`}
	refRows   = rowBuf{cols: 3, head: `INSERT OR IGNORE INTO message_refs(message_id, ref_type, ref_value) VALUES`}
	readRows  = rowBuf{cols: 5, head: `INSERT OR IGNORE INTO message_reads(message_id, session_id, agent_id, read_at, via) VALUES`}
)

// rowBuf collects rows for multi-row INSERT OR IGNOREs.
type rowBuf struct {
	head string // "INSERT OR IGNORE INTO t(a, b) VALUES"
	cols int
	args []any
	n    int
	sql  [2]string // the inserts of one row and of rowsPerInsert, once made
}

// rowsPerInsert rows go in one statement (its variables stay well under
// SQLite's limit); fewer go one by one.
const rowsPerInsert = 100

func (b *rowBuf) add(args ...any) { b.args = append(b.args, args...); b.n++ }

func (b *rowBuf) query(rows int) string {
	row := "(" + strings.TrimSuffix(strings.Repeat("?,", b.cols), ",") + ")"
	return b.head + strings.TrimSuffix(strings.Repeat(row+",", rows), ",")
}

// flush writes the rows: full chunks through one statement prepared on
// the transaction, the rest one row at a time.
func (b *rowBuf) flush(ctx context.Context, t *txApplier) error {
	if b.sql[0] == "" {
		b.sql = [2]string{b.query(1), b.query(rowsPerInsert)}
	}
	args := b.args
	for b.n > 0 {
		k, q := rowsPerInsert, b.sql[1]
		if b.n < k {
			k, q = 1, b.sql[0]
		}
		st, err := t.rowStmt(ctx, q)
		if err != nil {
			return err
		}
		if _, err := st.ExecContext(ctx, args[:k*b.cols]...); err != nil {
			return err
		}
		args, b.n = args[k*b.cols:], b.n-k
	}
	b.reset()
	return nil
}

// reset empties b, keeping its room and dropping what it pointed to.
func (b *rowBuf) reset() {
	clear(b.args)
	b.args, b.n = b.args[:0], 0
}

// flushRows writes the buffered rows, parents first. It runs before any
// event that may read or change them, and at the end of the batch.
func (t *txApplier) flushRows(ctx context.Context) error {
	for _, b := range t.rowBufs() {
		if err := b.flush(ctx, t); err != nil {
			return err
		}
	}
	return nil
}

// rowStmt returns the multi-row insert q on the transaction: prepared
// once on the writer connection and kept for every later batch (parsing
// it per transaction cost more than the inserts of a small batch).
func (t *txApplier) rowStmt(ctx context.Context, q string) (*sqlx.Stmt, error) {
	if st := t.stmts[q]; st != nil {
		return st, nil
	}
	var st *sqlx.Stmt
	if base := t.a.stmts[q]; base != nil {
		st = t.tx.StmtxContext(ctx, base)
	} else { // not one of newApplier's shapes: prepared for this transaction
		var err error
		if st, err = t.tx.PreparexContext(ctx, q); err != nil {
			return nil, err
		}
	}
	t.stmts[q] = st
	return st, nil
}

func (t *txApplier) stmt(ctx context.Context, name string) *sqlx.Stmt {
	st := t.stmts[name]
	if st == nil {
		st = t.tx.StmtxContext(ctx, t.a.stmts[name])
		t.stmts[name] = st
	}
	return st
}

func (t *txApplier) exec(ctx context.Context, name string, args ...any) error {
	_, err := t.stmt(ctx, name).ExecContext(ctx, args...)
	return err
}

// event applies one event. Unknown types are skipped: a newer thrum may
// write events this one does not know, and the log must stay readable.
func (t *txApplier) event(ctx context.Context, e *eventlog.Event) error {
	ts := e.Timestamp()
	switch e.Type {
	case eventlog.TypeAgentRegister, eventlog.TypeAgentUpdate:
		p, err := payload[eventlog.AgentRegister](e)
		if err != nil {
			return err
		}
		if p.Kind == "" {
			p.Kind = "agent"
		}
		// A token hash here (a log from before credentials were local)
		// is never applied: tokens come from the local shard alone.
		if err := t.exec(ctx, "agent.upsert", p.AgentID, p.Kind, p.Name, p.Role, p.Module, p.Display, p.RepoID, ts, ts); err != nil {
			return err
		}
		if p.KEM != "" && p.Machine != "" {
			if err := t.exec(ctx, "machine.kem", p.Machine, p.KEM, ts); err != nil {
				return err
			}
		}
		if p.Key == "" {
			return nil
		}
		return t.exec(ctx, "key.add", p.AgentID, p.Key, KeyRegistered, p.Machine, ts)

	case eventlog.TypeKeyTrust:
		if e.Shard != eventlog.LocalShard {
			return nil // the owner's word is each clone's own
		}
		p, err := payload[eventlog.KeyTrust](e)
		if err != nil {
			return err
		}
		return t.exec(ctx, "key.add", p.AgentID, p.Key, KeyTrusted, "", ts)

	case eventlog.TypeAgentSeal:
		p, err := payload[eventlog.AgentSeal](e)
		if err != nil {
			return err
		}
		for _, h := range p.Hashes {
			if err := t.exec(ctx, "seal.add", p.AgentID, h); err != nil {
				return err
			}
		}
		return nil

	case eventlog.TypeCredentialAdd:
		if e.Shard != eventlog.LocalShard {
			return nil // a credential works only where it was issued: one found elsewhere was forged
		}
		p, err := payload[eventlog.Credential](e)
		if err != nil {
			return err
		}
		if p.RevokeTokens {
			if err := t.exec(ctx, "token.delete", p.AgentID); err != nil {
				return err
			}
		}
		return t.exec(ctx, "token.add", p.TokenHash, p.AgentID)

	case eventlog.TypeAgentCleanup:
		p, err := payload[eventlog.AgentCleanup](e)
		if err != nil {
			return err
		}
		if err := t.exec(ctx, "agent.delete", p.AgentID); err != nil {
			return err
		}
		return t.exec(ctx, "token.delete", p.AgentID)

	case eventlog.TypeSessionStart:
		p, err := payload[eventlog.SessionStart](e)
		if err != nil {
			return err
		}
		if err := t.exec(ctx, "session.start", p.SessionID, p.AgentID, ts, ts); err != nil {
			return err
		}
		if err := t.pairs(ctx, "session.scope.add", p.SessionID, p.Scopes); err != nil {
			return err
		}
		if err := t.pairs(ctx, "session.ref.add", p.SessionID, p.Refs); err != nil {
			return err
		}
		return t.seen(ctx, p.AgentID, "", ts)

	case eventlog.TypeSessionEnd:
		p, err := payload[eventlog.SessionEnd](e)
		if err != nil {
			return err
		}
		return t.exec(ctx, "session.end", ts, p.Reason, ts, p.SessionID)

	case eventlog.TypeSessionHeartbeat:
		p, err := payload[eventlog.SessionHeartbeat](e)
		if err != nil {
			return err
		}
		for _, step := range []struct {
			stmt  string
			pairs []eventlog.Pair
		}{
			{"session.scope.add", p.AddScopes}, {"session.scope.del", p.RemoveScopes},
			{"session.ref.add", p.AddRefs}, {"session.ref.del", p.RemoveRefs},
		} {
			if err := t.pairs(ctx, step.stmt, p.SessionID, step.pairs); err != nil {
				return err
			}
		}
		return t.seen(ctx, p.AgentID, p.SessionID, ts)

	case eventlog.TypeSessionIntent:
		p, err := payload[eventlog.SessionIntent](e)
		if err != nil {
			return err
		}
		if err := t.exec(ctx, "session.intent", p.Intent, ts, p.SessionID); err != nil {
			return err
		}
		return t.seen(ctx, p.AgentID, p.SessionID, ts)

	case eventlog.TypeSessionTask:
		p, err := payload[eventlog.SessionTask](e)
		if err != nil {
			return err
		}
		if err := t.exec(ctx, "session.task", p.Task, ts, p.SessionID); err != nil {
			return err
		}
		return t.seen(ctx, p.AgentID, p.SessionID, ts)

	case eventlog.TypeSessionContext:
		p, err := payload[eventlog.SessionContext](e)
		if err != nil {
			return err
		}
		return t.exec(ctx, "session.context", p.SessionID, p.AgentID, p.Branch, p.WorktreePath,
			jsonText(p.UnmergedCommits), jsonText(p.UncommittedFiles), jsonText(p.ChangedFiles), ts)

	case eventlog.TypeKeyGrant:
		p, err := payload[eventlog.KeyGrant](e)
		if err != nil {
			return err
		}
		return t.exec(ctx, "key.grant", e.ID, p.Machine, p.To, p.KEM, p.Wrapped, ts)

	case eventlog.TypeMessageCreate:
		p, err := payload[eventlog.MessageCreate](e)
		if err != nil {
			return err
		}
		tags := ""
		if len(p.Tags) > 0 {
			tags = jsonText(p.Tags)
		}
		recipients := ""
		if len(p.Recipients) > 0 {
			recipients = jsonText(p.Recipients)
		}
		t.msgRows.add(p.MessageID, p.AgentID, p.SessionID, p.ThreadID, ts,
			p.Format, p.Content, nullJSON(p.Structured), p.Priority, tags, p.ActingAs, p.Disclose,
			recipients, p.AckRequired, AckDue(p, e.Time), eventlog.Signed(e.Raw), sealedKey(p.Sealed))
		for _, sc := range p.Scopes {
			t.scopeRows.add(p.MessageID, sc.Type, sc.Value)
		}
		for _, r := range p.Refs {
			t.refRows.add(p.MessageID, r.Type, r.Value)
			if r.Type == refReplyTo {
				// A reply acknowledges what it answers, for its author
				// (counted if the author is among its recipients).
				if err := t.exec(ctx, "message.ack", r.Value, p.AgentID, ts, "", p.MessageID); err != nil {
					return err
				}
			}
		}
		if p.IdempotencyKey != "" {
			caller := p.AgentID
			if p.ActingAs != "" {
				caller = p.ActingAs
			}
			if err := t.exec(ctx, "idem.message", caller, p.IdempotencyKey, p.ThreadID, p.MessageID, ts); err != nil {
				return err
			}
		}
		return t.seen(ctx, p.AgentID, "", ts)

	case eventlog.TypeMessageEdit:
		p, err := payload[eventlog.MessageEdit](e)
		if err != nil {
			return err
		}
		if p.Sealed != nil {
			// No held key opens it: the message waits for the key, and
			// Reopen applies its edits again once one is held.
			return t.exec(ctx, "message.sealed", sealedKey(p.Sealed), p.MessageID)
		}
		var old struct {
			RowID      int64          `db:"rowid"`
			Content    string         `db:"body_content"`
			Structured sql.NullString `db:"body_structured"`
		}
		if err := t.stmt(ctx, "message.body").GetContext(ctx, &old, p.MessageID); err != nil {
			if err == sql.ErrNoRows {
				return nil // an edit of a message this projection never saw
			}
			return err
		}
		sets, newContent, newStructured := 0, old.Content, old.Structured
		if p.Content != nil {
			sets, newContent = sets|setsContent, *p.Content
		}
		if len(p.Structured) > 0 {
			sets, newStructured = sets|setsStructured, nullJSON(p.Structured)
		}
		res, err := t.stmt(ctx, "message.edit").ExecContext(ctx, e.ID, p.MessageID, ts, p.AgentID, p.SessionID,
			old.Content, newContent, old.Structured, newStructured, sets)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return nil // this edit was applied before
		}
		// Each field holds the value of the latest edit that set it, by
		// time then event ID, on every machine whatever order its edits
		// arrived in: an edit synced in after a later one that set the
		// same field leaves that field alone.
		var later struct {
			Content    bool `db:"content"`
			Structured bool `db:"structured"`
		}
		if err := t.stmt(ctx, "message.later-edits").GetContext(ctx, &later, p.MessageID, ts, ts, e.ID); err != nil {
			return err
		}
		if later.Content {
			newContent = old.Content
		}
		if later.Structured {
			newStructured = old.Structured
		}
		if newContent == old.Content && newStructured == old.Structured {
			return t.exec(ctx, "message.edited", newContent, newStructured, ts, p.MessageID)
		}
		var mark int64
		if err := t.stmt(ctx, "search.mark").GetContext(ctx, &mark); err != nil {
			return err
		}
		if old.RowID <= mark { // indexed: else it is indexed later as it then is
			for _, ix := range []string{"search", "search.plain"} {
				if err := t.exec(ctx, ix+".delete", old.RowID, old.Content, old.Structured); err != nil {
					return err
				}
				if err := t.exec(ctx, ix+".insert", old.RowID, newContent, newStructured); err != nil {
					return err
				}
			}
		}
		return t.exec(ctx, "message.edited", newContent, newStructured, ts, p.MessageID)

	case eventlog.TypeMessageDelete:
		p, err := payload[eventlog.MessageDelete](e)
		if err != nil {
			return err
		}
		return t.exec(ctx, "message.delete", ts, p.Reason, p.MessageID)

	case eventlog.TypeMessageRead:
		p, err := payload[eventlog.MessageRead](e)
		if err != nil {
			return err
		}
		for _, id := range p.MessageIDs {
			t.readRows.add(id, p.SessionID, p.AgentID, ts, p.Via)
		}
		return t.seen(ctx, p.AgentID, "", ts)

	case eventlog.TypeMessageAck:
		p, err := payload[eventlog.MessageAck](e)
		if err != nil {
			return err
		}
		if err := t.exec(ctx, "message.ack", p.MessageID, p.AgentID, ts, p.Note, ""); err != nil {
			return err
		}
		return t.seen(ctx, p.AgentID, "", ts)

	case eventlog.TypeThreadCreate:
		p, err := payload[eventlog.ThreadCreate](e)
		if err != nil {
			return err
		}
		if err := t.exec(ctx, "thread.create", p.ThreadID, p.Title, p.CreatedBy, ts); err != nil {
			return err
		}
		if p.IdempotencyKey != "" {
			if err := t.exec(ctx, "idem.thread", p.CreatedBy, p.IdempotencyKey, p.ThreadID, ts); err != nil {
				return err
			}
		}
		return t.pairs(ctx, "thread.scope", p.ThreadID, p.Scopes)

	case eventlog.TypeGroupCreate:
		p, err := payload[eventlog.GroupCreate](e)
		if err != nil {
			return err
		}
		return t.exec(ctx, "group.create", p.Name, p.Description, ts, p.CreatedBy, p.Machine)

	case eventlog.TypeGroupDelete:
		p, err := payload[eventlog.GroupDelete](e)
		if err != nil {
			return err
		}
		if err := t.exec(ctx, "group.delete", p.Name); err != nil {
			return err
		}
		return t.exec(ctx, "group.purge", p.Name)

	case eventlog.TypeGroupMemberAdd, eventlog.TypeGroupMemberDel:
		p, err := payload[eventlog.GroupMember](e)
		if err != nil {
			return err
		}
		if e.Type == eventlog.TypeGroupMemberAdd {
			return t.exec(ctx, "member.add", p.Group, p.MemberType, p.MemberID, ts)
		}
		return t.exec(ctx, "member.del", p.Group, p.MemberType, p.MemberID)
	}
	return nil
}

// refReplyTo is the ref type of a reply (rpc.RefReplyTo).
const refReplyTo = "reply_to"

// AckDue is when an acknowledgement of p, sent at at, is due, as the
// projection keeps it: "" if none is asked for within a time (or the
// log's duration does not parse).
func AckDue(p eventlog.MessageCreate, at time.Time) string {
	if !p.AckRequired || p.AckWithin == "" {
		return ""
	}
	d, err := time.ParseDuration(p.AckWithin)
	if err != nil || d <= 0 {
		return ""
	}
	return eventlog.FormatTime(at.Add(d))
}

// sealedKey is the sealed column of a body: the key its sealed fields
// name, "" for a readable body.
func sealedKey(s *eventlog.Sealed) string {
	if s == nil {
		return ""
	}
	if id := s.KeyID(); id != "" {
		return id
	}
	return "?" // admitted by no rule of this version: no key opens it
}

// payload returns the event's payload as T, decoded once by the log.
func payload[T any](e *eventlog.Event) (T, error) { return eventlog.PayloadAs[T](e) }

// seen notes that an agent (and a session) was active at ts. The updates
// are coalesced per batch (see flushSeen): last_seen_at only ever moves
// forward, so one update with the latest time gives the same rows.
func (t *txApplier) seen(_ context.Context, agentID, sessionID, ts string) error {
	if agentID != "" && ts > t.agentSeen[agentID] {
		t.agentSeen[agentID] = ts
	}
	if sessionID != "" && ts > t.sessionSeen[sessionID] {
		t.sessionSeen[sessionID] = ts
	}
	return nil
}

func (t *txApplier) flushSeen(ctx context.Context) error {
	for id, ts := range t.agentSeen {
		if err := t.exec(ctx, "agent.seen", ts, id, ts); err != nil {
			return err
		}
	}
	for id, ts := range t.sessionSeen {
		if err := t.exec(ctx, "session.seen", ts, id, ts); err != nil {
			return err
		}
	}
	return nil
}

func (t *txApplier) pairs(ctx context.Context, stmt, id string, ps []eventlog.Pair) error {
	for _, p := range ps {
		if err := t.exec(ctx, stmt, id, p.Type, p.Value); err != nil {
			return err
		}
	}
	return nil
}

func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil || string(b) == "null" {
		return "[]"
	}
	return string(b)
}

// The fields an edit sets (message_edits.sets).
const (
	setsContent    = 1
	setsStructured = 2
)

// nullJSON stores structured data as compact JSON text, or NULL if absent.
func nullJSON(raw json.RawMessage) sql.NullString {
	s := strings.TrimSpace(string(raw))
	if s == "" || s == "null" {
		return sql.NullString{}
	}
	return sql.NullString{String: s, Valid: true}
}
