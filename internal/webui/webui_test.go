package webui_test

import (
	"io/fs"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/thrumhq/thrum/internal/webui"
	"github.com/thrumhq/thrum/store"
)

func get(t *testing.T, method, host, path string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(method, "http://"+host+path, nil)
	w := httptest.NewRecorder()
	webui.Handler().ServeHTTP(w, r)
	return w
}

// TestHandlerServesOnlyItsAssets: the page and its files, each with its
// type and the strict headers; nothing else, no other method, no
// non-loopback Host.
func TestHandlerServesOnlyItsAssets(t *testing.T) {
	for _, tc := range []struct {
		method, host, path string
		code               int
		typ                string
	}{
		{"GET", "127.0.0.1:8080", "/", 200, "text/html; charset=utf-8"},
		{"HEAD", "localhost:8080", "/", 200, "text/html; charset=utf-8"},
		{"GET", "[::1]:8080", "/assets/app.js", 200, "text/javascript; charset=utf-8"},
		{"GET", "127.0.0.1:8080", "/assets/markdown.js", 200, "text/javascript; charset=utf-8"},
		{"GET", "127.0.0.1:8080", "/assets/highlight.js", 200, "text/javascript; charset=utf-8"},
		{"GET", "127.0.0.1:8080", "/assets/app.css", 200, "text/css; charset=utf-8"},
		{"GET", "127.0.0.1:8080", "/assets/favicon.svg", 200, "image/svg+xml"},
		{"GET", "127.0.0.1:8080", "/assets/missing.js", 404, ""},
		{"GET", "127.0.0.1:8080", "/assets/../webui.go", 404, ""},
		{"GET", "127.0.0.1:8080", "/assets/", 404, ""},
		{"GET", "127.0.0.1:8080", "/assets/index.html", 404, ""},
		{"GET", "127.0.0.1:8080", "/secret", 404, ""},
		{"POST", "127.0.0.1:8080", "/", 405, ""},
		{"GET", "evil.example:8080", "/", 403, ""},
		{"GET", "127.0.0.1.evil.example", "/assets/app.js", 403, ""},
	} {
		w := get(t, tc.method, tc.host, tc.path)
		if w.Code != tc.code {
			t.Errorf("%s %s (Host %s) = %d, want %d", tc.method, tc.path, tc.host, w.Code, tc.code)
			continue
		}
		h := w.Header()
		if got := h.Get("Content-Security-Policy"); got != webui.CSP {
			t.Errorf("%s %s: CSP %q", tc.method, tc.path, got)
		}
		for k, v := range map[string]string{"X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer", "Cache-Control": "no-store"} {
			if h.Get(k) != v {
				t.Errorf("%s %s: %s = %q, want %q", tc.method, tc.path, k, h.Get(k), v)
			}
		}
		if tc.typ != "" && h.Get("Content-Type") != tc.typ {
			t.Errorf("%s %s: Content-Type %q, want %q", tc.method, tc.path, h.Get("Content-Type"), tc.typ)
		}
	}
	for _, d := range []string{"script-src 'self'", "default-src 'none'", "connect-src 'self'", "frame-ancestors 'none'"} {
		if !strings.Contains(webui.CSP, d) || strings.Contains(webui.CSP, "unsafe") {
			t.Errorf("CSP %q: want %q and nothing unsafe", webui.CSP, d)
		}
	}
}

// TestAssetsHaveNoInlineCodeOrHTMLSinks reads the embedded sources: no
// inline script or style or event handler in the page (the CSP would block
// them, breaking the page), nothing loaded from the network, and no
// JavaScript that parses a string as HTML or code.
func TestAssetsHaveNoInlineCodeOrHTMLSinks(t *testing.T) {
	dir := "assets"
	html, err := os.ReadFile(filepath.Join(dir, "index.html"))
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []*regexp.Regexp{
		regexp.MustCompile(`<script[^>]*>[^<]+</script>`),
		regexp.MustCompile(`<style`), regexp.MustCompile(`\sstyle=`), regexp.MustCompile(`\son[a-z]+=`),
		regexp.MustCompile(`(?:src|href)="(?:https?:)?//`),
	} {
		if m := bad.Find(html); m != nil {
			t.Errorf("index.html has %q", m)
		}
	}
	for _, tag := range regexp.MustCompile(`<script[^>]*>`).FindAll(html, -1) {
		if !strings.Contains(string(tag), ` src="/assets/`) {
			t.Errorf("index.html has a script that is not one of its files: %s", tag)
		}
	}
	sinks := regexp.MustCompile(`innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function|setTimeout\(['"]|import\(['"]https?:`)
	n := 0
	err = fs.WalkDir(os.DirFS(dir), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || !strings.HasSuffix(p, ".js") {
			return err
		}
		n++
		b, err := os.ReadFile(filepath.Join(dir, p))
		if err != nil {
			return err
		}
		if m := sinks.Find(b); m != nil {
			t.Errorf("%s uses %q", p, m)
		}
		return nil
	})
	if err != nil || n < 3 {
		t.Fatalf("walked %d scripts: %v", n, err)
	}
}

// TestSearchNoteKnowsTheRelevanceLimit: the page says past how many
// matches the daemon sorts newest first; that number is the store's.
func TestSearchNoteKnowsTheRelevanceLimit(t *testing.T) {
	js, err := os.ReadFile(filepath.Join("assets", "app.js"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`const RELEVANCE_LIMIT = (\d+);`).FindSubmatch(js)
	if m == nil {
		t.Fatal("app.js has no RELEVANCE_LIMIT")
	}
	if n, _ := strconv.Atoi(string(m[1])); n != store.RelevanceLimit {
		t.Fatalf("app.js says %d, store.RelevanceLimit is %d", n, store.RelevanceLimit)
	}
}
