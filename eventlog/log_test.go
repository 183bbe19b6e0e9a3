package eventlog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// openLog opens a log in dir and closes it when the test ends.
func openLog(t testing.TB, dir string, opts *Options) *Log {
	t.Helper()
	l, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// scanAll returns every event past from, with Raw copied.
func scanAll(t testing.TB, l *Log, from map[string]int64) ([]*Event, map[string]int64) {
	t.Helper()
	var out []*Event
	pos, err := l.Scan(context.Background(), from, func(e *Event) error {
		e.Raw = bytes.Clone(e.Raw)
		out = append(out, e)
		return nil
	})
	if err != nil {
		t.Fatalf("Scan: %v", err)
	}
	return out, pos
}

func appendOK(t testing.TB, l *Log, evs ...*Event) {
	t.Helper()
	if err := l.Append(context.Background(), evs...); err != nil {
		t.Fatalf("Append: %v", err)
	}
}

func fileSize(t testing.TB, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

func readFile(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// checkPositions checks that Positions names every shard file with its size.
func checkPositions(t testing.TB, l *Log) {
	t.Helper()
	pos := l.Positions()
	shards, err := l.shards()
	if err != nil {
		t.Fatal(err)
	}
	if len(pos) != len(shards) {
		t.Errorf("Positions has %d shards %v, the directory %d %v", len(pos), pos, len(shards), shards)
	}
	for _, rel := range shards {
		var size int64 // of all the shard's segments
		segs, err := l.Segments(shardName(rel))
		if err != nil {
			t.Fatal(err)
		}
		for _, seg := range segs {
			size += fileSize(t, filepath.Join(l.Dir(), filepath.FromSlash(seg)))
		}
		if got, ok := pos[rel]; !ok || got != size {
			t.Errorf("Positions()[%s] = %d (present %v), file size %d", rel, got, ok, size)
		}
	}
}

func eventIDs(evs []*Event) []string {
	ids := make([]string, len(evs))
	for i, e := range evs {
		ids[i] = e.ID
	}
	return ids
}

// payloadOf decodes e into a new value of the type of want (dereferenced).
func payloadOf(t testing.TB, e *Event, want any) any {
	t.Helper()
	typ := reflect.TypeOf(want)
	if typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	v := reflect.New(typ)
	if err := e.Decode(v.Interface()); err != nil {
		t.Fatalf("Decode event %s: %v", e.ID, err)
	}
	return v.Elem().Interface()
}

func deref(v any) any {
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Pointer {
		return rv.Elem().Interface()
	}
	return v
}

func TestAppendScanRoundTrip(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	l := openLog(t, dir, nil)

	zone := time.FixedZone("UTC+5", 5*3600)
	calls := []struct {
		name string
		evs  []*Event
	}{
		{"agent register", []*Event{{Type: TypeAgentRegister, Payload: AgentRegister{AgentID: "alice", Kind: "agent", Name: "alice", Role: "reviewer", Module: "core"}}}},
		{"session start", []*Event{{Type: TypeSessionStart, Payload: &SessionStart{SessionID: "ses_1", AgentID: "alice", Scopes: []Pair{{"module", "core"}}}}}},
		{"message in alice shard", []*Event{{Type: TypeMessageCreate, Shard: "alice", Payload: &MessageCreate{MessageID: "msg_1", AgentID: "alice", SessionID: "ses_1", Format: "markdown", Content: "hello\nworld", Priority: "normal"}}}},
		{"message in bob shard", []*Event{{Type: TypeMessageCreate, Shard: "bob", Payload: MessageCreate{MessageID: "msg_2", AgentID: "bob", Content: "é \"quoted\" <b>", Priority: "high"}}}},
		{"one call over three shards", []*Event{
			{Type: TypeMessageRead, Shard: "alice", Payload: MessageRead{AgentID: "alice", SessionID: "ses_1", MessageIDs: []string{"msg_2"}}},
			{Type: TypeGroupCreate, Payload: GroupCreate{Name: "ops", CreatedBy: "alice"}},
			{Type: TypeMessageEdit, Shard: "bob", Payload: MessageEdit{MessageID: "msg_2", AgentID: "bob"}},
			{Type: TypeGroupMemberAdd, Payload: GroupMember{Group: "ops", MemberType: "agent", MemberID: "bob", AgentID: "alice"}},
		}},
		{"explicit time in another zone, no payload", []*Event{{Type: TypeAgentCleanup, Time: time.Date(2024, 2, 29, 23, 59, 59, 999_999_999, zone)}}},
		{"type that needs escaping", []*Event{{Type: `custom "quoted" \ type`, Shard: "a.b-c_D", Payload: struct {
			N int `json:"n"`
		}{1}}}},
	}
	var appended []*Event
	for _, c := range calls {
		explicit := make([]time.Time, len(c.evs))
		for i, e := range c.evs {
			explicit[i] = e.Time
		}
		before := time.Now().Round(0)
		if err := l.Append(ctx, c.evs...); err != nil {
			t.Fatalf("%s: Append: %v", c.name, err)
		}
		after := time.Now().Round(0)
		for i, e := range c.evs {
			if len(e.ID) != 26 {
				t.Errorf("%s: ID %q is not a ULID", c.name, e.ID)
			}
			switch {
			case !explicit[i].IsZero():
				if !e.Time.Equal(explicit[i]) {
					t.Errorf("%s: explicit Time changed from %v to %v", c.name, explicit[i], e.Time)
				}
			case e.Time.Before(before) || e.Time.After(after):
				t.Errorf("%s: assigned Time %v is not within the call [%v, %v]", c.name, e.Time, before, after)
			}
			rel := ShardPath(e.Shard)
			if e.Offset <= 0 || e.Offset > fileSize(t, filepath.Join(dir, rel)) {
				t.Errorf("%s: Offset %d outside %s (size %d)", c.name, e.Offset, rel, fileSize(t, filepath.Join(dir, rel)))
			}
		}
		// The last event of each shard ends where the file ends.
		last := map[string]int64{}
		for _, e := range c.evs {
			last[ShardPath(e.Shard)] = e.Offset
		}
		for rel, off := range last {
			if size := fileSize(t, filepath.Join(dir, rel)); off != size {
				t.Errorf("%s: last Offset in %s = %d, file size %d", c.name, rel, off, size)
			}
		}
		appended = append(appended, c.evs...)
	}
	for i := 1; i < len(appended); i++ {
		if appended[i].ID <= appended[i-1].ID {
			t.Fatalf("IDs not increasing in append order: %s then %s", appended[i-1].ID, appended[i].ID)
		}
	}

	for _, want := range []struct {
		rel   string
		lines int
	}{{EventsFile, 5}, {"messages/alice.jsonl", 2}, {"messages/bob.jsonl", 2}, {"messages/a.b-c_D.jsonl", 1}} {
		if n := strings.Count(readFile(t, filepath.Join(dir, want.rel)), "\n"); n != want.lines {
			t.Errorf("%s has %d lines, want %d", want.rel, n, want.lines)
		}
	}

	got, end := scanAll(t, l, nil)

	t.Run("scan returns append order", func(t *testing.T) {
		if !slices.Equal(eventIDs(got), eventIDs(appended)) {
			t.Fatalf("Scan IDs\n%v\nwant\n%v", eventIDs(got), eventIDs(appended))
		}
		for i, e := range got {
			a := appended[i]
			if e.Type != a.Type || e.Shard != a.Shard || e.Offset != a.Offset || !e.Time.Equal(a.Time) {
				t.Errorf("event %d: scanned {%q %q %d %v}, appended {%q %q %d %v}",
					i, e.Type, e.Shard, e.Offset, e.Time, a.Type, a.Shard, a.Offset, a.Time)
			}
			if e.Payload != nil {
				t.Errorf("event %d: scanned event has a Payload", i)
			}
			if a.Payload != nil {
				if p, w := payloadOf(t, e, a.Payload), deref(a.Payload); !reflect.DeepEqual(p, w) {
					t.Errorf("event %d payload = %+v, want %+v", i, p, w)
				}
			}
		}
	})

	t.Run("positions match files", func(t *testing.T) {
		checkPositions(t, l)
		if !reflect.DeepEqual(end, l.Positions()) {
			t.Fatalf("Scan returned %v, Positions %v", end, l.Positions())
		}
	})

	t.Run("scan from returned positions yields nothing", func(t *testing.T) {
		more, pos := scanAll(t, l, end)
		if len(more) != 0 {
			t.Fatalf("Scan from the end returned %d events", len(more))
		}
		if !reflect.DeepEqual(pos, end) {
			t.Fatalf("positions moved from %v to %v", end, pos)
		}
	})

	for k := 0; k <= len(appended); k++ {
		t.Run(fmt.Sprintf("scan from after event %d", k), func(t *testing.T) {
			from := map[string]int64{}
			for _, e := range appended[:k] {
				from[ShardPath(e.Shard)] = e.Offset
			}
			rest, pos := scanAll(t, l, from)
			if !slices.Equal(eventIDs(rest), eventIDs(appended[k:])) {
				t.Fatalf("got %v, want %v", eventIDs(rest), eventIDs(appended[k:]))
			}
			if !reflect.DeepEqual(pos, end) {
				t.Fatalf("positions %v, want %v", pos, end)
			}
		})
	}

	t.Run("stop and resume", func(t *testing.T) {
		stop := errors.New("stop")
		var first []string
		pos, err := l.Scan(ctx, nil, func(e *Event) error {
			if len(first) == 3 {
				return stop
			}
			first = append(first, e.ID)
			return nil
		})
		if !errors.Is(err, stop) {
			t.Fatalf("Scan error = %v, want the callback's", err)
		}
		rest, _ := scanAll(t, l, pos)
		if all := append(first, eventIDs(rest)...); !slices.Equal(all, eventIDs(appended)) {
			t.Fatalf("stopped then resumed: %v, want %v", all, eventIDs(appended))
		}
	})

	t.Run("reopen", func(t *testing.T) {
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		l2 := openLog(t, dir, nil)
		if r := l2.Repairs(); len(r) != 0 {
			t.Fatalf("Repairs after a clean close: %v", r)
		}
		if !reflect.DeepEqual(l2.Positions(), end) {
			t.Fatalf("Positions after reopen %v, want %v", l2.Positions(), end)
		}
		again, _ := scanAll(t, l2, nil)
		if !slices.Equal(eventIDs(again), eventIDs(appended)) {
			t.Fatalf("after reopen: %v, want %v", eventIDs(again), eventIDs(appended))
		}
		next := &Event{Type: TypeMessageDelete, Shard: "alice", Payload: MessageDelete{MessageID: "msg_1", AgentID: "alice"}}
		appendOK(t, l2, next)
		if next.ID <= appended[len(appended)-1].ID {
			t.Fatalf("ID after reopen %s not greater than %s", next.ID, appended[len(appended)-1].ID)
		}
		tail, _ := scanAll(t, l2, end)
		if len(tail) != 1 || tail[0].ID != next.ID {
			t.Fatalf("Scan from the old end after reopen: %v, want [%s]", eventIDs(tail), next.ID)
		}
		checkPositions(t, l2)
	})
}

func TestEmptyLog(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, nil)
	got, pos := scanAll(t, l, nil)
	if len(got) != 0 || len(pos) != 0 {
		t.Fatalf("Scan of an empty log: %d events, positions %v", len(got), pos)
	}
	if len(l.Positions()) != 0 {
		t.Fatalf("Positions of an empty log: %v", l.Positions())
	}
	if l.Dir() != dir {
		t.Fatalf("Dir() = %q, want %q", l.Dir(), dir)
	}
	if st, err := os.Stat(filepath.Join(dir, MessagesDir)); err != nil || !st.IsDir() {
		t.Fatalf("Open did not create %s: %v", MessagesDir, err)
	}
	if err := l.Append(context.Background()); err != nil {
		t.Fatalf("Append of no events: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, EventsFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Append of no events created %s (%v)", EventsFile, err)
	}
}

func TestPositionsIsACopy(t *testing.T) {
	l := openLog(t, t.TempDir(), nil)
	appendOK(t, l, &Event{Type: "t"})
	p := l.Positions()
	p[EventsFile] = 0
	p["other"] = 1
	if got := l.Positions(); len(got) != 1 || got[EventsFile] == 0 {
		t.Fatalf("changing the returned map changed the log: %v", got)
	}
}

func TestShardPath(t *testing.T) {
	tests := []struct{ shard, path string }{
		{"", "events.jsonl"},
		{"alice", "messages/alice.jsonl"},
		{"a.b", "messages/a.b.jsonl"},
		{"x.jsonl", "messages/x.jsonl.jsonl"},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			if got := ShardPath(tt.shard); got != tt.path {
				t.Fatalf("ShardPath(%q) = %q, want %q", tt.shard, got, tt.path)
			}
			if got := shardName(tt.path); got != tt.shard {
				t.Fatalf("shardName(%q) = %q, want %q", tt.path, got, tt.shard)
			}
		})
	}
}

func TestInvalidShard(t *testing.T) {
	tests := []struct {
		name  string
		shard string
	}{
		{"parent traversal", "../x"},
		{"slash", "a/b"},
		{"dot", "."},
		{"dot dot", ".."},
		{"backslash", `a\b`},
		{"space", "a b"},
		{"nul", "a\x00b"},
		{"newline", "a\nb"},
		{"non-ascii", "é"},
		{"too long", strings.Repeat("a", 129)},
	}
	dir := t.TempDir()
	l := openLog(t, dir, nil)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if validShard(tt.shard) {
				t.Errorf("validShard(%q) = true", tt.shard)
			}
			err := l.Append(context.Background(), &Event{Type: "t"}, &Event{Type: "t", Shard: tt.shard})
			if err == nil || !strings.Contains(err.Error(), "invalid shard name") {
				t.Fatalf("Append to shard %q: error %v, want invalid shard name", tt.shard, err)
			}
		})
	}
	t.Run("empty name is not a file name", func(t *testing.T) {
		// "" is valid for Event.Shard (it means events.jsonl) but never as
		// a messages/ file name.
		if validShard("") {
			t.Fatal(`validShard("") = true`)
		}
	})
	t.Run("nothing was written", func(t *testing.T) {
		entries, _ := os.ReadDir(filepath.Join(dir, MessagesDir))
		if _, err := os.Stat(filepath.Join(dir, EventsFile)); len(entries) != 0 || !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("a rejected Append wrote files: %v, %v", entries, err)
		}
		if _, err := os.Stat(filepath.Join(filepath.Dir(dir), "x.jsonl")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("a shard escaped the log directory")
		}
	})
	for _, ok := range []string{"a", "A-b_c.d", "...", strings.Repeat("z", 128)} {
		if !validShard(ok) {
			t.Errorf("validShard(%q) = false", ok)
		}
	}
}

func TestAppendRejects(t *testing.T) {
	big := lineOfSize(t, Event{ID: testID, Type: "big", Time: testTime}, MaxLineBytes+1)
	tests := []struct {
		name    string
		evs     []*Event
		wantErr string
		is      error
	}{
		{"no type", []*Event{{Payload: GroupCreate{Name: "x"}}}, "no type", nil},
		{"no type after a good event", []*Event{{Type: "t"}, {}}, "no type", nil},
		{"string payload", []*Event{{Type: "t", Payload: "text"}}, "not a JSON object", nil},
		{"array payload", []*Event{{Type: "t", Payload: []string{"a"}}}, "not a JSON object", nil},
		{"unmarshalable payload", []*Event{{Type: "t", Payload: func() {}}}, "unsupported type", nil},
		{"too large", []*Event{{ID: testID, Type: "big", Time: testTime, Payload: big}}, "", ErrTooLarge},
		{"too large after good events in two shards", []*Event{{Type: "t"}, {Type: "t", Shard: "s"}, {ID: testID, Type: "big", Time: testTime, Payload: big}}, "", ErrTooLarge},
		{"bad payload before a good event", []*Event{{Type: "t", Shard: "s", Payload: 1}, {Type: "t"}}, "not a JSON object", nil},
	}
	dir := t.TempDir()
	l := openLog(t, dir, nil)
	appendOK(t, l, &Event{Type: "before"}, &Event{Type: "before", Shard: "s"})
	before := l.Positions()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := l.Append(context.Background(), tt.evs...)
			switch {
			case err == nil:
				t.Fatal("Append: no error")
			case tt.is != nil && !errors.Is(err, tt.is):
				t.Fatalf("Append error %v, want %v", err, tt.is)
			case tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr):
				t.Fatalf("Append error %v, want one containing %q", err, tt.wantErr)
			}
			// A failed call writes none of its events.
			if !reflect.DeepEqual(l.Positions(), before) {
				t.Fatalf("positions moved from %v to %v", before, l.Positions())
			}
			checkPositions(t, l)
		})
	}
	t.Run("log still usable", func(t *testing.T) {
		after := &Event{Type: "after", Shard: "s"}
		appendOK(t, l, after)
		got, _ := scanAll(t, l, nil)
		var types []string
		for _, e := range got {
			types = append(types, e.Type)
		}
		if want := []string{"before", "before", "after"}; !slices.Equal(types, want) {
			t.Fatalf("log holds %v, want %v", types, want)
		}
		checkPositions(t, l)
	})
}

func TestAppendMaxLineRoundTrip(t *testing.T) {
	l := openLog(t, t.TempDir(), &Options{NoSync: true})
	e := &Event{ID: testID, Type: "big", Time: testTime, Shard: "big"}
	e.Payload = lineOfSize(t, *e, MaxLineBytes)
	small := &Event{Type: "small", Shard: "big"}
	appendOK(t, l, e, small)
	if e.Offset != MaxLineBytes {
		t.Fatalf("Offset of a MaxLineBytes line = %d, want %d", e.Offset, MaxLineBytes)
	}
	got, _ := scanAll(t, l, nil)
	if len(got) != 2 || got[0].ID != testID || len(got[0].Raw) != MaxLineBytes-1 || got[1].ID != small.ID {
		t.Fatalf("Scan of a MaxLineBytes line: %d events", len(got))
	}
	if got[1].Offset != small.Offset {
		t.Fatalf("Offset after a long line = %d, want %d", got[1].Offset, small.Offset)
	}
}

func TestOnCommitError(t *testing.T) {
	boom := errors.New("projection failed")
	var seen []string
	l := openLog(t, t.TempDir(), &Options{OnCommit: func(batch []*Event) error {
		for _, e := range batch {
			seen = append(seen, e.ID)
			if e.Type == "fail" {
				return boom
			}
		}
		return nil
	}})
	ok1, bad, ok2 := &Event{Type: "ok"}, &Event{Type: "fail", Shard: "x"}, &Event{Type: "ok"}
	appendOK(t, l, ok1)
	if err := l.Append(context.Background(), bad); !errors.Is(err, boom) {
		t.Fatalf("Append with a failing OnCommit: error %v, want %v", err, boom)
	}
	appendOK(t, l, ok2)
	got, _ := scanAll(t, l, nil)
	want := []string{ok1.ID, bad.ID, ok2.ID}
	if !slices.Equal(eventIDs(got), want) {
		t.Fatalf("log holds %v, want %v (the event whose OnCommit failed stays)", eventIDs(got), want)
	}
	if !slices.Equal(seen, want) {
		t.Fatalf("OnCommit saw %v, want %v", seen, want)
	}
}

func TestGroupCommit(t *testing.T) {
	for _, goroutines := range []int{8, 16, 32} {
		t.Run(fmt.Sprintf("%d goroutines", goroutines), func(t *testing.T) {
			const per = 40
			type payload struct {
				G int `json:"g"`
				I int `json:"i"`
			}
			var mu sync.Mutex
			var committed []string
			commits := 0
			dir := t.TempDir()
			l := openLog(t, dir, &Options{OnCommit: func(batch []*Event) error {
				mu.Lock()
				defer mu.Unlock()
				commits++
				for _, e := range batch {
					committed = append(committed, e.ID)
				}
				return nil
			}})

			appended := make([][]*Event, goroutines)
			errs := make(chan error, goroutines*per)
			var wg sync.WaitGroup
			for g := range goroutines {
				wg.Go(func() {
					for i := range per {
						e := &Event{Type: TypeMessageCreate, Payload: payload{g, i}}
						switch i % 3 {
						case 1:
							e.Shard = fmt.Sprintf("g%d", g%5)
						case 2:
							e.Shard = "shared"
						}
						if err := l.Append(context.Background(), e); err != nil {
							errs <- err
							return
						}
						appended[g] = append(appended[g], e)
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatalf("Append: %v", err)
			}

			got, _ := scanAll(t, l, nil)
			total := goroutines * per
			if len(got) != total {
				t.Fatalf("Scan returned %d events, want %d", len(got), total)
			}
			byID := map[string]*Event{}
			for _, evs := range appended {
				for _, e := range evs {
					byID[e.ID] = e
				}
			}
			seen := map[payload]bool{}
			next := make([]int, goroutines)
			for i, e := range got {
				if i > 0 && e.ID <= got[i-1].ID {
					t.Fatalf("Scan not in ID order at %d: %s after %s", i, e.ID, got[i-1].ID)
				}
				var p payload
				if err := e.Decode(&p); err != nil {
					t.Fatal(err)
				}
				if seen[p] {
					t.Fatalf("event %+v scanned twice", p)
				}
				seen[p] = true
				// Each goroutine appended in sequence, so its events come
				// back in its order.
				if p.I != next[p.G] {
					t.Fatalf("goroutine %d: event %d scanned where %d was expected", p.G, p.I, next[p.G])
				}
				next[p.G]++
				a := byID[e.ID]
				if a == nil || a.Offset != e.Offset || a.Shard != e.Shard {
					t.Fatalf("scanned event %s (shard %q, offset %d) does not match its Append (%+v)", e.ID, e.Shard, e.Offset, a)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if !slices.Equal(committed, eventIDs(got)) {
				t.Fatalf("OnCommit order differs from Scan order (%d vs %d events)", len(committed), len(got))
			}
			lines := 0
			for _, rel := range []string{EventsFile, "messages/shared.jsonl", "messages/g0.jsonl", "messages/g4.jsonl"} {
				lines += strings.Count(readFile(t, filepath.Join(dir, rel)), "\n")
			}
			for g := 1; g < 4; g++ {
				lines += strings.Count(readFile(t, filepath.Join(dir, fmt.Sprintf("messages/g%d.jsonl", g))), "\n")
			}
			if lines != total {
				t.Fatalf("shard files hold %d lines, want %d", lines, total)
			}
			checkPositions(t, l)
			t.Logf("%d appends in %d commits", total, commits)
		})
	}
}

// commitRecorder is an OnCommit that records the batches it sees and
// blocks its first call until release, stalling the commit pipeline.
type commitRecorder struct {
	mu      sync.Mutex
	batches [][]string
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

// openStalledLog opens a log whose OnCommit is rec.onCommit. It unblocks
// rec when the test ends, before the log is closed, so that a failed test
// cannot deadlock in Close waiting for OnCommit.
func openStalledLog(t *testing.T, opts Options) (*Log, *commitRecorder) {
	rec := &commitRecorder{entered: make(chan struct{}), release: make(chan struct{})}
	opts.OnCommit = rec.onCommit
	l := openLog(t, t.TempDir(), &opts)
	t.Cleanup(rec.unblock) // cleanups run last-registered first
	return l, rec
}

func (c *commitRecorder) unblock() { c.once.Do(func() { close(c.release) }) }

func (c *commitRecorder) onCommit(batch []*Event) error {
	c.mu.Lock()
	first := len(c.batches) == 0
	var types []string
	for _, e := range batch {
		types = append(types, e.Type)
	}
	c.batches = append(c.batches, types)
	c.mu.Unlock()
	if first {
		close(c.entered)
		<-c.release
	}
	return nil
}

func (c *commitRecorder) sizes() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []int
	for _, b := range c.batches {
		out = append(out, len(b))
	}
	return out
}

// stall blocks the log's first OnCommit and then starts n more appends,
// and waits until the append queue is full: the pipeline is stuck behind
// OnCommit and further appends must wait to enter the queue. n must exceed
// what the pipeline can hold besides the queue (each stage one batch of
// at most MaxBatch appends). The appends' errors arrive on the returned
// channel, n+1 in all, once the recorder is unblocked.
func stall(t *testing.T, l *Log, rec *commitRecorder, n int) <-chan error {
	t.Helper()
	errs := make(chan error, n+1)
	go func() { errs <- l.Append(context.Background(), &Event{Type: "first"}) }()
	<-rec.entered
	for i := range n {
		go func() {
			errs <- l.Append(context.Background(), &Event{Type: fmt.Sprint("e", i), Shard: fmt.Sprint("s", i%2)})
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(l.reqs) < cap(l.reqs) {
		if time.Now().After(deadline) {
			t.Fatalf("the append queue did not fill: %d of %d", len(l.reqs), cap(l.reqs))
		}
		time.Sleep(time.Millisecond)
	}
	return errs
}

func TestGroupCommitBatches(t *testing.T) {
	const maxBatch, n = 3, 20
	l, rec := openStalledLog(t, Options{MaxBatch: maxBatch})
	// Group commits are counted where they happen: OnCommit may merge
	// commits that became durable while it was busy.
	var commitsMu sync.Mutex
	var sizes []int
	l.commitHook = func(k int) {
		commitsMu.Lock()
		sizes = append(sizes, k)
		commitsMu.Unlock()
	}

	errs := stall(t, l, rec, n)
	rec.unblock()
	for range n + 1 {
		if err := <-errs; err != nil {
			t.Fatalf("Append: %v", err)
		}
	}
	sum := 0
	for _, k := range rec.sizes() {
		sum += k
	}
	if sum != n+1 {
		t.Errorf("OnCommit saw %d events, want %d (batches %v)", sum, n+1, rec.sizes())
	}
	commitsMu.Lock()
	defer commitsMu.Unlock()
	largest := 0
	for _, k := range sizes {
		if k > maxBatch {
			t.Errorf("a commit took %d appends, MaxBatch is %d (commits %v)", k, maxBatch, sizes)
		}
		largest = max(largest, k)
	}
	// The appends that queued up behind the stall share commits.
	if largest != maxBatch {
		t.Errorf("batches %v: none took the %d appends waiting in the full queue", sizes, maxBatch)
	}
	if len(sizes) > n+1-maxBatch+1 {
		t.Errorf("batches %v: %d appends took %d commits", sizes, n+1, len(sizes))
	}
	got, _ := scanAll(t, l, nil)
	if len(got) != n+1 {
		t.Fatalf("Scan: %d events, want %d", len(got), n+1)
	}
}

// TestCommitEncodeFailureIsolated: an event that cannot be encoded fails
// only its own request, not the others of its batch. It hands commit one
// batch directly, so the batch's make-up does not depend on scheduling.
func TestCommitEncodeFailureIsolated(t *testing.T) {
	l, rec := openStalledLog(t, Options{})
	rec.unblock()
	big := lineOfSize(t, Event{ID: testID, Type: "big", Time: testTime}, MaxLineBytes+1)
	_, priv := newKey(t)
	sign := signer(priv, "")
	noKey := errors.New("no key")
	failSign := func([]byte) (Sig, error) { return Sig{}, noKey }
	almost := lineOfSize(t, Event{ID: testID, Type: "almost", Time: testTime}, MaxLineBytes-SigMemberLen/2)

	reqs := []struct {
		name    string
		evs     []*Event
		wantErr error  // errors.Is, if set
		errText string // substring, if set
	}{
		{"good before", []*Event{{Type: "good1"}, {Type: "good1", Shard: "s"}}, nil, ""},
		{"too large", []*Event{{Type: "bad", Shard: "s"}, {ID: testID, Type: "big", Time: testTime, Payload: big}}, ErrTooLarge, ""},
		{"bad payload", []*Event{{Type: "bad", Shard: "t"}, {Type: "bad", Payload: 7}}, nil, "not a JSON object"},
		{"signed", []*Event{{Type: "good2", Shard: "s", Sign: sign}}, nil, ""},
		{"sign fails", []*Event{{Type: "bad", Shard: "t", Sign: sign}, {Type: "bad", Shard: "s", Sign: failSign}}, noKey, ""},
		{"too large once signed", []*Event{{Type: "bad", Shard: "s", Sign: sign}, {ID: testID, Type: "almost", Time: testTime, Payload: almost, Sign: sign}}, ErrTooLarge, ""},
		{"good after", []*Event{{Type: "good2", Shard: "s"}}, nil, ""},
	}
	batch := make([]*appendReq, len(reqs))
	for i, r := range reqs {
		batch[i] = &appendReq{evs: r.evs, done: make(chan error, 1)}
	}
	l.commit(batch) // the committer is idle: no Append is running
	for i, r := range reqs {
		err := <-batch[i].done
		switch {
		case r.wantErr != nil && !errors.Is(err, r.wantErr):
			t.Errorf("%s: error %v, want %v", r.name, err, r.wantErr)
		case r.errText != "" && (err == nil || !strings.Contains(err.Error(), r.errText)):
			t.Errorf("%s: error %v, want one containing %q", r.name, err, r.errText)
		case r.wantErr == nil && r.errText == "" && err != nil:
			t.Errorf("%s: error %v, want nil", r.name, err)
		}
	}
	if sizes := rec.sizes(); !slices.Equal(sizes, []int{4}) {
		t.Errorf("OnCommit batches %v, want one of 4 events (the failed requests left out)", sizes)
	}
	got, _ := scanAll(t, l, nil)
	var types []string
	for _, e := range got {
		types = append(types, e.Type)
	}
	if want := []string{"good1", "good1", "good2", "good2"}; !slices.Equal(types, want) {
		t.Fatalf("log holds %v, want %v", types, want)
	}
	if !Signed(got[2].Raw) || Signed(got[3].Raw) {
		t.Errorf("the signed request's line is not signed, or the unsigned one's is: %s, %s", got[2].Raw, got[3].Raw)
	}
	for _, r := range reqs[3:6] {
		for _, e := range r.evs {
			if r.name != "signed" && (e.Raw != nil || e.ID != "" && e.ID != testID) {
				t.Errorf("%s: a failed event kept its line or its ID: %q %s", r.name, e.ID, e.Raw)
			}
		}
	}
	if b, err := os.ReadFile(filepath.Join(l.Dir(), "messages", "t.jsonl")); len(b) != 0 {
		t.Errorf("a failed request left %q in messages/t.jsonl (%v)", b, err)
	}
	checkPositions(t, l)
}

func TestAppendContextCanceledWhileQueueFull(t *testing.T) {
	const maxBatch, n = 2, 12
	l, rec := openStalledLog(t, Options{MaxBatch: maxBatch})
	errs := stall(t, l, rec, n)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.Append(ctx, &Event{Type: "canceled"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Append with a canceled context and a full queue: %v, want context.Canceled", err)
	}
	rec.unblock()
	for range n + 1 {
		if err := <-errs; err != nil {
			t.Fatalf("Append: %v", err)
		}
	}
	got, _ := scanAll(t, l, nil)
	for _, g := range got {
		if g.Type == "canceled" {
			t.Fatal("the canceled event was written")
		}
	}
	if len(got) != n+1 {
		t.Fatalf("log holds %d events, want %d", len(got), n+1)
	}
}

func TestClose(t *testing.T) {
	t.Run("idempotent", func(t *testing.T) {
		l, err := Open(t.TempDir(), nil)
		if err != nil {
			t.Fatal(err)
		}
		appendOK(t, l, &Event{Type: "t"}, &Event{Type: "t", Shard: "a"})
		for i := range 3 {
			if err := l.Close(); err != nil {
				t.Fatalf("Close #%d: %v", i+1, err)
			}
		}
		select {
		case <-l.done:
		default:
			t.Fatal("Close returned before the committer stopped")
		}
		// The log can still be read after Close.
		if got, _ := scanAll(t, l, nil); len(got) != 2 {
			t.Fatalf("Scan after Close: %d events, want 2", len(got))
		}
	})

	// Append after Close must fail fast with ErrClosed, every time (its
	// select must not enqueue into a queue nobody drains any more).
	t.Run("append after close", func(t *testing.T) {
		dir := t.TempDir()
		l, err := Open(dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		for i := range 50 {
			err, ok := appendWithin(l, &Event{Type: "late"}, 2*time.Second)
			if !ok {
				t.Fatalf("Append #%d after Close did not return", i+1)
			}
			if !errors.Is(err, ErrClosed) {
				t.Fatalf("Append #%d after Close: %v, want ErrClosed", i+1, err)
			}
		}
		if _, err := os.Stat(filepath.Join(dir, EventsFile)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("Append after Close wrote %s", EventsFile)
		}
	})

	// Appends racing with Close either succeed (and are in the log) or
	// fail with ErrClosed; none may hang.
	t.Run("appends racing close", func(t *testing.T) {
		l, err := Open(t.TempDir(), &Options{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		const n = 64
		type result struct {
			e   *Event
			err error
			ok  bool
		}
		results := make(chan result, n)
		start := make(chan struct{})
		for range n {
			go func() {
				<-start
				e := &Event{Type: "race"}
				err, ok := appendWithin(l, e, 2*time.Second)
				results <- result{e, err, ok}
			}()
		}
		close(start)
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		var written []string
		hung := 0
		for range n {
			r := <-results
			switch {
			case !r.ok:
				hung++
			case r.err == nil:
				written = append(written, r.e.ID)
			case !errors.Is(r.err, ErrClosed):
				t.Errorf("Append racing Close: %v, want nil or ErrClosed", r.err)
			}
		}
		if hung > 0 {
			t.Fatalf("%d of %d Appends racing Close did not return", hung, n)
		}
		got, _ := scanAll(t, l, nil)
		slices.Sort(written)
		if !slices.Equal(eventIDs(got), written) {
			t.Errorf("log holds %d events, %d Appends succeeded", len(got), len(written))
		}
	})
}

// appendWithin appends e, giving up waiting after d (ok false).
func appendWithin(l *Log, e *Event, d time.Duration) (err error, ok bool) {
	done := make(chan error, 1)
	go func() { done <- l.Append(context.Background(), e) }()
	select {
	case err := <-done:
		return err, true
	case <-time.After(d):
		return nil, false
	}
}

func TestOpenErrors(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string) string
	}{
		{"dir is a file", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "file")
			writeFile(t, p, "x")
			return p
		}},
		{"messages is a file", func(t *testing.T, dir string) string {
			writeFile(t, filepath.Join(dir, MessagesDir), "x")
			return dir
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := tt.setup(t, t.TempDir())
			l, err := Open(dir, nil)
			if err == nil {
				l.Close()
				t.Fatal("Open: no error")
			}
		})
	}
}

// goodLine returns a valid event line (with newline).
func goodLine(t testing.TB, typ string) string {
	t.Helper()
	var buf bytes.Buffer
	e := &Event{ID: NewID(), Type: typ, Time: time.Now(), Payload: map[string]string{"k": "v"}}
	if err := e.encode(&buf, e.Payload); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

func TestRepairTornTail(t *testing.T) {
	g1, g2 := goodLine(t, "g1"), goodLine(t, "g2")
	tests := []struct {
		name        string
		rel         string
		content     string
		oldCorrupt  string // already in <file>.corrupt
		wantRepair  bool
		cut         int // where the file is truncated
		malformed   bool
		wantCorrupt string // content of <file>.corrupt after Open
		wantTypes   []string
	}{
		{name: "clean file", rel: EventsFile, content: g1 + g2, wantTypes: []string{"g1", "g2"}},
		{name: "empty file", rel: EventsFile, content: "", wantTypes: nil},
		{name: "clean message shard", rel: "messages/alice.jsonl", content: g1, wantTypes: []string{"g1"}},
		{name: "fragment without newline", rel: EventsFile, content: g1 + g2 + `{"event_id":"01J`,
			wantRepair: true, cut: len(g1 + g2), wantCorrupt: `{"event_id":"01J` + "\n", wantTypes: []string{"g1", "g2"}},
		{name: "only a fragment", rel: EventsFile, content: `{"event`,
			wantRepair: true, cut: 0, wantCorrupt: `{"event` + "\n"},
		{name: "complete event missing only its newline", rel: "messages/bob.jsonl", content: g1 + strings.TrimSuffix(g2, "\n"),
			wantRepair: true, cut: len(g1), wantCorrupt: g2, wantTypes: []string{"g1"}},
		{name: "fragment in a message shard", rel: "messages/alice.jsonl", content: g1 + "garbage",
			wantRepair: true, cut: len(g1), wantCorrupt: "garbage\n", wantTypes: []string{"g1"}},
		{name: "final line not JSON", rel: EventsFile, content: g1 + "not json\n",
			wantRepair: true, cut: len(g1), malformed: true, wantCorrupt: "not json\n", wantTypes: []string{"g1"}},
		{name: "final line JSON but no event", rel: EventsFile, content: g1 + g2 + `{"a":1}` + "\n",
			wantRepair: true, cut: len(g1 + g2), malformed: true, wantCorrupt: `{"a":1}` + "\n", wantTypes: []string{"g1", "g2"}},
		{name: "final line empty", rel: EventsFile, content: g1 + "\n",
			wantRepair: true, cut: len(g1), malformed: true, wantCorrupt: "\n", wantTypes: []string{"g1"}},
		{name: "only a malformed line", rel: "messages/alice.jsonl", content: "{\n",
			wantRepair: true, cut: 0, malformed: true, wantCorrupt: "{\n"},
		{name: "appends to an existing corrupt file", rel: EventsFile, content: g1 + "tail", oldCorrupt: "old\n",
			wantRepair: true, cut: len(g1), wantCorrupt: "old\ntail\n", wantTypes: []string{"g1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, filepath.FromSlash(tt.rel))
			writeFile(t, path, tt.content)
			if tt.oldCorrupt != "" {
				writeFile(t, path+".corrupt", tt.oldCorrupt)
			}
			var logs bytes.Buffer
			l := openLog(t, dir, &Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})

			reps := l.Repairs()
			if !tt.wantRepair {
				if len(reps) != 0 {
					t.Fatalf("Repairs() = %v, want none", reps)
				}
				if _, err := os.Stat(path + ".corrupt"); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("a clean file got a .corrupt beside it")
				}
				if got := readFile(t, path); got != tt.content {
					t.Fatalf("a clean file was changed")
				}
			} else {
				want := Repair{File: tt.rel, Offset: int64(tt.cut), Bytes: len(tt.content) - tt.cut, MovedTo: tt.rel + ".corrupt", Malformed: tt.malformed}
				if len(reps) != 1 || reps[0] != want {
					t.Fatalf("Repairs() = %+v, want [%+v]", reps, want)
				}
				if got := readFile(t, path); got != tt.content[:tt.cut] {
					t.Fatalf("after repair the file holds %q, want %q", got, tt.content[:tt.cut])
				}
				if got := readFile(t, path+".corrupt"); got != tt.wantCorrupt {
					t.Fatalf(".corrupt holds %q, want %q", got, tt.wantCorrupt)
				}
				if s := reps[0].String(); !strings.Contains(s, tt.rel) || !strings.Contains(s, want.MovedTo) {
					t.Errorf("Repair.String() = %q: does not name the files", s)
				}
				if !strings.Contains(logs.String(), "repaired torn tail") {
					t.Errorf("the repair was not logged: %q", logs.String())
				}
				reps[0].File = "changed"
				if l.Repairs()[0].File != tt.rel {
					t.Errorf("Repairs() returned the log's own slice")
				}
			}
			checkPositions(t, l)

			// The next Append starts a clean line, and Scan reads everything.
			next := &Event{Type: "next", Shard: shardName(tt.rel)}
			appendOK(t, l, next)
			got, _ := scanAll(t, l, nil)
			var types []string
			for _, e := range got {
				types = append(types, e.Type)
			}
			if want := append(slices.Clone(tt.wantTypes), "next"); !slices.Equal(types, want) {
				t.Fatalf("Scan after repair: %v, want %v", types, want)
			}
			checkPositions(t, l)

			// A second Open finds nothing more to repair.
			l.Close()
			l2 := openLog(t, dir, nil)
			if r := l2.Repairs(); len(r) != 0 {
				t.Fatalf("second Open repaired again: %v", r)
			}
		})
	}
}

func TestScanCorruptMiddle(t *testing.T) {
	g1, g2, g3 := goodLine(t, "g1"), goodLine(t, "g2"), goodLine(t, "g3")
	tests := []struct {
		name      string
		files     map[string]string
		from      map[string]int64
		wantFile  string
		wantLine  int
		wantErr   string
		wantCalls int // events passed to fn before the error
	}{
		{name: "bad line between good ones", files: map[string]string{EventsFile: g1 + "garbage\n" + g2},
			wantFile: EventsFile, wantLine: 2, wantErr: "not valid JSON", wantCalls: 1},
		{name: "missing type in a message shard", files: map[string]string{"messages/bob.jsonl": `{"event_id":"X","timestamp":"2025-01-01T00:00:00Z"}` + "\n" + g1},
			wantFile: "messages/bob.jsonl", wantLine: 1, wantErr: "no type", wantCalls: 0},
		{name: "empty line", files: map[string]string{EventsFile: g1 + g2 + "\n" + g3},
			wantFile: EventsFile, wantLine: 3, wantErr: "not valid JSON", wantCalls: 2},
		{name: "line over MaxLineBytes", files: map[string]string{EventsFile: g1 + strings.Repeat("x", MaxLineBytes+10) + "\n" + g2},
			wantFile: EventsFile, wantLine: 2, wantErr: "longer than", wantCalls: 1},
		{name: "bad line in one of two shards", files: map[string]string{EventsFile: g1 + g3, "messages/alice.jsonl": g2 + "{}\n" + goodLine(t, "g4")},
			wantFile: "messages/alice.jsonl", wantLine: 2, wantErr: "no event_id", wantCalls: 2},
		{name: "scan from a position: line counted from the file's start", files: map[string]string{EventsFile: g1 + g2 + "garbage\n" + g3},
			from: map[string]int64{EventsFile: int64(len(g1))}, wantFile: EventsFile, wantLine: 3, wantErr: "not valid JSON", wantCalls: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for rel, content := range tt.files {
				writeFile(t, filepath.Join(dir, filepath.FromSlash(rel)), content)
			}
			l := openLog(t, dir, nil)
			if r := l.Repairs(); len(r) != 0 {
				t.Fatalf("Open repaired a file whose last line is good: %v", r)
			}
			// Twice: a corrupt line is reported every time, never skipped.
			for range 2 {
				calls := 0
				_, err := l.Scan(context.Background(), tt.from, func(*Event) error { calls++; return nil })
				var ce *CorruptError
				if !errors.As(err, &ce) {
					t.Fatalf("Scan error = %v, want a *CorruptError", err)
				}
				if ce.File != tt.wantFile || ce.Line != tt.wantLine {
					t.Fatalf("CorruptError at %s:%d, want %s:%d", ce.File, ce.Line, tt.wantFile, tt.wantLine)
				}
				if msg := err.Error(); !strings.Contains(msg, fmt.Sprintf("%s:%d", tt.wantFile, tt.wantLine)) || !strings.Contains(msg, tt.wantErr) {
					t.Fatalf("error %q does not name %s:%d and %q", msg, tt.wantFile, tt.wantLine, tt.wantErr)
				}
				if errors.Unwrap(err) == nil {
					t.Fatal("CorruptError does not unwrap to its cause")
				}
				if calls != tt.wantCalls {
					t.Fatalf("fn called %d times before the error, want %d", calls, tt.wantCalls)
				}
			}
		})
	}
}

// TestScanUnterminatedLineWrittenBehindOurBack: a fragment appended after
// Open repaired the file is a CorruptError, not a silently dropped event.
func TestScanUnterminatedLineWrittenBehindOurBack(t *testing.T) {
	dir := t.TempDir()
	g1 := goodLine(t, "g1")
	writeFile(t, filepath.Join(dir, "messages", "x.jsonl"), g1)
	l := openLog(t, dir, nil)
	f, err := os.OpenFile(filepath.Join(dir, "messages", "y.jsonl"), os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(strings.TrimSuffix(goodLine(t, "g2"), "\n"))
	f.Close()
	_, err = l.Scan(context.Background(), nil, func(*Event) error { return nil })
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.File != "messages/y.jsonl" || ce.Line != 1 {
		t.Fatalf("Scan error = %v, want a CorruptError at messages/y.jsonl:1", err)
	}
}

func TestScanContextCanceled(t *testing.T) {
	l := openLog(t, t.TempDir(), &Options{NoSync: true})
	evs := make([]*Event, 10_000)
	for i := range evs {
		evs[i] = &Event{Type: "t"}
	}
	appendOK(t, l, evs...)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls := 0
	_, err := l.Scan(ctx, nil, func(*Event) error { calls++; return nil })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Scan with a canceled context: %v, want context.Canceled", err)
	}
	if calls >= len(evs) {
		t.Fatalf("Scan with a canceled context passed all %d events", calls)
	}
}
