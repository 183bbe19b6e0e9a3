package main

import (
	"errors"
	"fmt"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/identity"
	"github.com/thrumhq/thrum/rpc"
)

// The library's errors speak to a Go caller: what was wrong, in the
// library's terms. What a person at a shell should run next is the CLI's
// to say, so report appends a hint chosen by the error's code, its reason
// (rpc.Reason, for codes too coarse alone) or a sentinel — never by
// parsing the message.

// hintFor returns the command or setting that fixes err, or "".
func hintFor(g *Globals, err error) string {
	switch {
	case errors.Is(err, identity.ErrAmbiguous):
		return "set THRUM_NAME or --agent-id to choose one"
	case errors.Is(err, identity.ErrNoIdentity):
		name, role := "NAME", "ROLE"
		if g.AgentID != "" {
			name = identity.NormalizeAgentID(g.AgentID)
		}
		if g.Role != "" {
			role = g.Role
		}
		return fmt.Sprintf("run `thrum quickstart --name %s --role %s --module MODULE`", name, role)
	case errors.Is(err, thrum.ErrLocked):
		return "stop the daemon with `thrum daemon stop`"
	}
	switch rpc.Reason(err) {
	case rpc.ReasonNoCaller:
		return "set THRUM_NAME or --agent-id, or run `thrum quickstart`"
	case rpc.ReasonAgentNotRegistered:
		return "run thrum quickstart"
	case rpc.ReasonInvalidToken:
		return "register again with `thrum quickstart` to get a new token"
	case rpc.ReasonNoSession:
		return "start one with `thrum session start`"
	case rpc.ReasonUnknownRecipient:
		return "see thrum agent list, thrum group list"
	}
	return ""
}

// withHint is msg followed by err's hint, if it has one.
func withHint(g *Globals, err error, msg string) string {
	if h := hintFor(g, err); h != "" {
		return msg + ": " + h
	}
	return msg
}
