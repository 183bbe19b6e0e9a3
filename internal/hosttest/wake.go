package hosttest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// RingClaude writes text as a user turn to an interactive Claude Code
// session through its messaging socket (the session's children get
// CLAUDE_CODE_MESSAGING_SOCKET and CLAUDE_CODE_MESSAGING_TOKEN): an auth
// line, then a user line. It says nothing of whether the session took
// it: the model's next request does.
func RingClaude(socket, token, text string) error {
	c, err := net.DialTimeout("unix", socket, 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	enc := json.NewEncoder(c)
	if err := enc.Encode(map[string]any{"type": "auth", "token": token}); err != nil {
		return err
	}
	err = enc.Encode(map[string]any{"type": "user", "message": map[string]any{"role": "user", "content": text}})
	time.Sleep(200 * time.Millisecond) // let the session read before the close
	return err
}

// RingCodex queues text as the next user turn of a Codex thread with
// `codex queue --thread ID --message=TEXT`, run without a shell and with
// the message as one argument (so a text starting with "-" is not taken
// for a flag). It returns the command's output.
func (s *Scene) RingCodex(thread, text string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := s.Command(ctx, Codex.Path(s.T), "queue", "--thread", thread, "--message="+text).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("codex queue: %w: %s", err, out)
	}
	return string(out), nil
}

var opencodeHTTP = &http.Client{Timeout: 30 * time.Second}

// OpencodeServe starts `opencode serve` in the repository (headless: the
// TUI's server, with its plugins and MCP servers, and no screen) and
// returns its base URL once it answers, and stop, which ends it (SIGTERM)
// and waits; the test's end stops it too.
func (s *Scene) OpencodeServe() (url string, stop func()) {
	s.T.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		s.T.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var out bytes.Buffer
	c := s.Command(ctx, OpenCode.Path(s.T), "serve", "--port", strconv.Itoa(port))
	c.Stdout, c.Stderr = &out, &out
	c.WaitDelay = 5 * time.Second
	if err := c.Start(); err != nil {
		cancel()
		s.T.Fatal(err)
	}
	c.Cancel = func() error { return c.Process.Signal(syscall.SIGTERM) }
	stop = sync.OnceFunc(func() { cancel(); c.Wait() })
	s.T.Cleanup(stop)
	url = fmt.Sprintf("http://127.0.0.1:%d", port)
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if r, err := opencodeHTTP.Get(url + "/session"); err == nil {
			r.Body.Close()
			if r.StatusCode == http.StatusOK {
				return url, stop
			}
		}
	}
	s.T.Fatalf("opencode serve did not answer within 60 s:\n%s", out.String())
	return "", nil
}

// OpencodeSession creates a session through an opencode server's HTTP API
// (POST /session) and returns its ID; it prompts nothing.
func (s *Scene) OpencodeSession(url string) string {
	s.T.Helper()
	r, err := opencodeHTTP.Post(url+"/session", "application/json", strings.NewReader("{}"))
	if err != nil {
		s.T.Fatal(err)
	}
	defer r.Body.Close()
	var sess struct {
		ID string `json:"id"`
	}
	if err := json.NewDecoder(r.Body).Decode(&sess); err != nil || sess.ID == "" {
		s.T.Fatalf("POST /session: %s, %v", r.Status, err)
	}
	return sess.ID
}
