// Command thrum is the reference binary of thrum: a CLI that wires the
// library's parts — a daemon serving the JSON-RPC API on a Unix socket and
// a WebSocket, commands that talk to it, and an MCP server for agents.
//
// Exit codes: 0 success; 1 an error; 2 a usage error; 3 no daemon is
// running; 4 no agent identity could be resolved.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
