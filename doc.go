// Package thrum is persistent messaging for AI coding agents, as a Go
// library.
//
// Agents register an identity, send messages to a name, a role, a group or
// everyone, read an inbox with read tracking, reply in threads, and are
// woken the moment a message arrives. A Node is all of it, in process:
//
//	n, err := thrum.Open(ctx, dir, nil) // an event log in dir, a SQLite projection beside it
//	if err != nil { ... }
//	defer n.Close()
//
//	n.RegisterAgent(ctx, &rpc.RegisterAgentParams{Name: "alice", Role: "implementer", Module: "auth"})
//	n.StartSession(ctx, &rpc.StartSessionParams{AgentID: "alice"})
//	alice := thrum.AsAgent(ctx, "alice")
//	n.SendMessage(alice, &rpc.SendMessageParams{Content: "auth is done", Mentions: []string{"@reviewer"}})
//
// Every operation takes a params pointer and returns a result pointer:
// the same types (package rpc) are the JSON-RPC params and results of the
// daemon. Operations that act as "the current agent" read the caller from
// ctx (WithCaller, AsAgent).
//
// # The four parts
//
// A node is built from parts an embedder can hold, replace or serve:
//
//   - EventLog, the append-only JSONL log (package eventlog): the source of
//     truth. Every change is an event; Append returns once it is fsynced.
//   - Projector, which applies each durable batch of the log, in order, to
//     the SQLite store (package store), to any Projection an embedder adds,
//     and to the node's in-memory read models and subscribers. New takes a
//     log and a projector; Open builds both with defaults (see ExampleNew).
//   - RPCServer, the node's API as JSON-RPC 2.0 over a Unix socket,
//     WebSockets (with push notifications) and in-process pipes, behind one
//     access policy (see ExampleRPCServer). It has the shape of
//     net/http's Server: Serve, ServeHTTP, Shutdown, Close.
//   - MCPServer, an agent's MCP tools (package mcpserver) on the node, in
//     process or through a daemon's socket (see ExampleNode_MCPServer).
//
// # Packages
//
//   - eventlog: the append-only JSONL log; eventlog/admit is the one way
//     another machine's lines enter it; eventlog/gitsync carries it
//     between clones through git.
//   - store: the SQLite projection that answers queries.
//   - rpc: the API contract (methods, params and results, error codes)
//     and a typed client.
//   - mcpserver: the MCP tools for agents.
//   - identity: agent names, IDs and identity files.
//
// # Guarantees
//
// Durability: an operation returns only after its events are fsynced to
// the log and applied to the projection; concurrent writers share one
// fsync (group commit). Read-your-writes: a query after a write sees it.
// Order: the projection applies events in log order, and replaying the log
// (Rebuild, or the catch-up in Open) gives the same projection. Faults
// never split the two: a batch that is durable but fails to apply is
// retried first, and writes are refused until it is applied. A torn final
// line of the log is moved aside to a .corrupt file at Open; a corrupt
// line in the middle stops Open with its file and line; Verify checks the
// whole log against the projection.
//
// Retries are safe: a send repeated with the same idempotency key returns
// the first result. Consumption is a claim: MarkRead reports which
// messages this call newly marked read, so two consumers of one agent
// never both take a message.
//
// Notifications never block writers: a Subscription has a bounded queue
// and is closed when it falls behind; it then catches up with
// ListMessages.
//
// Errors are *rpc.Error values whose codes are JSON-RPC codes; match them
// with errors.Is against ErrNotFound, ErrInvalidParams and the others.
// Their messages speak to a Go caller.
package thrum
