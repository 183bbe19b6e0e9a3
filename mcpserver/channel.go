package mcpserver

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/thrumhq/thrum/inbox"
)

// A Claude Code channel is an MCP server that declares the experimental
// capability "claude/channel" and sends notifications/claude/channel,
// which Claude Code puts in front of the model as
// <channel source="thrum" key="value">content</channel> — when it loaded
// the server as a channel; otherwise it drops them, and its handshake does
// not tell (DESIGN.md, "Reaching agents in their hosts"). So a channel is
// a doorbell: with Options.Channel, Run rings the agent's doorbell in the
// session (inbox.Doorbells) — who sent what, and how many wait — and
// claims nothing; the agent's check_messages or its next context hook
// does. The SDK has no call for a notification of its own, so the ring is
// written on the session's connection, which Run wraps.

// ChannelMethod is the notification a channel sends.
const ChannelMethod = "notifications/claude/channel"

// ChannelCapability is the experimental capability that makes Claude
// Code listen to a server's channel notifications.
const ChannelCapability = "claude/channel"

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

// channelEvent is the event that rings d for agent.
func channelEvent(d *inbox.Doorbell, agent string) ChannelEvent {
	return ChannelEvent{Content: d.Text(agent, false), Meta: map[string]string{"unread": strconv.Itoa(d.Unread)}}
}

// channel is one Run's channel: the connection it writes on, and whether
// the client has finished the handshake (sent notifications/initialized).
type channel struct {
	conn mcp.Connection
	init chan struct{}
	done bool // init is closed; guarded by Server.mu
}

func newChannel() *channel { return &channel{init: make(chan struct{})} }

func (c *channel) initialized(s *Server) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !c.done {
		c.done = true
		close(c.init)
	}
}

// ring runs the channel until ctx ends or the server ends its waits: once
// the client is initialized, each ring of the agent's doorbell becomes one
// notification on the connection.
func (s *Server) ring(ctx context.Context, c *channel) {
	select {
	case <-c.init:
	case <-ctx.Done():
		return
	}
	agent := s.ib.ID().AgentID
	err := s.ib.Doorbells(ctx, 0, func(d *inbox.Doorbell) error {
		raw, err := json.Marshal(channelEvent(d, agent))
		if err != nil {
			return err
		}
		return c.conn.Write(ctx, &jsonrpc.Request{Method: ChannelMethod, Params: raw})
	})
	if err != nil && ctx.Err() == nil {
		s.log.Warn("mcpserver: channel stopped", "err", err)
	}
}
