package main

import (
	"os"
	"path/filepath"
	"strings"

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

// untold says why an autostarted daemon must not sync ("" when a person
// was told where the log goes, as it goes now: to).
func untold(l *layout, to *leaves) string {
	b, err := os.ReadFile(filepath.Join(filepath.Dir(l.PIDFile), leavesFile))
	switch {
	case err != nil:
		return "this daemon was started by an agent's MCP server, and no one was told where the log goes: `thrum daemon start` says where it goes and syncs"
	case strings.TrimSpace(string(b)) != to.line():
		return "this daemon was started by an agent's MCP server, and where the log goes changed since a person was told: `thrum daemon start` says where it goes now and syncs"
	}
	return ""
}

// toldLeaves records line as what a person was told of where the log goes.
func toldLeaves(l *layout, line string) error {
	return private.WriteFile(filepath.Join(filepath.Dir(l.PIDFile), leavesFile), []byte(line+"\n"))
}
