package mcpserver_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/thrumhq/thrum/mcpserver"
)

// With Options.Wake, the server rings once per batch of new mail with the
// doorbell's line, claiming nothing; an error of Wake ends the waking and
// the tools go on.
func TestWakeRingsPerBatchAndStopsOnError(t *testing.T) {
	t.Parallel() // it waits more than it works
	n := newNode(t, nil)
	addAgent(t, n, "alice", "implementer", "auth")
	bob := addAgent(t, n, "bob", "reviewer", "auth")
	rings := make(chan string, 8)
	fail := make(chan bool, 8)
	a := connect(t, n, bob, &mcpserver.Options{Wake: func(_ context.Context, text string) error {
		rings <- text
		if <-fail {
			return errors.New("no such file")
		}
		return nil
	}})
	var last string
	for i := range 2 {
		last = send(t, n, "alice", "@bob", fmt.Sprintf("body %d", i), "normal")
	}
	fail <- false
	select {
	case text := <-rings:
		if want := fmt.Sprintf("thrum: 2 new messages (newest %s from alice); call check_messages", last); text != want {
			t.Errorf("ring = %q, want %q", text, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no ring for new mail")
	}
	if u := unread(t, n, "bob"); len(u) != 2 {
		t.Errorf("after the ring %d unread, want 2: a ring claims nothing", len(u))
	}
	fail <- true
	send(t, n, "alice", "@bob", "one more", "normal")
	<-rings
	fail <- false
	send(t, n, "alice", "@bob", "after the failure", "normal")
	select {
	case text := <-rings:
		t.Errorf("rang after a failed ring: %q", text)
	case <-time.After(3 * time.Second):
	}
	if out := call[mcpserver.CheckMessagesOutput](t, a, "check_messages", args{}); len(out.Messages) != 4 {
		t.Errorf("check_messages after the waking stopped = %d messages, want 4", len(out.Messages))
	}
}

// A wrong bearer token is answered only after AuthFailureDelay, however
// fast the guesser; the right one at once. An agent with no identity
// (Refuse) takes no token.
func TestHTTPWrongTokenWaits(t *testing.T) {
	n := newNode(t, nil)
	bob := addAgent(t, n, "bob", "reviewer", "auth")
	const delay = 300 * time.Millisecond
	_, hs := httpAgent(t, n, bob, &mcpserver.Options{AuthFailureDelay: delay})
	post := func(token string) (int, time.Duration) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, hs.URL, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer "+token)
		start := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, time.Since(start)
	}
	if code, took := post("guess"); code != http.StatusUnauthorized || took < delay {
		t.Errorf("a wrong token: %d after %v, want 401 after at least %v", code, took, delay)
	}
	if code, _ := post(bob.Token); code == http.StatusUnauthorized {
		t.Errorf("the right token: %d", code)
	}
	srv, err := mcpserver.New(context.Background(), nil, mcpserver.Identity{}, &mcpserver.Options{Refuse: func() error { return errors.New("no agent") }})
	if err != nil {
		t.Fatal(err)
	}
	refusing := httptest.NewServer(srv.HTTPHandler())
	defer refusing.Close()
	hs = refusing
	if code, _ := post(""); code != http.StatusUnauthorized {
		t.Errorf("a server with no agent over HTTP: %d, want 401", code)
	}
}
