package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/thrumhq/thrum/internal/frame"
)

// A Claude Code channel is an MCP server that declares the experimental
// capability "claude/channel" and sends notifications/claude/channel,
// which Claude Code puts in front of the model as
// <channel source="thrum" key="value">content</channel> (DESIGN.md,
// "Reaching agents in their hosts"). With Options.Channel, Run pushes
// every message addressed to the agent that way: it runs Stream for the
// session, so each message is claimed before it is pushed and reaches the
// agent once, through the channel or through one of the consuming tools.
// The SDK has no call for a notification of its own, so the push is
// written on the session's connection, which Run wraps.

// ChannelMethod is the notification a channel sends.
const ChannelMethod = "notifications/claude/channel"

// ChannelCapability is the experimental capability that makes Claude
// Code listen to a server's channel notifications.
const ChannelCapability = "claude/channel"

// ChannelBacklog is how many of the messages left unread while no
// session was connected a channel pushes when one connects, oldest first;
// one more event then says how many more wait, for check_messages.
const ChannelBacklog = 50

// channelVersions are the protocol versions a channel negotiates: those
// with the initialize handshake. Claude Code does not register a channel
// server that negotiates a later protocol.
func channelVersions() []string {
	return slices.DeleteFunc(mcp.SupportedProtocolVersions(), func(v string) bool { return v > "2025-11-25" })
}

// ChannelEvent is the params of notifications/claude/channel: the event's
// text, and attributes of the tag it is shown in (keys of letters, digits
// and underscores only; Claude Code drops others).
type ChannelEvent struct {
	Content string            `json:"content"`
	Meta    map[string]string `json:"meta,omitempty"`
}

// channelEvent is the event that shows m, or, with m nil, says that more
// messages are unread. Every meta value from the log is escaped as a
// frame's attribute; a message with a field too long to show has no
// event (the error says which field).
func channelEvent(m *MessageInfo, more int) (ChannelEvent, error) {
	if m == nil {
		return ChannelEvent{
			Content: fmt.Sprintf("%d more unread thrum messages are waiting for you: call check_messages to read them.", more),
			Meta:    map[string]string{"unread": fmt.Sprint(more)},
		}, nil
	}
	content, err := m.Framed(false)
	if err != nil {
		return ChannelEvent{}, err
	}
	meta := map[string]string{}
	fields := map[string]string{"message_id": m.MessageID, "from": m.From, "priority": m.Priority, "thread_id": m.ThreadID, "reply_to": m.ReplyTo}
	if m.AddressedAs != nil {
		fields["addressed_to"] = "@" + m.AddressedAs.Name
	}
	for k, v := range fields {
		if v == "" && k != "priority" {
			continue
		}
		if meta[k], err = frame.Field(v); err != nil {
			return ChannelEvent{}, fmt.Errorf("%s: %w", k, err)
		}
	}
	meta["instructions"] = fmt.Sprintf("A message from agent %s, already marked read; it is not from your user. "+
		"To answer, call send_message with to \"%[1]s\" and reply_to \"%[2]s\".", meta["from"], meta["message_id"])
	if m.AckRequired {
		meta["ack"] = "requested"
		meta["instructions"] += " The sender asks you to acknowledge it: a reply does."
	}
	return ChannelEvent{Content: content, Meta: meta}, nil
}

// Framed returns m as thrum puts a message into another agent's context
// (a channel event, a stream line): one <thrum-message> element naming
// its sender and ID, its text escaped so that it cannot end the element
// or forge markup, and cut at 4,000 UTF-16 units with a pointer to
// get_message. oneLine writes it on one line. It fails for a message
// with a field too long to show, which a consumer skips.
func (m *MessageInfo) Framed(oneLine bool) (string, error) {
	return frame.Frame(frame.Message{ID: m.MessageID, From: m.From, Priority: m.Priority, ThreadID: m.ThreadID,
		ReplyTo: m.ReplyTo, Ack: m.AckRequired, Body: m.Content}, frame.Options{OneLine: oneLine})
}

// channel is one Run's channel: the connection it writes on, and whether
// the client has finished the handshake (sent notifications/initialized).
type channel struct {
	conn     mcp.Connection
	initOnce sync.Once
	init     chan struct{}
}

func newChannel() *channel { return &channel{init: make(chan struct{})} }

func (c *channel) initialized() { c.initOnce.Do(func() { close(c.init) }) }

// push runs the channel until ctx ends or the server ends its waits:
// once the client is initialized, every message for the agent becomes one
// notification on the connection.
func (s *Server) push(ctx context.Context, c *channel) {
	select {
	case <-c.init:
	case <-ctx.Done():
		return
	}
	err := s.Stream(ctx, ChannelBacklog, func(m *MessageInfo, more int) error {
		ev, err := channelEvent(m, more)
		if err != nil {
			// Skipped, so that the messages after it still come.
			s.log.Warn("mcpserver: channel: a message cannot be shown", "message_id", m.MessageID[:min(len(m.MessageID), 64)], "err", err)
			return nil
		}
		raw, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		// Not ctx: what was claimed as the session stops is still written
		// while the connection is open.
		return c.conn.Write(context.WithoutCancel(ctx), &jsonrpc.Request{Method: ChannelMethod, Params: raw})
	})
	if err != nil {
		s.log.Warn("mcpserver: channel stopped", "err", err)
	}
}
