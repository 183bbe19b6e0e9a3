package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/thrumhq/thrum/internal/thrumtest"
	"github.com/thrumhq/thrum/rpc"
)

// TestWebCommand: thrum web needs a daemon; with one it prints a login URL
// whose page the daemon serves and whose code signs one WebSocket in as
// the owner, once. (The browser itself is driven in internal/webui.)
func TestWebCommand(t *testing.T) {
	t.Parallel()
	c := &thrumCLI{t: t, repo: thrumtest.GitRepo(t)}
	c.ok("", "init")
	c.fails(exitNoDaemon, "", []string{"web"}, "thrum daemon start")
	startDaemon(t, c)

	var out struct {
		URL       string `json:"url"`
		ExpiresAt string `json:"expires_at"`
	}
	c.okJSON(&out, "", "web")
	m := regexp.MustCompile(`^http://(127\.0\.0\.1:\d+)/#login=([A-Za-z0-9_-]{43})$`).FindStringSubmatch(out.URL)
	if m == nil || out.ExpiresAt == "" {
		t.Fatalf("web --json = %+v, want http://127.0.0.1:PORT/#login=CODE and an expiry", out)
	}
	if exp, err := time.Parse(time.RFC3339Nano, out.ExpiresAt); err != nil || time.Until(exp) > time.Minute || time.Until(exp) < 30*time.Second {
		t.Errorf("code expires at %s (%v): want about a minute from now", out.ExpiresAt, err)
	}
	r := c.ok("", "web")
	if !strings.HasPrefix(r.stdout, "http://"+m[1]+"/#login=") || strings.Contains(r.stdout, m[2]) {
		t.Errorf("web printed %q: want a new URL on the same port", r.stdout)
	}
	contains(t, "web hint", r.stderr, "once")

	resp, err := http.Get("http://" + m[1] + "/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(page), `src="/assets/app.js"`) || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "script-src 'self'") {
		t.Fatalf("GET / = %d, CSP %q:\n%s", resp.StatusCode, resp.Header.Get("Content-Security-Policy"), page)
	}

	ctx := context.Background()
	auth := func(code string) (*rpc.AuthResult, error) {
		ws, err := rpc.DialWebSocket(ctx, "ws://"+m[1]+"/ws", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer ws.Close()
		return ws.Auth(ctx, &rpc.AuthParams{LoginCode: code})
	}
	if res, err := auth(m[2]); err != nil || !res.Owner || res.WebSession == "" {
		t.Fatalf("auth with the printed code: %+v, %v", res, err)
	}
	var re *rpc.Error
	if _, err := auth(m[2]); !errors.As(err, &re) || re.Code != rpc.CodeUnauthenticated {
		t.Fatalf("the code again: %v, want -32002", err)
	}
}
