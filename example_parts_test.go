package thrum_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/mcpserver"
	"github.com/thrumhq/thrum/rpc"
)

// Serve a node's API on an owner-only Unix socket, as the daemon does, and
// call it with the typed client.
func ExampleRPCServer() {
	dir, err := os.MkdirTemp("", "thrum-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	n, err := thrum.Open(ctx, dir, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer n.Close()

	srv := n.RPCServer(nil)
	sock := filepath.Join(dir, "var", "thrum.sock")
	l, err := thrum.ListenUnix(sock) // 0600 in a 0700 directory
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(l)
	defer srv.Close()

	c, err := rpc.Dial(ctx, sock, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	reg, err := c.RegisterAgent(ctx, &rpc.RegisterAgentParams{Name: "alice", Role: "implementer", Module: "auth"})
	if err != nil {
		log.Fatal(err)
	}
	agents, err := c.ListAgents(ctx, &rpc.ListAgentsParams{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(reg.AgentID, reg.Status, len(agents.Agents))
	// Output: alice registered 1
}

// Give an agent its MCP tools on an embedded node: the server talks to the
// node in process, and any MCP client (here go-sdk's, over an in-memory
// transport) calls the tools.
func ExampleNode_MCPServer() {
	dir, err := os.MkdirTemp("", "thrum-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	n, err := thrum.Open(ctx, dir, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer n.Close()
	for _, a := range []rpc.RegisterAgentParams{
		{Name: "alice", Role: "implementer", Module: "auth"},
		{Name: "bob", Role: "reviewer", Module: "auth"},
	} {
		n.RegisterAgent(ctx, &a)
		n.StartSession(ctx, &rpc.StartSessionParams{AgentID: a.Name})
	}
	n.SendMessage(thrum.AsAgent(ctx, "alice"), &rpc.SendMessageParams{Content: "please review auth", Mentions: []string{"@reviewer"}})

	srv, err := n.MCPServer(ctx, mcpserver.Identity{AgentID: "bob", Role: "reviewer"}, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	serverSide, clientSide := mcp.NewInMemoryTransports()
	go srv.Run(ctx, serverSide)

	client := mcp.NewClient(&mcp.Implementation{Name: "example-agent", Version: "1.0"}, nil)
	cs, err := client.Connect(ctx, clientSide, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "check_messages"})
	if err != nil {
		log.Fatal(err)
	}
	raw, _ := json.Marshal(res.StructuredContent)
	var out mcpserver.CheckMessagesOutput
	json.Unmarshal(raw, &out)
	for _, m := range out.Messages {
		// The text comes framed, as a model should see it: the frame's
		// first line names the message's ID, sender and priority.
		_, text, _ := strings.Cut(m.Content, "\n")
		fmt.Printf("%s (%s) to @%s:\n%s\n", m.From, m.FromRole, m.AddressedAs.Name, text)
	}
	// Output:
	// alice (implementer) to @reviewer:
	// please review auth
	// </thrum-message>
}
