// Package rpc is thrum's API contract: the JSON-RPC 2.0 methods a thrum
// daemon serves (Method constants), the params and result of each (the
// XParams and XResult types, which are also the Go signatures of the
// node's operations), the notification it pushes (MessageNotification),
// its error codes and the one error type, Error, that keeps its code
// across the wire; and a typed Client for a daemon's Unix socket, its
// WebSocket or an in-process pipe.
//
// The server side is thrum.RPCServer; the JSON-RPC engine under both
// sides is internal to the module. Times on the wire are RFC 3339 strings
// in UTC with a nine-digit fraction ("2026-11-24T03:25:09.000000000Z"), so
// they sort as strings; an empty string means never or not set.
//
// Every method takes a params object, even one with no fields yet
// (HealthParams, WhoamiParams, ...): so every operation has the one shape
// func(ctx, *Params) (*Result, error), and a parameter can be added later
// without changing a signature.
package rpc
