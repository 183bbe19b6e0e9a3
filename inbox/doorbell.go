package inbox

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/thrumhq/thrum/internal/frame"
	"github.com/thrumhq/thrum/rpc"
)

// Doorbells. A way in that cannot show a message to the agent's model —
// a channel event the host may drop, a monitor's line in a pipe its reader
// may abandon, a session's start that may never reach a prompt — rings a
// doorbell instead: who sent what, and how many messages wait, claiming
// nothing. The agent's next tool call or context hook claims them.

// DoorbellEvery is the least time between two rings of Doorbells: the
// messages of a flood are announced together, once a second at most.
const DoorbellEvery = time.Second

// DoorbellSettle is how long a wake's Doorbells waits for mail to stop
// coming before it rings: a batch sent together rings once.
const DoorbellSettle = 200 * time.Millisecond

// DoorbellNames is how many messages a ring of Doorbells names at most.
const DoorbellNames = 5

// subjectMax bounds a subject, in characters (before escaping).
const subjectMax = 80

// Doorbell announces the agent's unread messages: how many there are now,
// as the daemon counts them, and the newest not announced before.
type Doorbell struct {
	Unread int         `json:"unread"`
	New    []Announced `json:"new"`
}

// Announced is one message a Doorbell names: its sender, priority and
// one-line subject (the start of its first line), raw.
type Announced struct {
	MessageID string `json:"message_id"`
	From      string `json:"from"`
	Priority  string `json:"priority"`
	Subject   string `json:"subject"`
}

// Text is d as it is put before the agent (agent its name): a line
// saying how many messages wait and that nothing was marked read, then
// named. oneLine joins it all on one line, for a stream whose reader takes
// each line as an event.
func (d *Doorbell) Text(agent string, oneLine bool) string {
	return fmt.Sprintf("thrum: %d unread %s from other agents %s for you (%s), not from your user. "+
		"Announced only, nothing is marked read: call check_messages to read %s.",
		d.Unread, plural(d.Unread, "message", "messages"), plural(d.Unread, "waits", "wait"), frame.Escape(agent),
		plural(d.Unread, "it", "them")) + d.named(oneLine)
}

// named is the messages d names, each in a <thrum-message> frame holding
// its subject, escaped, after a line break (a space if oneLine); "" if it
// names none. One with a field too long to frame is counted, not named.
func (d *Doorbell) named(oneLine bool) string {
	if len(d.New) == 0 {
		return ""
	}
	sep := "\n"
	if oneLine {
		sep = " "
	}
	var b strings.Builder
	b.WriteString(sep + "Newest, by subject:")
	for _, a := range d.New {
		f, err := frame.Frame(frame.Message{ID: a.MessageID, From: a.From, Priority: a.Priority, Body: a.Subject},
			frame.Options{OneLine: true})
		if err != nil {
			continue // a field too long to show: counted, not named
		}
		b.WriteString(sep + f)
	}
	return b.String()
}

// Wake is d as a ring that wakes an idle session, where it arrives as
// the user's prompt: a fixed line of values thrum made — the count, the
// newest message's ID and its sender's name — never a subject or body,
// which another agent wrote. The newest ID makes each ring's text new, so
// a host that drops a prompt it has just seen keeps it. "" if d names no
// message.
func (d *Doorbell) Wake() string {
	if len(d.New) == 0 {
		return ""
	}
	n := d.New[len(d.New)-1]
	return fmt.Sprintf("thrum: %d new %s (newest %s from %s); call check_messages",
		d.Unread, plural(d.Unread, "message", "messages"), frame.Escape(n.MessageID), frame.Escape(n.From))
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// Doorbell returns the agent's unread count and up to names of its newest
// unread messages, oldest of them first, leaving out those announced
// reports as announced already (nil: none). It claims nothing.
func (ib *Inbox) Doorbell(ctx context.Context, names int, announced func(id string) bool) (*Doorbell, error) {
	r, err := Call(ctx, ib, func(ctx context.Context, c *rpc.Client) (*rpc.ListMessagesResult, error) {
		return c.ListMessages(ctx, &rpc.ListMessagesParams{Mentions: true, Unread: true, PageSize: max(names, 1), SortOrder: "desc"})
	})
	if err != nil {
		return nil, err
	}
	d := &Doorbell{Unread: r.Total, New: []Announced{}}
	for _, m := range slices.Backward(r.Messages) {
		if names > 0 && (announced == nil || !announced(m.MessageID)) {
			d.New = append(d.New, Announced{MessageID: m.MessageID, From: m.AgentID, Priority: m.Priority, Subject: subject(m.Body.Content)})
		}
	}
	return d, nil
}

// subject is the start of text's first non-blank line, cut at
// subjectMax characters with "…".
func subject(text string) string {
	for line := range strings.Lines(text) {
		if line = strings.TrimSpace(line); line != "" {
			if r := []rune(line); len(r) > subjectMax {
				return string(r[:subjectMax]) + "…"
			}
			return line
		}
	}
	return ""
}

// Doorbells rings for the agent's unread messages until ctx ends or the
// Inbox ends: once at the start if any wait, then whenever messages came
// that no ring named, at most once per DoorbellEvery. With settle, it
// rings once messages stopped coming for that long (still once per
// DoorbellEvery in a flood). Each ring names the newest of them
// (DoorbellNames at most) and counts every unread message the daemon
// holds for the agent. It claims nothing. It returns nil when it stops,
// or ring's error.
func (ib *Inbox) Doorbells(ctx context.Context, settle time.Duration, ring func(*Doorbell) error) error {
	named := map[string]bool{}
	var last time.Time
	look := true
	for {
		ib.mu.Lock()
		changed, ending := ib.changed, ib.ending // before looking: a push after the look is not missed
		ib.mu.Unlock()
		if look {
			if wait := time.Until(last.Add(DoorbellEvery)); wait > 0 {
				select {
				case <-time.After(wait):
				case <-ctx.Done():
					return nil
				case <-ending:
					return nil
				}
			}
			look = false
			d, err := ib.Doorbell(ctx, DoorbellNames, func(id string) bool { return named[id] })
			switch {
			case ctx.Err() != nil:
				return nil
			case err != nil:
				ib.log.Warn("inbox: doorbell: counting unread messages", "err", err)
				look, last = true, time.Now() // again, a while later
				continue
			case len(d.New) > 0:
				if len(named) > 10*ib.opts.QueueSize {
					clear(named)
				}
				for _, a := range d.New {
					named[a.MessageID] = true
				}
				if err := ring(d); err != nil {
					return err
				}
				last = time.Now()
			}
		}
		select {
		case <-changed:
			look = true
		case <-ctx.Done():
			return nil
		case <-ending:
			return nil
		}
		if settle > 0 && !ib.settled(ctx, settle) {
			return nil
		}
	}
}

// settled returns once no push came for settle, or DoorbellEvery passed;
// false if ctx or the Inbox ended first.
func (ib *Inbox) settled(ctx context.Context, settle time.Duration) bool {
	limit := time.NewTimer(DoorbellEvery)
	defer limit.Stop()
	for {
		ib.mu.Lock()
		changed, ending := ib.changed, ib.ending
		ib.mu.Unlock()
		quiet := time.NewTimer(settle)
		select {
		case <-changed:
			quiet.Stop()
			continue
		case <-quiet.C:
			return true
		case <-limit.C:
			quiet.Stop()
			return true
		case <-ctx.Done():
			quiet.Stop()
			return false
		case <-ending:
			quiet.Stop()
			return false
		}
	}
}
