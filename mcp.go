package thrum

import (
	"context"
	"encoding/json"

	"github.com/thrumhq/thrum/mcpserver"
	"github.com/thrumhq/thrum/rpc"
)

// MCPServer is the MCP server for one agent (package mcpserver).
type MCPServer = mcpserver.Server

// MCPServer returns an MCP server acting as id, connected to this node in
// process (through Dial): the same code path as over a daemon's socket.
// The caller serves it (Run, HTTPHandler) and closes it.
func (n *Node) MCPServer(ctx context.Context, id mcpserver.Identity, opts *mcpserver.Options) (*MCPServer, error) {
	dial := func(_ context.Context, onNote func(string, json.RawMessage)) (*rpc.Client, error) {
		return n.Dial(&rpc.ClientOptions{OnNotification: onNote}), nil
	}
	return mcpserver.New(ctx, dial, id, opts)
}
