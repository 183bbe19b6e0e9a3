package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/thrumhq/thrum/inbox"
	"github.com/thrumhq/thrum/rpc"
)

// WaitCmd waits for the agent's messages. Without --follow it is the
// consumer wait_for_message is, for a script or a tool call whose output
// is its result: it prints one message, claimed (marked read) for the
// agent. With --follow it is a doorbell, for plugin monitors, which hand
// each line of a long-running command to the agent but may lose what is
// in the pipe: each line announces messages and claims nothing.
type WaitCmd struct {
	Follow  bool          `short:"f" help:"Announce messages as they arrive, one line each, claiming nothing, until SIGTERM or the reader of stdout goes away."`
	Wake    bool          `help:"With --follow: each line is the ring that wakes an idle session (\"thrum: N new messages (newest msg_… from bob); call check_messages\"), once per batch of mail, for a host plugin to put before the session as its prompt."`
	Timeout time.Duration `default:"5m" help:"Without --follow: give up after this long (exit code 1)."`
}

func (c *WaitCmd) Help() string {
	return `Prints the agent's oldest unread message, or waits for the next one, and
marks it read: each message reaches the agent once, here or through its MCP
tools or hooks. The message is one <thrum-message> element naming its
sender and ID, its text escaped (newlines too); with --json, the message as
wait_for_message returns it.

With --follow it claims nothing: it announces. When messages arrive (and
at the start, if some wait) it prints one line saying how many are unread
and naming the newest, each with its sender, priority and subject — at
most one line a second, however many arrive — and the agent reads them
with check_messages, or its next prompt's hook shows them. It runs until
SIGTERM, SIGINT or the end of its reader. With --json each line is
{"unread": N, "new": [{"message_id", "from", "priority", "subject"}]}.
With --wake each line is the ring thrum's opencode plugin puts before an
idle session as its prompt, values thrum made and no subject: "thrum: 2
new messages (newest msg_… from bob); call check_messages", once per
batch of mail (it waits 200 ms for the batch to end).

Claude Code plugin monitor (monitors/monitors.json):
  [{"name": "thrum", "command": "thrum wait --follow"}]

Examples:
  thrum wait
  thrum wait --timeout 30s --json
  thrum wait --follow
  THRUM_NAME=alice thrum wait --follow --json`
}

// stopGrace bounds how long `thrum wait --follow` waits, once stopped,
// for a line it is writing: a reader that stopped reading leaves the
// write blocked on a full pipe, and the process exits without it.
const stopGrace = 500 * time.Millisecond

func (c *WaitCmd) Run(ctx context.Context, g *Globals) error {
	if c.Wake && !c.Follow {
		return withCode(exitUsage, "--wake goes with --follow")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// A reader that goes away ends the command: SIGPIPE (a write failed)
	// or, before any write, the pipe's other end closing.
	sigpipe := make(chan os.Signal, 1)
	signal.Notify(sigpipe, syscall.SIGPIPE)
	defer signal.Stop(sigpipe)
	go func() {
		select {
		case <-sigpipe:
			cancel()
		case <-ctx.Done():
		}
	}()
	if g.stdout == os.Stdout {
		defer watchReader(cancel)()
	}
	ib, a, err := agentInbox(ctx, g)
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped (a signal, or no reader) before it began
		}
		return err
	}
	defer ib.Close()
	if c.Follow {
		return c.follow(ctx, g, ib, a.f.AgentID)
	}
	ctx, stop := context.WithTimeout(ctx, c.Timeout)
	defer stop()
	shape := inbox.Shape{BodyMax: inbox.Whole, OneLine: true}
	var m *inbox.Message
	r, err := ib.Check(ctx, inbox.CheckParams{Limit: 1, Via: rpc.ViaStream, Shape: shape})
	switch {
	case err != nil:
	case len(r.Messages) > 0:
		m = &r.Messages[0]
	default:
		var w *inbox.WaitResult
		if w, err = ib.Wait(ctx, inbox.WaitParams{Timeout: c.Timeout, Via: rpc.ViaStream, Shape: shape}); err == nil {
			m = w.Message
		}
	}
	switch {
	case m != nil:
	case ctx.Err() == context.DeadlineExceeded:
		return fmt.Errorf("no message for %s within %v", a.f.AgentID, c.Timeout)
	case ctx.Err() != nil:
		return nil // stopped
	case err != nil:
		return err
	default:
		return fmt.Errorf("no message for %s within %v", a.f.AgentID, c.Timeout)
	}
	line := []byte(m.Content)
	if g.JSON {
		line, _ = json.Marshal(m)
	}
	if _, err := g.stdout.Write(append(line, '\n')); err != nil {
		return fmt.Errorf("message %s was marked read but could not be written: %w", m.MessageID, err)
	}
	return nil
}

// follow prints a line at each ring of the agent's doorbell until ctx
// ends, returning within stopGrace of it even if a write is blocked.
func (c *WaitCmd) follow(ctx context.Context, g *Globals, ib *inbox.Inbox, agent string) error {
	done := make(chan error, 1)
	go func() {
		settle := time.Duration(0)
		if c.Wake {
			settle = inbox.DoorbellSettle
		}
		done <- ib.Doorbells(ctx, settle, func(d *inbox.Doorbell) error {
			line := []byte(d.Text(agent, true))
			switch {
			case c.Wake:
				line = []byte(d.Wake())
			case g.JSON:
				line, _ = json.Marshal(d)
			}
			if len(line) == 0 {
				return nil
			}
			_, err := g.stdout.Write(append(line, '\n'))
			return err
		})
	}()
	select {
	case err := <-done:
		if ctx.Err() != nil {
			return nil
		}
		return err
	case <-ctx.Done():
	}
	select {
	case <-done:
	case <-time.After(stopGrace):
		// Blocked on a pipe nobody reads: what it was writing claimed
		// nothing, so nothing is lost with it.
		g.debugf("wait: a line is still being written; stopping without it")
	}
	return nil
}
