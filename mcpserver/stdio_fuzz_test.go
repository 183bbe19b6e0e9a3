package mcpserver

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"testing"
)

type nopReadCloser struct{ io.Reader }

func (nopReadCloser) Close() error { return nil }

// FuzzStdioScreen feeds arbitrary bytes to the stdio screen: it never
// panics, passes on only lines that are JSON, and answers every other
// non-blank line with one JSON-RPC error object.
func FuzzStdioScreen(f *testing.F) {
	for _, seed := range []string{
		"{not json\n",
		`{"jsonrpc":"2.0","id":1,"method":"ping"}` + "\n",
		`{"jsonrpc":"2.0","id":7}` + "\n",
		`[{"jsonrpc":"2.0","method":"x"},{"bad":1}]` + "\n[]\n[1,2\n",
		"\n\n  \r\n" + `{"jsonrpc":"1.0","id":"a","method":"m"}`,
		`{"jsonrpc":"2.0","id":{"x":1},"result":{}}` + "\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var out bytes.Buffer
		s := &screen{src: nopReadCloser{bytes.NewReader(in)}, in: bufio.NewReaderSize(bytes.NewReader(in), 64), out: &out}
		passed, err := io.ReadAll(s)
		if err != nil && !errors.Is(err, io.EOF) {
			t.Fatalf("read: %v", err)
		}
		for _, line := range bytes.Split(passed, []byte("\n")) {
			if len(line) > 0 && !json.Valid(line) {
				t.Fatalf("passed a line that is not JSON: %q", line)
			}
		}
		for _, line := range bytes.Split(out.Bytes(), []byte("\n")) {
			if len(line) == 0 {
				continue
			}
			var e struct {
				JSONRPC string          `json:"jsonrpc"`
				ID      json.RawMessage `json:"id"`
				Error   struct {
					Code int `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal(line, &e); err != nil || e.JSONRPC != "2.0" || (e.Error.Code != -32700 && e.Error.Code != -32600) || len(e.ID) == 0 {
				t.Fatalf("answer %q is not a JSON-RPC parse or request error", line)
			}
		}
	})
}
