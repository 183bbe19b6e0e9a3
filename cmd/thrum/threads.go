package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/thrumhq/thrum/rpc"
)

// ThreadCmd groups thread operations.
type ThreadCmd struct {
	Create ThreadCreateCmd `cmd:"" help:"Create a thread, optionally with a first message."`
	List   ThreadListCmd   `cmd:"" help:"List threads, most recently active first."`
	Get    ThreadGetCmd    `cmd:"" help:"Show a thread and its messages."`
}

type ThreadCreateCmd struct {
	Title   string   `arg:"" help:"Thread title."`
	To      string   `help:"Recipient of the first message (needs --message)."`
	Message string   `help:"First message (needs --to)."`
	Scope   []string `help:"Scope as type:value (repeatable)."`
}

func (c *ThreadCreateCmd) Help() string {
	return "Examples:\n  thrum thread create \"Auth review\" --to @reviewer --message \"PR #42 is ready\"\n  thrum thread create \"Release 1.2\" --scope module:release"
}

func (c *ThreadCreateCmd) Run(ctx context.Context, g *Globals) error {
	if (c.To == "") != (c.Message == "") {
		return withCode(exitUsage, "--to and --message go together")
	}
	scopes, err := parsePairs("--scope", c.Scope)
	if err != nil {
		return err
	}
	p := &rpc.CreateThreadParams{Title: c.Title, Scopes: scopes, Recipient: c.To}
	if c.Message != "" {
		p.Message = &rpc.ThreadMessage{Content: c.Message}
	}
	return call(ctx, g, true, func(s *session) (any, error) { return s.c.CreateThread(ctx, p) }, func(w io.Writer, v any) {
		r := v.(*rpc.CreateThreadResult)
		fmt.Fprintf(w, "> Thread created: %s\n", r.ThreadID)
		if r.MessageID != "" {
			fmt.Fprintf(w, "  First message: %s\n", r.MessageID)
		}
	})
}

type ThreadListCmd struct {
	Scope    string `help:"Only threads with this scope (type:value)."`
	PageSize int    `default:"10" help:"Threads per page (1-100)."`
	Page     int    `default:"1" help:"Page number."`
}

// Run acts as the resolved agent: thread.list's unread counts are the
// caller's, and the daemon refuses it without one.
func (c *ThreadListCmd) Run(ctx context.Context, g *Globals) error {
	p := &rpc.ListThreadsParams{PageSize: c.PageSize, Page: c.Page}
	if c.Scope != "" {
		sc, err := parsePair("--scope", c.Scope)
		if err != nil {
			return err
		}
		p.Scope = &sc
	}
	return call(ctx, g, true, func(s *session) (any, error) { return s.c.ListThreads(ctx, p) }, func(w io.Writer, v any) {
		r := v.(*rpc.ListThreadsResult)
		if r.Total == 0 {
			fmt.Fprintln(w, "No threads.")
			return
		}
		now := time.Now()
		t := table(w, "THREAD", "TITLE", "MESSAGES", "UNREAD", "LAST")
		for _, th := range r.Threads {
			last := ago(th.LastActivity, now)
			if th.LastSender != "" {
				last += " by @" + th.LastSender
			}
			t.row(th.ThreadID, th.Title, fmt.Sprint(th.MessageCount), fmt.Sprint(th.UnreadCount), last)
		}
		t.flush()
		fmt.Fprintf(w, "Showing page %d of %d (%d %s)\n", r.Page, r.TotalPages, r.Total, plural(r.Total, "thread", "threads"))
	})
}

type ThreadGetCmd struct {
	ThreadID string `arg:"" help:"Thread ID."`
	PageSize int    `default:"10" help:"Messages per page (1-100)."`
	Page     int    `default:"1" help:"Page number."`
}

func (c *ThreadGetCmd) Run(ctx context.Context, g *Globals) error {
	return call(ctx, g, false, func(s *session) (any, error) {
		return s.c.GetThread(ctx, &rpc.GetThreadParams{ThreadID: c.ThreadID, PageSize: c.PageSize, Page: c.Page})
	}, func(w io.Writer, v any) {
		r := v.(*rpc.GetThreadResult)
		fmt.Fprintf(w, "Thread: %s — %s (by @%s)\n", r.Thread.ThreadID, r.Thread.Title, r.Thread.CreatedBy)
		if r.Total == 0 {
			fmt.Fprintln(w, "No messages yet.")
			return
		}
		renderInbox(w, &rpc.ListMessagesResult{Messages: r.Messages, Total: r.Total, Page: r.Page, PageSize: r.PageSize, TotalPages: r.TotalPages,
			Unread: countUnread(r.Messages)}, inboxView{Quiet: g.Quiet, Now: time.Now(), NextCmd: "thrum thread get " + c.ThreadID + pageSizeFlag(c.PageSize)})
	})
}

func countUnread(ms []rpc.MessageSummary) int {
	n := 0
	for _, m := range ms {
		if !m.IsRead {
			n++
		}
	}
	return n
}

// indent writes its lines two spaces in.
type indent struct{ w io.Writer }

func (i indent) Write(p []byte) (int, error) {
	var b []byte
	for line := range strings.Lines(string(p)) {
		b = append(append(b, "  "...), line...)
	}
	if _, err := i.w.Write(b); err != nil {
		return 0, err
	}
	return len(p), nil
}
