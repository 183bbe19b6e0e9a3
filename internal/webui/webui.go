// Package webui is thrum's web console: a small single-page app, embedded
// in the binary, that the daemon serves on its loopback HTTP port next to
// the WebSocket it talks JSON-RPC over. The page holds no secret until the
// owner signs it in with a one-time login code from `thrum web`
// (web.login); every read and write then goes over the WebSocket, with the
// same checks as any other client (DESIGN.md, "Web console").
//
// The assets are plain HTML, CSS and JavaScript modules: no build step, no
// network, no inline script (the Content-Security-Policy forbids it), and
// message bodies are rendered from Markdown into DOM nodes, never as HTML.
package webui

import (
	"embed"
	"io/fs"
	"net/http"
	"path"
	"strings"

	"github.com/thrumhq/thrum/internal/jsonrpc"
)

//go:embed assets
var assets embed.FS

// CSP is the Content-Security-Policy of every response: scripts, styles
// and images from this origin only (no inline script or style, no eval),
// the WebSocket back to this origin, no frames, forms or plugins.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

var types = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".svg":  "image/svg+xml",
}

// Handler serves the console: the page at "/" and its files under
// "/assets/". It answers only GET and HEAD, refuses a Host that is not
// loopback (a DNS-rebinding page) with 403, and sends every response with
// CSP and headers that keep it out of frames, caches and referrers.
func Handler() http.Handler {
	files, _ := fs.Sub(assets, "assets") // cannot fail: the directory is embedded
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", CSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		h.Set("Cache-Control", "no-store")
		if !jsonrpc.LoopbackHost(r.Host) {
			http.Error(w, "forbidden: not a loopback host", http.StatusForbidden)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		name := ""
		switch p := r.URL.Path; {
		case p == "/" || p == "/index.html":
			name = "index.html"
		case strings.HasPrefix(p, "/assets/"):
			name = strings.TrimPrefix(p, "/assets/")
			if name == "index.html" || strings.Contains(name, "/") {
				name = ""
			}
		}
		typ := types[path.Ext(name)]
		b, err := fs.ReadFile(files, name)
		if name == "" || typ == "" || err != nil {
			http.NotFound(w, r)
			return
		}
		h.Set("Content-Type", typ)
		w.Write(b)
	})
}
