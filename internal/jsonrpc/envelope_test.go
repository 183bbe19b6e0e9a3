package jsonrpc

import (
	"bytes"
	"encoding/json"
	"testing"
)

// stdEnvelope is how the client decoded every message before splitEnvelope:
// what splitEnvelope must agree with whenever it answers.
func stdEnvelope(msg []byte) (e envelope, method string, err error) {
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method *string         `json:"method"`
		Params json.RawMessage `json:"params"`
		Result json.RawMessage `json:"result"`
		Error  json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(msg, &m); err != nil {
		return e, "", err
	}
	e = envelope{id: m.ID, params: m.Params, result: m.Result, err: m.Error}
	if m.Method != nil {
		method = *m.Method
		e.method = []byte{} // present
	}
	return e, method, nil
}

func checkEnvelope(t *testing.T, msg []byte) (handled bool) {
	t.Helper()
	got, ok := splitEnvelope(msg)
	if !ok {
		return false
	}
	want, method, err := stdEnvelope(msg)
	if err != nil {
		t.Fatalf("splitEnvelope took %q, which encoding/json refuses: %v", msg, err)
	}
	same := func(name string, a, b []byte) {
		if (a == nil) != (b == nil) || !bytes.Equal(a, b) {
			t.Fatalf("%q: %s is %q, encoding/json says %q", msg, name, a, b)
		}
	}
	same("id", got.id, want.id)
	same("params", got.params, want.params)
	same("result", got.result, want.result)
	same("error", got.err, want.err)
	if (got.method == nil) != (want.method == nil) {
		t.Fatalf("%q: method present %v, encoding/json says %v", msg, got.method != nil, want.method != nil)
	}
	if got.method != nil && string(got.method[1:len(got.method)-1]) != method {
		t.Fatalf("%q: method %s, encoding/json says %q", msg, got.method, method)
	}
	return true
}

// TestSplitEnvelope: the client's fast split of a message agrees with a
// full decode on what it handles, and hands the rest to encoding/json.
func TestSplitEnvelope(t *testing.T) {
	handled := []string{
		`{"jsonrpc":"2.0","method":"notification.message","params":{"a":[1,"}\"]",{"b":null}],"c":"\\u00e9"}}`,
		`{"jsonrpc":"2.0","id":7,"result":{"ok":true}}`,
		`{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error"}}`,
		` { "id" : 1 , "result" : [ ] } `[1:],
		`{}`,
		`{"jsonrpc":"2.0","id":3,"result":"a \"quoted\" } value"}`,
		`{"jsonrpc":"2.0","id":-1.5e3,"result":false}`,
	}
	for _, m := range handled {
		if !checkEnvelope(t, []byte(m)) {
			t.Errorf("%s: not handled, want the fast path", m)
		}
	}
	fallback := []string{
		`{"Method":"x","params":1}`,          // encoding/json matches keys case-insensitively
		`{"id":1,"id":2}`,                    // duplicates: encoding/json keeps the last
		`{"method":"a\u0062","params":1}`,    // an escaped method
		`{"method":null,"id":1}`,             // not a string
		`{"me\u0074hod":"x"}`,                // an escaped key
		`{"jsonrpc":"2.0","extra":1,"id":1}`, // unknown key
		`[{"id":1}]`, `{"id":1`, `nul`, ``,
		"{\"method\":\"\xff\",\"params\":1}", // not UTF-8: encoding/json replaces it
	}
	for _, m := range fallback {
		if checkEnvelope(t, []byte(m)) {
			t.Errorf("%s: took the fast path, want encoding/json", m)
		}
	}
}

func FuzzSplitEnvelope(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","method":"m","params":{"x":[1,2,{"y":"\"}"}]}}`,
		`{"jsonrpc":"2.0","id":1,"result":null}`,
		`{"id":"a","error":{"code":1,"message":"m","data":[true]}}`,
		`{ "id" : 1 , "result" : { } }`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		checkEnvelope(t, msg)
	})
}
