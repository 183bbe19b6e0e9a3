package store

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/thrumhq/thrum/eventlog"
)

// SealedWaiting returns, by team key ID, how many messages wait for that
// key: their body (or an edit of it) is sealed and no key held when it
// was applied opened it.
func (s *Store) SealedWaiting(ctx context.Context) (map[string]int, error) {
	var rows []struct {
		Key string `db:"sealed"`
		N   int    `db:"n"`
	}
	if err := s.r.SelectContext(ctx, &rows, `SELECT sealed, COUNT(*) AS n FROM messages WHERE sealed != '' GROUP BY sealed`); err != nil {
		return nil, fmt.Errorf("store: sealed messages: %w", err)
	}
	out := make(map[string]int, len(rows))
	for _, r := range rows {
		out[r.Key] = r.N
	}
	return out, nil
}

// SealedMessages returns the IDs of the messages that wait for any of
// the team keys keys.
func (s *Store) SealedMessages(ctx context.Context, keys []string) ([]string, error) {
	ids := []string{}
	if len(keys) == 0 {
		return ids, nil
	}
	args := make([]any, len(keys))
	for i, k := range keys {
		args[i] = k
	}
	if err := s.r.SelectContext(ctx, &ids, `SELECT message_id FROM messages WHERE sealed IN (`+placeholders(len(keys))+`) ORDER BY message_id`, args...); err != nil {
		return nil, fmt.Errorf("store: sealed messages: %w", err)
	}
	return ids, nil
}

// Reopen applies again the bodies of messages that waited for a team key
// now held: evs are, in log order, the message.create and message.edit
// events of those messages, opened (eventlog.Event.Open). Each message's
// body is set again from its create, its edits are dropped and applied
// again, and the search index follows, as a rebuild would leave them;
// a message whose events do not all open stays waiting. Reads, receipts
// and the checkpoint are not touched.
func (s *Store) Reopen(ctx context.Context, evs []*eventlog.Event) error {
	a := s.ap
	a.mu.Lock()
	defer a.mu.Unlock()
	tx, err := a.w.BeginTxx(ctx, nil)
	if err != nil {
		return fmt.Errorf("store: reopen: %w", err)
	}
	defer tx.Rollback()
	t := a.on(tx)
	var mark int64
	if err := t.stmt(ctx, "search.mark").GetContext(ctx, &mark); err != nil {
		return fmt.Errorf("store: reopen: %w", err)
	}
	for _, e := range evs {
		if e.Type != eventlog.TypeMessageCreate {
			if err := t.event(ctx, e); err != nil {
				return fmt.Errorf("store: reopen %s %s: %w", e.Type, e.ID, err)
			}
			continue
		}
		p, err := payload[eventlog.MessageCreate](e)
		if err != nil {
			return fmt.Errorf("store: reopen %s: %w", e.ID, err)
		}
		var old struct {
			RowID      int64          `db:"rowid"`
			Content    string         `db:"body_content"`
			Structured sql.NullString `db:"body_structured"`
		}
		if err := t.stmt(ctx, "message.body").GetContext(ctx, &old, p.MessageID); err == sql.ErrNoRows {
			continue
		} else if err != nil {
			return fmt.Errorf("store: reopen %s: %w", e.ID, err)
		}
		structured := nullJSON(p.Structured)
		if old.RowID <= mark { // indexed: its words are replaced
			for _, ix := range []string{"search", "search.plain"} {
				if err := t.exec(ctx, ix+".delete", old.RowID, old.Content, old.Structured); err != nil {
					return fmt.Errorf("store: reopen: %w", err)
				}
				if err := t.exec(ctx, ix+".insert", old.RowID, p.Content, structured); err != nil {
					return fmt.Errorf("store: reopen: %w", err)
				}
			}
		}
		if err := t.exec(ctx, "message.reopen", p.Content, structured, sealedKey(p.Sealed), p.MessageID); err != nil {
			return fmt.Errorf("store: reopen: %w", err)
		}
		if err := t.exec(ctx, "message.edits.clear", p.MessageID); err != nil {
			return fmt.Errorf("store: reopen: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("store: reopen: %w", err)
	}
	s.applies.Add(1)
	return nil
}

// MachineKEM returns the X25519 key a machine published for team keys,
// "" if none arrived.
func (s *Store) MachineKEM(ctx context.Context, machine string) (string, error) {
	var kem string
	err := s.r.GetContext(ctx, &kem, `SELECT kem FROM machine_kems WHERE machine = ?`, machine)
	if err == sql.ErrNoRows {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("store: machine key: %w", err)
	}
	return kem, nil
}

// KeyGrant is a grant of team keys to a machine (eventlog.KeyGrant).
type KeyGrant struct {
	EventID   string `db:"event_id"`
	Machine   string `db:"machine"`
	To        string `db:"to_machine"`
	KEM       string `db:"kem"`
	Wrapped   string `db:"wrapped"`
	GrantedAt string `db:"granted_at"`
}

// KeyGrantsTo returns the grants made to machine, the oldest first.
func (s *Store) KeyGrantsTo(ctx context.Context, machine string) ([]KeyGrant, error) {
	var out []KeyGrant
	if err := s.r.SelectContext(ctx, &out, `SELECT * FROM key_grants WHERE to_machine = ? ORDER BY granted_at, event_id`, machine); err != nil {
		return nil, fmt.Errorf("store: key grants: %w", err)
	}
	return out, nil
}
