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
// Open is a convenience over New, which takes the node's parts: an
// eventlog.Log whose commits go to a Projector, and the Projector over a
// store.Store and any Projection an embedder adds.
//
// Every operation takes a params pointer and returns a result pointer:
// the same types (package rpc) are the JSON-RPC params and results of the
// daemon and the inputs and outputs of the MCP tools. Operations that act
// as "the current agent" read the caller from ctx (WithCaller, AsAgent).
//
// # Packages
//
//   - eventlog: the append-only JSONL log, the source of truth;
//     eventlog/gitsync carries it between clones through git.
//   - store: the SQLite projection that answers queries.
//   - rpc: the API contract (methods, params and results, error codes)
//     and a client; RPCServer serves it.
//   - identity: agent names, IDs and identity files.
//   - mcpserver: the MCP tools for agents.
//
// # Guarantees
//
// Durability: an operation returns only after its events are fsynced to
// the log and applied to the projection; concurrent writers share one
// fsync (group commit). Read-your-writes: a query after a write sees it.
// Order: the projection applies events in log order, and replaying the log
// (Rebuild, or the catch-up in Open) gives the same projection. A torn
// final line of the log is moved aside to a .corrupt file at Open; a
// corrupt line in the middle stops Open with its file and line.
//
// Notifications never block writers: a Subscription has a bounded queue and is
// closed when it falls behind; it then catches up with ListMessages.
//
// Errors are *rpc.Error values whose codes are JSON-RPC codes; match them
// with errors.Is against ErrNotFound, ErrInvalidParams and the others.
package thrum
