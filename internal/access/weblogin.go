package access

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/internal/jsonrpc"
	"github.com/thrumhq/thrum/internal/private"
	"github.com/thrumhq/thrum/rpc"
)

// The browser login. A page cannot read the owner's secret file, and the
// secret must never sit in a URL, so the owner's CLI asks the server over
// the Unix socket (web.login) for a one-time login code, prints it in a
// URL's fragment, and the page exchanges it once, over the WebSocket, for
// a web session: a second random credential that auth then accepts in
// place of the owner's secret. Codes and sessions are kept as SHA-256
// hashes: codes in this server's memory only, sessions also in
// Options.WebSessionFile when set, so that a tab stays signed in across a
// restart of the daemon; DESIGN.md "Web console" has the threat model.
const (
	// LoginTTL is how long a login code from web.login can be used.
	LoginTTL = time.Minute
	// SessionTTL is how long a web session stays valid after its code
	// was exchanged; without Options.WebSessionFile, the server stopping
	// ends every session sooner.
	SessionTTL = 12 * time.Hour

	maxWebLogins   = 16 // unused codes kept; minting more drops the oldest
	maxWebSessions = 64 // live sessions kept; a new one drops the oldest
)

// webLogins holds the live login codes and web sessions of one server.
type webLogins struct {
	mu       sync.Mutex
	codes    map[[32]byte]time.Time // hash of a code → its expiry
	sessions map[[32]byte]time.Time // hash of a session → its expiry
	file     string                 // where sessions are kept, "" for memory only
}

// newWebLogins returns the logins of a server, with the sessions file
// (if any) holds that have not expired at now. A file that cannot be
// read, or a line of it that is not a session, signs nobody in.
func newWebLogins(file string, now time.Time) *webLogins {
	w := &webLogins{codes: map[[32]byte]time.Time{}, sessions: map[[32]byte]time.Time{}, file: file}
	if file == "" {
		return w
	}
	f, err := private.OpenFile(file, os.O_RDONLY)
	if err != nil {
		return w
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, maxWebSessions*128))
	for sc.Scan() {
		hash, at, _ := strings.Cut(sc.Text(), " ")
		var h [32]byte
		exp, err := time.Parse(time.RFC3339, at)
		if n, herr := hex.Decode(h[:], []byte(hash)); herr != nil || n != len(h) || err != nil || !now.Before(exp) || len(w.sessions) >= maxWebSessions {
			continue
		}
		w.sessions[h] = exp
	}
	return w
}

// saveSessions writes the live sessions to the file, one "HASH EXPIRY"
// line each (mode 0600, replaced whole); w.mu is held.
func (w *webLogins) saveSessions() error {
	if w.file == "" {
		return nil
	}
	var b strings.Builder
	for h, exp := range w.sessions {
		fmt.Fprintf(&b, "%x %s\n", h, exp.UTC().Format(time.RFC3339))
	}
	return private.WriteFile(w.file, []byte(b.String()))
}

// newCredential returns 256 random bits, base64url without padding (43
// characters, safe in a URL fragment).
func newCredential() string {
	var b [32]byte
	rand.Read(b[:]) // never fails (crypto/rand panics rather than return an error)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// put stores hash(cred) in m until exp, first dropping expired entries
// and, at max, the entry that expires soonest.
func put(m map[[32]byte]time.Time, cred string, exp, now time.Time, max int) {
	var oldest [32]byte
	var oldestAt time.Time
	for k, at := range m {
		if !now.Before(at) {
			delete(m, k)
		} else if oldestAt.IsZero() || at.Before(oldestAt) {
			oldest, oldestAt = k, at
		}
	}
	if len(m) >= max {
		delete(m, oldest)
	}
	m[sha256.Sum256([]byte(cred))] = exp
}

// WebLogin is web.login: the owner's, and never over a WebSocket, so a
// browser session cannot mint itself more codes; only the owner's CLI
// (the Unix socket) or an embedding program (a pipe) can.
func (p *Policy) WebLogin(ctx context.Context, _ *rpc.WebLoginParams) (*rpc.WebLoginResult, error) {
	if c := jsonrpc.ConnFromContext(ctx); c != nil && c.Transport() == jsonrpc.TransportWebSocket {
		return nil, rpc.Errorf(rpc.CodeTransport, "web.login is only available on the Unix socket (or an in-process pipe): login codes are for the owner's processes to hand to a browser")
	}
	if len(p.secret) == 0 {
		return nil, rpc.Errorf(rpc.CodeUnavailable, "web login is off: this server has no owner's secret, so no WebSocket may act for the owner")
	}
	now := p.now()
	code, exp := newCredential(), now.Add(LoginTTL)
	p.web.mu.Lock()
	put(p.web.codes, code, exp, now, maxWebLogins)
	p.web.mu.Unlock()
	return &rpc.WebLoginResult{Code: code, ExpiresAt: eventlog.FormatTime(exp)}, nil
}

// webAuth checks a login code (consuming it, and returning the new web
// session and its expiry) or a web session (returning neither). Either
// makes the connection the owner's. A code that c's handshake already
// exchanged returns the session it was exchanged for, once.
func (p *Policy) webAuth(c *jsonrpc.Conn, a *rpc.AuthParams) (session, expires string, err error) {
	if a.Token != "" || a.OwnerSecret != "" || (a.LoginCode != "" && a.WebSession != "") {
		return "", "", rpc.Errorf(rpc.CodeInvalidParams, "give one credential: a token, the owner's secret, a login code or a web session")
	}
	if a.WebSession != "" {
		if !p.webSession(a.WebSession) {
			return "", "", rpc.Errorf(rpc.CodeUnauthenticated, "web session expired or unknown: sign in again with a new login code")
		}
		return "", "", nil
	}
	if c != nil {
		st := stateOf(c)
		st.mu.Lock()
		x := st.exchanged
		if x != nil && x.code == sha256.Sum256([]byte(a.LoginCode)) {
			st.exchanged = nil
			st.mu.Unlock()
			if !p.webSession(x.session) { // expired, or pushed out, since
				return "", "", rpc.Errorf(rpc.CodeUnauthenticated, "the web session this connection's login code was traded for has expired: sign in again with a new login code")
			}
			return x.session, x.expires, nil
		}
		st.mu.Unlock()
	}
	session, expires, ok := p.exchangeCode(a.LoginCode)
	if !ok {
		return "", "", rpc.Errorf(rpc.CodeUnauthenticated, "login code expired, already used or unknown: ask for a new one")
	}
	return session, expires, nil
}

// webSession reports whether cred is a live web session.
func (p *Policy) webSession(cred string) bool {
	now := p.now()
	h := sha256.Sum256([]byte(cred))
	p.web.mu.Lock()
	defer p.web.mu.Unlock()
	exp, ok := p.web.sessions[h]
	if ok && !now.Before(exp) {
		delete(p.web.sessions, h)
	}
	return ok && now.Before(exp)
}

// exchangeCode consumes code, used or not, late or not, and if it was a
// live login code returns a new web session and its expiry.
func (p *Policy) exchangeCode(code string) (session, expires string, ok bool) {
	now := p.now()
	h := sha256.Sum256([]byte(code))
	p.web.mu.Lock()
	defer p.web.mu.Unlock()
	exp, ok := p.web.codes[h]
	delete(p.web.codes, h) // one use, even a late one
	if !ok || !now.Before(exp) {
		return "", "", false
	}
	session, sexp := newCredential(), now.Add(SessionTTL)
	put(p.web.sessions, session, sexp, now, maxWebSessions)
	if err := p.web.saveSessions(); err != nil {
		// Kept in memory: the tab is signed in until the server stops.
		p.log.Warn("access: web sessions are not kept across a restart", "err", err)
	}
	return session, eventlog.FormatTime(sexp), true
}

// exchanged is a login code a WebSocket's handshake traded for a web
// session: the connection's first auth with that code returns it, since
// a browser cannot read what the handshake's response carries.
type exchanged struct {
	code             [32]byte // its hash
	session, expires string
}
