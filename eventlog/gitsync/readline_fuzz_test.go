package gitsync

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"io"
	"testing"

	"github.com/thrumhq/thrum/eventlog"
)

// FuzzReadLine feeds readLine what a remote file may hold: it returns
// every whole line, each at most one byte past the longest event, counts
// their bytes, hashes every byte, and stops at the end.
func FuzzReadLine(f *testing.F) {
	f.Add([]byte("{\"event_id\":\"01J\"}\n\nx"), 16)
	f.Add(bytes.Repeat([]byte("a"), 5000), 16)
	f.Add([]byte("\n\n\n"), 17)
	f.Fuzz(func(t *testing.T, b []byte, bufSize int) {
		br := bufio.NewReaderSize(bytes.NewReader(b), 16+bufSize%4096)
		h := sha256.New()
		var whole int64
		for {
			line, n, err := readLine(br, h)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(line) > eventlog.MaxLineBytes+1 || int64(len(line)) > n || line[len(line)-1] != '\n' && len(line) <= eventlog.MaxLineBytes {
				t.Fatalf("line of %d bytes (n %d) from %d bytes", len(line), n, len(b))
			}
			whole += n
		}
		if want := int64(bytes.LastIndexByte(b, '\n') + 1); whole != want {
			t.Fatalf("whole lines hold %d bytes, want %d", whole, want)
		}
		if got, want := h.Sum(nil), sha256.Sum256(b); !bytes.Equal(got, want[:]) {
			t.Fatal("not every byte was hashed")
		}
	})
}
