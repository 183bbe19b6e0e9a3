package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"

	"github.com/thrumhq/thrum/eventlog/gitsync"
	"github.com/thrumhq/thrum/internal/private"
)

// A daemon that an agent's MCP server started (mcp serve, after a reboot
// say) was started by no person, so it sends the log nowhere a person was
// not told of. What a person was told is recorded in the var directory's
// leaves file: the line saying where the log goes, as init or a person's
// daemon start printed it last. An autostarted daemon syncs only while
// that line is still true.

// leavesFile records the line a person was last told of where the log
// goes.
const leavesFile = "leaves"

// leavesLine says where this clone's log goes now.
func leavesLine(ctx context.Context, l *layout) string {
	if !l.Git || !gitsync.HasRemote(ctx, l.Root, gitsync.DefaultRemote) {
		return "Sync: off (no git remote): the log stays on this machine."
	}
	u, _ := git(ctx, l.Root, "remote", "get-url", gitsync.DefaultRemote)
	return "Sync: the daemon pushes every message and event of the log (not credentials) to git remote " +
		gitsync.DefaultRemote + " (" + u + "), branch " + SyncBranch
}

// untold says why an autostarted daemon must not sync ("" when a person
// was told where the log goes, as it goes now).
func untold(ctx context.Context, l *layout) string {
	b, err := os.ReadFile(filepath.Join(filepath.Dir(l.PIDFile), leavesFile))
	switch {
	case err != nil:
		return "this daemon was started by an agent's MCP server, and no one was told that the log goes to the git remote: `thrum daemon start` says where it goes and syncs"
	case strings.TrimSpace(string(b)) != leavesLine(ctx, l):
		return "this daemon was started by an agent's MCP server, and where the log goes changed since a person was told: `thrum daemon start` says where it goes now and syncs"
	}
	return ""
}

// toldLeaves records line as what a person was told of where the log goes.
func toldLeaves(l *layout, line string) error {
	return private.WriteFile(filepath.Join(filepath.Dir(l.PIDFile), leavesFile), []byte(line+"\n"))
}
