package thrum_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/internal/gitwork"
	"github.com/thrumhq/thrum/internal/thrumtest"
	"github.com/thrumhq/thrum/rpc"
)

// floodFrames is the number of junk frames sent on each transport.
const floodFrames = 10_000

// floodHeapGrowth bounds how much the heap in use may grow over a flood:
// generous, since it only has to catch a leak per frame (10,000 frames of
// up to a few hundred KiB would blow far past it).
const floodHeapGrowth = 64 << 20

// floodResult is the "code" of a successful reply in floodWant.codes.
const floodResult = 0

// floodWant is what the daemon must answer to one frame.
type floodWant struct {
	none     bool   // no reply at all: a notification, or a batch of them
	batch    bool   // the reply is an array, one element per code
	codes    []int  // error codes of the replies, floodResult for a success
	id       string // the raw id a single reply must carry; "" unchecked
	oversize bool   // over the size limit: the connection is closed
}

// floodCase is one frame and what it must get.
type floodCase struct {
	cat   string
	frame []byte
	want  floodWant
}

// member says what a frame (valid JSON) gets as a member of a batch: no
// entry for a notification, else the code of its entry.
func (c floodCase) member() (code int, none bool) {
	switch {
	case c.frame[0] == '[':
		return rpc.CodeInvalidRequest, false // batches do not nest
	case c.want.none:
		return 0, true
	default:
		return c.want.codes[0], false
	}
}

func floodSingle(cat string, frame string, code int, id string) floodCase {
	return floodCase{cat: cat, frame: []byte(frame), want: floodWant{codes: []int{code}, id: id}}
}

// floodGen makes junk frames from a seeded source, so every run sends
// the same ones.
type floodGen struct {
	r    *rand.Rand
	next int
}

// id returns a fresh request id, as raw JSON: a number or a string.
func (g *floodGen) id() string {
	g.next++
	if g.next%2 == 0 {
		return strconv.Itoa(g.next)
	}
	return strconv.Quote("f" + strconv.Itoa(g.next))
}

func (g *floodGen) pick(n int) int { return g.r.IntN(n) }

// req formats a request with a fresh id into tmpl (%[1]s is the id).
func (g *floodGen) req(cat, tmpl string, code int) floodCase {
	id := g.id()
	return floodSingle(cat, fmt.Sprintf(tmpl, id), code, id)
}

// Templates of requests, by what they must get. %[1]s is the id.
var (
	floodWrongTypes = []string{
		`{"jsonrpc":"2.0","id":%[1]s,"method":5}`,
		`{"jsonrpc":"2.0","id":%[1]s,"method":null}`,
		`{"jsonrpc":"2.0","id":%[1]s,"method":true}`,
		`{"jsonrpc":"2.0","id":%[1]s,"method":["health"]}`,
		`{"jsonrpc":"2.0","id":%[1]s,"method":{"name":"health"}}`,
		`{"jsonrpc":2,"id":%[1]s,"method":"health"}`,
		`{"jsonrpc":2.0,"id":%[1]s,"method":"health"}`,
		`{"jsonrpc":"2.1","id":%[1]s,"method":"health"}`,
		`{"jsonrpc":"1.0","id":%[1]s,"method":"health"}`,
		`{"jsonrpc":null,"id":%[1]s,"method":"health"}`,
		`{"id":%[1]s,"method":"health"}`,
		`{"JSONRPC":"2.0","id":%[1]s,"method":"health"}`,
		`{"jsonrpc":"2.0","id":%[1]s}`,
		`{"jsonrpc":"2.0","id":%[1]s,"Method":"health"}`,
		`{"jsonrpc":"2.0","id":%[1]s,"method":"health","params":"x"}`,
		`{"jsonrpc":"2.0","id":%[1]s,"method":"health","params":5}`,
		`{"jsonrpc":"2.0","id":%[1]s,"method":"health","params":true}`,
		`{"jsonrpc":"2.0","id":%[1]s,"method":"message.send","params":null}`, // params, if present, must be structured
		`{"jsonrpc":"2.0","id":%[1]s,"method":"health","params":null}`,
	}
	// Invalid ids: the reply's id is null.
	floodBadIDs = []string{
		`{"jsonrpc":"2.0","id":true,"method":"health"}`,
		`{"jsonrpc":"2.0","id":false,"method":"health"}`,
		`{"jsonrpc":"2.0","id":{"a":1},"method":"health"}`,
		`{"jsonrpc":"2.0","id":[1],"method":"health"}`,
		`{"jsonrpc":"2.0","id":[],"method":"message.send","params":{"content":"x"}}`,
	}
	// Valid JSON that is not a request object.
	floodNotObjects = []string{
		`"health"`, `42`, `-0.5e10`, `null`, `true`, `false`, `{}`, `{"a":1}`, `""`,
		`{"jsonrpc":"2.0"}`, `{"method":"health"}`,
	}
	floodBadParams = []string{
		`{"jsonrpc":"2.0","id":%[1]s,"method":"message.send","params":{"content":5}}`,
		`{"jsonrpc":"2.0","id":%[1]s,"method":"message.send","params":{"content":["x"]}}`,
		`{"jsonrpc":"2.0","id":%[1]s,"method":"message.send","params":{"content":{"text":"x"}}}`,
		`{"jsonrpc":"2.0","id":%[1]s,"method":"message.send","params":{"content":"x","mentions":"bob"}}`,
		`{"jsonrpc":"2.0","id":%[1]s,"method":"message.send","params":{"content":"x","mentions":[5]}}`,
		`{"jsonrpc":"2.0","id":%[1]s,"method":"message.send","params":{"content":"x","scopes":{"type":"module"}}}`,
		`{"jsonrpc":"2.0","id":%[1]s,"method":"message.send","params":{"content":"x","priority":1}}`,
		`{"jsonrpc":"2.0","id":%[1]s,"method":"message.send","params":{"content":"x","disclose":"yes"}}`,
		`{"jsonrpc":"2.0","id":%[1]s,"method":"message.send","params":[1,2]}`,
		`{"jsonrpc":"2.0","id":%[1]s,"method":"message.send","params":["hello"]}`,
		`{"jsonrpc":"2.0","id":%[1]s,"method":"message.list","params":{"page_size":"ten"}}`,
		`{"jsonrpc":"2.0","id":%[1]s,"method":"message.list","params":{"page_size":1.5}}`,
		`{"jsonrpc":"2.0","id":%[1]s,"method":"message.list","params":{"page_size":-1}}`,
		`{"jsonrpc":"2.0","id":%[1]s,"method":"message.list","params":{"page_size":1000000}}`,
		`{"jsonrpc":"2.0","id":%[1]s,"method":"message.list","params":{"page":-3}}`,
		`{"jsonrpc":"2.0","id":%[1]s,"method":"message.list","params":{"sort_order":"sideways"}}`,
		`{"jsonrpc":"2.0","id":%[1]s,"method":"message.list","params":{"unread":"yes"}}`,
		`{"jsonrpc":"2.0","id":%[1]s,"method":"message.list","params":{"scope":"module:auth"}}`,
		`{"jsonrpc":"2.0","id":%[1]s,"method":"message.get","params":{"message_id":5}}`,
		`{"jsonrpc":"2.0","id":%[1]s,"method":"message.get","params":{}}`,
		`{"jsonrpc":"2.0","id":%[1]s,"method":"message.edit","params":{"message_id":"m","content":5}}`,
		`{"jsonrpc":"2.0","id":%[1]s,"method":"message.markRead","params":{"message_ids":"m"}}`,
		`{"jsonrpc":"2.0","id":%[1]s,"method":"agent.register","params":{"name":{},"role":"x","module":"y"}}`,
		`{"jsonrpc":"2.0","id":%[1]s,"method":"agent.register","params":{"role":5,"module":"y"}}`,
		`{"jsonrpc":"2.0","id":%[1]s,"method":"agent.register","params":{"name":"Bad Name","role":"x","module":"y"}}`,
		`{"jsonrpc":"2.0","id":%[1]s,"method":"auth","params":{"token":5}}`,
		`{"jsonrpc":"2.0","id":%[1]s,"method":"auth","params":{"token":["a"]}}`,
		`{"jsonrpc":"2.0","id":%[1]s,"method":"subscribe","params":{"all":"yes"}}`,
		`{"jsonrpc":"2.0","id":%[1]s,"method":"group.create","params":{"name":7}}`,
		`{"jsonrpc":"2.0","id":%[1]s,"method":"session.start","params":{"agent_id":false}}`,
		`{"jsonrpc":"2.0","id":%[1]s,"method":"health","params":[]}`,
		`{"jsonrpc":"2.0","id":%[1]s,"method":"agent.list","params":[{"role":"x"}]}`,
	}
	floodUnknownMethods = []string{
		"", "nope", "message.sendx", "Message.Send", "MESSAGE.LIST", "health ", " health",
		"rpc.discover", "system.listMethods", "__proto__", "constructor", "toString",
		"sync.status", "sync.force", "../health", "message..send", "message.send\u0000",
		"notification.message",
	}
	// Well-formed calls that need nothing: they must succeed.
	floodValid = []string{
		`{"jsonrpc":"2.0","id":%[1]s,"method":"health"}`,
		`{"jsonrpc":"2.0","id":%[1]s,"method":"health","params":{}}`,
		`{"jsonrpc":"2.0","id":%[1]s,"method":"agent.list"}`,
		`{"jsonrpc":"2.0","id":%[1]s,"method":"message.list","params":{"page_size":1}}`,
		`{"jsonrpc":"2.0","id":%[1]s,"method":"message.list","params":{"unknown_field":[1,{"x":null}]}}`,
		`{"jsonrpc":"2.0","id":%[1]s,"method":"group.list"}`,
		` { "jsonrpc" : "2.0" , "id" : %[1]s , "method" : "health" } `,
	}
	// Well-formed calls that act as an agent, with none given: refused,
	// and nothing written. (Not group changes: on the Unix socket those
	// need no agent, being the owner's.)
	floodNoIdentity = []string{
		`{"jsonrpc":"2.0","id":%[1]s,"method":"message.send","params":{"content":"junk","mentions":["bob"]}}`,
		`{"jsonrpc":"2.0","id":%[1]s,"method":"subscribe","params":{"all":true}}`,
		`{"jsonrpc":"2.0","id":%[1]s,"method":"thread.create","params":{"title":"junk"}}`,
		`{"jsonrpc":"2.0","id":%[1]s,"method":"auth","params":{"token":"not-a-token"}}`,
	}
	// Notifications (no id): never answered, even when wrong.
	floodNotifications = []string{
		`{"jsonrpc":"2.0","method":"health"}`,
		`{"jsonrpc":"2.0","method":"nope"}`,
		`{"jsonrpc":"2.0","method":"message.send","params":{"content":5}}`,
		`{"jsonrpc":"2.0","method":"message.send","params":{"content":"junk","mentions":["bob"]}}`,
		`{"jsonrpc":"2.0","ID":1,"method":"message.list"}`, // "ID" is not "id"
		`{"jsonrpc":"2.0","method":"thread.create","params":{"title":"junk"}}`,
	}
	// Bases that truncation cuts into invalid JSON.
	floodBases = []string{
		`{"jsonrpc":"2.0","id":1,"method":"health"}`,
		`{"jsonrpc":"2.0","id":"abc","method":"message.send","params":{"caller_agent_id":"alice","content":"hello world","mentions":["@bob"]}}`,
		`{"jsonrpc":"2.0","id":2,"method":"message.list","params":{"page_size":10,"scope":{"type":"module","value":"auth"}}}`,
		`[{"jsonrpc":"2.0","id":3,"method":"health"},{"jsonrpc":"2.0","id":4,"method":"agent.list"}]`,
		`{"jsonrpc":"2.0","id":5,"method":"subscribe","params":{"mention_role":"bob"}}`,
	}
)

// floodCategories, with their weights out of the total.
var floodCategories = []struct {
	name   string
	weight int
}{
	{"truncated", 12}, {"wrong-type", 10}, {"bad-id", 3}, {"not-object", 4}, {"huge-number", 5},
	{"deep", 4}, {"invalid-utf8", 6}, {"bad-params", 14}, {"unknown-method", 7}, {"valid", 4},
	{"no-identity", 3}, {"notification", 3}, {"batch", 8}, {"empty-batch", 1}, {"random-bytes", 14},
	{"token-soup", 4},
}

func (g *floodGen) category() string {
	total := 0
	for _, c := range floodCategories {
		total += c.weight
	}
	n := g.pick(total)
	for _, c := range floodCategories {
		if n < c.weight {
			return c.name
		}
		n -= c.weight
	}
	panic("unreachable")
}

// frame makes the i-th frame of a flood.
func (g *floodGen) frame(i int) floodCase {
	if i%2500 == 1249 { // a few over the size limit
		return floodCase{cat: "oversize", frame: paddedHealth(thrum.DefaultMaxRequestBytes + 1 + g.pick(4096)), want: floodWant{oversize: true}}
	}
	if i%1000 == 499 { // a few large but under the limit
		return g.one("long-string")
	}
	cat := g.category()
	if cat == "batch" {
		return g.batch()
	}
	return g.one(cat)
}

// one makes a frame of a category other than batch.
func (g *floodGen) one(cat string) floodCase {
	switch cat {
	case "truncated":
		base := floodBases[g.pick(len(floodBases))]
		var b string
		if g.pick(2) == 0 {
			b = base[:1+g.pick(len(base)-1)]
		} else {
			b = base[1+g.pick(len(base)-1):]
		}
		return floodSingle(cat, b, rpc.CodeParseError, "null")
	case "wrong-type":
		return g.req(cat, floodWrongTypes[g.pick(len(floodWrongTypes))], rpc.CodeInvalidRequest)
	case "bad-id":
		return floodSingle(cat, floodBadIDs[g.pick(len(floodBadIDs))], rpc.CodeInvalidRequest, "null")
	case "not-object":
		return floodSingle(cat, floodNotObjects[g.pick(len(floodNotObjects))], rpc.CodeInvalidRequest, "null")
	case "huge-number":
		return g.hugeNumber()
	case "deep":
		return g.deep()
	case "invalid-utf8":
		return g.invalidUTF8()
	case "bad-params":
		return g.req(cat, floodBadParams[g.pick(len(floodBadParams))], rpc.CodeInvalidParams)
	case "unknown-method":
		m := floodUnknownMethods[g.pick(len(floodUnknownMethods))]
		if g.pick(4) == 0 {
			m = g.letters(1 + g.pick(64))
		}
		q, _ := json.Marshal(m)
		return g.req(cat, `{"jsonrpc":"2.0","id":%[1]s,"method":`+string(q)+`}`, rpc.CodeMethodNotFound)
	case "valid":
		return g.req(cat, floodValid[g.pick(len(floodValid))], floodResult)
	case "no-identity":
		// A wrong credential to auth is -32002 too (and costs its
		// connection a second: there are few).
		return g.req(cat, floodNoIdentity[g.pick(len(floodNoIdentity))], rpc.CodeUnauthenticated)
	case "notification":
		return floodCase{cat: cat, frame: []byte(floodNotifications[g.pick(len(floodNotifications))]), want: floodWant{none: true}}
	case "empty-batch":
		return floodSingle(cat, []string{`[]`, `[ ]`, "[\t]", ` [] `}[g.pick(4)], rpc.CodeInvalidRequest, "null")
	case "random-bytes":
		for {
			b := make([]byte, 1+g.pick(300))
			for i := range b {
				b[i] = byte(g.r.Uint32())
				if b[i] == '\n' {
					b[i] = 'x' // a newline would make two frames on a stream
				}
			}
			if invalidJSON(b) {
				return floodCase{cat: cat, frame: b, want: floodWant{codes: []int{rpc.CodeParseError}, id: "null"}}
			}
		}
	case "token-soup":
		tokens := []string{`{`, `}`, `[`, `]`, `:`, `,`, `"`, `"jsonrpc"`, `"2.0"`, `"id"`, `"method"`,
			`"health"`, `"params"`, `1`, `-`, `e`, `.`, `true`, `nul`, `null`, `\`, `\u`, ` `}
		for {
			var sb strings.Builder
			for range 1 + g.pick(40) {
				sb.WriteString(tokens[g.pick(len(tokens))])
			}
			if b := []byte(sb.String()); invalidJSON(b) {
				return floodCase{cat: cat, frame: b, want: floodWant{codes: []int{rpc.CodeParseError}, id: "null"}}
			}
		}
	case "long-string":
		// Large but under the limit: a method name of 64-128 KiB.
		m := strings.Repeat("m", 64<<10+g.pick(64<<10))
		return g.req(cat, `{"jsonrpc":"2.0","id":%[1]s,"method":"`+m+`"}`, rpc.CodeMethodNotFound)
	}
	panic("unknown category " + cat)
}

// invalidJSON reports whether b, as one frame, is not JSON (and not a
// blank line, which a stream skips).
func invalidJSON(b []byte) bool {
	s := strings.Trim(string(b), " \t\r\n")
	return s != "" && !json.Valid(b)
}

func (g *floodGen) letters(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = "abcdefghijklmnopqrstuvwxyz._/-ABC0123456789"[g.pick(43)]
	}
	return string(b)
}

func (g *floodGen) hugeNumber() floodCase {
	const cat = "huge-number"
	huge := []string{
		"123456789012345678901234567890", "18446744073709551616", "-9223372036854775809",
		"1e999999", "-1e-999999", "1E+400", strings.Repeat("9", 2000), "0." + strings.Repeat("0", 500) + "1",
	}
	n := huge[g.pick(len(huge))]
	switch g.pick(4) {
	case 0: // as the id: echoed untouched
		return floodSingle(cat, `{"jsonrpc":"2.0","id":`+n+`,"method":"health"}`, floodResult, n)
	case 1: // as an int param
		return g.req(cat, `{"jsonrpc":"2.0","id":%[1]s,"method":"message.list","params":{"page_size":`+n+`}}`, rpc.CodeInvalidParams)
	case 2: // as a string param
		return g.req(cat, `{"jsonrpc":"2.0","id":%[1]s,"method":"message.send","params":{"content":`+n+`}}`, rpc.CodeInvalidParams)
	default: // as the whole frame
		return floodSingle(cat, n, rpc.CodeInvalidRequest, "null")
	}
}

func (g *floodGen) deep() floodCase {
	const cat = "deep"
	nest := func(open, close string, depth int, inner string) string {
		return strings.Repeat(open, depth) + inner + strings.Repeat(close, depth)
	}
	d := 2 + g.pick(300)
	switch g.pick(6) {
	case 0: // a batch whose one member is a nested array
		return floodCase{cat: cat, frame: []byte(nest("[", "]", d, "")), want: floodWant{batch: true, codes: []int{rpc.CodeInvalidRequest}}}
	case 1: // deeper than any JSON decoder here accepts
		return floodSingle(cat, nest("[", "]", 10_001+g.pick(5_000), ""), rpc.CodeParseError, "null")
	case 2: // nested objects, no request
		return floodSingle(cat, nest(`{"a":`, "}", d, "1"), rpc.CodeInvalidRequest, "null")
	case 3: // deep in a field of the wrong type
		return g.req(cat, `{"jsonrpc":"2.0","id":%[1]s,"method":"message.send","params":{"content":`+nest("[", "]", d, "")+`}}`, rpc.CodeInvalidParams)
	case 4: // deep in an unknown field: ignored
		return g.req(cat, `{"jsonrpc":"2.0","id":%[1]s,"method":"message.list","params":{"x":`+nest(`{"a":`, "}", d, "null")+`}}`, floodResult)
	default: // deep as the id
		return floodSingle(cat, `{"jsonrpc":"2.0","id":`+nest("[", "]", d, "")+`,"method":"health"}`, rpc.CodeInvalidRequest, "null")
	}
}

func (g *floodGen) invalidUTF8() floodCase {
	const cat = "invalid-utf8"
	bad := []string{"\xff", "\xfe\xff", "\xc3\x28", "\xc0\xaf", "\xed\xa0\x80", "\xf8\x88\x80\x80\x80", "\x80"}
	b := bad[g.pick(len(bad))]
	// Wherever it is, the frame is refused whole: decoding would replace
	// the bytes with U+FFFD and store something the caller did not send.
	// Inside a string of valid JSON, the refusal carries the request's id
	// (unless the id is what is bad), so the caller's call gets it.
	frames := []struct{ frame, id string }{
		{b + `{"jsonrpc":"2.0","id":1,"method":"health"}`, "null"}, // outside any string: not JSON
		{`{"jsonrpc":"2.0","id":1,"method":` + b + `}`, "null"},    // as a bare value
		{`{"jsonrpc":"2.0","id":1,"method":"he` + b + `alth"}`, "1"},
		{`{"jsonrpc":"2.0","id":1,"method":"message.list","params":{"sort_by":"` + b + `"}}`, "1"},
		{`{"jsonrpc":"2.0","id":1,"method":"health","x` + b + `":1}`, "1"},
		{`{"jsonrpc":"2.0","id":"` + b + `","method":"nope"}`, "null"},
		{`{"jsonrpc":"2.0","id":1,"method":"message.send","params":{"content":"\ud800 lone"}}`, "1"},
	}
	f := frames[g.pick(len(frames))]
	return floodSingle(cat, f.frame, rpc.CodeParseError, f.id)
}

// batch makes a batch: junk members, a batch over the size limit, or a
// full one.
func (g *floodGen) batch() floodCase {
	const cat = "batch"
	switch g.pick(10) {
	case 0: // one over the limit: one error, not an array
		var sb strings.Builder
		sb.WriteByte('[')
		for i := range thrum.DefaultMaxBatch + 1 {
			if i > 0 {
				sb.WriteByte(',')
			}
			sb.WriteString(`{"jsonrpc":"2.0","id":1,"method":"health"}`)
		}
		sb.WriteByte(']')
		return floodSingle(cat, sb.String(), rpc.CodeInvalidRequest, "null")
	case 1: // scalars
		return floodCase{cat: cat, frame: []byte(`[1,"x",null,true,{}]`), want: floodWant{batch: true, codes: []int{
			rpc.CodeInvalidRequest, rpc.CodeInvalidRequest, rpc.CodeInvalidRequest, rpc.CodeInvalidRequest, rpc.CodeInvalidRequest}}}
	}
	// Members drawn from the categories whose frames are valid JSON.
	cats := []string{"wrong-type", "bad-id", "not-object", "bad-params", "unknown-method", "valid",
		"no-identity", "notification", "empty-batch", "invalid-utf8", "deep", "huge-number"}
	var members []string
	var codes []int
	for len(members) < 1+g.pick(6) {
		m := g.one(cats[g.pick(len(cats))])
		if !json.Valid(m.frame) || m.cat == "invalid-utf8" {
			continue
		}
		members = append(members, string(m.frame))
		if code, none := m.member(); !none {
			codes = append(codes, code)
		}
	}
	frame := "[" + strings.Join(members, ",") + "]"
	if len(codes) == 0 {
		return floodCase{cat: cat, frame: []byte(frame), want: floodWant{none: true}}
	}
	return floodCase{cat: cat, frame: []byte(frame), want: floodWant{batch: true, codes: codes}}
}

// floodConn is one side of the flood: a raw Unix connection or WebSocket.
type floodConn interface {
	Send([]byte) error
	ReadReply() ([]byte, error)
}

// TestFloodMalformedFrames sends floodFrames junk frames, the same seeded
// sequence each run, over a raw Unix connection and a raw WebSocket at
// once, and checks every reply: its error code (or a result, for the few
// well-formed calls), its id, and the absence of a reply to notifications.
// Only oversize frames may end a connection (it is then redialled); any
// other close fails the test. Afterwards the daemon must answer health,
// hold exactly the messages, agents and groups it held before, and its
// heap must not have grown by more than floodHeapGrowth.
func TestFloodMalformedFrames(t *testing.T) {
	// A wrong credential among the junk would hold its connection a
	// second, and the flood would take minutes: the delay has its own
	// tests (TestSecurityWrongCredentialsCostTheirConnection).
	d := startDaemonServing(t, &thrum.Options{GitRepo: gitwork.New("")}, &thrum.RPCOptions{AuthFailureDelay: time.Millisecond})
	ctx := context.Background()
	if _, err := d.n.SendMessage(thrum.AsAgent(ctx, "alice"), &rpc.SendMessageParams{Content: "before the flood", Mentions: []string{"bob"}}); err != nil {
		t.Fatal(err)
	}
	messagesBefore := messageTotal(t, d)
	agentsBefore, err := d.n.ListAgents(ctx, &rpc.ListAgentsParams{})
	if err != nil {
		t.Fatal(err)
	}
	heapBefore := heapInUse()

	transports := []struct {
		name string
		dial func(t *testing.T) floodConn
		// closed checks the end of a connection after an oversize frame.
		closed func(t *testing.T, c floodConn)
	}{
		{"unix", func(t *testing.T) floodConn { return dialRawUnix(t, d.sock) }, func(t *testing.T, c floodConn) {
			b, err := c.ReadReply()
			if err != nil {
				t.Fatalf("no reply to an oversize line: %v", err)
			}
			wantErrorReply(t, b, rpc.CodeInvalidRequest, "request too large")
			wantClosed(t, c.ReadReply)
			c.(*rawUnix).nc.Close()
		}},
		{"websocket", func(t *testing.T) floodConn { return dialOwnerWS(t, d) }, func(t *testing.T, c floodConn) {
			_, err := c.ReadReply()
			var closed *thrumtest.WSClosed
			if !errors.As(err, &closed) || closed.Code != thrumtest.WSStatusMessageBig {
				t.Fatalf("after an oversize frame: %v, want close %d", err, thrumtest.WSStatusMessageBig)
			}
			c.(*thrumtest.RawWS).CloseAck()
		}},
	}
	// Both transports at once, as a busy daemon would see them; the
	// group returns when both are done.
	t.Run("transports", func(t *testing.T) {
		for ti, tr := range transports {
			t.Run(tr.name, func(t *testing.T) {
				t.Parallel()
				floodOne(t, ti, tr.dial, tr.closed)
			})
		}
	})
	if t.Failed() {
		return
	}

	// The daemon is alive, and junk changed nothing.
	wantHealthy(t, d)
	if got := messageTotal(t, d); got != messagesBefore {
		t.Fatalf("messages: %d after the flood, %d before", got, messagesBefore)
	}
	agentsAfter, err := d.n.ListAgents(ctx, &rpc.ListAgentsParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(agentsAfter.Agents) != len(agentsBefore.Agents) {
		t.Fatalf("agents: %d after the flood, %d before", len(agentsAfter.Agents), len(agentsBefore.Agents))
	}
	groups, err := d.n.ListGroups(ctx, &rpc.ListGroupsParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(groups.Groups) != 1 {
		t.Fatalf("groups after the flood: %+v", groups.Groups)
	}
	if grew := int64(heapInUse()) - int64(heapBefore); grew > floodHeapGrowth {
		t.Fatalf("heap in use grew by %d MiB over the flood (limit %d MiB)", grew>>20, floodHeapGrowth>>20)
	} else {
		t.Logf("heap in use: %d KiB before, %+d KiB after", heapBefore>>10, grew>>10)
	}
}

// dialOwnerWS opens a raw WebSocket with the owner's secret in its
// handshake: it may then do what the Unix socket may, and is never closed
// for failing to authenticate in time.
func dialOwnerWS(t testing.TB, d *daemon) *thrumtest.RawWS {
	t.Helper()
	resp, body, ws := wsHandshake(t, d.wsURL, "", http.Header{"Authorization": {"Bearer " + d.secret}})
	if ws == nil {
		t.Fatalf("websocket handshake with the owner's secret refused: %s %q", resp.Status, body)
	}
	return ws
}

// floodOne sends floodFrames junk frames on one transport and checks every
// reply.
func floodOne(t *testing.T, seed int, dial func(*testing.T) floodConn, closed func(*testing.T, floodConn)) {
	g := &floodGen{r: rand.New(rand.NewPCG(20240601, uint64(seed)))}
	seen := map[string]int{}
	answered, reconnects, nerr := 0, 0, 0
	c := dial(t)
	for i := range floodFrames {
		fc := g.frame(i)
		seen[fc.cat]++
		if fc.want.oversize {
			done := make(chan error, 1)
			go func() { done <- c.Send(fc.frame) }()
			closed(t, c)
			<-done // the write fails once the server hung up; that is expected
			c = dial(t)
			reconnects++
			continue
		}
		if err := c.Send(fc.frame); err != nil {
			t.Fatalf("frame %d (%s): send: %v (the daemon closed the connection?)", i, fc.cat, err)
		}
		if fc.want.none {
			// Nothing may come back: the next reply must be this probe's.
			probe := `{"jsonrpc":"2.0","id":"probe` + strconv.Itoa(i) + `","method":"health"}`
			if err := c.Send([]byte(probe)); err != nil {
				t.Fatalf("frame %d (%s): send probe: %v", i, fc.cat, err)
			}
			fc = floodCase{cat: fc.cat, frame: fc.frame, want: floodWant{codes: []int{floodResult}, id: `"probe` + strconv.Itoa(i) + `"`}}
		}
		b, err := c.ReadReply()
		if err != nil {
			t.Fatalf("frame %d (%s) %.200q: no reply: %v", i, fc.cat, fc.frame, err)
		}
		answered++
		if msg := checkFlood(b, fc.want); msg != "" {
			t.Errorf("frame %d (%s) %.200q: %s", i, fc.cat, fc.frame, msg)
			if nerr++; nerr >= 20 {
				t.Fatal("too many wrong replies")
			}
		}
	}
	for _, cat := range floodCategories {
		if seen[cat.name] == 0 {
			t.Errorf("category %s never sent", cat.name)
		}
	}
	if reconnects == 0 || seen["long-string"] == 0 {
		t.Errorf("no oversize or long frame sent: %v", seen)
	}
	cats := make([]string, 0, len(seen))
	for k := range seen {
		cats = append(cats, k)
	}
	sort.Strings(cats)
	var sb strings.Builder
	for _, k := range cats {
		fmt.Fprintf(&sb, " %s=%d", k, seen[k])
	}
	t.Logf("%d frames, %d replies checked, %d reconnects;%s", floodFrames, answered, reconnects, sb.String())
}

// checkFlood says what is wrong with reply b, or "" if it is what want
// asks.
func checkFlood(b []byte, want floodWant) string {
	check := func(r wireReply, code int) string {
		switch {
		case r.JSONRPC != "2.0":
			return "not a JSON-RPC 2.0 response"
		case code == floodResult && (r.Error != nil || len(r.Result) == 0):
			return fmt.Sprintf("want a result, got error %+v", r.Error)
		case code != floodResult && r.Error == nil:
			return fmt.Sprintf("want error %d, got result %.100s", code, r.Result)
		case code != floodResult && r.Error.Code != code:
			return fmt.Sprintf("want error %d, got %d %q", code, r.Error.Code, r.Error.Message)
		}
		return ""
	}
	if want.batch {
		var rs []wireReply
		if err := json.Unmarshal(b, &rs); err != nil {
			return fmt.Sprintf("want a batch reply, got %.200s", b)
		}
		if len(rs) != len(want.codes) {
			return fmt.Sprintf("want %d replies in the batch, got %d: %.300s", len(want.codes), len(rs), b)
		}
		for i, r := range rs {
			if msg := check(r, want.codes[i]); msg != "" {
				return fmt.Sprintf("batch member %d: %s", i, msg)
			}
		}
		return ""
	}
	var r wireReply
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Sprintf("want a single reply, got %.200s", b)
	}
	if msg := check(r, want.codes[0]); msg != "" {
		return msg
	}
	if want.id != "" && string(r.ID) != want.id {
		return fmt.Sprintf("reply id %.100s, want %.100s", r.ID, want.id)
	}
	return ""
}

// heapInUse is the heap in use after a full collection.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}
