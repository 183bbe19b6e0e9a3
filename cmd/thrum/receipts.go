package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/thrumhq/thrum/rpc"
)

// AckCmd acknowledges a message.
type AckCmd struct {
	MessageID string `arg:"" name:"msg-id" help:"Message to acknowledge."`
	Note      string `help:"A short note for the sender (at most 500 bytes)."`
}

func (c *AckCmd) Help() string {
	return `Tells the sender you have the message, with an optional note. Only a
recipient of the message (an agent its address reached when it was sent)
may; a second acknowledgement changes nothing. Replying to a message
(thrum reply, or send_message with reply_to) acknowledges it too. If no
path has delivered the message to you yet, acknowledging it marks it read.

Examples:
  thrum ack msg_01HXE...
  thrum ack msg_01HXE... --note "on it, ETA 20m"`
}

func (c *AckCmd) Run(ctx context.Context, g *Globals) error {
	s, err := connectAs(ctx, g)
	if err != nil {
		return err
	}
	defer s.close()
	r, err := s.c.AckMessage(ctx, &rpc.AckMessageParams{MessageID: c.MessageID, Note: c.Note})
	if err != nil {
		return err
	}
	return g.out(r, func(w io.Writer) {
		if r.Already {
			fmt.Fprintf(w, "> Already acknowledged %s %s%s\n", r.MessageID, ago(r.Receipt.AckedAt, time.Now()), ackHow(r.Receipt))
			return
		}
		fmt.Fprintf(w, "> Acknowledged %s\n", r.MessageID)
	})
}

// SentCmd lists the caller's sent messages with their receipts.
type SentCmd struct {
	Unacked  bool `help:"Only messages that ask for an acknowledgement some recipient has not given."`
	Overdue  bool `help:"Only those of them whose time to acknowledge (--ack-within) is up."`
	PageSize int  `default:"10" help:"Messages per page (1-100)."`
	Page     int  `default:"1" help:"Page number."`
}

func (c *SentCmd) Help() string {
	return `Lists the messages you sent, newest first, each with a summary of its
receipts: of the recipients its address reached, how many have it
delivered (by wait_for_message, check_messages, a channel, a hook, a
stream, a reply, an acknowledgement or a mark read) and how many
acknowledged it. thrum message get ID shows each recipient's receipt.

Examples:
  thrum sent
  thrum sent --unacked
  thrum sent --overdue --json`
}

func (c *SentCmd) Run(ctx context.Context, g *Globals) error {
	if c.PageSize < 1 || c.PageSize > 100 {
		return withCode(exitUsage, "--page-size %d: use 1 to 100", c.PageSize)
	}
	if c.Page < 1 {
		return withCode(exitUsage, "--page %d: pages start at 1", c.Page)
	}
	return call(ctx, g, true, func(s *session) (any, error) {
		return s.c.ListSent(ctx, &rpc.ListSentParams{Unacked: c.Unacked, Overdue: c.Overdue, PageSize: c.PageSize, Page: c.Page})
	}, func(w io.Writer, v any) { renderSent(w, v.(*rpc.ListSentResult), c, time.Now()) })
}

func renderSent(w io.Writer, r *rpc.ListSentResult, c *SentCmd, now time.Time) {
	if len(r.Messages) == 0 {
		switch {
		case c.Overdue:
			fmt.Fprintln(w, "> No overdue acknowledgements")
		case c.Unacked:
			fmt.Fprintln(w, "> Every acknowledgement you asked for is in")
		default:
			fmt.Fprintln(w, "> You have sent no messages")
		}
		return
	}
	t := table(w, "ID", "SENT", "RECEIPTS", "ACK", "MESSAGE")
	for _, m := range r.Messages {
		t.row(m.MessageID, ago(m.CreatedAt, now), receiptSummary(m), ackState(m.AckRequired, m.AckDue, m.Acknowledged == m.Recipients, now),
			oneLine(m.Preview, 40))
	}
	t.flush()
	if r.TotalPages > r.Page {
		fmt.Fprintf(w, "Page %d of %d: thrum sent --page %d for more\n", r.Page, r.TotalPages, r.Page+1)
	}
}

// receiptSummary is "2/3 delivered, 1 acked" ("to no one" without
// recipients).
func receiptSummary(m rpc.SentMessage) string {
	if m.Recipients == 0 {
		return "to no one"
	}
	s := fmt.Sprintf("%d/%d delivered", m.Delivered, m.Recipients)
	if m.Acknowledged > 0 || m.AckRequired {
		s += fmt.Sprintf(", %d acked", m.Acknowledged)
	}
	return s
}

// ackState says where a request for an acknowledgement stands: "-" if
// none was made, "done" once every recipient acknowledged, else when it
// is due.
func ackState(required bool, due string, done bool, now time.Time) string {
	switch {
	case !required:
		return "-"
	case done:
		return "done"
	case due == "":
		return "asked"
	}
	t, err := time.Parse(time.RFC3339Nano, due)
	if err != nil {
		return "due " + due
	}
	if d := t.Sub(now); d > 0 {
		return "due in " + d.Round(time.Minute).String()
	}
	return "OVERDUE " + now.Sub(t).Round(time.Minute).String()
}

// oneLine is s shown on one line of at most n characters, cut at a
// grapheme cluster's end.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(shown(s)), " ")
	if utf8.RuneCountInString(s) > n {
		return graphemePrefix(s, n-1) + "…"
	}
	return s
}

// renderReceipts prints message get's receipts, one line per recipient.
func renderReceipts(w io.Writer, m *rpc.MessageDetail, now time.Time) {
	if m.AckRequired {
		done := len(m.Receipts) > 0
		for _, r := range m.Receipts {
			done = done && r.State == rpc.ReceiptAcknowledged
		}
		fmt.Fprintf(w, "  Ack:     %s\n", ackState(true, m.AckDue, done, now))
	}
	if len(m.Receipts) == 0 {
		return
	}
	fmt.Fprintln(w, "  Receipts:")
	width := 0
	for _, r := range m.Receipts {
		width = max(width, len(r.AgentID)+1)
	}
	for _, r := range m.Receipts {
		s := r.State
		switch r.State {
		case rpc.ReceiptDelivered:
			s += delivered(r, now)
		case rpc.ReceiptAcknowledged:
			s += " " + ago(r.AckedAt, now) + ackHow(r)
			if r.At != "" {
				s += " (delivered" + delivered(r, now) + ")"
			}
		}
		fmt.Fprintf(w, "    %-*s  %s\n", width, "@"+r.AgentID, s)
	}
}

// delivered is " via PATH AGO" for a delivered receipt.
func delivered(r rpc.Receipt, now time.Time) string {
	s := ""
	if r.Via != "" {
		s += " via " + r.Via
	}
	return s + " " + ago(r.At, now)
}

// ackHow says how an acknowledgement was made: by which reply, or with
// which note.
func ackHow(r rpc.Receipt) string {
	switch {
	case r.ReplyID != "":
		return " by reply " + r.ReplyID
	case r.Note != "":
		return fmt.Sprintf(": %q", r.Note)
	}
	return ""
}
