package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/thrumhq/thrum/mcpserver"
)

// TestMCPServeDelivery drives the MCP server's delivery through the built binary, over
// stdio (mcp.CommandTransport) and Streamable HTTP (--http): two `thrum
// mcp serve` processes of one agent never return the same message; a
// malformed stdin line is answered and the server goes on; SIGTERM
// answers a pending wait and exits within a second; the HTTP transport
// wants the agent's token and refuses foreign Origins. The rest is
// tested through the same server code in mcpserver/sdkclient_test.go.
func TestMCPServeDelivery(t *testing.T) {
	e := newMCPPair(t)
	alice := e.serve("alice")

	// Two servers of bob, each checking and waiting at once.
	bob1, bob2 := e.serve("bob"), e.serve("bob")
	const total = 20
	got := map[string]int{}
	var mu sync.Mutex
	note := func(ids ...string) {
		mu.Lock()
		for _, id := range ids {
			got[id]++
		}
		mu.Unlock()
	}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, c := range got {
			n += c
		}
		return n
	}
	done := make(chan struct{})
	var consumers sync.WaitGroup
	for _, cs := range []*mcp.ClientSession{bob1, bob1, bob2, bob2} {
		consumers.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				if i%2 == 0 {
					if r := <-mcpE2EWait(cs, map[string]any{"timeout": 1}); r.err == nil && !r.res.IsError {
						if out := mcpE2EDecode[mcpserver.WaitForMessageOutput](t, "wait_for_message", r.res); out.Message != nil {
							note(out.Message.MessageID)
						}
					}
					continue
				}
				res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "check_messages", Arguments: map[string]any{"limit": 3}})
				if err == nil && !res.IsError {
					for _, m := range mcpE2EDecode[mcpserver.CheckMessagesOutput](t, "check_messages", res).Messages {
						note(m.MessageID)
					}
				}
			}
		})
	}
	var sent []string
	for i := range total {
		s := mcpE2ECall[mcpserver.SendMessageOutput](t, alice, "send_message", map[string]any{"to": "@reviewer", "content": fmt.Sprint("m", i)})
		sent = append(sent, s.MessageID)
	}
	for deadline := time.Now().Add(20 * time.Second); count() < total && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	close(done)
	consumers.Wait()
	for _, id := range sent {
		if got[id] != 1 {
			t.Errorf("message %s returned %d times across bob's two servers, want once", id, got[id])
		}
	}
	bob1.Close()
	bob2.Close()

	// A malformed line gets -32700 and the server stays up.
	cmd := exec.Command(e.bin, "mcp", "serve")
	cmd.Dir, cmd.Env = e.repo, e.env("bob")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stdout)
	ask := func(line string) string {
		t.Helper()
		io.WriteString(stdin, line+"\n")
		if !lines.Scan() {
			t.Fatalf("no answer to %q", line)
		}
		return lines.Text()
	}
	if a := ask("{not json"); !strings.Contains(a, `"code":-32700`) || !strings.Contains(a, `"id":null`) {
		t.Errorf("answer to {not json = %s", a)
	}
	if a := ask(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`); !strings.Contains(a, `"result"`) {
		t.Errorf("initialize after a bad line = %s", a)
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Errorf("mcp serve after a malformed line and EOF: %v", err)
	}

	// SIGTERM answers the pending wait and exits within a second.
	cmd = exec.Command(e.bin, "mcp", "serve")
	cmd.Dir, cmd.Env = e.repo, e.env("bob")
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil).Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	waiting := mcpE2EWait(cs, map[string]any{"timeout": 600})
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	cmd.Process.Signal(syscall.SIGTERM)
	r := <-waiting
	if r.err != nil {
		t.Errorf("pending wait at SIGTERM: %v", r.err)
	} else if out := mcpE2EDecode[mcpserver.WaitForMessageOutput](t, "wait_for_message", r.res); out.Status != "shutdown" {
		t.Errorf("pending wait at SIGTERM = %+v, want status shutdown", out)
	}
	exited := make(chan error, 1)
	go func() { exited <- cs.Wait() }() // the process closed its stdout: it exited
	select {
	case <-exited:
		t.Logf("stdio: SIGTERM answered the wait and exited in %v", time.Since(start).Round(time.Millisecond))
	case <-time.After(time.Second):
		t.Errorf("mcp serve still running a second after SIGTERM")
	}
	cs.Close()

	// --http wants the token, refuses a foreign Origin; SIGTERM
	// ends it within a second, answering the pending wait.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cmd = exec.Command(e.bin, "mcp", "serve", "--http", addr)
	cmd.Dir, cmd.Env, cmd.Stderr = e.repo, e.env("bob"), os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	var ident struct {
		Token string `json:"token"`
	}
	b, err := os.ReadFile(filepath.Join(e.repo, ".thrum", "identities", "bob.json"))
	if err != nil || json.Unmarshal(b, &ident) != nil || ident.Token == "" {
		t.Fatalf("bob's token: %v %s", err, b)
	}
	url := "http://" + addr + "/"
	status := func(hdr map[string]string) int {
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for deadline := time.Now().Add(10 * time.Second); status(nil) == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("mcp serve --http never listened")
		}
	}
	if s := status(nil); s != http.StatusUnauthorized {
		t.Errorf("no token: %d, want 401", s)
	}
	if s := status(map[string]string{"Authorization": "Bearer " + ident.Token, "Origin": "http://evil.example"}); s != http.StatusForbidden {
		t.Errorf("foreign Origin: %d, want 403", s)
	}
	hc := &http.Client{Transport: bearerRT{ident.Token}}
	hs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e-http", Version: "1"}, nil).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatalf("connect over HTTP with the token: %v", err)
	}
	waiting = mcpE2EWait(hs, map[string]any{"timeout": 30})
	s := mcpE2ECall[mcpserver.SendMessageOutput](t, alice, "send_message", map[string]any{"to": "bob", "content": "over http"})
	if m := mcpE2EReceived(t, <-waiting); m.MessageID != s.MessageID || m.AddressedAs == nil || m.AddressedAs.Kind != "agent" {
		t.Errorf("wait over HTTP returned %+v", m)
	}
	waiting = mcpE2EWait(hs, map[string]any{"timeout": 600})
	time.Sleep(200 * time.Millisecond)
	start = time.Now()
	cmd.Process.Signal(syscall.SIGTERM)
	if r := <-waiting; r.err != nil || mcpE2EDecode[mcpserver.WaitForMessageOutput](t, "wait_for_message", r.res).Status != "shutdown" {
		t.Errorf("pending HTTP wait at SIGTERM: %v", r.err)
	}
	exited = make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case <-exited:
		t.Logf("http: SIGTERM answered the wait and exited in %v", time.Since(start).Round(time.Millisecond))
	case <-time.After(time.Second):
		t.Errorf("mcp serve --http still running a second after SIGTERM")
	}
	hs.Close()
}

type bearerRT struct{ token string }

func (b bearerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}
