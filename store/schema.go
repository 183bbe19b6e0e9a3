package store

// schema is the projection's tables. The spec's tables (messages,
// message_scopes, message_refs, message_edits, message_reads) keep their
// columns; the rest hold agents, sessions, threads, groups and the
// checkpoint. Every list filter has an index.
//
// Version history: 1 = initial; 2 = clustered (WITHOUT ROWID) pair and
// read tables, indexes built after a rebuild's load. A projection with an
// older version is dropped and rebuilt from the log (ErrOutdated). 3 =
// idempotency_keys, checkpoints.event_id. 4 = messages_fts (search).
// 5 = messages_fts_plain (prefix search). 6 = tokens from the local shard
// only (a credential.add there); an older projection holds tokens applied
// from synced agent.register events, which its rebuild drops.
// 7 = receipts: messages' recipients, ack_required and ack_due,
// message_reads.via, message_acks. 8 = message_edits.sets: the fields
// an edit set, so each field keeps its latest edit's value whatever
// order edits sync in. 9 = groups.machine: the machine that created
// each group, which alone changes it. 10 = signatures: messages.signed,
// keys (the identities' keys their registrations brought, and the
// owner's trust) and seals (the unsigned events each identity's seal
// names). 11 = sealed bodies: messages.sealed, the team key a body
// waits for; machine_kems and key_grants, the team keys' exchange.
// Adding an index needs no new version: every open runs the index DDL
// (IF NOT EXISTS), so a projection made before idx_messages_session gains
// it in place, and an older thrum ignores an index it does not know.
const schemaVersion = 11

const schema = `
CREATE TABLE IF NOT EXISTS meta (
  key TEXT PRIMARY KEY,
  value TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS checkpoints (
  shard TEXT PRIMARY KEY,
  offset INTEGER NOT NULL,
  event_id TEXT NOT NULL DEFAULT '' -- the event whose line ends at offset
) WITHOUT ROWID;

-- The latest message or thread each caller created with each idempotency
-- key: a retry with the key finds the first result here.
CREATE TABLE IF NOT EXISTS idempotency_keys (
  caller TEXT NOT NULL,
  key TEXT NOT NULL,
  kind TEXT NOT NULL, -- 'thread' (thread.create, with its first message if any) or 'message'
  thread_id TEXT NOT NULL DEFAULT '',
  message_id TEXT NOT NULL DEFAULT '',
  created_at TEXT NOT NULL,
  PRIMARY KEY (caller, key)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS agents (
  agent_id TEXT PRIMARY KEY,
  kind TEXT NOT NULL DEFAULT 'agent',
  name TEXT NOT NULL DEFAULT '',
  role TEXT NOT NULL DEFAULT '',
  module TEXT NOT NULL DEFAULT '',
  display TEXT NOT NULL DEFAULT '',
  repo_id TEXT NOT NULL DEFAULT '',
  registered_at TEXT NOT NULL,
  last_seen_at TEXT NOT NULL DEFAULT ''
);

CREATE TABLE IF NOT EXISTS tokens (
  token_hash TEXT PRIMARY KEY,
  agent_id TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS sessions (
  session_id TEXT PRIMARY KEY,
  agent_id TEXT NOT NULL,
  started_at TEXT NOT NULL,
  ended_at TEXT NOT NULL DEFAULT '',
  end_reason TEXT NOT NULL DEFAULT '',
  last_seen_at TEXT NOT NULL DEFAULT '',
  intent TEXT NOT NULL DEFAULT '',
  intent_updated_at TEXT NOT NULL DEFAULT '',
  current_task TEXT NOT NULL DEFAULT '',
  task_updated_at TEXT NOT NULL DEFAULT ''
);

CREATE TABLE IF NOT EXISTS session_scopes (
  session_id TEXT NOT NULL,
  scope_type TEXT NOT NULL,
  scope_value TEXT NOT NULL,
  PRIMARY KEY (session_id, scope_type, scope_value)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS session_refs (
  session_id TEXT NOT NULL,
  ref_type TEXT NOT NULL,
  ref_value TEXT NOT NULL,
  PRIMARY KEY (session_id, ref_type, ref_value)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS work_contexts (
  session_id TEXT PRIMARY KEY,
  agent_id TEXT NOT NULL,
  branch TEXT NOT NULL DEFAULT '',
  worktree_path TEXT NOT NULL DEFAULT '',
  unmerged_commits TEXT NOT NULL DEFAULT '[]',
  uncommitted_files TEXT NOT NULL DEFAULT '[]',
  changed_files TEXT NOT NULL DEFAULT '[]',
  git_updated_at TEXT NOT NULL DEFAULT ''
);

CREATE TABLE IF NOT EXISTS messages (
  message_id TEXT PRIMARY KEY,
  agent_id TEXT NOT NULL,
  session_id TEXT NOT NULL,
  thread_id TEXT NOT NULL DEFAULT '',
  created_at TEXT NOT NULL,
  updated_at TEXT,
  deleted INTEGER DEFAULT 0,
  deleted_at TEXT,
  delete_reason TEXT,
  body_format TEXT NOT NULL,
  body_content TEXT NOT NULL,
  body_structured TEXT,
  priority TEXT NOT NULL DEFAULT 'normal',
  tags TEXT NOT NULL DEFAULT '',
  acting_as TEXT NOT NULL DEFAULT '',
  disclose INTEGER NOT NULL DEFAULT 0,
  version INTEGER NOT NULL DEFAULT 0,
  recipients TEXT NOT NULL DEFAULT '', -- JSON array of agent IDs, '' for none
  ack_required INTEGER NOT NULL DEFAULT 0,
  ack_due TEXT NOT NULL DEFAULT '', -- created_at + ack_within, '' for no deadline
  signed INTEGER NOT NULL DEFAULT 0, -- its line ends in a signature (admission verified it, or this machine wrote it)
  sealed TEXT NOT NULL DEFAULT '' -- the ID of the team key its body is sealed with and no held key opened, '' once readable
);

CREATE TABLE IF NOT EXISTS message_scopes (
  message_id TEXT NOT NULL,
  scope_type TEXT NOT NULL,
  scope_value TEXT NOT NULL,
  PRIMARY KEY (message_id, scope_type, scope_value)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS message_refs (
  message_id TEXT NOT NULL,
  ref_type TEXT NOT NULL,
  ref_value TEXT NOT NULL,
  PRIMARY KEY (message_id, ref_type, ref_value)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS message_edits (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  event_id TEXT NOT NULL UNIQUE,
  message_id TEXT NOT NULL,
  edited_at TEXT NOT NULL,
  edited_by TEXT NOT NULL,
  session_id TEXT NOT NULL DEFAULT '',
  old_content TEXT,
  new_content TEXT,
  old_structured TEXT,
  new_structured TEXT,
  sets INTEGER NOT NULL DEFAULT 0
);

CREATE TABLE IF NOT EXISTS message_reads (
  message_id TEXT NOT NULL,
  session_id TEXT NOT NULL,
  agent_id TEXT NOT NULL,
  read_at TEXT NOT NULL,
  via TEXT NOT NULL DEFAULT '', -- the path that delivered it
  PRIMARY KEY (message_id, session_id)
) WITHOUT ROWID;

-- The first acknowledgement of a message by each agent: a message.ack, or
-- a reply (reply_id). Rows of agents that are not among the message's
-- recipients are kept too (the message may be applied later, from
-- another shard) and left out when receipts are read.
CREATE TABLE IF NOT EXISTS message_acks (
  message_id TEXT NOT NULL,
  agent_id TEXT NOT NULL,
  acked_at TEXT NOT NULL,
  note TEXT NOT NULL DEFAULT '',
  reply_id TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (message_id, agent_id)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS threads (
  thread_id TEXT PRIMARY KEY,
  title TEXT NOT NULL,
  created_by TEXT NOT NULL,
  created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS thread_scopes (
  thread_id TEXT NOT NULL,
  scope_type TEXT NOT NULL,
  scope_value TEXT NOT NULL,
  PRIMARY KEY (thread_id, scope_type, scope_value)
) WITHOUT ROWID;

-- The full-text indexes of every message's content and structured
-- payload (as JSON text, so its keys and values are words), deleted ones
-- too (include_deleted searches them). They store no copy of the text:
-- their content is the messages table, joined by messages' rowid. New
-- messages are indexed in batches (Store.IndexPending) up to meta's
-- search_indexed mark; Apply keeps indexed rows in step with edits. (Rows
-- never leave messages: a delete is a flag.) Both split words with
-- unicode61 and fold diacritics ("cafe" finds "café"). messages_fts
-- stems them (porter: "tokens" finds "token") and answers whole words
-- and phrases; messages_fts_plain keeps them as written and answers
-- prefixes, which match the words' beginnings, not their stems: deploy*
-- finds "deployment" (stemmed "deploy"), though "deploy" itself stems to
-- "deploi".
CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts USING fts5(
  body_content, body_structured,
  content = 'messages', content_rowid = 'rowid',
  tokenize = 'porter unicode61 remove_diacritics 2'
);
CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts_plain USING fts5(
  body_content, body_structured,
  content = 'messages', content_rowid = 'rowid',
  tokenize = 'unicode61 remove_diacritics 2'
);
-- The indexes' terms with their document and occurrence counts: what Dump
-- compares, so a rebuild and a live projection agree on the indexes
-- themselves.
CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts_terms USING fts5vocab(messages_fts, row);
CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts_plain_terms USING fts5vocab(messages_fts_plain, row);

CREATE TABLE IF NOT EXISTS groups (
  name TEXT PRIMARY KEY,
  description TEXT NOT NULL DEFAULT '',
  created_at TEXT NOT NULL,
  created_by TEXT NOT NULL,
  machine TEXT NOT NULL DEFAULT ''
);
-- The keys each identity signs with: those its registrations brought
-- (source 'registration', with the machine that signed it) and those the
-- owner trusted here (source 'trust', from the local shard). Admission
-- reads them; nothing else does.
CREATE TABLE IF NOT EXISTS keys (
  agent_id TEXT NOT NULL,
  key TEXT NOT NULL,
  source TEXT NOT NULL,
  machine TEXT NOT NULL DEFAULT '',
  added_at TEXT NOT NULL,
  PRIMARY KEY (agent_id, key, source)
) WITHOUT ROWID;
-- The unsigned events an identity's seals name (eventlog.LegacyHash).
CREATE TABLE IF NOT EXISTS seals (
  agent_id TEXT NOT NULL,
  hash TEXT NOT NULL,
  PRIMARY KEY (agent_id, hash)
) WITHOUT ROWID;
-- Each machine's X25519 key for team keys, as its latest registration
-- carrying one says, and the team keys machines granted each other
-- (eventlog.KeyGrant).
CREATE TABLE IF NOT EXISTS machine_kems (
  machine TEXT PRIMARY KEY,
  kem TEXT NOT NULL,
  added_at TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS key_grants (
  event_id TEXT PRIMARY KEY,
  machine TEXT NOT NULL,
  to_machine TEXT NOT NULL,
  kem TEXT NOT NULL,
  wrapped TEXT NOT NULL,
  granted_at TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS group_members (
  group_name TEXT NOT NULL,
  member_type TEXT NOT NULL,
  member_id TEXT NOT NULL,
  added_at TEXT NOT NULL,
  PRIMARY KEY (group_name, member_type, member_id)
) WITHOUT ROWID;
`

// indexes are the secondary indexes: created with the tables on a normal
// open, and only after the bulk load in Rebuild, where building them
// once from sorted data beats maintaining them row by row.
const indexes = `
CREATE INDEX IF NOT EXISTS idx_agents_role ON agents(role, module);
CREATE INDEX IF NOT EXISTS idx_tokens_agent ON tokens(agent_id);
CREATE INDEX IF NOT EXISTS idx_sessions_agent ON sessions(agent_id, started_at);
CREATE INDEX IF NOT EXISTS idx_messages_time ON messages(created_at);
CREATE INDEX IF NOT EXISTS idx_messages_agent ON messages(agent_id, created_at);
CREATE INDEX IF NOT EXISTS idx_messages_thread ON messages(thread_id, created_at);
CREATE INDEX IF NOT EXISTS idx_messages_session ON messages(session_id, created_at);
CREATE INDEX IF NOT EXISTS idx_scopes_lookup ON message_scopes(scope_type, scope_value, message_id);
CREATE INDEX IF NOT EXISTS idx_refs_lookup ON message_refs(ref_type, ref_value, message_id);
CREATE INDEX IF NOT EXISTS idx_edits_message ON message_edits(message_id, edited_at);
CREATE INDEX IF NOT EXISTS idx_message_reads_agent ON message_reads(agent_id, message_id);
CREATE INDEX IF NOT EXISTS idx_message_reads_message ON message_reads(message_id);
CREATE INDEX IF NOT EXISTS idx_thread_scopes_lookup ON thread_scopes(scope_type, scope_value);
CREATE INDEX IF NOT EXISTS idx_group_members_member ON group_members(member_type, member_id);
CREATE INDEX IF NOT EXISTS idx_messages_deleted ON messages(deleted) WHERE deleted = 1;
CREATE INDEX IF NOT EXISTS idx_messages_sealed ON messages(sealed) WHERE sealed != '';
CREATE INDEX IF NOT EXISTS idx_messages_ack ON messages(agent_id, created_at) WHERE ack_required = 1;
`

// Tables lists the projection's tables (for Dump and comparisons).
var Tables = []string{
	"agents", "tokens", "sessions", "session_scopes", "session_refs", "work_contexts",
	"messages", "message_scopes", "message_refs", "message_edits", "message_reads",
	"message_acks", "threads", "thread_scopes", "groups", "group_members", "checkpoints",
	"idempotency_keys", "messages_fts_terms", "messages_fts_plain_terms", "keys", "seals",
	"machine_kems", "key_grants",
}
