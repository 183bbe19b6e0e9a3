package rpc_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/thrumhq/thrum/rpc"
)

// TestCodesAreTheContract pins every error code to its value in
// the RPC contract: the standard codes come from the engine,
// so a change there must not move the contract silently.
func TestCodesAreTheContract(t *testing.T) {
	for _, c := range []struct {
		name     string
		code     int
		want     int
		sentinel *rpc.Error
	}{
		{"parse error", rpc.CodeParseError, -32700, rpc.ErrParse},
		{"invalid request", rpc.CodeInvalidRequest, -32600, rpc.ErrInvalidRequest},
		{"method not found", rpc.CodeMethodNotFound, -32601, rpc.ErrMethodNotFound},
		{"invalid params", rpc.CodeInvalidParams, -32602, rpc.ErrInvalidParams},
		{"internal", rpc.CodeInternal, -32603, rpc.ErrInternal},
		{"server error", rpc.CodeServerError, -32000, nil},
		{"transport", rpc.CodeTransport, -32001, rpc.ErrWrongTransport},
		{"unauthenticated", rpc.CodeUnauthenticated, -32002, rpc.ErrUnauthenticated},
		{"forbidden", rpc.CodeForbidden, -32003, rpc.ErrForbidden},
		{"not found", rpc.CodeNotFound, -32004, rpc.ErrNotFound},
		{"conflict", rpc.CodeConflict, -32005, rpc.ErrConflict},
		{"limit exceeded", rpc.CodeLimitExceeded, -32006, rpc.ErrLimitExceeded},
		{"unavailable", rpc.CodeUnavailable, -32007, rpc.ErrUnavailable},
		{"storage full", rpc.CodeStorageFull, -32008, rpc.ErrStorageFull},
		{"idempotency key reused", rpc.CodeIdempotencyKey, -32009, rpc.ErrIdempotencyKey},
	} {
		if c.code != c.want {
			t.Errorf("%s: code %d, the contract says %d", c.name, c.code, c.want)
		}
		if c.sentinel == nil {
			continue
		}
		if c.sentinel.Code != c.code {
			t.Errorf("%s: sentinel has code %d, want %d", c.name, c.sentinel.Code, c.code)
		}
		// An error of this code, decoded from the wire and wrapped, still
		// matches its sentinel and no other.
		b, err := json.Marshal(rpc.Errorf(c.code, "specific %s", c.name))
		if err != nil {
			t.Fatal(err)
		}
		var decoded rpc.Error
		if err := json.Unmarshal(b, &decoded); err != nil {
			t.Fatal(err)
		}
		wrapped := fmt.Errorf("op: %w", &decoded)
		if !errors.Is(wrapped, c.sentinel) || decoded.Error() != "specific "+c.name {
			t.Errorf("%s: %q (%s) does not match its sentinel", c.name, wrapped, b)
		}
		if other := rpc.ErrNotFound; c.code != rpc.CodeNotFound && errors.Is(wrapped, other) {
			t.Errorf("%s: matches ErrNotFound too", c.name)
		}
	}
}

// TestPairJSON: one Pair type serves scopes and refs with the JSON both
// had, {"type","value"}.
func TestPairJSON(t *testing.T) {
	p := rpc.SendMessageParams{Content: "x", Scopes: []rpc.Pair{{Type: "module", Value: "auth"}}, Refs: []rpc.Pair{{Type: rpc.RefReplyTo, Value: "msg_1"}}}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"content":"x","scopes":[{"type":"module","value":"auth"}],"refs":[{"type":"reply_to","value":"msg_1"}]}`
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
}
