package webui_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/internal/thrumtest"
)

func TestMain(m *testing.M) { os.Exit(thrumtest.Main(m)) }

// chromium finds Debian's chromium (installed by .ci/run). Without one
// the browser tests skip, except in CI, where they must run.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("no chromium in PATH: .ci/run installs Debian's chromium package")
	}
	t.Skip("no chromium in PATH (apt-get install -y chromium)")
	return ""
}

// console is a real daemon (the built binary, in a git repository) with
// two agents, and one headless browser.
type console struct {
	t    *testing.T
	bin  string
	repo string
	base string // http://127.0.0.1:PORT/
	ctx  context.Context
}

func (c *console) run(name string, args ...string) (string, error) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.bin, args...)
	cmd.Dir, cmd.Env = c.repo, thrumtest.GitEnv()
	if name != "" {
		cmd.Env = append(cmd.Env, "THRUM_NAME="+name)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("thrum %s: %v\n%s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), nil
}

func (c *console) thrum(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := c.run(name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(out)
}

// loginURL runs `thrum web` and returns the URL it prints.
func (c *console) loginURL() string {
	c.t.Helper()
	u := c.thrum(c.t, "", "web", "--quiet")
	if !regexp.MustCompile(`^http://127\.0\.0\.1:\d+/#login=[A-Za-z0-9_-]{43}$`).MatchString(u) {
		c.t.Fatalf("thrum web printed %q, want http://127.0.0.1:PORT/#login=CODE", u)
	}
	return u
}

// holdUnauthPool keeps the daemon's pool of unauthenticated WebSockets
// full, as a local user can: more raw handshakes than the pool holds,
// each kept open until the daemon closes it and then made again at once.
// The returned function stops them.
func (c *console) holdUnauthPool(t *testing.T) (stop func()) {
	t.Helper()
	wsURL := "ws://" + strings.TrimSuffix(strings.TrimPrefix(c.base, "http://"), "/") + "/ws"
	done := make(chan struct{})
	var wg sync.WaitGroup
	var held atomic.Int32
	for range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				ws, _ := thrumtest.RawHandshake(wsURL)
				if ws == nil {
					time.Sleep(5 * time.Millisecond)
					continue
				}
				nc := ws.Conn
				held.Add(1)
				go func() { <-done; nc.Close() }()
				io.Copy(io.Discard, nc) // until the daemon closes it
				held.Add(-1)
				nc.Close()
			}
		}()
	}
	for deadline := time.Now().Add(5 * time.Second); held.Load() < thrum.DefaultMaxUnauthConns; {
		if time.Now().After(deadline) {
			t.Fatalf("strangers hold %d unauthenticated WebSockets, want the whole pool of %d", held.Load(), thrum.DefaultMaxUnauthConns)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return func() { close(done); wg.Wait() }
}

// tab opens a new browser tab (its own sessionStorage) and closes it when
// the test ends.
func (c *console) tab() context.Context {
	c.t.Helper()
	ctx, cancel := chromedp.NewContext(c.ctx)
	c.t.Cleanup(cancel)
	if err := chromedp.Do(ctx); err != nil { // opens the tab, with no deadline
		c.t.Fatalf("open a tab: %v", err)
	}
	return ctx
}

func do(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func eval[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

// waitFor evaluates a condition in the page until it is true.
func waitFor(t *testing.T, ctx context.Context, what, cond string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !eval[bool](t, ctx, "!!("+cond+")") {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s (%s)", what, cond)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func newConsole(t *testing.T) *console {
	t.Helper()
	chrome := chromium(t)
	c := &console{t: t, bin: thrumtest.Binary(t), repo: thrumtest.GitRepo(t)}
	c.thrum(t, "", "init")
	pidFile := filepath.Join(c.repo, ".thrum", "var", "thrum.pid")
	t.Cleanup(func() {
		pid := 0
		if b, err := os.ReadFile(pidFile); err == nil {
			pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		}
		if _, err := c.run("", "daemon", "stop"); err != nil {
			t.Errorf("daemon stop: %v", err)
			if pid > 0 {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	c.thrum(t, "", "daemon", "start")
	c.thrum(t, "alice", "quickstart", "--name", "alice", "--role", "implementer", "--module", "auth")
	c.thrum(t, "bob", "quickstart", "--name", "bob", "--role", "reviewer", "--module", "auth")
	c.thrum(t, "", "group", "create", "crew")
	c.thrum(t, "", "group", "add", "crew", "@alice")

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome), chromedp.WindowSize(1280, 800),
		chromedp.Flag("disable-gpu", true), chromedp.UserDataDir(t.TempDir()))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses to sandbox as root (CI)
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(cancelBrowser)
	if err := chromedp.Do(bctx); err != nil { // starts the browser
		t.Fatalf("start chromium: %v", err)
	}
	c.ctx = bctx
	u := c.loginURL()
	c.base = u[:strings.Index(u, "#")]
	return c
}

// TestConsoleInBrowser drives the web console in headless Chromium
// against the real daemon: refused without login, login through the URL
// `thrum web` prints (once), a CLI message pushed into the feed (the time
// is printed), a message composed in the page waking an agent's
// wait_for_message, a hostile body shown as text, the layout at
// 1280×800, narrow, and dark, and the page through a daemon restart. It
// saves screenshots (of the feed, and after the restart).
func TestConsoleInBrowser(t *testing.T) {
	c := newConsole(t)

	ok := t.Run("refused without login", func(t *testing.T) {
		tab := c.tab()
		do(t, tab, "open the console", chromedp.Navigate(c.base))
		waitFor(t, tab, "the sign-in notice", `document.querySelector('#conn').dataset.state === 'signed-out'`)
		if eval[bool](t, tab, `!document.querySelector('#signin').hidden && document.querySelector('#app').hidden`) != true {
			t.Fatal("without a login the page shows the app")
		}
		do(t, tab, "open with a made-up code", chromedp.Navigate(c.base+"#login=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"))
		waitFor(t, tab, "the refusal", `document.querySelector('#signin-error').textContent.includes('login code')`)
		if n := eval[int](t, tab, `document.querySelectorAll('#feed li').length`); n != 0 {
			t.Fatalf("a refused page shows %d messages", n)
		}
	})

	tab := c.tab()
	url := c.loginURL()
	ok = ok && t.Run("login through the printed URL", func(t *testing.T) {
		// Strangers hold every slot for connections that have not
		// authenticated, from before the first sign-in to after a reload:
		// the page presents its login code, then its web session, in the
		// handshake.
		stop := c.holdUnauthPool(t)
		do(t, tab, "open the login URL", chromedp.Navigate(url))
		waitFor(t, tab, "the live console, strangers holding the pool", `document.querySelector('#conn').dataset.state === 'live' && !document.querySelector('#app').hidden`)
		if href := eval[string](t, tab, `location.href`); strings.Contains(href, "login=") {
			t.Fatalf("the used code stays in the address bar: %s", href)
		}
		if me := eval[string](t, tab, `document.querySelector('#me').textContent`); !strings.Contains(me, "user:test-user") {
			t.Fatalf("signed in as %q, want user:test-user (git's user.name)", me)
		}
		do(t, tab, "reload", chromedp.Reload())
		waitFor(t, tab, "the console after a reload, strangers holding the pool", `document.querySelector('#conn').dataset.state === 'live'`)
		stop()
		// The code worked once: another tab with the same URL is refused,
		// and says why.
		other := c.tab()
		do(t, other, "reuse the login URL", chromedp.Navigate(url))
		waitFor(t, other, "the refusal of a used code", `document.querySelector('#conn').dataset.state === 'signed-out' && document.querySelector('#signin-error').textContent.includes('login code')`)
		// A session the daemon does not know (it restarted, or the
		// session expired) is refused at the handshake; the page then
		// connects without it and says why.
		stale := c.tab()
		do(t, stale, "open the console", chromedp.Navigate(c.base))
		eval[bool](t, stale, `(sessionStorage.setItem('thrum.web_session', 'AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA'), true)`)
		do(t, stale, "reload with a stale session", chromedp.Reload())
		waitFor(t, stale, "the stale session's refusal", `document.querySelector('#conn').dataset.state === 'signed-out' && document.querySelector('#signin-error').textContent.includes('web session')`)
	})

	if !ok {
		return // the rest needs a signed-in page
	}
	var cliID string
	t.Run("CLI message appears in the feed", func(t *testing.T) {
		eval[bool](t, tab, `(() => { window.seenAt = {}; new MutationObserver(ms => { for (const m of ms) for (const n of m.addedNodes) if (n.dataset && n.dataset.id) window.seenAt[n.dataset.id] = Date.now(); }).observe(document.querySelector('#feed'), {childList: true}); return true; })()`)
		start := time.Now()
		id := c.thrum(t, "alice", "send", "--quiet", "--to", "@bob", "--priority", "high", "Review **auth** please: `login.go`")
		sent := time.Now()
		cliID = id
		waitFor(t, tab, "the message in the feed", fmt.Sprintf(`window.seenAt[%q]`, id))
		seen := time.UnixMilli(int64(eval[float64](t, tab, fmt.Sprintf(`window.seenAt[%q]`, id))))
		t.Logf("CLI send → in the feed: %d ms from starting `thrum send` (%d ms after it exited)",
			seen.Sub(start).Milliseconds(), seen.Sub(sent).Milliseconds())
		item := fmt.Sprintf(`document.querySelector('#feed li[data-id=%q]')`, id)
		head := eval[string](t, tab, item+`.querySelector('header').textContent`)
		for _, want := range []string{"alice (implementer/auth)", "@bob (agent)", "high"} {
			if !strings.Contains(head, want) {
				t.Errorf("feed item header %q lacks %q", head, want)
			}
		}
		if strong := eval[string](t, tab, item+`.querySelector('.body strong').textContent`); strong != "auth" {
			t.Errorf("markdown **auth** rendered as %q", strong)
		}
	})

	t.Run("composed in the page wakes the agent's waiter", func(t *testing.T) {
		cmd := exec.Command(c.bin, "mcp", "serve")
		cmd.Dir, cmd.Env = c.repo, append(thrumtest.GitEnv(), "THRUM_NAME=bob")
		client := mcp.NewClient(&mcp.Implementation{Name: "webui-test", Version: "1"}, nil)
		cs, err := client.Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
		if err != nil {
			t.Fatalf("thrum mcp serve as bob: %v", err)
		}
		defer cs.Close()
		// bob consumes what is waiting first (the CLI message above).
		if _, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "check_messages", Arguments: map[string]any{}}); err != nil {
			t.Fatal(err)
		}
		woke := make(chan string, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "wait_for_message", Arguments: map[string]any{"timeout": 30}})
			if err != nil {
				woke <- "error: " + err.Error()
				return
			}
			b, _ := json.Marshal(res.StructuredContent)
			woke <- string(b)
		}()
		time.Sleep(300 * time.Millisecond) // let the wait begin; it would also find the message queued
		body := "From the console: ship it"
		start := time.Now()
		do(t, tab, "compose to bob",
			chromedp.SetValue(chromedp.CSS("#to"), "bob"),
			chromedp.SetValue(chromedp.CSS("#body"), body),
			chromedp.Click(chromedp.CSS("#send")))
		select {
		case got := <-woke:
			t.Logf("page send → bob's wait_for_message returned: %d ms", time.Since(start).Milliseconds())
			if !strings.Contains(got, body) || !strings.Contains(got, "user:test-user") {
				t.Fatalf("bob's waiter got %s, want %q from user:test-user", got, body)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("bob's wait_for_message did not wake")
		}
		// bob's server consumed the CLI message before waiting: read by bob.
		eval[bool](t, tab, fmt.Sprintf(`(document.querySelector('#feed li[data-id=%q] footer button:nth-of-type(2)').click(), true)`, cliID))
		waitFor(t, tab, "read by bob", fmt.Sprintf(`document.querySelector('#feed li[data-id=%q] .readby').textContent === 'read by bob'`, cliID))
		waitFor(t, tab, "the page's own message in its feed", fmt.Sprintf(`[...document.querySelectorAll('#feed li .body')].some(b => b.textContent.includes(%q))`, body))
		inbox := c.thrum(t, "bob", "inbox", "--json")
		if !strings.Contains(inbox, body) {
			t.Fatalf("bob's inbox lacks the page's message:\n%s", inbox)
		}
	})

	t.Run("reply as another agent, disclosed", func(t *testing.T) {
		if cliID == "" {
			t.Skip("needs the CLI message")
		}
		item := fmt.Sprintf(`#feed li[data-id=%q]`, cliID)
		do(t, tab, "reply to alice's message (as bob)", chromedp.Click(chromedp.CSS(item+" footer button")))
		eval[bool](t, tab, `(() => { const s = document.querySelector('#acting-as'); s.value = [...s.options].find(o => o.textContent.startsWith('bob')).value; s.dispatchEvent(new Event('change')); return true; })()`)
		if note := eval[string](t, tab, `document.querySelector('#act-note').textContent`); !strings.Contains(note, "via user:test-user") {
			t.Fatalf("acting as bob, the page says %q, want the disclosure", note)
		}
		do(t, tab, "send the reply", chromedp.SetValue(chromedp.CSS("#body"), "noted, on it"), chromedp.Click(chromedp.CSS("#send")))
		waitFor(t, tab, "the sent reply", `document.querySelector('#compose-status').textContent.startsWith('Sent msg_')`)
		id := regexp.MustCompile(`msg_[0-9A-Z]+`).FindString(eval[string](t, tab, `document.querySelector('#compose-status').textContent`))
		var got struct {
			Message struct {
				Author struct {
					AgentID string `json:"agent_id"`
				} `json:"author"`
				DisclosedVia string                         `json:"disclosed_via"`
				Refs         []struct{ Type, Value string } `json:"refs"`
			} `json:"message"`
		}
		out := c.thrum(t, "bob", "message", "get", id, "--json")
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("message get: %v\n%s", err, out)
		}
		m := got.Message
		replyTo, toAlice := false, false
		for _, r := range m.Refs {
			replyTo = replyTo || r.Type == "reply_to" && r.Value == cliID
			toAlice = toAlice || r.Type == "mention" && strings.HasSuffix(r.Value, "alice")
		}
		if !strings.HasSuffix(m.Author.AgentID, "bob") || m.DisclosedVia != "user:test-user" || !replyTo || !toAlice {
			t.Fatalf("the reply is %s, want by bob, disclosed via user:test-user, a reply to %s addressed to alice", out, cliID)
		}
		waitFor(t, tab, "the disclosure in the feed", fmt.Sprintf(`(document.querySelector('#feed li[data-id=%q] .via') || {}).textContent === 'via user:test-user'`, id))
		eval[bool](t, tab, `(() => { const s = document.querySelector('#acting-as'); s.value = ''; s.dispatchEvent(new Event('change')); return true; })()`)
	})

	t.Run("hostile body stays text", func(t *testing.T) {
		hostile := `<img src=x onerror="document.title='pwned'"> <script>document.title='pwned2'</script> [click](javascript:document.title='pwned3')`
		id := c.thrum(t, "alice", "send", "--quiet", "--to", "@everyone", hostile)
		item := fmt.Sprintf(`document.querySelector('#feed li[data-id=%q]')`, id)
		waitFor(t, tab, "the hostile message", item)
		time.Sleep(200 * time.Millisecond) // an image error handler would have run by now
		if title := eval[string](t, tab, `document.title`); title != "thrum" {
			t.Fatalf("the hostile body ran: title %q", title)
		}
		if n := eval[int](t, tab, item+`.querySelectorAll('img, script, a[href^="javascript"]').length`); n != 0 {
			t.Fatalf("the hostile body made %d elements", n)
		}
		if text := eval[string](t, tab, item+`.querySelector('.body').textContent`); !strings.Contains(text, `<img src=x onerror="document.title='pwned'">`) {
			t.Fatalf("the hostile body is not shown as text: %q", text)
		}
	})

	t.Run("markdown renderer", func(t *testing.T) {
		// The page's own module, on hostile and ordinary bodies: only the
		// renderer's elements, links only to http(s) and mailto, and every
		// hostile fragment kept as text.
		cases := []struct{ in, text string }{
			{`<b onmouseover=alert(1)>bold</b>`, `<b onmouseover=alert(1)>bold</b>`},
			{`<svg/onload=alert(1)>`, `<svg/onload=alert(1)>`},
			{`[x](JaVaScRiPt:alert(1))`, `JaVaScRiPt:alert(1)`},
			{`[x](data:text/html,<script>alert(1)</script>)`, `data:text/html,<script>alert(1)</script>`},
			{`![pic](https://example.com/a.png)`, `image: pic`},
			{"**[in bold](javascript:alert(1))**", `javascript:alert(1)`},
			{"```\n<script>alert(1)</script>\n```", `<script>alert(1)</script>`},
			{"> quoted <iframe src=x>\n- item `<i>`\n1. one", `<iframe src=x>`},
			{`see https://example.com/x?a=1 and [docs](https://example.com/d)`, `docs`},
			{"| <img src=x onerror=alert(1)> | [x](javascript:alert(1)) |\n|---|---|\n| <script>alert(1)</script> | ok |", `<script>alert(1)</script>`},
			{"- <b>\n  - [x](javascript:alert(1))\n    - <i>", `javascript:alert(1)`},
		}
		for _, tc := range cases {
			in, _ := json.Marshal(tc.in)
			got := eval[map[string]any](t, tab, `import('/assets/markdown.js').then(({render}) => {
				const d = document.createElement('div');
				d.append(render(`+string(in)+`));
				const tags = [...d.querySelectorAll('*')].map(e => e.tagName.toLowerCase());
				const hrefs = [...d.querySelectorAll('a')].map(a => a.getAttribute('href') + ' ' + a.rel);
				const attrs = [...d.querySelectorAll('*')].flatMap(e => [...e.attributes].map(a => a.name));
				return {tags, hrefs, attrs, text: d.textContent};
			})`)
			allowed := map[string]bool{"p": true, "br": true, "strong": true, "em": true, "code": true, "pre": true, "a": true, "ul": true, "ol": true, "li": true, "blockquote": true,
				"div": true, "table": true, "thead": true, "tbody": true, "tr": true, "th": true, "td": true}
			for _, tag := range got["tags"].([]any) {
				if !allowed[tag.(string)] {
					t.Errorf("render(%q) made <%s>", tc.in, tag)
				}
			}
			for _, h := range got["hrefs"].([]any) {
				if !regexp.MustCompile(`^(https://|mailto:)\S+ noopener noreferrer nofollow$`).MatchString(h.(string)) {
					t.Errorf("render(%q) made a link %q", tc.in, h)
				}
			}
			for _, a := range got["attrs"].([]any) {
				if a := a.(string); a != "href" && a != "rel" && a != "target" && a != "class" && a != "role" && a != "aria-level" {
					t.Errorf("render(%q) set attribute %q", tc.in, a)
				}
			}
			if text := got["text"].(string); !strings.Contains(text, tc.text) {
				t.Errorf("render(%q) shows %q, want it to contain %q", tc.in, text, tc.text)
			}
		}
	})

	t.Run("views", func(t *testing.T) {
		do(t, tab, "agents", chromedp.Click(chromedp.CSS(`.tabs button[data-view="agents"]`)))
		waitFor(t, tab, "alice's card", `[...document.querySelectorAll('#agents .card')].some(c => c.textContent.includes('alice') && c.textContent.includes('implementer') && c.textContent.includes('active'))`)
		// quickstart names the agent's worktree: the card shows it and its branch.
		branch := thrumtest.Git(t, c.repo, "branch", "--show-current")
		card := eval[string](t, tab, `[...document.querySelectorAll('#agents .card')].find(c => c.dataset.agent.endsWith('alice')).textContent`)
		if !strings.Contains(card, "branch"+branch) || !strings.Contains(card, "worktree"+c.repo) {
			t.Errorf("alice's card %q lacks branch %s and worktree %s", card, branch, c.repo)
		}
		c.thrum(t, "bob", "thread", "create", "Auth rollout", "--to", "@alice", "--message", "Plan for the rollout")
		do(t, tab, "threads", chromedp.Click(chromedp.CSS(`.tabs button[data-view="threads"]`)))
		waitFor(t, tab, "the thread in the list", `[...document.querySelectorAll('#threads button')].some(b => b.textContent.includes('Auth rollout'))`)
		eval[bool](t, tab, `([...document.querySelectorAll('#threads button')].find(b => b.textContent.includes('Auth rollout')).click(), true)`)
		waitFor(t, tab, "the thread's messages", `document.querySelector('#thread h2') && document.querySelector('#thread').textContent.includes('Plan for the rollout')`)
		do(t, tab, "reply in the thread", chromedp.Click(chromedp.CSS(`#thread > button`)),
			chromedp.SetValue(chromedp.CSS("#body"), "Thread reply from the console"), chromedp.Click(chromedp.CSS("#send")))
		waitFor(t, tab, "the reply in the thread", `[...document.querySelectorAll('#thread .msg')].some(m => m.textContent.includes('Thread reply from the console'))`)
		do(t, tab, "groups", chromedp.Click(chromedp.CSS(`.tabs button[data-view="groups"]`)))
		waitFor(t, tab, "the crew group with alice", `[...document.querySelectorAll('#groups .card')].some(c => c.textContent.includes('crew') && c.textContent.includes('alice'))`)
		do(t, tab, "inboxes", chromedp.Click(chromedp.CSS(`.tabs button[data-view="inbox"]`)))
		// bob has 4: the CLI message and the page's (both consumed by his
		// MCP server), the hostile one to everyone and the thread reply
		// (addressed to him as the thread's last author), both unread.
		waitFor(t, tab, "bob's unread count", `(document.querySelector('#inboxes li[data-agent$="bob"] .count') || {}).textContent === '2 unread / 4'`)
		eval[bool](t, tab, `(document.querySelector('#inboxes li[data-agent$="bob"] button').click(), true)`)
		waitFor(t, tab, "bob's inbox", `document.querySelectorAll('#inbox .msg').length === 4 && document.querySelectorAll('#inbox .msg.unread').length === 2`)
		do(t, tab, "feed", chromedp.Click(chromedp.CSS(`.tabs button[data-view="feed"]`)))
	})

	t.Run("search", func(t *testing.T) {
		search := func(q string) {
			t.Helper()
			eval[bool](t, tab, `(document.querySelector('#search-status').textContent = '', true)`)
			do(t, tab, "search "+q, chromedp.SetValue(chromedp.CSS("#search"), q))
			eval[bool](t, tab, `(document.querySelector('#search-form').requestSubmit(), true)`)
			waitFor(t, tab, "the answer to "+q, `/match|Malformed|Cannot|not available/.test(document.querySelector('#search-status').textContent)`)
		}
		status := func() string { return eval[string](t, tab, `document.querySelector('#search-status').textContent`) }
		result := func(id string) string { return fmt.Sprintf(`document.querySelector('#results li[data-id=%q]')`, id) }

		// An emoji before the word: the highlight is in code points, and
		// marks exactly the word, not a unit off.
		id := c.thrum(t, "alice", "send", "--quiet", "--to", "@bob", "🚀🚀 ship the wombat build, **now**")
		search("wombat")
		if s := status(); !strings.HasPrefix(s, "1 message matches “wombat”") {
			t.Fatalf("search status %q, want 1 match", s)
		}
		if got := eval[[]string](t, tab, result(id)+` ? [...document.querySelectorAll('#results mark')].map(m => m.textContent) : null`); len(got) != 1 || got[0] != "wombat" {
			t.Fatalf("marks %q, want [wombat]", got)
		}
		if head := eval[string](t, tab, result(id)+`.querySelector('header').textContent`); !strings.Contains(head, "alice (implementer/auth)") || !strings.Contains(head, "@bob (agent)") {
			t.Errorf("result header %q lacks its author and recipient", head)
		}
		do(t, tab, "show the whole message", chromedp.Click(chromedp.CSS(`#results li button.open`)))
		waitFor(t, tab, "the rendered message", result(id)+`.querySelector('.body strong') && `+result(id)+`.querySelector('.body strong').textContent === 'now'`)

		// By another author it is not found.
		eval[bool](t, tab, `(() => { const s = document.querySelector('#search-author'); s.value = [...s.options].find(o => o.textContent.startsWith('bob')).value; return true; })()`)
		search("wombat")
		if s := status(); !strings.HasPrefix(s, "No messages match") {
			t.Errorf("searching bob's messages: %q, want none", s)
		}
		eval[bool](t, tab, `(document.querySelector('#search-author').value = '', true)`)

		// Newest first on request; a result in a thread opens the thread.
		eval[bool](t, tab, `(document.querySelector('#search-sort').value = 'created_at', true)`)
		search("console")
		if s := status(); !strings.HasPrefix(s, "2 messages match “console”, newest first") {
			t.Errorf("newest first: %q, want the page's two messages", s)
		}
		if first := eval[string](t, tab, `document.querySelector('#results li .body').textContent`); !strings.HasPrefix(first, "Thread reply from the console") {
			t.Errorf("newest first, the first result is %q, want the thread reply", first)
		}
		eval[bool](t, tab, `(document.querySelector('#search-sort').value = 'relevance', true)`)
		do(t, tab, "open the reply's thread", chromedp.Click(chromedp.CSS(`#results li:first-child button.open`)))
		waitFor(t, tab, "the thread", `!document.querySelector('#view-threads').hidden && (document.querySelector('#thread h2') || {}).textContent === 'Auth rollout'`)

		// The hostile body, found, stays text in the result.
		search("pwned2")
		if n := eval[int](t, tab, `document.querySelectorAll('#results li').length`); n != 1 {
			t.Fatalf("%d results for pwned2, want the hostile message", n)
		}
		time.Sleep(200 * time.Millisecond) // an image error handler would have run by now
		if title := eval[string](t, tab, `document.title`); title != "thrum" {
			t.Fatalf("the hostile result ran: title %q", title)
		}
		if n := eval[int](t, tab, `document.querySelectorAll('#results .body *:not(mark)').length`); n != 0 {
			t.Fatalf("the hostile snippet made %d elements", n)
		}
		if text := eval[string](t, tab, `document.querySelector('#results .body').textContent`); !strings.Contains(text, "<script>document.title='pwned2'</script>") {
			t.Fatalf("the hostile snippet is not shown as text: %q", text)
		}

		search("(wombat")
		if s := status(); !strings.HasPrefix(s, "Malformed query: the ( at character 1 is not closed") {
			t.Fatalf("a malformed query shows %q", s)
		}

		// The page's own highlight splitting, on a snippet with astral
		// characters around the marks and a range past its end.
		got := eval[[]map[string]any](t, tab, `import('/assets/highlight.js').then(({splitHighlights}) => splitHighlights('😀 deploy 𝄞x ok', [[2, 8], [9, 11], [13, 99]]))`)
		want := []string{"😀 |false", "deploy|true", " |false", "𝄞x|true", " o|false", "k|true"}
		var parts []string
		for _, p := range got {
			parts = append(parts, fmt.Sprintf("%s|%v", p["text"], p["mark"]))
		}
		if strings.Join(parts, ",") != strings.Join(want, ",") {
			t.Errorf("splitHighlights gave %q, want %q", parts, want)
		}
		do(t, tab, "feed", chromedp.Click(chromedp.CSS(`.tabs button[data-view="feed"]`)))
	})

	t.Run("tables and nested lists", func(t *testing.T) {
		// The page's own renderer: a table becomes a table, not lines of
		// |, and indented items nest.
		shape := func(md string) map[string]any {
			t.Helper()
			in, _ := json.Marshal(md)
			return eval[map[string]any](t, tab, `import('/assets/markdown.js').then(({render}) => {
				const d = document.createElement('div');
				d.append(render(`+string(in)+`));
				const texts = (sel) => [...d.querySelectorAll(sel)].map(e => e.firstChild ? e.firstChild.textContent : '');
				return {
					th: texts('table thead th'), td: texts('table tbody td'),
					align: [...d.querySelectorAll('table thead th')].map(e => e.className),
					pipes: [...d.querySelectorAll('p')].some(p => p.textContent.includes('|')),
					top: texts(':scope > ul > li, :scope > ol > li'),
					nested: texts(':scope > ul > li > ul > li, :scope > ol > li > ul > li, :scope > ol > li > ol > li'),
					deeper: texts(':scope > ul > li > ul > li > ul > li'),
					lists: d.querySelectorAll('ul, ol').length,
				};
			})`)
		}
		strs := func(v any) string {
			var out []string
			for _, x := range v.([]any) {
				out = append(out, fmt.Sprint(x))
			}
			return strings.Join(out, ",")
		}
		got := shape("Results:\n\n| suite | passed | failed |\n|:------|:------:|-------:|\n| auth | 45 | 2 |\n| api \\| v2 | 12 | 0 |")
		if strs(got["th"]) != "suite,passed,failed" || strs(got["td"]) != "auth,45,2,api | v2,12,0" || got["pipes"] == true {
			t.Errorf("a table rendered as %v", got)
		}
		if strs(got["align"]) != ",center,right" {
			t.Errorf("the table's alignments are %v, want none, center, right", got["align"])
		}
		got = shape("- one\n  - one.a\n    - one.a.i\n  - one.b\n- two")
		if strs(got["top"]) != "one,two" || strs(got["nested"]) != "one.a,one.b" || strs(got["deeper"]) != "one.a.i" || got["lists"] != float64(3) {
			t.Errorf("a nested list rendered as %v", got)
		}
		got = shape("1. first\n   - detail\n2. second")
		if strs(got["top"]) != "first,second" || strs(got["nested"]) != "detail" || got["lists"] != float64(2) {
			t.Errorf("a list in an ordered list rendered as %v", got)
		}

		// In the feed, from the CLI.
		id := c.thrum(t, "alice", "send", "--quiet", "--to", "@crew", "| step | state |\n|---|---|\n| build | green |\n\n- deploy\n  - canary\n  - everywhere")
		item := fmt.Sprintf(`document.querySelector('#feed li[data-id=%q]')`, id)
		waitFor(t, tab, "the table in the feed", item+` && `+item+`.querySelectorAll('.body table td').length === 2`)
		if n := eval[int](t, tab, item+`.querySelectorAll('.body ul ul li').length`); n != 2 {
			t.Errorf("the feed shows %d nested items, want 2", n)
		}
	})

	t.Run("long bodies collapse", func(t *testing.T) {
		long := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 45) // 2,025 characters
		id := c.thrum(t, "alice", "send", "--quiet", "--to", "@crew", long+"THE END")
		item := fmt.Sprintf(`document.querySelector('#feed li[data-id=%q]')`, id)
		waitFor(t, tab, "the long message", item)
		body := item + `.querySelector('.body')`
		collapsed := eval[float64](t, tab, body+`.getBoundingClientRect().height`)
		view := eval[float64](t, tab, `window.innerHeight`)
		if !eval[bool](t, tab, body+`.classList.contains('collapsed')`) || collapsed > view/3 {
			t.Fatalf("a 2,000-character body is %.0f px high in a %.0f px window, want it collapsed", collapsed, view)
		}
		if b := eval[string](t, tab, item+`.querySelector('footer button.more').textContent`); b != "Show more" {
			t.Fatalf("the collapsed body's button says %q", b)
		}
		do(t, tab, "show more", chromedp.Click(chromedp.CSS(fmt.Sprintf(`#feed li[data-id=%q] footer button.more`, id))))
		full := eval[float64](t, tab, body+`.getBoundingClientRect().height`)
		if eval[bool](t, tab, body+`.classList.contains('collapsed')`) || full <= collapsed ||
			eval[float64](t, tab, body+`.scrollHeight`) > full+1 {
			t.Errorf("after Show more the body is %.0f px (collapsed %.0f), want all of it", full, collapsed)
		}
		if b := eval[string](t, tab, item+`.querySelector('footer button.more').textContent`); b != "Show less" {
			t.Errorf("the expanded body's button says %q", b)
		}
		// A short body has no button.
		short := c.thrum(t, "alice", "send", "--quiet", "--to", "@crew", "short and sweet")
		waitFor(t, tab, "the short message", fmt.Sprintf(`document.querySelector('#feed li[data-id=%q]')`, short))
		if eval[bool](t, tab, fmt.Sprintf(`!!document.querySelector('#feed li[data-id=%q] button.more, #feed li[data-id=%q] .collapsed')`, short, short)) {
			t.Error("a short body is collapsed")
		}
	})

	t.Run("reply chains are threads", func(t *testing.T) {
		// thrum reply to a message in no thread makes a reply chain, which
		// the CLI's inbox shows grouped with ↳: the threads view lists it.
		first := c.thrum(t, "alice", "send", "--quiet", "--to", "@bob", "Is the migration reversible?")
		reply := c.thrum(t, "bob", "reply", first, "Yes, with the down script", "--quiet")
		again := c.thrum(t, "alice", "reply", reply, "Thanks, merging", "--quiet")
		waitFor(t, tab, "the replies in the feed", fmt.Sprintf(`document.querySelector('#feed li[data-id=%q]')`, again))
		do(t, tab, "threads", chromedp.Click(chromedp.CSS(`.tabs button[data-view="threads"]`)))
		entry := fmt.Sprintf(`document.querySelector('#threads li[data-chain=%q]')`, first)
		waitFor(t, tab, "the reply chain in the list", entry)
		if text := eval[string](t, tab, entry+`.textContent`); !strings.Contains(text, "Is the migration reversible?") || !strings.Contains(text, "replies to alice") {
			t.Errorf("the chain's entry says %q", text)
		}
		eval[bool](t, tab, `(`+entry+`.querySelector('button').click(), true)`)
		waitFor(t, tab, "the chain's messages", `document.querySelectorAll('#thread .msg').length === 3`)
		ids := eval[[]string](t, tab, `[...document.querySelectorAll('#thread .msg')].map(m => m.dataset.id + (m.classList.contains('reply') ? ' reply' : ''))`)
		if strings.Join(ids, ",") != first+","+reply+" reply,"+again+" reply" {
			t.Errorf("the chain shows %q, want %s then its two replies, in order", ids, first)
		}
		if note := eval[string](t, tab, `document.querySelector('#thread .note').textContent`); !strings.Contains(note, "3 messages") {
			t.Errorf("the chain's note says %q", note)
		}
		do(t, tab, "feed", chromedp.Click(chromedp.CSS(`.tabs button[data-view="feed"]`)))
	})

	t.Run("receipt marks update live", func(t *testing.T) {
		id := c.thrum(t, "alice", "send", "--quiet", "--to", "@bob", "--ack-within", "1h", "Receipts, please")
		item := fmt.Sprintf(`document.querySelector('#feed li[data-id=%q]')`, id)
		marks := item + `.querySelector('footer > .receipts')`
		waitFor(t, tab, "the queued marks", item+` && `+marks+` && `+marks+`.dataset.delivered === '0' && `+marks+`.textContent.includes('ack asked')`)
		if summary := eval[string](t, tab, marks+`.querySelector('summary').textContent`); summary != "0/1 delivered · 0/1 acknowledged · ack asked" {
			t.Errorf("queued marks %q: no check mark before anything is delivered", summary)
		}
		// The same element must change: pushed receipts redraw the marks
		// in place, with no reload of the message.
		eval[bool](t, tab, `(`+item+`.dataset.probe = 'kept', true)`)
		c.thrum(t, "bob", "inbox", "--unread", "--mark-read")
		waitFor(t, tab, "the delivery mark", marks+`.dataset.delivered === '1' && `+marks+`.dataset.acked === '0'`)
		c.thrum(t, "bob", "ack", id, "--note", "on it")
		waitFor(t, tab, "the acknowledgement mark", marks+`.dataset.acked === '1'`)
		if probe := eval[string](t, tab, item+`.dataset.probe`); probe != "kept" {
			t.Fatalf("the message was rendered anew (probe %q): the marks must update in place", probe)
		}
		summary := eval[string](t, tab, marks+`.querySelector('summary').textContent`)
		if summary != "✓ 1/1 delivered · ✓✓ 1/1 acknowledged" {
			t.Errorf("marks %q", summary)
		}
		line := eval[string](t, tab, marks+`.querySelector('.receipt[data-agent="bob"]').textContent`)
		for _, want := range []string{"bob: acknowledged", "via mark read", "“on it”"} {
			if !strings.Contains(line, want) {
				t.Errorf("bob's receipt line %q lacks %q", line, want)
			}
		}
		if title := eval[string](t, tab, marks+`.querySelector('summary').title`); title != line {
			t.Errorf("hover text %q, want the receipt line %q", title, line)
		}
	})

	t.Run("hidden characters shown escaped", func(t *testing.T) {
		// A right-to-left override, a TAG character and an escape sequence
		// in a body are shown as escapes in the feed, never acted on or
		// hidden; an emoji's joiner and selector still draw the emoji.
		id := c.thrum(t, "alice", "send", "--quiet", "--to", "@everyone", "pay \u202eevil\u202c \U000e0041 \x1b]0;title\x07 ok")
		item := fmt.Sprintf(`document.querySelector('#feed li[data-id=%q]')`, id)
		waitFor(t, tab, "the message with hidden characters", item)
		text := eval[string](t, tab, item+`.querySelector('.body').textContent`)
		if !strings.Contains(text, `\u202eevil\u202c`) || !strings.Contains(text, `\U000e0041`) || !strings.Contains(text, `\x1b]0;title\x07`) {
			t.Errorf("the feed shows %q, want the hidden characters as escapes", text)
		}
		if strings.ContainsAny(text, "\u202e\u202c\U000e0041\x1b\x07") {
			t.Errorf("the feed shows a hidden character raw: %q", text)
		}
		for in, want := range map[string]string{
			"a\u00adb\ufe00c\u200bd": `a\u00adb\ufe00c\u200bd`,
			"x\r\ny\tz\u0085":        "x\ny\tz\\u0085",
			"👩\u200d💻 ❤\ufe0f":       "👩\u200d💻 ❤\ufe0f",
			"a\u200d💻":               `a\u200d💻`,
		} {
			q, _ := json.Marshal(in)
			if got := eval[string](t, tab, `import('/assets/markdown.js').then(({shown}) => shown(`+string(q)+`))`); got != want {
				t.Errorf("shown(%q) = %q, want %q", in, got, want)
			}
		}
	})

	t.Run("layout", func(t *testing.T) {
		fits := `document.documentElement.scrollWidth <= window.innerWidth && document.querySelector('#compose').getBoundingClientRect().bottom <= window.innerHeight + 1`
		do(t, tab, "1280×800", chromedp.EmulateViewport(1280, 800))
		waitFor(t, tab, "no overflow at 1280×800", fits)
		shot(t, tab, "feed-1280x800.png")
		do(t, tab, "narrow", chromedp.EmulateViewport(390, 800))
		waitFor(t, tab, "no sideways overflow at 390 px", fits)
		shot(t, tab, "feed-narrow.png")
		light := eval[string](t, tab, `getComputedStyle(document.body).backgroundColor`)
		do(t, tab, "dark", chromedp.EmulateViewport(1280, 800), chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
			_, err := chromedp.Call(ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
				Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "dark"}}})
			return err
		}))
		dark := eval[string](t, tab, `getComputedStyle(document.body).backgroundColor`)
		if dark == light {
			t.Errorf("dark scheme background %s equals light", dark)
		}
		shot(t, tab, "feed-dark.png")
	})

	t.Run("survives a daemon restart", func(t *testing.T) {
		// The page goes offline and comes back live, still signed in: the
		// daemon binds its port again and keeps the web session.
		eval[bool](t, tab, `(() => { window.wentOffline = false; new MutationObserver(() => { if (document.querySelector('#conn').dataset.state === 'offline') window.wentOffline = true; }).observe(document.querySelector('#conn'), {attributes: true}); return true; })()`)
		c.thrum(t, "", "daemon", "restart")
		waitFor(t, tab, "the console live again after the restart", `window.wentOffline && document.querySelector('#conn').dataset.state === 'live' && !document.querySelector('#app').hidden`)
		id := c.thrum(t, "alice", "send", "--quiet", "--to", "@bob", "After the restart")
		waitFor(t, tab, "a message sent after the restart", fmt.Sprintf(`document.querySelector('#feed li[data-id=%q]')`, id))
		shot(t, tab, "after-restart.png")

		// Its port taken, the daemon starts on another one, which the page
		// cannot know: after 10 s it says where to go.
		c.thrum(t, "", "daemon", "stop")
		l, err := net.Listen("tcp", strings.TrimSuffix(strings.TrimPrefix(c.base, "http://"), "/"))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		if out := c.thrum(t, "", "daemon", "start"); !strings.Contains(out, "was taken, so it moved to") {
			t.Errorf("daemon start on a taken port says:\n%s", out)
		}
		deadline := time.Now().Add(20 * time.Second)
		for !eval[bool](t, tab, `document.querySelector('#conn').textContent.includes('restarted on another port: run thrum web')`) {
			if time.Now().After(deadline) {
				t.Fatalf("the page says %q 20 s after its daemon moved", eval[string](t, tab, `document.querySelector('#conn').textContent`))
			}
			time.Sleep(100 * time.Millisecond)
		}
		shot(t, tab, "daemon-moved.png")
	})
}

// shot saves a screenshot of the tab in the system's temporary directory,
// kept after the test, and logs its path.
func shot(t *testing.T, tab context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(tab, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(os.TempDir(), "thrum-webui-"+name)
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", p)
}
