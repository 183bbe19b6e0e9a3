package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/thrumhq/thrum/mcpserver"
)

// WaitCmd waits for messages addressed to the agent and prints them,
// each claimed (marked read) for it first: the consumer
// wait_for_message is, for scripts and for plugin monitors, which hand
// each line of a long-running command to the agent.
type WaitCmd struct {
	Follow  bool          `short:"f" help:"Print each message as it arrives, one line each, until SIGTERM or the reader of stdout goes away."`
	Timeout time.Duration `default:"5m" help:"Without --follow: give up after this long (exit code 1)."`
}

func (c *WaitCmd) Help() string {
	return `Prints the agent's oldest unread message, or waits for the next one, and
marks it read: each message reaches the agent once, here or through its MCP
tools, channel or hooks. With --follow it first prints the unread messages
(at most 50, then one line saying how many more wait), then each new one as
it arrives, until SIGTERM, SIGINT or the end of its reader (a closed pipe):
it then stops without claiming more.

Each message is one line: a <thrum-message> element naming its sender and
ID, its text escaped (newlines too) and cut at 4,000 UTF-16 units. With --json
each line is the message as wait_for_message returns it, or
{"more_unread": N}.

Claude Code plugin monitor (monitors/monitors.json):
  [{"name": "thrum", "command": "thrum wait --follow"}]

Examples:
  thrum wait
  thrum wait --timeout 30s --json
  thrum wait --follow
  THRUM_NAME=alice thrum wait --follow --json`
}

// errWaited ends a stream that printed what it waited for.
var errWaited = errors.New("waited")

// errUnshowable is a message print skips: a field too long to frame.
var errUnshowable = errors.New("a message cannot be shown")

func (c *WaitCmd) Run(ctx context.Context, g *Globals) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// A reader that goes away ends the stream before it claims another
	// message: SIGPIPE (a write failed) or, before any write, the pipe's
	// other end closing.
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
	srv, f, _, err := agentServer(ctx, g, &mcpserver.Options{})
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped (a signal, or no reader) before it began
		}
		return err
	}
	defer srv.Close()
	backlog := mcpserver.ChannelBacklog
	if !c.Follow {
		backlog = 1
		var stop context.CancelFunc
		ctx, stop = context.WithTimeout(ctx, c.Timeout)
		defer stop()
	}
	got := 0
	err = srv.Stream(ctx, backlog, func(m *mcpserver.MessageInfo, more int) error {
		err := c.print(g, m, more)
		if errors.Is(err, errUnshowable) {
			// Skipped, so that the messages after it still come.
			g.debugf("wait: %v", err)
			return nil
		}
		if err != nil {
			if m != nil {
				return fmt.Errorf("message %s was marked read but could not be written: %w", m.MessageID, err)
			}
			return err
		}
		if m != nil {
			got++
			if !c.Follow {
				return errWaited
			}
		}
		return nil
	})
	switch {
	case errors.Is(err, errWaited):
		return nil
	case err != nil:
		return err
	case !c.Follow && got == 0 && ctx.Err() == context.DeadlineExceeded:
		return fmt.Errorf("no message for %s within %v", f.AgentID, c.Timeout)
	}
	return nil
}

// print writes one line: the message, framed (or as JSON), or how many
// more are unread.
func (c *WaitCmd) print(g *Globals, m *mcpserver.MessageInfo, more int) error {
	var line []byte
	switch {
	case g.JSON && m != nil:
		line, _ = json.Marshal(m)
	case g.JSON:
		line, _ = json.Marshal(map[string]int{"more_unread": more})
	case m != nil:
		f, err := m.Framed(true)
		if err != nil {
			return fmt.Errorf("%w: %v", errUnshowable, err)
		}
		line = []byte(f)
	default:
		line = fmt.Appendf(nil, "thrum: %d more unread messages are waiting for you: call check_messages to read them.", more)
	}
	_, err := g.stdout.Write(append(line, '\n'))
	return err
}
