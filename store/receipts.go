package store

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jmoiron/sqlx"
)

// Receipt is where a message stands with one of its recipients: when it
// was first delivered (read) and how, and its acknowledgement, if any.
type Receipt struct {
	AgentID string
	ReadAt  string // "" while queued
	Via     string
	AckedAt string // "" until acknowledged
	Note    string
	ReplyID string // the reply that acknowledged it, if one did
}

// Receipts are a message's receipts, one per recipient in the order they
// were resolved at send.
type Receipts struct {
	MessageID   string
	AuthorID    string
	ActingAs    string
	AckRequired bool
	AckDue      string
	Recipients  []Receipt
}

// Receipts returns the receipts of each of ids that exists. A recipient's
// delivery is its earliest read (by read_at, then session); its
// acknowledgement the first its shard holds.
func (s *Store) Receipts(ctx context.Context, ids []string) (map[string]*Receipts, error) {
	out := map[string]*Receipts{}
	if len(ids) == 0 {
		return out, nil
	}
	var msgs []struct {
		ID          string `db:"message_id"`
		Author      string `db:"agent_id"`
		ActingAs    string `db:"acting_as"`
		Recipients  string `db:"recipients"`
		AckRequired bool   `db:"ack_required"`
		AckDue      string `db:"ack_due"`
	}
	q, args, err := sqlx.In(`SELECT message_id, agent_id, acting_as, recipients, ack_required, ack_due FROM messages WHERE message_id IN (?)`, ids)
	if err != nil {
		return nil, err
	}
	if err := s.sel(ctx, &msgs, q, args...); err != nil {
		return nil, fmt.Errorf("store: receipts: %w", err)
	}
	slot := map[[2]string]*Receipt{} // (message, agent) → its receipt
	var have []string
	for _, m := range msgs {
		r := &Receipts{MessageID: m.ID, AuthorID: m.Author, ActingAs: m.ActingAs, AckRequired: m.AckRequired, AckDue: m.AckDue}
		var agents []string
		if m.Recipients != "" {
			_ = json.Unmarshal([]byte(m.Recipients), &agents) // written by Apply from a []string
		}
		r.Recipients = make([]Receipt, len(agents))
		for i, a := range agents {
			r.Recipients[i].AgentID = a
		}
		for i := range r.Recipients {
			slot[[2]string{m.ID, agents[i]}] = &r.Recipients[i]
		}
		out[m.ID] = r
		if len(agents) > 0 {
			have = append(have, m.ID)
		}
	}
	if len(have) == 0 {
		return out, nil
	}
	var reads []struct {
		ID      string `db:"message_id"`
		Agent   string `db:"agent_id"`
		At      string `db:"read_at"`
		Via     string `db:"via"`
		Session string `db:"session_id"`
	}
	q, args, err = sqlx.In(`SELECT message_id, agent_id, read_at, via, session_id FROM message_reads WHERE message_id IN (?)
		ORDER BY message_id, agent_id, read_at, session_id`, have)
	if err != nil {
		return nil, err
	}
	if err := s.sel(ctx, &reads, q, args...); err != nil {
		return nil, fmt.Errorf("store: receipts: reads: %w", err)
	}
	for _, rd := range reads {
		if r := slot[[2]string{rd.ID, rd.Agent}]; r != nil && r.ReadAt == "" {
			r.ReadAt, r.Via = rd.At, rd.Via
		}
	}
	var acks []struct {
		ID      string `db:"message_id"`
		Agent   string `db:"agent_id"`
		At      string `db:"acked_at"`
		Note    string `db:"note"`
		ReplyID string `db:"reply_id"`
	}
	q, args, err = sqlx.In(`SELECT message_id, agent_id, acked_at, note, reply_id FROM message_acks WHERE message_id IN (?)`, have)
	if err != nil {
		return nil, err
	}
	if err := s.sel(ctx, &acks, q, args...); err != nil {
		return nil, fmt.Errorf("store: receipts: acks: %w", err)
	}
	for _, a := range acks {
		if r := slot[[2]string{a.ID, a.Agent}]; r != nil {
			r.AckedAt, r.Note, r.ReplyID = a.At, a.Note, a.ReplyID
		}
	}
	return out, nil
}

// SentFilter selects an author's messages for SentMessages.
type SentFilter struct {
	AuthorID string
	// Unacked keeps the messages that ask for an acknowledgement and lack
	// one from a recipient; Overdue keeps those of them past their
	// deadline at Now (TimeFormat).
	Unacked, Overdue bool
	Now              string
	Limit, Offset    int
}

// unackedExpr is true when a recipient of message m has not acknowledged
// it.
const unackedExpr = `EXISTS (SELECT 1 FROM json_each(m.recipients) j WHERE NOT EXISTS
	(SELECT 1 FROM message_acks a WHERE a.message_id = m.message_id AND a.agent_id = j.value))`

// SentMessages returns a page of the IDs of the messages f.AuthorID wrote
// (not deleted), newest first, and how many there are in all.
func (s *Store) SentMessages(ctx context.Context, f SentFilter) (ids []string, total int, err error) {
	where := `m.agent_id = ? AND m.deleted = 0`
	args := []any{f.AuthorID}
	if f.Unacked || f.Overdue {
		where += ` AND m.ack_required = 1 AND m.recipients != '' AND ` + unackedExpr
	}
	if f.Overdue {
		where += ` AND m.ack_due != '' AND m.ack_due < ?`
		args = append(args, f.Now)
	}
	if err := s.get(ctx, &total, `SELECT count(*) FROM messages m WHERE `+where, args...); err != nil {
		return nil, 0, fmt.Errorf("store: sent messages: %w", err)
	}
	if err := s.sel(ctx, &ids, `SELECT m.message_id FROM messages m WHERE `+where+` ORDER BY m.created_at DESC, m.message_id DESC LIMIT ? OFFSET ?`,
		append(args, f.Limit, f.Offset)...); err != nil {
		return nil, 0, fmt.Errorf("store: sent messages: %w", err)
	}
	return ids, total, nil
}
