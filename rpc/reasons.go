package rpc

import "errors"

// Reasons name, in an error's data ({"reason": "..."}), a condition finer
// than its code, so a client can react to it without parsing the message:
// cmd/thrum prints the command that fixes it. A reason is part of the
// contract; the message is prose and may change.
const (
	// ReasonNoCaller (CodeUnauthenticated): the call acts as an agent and
	// none was named: pass caller_agent_id or call auth on the connection.
	ReasonNoCaller = "no_caller"
	// ReasonInvalidToken (CodeUnauthenticated): the token belongs to no
	// agent; registering again issues a new one.
	ReasonInvalidToken = "invalid_token"
	// ReasonAgentNotRegistered (CodeNotFound): the calling agent has no
	// registration.
	ReasonAgentNotRegistered = "agent_not_registered"
	// ReasonNoSession (CodeConflict): the agent has no active session;
	// session.start begins one.
	ReasonNoSession = "no_session"
	// ReasonUnknownRecipient (CodeNotFound): an address names no agent,
	// role or group.
	ReasonUnknownRecipient = "unknown_recipient"
)

// ReasonErrorf is Errorf with reason in the error's data
// ({"reason": reason}).
func ReasonErrorf(code int, reason, format string, args ...any) *Error {
	e := Errorf(code, format, args...)
	e.Data = map[string]any{"reason": reason}
	return e
}

// Reason returns the reason in the data of the *Error in err's chain, or
// "" if there is none. It works on an error built locally and on one
// decoded from a reply alike.
func Reason(err error) string {
	var e *Error
	if !errors.As(err, &e) {
		return ""
	}
	if d, ok := e.Data.(map[string]any); ok {
		r, _ := d["reason"].(string)
		return r
	}
	return ""
}
