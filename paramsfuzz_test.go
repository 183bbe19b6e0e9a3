package thrum_test

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/internal/gitwork"
	"github.com/thrumhq/thrum/internal/thrumtest"
	"github.com/thrumhq/thrum/rpc"
)

// fuzzMethods are the methods whose params FuzzMethodParams decodes.
var fuzzMethods = []string{
	rpc.MethodHealth, rpc.MethodAuth, rpc.MethodAgentRegister, rpc.MethodAgentList, rpc.MethodAgentWhoami,
	rpc.MethodAgentListContext, rpc.MethodAgentDelete, rpc.MethodAgentCleanup, rpc.MethodSessionStart,
	rpc.MethodSessionEnd, rpc.MethodSessionHeartbeat, rpc.MethodSessionSetIntent, rpc.MethodSessionSetTask,
	rpc.MethodSessionList, rpc.MethodMessageSend, rpc.MethodMessageGet, rpc.MethodMessageList,
	rpc.MethodMessageEdit, rpc.MethodMessageDelete, rpc.MethodMessageMarkRead, rpc.MethodThreadCreate,
	rpc.MethodThreadList, rpc.MethodThreadGet, rpc.MethodSubscribe, rpc.MethodUnsubscribe,
	rpc.MethodSubscriptionsList, rpc.MethodUserRegister, rpc.MethodUserIdentify, rpc.MethodGroupCreate,
	rpc.MethodGroupDelete, rpc.MethodGroupMemberAdd, rpc.MethodGroupMemberRemove, rpc.MethodGroupList,
	rpc.MethodGroupInfo, rpc.MethodGroupMembers, rpc.MethodWebLogin, rpc.MethodMessageClaimNext, rpc.MethodMessageSearch,
	rpc.MethodMessageAck, rpc.MethodMessageListSent,
}

// surrogateEscape matches a \u escape of a UTF-16 surrogate, which the
// server refuses (when not itself escaped; close enough for the fuzzer).
var surrogateEscape = regexp.MustCompile(`\\u[dD][89a-fA-F]`)

// FuzzMethodParams sends fuzzed params to every method, as the owner over
// an in-process connection. Whatever the params, the answer is a result or
// an error with a code the client can act on: never a panic, never -32603
// (which would be a fault of ours), and a field of the wrong type — the
// caller's identity included — is -32602.
func FuzzMethodParams(f *testing.F) {
	for i := range fuzzMethods {
		for _, p := range []string{`{}`, `null`, `[]`, `{"caller_agent_id":1}`, `{"caller_agent_id":"alice"}`,
			`{"caller_agent_id":"alice","content":"hi","mentions":["bob"]}`, `{"name":7}`, `{"page_size":"x"}`,
			`{"session_id":{"a":1}}`, `{"scope":{"type":"module","value":"x"},"caller_agent_id":"bob"}`,
			`{"message_ids":[1,2]}`, `{"login_code":"x"}`, `{"web_session":7}`, `{"query":"a (b OR \"c","page_size":-1}`, `{"query":7}`, `{"refs":[{"type":"worktree","value":"/"}],"caller_agent_id":"alice"}`,
			`{"caller_agent_id":"alice","content":"hi","mentions":["bob"],"ack_within":"-3h"}`, `{"caller_agent_id":"bob","message_id":"msg_x","note":7}`,
			`{"caller_agent_id":"alice","unacked":true,"overdue":"yes"}`, `{"caller_agent_id":"bob","receipts":"sent"}`, `{"message_ids":["m"],"via":"carrier pigeon"}`} {
			f.Add(uint8(i), []byte(p))
		}
	}
	n := thrumtest.OpenNode(f, &thrum.Options{GitRepo: gitwork.New(f.TempDir())})
	thrumtest.Register(f, n, "alice", "implementer", "auth")
	thrumtest.Register(f, n, "bob", "reviewer", "auth")
	ctx := context.Background()
	c := n.Dial(nil)
	defer c.Close()

	f.Fuzz(func(t *testing.T, m uint8, params []byte) {
		if !json.Valid(params) {
			return // the frame's own parse error is FuzzServeLine's
		}
		method := fuzzMethods[int(m)%len(fuzzMethods)]
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		var out json.RawMessage
		err := c.Call(cctx, method, json.RawMessage(params), &out)
		if err == nil {
			return
		}
		var e *rpc.Error
		if !errors.As(err, &e) {
			t.Fatalf("%s %s: not an RPC error: %v", method, params, err)
		}
		if e.Code == rpc.CodeParseError && (!utf8.Valid(params) || surrogateEscape.Match(params)) {
			return // refused whole, as it must be (and answered: the call did not hang)
		}
		if e.Code == rpc.CodeInternal || e.Code == rpc.CodeParseError || e.Code == rpc.CodeInvalidRequest && params[0] == '{' {
			t.Fatalf("%s %s: %d %s", method, params, e.Code, e.Message)
		}
		var probe struct {
			Caller any `json:"caller_agent_id"`
		}
		if json.Unmarshal(params, &probe) == nil {
			if _, isString := probe.Caller.(string); probe.Caller != nil && !isString && e.Code != rpc.CodeInvalidParams {
				t.Fatalf("%s %s: a caller_agent_id that is not a string got %d %s, want -32602", method, params, e.Code, e.Message)
			}
		}
	})
}
