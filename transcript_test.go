package thrum_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/thrumhq/thrum/internal/jsonrpc"
	"github.com/thrumhq/thrum/rpc"
)

var update = flag.Bool("update", false, "rewrite the golden transcripts in testdata/transcripts from the server's answers")

// Golden JSON-RPC transcripts.
//
// Each file in testdata/transcripts is one scenario: a list of steps, each
// the raw text of a request (sent byte for byte: a line on the Unix
// socket, a text frame on the WebSocket) and the response it must get,
// after normalization. Every scenario is replayed over both transports,
// each time against a fresh daemon (startDaemon: alice and bob registered,
// each with a session) to which the user leon has been added, and both
// must give the same answers.
//
// A step:
//
//	comment    what the step shows (optional)
//	transport  "unix" or "websocket": the step runs on that transport only
//	           (the documented differences: an anonymous WebSocket may call
//	           only health and auth, a token binds it to one identity;
//	           user.register is WebSocket-only)
//	conn       the connection it runs on, opened on first use (default "main")
//	send       the raw request text; ${name} is replaced by a variable.
//	           Without send the step reads the next message pushed on conn
//	           (a notification).
//	capture    {"var": "path"}: variables taken from the raw response, such as
//	           {"m1": "result.message_id"} (array elements by index: "result.agents.0.agent_id")
//	recv       the normalized response; null when no response is due (a
//	           notification, a batch of notifications)
//
// Variables: token_alice, token_bob, token_leon (the agents' and the user's
// tokens), owner_secret (the daemon's), worktree (a git worktree with a feature branch, for
// agent.listContext), and every capture.
//
// Responses are normalized before comparison: message, session and thread
// IDs become <msg_1>, <ses_1>, <thr_1>... numbered by first appearance in
// the run; timestamps <time>; tokens <token>; uptime_ms and duration_ms
// "<ms>"; the worktree's path <worktree>. Everything else must match byte
// for byte: the server writes compact JSON, so member order, ids and
// escaping are all checked.
//
// A scenario file may set git_user, the git user.name and user.email that
// user.identify sees; without it they are unset.
//
// To add a step, write it without recv and run
//
//	go test -run TestTranscripts -update .
//
// then review the diff of testdata/transcripts.

const transcriptDir = "testdata/transcripts"

var transcriptTransports = []string{jsonrpc.TransportUnix, jsonrpc.TransportWebSocket}

type transcript struct {
	About string `json:"about"`
	// Anonymous names the connections that stay unauthenticated on a
	// WebSocket; the others present the owner's secret when they open, so
	// that both transports answer alike. Default: "raw" and "fresh".
	Anonymous []string           `json:"anonymous,omitempty"`
	GitUser   *transcriptGitUser `json:"git_user,omitempty"`
	Steps     []*transcriptStep  `json:"steps"`
}

type transcriptGitUser struct {
	Name  string `json:"name"`
	Email string `json:"email"`
}

type transcriptStep struct {
	Comment   string            `json:"comment,omitempty"`
	Transport string            `json:"transport,omitempty"`
	Conn      string            `json:"conn,omitempty"`
	Send      *string           `json:"send,omitempty"`
	Capture   map[string]string `json:"capture,omitempty"`
	Recv      json.RawMessage   `json:"recv"` // nil: not recorded yet; "null": no response due
}

// transcriptWireTimeout bounds every read and write: a missing response
// fails the step instead of hanging the test.
const transcriptWireTimeout = 5 * time.Second

// transcriptProbeID is the id of the health request sent after a step that
// expects no response: the next message on the connection must be the
// probe's answer, which proves nothing else was sent.
const transcriptProbeID = "__probe__"

var transcriptProbe = []byte(`{"jsonrpc":"2.0","id":"` + transcriptProbeID + `","method":"health"}`)

func TestTranscripts(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(transcriptDir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no transcripts in %s: %v", transcriptDir, err)
	}
	setTranscriptGit(t)
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".json")
		t.Run(name, func(t *testing.T) {
			tr := loadTranscript(t, file)
			setTranscriptGitUser(t, tr.GitUser)
			// The transports replay side by side, each against its own
			// daemon and worktree; the environment (git user) is shared.
			got := make([][]json.RawMessage, len(transcriptTransports))
			if !t.Run("replay", func(t *testing.T) {
				for k, tp := range transcriptTransports {
					t.Run(tp, func(t *testing.T) {
						t.Parallel()
						got[k] = replayTranscript(t, tr, tp)
					})
				}
			}) {
				return
			}
			for i, s := range tr.Steps {
				where := transcriptStepName(i, s)
				var first json.RawMessage
				firstTP := ""
				for k, tp := range transcriptTransports {
					g := got[k][i]
					if g == nil {
						continue // not run on this transport
					}
					if *update {
						if first == nil {
							first, firstTP = g, tp
						} else if !bytes.Equal(g, first) {
							t.Errorf("%s: the transports answer differently\n%s: %s\n%s: %s", where, firstTP, first, tp, g)
						}
						continue
					}
					if s.Recv == nil {
						t.Errorf("%s: no recv recorded: run go test -run TestTranscripts -update", where)
						continue
					}
					if want := compactTranscriptJSON(t, s.Recv); !bytes.Equal(g, want) {
						t.Errorf("%s over %s:\n got: %s\nwant: %s", where, tp, g, want)
					}
				}
				if *update {
					if first == nil {
						t.Errorf("%s: ran on no transport", where)
					}
					s.Recv = first
				}
			}
			if *update && !t.Failed() {
				writeTranscript(t, file, tr)
			}
		})
	}
}

func transcriptStepName(i int, s *transcriptStep) string {
	n := fmt.Sprintf("step %d", i+1)
	if s.Comment != "" {
		n += " (" + s.Comment + ")"
	}
	return n
}

func loadTranscript(t *testing.T, file string) *transcript {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var tr transcript
	if err := dec.Decode(&tr); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	for i, s := range tr.Steps {
		switch s.Transport {
		case "", jsonrpc.TransportUnix, jsonrpc.TransportWebSocket:
		default:
			t.Fatalf("%s %s: transport %q: use unix or websocket", file, transcriptStepName(i, s), s.Transport)
		}
		if s.Send == nil && string(s.Recv) == "null" {
			t.Fatalf("%s %s: a step without send reads a pushed message: its recv cannot be null", file, transcriptStepName(i, s))
		}
		if s.Send != nil && strings.ContainsAny(*s.Send, "\r\n") {
			t.Fatalf("%s %s: send must be one line (the Unix socket frames by newline)", file, transcriptStepName(i, s))
		}
	}
	return &tr
}

func writeTranscript(t *testing.T, file string, tr *transcript) {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(tr); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func compactTranscriptJSON(t *testing.T, raw json.RawMessage) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		t.Fatalf("recorded recv is not JSON: %v", err)
	}
	return buf.Bytes()
}

// setTranscriptGit isolates git from the machine's configuration: no system
// or global file, and user.name and user.email from GIT_CONFIG_* (see
// setTranscriptGitUser), which override the repository's own configuration too.
func setTranscriptGit(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatalf("git is needed for the transcripts (user.identify, agent.listContext): %v", err)
	}
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	t.Setenv("GIT_CONFIG_GLOBAL", os.DevNull)
	setTranscriptGitUser(t, nil)
}

// setTranscriptGitUser sets the git user that user.identify reads; nil
// means unset.
func setTranscriptGitUser(t *testing.T, u *transcriptGitUser) {
	t.Helper()
	if u == nil {
		u = &transcriptGitUser{}
	}
	t.Setenv("GIT_CONFIG_COUNT", "2")
	t.Setenv("GIT_CONFIG_KEY_0", "user.name")
	t.Setenv("GIT_CONFIG_VALUE_0", u.Name)
	t.Setenv("GIT_CONFIG_KEY_1", "user.email")
	t.Setenv("GIT_CONFIG_VALUE_1", u.Email)
}

// makeTranscriptWorktree builds a repository on branch feature: one commit
// ahead of main (b.txt), a.txt modified and c.txt untracked. Authors and
// dates are fixed, so commit hashes are the same on every run.
func makeTranscriptWorktree(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	env := append(os.Environ(),
		"GIT_AUTHOR_NAME=Ada", "GIT_AUTHOR_EMAIL=ada@example.com", "GIT_AUTHOR_DATE=2026-01-02T03:04:05Z",
		"GIT_COMMITTER_NAME=Ada", "GIT_COMMITTER_EMAIL=ada@example.com", "GIT_COMMITTER_DATE=2026-01-02T03:04:05Z")
	git := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir, cmd.Env = dir, env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	write := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git("init", "-q", "-b", "main")
	write("a.txt", "a\n")
	git("add", "a.txt")
	git("commit", "-q", "-m", "Add a")
	git("checkout", "-q", "-b", "feature")
	write("b.txt", "b\n")
	git("add", "b.txt")
	git("commit", "-q", "-m", "Add b")
	write("a.txt", "a changed\n")
	write("c.txt", "c\n")
	return dir
}

// wirePeer is the client end of one raw connection.
type wirePeer interface {
	send(msg []byte) error
	recv() ([]byte, error)
	close()
}

// unixWire speaks newline-delimited JSON on a Unix socket.
type unixWire struct {
	c net.Conn
	r *bufio.Reader
}

func (p *unixWire) send(msg []byte) error {
	p.c.SetWriteDeadline(time.Now().Add(transcriptWireTimeout))
	_, err := p.c.Write(append(append([]byte(nil), msg...), '\n'))
	return err
}

func (p *unixWire) recv() ([]byte, error) {
	p.c.SetReadDeadline(time.Now().Add(transcriptWireTimeout))
	line, err := p.r.ReadBytes('\n')
	if err != nil {
		return nil, err
	}
	return line[:len(line)-1], nil
}

func (p *unixWire) close() { p.c.Close() }

// wsWire speaks one message per WebSocket text frame.
type wsWire struct {
	c *websocket.Conn
}

func (p *wsWire) send(msg []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), transcriptWireTimeout)
	defer cancel()
	return p.c.Write(ctx, websocket.MessageText, msg)
}

func (p *wsWire) recv() ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), transcriptWireTimeout)
	defer cancel()
	typ, b, err := p.c.Read(ctx)
	if err != nil {
		return nil, err
	}
	if typ != websocket.MessageText {
		return nil, fmt.Errorf("got a %v frame, want a text frame", typ)
	}
	return b, nil
}

func (p *wsWire) close() { p.c.Close(websocket.StatusNormalClosure, "") }

func dialWire(t *testing.T, d *daemon, transport string) wirePeer {
	t.Helper()
	switch transport {
	case jsonrpc.TransportUnix:
		c, err := net.Dial("unix", d.sock)
		if err != nil {
			t.Fatal(err)
		}
		return &unixWire{c: c, r: bufio.NewReader(c)}
	case jsonrpc.TransportWebSocket:
		ctx, cancel := context.WithTimeout(context.Background(), transcriptWireTimeout)
		defer cancel()
		c, _, err := websocket.Dial(ctx, d.wsURL, nil)
		if err != nil {
			t.Fatal(err)
		}
		c.SetReadLimit(4 << 20)
		return &wsWire{c: c}
	}
	t.Fatalf("unknown transport %q", transport)
	return nil
}

// replayTranscript runs a transcript's steps for one transport against a
// fresh daemon and returns each step's normalized response: nil for a step
// not run on this transport, "null" for no response.
func replayTranscript(t *testing.T, tr *transcript, transport string) []json.RawMessage {
	worktree := ""
	for _, s := range tr.Steps {
		if s.Send != nil && strings.Contains(*s.Send, "${worktree}") {
			worktree = makeTranscriptWorktree(t) // only if used: git is slow
			break
		}
	}
	d := startDaemonIn(t, worktree) // its repository: the only one it runs git in
	leon, err := d.n.RegisterUser(context.Background(), &rpc.RegisterUserParams{Username: "leon", Display: "Leon"})
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{
		"token_alice":  d.tokens["alice"],
		"token_bob":    d.tokens["bob"],
		"token_leon":   leon.Token,
		"owner_secret": d.secret,
	}
	if worktree != "" {
		vars["worktree"] = worktree
	}
	norm := newTranscriptNormalizer(map[string]string{worktree: "<worktree>"})
	peers := map[string]wirePeer{}
	var order []string
	defer func() {
		for _, name := range order {
			peers[name].close()
		}
	}()
	conn := func(name string) wirePeer {
		if name == "" {
			name = "main"
		}
		p, ok := peers[name]
		if !ok {
			p = dialWire(t, d, transport)
			peers[name] = p
			order = append(order, name)
			anon := tr.Anonymous
			if anon == nil {
				anon = []string{"raw", "fresh"}
			}
			if transport == jsonrpc.TransportWebSocket && !slices.Contains(anon, name) {
				if err := p.send([]byte(`{"jsonrpc":"2.0","id":"owner","method":"auth","params":{"owner_secret":"` + d.secret + `"}}`)); err != nil {
					t.Fatal(err)
				}
				if b, err := p.recv(); err != nil || !strings.Contains(string(b), `"owner":true`) {
					t.Fatalf("auth with the owner's secret: %s %v", b, err)
				}
			}
		}
		return p
	}
	read := func(p wirePeer, where string) []byte {
		t.Helper()
		b, err := p.recv()
		if err != nil {
			t.Fatalf("%s: read: %v", where, err)
		}
		if !json.Valid(b) {
			t.Fatalf("%s: the server sent invalid JSON: %q", where, b)
		}
		return b
	}
	// readOrNothing reads the response to a request that may get none: a
	// probe follows it, and the probe's answer coming first means none.
	readOrNothing := func(p wirePeer, where string) []byte {
		t.Helper()
		if err := p.send(transcriptProbe); err != nil {
			t.Fatalf("%s: send probe: %v", where, err)
		}
		b := read(p, where)
		if isTranscriptProbeReply(b) {
			return nil
		}
		if next := read(p, where); !isTranscriptProbeReply(next) {
			t.Fatalf("%s: two messages where one response was due:\n%s\n%s", where, b, next)
		}
		return b
	}

	out := make([]json.RawMessage, len(tr.Steps))
	for i, s := range tr.Steps {
		if s.Transport != "" && s.Transport != transport {
			continue
		}
		where := transcriptStepName(i, s)
		p := conn(s.Conn)
		var frame []byte
		if s.Send == nil {
			frame = read(p, where)
		} else {
			req := expandTranscriptVars(t, where, *s.Send, vars)
			if err := p.send(req); err != nil {
				t.Fatalf("%s: send: %v", where, err)
			}
			if *update || s.Recv == nil || string(s.Recv) == "null" {
				frame = readOrNothing(p, where)
			} else {
				frame = read(p, where)
			}
			checkIDEcho(t, where, req, frame)
		}
		if frame == nil {
			out[i] = json.RawMessage("null")
			continue
		}
		for v, path := range s.Capture {
			val, err := lookupTranscriptVar(frame, path)
			if err != nil {
				t.Fatalf("%s: capture %s from %s: %v\nin %s", where, v, path, err, frame)
			}
			vars[v] = val
		}
		out[i] = norm.apply(frame)
	}
	// Nothing may be left unread: every connection's next message must be
	// the answer to a probe.
	for _, name := range order {
		p := peers[name]
		if err := p.send(transcriptProbe); err != nil {
			t.Fatalf("conn %s: send final probe: %v", name, err)
		}
		if b := read(p, "conn "+name+" at the end"); !isTranscriptProbeReply(b) {
			t.Fatalf("conn %s: unexpected message at the end (a notification the transcript does not read?): %s", name, b)
		}
	}
	return out
}

func isTranscriptProbeReply(b []byte) bool {
	var m struct {
		ID any `json:"id"`
	}
	return json.Unmarshal(b, &m) == nil && m.ID == transcriptProbeID
}

var transcriptVarRE = regexp.MustCompile(`\$\{([A-Za-z0-9_]+)\}`)

func expandTranscriptVars(t *testing.T, where, s string, vars map[string]string) []byte {
	t.Helper()
	var missing []string
	out := transcriptVarRE.ReplaceAllStringFunc(s, func(m string) string {
		name := m[2 : len(m)-1]
		v, ok := vars[name]
		if !ok {
			missing = append(missing, name)
		}
		return v
	})
	if len(missing) > 0 {
		t.Fatalf("%s: undefined variables %v", where, missing)
	}
	return []byte(out)
}

// lookupTranscriptVar returns the string or number at a dotted path in a
// JSON document ("result.agents.0.agent_id"); a number is returned as its
// JSON text.
func lookupTranscriptVar(doc []byte, path string) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return "", err
	}
	for _, k := range strings.Split(path, ".") {
		switch x := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = x[k]; !ok {
				return "", fmt.Errorf("no member %q", k)
			}
		case []any:
			i, err := strconv.Atoi(k)
			if err != nil || i < 0 || i >= len(x) {
				return "", fmt.Errorf("no element %q", k)
			}
			v = x[i]
		default:
			return "", fmt.Errorf("%q: not an object or array", k)
		}
	}
	switch x := v.(type) {
	case string:
		return x, nil
	case json.Number:
		return x.String(), nil
	}
	return "", fmt.Errorf("not a string or a number: %v", v)
}

// checkIDEcho checks, independently of the golden files, that a response
// carries its request's id byte for byte: the id of a request object, null
// for one whose id could not be read, and for a batch only ids of its
// requests.
func checkIDEcho(t *testing.T, where string, req, resp []byte) {
	t.Helper()
	if resp == nil || !json.Valid(req) {
		return
	}
	req = bytes.TrimSpace(req)
	idOf := func(b []byte) (json.RawMessage, bool) {
		var m map[string]json.RawMessage
		if json.Unmarshal(b, &m) != nil {
			return nil, false
		}
		id, ok := m["id"]
		return id, ok
	}
	if req[0] == '{' {
		want, ok := idOf(req)
		if !ok {
			want = json.RawMessage("null") // a reply to an id-less request is an error about it
		} else if c := want[0]; c != '"' && c != '-' && (c < '0' || c > '9') && string(want) != "null" {
			want = json.RawMessage("null") // an id of the wrong type cannot be echoed
		}
		if got, ok := idOf(resp); !ok || !bytes.Equal(got, want) {
			t.Errorf("%s: response id %s, want %s", where, got, want)
		}
		return
	}
	if req[0] != '[' {
		return
	}
	var reqs, resps []json.RawMessage
	if json.Unmarshal(req, &reqs) != nil || json.Unmarshal(resp, &resps) != nil {
		return // an empty batch or a parse error gets a single error object
	}
	ids := map[string]bool{"null": true}
	for _, r := range reqs {
		if id, ok := idOf(r); ok {
			ids[string(id)] = true
		}
	}
	if len(resps) > len(reqs) {
		t.Errorf("%s: %d responses to a batch of %d", where, len(resps), len(reqs))
	}
	for _, r := range resps {
		if id, ok := idOf(r); !ok || !ids[string(id)] {
			t.Errorf("%s: batch response with id %s, not one of the batch's", where, id)
		}
	}
}

// transcriptNormalizer replaces the values that differ from run to run by
// stable placeholders. IDs are numbered by first appearance, so a
// transcript still shows which responses name the same message.
type transcriptNormalizer struct {
	literals map[string]string
	ids      map[string]string
	next     map[string]int
}

var (
	transcriptNormID     = regexp.MustCompile(`\b(msg|ses|thr)_[0-9A-HJKMNP-TV-Z]{26}\b`)
	transcriptNormTime   = regexp.MustCompile(`\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})`)
	transcriptNormToken  = regexp.MustCompile(`"token":"[0-9a-f]{64}"`)
	transcriptNormMillis = regexp.MustCompile(`"(uptime_ms|duration_ms)":\d+`)
)

func newTranscriptNormalizer(literals map[string]string) *transcriptNormalizer {
	return &transcriptNormalizer{literals: literals, ids: map[string]string{}, next: map[string]int{}}
}

func (n *transcriptNormalizer) apply(b []byte) json.RawMessage {
	s := string(b)
	for lit, ph := range n.literals {
		if lit != "" {
			s = strings.ReplaceAll(s, lit, ph)
		}
	}
	s = transcriptNormID.ReplaceAllStringFunc(s, func(id string) string {
		ph, ok := n.ids[id]
		if !ok {
			kind := id[:3]
			n.next[kind]++
			ph = fmt.Sprintf("<%s_%d>", kind, n.next[kind])
			n.ids[id] = ph
		}
		return ph
	})
	s = transcriptNormTime.ReplaceAllString(s, "<time>")
	s = transcriptNormToken.ReplaceAllString(s, `"token":"<token>"`)
	s = transcriptNormMillis.ReplaceAllString(s, `"$1":"<ms>"`)
	return json.RawMessage(s)
}
