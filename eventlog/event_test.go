package eventlog

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestFormatTimeParseTime(t *testing.T) {
	tests := []struct {
		name string
		in   time.Time
		want string
	}{
		{"utc with nanoseconds", time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC), "2025-01-02T03:04:05.000000006Z"},
		{"whole second keeps nine digits", time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), "2025-01-02T03:04:05.000000000Z"},
		{"other zone rendered in utc", time.Date(2025, 1, 2, 3, 4, 5, 600_000_000, time.FixedZone("x", 2*3600)), "2025-01-02T01:04:05.600000000Z"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := FormatTime(tt.in)
			if got != tt.want {
				t.Fatalf("FormatTime = %q, want %q", got, tt.want)
			}
			back, err := ParseTime(got)
			if err != nil {
				t.Fatalf("ParseTime(%q): %v", got, err)
			}
			if !back.Equal(tt.in) {
				t.Fatalf("ParseTime(FormatTime(t)) = %v, want %v", back, tt.in)
			}
		})
	}
	// The format exists so that timestamps sort as strings.
	a := FormatTime(time.Date(2025, 1, 1, 0, 0, 9, 900_000_000, time.UTC))
	b := FormatTime(time.Date(2025, 1, 1, 0, 0, 10, 0, time.UTC))
	if a >= b {
		t.Errorf("%q does not sort before %q", a, b)
	}
	if _, err := ParseTime("2025-01-02T03:04:05+02:00"); err != nil {
		t.Errorf("ParseTime of an RFC 3339 time with offset: %v", err)
	}
}

const (
	testID = "01JAAAAAAAAAAAAAAAAAAAAAAA"
	testTS = "2025-01-02T03:04:05.000000006Z"
)

var testTime = time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC)

func TestEncode(t *testing.T) {
	env := `{"event_id":"` + testID + `","type":"T","timestamp":"` + testTS + `"`
	msg := "hi"
	tests := []struct {
		name    string
		typ     string
		payload any
		want    string // without the newline; "" means an error is expected
		errText string
	}{
		{"struct payload flattened after envelope", "T", GroupCreate{Name: "ops", CreatedBy: "alice"},
			env + `,"name":"ops","created_by":"alice"}`, ""},
		{"pointer payload", "T", &MessageEdit{MessageID: "m", AgentID: "a", SessionID: "s", Content: &msg},
			env + `,"message_id":"m","agent_id":"a","session_id":"s","content":"hi"}`, ""},
		{"map payload", "T", map[string]any{"b": 1, "a": "x"}, env + `,"a":"x","b":1}`, ""},
		{"raw object payload", "T", json.RawMessage(`{"k":[1,2]}`), env + `,"k":[1,2]}`, ""},
		{"nil payload", "T", nil, env + `}`, ""},
		{"empty struct payload", "T", struct{}{}, env + `}`, ""},
		{"empty map payload", "T", map[string]int{}, env + `}`, ""},
		{"type that needs escaping", `a"b\c`, nil,
			`{"event_id":"` + testID + `","type":"a\"b\\c","timestamp":"` + testTS + `"}`, ""},
		{"string payload rejected", "T", "text", "", "not a JSON object"},
		{"number payload rejected", "T", 42, "", "not a JSON object"},
		{"array payload rejected", "T", []int{1}, "", "not a JSON object"},
		{"nil pointer payload rejected", "T", (*GroupCreate)(nil), "", "not a JSON object"},
		{"raw array payload rejected", "T", json.RawMessage(`[1]`), "", "not a JSON object"},
		{"unmarshalable payload rejected", "T", map[string]any{"c": make(chan int)}, "", "unsupported type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			buf.WriteString("previous line\n")
			e := &Event{ID: testID, Type: tt.typ, Time: testTime, Payload: tt.payload}
			err := e.encode(&buf, e.Payload)
			if tt.want == "" {
				if err == nil || !strings.Contains(err.Error(), tt.errText) {
					t.Fatalf("encode error = %v, want one containing %q", err, tt.errText)
				}
				if buf.String() != "previous line\n" {
					t.Fatalf("failed encode left %q in the buffer", buf.String())
				}
				return
			}
			if err != nil {
				t.Fatalf("encode: %v", err)
			}
			got := strings.TrimPrefix(buf.String(), "previous line\n")
			if got != tt.want+"\n" {
				t.Fatalf("encode wrote\n%s\nwant\n%s", got, tt.want+"\n")
			}
			ev, err := DecodeLine([]byte(tt.want))
			if err != nil {
				t.Fatalf("DecodeLine of an encoded event: %v", err)
			}
			if ev.ID != testID || ev.Type != tt.typ || !ev.Time.Equal(testTime) {
				t.Fatalf("DecodeLine = {%q %q %v}, want {%q %q %v}", ev.ID, ev.Type, ev.Time, testID, tt.typ, testTime)
			}
		})
	}
}

// lineOfSize returns a payload whose event line (newline included) is
// exactly size bytes.
func lineOfSize(t testing.TB, e Event, size int) any {
	t.Helper()
	type pad struct {
		P string `json:"p"`
	}
	e.Payload = pad{}
	var buf bytes.Buffer
	if err := e.encode(&buf, e.Payload); err != nil {
		t.Fatal(err)
	}
	n := size - buf.Len()
	if n < 0 {
		t.Fatalf("line of %d bytes is shorter than the envelope", size)
	}
	return pad{P: strings.Repeat("x", n)}
}

func TestEncodeMaxLineBytes(t *testing.T) {
	base := Event{ID: testID, Type: "T", Time: testTime}
	tests := []struct {
		name    string
		size    int
		wantErr bool
	}{
		{"one under the limit", MaxLineBytes - 1, false},
		{"exactly the limit", MaxLineBytes, false},
		{"one over the limit", MaxLineBytes + 1, true},
		{"far over the limit", 2 * MaxLineBytes, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := base
			e.Payload = lineOfSize(t, base, tt.size)
			var buf bytes.Buffer
			err := e.encode(&buf, e.Payload)
			if tt.wantErr {
				if !errors.Is(err, ErrTooLarge) {
					t.Fatalf("encode of a %d-byte line: error %v, want ErrTooLarge", tt.size, err)
				}
				if buf.Len() != 0 {
					t.Fatalf("failed encode left %d bytes in the buffer", buf.Len())
				}
				return
			}
			if err != nil {
				t.Fatalf("encode of a %d-byte line: %v", tt.size, err)
			}
			if buf.Len() != tt.size {
				t.Fatalf("encoded %d bytes, want %d", buf.Len(), tt.size)
			}
		})
	}
}

func TestDecodeLine(t *testing.T) {
	ts := `"timestamp":"` + testTS + `"`
	tests := []struct {
		name     string
		line     string
		wantID   string
		wantType string
		wantErr  string // substring of the error; "" for success
	}{
		{"fast path", `{"event_id":"E1","type":"message.create",` + ts + `,"content":"x"}`, "E1", "message.create", ""},
		{"fast path no payload", `{"event_id":"E1","type":"t",` + ts + `}`, "E1", "t", ""},
		{"other key order", `{"type":"t",` + ts + `,"event_id":"E2"}`, "E2", "t", ""},
		{"escaped id forces slow path", `{"event_id":"E\u0031x","type":"t",` + ts + `}`, "E1x", "t", ""},
		{"escaped quote in type", `{"event_id":"E3","type":"a\"b",` + ts + `}`, "E3", `a"b`, ""},
		{"escaped backslash in type", `{"event_id":"E4","type":"a\\",` + ts + `}`, "E4", `a\`, ""},
		{"escaped timestamp", `{"event_id":"E5","type":"t","timestamp":"2025-01-02T03:04:05\u002e000000006Z"}`, "E5", "t", ""},
		{"spaces in envelope", `{ "event_id" : "E6" , "type" : "t" , ` + ts + ` }`, "E6", "t", ""},
		{"rfc3339 timestamp with offset", `{"event_id":"E7","type":"t","timestamp":"2025-01-02T05:04:05.000000006+02:00"}`, "E7", "t", ""},
		{"trailing whitespace", `{"event_id":"E8","type":"t",` + ts + `}  `, "E8", "t", ""},
		{"payload with nested envelope keys", `{"event_id":"E9","type":"t",` + ts + `,"x":{"event_id":"no","type":"no"}}`, "E9", "t", ""},

		{"empty line", ``, "", "", "not valid JSON"},
		{"not JSON", `hello`, "", "", "not valid JSON"},
		{"truncated", `{"event_id":"E1","type":"t",` + ts, "", "", "not valid JSON"},
		{"trailing garbage", `{"event_id":"E1","type":"t",` + ts + `}x`, "", "", "not valid JSON"},
		{"two objects", `{"event_id":"E1","type":"t",` + ts + `}{}`, "", "", "not valid JSON"},
		{"array", `[{"event_id":"E1","type":"t",` + ts + `}]`, "", "", "not a JSON object"},
		{"string", `"event"`, "", "", "not a JSON object"},
		{"null", `null`, "", "", "not a JSON object"},
		{"number", `12`, "", "", "not a JSON object"},
		{"leading space", ` {"event_id":"E1","type":"t",` + ts + `}`, "", "", "not a JSON object"},
		{"empty object", `{}`, "", "", "no event_id"},
		{"missing event_id", `{"type":"t",` + ts + `}`, "", "", "no event_id"},
		{"empty event_id", `{"event_id":"","type":"t",` + ts + `}`, "", "", "no event_id"},
		{"missing type", `{"event_id":"E1",` + ts + `}`, "", "", "no type"},
		{"empty type fast path", `{"event_id":"E1","type":"",` + ts + `}`, "", "", "no type"},
		{"missing timestamp", `{"event_id":"E1","type":"t"}`, "", "", "bad timestamp"},
		{"bad timestamp", `{"event_id":"E1","type":"t","timestamp":"yesterday"}`, "", "", "bad timestamp"},
		{"timestamp without zone", `{"event_id":"E1","type":"t","timestamp":"2025-01-02T03:04:05"}`, "", "", "bad timestamp"},
		{"numeric event_id", `{"event_id":1,"type":"t",` + ts + `}`, "", "", "envelope"},
		{"numeric type", `{"event_id":"E1","type":2,` + ts + `}`, "", "", "envelope"},
		{"numeric timestamp", `{"event_id":"E1","type":"t","timestamp":3}`, "", "", "envelope"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			line := []byte(tt.line)
			ev, err := DecodeLine(line)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("DecodeLine(%s) = %+v, %v; want an error containing %q", tt.line, ev, err, tt.wantErr)
				}
				if ev != nil {
					t.Fatalf("DecodeLine returned an event with its error: %+v", ev)
				}
				return
			}
			if err != nil {
				t.Fatalf("DecodeLine(%s): %v", tt.line, err)
			}
			if ev.ID != tt.wantID || ev.Type != tt.wantType {
				t.Fatalf("DecodeLine = {ID %q, Type %q}, want {%q, %q}", ev.ID, ev.Type, tt.wantID, tt.wantType)
			}
			if !ev.Time.Equal(testTime) {
				t.Fatalf("Time = %v, want %v", ev.Time, testTime)
			}
			if !bytes.Equal(ev.Raw, line) {
				t.Fatalf("Raw = %q, want the line", ev.Raw)
			}
		})
	}
}

func TestEventDecode(t *testing.T) {
	want := MessageCreate{
		MessageID: "msg_1", AgentID: "alice", SessionID: "ses_1", Format: "markdown", Content: "hello \"world\"",
		Structured: json.RawMessage(`{"k":1}`), Scopes: []Pair{{"module", "core"}}, Tags: []string{"a"}, Priority: "high",
	}
	var buf bytes.Buffer
	appended := &Event{ID: testID, Type: TypeMessageCreate, Time: testTime, Payload: &want}
	if err := appended.encode(&buf, appended.Payload); err != nil {
		t.Fatal(err)
	}
	scanned, err := DecodeLine(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		ev   *Event
	}{{"appended event (Payload)", appended}, {"scanned event (Raw)", scanned}} {
		t.Run(tc.name, func(t *testing.T) {
			var got MessageCreate
			if err := tc.ev.Decode(&got); err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("Decode = %+v, want %+v", got, want)
			}
		})
	}
	bad := &Event{Payload: map[string]any{"c": make(chan int)}}
	var v map[string]any
	if err := bad.Decode(&v); err == nil {
		t.Error("Decode of an unmarshalable payload: no error")
	}
}
