package hosttest

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// The model APIs the mock speaks, by the path a host posts to.
const (
	APIAnthropic = "anthropic" // POST /v1/messages (SSE when "stream")
	APIResponses = "responses" // POST /v1/responses (SSE)
	APIGemini    = "gemini"    // POST /v1beta/models/M:generateContent, :streamGenerateContent
	APIChat      = "chat"      // POST /v1/chat/completions (SSE when "stream")
)

// Request is one request a host sent to the mock model, as received.
type Request struct {
	At   time.Time
	API  string // one of the API constants, "" for a path the mock does not serve
	Path string
	Body []byte
	// Tools are the names of the tools the request declared.
	Tools []string
	// Strings are every string value of the body, in document order: what
	// the model would read, with the JSON escapes undone.
	Strings []string
	// Conversation names the conversation the request belongs to (see
	// conversationKey); requests of one conversation repeat its history.
	Conversation string
}

// Text is the request's strings joined by newlines.
func (r *Request) Text() string { return strings.Join(r.Strings, "\n") }

// Count is how many times s occurs in the request's strings.
func (r *Request) Count(s string) int {
	n := 0
	for _, v := range r.Strings {
		n += strings.Count(v, s)
	}
	return n
}

// Tool returns the declared tool whose name is name or ends in "_"+name
// (hosts prefix an MCP server's tools: mcp__thrum__, thrum_, ...), or "".
func (r *Request) Tool(name string) string {
	for _, t := range r.Tools {
		if t == name || strings.HasSuffix(t, "_"+name) || strings.HasSuffix(t, nsSep+name) {
			return t
		}
	}
	return ""
}

// ServerTools returns the tools of the MCP server named server that the
// request offers the model, by their own names (without the host's
// prefix), sorted: those it declares (mcp__SERVER__x, a plugin's
// mcp__plugin_P_SERVER__x, Codex's mcp__SERVER/x, Gemini CLI's
// mcp_SERVER_x, opencode's SERVER_x) and those Claude Code names in its
// text, one a line, for the model to load first (it defers MCP tools).
func (r *Request) ServerTools(server string) []string {
	q := regexp.QuoteMeta(server)
	declared := regexp.MustCompile(`^(?:mcp__(?:plugin_[A-Za-z0-9-]+_)?` + q + `(?:__|` + nsSep + `)|mcp_` + q + `_|` + q + `_)(\w+)$`)
	// One name a line: the list of deferred tools, not a mention.
	named := regexp.MustCompile(`(?m)^mcp__(?:plugin_[A-Za-z0-9-]+_)?` + q + `__(\w+)$`)
	seen := map[string]bool{}
	for _, t := range r.Tools {
		if m := declared.FindStringSubmatch(t); m != nil {
			seen[m[1]] = true
		}
	}
	for _, v := range r.Strings {
		for _, m := range named.FindAllStringSubmatch(v, -1) {
			seen[m[1]] = true
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

// Reply is what the mock model answers: Text, or a call of the tool
// Call (matched as Request.Tool does) with the JSON arguments Args.
type Reply struct {
	Text string
	Call string
	Args string
}

// Model is a mock of the four model APIs on one loopback HTTP server. It
// logs every request and answers each with Script's reply (an empty
// text when Script is nil). It is safe for concurrent use.
type Model struct {
	URL string // http://127.0.0.1:PORT, without a trailing slash

	srv    *httptest.Server
	mu     sync.Mutex
	reqs   []*Request
	script func(*Request) Reply
	notify chan struct{}
}

// NewModel starts a mock model, stopped when the test ends.
func NewModel(t testing.TB) *Model {
	m := &Model{notify: make(chan struct{}, 1)}
	m.srv = httptest.NewServer(http.HandlerFunc(m.serve))
	m.URL = m.srv.URL
	t.Cleanup(m.srv.Close)
	return m
}

// SetScript sets how the model answers from now on.
func (m *Model) SetScript(f func(*Request) Reply) {
	m.mu.Lock()
	m.script = f
	m.mu.Unlock()
}

// Steps answers the requests that declare tools (an agent's turns, not
// a host's side requests such as a title) with the steps in order, each
// step once, then with text "done". A step calling a tool the request
// does not declare answers text saying so, which fails the case that
// expected the call. Claude Code declares MCP tools only by name, or not
// at all in a turn a monitor started, until the model loads them: as a
// model does, a step first loads its tool through ToolSearch, by the
// listed name, else by a search for the tool's name, once.
func Steps(steps ...Reply) func(*Request) Reply {
	var mu sync.Mutex
	searched := false
	return func(r *Request) Reply {
		mu.Lock()
		defer mu.Unlock()
		if len(r.Tools) == 0 || len(steps) == 0 {
			return Reply{Text: "done"}
		}
		s := steps[0]
		if s.Call != "" && r.Tool(s.Call) == "" && r.Tool("ToolSearch") != "" && !searched {
			searched = true // the step stays for the next request
			query := s.Call
			if name := deferredTool(r, s.Call); name != "" {
				query = "select:" + name
			}
			return Reply{Call: "ToolSearch", Args: fmt.Sprintf(`{"query":%q,"max_results":5}`, query)}
		}
		steps, searched = steps[1:], false
		return s
	}
}

// deferredTool finds an MCP tool the request lists for loading but does
// not declare (mcp__SERVER__name alone on a line, as ServerTools reads
// it), or "". A mere mention (a sub-agent's tools) is not one: searching
// for it would never end.
func deferredTool(r *Request, name string) string {
	re := regexp.MustCompile(`(?m)^mcp__[A-Za-z0-9_-]+__` + regexp.QuoteMeta(name) + `$`)
	for _, v := range r.Strings {
		if m := re.FindString(v); m != "" {
			return m
		}
	}
	return ""
}

// Requests returns the requests so far, oldest first.
func (m *Model) Requests() []*Request {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]*Request(nil), m.reqs...)
}

// Turns returns the requests so far that declared tools: an agent's
// turns, without the side requests hosts make (titles, quota checks).
func (m *Model) Turns() []*Request {
	var out []*Request
	for _, r := range m.Requests() {
		if len(r.Tools) > 0 {
			out = append(out, r)
		}
	}
	return out
}

// WaitFor waits until a request satisfies ok or d passes, and returns it
// (nil on timeout). It looks at requests already received too.
func (m *Model) WaitFor(d time.Duration, ok func(*Request) bool) *Request {
	deadline := time.Now().Add(d)
	for {
		for _, r := range m.Requests() {
			if ok(r) {
				return r
			}
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil
		}
		select {
		case <-m.notify:
		case <-time.After(min(left, 100*time.Millisecond)):
		}
	}
}

func (m *Model) serve(w http.ResponseWriter, hr *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(hr.Body, 64<<20))
	r := &Request{At: time.Now(), Path: hr.URL.Path, Body: body}
	switch p := hr.URL.Path; {
	case strings.HasSuffix(p, "/messages"):
		r.API = APIAnthropic
	case strings.HasSuffix(p, "/responses"):
		r.API = APIResponses
	case strings.HasSuffix(p, "/chat/completions"):
		r.API = APIChat
	case strings.Contains(p, ":generateContent"), strings.Contains(p, ":streamGenerateContent"):
		r.API = APIGemini
	}
	var doc any
	if json.Unmarshal(body, &doc) == nil {
		r.Strings = strs(doc, nil)
		r.Tools = toolNames(r.API, doc)
		r.Conversation = conversationKey(r.API, doc)
	}
	m.mu.Lock()
	m.reqs = append(m.reqs, r)
	script := m.script
	m.mu.Unlock()
	select {
	case m.notify <- struct{}{}:
	default:
	}
	reply := Reply{Text: "done"}
	if script != nil {
		reply = script(r)
	}
	if reply.Call != "" {
		if name := r.Tool(reply.Call); name != "" {
			reply.Call = name
		} else {
			reply = Reply{Text: fmt.Sprintf("mock: the request declares no tool %q", reply.Call)}
		}
	}
	if reply.Args == "" {
		reply.Args = "{}"
	}
	top, _ := doc.(map[string]any)
	stream, _ := top["stream"].(bool)
	switch r.API {
	case APIAnthropic:
		if strings.HasSuffix(hr.URL.Path, "/count_tokens") {
			writeJSON(w, map[string]any{"input_tokens": 10})
			return
		}
		anthropicReply(w, reply, stream)
	case APIResponses:
		responsesReply(w, reply)
	case APIChat:
		chatReply(w, reply, stream)
	case APIGemini:
		geminiReply(w, reply, strings.Contains(hr.URL.Path, ":stream"))
	default:
		if strings.HasSuffix(hr.URL.Path, ":countTokens") {
			writeJSON(w, map[string]any{"totalTokens": 10})
			return
		}
		http.NotFound(w, hr)
	}
}

// strs appends every string value under v, in document order (object
// keys sorted, as encoding/json decodes them into a map: the order within
// one object does not matter to a count).
func strs(v any, out []string) []string {
	switch v := v.(type) {
	case string:
		out = append(out, v)
	case []any:
		for _, e := range v {
			out = strs(e, out)
		}
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(v)) {
			out = strs(v[k], out)
		}
	}
	return out
}

// nsSep joins a tool namespace and a tool's name in Request.Tools.
const nsSep = "/"

func toolNames(api string, doc any) []string {
	var names []string
	top, _ := doc.(map[string]any)
	tools, _ := top["tools"].([]any)
	for _, t := range tools {
		t, _ := t.(map[string]any)
		switch {
		case api == APIGemini:
			decls, _ := t["functionDeclarations"].([]any)
			for _, d := range decls {
				if n, _ := d.(map[string]any)["name"].(string); n != "" {
					names = append(names, n)
				}
			}
		case t["function"] != nil: // chat completions
			if n, _ := t["function"].(map[string]any)["name"].(string); n != "" {
				names = append(names, n)
			}
		case t["type"] == "namespace": // Codex groups an MCP server's tools
			ns, _ := t["name"].(string)
			inner, _ := t["tools"].([]any)
			for _, f := range inner {
				if n, _ := f.(map[string]any)["name"].(string); n != "" {
					names = append(names, ns+nsSep+n)
				}
			}
		default:
			if n, _ := t["name"].(string); n != "" {
				names = append(names, n)
			}
		}
	}
	return names
}

// conversationKey is what the host itself names the conversation by
// (Claude Code's metadata.user_id carries its session, Codex's
// prompt_cache_key is its thread), else the request's first user
// message: a test gives each run its own prompt.
func conversationKey(api string, doc any) string {
	top, _ := doc.(map[string]any)
	if md, _ := top["metadata"].(map[string]any); md != nil {
		if s, _ := md["user_id"].(string); s != "" {
			return s
		}
	}
	if s, _ := top["prompt_cache_key"].(string); s != "" {
		return s
	}
	var first any
	switch api {
	case APIAnthropic, APIChat:
		ms, _ := top["messages"].([]any)
		for _, m := range ms {
			if m, _ := m.(map[string]any); m["role"] == "user" {
				first = m
				break
			}
		}
	case APIResponses:
		first = top["input"]
	case APIGemini:
		cs, _ := top["contents"].([]any)
		if len(cs) > 0 {
			first = cs[0]
		}
	}
	return strings.Join(strs(first, nil), "\n")
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

// sse writes one server-sent event (no event line when name is "").
func sse(w http.ResponseWriter, name string, v any) {
	b, _ := json.Marshal(v)
	if name != "" {
		fmt.Fprintf(w, "event: %s\n", name)
	}
	fmt.Fprintf(w, "data: %s\n\n", b)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

func sseHeader(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
}

var replyID struct {
	sync.Mutex
	n int
}

func nextID(prefix string) string {
	replyID.Lock()
	defer replyID.Unlock()
	replyID.n++
	return fmt.Sprintf("%s_mock%06d", prefix, replyID.n)
}

func anthropicReply(w http.ResponseWriter, r Reply, stream bool) {
	var block map[string]any
	stop := "end_turn"
	if r.Call != "" {
		var input any
		json.Unmarshal([]byte(r.Args), &input)
		block = map[string]any{"type": "tool_use", "id": nextID("toolu"), "name": r.Call, "input": input}
		stop = "tool_use"
	} else {
		block = map[string]any{"type": "text", "text": r.Text}
	}
	usage := map[string]any{"input_tokens": 10, "output_tokens": 5, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
	msg := map[string]any{"id": nextID("msg"), "type": "message", "role": "assistant", "model": "claude-mock",
		"content": []any{block}, "stop_reason": stop, "stop_sequence": nil, "usage": usage}
	if !stream {
		writeJSON(w, msg)
		return
	}
	sseHeader(w)
	start := map[string]any{}
	for k, v := range msg {
		start[k] = v
	}
	start["content"], start["stop_reason"] = []any{}, nil
	sse(w, "message_start", map[string]any{"type": "message_start", "message": start})
	if r.Call != "" {
		sse(w, "content_block_start", map[string]any{"type": "content_block_start", "index": 0,
			"content_block": map[string]any{"type": "tool_use", "id": block["id"], "name": r.Call, "input": map[string]any{}}})
		sse(w, "content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
			"delta": map[string]any{"type": "input_json_delta", "partial_json": r.Args}})
	} else {
		sse(w, "content_block_start", map[string]any{"type": "content_block_start", "index": 0,
			"content_block": map[string]any{"type": "text", "text": ""}})
		sse(w, "content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
			"delta": map[string]any{"type": "text_delta", "text": r.Text}})
	}
	sse(w, "content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	sse(w, "message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil}, "usage": map[string]any{"output_tokens": 5}})
	sse(w, "message_stop", map[string]any{"type": "message_stop"})
}

func responsesReply(w http.ResponseWriter, r Reply) {
	id := nextID("resp")
	sseHeader(w)
	sse(w, "response.created", map[string]any{"type": "response.created", "response": map[string]any{"id": id}})
	var item map[string]any
	if r.Call != "" {
		item = map[string]any{"type": "function_call", "id": nextID("fc"), "call_id": nextID("call"), "name": r.Call, "arguments": r.Args}
		if ns, name, ok := strings.Cut(r.Call, nsSep); ok {
			item["namespace"], item["name"] = ns, name
		}
	} else {
		item = map[string]any{"type": "message", "role": "assistant", "id": nextID("msg"),
			"content": []any{map[string]any{"type": "output_text", "text": r.Text}}}
	}
	sse(w, "response.output_item.done", map[string]any{"type": "response.output_item.done", "item": item})
	sse(w, "response.completed", map[string]any{"type": "response.completed", "response": map[string]any{"id": id,
		"usage": map[string]any{"input_tokens": 10, "input_tokens_details": nil, "output_tokens": 5,
			"output_tokens_details": nil, "total_tokens": 15}}})
}

func chatReply(w http.ResponseWriter, r Reply, stream bool) {
	id := nextID("chatcmpl")
	msg := map[string]any{"role": "assistant", "content": r.Text}
	finish := "stop"
	if r.Call != "" {
		msg["content"] = nil
		msg["tool_calls"] = []any{map[string]any{"index": 0, "id": nextID("call"), "type": "function",
			"function": map[string]any{"name": r.Call, "arguments": r.Args}}}
		finish = "tool_calls"
	}
	usage := map[string]any{"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
	if !stream {
		writeJSON(w, map[string]any{"id": id, "object": "chat.completion", "created": time.Now().Unix(), "model": "mock",
			"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}}, "usage": usage})
		return
	}
	sseHeader(w)
	chunk := func(delta map[string]any, finish any, usage any) {
		c := map[string]any{"id": id, "object": "chat.completion.chunk", "created": time.Now().Unix(), "model": "mock",
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}}
		if usage != nil {
			c["usage"] = usage
		}
		sse(w, "", c)
	}
	chunk(msg, nil, nil)
	chunk(map[string]any{}, finish, usage)
	fmt.Fprint(w, "data: [DONE]\n\n")
}

func geminiReply(w http.ResponseWriter, r Reply, stream bool) {
	part := map[string]any{"text": r.Text}
	if r.Call != "" {
		var args any
		json.Unmarshal([]byte(r.Args), &args)
		part = map[string]any{"functionCall": map[string]any{"name": r.Call, "args": args}}
	}
	resp := map[string]any{
		"candidates": []any{map[string]any{"index": 0, "finishReason": "STOP",
			"content": map[string]any{"role": "model", "parts": []any{part}}}},
		"usageMetadata": map[string]any{"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15},
		"modelVersion":  "gemini-mock",
	}
	if !stream {
		writeJSON(w, resp)
		return
	}
	sseHeader(w)
	sse(w, "", resp)
}
