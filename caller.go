package thrum

import "context"

// Caller is who an operation acts for. AgentID names an agent or a user
// ("user:NAME"); SessionID, if set, pins the session (otherwise the
// agent's most recent active session is used).
type Caller struct {
	AgentID   string
	SessionID string
	// Source says how the identity was established, as agent.whoami
	// reports it: "environment", "flags" or "identity_file".
	Source string
}

type callerKey struct{}

// WithCaller returns a context whose operations act as c.
func WithCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// AsAgent is WithCaller for the common case of an agent ID alone.
func AsAgent(ctx context.Context, agentID string) context.Context {
	return WithCaller(ctx, Caller{AgentID: agentID})
}

// CallerFrom returns the caller set by WithCaller.
func CallerFrom(ctx context.Context) (Caller, bool) {
	c, ok := ctx.Value(callerKey{}).(Caller)
	return c, ok && c.AgentID != ""
}
