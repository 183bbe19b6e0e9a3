package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/thrumhq/thrum/eventlog"
)

// Agent is a row of agents.
type Agent struct {
	AgentID      string `db:"agent_id"`
	Kind         string `db:"kind"`
	Name         string `db:"name"`
	Role         string `db:"role"`
	Module       string `db:"module"`
	Display      string `db:"display"`
	RepoID       string `db:"repo_id"`
	RegisteredAt string `db:"registered_at"`
	LastSeenAt   string `db:"last_seen_at"`
	// Local says the identity has a credential on this machine: it was
	// registered here, and sync never brings in its events (DESIGN.md,
	// "Sync trust").
	Local bool `db:"local"`
}

const agentCols = `agent_id, kind, name, role, module, display, repo_id, registered_at, last_seen_at,
	EXISTS(SELECT 1 FROM tokens WHERE tokens.agent_id = agents.agent_id) AS local`

// Agent returns one agent (or user) by ID.
func (s *Store) Agent(ctx context.Context, id string) (*Agent, error) {
	var a Agent
	if err := s.get(ctx, &a, `SELECT `+agentCols+` FROM agents WHERE agent_id = ?`, id); err != nil {
		return nil, notFound(err)
	}
	return &a, nil
}

// Agents lists agents and users, optionally filtered by role and module,
// ordered by ID.
func (s *Store) Agents(ctx context.Context, role, module string) ([]Agent, error) {
	q := `SELECT ` + agentCols + ` FROM agents WHERE 1=1`
	var args []any
	if role != "" {
		q += ` AND role = ?`
		args = append(args, role)
	}
	if module != "" {
		q += ` AND module = ?`
		args = append(args, module)
	}
	var out []Agent
	err := s.sel(ctx, &out, q+` ORDER BY agent_id`, args...)
	return out, err
}

// AgentByToken returns the ID of the identity a token hash belongs to.
func (s *Store) AgentByToken(ctx context.Context, tokenHash string) (string, error) {
	var id string
	err := s.get(ctx, &id, `SELECT agent_id FROM tokens WHERE token_hash = ?`, tokenHash)
	return id, notFound(err)
}

// HasCredential reports whether a token authenticates as the identity:
// whether it was registered on this machine (credentials never sync).
func (s *Store) HasCredential(ctx context.Context, agentID string) (bool, error) {
	var n int
	err := s.get(ctx, &n, `SELECT EXISTS(SELECT 1 FROM tokens WHERE agent_id = ?)`, agentID)
	return n == 1, err
}

// MessageCount returns how many messages an agent has authored.
func (s *Store) MessageCount(ctx context.Context, agentID string) (int, error) {
	var n int
	err := s.get(ctx, &n, `SELECT COUNT(*) FROM messages WHERE agent_id = ?`, agentID)
	return n, err
}

// Session is a row of sessions.
type Session struct {
	SessionID       string `db:"session_id"`
	AgentID         string `db:"agent_id"`
	StartedAt       string `db:"started_at"`
	EndedAt         string `db:"ended_at"`
	EndReason       string `db:"end_reason"`
	LastSeenAt      string `db:"last_seen_at"`
	Intent          string `db:"intent"`
	IntentUpdatedAt string `db:"intent_updated_at"`
	CurrentTask     string `db:"current_task"`
	TaskUpdatedAt   string `db:"task_updated_at"`
}

const sessionCols = `session_id, agent_id, started_at, ended_at, end_reason, last_seen_at, intent,
	intent_updated_at, current_task, task_updated_at`

// Session returns one session by ID.
func (s *Store) Session(ctx context.Context, id string) (*Session, error) {
	var x Session
	if err := s.get(ctx, &x, `SELECT `+sessionCols+` FROM sessions WHERE session_id = ?`, id); err != nil {
		return nil, notFound(err)
	}
	return &x, nil
}

// Sessions lists sessions, newest first, optionally of one agent and
// only active (not ended) ones.
func (s *Store) Sessions(ctx context.Context, agentID string, activeOnly bool) ([]Session, error) {
	q := `SELECT ` + sessionCols + ` FROM sessions WHERE 1=1`
	var args []any
	if agentID != "" {
		q += ` AND agent_id = ?`
		args = append(args, agentID)
	}
	if activeOnly {
		q += ` AND ended_at = ''`
	}
	var out []Session
	err := s.sel(ctx, &out, q+` ORDER BY started_at DESC, session_id DESC`, args...)
	return out, err
}

// SessionPairs returns a session's scopes or refs (which: "scopes" or
// "refs").
func (s *Store) SessionPairs(ctx context.Context, sessionID, which string) ([]eventlog.Pair, error) {
	var q string
	switch which {
	case "scopes":
		q = `SELECT scope_type AS type, scope_value AS value FROM session_scopes WHERE session_id = ? ORDER BY 1, 2`
	case "refs":
		q = `SELECT ref_type AS type, ref_value AS value FROM session_refs WHERE session_id = ? ORDER BY 1, 2`
	default:
		return nil, fmt.Errorf("store: unknown pair kind %q", which)
	}
	var out []eventlog.Pair
	err := s.sel(ctx, &out, q, sessionID)
	return out, err
}

// SessionWork is a session's work context joined with its intent and task.
type SessionWork struct {
	SessionID        string `db:"session_id"`
	AgentID          string `db:"agent_id"`
	Branch           string `db:"branch"`
	WorktreePath     string `db:"worktree_path"`
	UnmergedCommits  string `db:"unmerged_commits"` // JSON array of {hash, subject}
	UncommittedFiles string `db:"uncommitted_files"`
	ChangedFiles     string `db:"changed_files"`
	GitUpdatedAt     string `db:"git_updated_at"`
	CurrentTask      string `db:"current_task"`
	TaskUpdatedAt    string `db:"task_updated_at"`
	Intent           string `db:"intent"`
	IntentUpdatedAt  string `db:"intent_updated_at"`
}

// SessionWork lists the work contexts of active sessions, filtered by
// agent, branch and a file among the changed or uncommitted ones.
func (s *Store) SessionWork(ctx context.Context, agentID, branch, file string) ([]SessionWork, error) {
	q := `SELECT s.session_id, s.agent_id, COALESCE(w.branch, '') AS branch,
		COALESCE(w.worktree_path, '') AS worktree_path, COALESCE(w.unmerged_commits, '[]') AS unmerged_commits,
		COALESCE(w.uncommitted_files, '[]') AS uncommitted_files, COALESCE(w.changed_files, '[]') AS changed_files,
		COALESCE(w.git_updated_at, '') AS git_updated_at, s.current_task, s.task_updated_at, s.intent, s.intent_updated_at
		FROM sessions s LEFT JOIN work_contexts w ON w.session_id = s.session_id
		WHERE s.ended_at = ''`
	var args []any
	if agentID != "" {
		q += ` AND s.agent_id = ?`
		args = append(args, agentID)
	}
	if branch != "" {
		q += ` AND w.branch = ?`
		args = append(args, branch)
	}
	if file != "" {
		q += ` AND (EXISTS (SELECT 1 FROM json_each(w.changed_files) WHERE value = ?)
			OR EXISTS (SELECT 1 FROM json_each(w.uncommitted_files) WHERE value = ?))`
		args = append(args, file, file)
	}
	var out []SessionWork
	err := s.sel(ctx, &out, q+` ORDER BY s.started_at DESC`, args...)
	return out, err
}

// Message is a row of messages with what a reader needs to know about it.
type Message struct {
	MessageID    string `db:"message_id"`
	AgentID      string `db:"agent_id"`
	SessionID    string `db:"session_id"`
	ThreadID     string `db:"thread_id"`
	CreatedAt    string `db:"created_at"`
	UpdatedAt    string `db:"updated_at"` // "" if never edited
	Deleted      bool   `db:"deleted"`
	DeletedAt    string `db:"deleted_at"`    // "" if not deleted
	DeleteReason string `db:"delete_reason"` // "" if none
	Format       string `db:"body_format"`
	Content      string `db:"body_content"`
	Structured   string `db:"body_structured"` // JSON, or "" for none
	Priority     string `db:"priority"`
	Tags         string `db:"tags"` // JSON array, or "" for none
	ActingAs     string `db:"acting_as"`
	Disclose     bool   `db:"disclose"`
	Version      int    `db:"version"`
	AckRequired  bool   `db:"ack_required"`
	AckDue       string `db:"ack_due"` // "" if no deadline
	Signed       bool   `db:"signed"`  // its line ends in a signature
	Sealed       string `db:"sealed"`  // the team key its body waits for, "" if readable
	IsRead       bool   `db:"is_read"`

	Scopes []eventlog.Pair `db:"-"`
	Refs   []eventlog.Pair `db:"-"`
}

// TagList decodes Tags.
func (m *Message) TagList() []string {
	var out []string
	if m.Tags != "" {
		_ = json.Unmarshal([]byte(m.Tags), &out) // written by Apply from a []string
	}
	return out
}

const messageCols = `m.message_id, m.agent_id, m.session_id, m.thread_id, m.created_at, COALESCE(m.updated_at, '') AS updated_at,
	COALESCE(m.deleted, 0) AS deleted, COALESCE(m.deleted_at, '') AS deleted_at, COALESCE(m.delete_reason, '') AS delete_reason,
	m.body_format, m.body_content, COALESCE(m.body_structured, '') AS body_structured,
	m.priority, m.tags, m.acting_as, m.disclose, m.version, m.ack_required, m.ack_due, m.signed, m.sealed`

// readExpr is true when reader has read message m or wrote it (a message
// a user sent as the reader does not count as written by it). Its two
// arguments are the reader's ID.
const readExpr = `((m.agent_id = ? AND m.acting_as = '') OR EXISTS (SELECT 1 FROM message_reads r WHERE r.agent_id = ? AND r.message_id = m.message_id))`

// doneExpr is readExpr, or true when m's body waits for a team key: it is
// not the reader's to claim, nor counted or listed as unread, until a key
// opens it (a claim would deliver a placeholder; a list of unread work
// would hold it up). IsRead stays readExpr.
const doneExpr = `(` + readExpr + ` OR m.sealed != '')`

// Message returns one message, deleted or not, with its scopes and refs;
// IsRead is for reader ("" for nobody).
func (s *Store) Message(ctx context.Context, id, reader string) (*Message, error) {
	var m Message
	err := s.get(ctx, &m, `SELECT `+messageCols+`, `+readExpr+` AS is_read FROM messages m WHERE m.message_id = ?`,
		reader, reader, id)
	if err != nil {
		return nil, notFound(err)
	}
	ms := []*Message{&m}
	if err := s.attachPairs(ctx, ms); err != nil {
		return nil, err
	}
	return &m, nil
}

// MessageFilter selects messages for a listing. Zero fields do not
// filter. (The node evaluates it over its in-memory index.)
type MessageFilter struct {
	Scope    *eventlog.Pair
	Ref      *eventlog.Pair
	ThreadID string
	AuthorID string
	// Mentions, when non-nil, keeps messages with a mention ref whose value
	// is one of these (an empty non-nil slice matches nothing).
	Mentions []string
	// Reader is whose read state IsRead and the unread count report.
	Reader string
	// Unread keeps only messages Reader has not read (and did not write)
	// and that wait for no team key (doneExpr).
	Unread         bool
	IncludeDeleted bool
	SortBy         string // "created_at" (default) or "updated_at"
	Asc            bool
	Limit, Offset  int
}

func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?,", n), ",")
}

// attachPairs loads the scopes and refs of a page of messages in two
// queries.
func (s *Store) attachPairs(ctx context.Context, ms []*Message) error {
	if len(ms) == 0 {
		return nil
	}
	byID := make(map[string]*Message, len(ms))
	ids := make([]any, len(ms))
	for i, m := range ms {
		byID[m.MessageID] = m
		ids[i] = m.MessageID
		m.Scopes, m.Refs = []eventlog.Pair{}, []eventlog.Pair{}
	}
	for _, kind := range []string{"scope", "ref"} {
		q := fmt.Sprintf(`SELECT message_id, %[1]s_type, %[1]s_value FROM message_%[1]ss WHERE message_id IN (%[2]s) ORDER BY message_id, %[1]s_type, %[1]s_value`,
			kind, placeholders(len(ids)))
		rows, err := s.query(ctx, q, ids...)
		if err != nil {
			return fmt.Errorf("store: message %ss: %w", kind, err)
		}
		for rows.Next() {
			var id string
			var p eventlog.Pair
			if err := rows.Scan(&id, &p.Type, &p.Value); err != nil {
				rows.Close()
				return err
			}
			if m := byID[id]; m != nil {
				if kind == "scope" {
					m.Scopes = append(m.Scopes, p)
				} else {
					m.Refs = append(m.Refs, p)
				}
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
	}
	return nil
}

// ReadState returns, for each of ids that exists, whether it is not for
// reader to claim, in one query: reader has read it (or wrote it), or
// its body waits for a team key (a claim would deliver a placeholder, a
// false "delivered": it stays unread until the key opens it).
func (s *Store) ReadState(ctx context.Context, ids []string, reader string) (map[string]bool, error) {
	out := map[string]bool{}
	if len(ids) == 0 {
		return out, nil
	}
	args := make([]any, 0, len(ids)+2)
	args = append(args, reader, reader)
	for _, id := range ids {
		args = append(args, id)
	}
	rows, err := s.query(ctx, `SELECT m.message_id, `+doneExpr+` FROM messages m WHERE m.message_id IN (`+placeholders(len(ids))+`)`, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var read bool
		if err := rows.Scan(&id, &read); err != nil {
			return nil, err
		}
		out[id] = read
	}
	return out, rows.Err()
}

// Readers returns, for each of ids, the other agents (not except) that
// have read it.
func (s *Store) Readers(ctx context.Context, ids []string, except string) (map[string][]string, error) {
	out := map[string][]string{}
	if len(ids) == 0 {
		return out, nil
	}
	q, args, err := sqlx.In(`SELECT DISTINCT message_id, agent_id FROM message_reads WHERE message_id IN (?) AND agent_id != ?
		ORDER BY message_id, agent_id`, ids, except)
	if err != nil {
		return nil, err
	}
	rows, err := s.query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var id, agent string
		if err := rows.Scan(&id, &agent); err != nil {
			return nil, err
		}
		out[id] = append(out[id], agent)
	}
	return out, rows.Err()
}

// Thread is a row of threads.
type Thread struct {
	ThreadID  string `db:"thread_id"`
	Title     string `db:"title"`
	CreatedBy string `db:"created_by"`
	CreatedAt string `db:"created_at"`
}

// Thread returns one thread by ID.
func (s *Store) Thread(ctx context.Context, id string) (*Thread, error) {
	var t Thread
	err := s.get(ctx, &t, `SELECT thread_id, title, created_by, created_at FROM threads WHERE thread_id = ?`, id)
	if err != nil {
		return nil, notFound(err)
	}
	return &t, nil
}

// ThreadSummary is a thread with its activity, as thread.list shows it.
type ThreadSummary struct {
	Thread
	MessageCount int     `db:"message_count"`
	UnreadCount  int     `db:"unread_count"`
	LastActivity string  `db:"last_activity"`
	LastSender   string  `db:"last_sender"`
	Preview      *string `db:"preview"` // nil: no message yet
}

// Threads lists threads, most recently active first, optionally with a
// scope, with unread counts for reader. It returns one page and the total.
func (s *Store) Threads(ctx context.Context, scope *eventlog.Pair, reader string, limit, offset int) ([]ThreadSummary, int, error) {
	where := ""
	var args []any
	if scope != nil {
		where = ` WHERE t.thread_id IN (SELECT thread_id FROM thread_scopes WHERE scope_type = ? AND scope_value = ?)`
		args = append(args, scope.Type, scope.Value)
	}
	var total int
	if err := s.get(ctx, &total, `SELECT COUNT(*) FROM threads t`+where, args...); err != nil {
		return nil, 0, err
	}
	q := `SELECT t.thread_id, t.title, t.created_by, t.created_at,
		(SELECT COUNT(*) FROM messages m WHERE m.thread_id = t.thread_id AND COALESCE(m.deleted, 0) = 0) AS message_count,
		(SELECT COUNT(*) FROM messages m WHERE m.thread_id = t.thread_id AND COALESCE(m.deleted, 0) = 0 AND NOT ` + doneExpr + `) AS unread_count,
		COALESCE((SELECT m.created_at FROM messages m WHERE m.thread_id = t.thread_id AND COALESCE(m.deleted, 0) = 0 ORDER BY m.created_at DESC LIMIT 1), t.created_at) AS last_activity,
		COALESCE((SELECT m.agent_id FROM messages m WHERE m.thread_id = t.thread_id AND COALESCE(m.deleted, 0) = 0 ORDER BY m.created_at DESC LIMIT 1), '') AS last_sender,
		(SELECT substr(m.body_content, 1, 100) FROM messages m WHERE m.thread_id = t.thread_id AND COALESCE(m.deleted, 0) = 0 ORDER BY m.created_at DESC LIMIT 1) AS preview
		FROM threads t` + where + ` ORDER BY last_activity DESC, t.thread_id DESC LIMIT ? OFFSET ?`
	qargs := append([]any{reader, reader}, args...)
	qargs = append(qargs, limit, offset)
	var out []ThreadSummary
	if err := s.sel(ctx, &out, q, qargs...); err != nil {
		return nil, 0, err
	}
	return out, total, nil
}

// Group is a row of groups with its direct member count.
type Group struct {
	Name        string `db:"name"`
	Description string `db:"description"`
	CreatedAt   string `db:"created_at"`
	CreatedBy   string `db:"created_by"`
	Machine     string `db:"machine"` // the machine that created it ("" before machines were recorded)
	MemberCount int    `db:"member_count"`
}

// Member is one group member.
type Member struct {
	Group string `db:"group_name"`
	Type  string `db:"member_type"`
	ID    string `db:"member_id"`
}

// Groups lists all groups by name.
func (s *Store) Groups(ctx context.Context) ([]Group, error) {
	var out []Group
	err := s.sel(ctx, &out, `SELECT g.name, g.description, g.created_at, g.created_by, g.machine,
		(SELECT COUNT(*) FROM group_members gm WHERE gm.group_name = g.name) AS member_count
		FROM groups g ORDER BY g.name`)
	return out, err
}

// Group returns one group.
func (s *Store) Group(ctx context.Context, name string) (*Group, error) {
	var g Group
	err := s.get(ctx, &g, `SELECT g.name, g.description, g.created_at, g.created_by, g.machine,
		(SELECT COUNT(*) FROM group_members gm WHERE gm.group_name = g.name) AS member_count
		FROM groups g WHERE g.name = ?`, name)
	if err != nil {
		return nil, notFound(err)
	}
	return &g, nil
}

// Members lists the direct members of every group (name == "") or of one.
func (s *Store) Members(ctx context.Context, name string) ([]Member, error) {
	q := `SELECT group_name, member_type, member_id FROM group_members`
	var args []any
	if name != "" {
		q += ` WHERE group_name = ?`
		args = append(args, name)
	}
	var out []Member
	err := s.sel(ctx, &out, q+` ORDER BY group_name, member_type, member_id`, args...)
	return out, err
}

// LastSeen returns every agent's last_seen_at.
func (s *Store) LastSeen(ctx context.Context) (map[string]string, error) {
	rows, err := s.query(ctx, `SELECT agent_id, last_seen_at FROM agents`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var id, t string
		if err := rows.Scan(&id, &t); err != nil {
			return nil, err
		}
		out[id] = t
	}
	return out, rows.Err()
}

// MessagesByID returns the messages with the given IDs, in that order
// (missing ones are skipped), with scopes, refs and read state for reader.
func (s *Store) MessagesByID(ctx context.Context, ids []string, reader string) ([]*Message, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	args := make([]any, 0, len(ids)+2)
	args = append(args, reader, reader)
	for _, id := range ids {
		args = append(args, id)
	}
	var rows []*Message
	q := `SELECT ` + messageCols + `, ` + readExpr + ` AS is_read FROM messages m WHERE m.message_id IN (` + placeholders(len(ids)) + `)`
	if err := s.sel(ctx, &rows, q, args...); err != nil {
		return nil, fmt.Errorf("store: messages by id: %w", err)
	}
	byID := make(map[string]*Message, len(rows))
	for _, m := range rows {
		byID[m.MessageID] = m
	}
	out := make([]*Message, 0, len(ids))
	for _, id := range ids {
		if m := byID[id]; m != nil {
			out = append(out, m)
		}
	}
	if err := s.attachPairs(ctx, out); err != nil {
		return nil, err
	}
	return out, nil
}

// LatestMessageTime returns the latest created_at of the messages with
// the given IDs that the projection has ("" if none): what a receipt of
// them may not be dated before.
func (s *Store) LatestMessageTime(ctx context.Context, ids []string) (string, error) {
	if len(ids) == 0 {
		return "", nil
	}
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	var latest sql.NullString
	if err := s.get(ctx, &latest, `SELECT max(created_at) FROM messages WHERE message_id IN (`+placeholders(len(ids))+`)`, args...); err != nil {
		return "", fmt.Errorf("store: latest message time: %w", err)
	}
	return latest.String, nil
}

// IndexRow is what the node's in-memory message index keeps of a message.
type IndexRow struct {
	MessageID string
	AgentID   string
	ThreadID  string
	CreatedAt time.Time
	UpdatedAt time.Time // zero if never edited
	Deleted   bool
	ActingAs  string
}

// IndexSnapshot reads, in one read transaction, everything the node's
// message index is built from, calling the given functions for each row:
// the checkpoints (how far into each shard of the log the rows go), then
// messages in table order (not sorted: the index sorts them itself, which
// is cheaper than walking SQLite's created_at index), then every scope,
// ref and read.
func (s *Store) IndexSnapshot(ctx context.Context, checkpoint func(shard string, offset int64, eventID string), msg func(IndexRow), pair func(id, kind, typ, value string), read func(id, agent string)) error {
	tx, err := s.r.BeginTxx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return err
	}
	defer tx.Rollback()
	cps, err := tx.QueryContext(ctx, `SELECT shard, offset, event_id FROM checkpoints`)
	if err != nil {
		return err
	}
	for cps.Next() {
		var shard, id string
		var off int64
		if err := cps.Scan(&shard, &off, &id); err != nil {
			cps.Close()
			return err
		}
		checkpoint(shard, off, id)
	}
	cps.Close()
	if err := cps.Err(); err != nil {
		return err
	}
	rows, err := tx.QueryContext(ctx, `SELECT message_id, agent_id, thread_id, created_at, updated_at, COALESCE(deleted, 0) AS deleted,
		acting_as FROM messages`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var r IndexRow
		var created string
		var updated sql.NullString
		if err := rows.Scan(&r.MessageID, &r.AgentID, &r.ThreadID, &created, &updated, &r.Deleted, &r.ActingAs); err != nil {
			rows.Close()
			return err
		}
		r.CreatedAt, _ = eventlog.ParseTime(created) // written by Apply in eventlog.TimeFormat
		if updated.Valid {
			r.UpdatedAt, _ = eventlog.ParseTime(updated.String)
		}
		msg(r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, q := range []struct{ kind, sql string }{
		{"s", `SELECT message_id, scope_type, scope_value FROM message_scopes`},
		{"r", `SELECT message_id, ref_type, ref_value FROM message_refs`},
	} {
		rows, err := tx.QueryContext(ctx, q.sql)
		if err != nil {
			return err
		}
		for rows.Next() {
			var id, t, v string
			if err := rows.Scan(&id, &t, &v); err != nil {
				rows.Close()
				return err
			}
			pair(id, q.kind, t, v)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
	}
	rr, err := tx.QueryContext(ctx, `SELECT message_id, agent_id FROM message_reads`)
	if err != nil {
		return err
	}
	defer rr.Close()
	for rr.Next() {
		var id, a string
		if err := rr.Scan(&id, &a); err != nil {
			return err
		}
		read(id, a)
	}
	return rr.Err()
}

// Keyed is what a caller created with an idempotency key: a thread, a
// message, or a thread with its first message.
type Keyed struct {
	Kind      string `db:"kind"` // "thread" or "message"
	ThreadID  string `db:"thread_id"`
	MessageID string `db:"message_id"`
	CreatedAt string `db:"created_at"`
}

// IdempotencyKey returns the latest thing caller created with key, or
// ErrNotFound.
func (s *Store) IdempotencyKey(ctx context.Context, caller, key string) (*Keyed, error) {
	var k Keyed
	err := s.get(ctx, &k, `SELECT kind, thread_id, message_id, created_at FROM idempotency_keys WHERE caller = ? AND key = ?`, caller, key)
	if err != nil {
		return nil, notFound(err)
	}
	return &k, nil
}

// MessageIDs answers a listing from SQLite: one page of message IDs
// matching f, newest first unless f.Asc (by created_at, or by the later
// of updated_at and created_at when f.SortBy is "updated_at"), and the
// total and unread counts over every match. It gives the same answer as
// the node's in-memory message index, which is much faster; the node
// uses it while that index is still building after start.
func (s *Store) MessageIDs(ctx context.Context, f MessageFilter) (ids []string, total, unread int, err error) {
	if f.Mentions != nil && len(f.Mentions) == 0 {
		return nil, 0, 0, nil
	}
	// where renders the filter. Over every match (the counts) a pair
	// filter is best a set built once (IN); over a page walked in
	// created order, a lookup per row that stops at the page's end
	// (EXISTS).
	where := func(perRow bool) (string, []any) {
		var conds []string
		var args []any
		pairs := func(table, col, typ string, values ...string) {
			in := `IN (` + placeholders(len(values)) + `)`
			if perRow {
				conds = append(conds, `EXISTS (SELECT 1 FROM `+table+` x WHERE x.message_id = m.message_id AND x.`+col+`_type = ? AND x.`+col+`_value `+in+`)`)
			} else {
				conds = append(conds, `m.message_id IN (SELECT message_id FROM `+table+` WHERE `+col+`_type = ? AND `+col+`_value `+in+`)`)
			}
			args = append(args, typ)
			for _, v := range values {
				args = append(args, v)
			}
		}
		if !f.IncludeDeleted {
			conds = append(conds, `COALESCE(m.deleted, 0) = 0`)
		}
		if f.ThreadID != "" {
			conds, args = append(conds, `m.thread_id = ?`), append(args, f.ThreadID)
		}
		if f.AuthorID != "" {
			conds, args = append(conds, `m.agent_id = ?`), append(args, f.AuthorID)
		}
		if f.Scope != nil {
			pairs("message_scopes", "scope", f.Scope.Type, f.Scope.Value)
		}
		if f.Ref != nil {
			pairs("message_refs", "ref", f.Ref.Type, f.Ref.Value)
		}
		if f.Mentions != nil {
			pairs("message_refs", "ref", "mention", f.Mentions...)
		}
		if f.Unread {
			conds, args = append(conds, `NOT `+doneExpr), append(args, f.Reader, f.Reader)
		}
		if len(conds) == 0 {
			return "", args
		}
		return ` WHERE ` + strings.Join(conds, ` AND `), args
	}
	cond, args := where(false)
	dir := ` DESC`
	if f.Asc {
		dir = ` ASC`
	}
	order := `m.created_at` + dir + `, m.message_id` + dir
	if f.SortBy == "updated_at" {
		order = `COALESCE(m.updated_at, m.created_at)` + dir + `, ` + order
	}
	// The counts over every match, unordered; then only the page, in
	// order.
	counts, cargs := `SELECT COUNT(*), COALESCE(SUM(NOT `+doneExpr+`), 0) FROM messages m`+cond, append([]any{f.Reader, f.Reader}, args...)
	if f.Reader == "" { // nobody has read anything
		counts, cargs = `SELECT COUNT(*), COUNT(*) FROM messages m`+cond, args
	}
	st, err := s.rc.prepare(ctx, counts)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("store: list messages: %w", err)
	}
	if err := st.QueryRowContext(ctx, cargs...).Scan(&total, &unread); err != nil {
		return nil, 0, 0, fmt.Errorf("store: list messages: %w", err)
	}
	offset, limit := max(f.Offset, 0), max(f.Limit, 0)
	if limit == 0 || offset >= total {
		return nil, total, unread, nil
	}
	if f.SortBy != "updated_at" { // the created_at index gives the order
		cond, args = where(true)
	}
	q := `SELECT m.message_id FROM messages m` + cond + ` ORDER BY ` + order + ` LIMIT ? OFFSET ?`
	if err := s.sel(ctx, &ids, q, append(args, limit, offset)...); err != nil {
		return nil, 0, 0, fmt.Errorf("store: list messages: %w", err)
	}
	return ids, total, unread, nil
}

// Key sources (keys.source): a registration brought the key, or the
// owner trusted it here.
const (
	KeyRegistered = "registration"
	KeyTrusted    = "trust"
)

// Key is a row of keys: a key an identity signs with.
type Key struct {
	AgentID string `db:"agent_id"`
	Key     string `db:"key"`
	Source  string `db:"source"`
	Machine string `db:"machine"`
	AddedAt string `db:"added_at"`
}

// Keys returns the keys of an identity, the earliest first.
func (s *Store) Keys(ctx context.Context, agentID string) ([]Key, error) {
	var out []Key
	err := s.sel(ctx, &out, `SELECT agent_id, key, source, machine, added_at FROM keys WHERE agent_id = ? ORDER BY added_at, key, source`, agentID)
	return out, err
}

// AllKeys returns every identity's keys.
func (s *Store) AllKeys(ctx context.Context) ([]Key, error) {
	var out []Key
	err := s.sel(ctx, &out, `SELECT agent_id, key, source, machine, added_at FROM keys ORDER BY agent_id, added_at, key, source`)
	return out, err
}

// Sealed reports whether a seal of the identity names the unsigned
// event whose eventlog.LegacyHash is hash.
func (s *Store) Sealed(ctx context.Context, agentID, hash string) (bool, error) {
	var n int
	err := s.get(ctx, &n, `SELECT EXISTS(SELECT 1 FROM seals WHERE agent_id = ? AND hash = ?)`, agentID, hash)
	return n == 1, err
}

// Credentialed returns the identities with a credential on this machine
// (registered here), sorted.
func (s *Store) Credentialed(ctx context.Context) ([]string, error) {
	var out []string
	err := s.sel(ctx, &out, `SELECT DISTINCT agent_id FROM tokens ORDER BY agent_id`)
	return out, err
}
