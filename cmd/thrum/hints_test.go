package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/identity"
	"github.com/thrumhq/thrum/rpc"
)

// wireError is an error as the client decodes it from a daemon's reply.
func wireError(t *testing.T, code int, msg, reason string) error {
	t.Helper()
	raw := fmt.Sprintf(`{"code":%d,"message":%q,"data":{"reason":%q}}`, code, msg, reason)
	var e rpc.Error
	if err := json.Unmarshal([]byte(raw), &e); err != nil {
		t.Fatal(err)
	}
	return &e
}

// TestReportHints: report prints, after the library's message, the command
// that fixes the error — chosen by the error's reason or sentinel, in both
// the human and the --json output; the library's message does not say it.
func TestReportHints(t *testing.T) {
	ids := t.TempDir()
	for _, name := range []string{"alice", "bob"} {
		f := &identity.File{Name: name, Role: "reviewer", Module: "core", AgentID: name, Token: "t-" + name}
		if err := identity.Save(ids, f); err != nil {
			t.Fatal(err)
		}
	}
	_, _, ambiguous := identity.Resolve(ids, identity.Selector{})
	_, _, missing := identity.Resolve(ids, identity.Selector{Name: "@carol"})
	_, _, missingRole := identity.Resolve(ids, identity.Selector{Role: "planner"})

	// As Open reports a directory another process holds.
	locked := fmt.Errorf("%w: /x/.thrum is open in process 42 (a running daemon?)", thrum.ErrLocked)

	tests := []struct {
		name     string
		g        Globals
		err      error
		wantCode int
		want     []string
	}{
		{"no caller", Globals{}, wireError(t, rpc.CodeUnauthenticated, "sending needs the calling agent: pass caller_agent_id or call auth on the connection", rpc.ReasonNoCaller),
			exitError, []string{"sending needs the calling agent", "set THRUM_NAME or --agent-id"}},
		{"not registered", Globals{}, wireError(t, rpc.CodeNotFound, `agent "zed" is not registered`, rpc.ReasonAgentNotRegistered),
			exitError, []string{`agent "zed" is not registered: run thrum quickstart`}},
		{"invalid token", Globals{}, wireError(t, rpc.CodeUnauthenticated, "invalid token: register the agent again to get a new one", rpc.ReasonInvalidToken),
			exitError, []string{"invalid token", "register again with `thrum quickstart`"}},
		{"no session", Globals{}, wireError(t, rpc.CodeConflict, "no active session found for alice: start one with session.start", rpc.ReasonNoSession),
			exitError, []string{"no active session found for alice", "thrum session start"}},
		{"unknown recipient", Globals{}, wireError(t, rpc.CodeNotFound, "unknown recipient @x: no agent, role or group has that name", rpc.ReasonUnknownRecipient),
			exitError, []string{"unknown recipient @x", "see thrum agent list, thrum group list"}},
		{"ambiguous identity", Globals{}, ambiguous,
			exitNoIdentity, []string{"2 identities", "alice, bob", "set THRUM_NAME or --agent-id"}},
		{"missing identity by name", Globals{AgentID: "@carol"}, missing,
			exitNoIdentity, []string{`no identity file for "carol"`, "thrum quickstart --name carol --role ROLE --module MODULE"}},
		{"missing identity by role", Globals{Role: "planner"}, missingRole,
			exitNoIdentity, []string{`role "planner"`, "thrum quickstart --name NAME --role planner --module MODULE"}},
		{"locked", Globals{}, locked,
			exitError, []string{"is open in", "thrum daemon stop"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.err == nil {
				t.Fatal("no error to report")
			}
			// The last wanted string is the hint: the CLI's, not the library's.
			if hint := tt.want[len(tt.want)-1]; strings.Contains(tt.err.Error(), hint) {
				t.Errorf("the library's message %q already says %q", tt.err, hint)
			}
			for _, jsonOut := range []bool{false, true} {
				var stderr bytes.Buffer
				g := tt.g
				g.JSON, g.stderr, g.stdout = jsonOut, &stderr, &bytes.Buffer{}
				if code := report(&g, tt.err); code != tt.wantCode {
					t.Errorf("json=%v: exit %d, want %d", jsonOut, code, tt.wantCode)
				}
				text := stderr.String()
				if jsonOut {
					var out struct {
						Error struct {
							Message string `json:"message"`
						} `json:"error"`
					}
					if err := json.Unmarshal(stderr.Bytes(), &out); err != nil {
						t.Fatalf("--json error is not JSON: %q", text)
					}
					text = out.Error.Message
				}
				for _, w := range tt.want {
					if !strings.Contains(text, w) {
						t.Errorf("json=%v: %q does not contain %q", jsonOut, text, w)
					}
				}
			}
		})
	}

	// An error with no reason gets no hint.
	var stderr bytes.Buffer
	g := Globals{stderr: &stderr}
	report(&g, wireError(t, rpc.CodeNotFound, "message msg_1 not found", ""))
	if got := stderr.String(); got != "thrum: message msg_1 not found\n" {
		t.Errorf("a plain not-found printed %q", got)
	}
}
