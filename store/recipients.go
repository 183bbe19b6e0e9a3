package store

// EXPERIMENT (deleted once measured): the read model of SQLite alone.
// message_recipients holds each message's mention addresses (name, role,
// group, everyone: resolved only when read); recipient_reads holds, per
// reader, the addresses of the messages it has read or written, so that
// the unread count of a mention filter is a count over two index ranges
// and no per-message lookup. solo marks a message with one address: only
// messages with several need a DISTINCT to be counted once.

import (
	"context"
	"fmt"
	"strings"

	"github.com/thrumhq/thrum/eventlog"
)

const recipientsSchema = `
CREATE TABLE IF NOT EXISTS message_recipients (
  address TEXT NOT NULL,
  message_id TEXT NOT NULL,
  solo INTEGER NOT NULL,
  PRIMARY KEY (address, solo, message_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS idx_recipients_message ON message_recipients(message_id);
CREATE TABLE IF NOT EXISTS recipient_reads (
  reader TEXT NOT NULL,
  address TEXT NOT NULL,
  message_id TEXT NOT NULL,
  solo INTEGER NOT NULL,
  PRIMARY KEY (reader, address, solo, message_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS idx_recipient_reads_message ON recipient_reads(message_id, reader);
`

// fillRecipients creates the experiment's tables and fills them from the
// projection once.
func fillRecipients(ctx context.Context, s *Store) error {
	if _, err := s.w.ExecContext(ctx, recipientsSchema); err != nil {
		return err
	}
	var done int
	s.w.GetContext(ctx, &done, `SELECT COUNT(*) FROM meta WHERE key = 'recipients_filled'`)
	if done > 0 {
		return nil
	}
	for _, q := range []string{
		`INSERT OR IGNORE INTO message_recipients(address, message_id, solo)
			SELECT r.ref_value, r.message_id, (SELECT COUNT(*) FROM message_refs r2 WHERE r2.message_id = r.message_id AND r2.ref_type = 'mention') = 1
			FROM message_refs r WHERE r.ref_type = 'mention'`,
		`INSERT OR IGNORE INTO recipient_reads(reader, address, message_id, solo)
			SELECT x.agent_id, r.address, r.message_id, r.solo FROM message_reads x JOIN message_recipients r ON r.message_id = x.message_id`,
		`INSERT OR IGNORE INTO recipient_reads(reader, address, message_id, solo)
			SELECT m.agent_id, r.address, r.message_id, r.solo FROM messages m JOIN message_recipients r ON r.message_id = m.message_id WHERE m.acting_as = ''`,
		`INSERT OR IGNORE INTO meta(key, value) VALUES('recipients_filled', '1')`,
	} {
		if _, err := s.w.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("fill recipients: %w", err)
		}
	}
	return nil
}

// recipientWork is what a batch adds to the experiment's tables, done
// after its rows are flushed.
type recipientWork struct {
	created []eventlog.MessageCreate
	reads   []eventlog.MessageRead
}

var recipientSQL = map[string]string{
	"rcpt.add":   `INSERT OR IGNORE INTO message_recipients(address, message_id, solo) VALUES(?, ?, ?)`,
	"rcpt.read":  `INSERT OR IGNORE INTO recipient_reads(reader, address, message_id, solo) VALUES(?, ?, ?, ?)`,
	"rcpt.early": `INSERT OR IGNORE INTO recipient_reads(reader, address, message_id, solo)
		SELECT x.agent_id, r.address, r.message_id, r.solo FROM message_reads x JOIN message_recipients r ON r.message_id = x.message_id
		WHERE x.message_id = ?`,
	"rcpt.reads": `INSERT OR IGNORE INTO recipient_reads(reader, address, message_id, solo)
		SELECT ?, address, message_id, solo FROM message_recipients WHERE message_id = ?`,
}

func (t *txApplier) applyRecipients(ctx context.Context) error {
	w := &t.rcpt
	for _, p := range w.created {
		var addrs []string
		seen := map[string]bool{}
		for _, r := range p.Refs {
			if r.Type == "mention" && !seen[r.Value] {
				seen[r.Value] = true
				addrs = append(addrs, r.Value)
			}
		}
		solo := len(addrs) == 1
		for _, a := range addrs {
			if err := t.exec(ctx, "rcpt.add", a, p.MessageID, solo); err != nil {
				return err
			}
			if p.ActingAs == "" {
				if err := t.exec(ctx, "rcpt.read", p.AgentID, a, p.MessageID, solo); err != nil {
					return err
				}
			}
		}
		if len(addrs) > 0 { // reads that came before the message
			if err := t.exec(ctx, "rcpt.early", p.MessageID); err != nil {
				return err
			}
		}
	}
	for _, p := range w.reads {
		for _, id := range p.MessageIDs {
			if err := t.exec(ctx, "rcpt.reads", p.AgentID, id); err != nil {
				return err
			}
		}
	}
	w.created, w.reads = w.created[:0], w.reads[:0]
	return nil
}

// Recipients reports whether the store keeps the experiment's tables.
func (s *Store) Recipients() bool { return s.opts.Recipients }

// ListMessageIDs is MessageIDs, with the counts of a filter of mentions
// only (and unread) taken from the experiment's tables.
func (s *Store) ListMessageIDs(ctx context.Context, f MessageFilter) (ids []string, total, unread int, err error) {
	if !s.opts.Recipients || f.Mentions == nil || len(f.Mentions) == 0 || f.Scope != nil || f.Ref != nil || f.ThreadID != "" || f.AuthorID != "" {
		return s.MessageIDs(ctx, f)
	}
	count := func(table, cond string, args ...any) (int, error) {
		in := placeholders(len(f.Mentions))
		a := append([]any{}, args...)
		for _, m := range f.Mentions {
			a = append(a, m)
		}
		q := `SELECT COUNT(*) FROM ` + table + ` WHERE ` + cond + ` address IN (` + in + `)`
		if len(f.Mentions) > 1 {
			q = `SELECT (SELECT COUNT(*) FROM ` + table + ` WHERE ` + cond + ` address IN (` + in + `) AND solo = 1) +
				(SELECT COUNT(DISTINCT message_id) FROM ` + table + ` WHERE ` + cond + ` address IN (` + in + `) AND solo = 0)`
			a = append(a, a...)
		}
		st, err := s.rc.prepare(ctx, q)
		if err != nil {
			return 0, err
		}
		var n int
		err = st.QueryRowContext(ctx, a...).Scan(&n)
		return n, err
	}
	// deleted counts the deleted messages among the matches (few: the
	// partial index of deleted messages drives it).
	deleted := func(table, cond string, args ...any) (int, error) {
		if f.IncludeDeleted {
			return 0, nil
		}
		a := append([]any{}, args...)
		for _, m := range f.Mentions {
			a = append(a, m)
		}
		q := `SELECT COUNT(DISTINCT m.message_id) FROM messages m CROSS JOIN ` + table + ` r ON r.message_id = m.message_id
			WHERE m.deleted = 1 AND ` + strings.ReplaceAll(cond, "reader", "r.reader") + ` r.address IN (` + placeholders(len(f.Mentions)) + `)`
		st, err := s.rc.prepare(ctx, q)
		if err != nil {
			return 0, err
		}
		var n int
		err = st.QueryRowContext(ctx, a...).Scan(&n)
		return n, err
	}
	all, err := count("message_recipients", "")
	if err != nil {
		return nil, 0, 0, fmt.Errorf("store: list messages: %w", err)
	}
	gone, err := deleted("message_recipients", "")
	if err != nil {
		return nil, 0, 0, fmt.Errorf("store: list messages: %w", err)
	}
	total = all - gone
	read := 0
	if f.Reader != "" {
		r, err := count("recipient_reads", "reader = ? AND", f.Reader)
		if err != nil {
			return nil, 0, 0, fmt.Errorf("store: list messages: %w", err)
		}
		g, err := deleted("recipient_reads", "reader = ? AND", f.Reader)
		if err != nil {
			return nil, 0, 0, fmt.Errorf("store: list messages: %w", err)
		}
		read = r - g
	}
	unread = total - read
	if f.Unread {
		total = unread
	}
	// The page: messages in order, each matched as it is reached.
	offset, limit := max(f.Offset, 0), max(f.Limit, 0)
	if limit == 0 || offset >= total {
		return nil, total, unread, nil
	}
	page, err := s.pageOnly(ctx, f)
	return page, total, unread, err
}
