package thrum

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/internal/dirlock"
)

// VerifyReport is what Verify found. A report without problems means every
// line of the log parses and the projection equals a rebuild from the log.
type VerifyReport struct {
	Lines    int       `json:"lines"`  // log lines read
	Events   int       `json:"events"` // of which valid events
	Problems []Problem `json:"problems"`
	Repairs  []string  `json:"repairs,omitempty"` // torn tails moved aside when the log was opened
	// Sealed counts, by team key, the events whose body no key held here
	// opens: not a fault of the log, but bodies this clone cannot read.
	Sealed []SealedEvents `json:"sealed,omitempty"`
}

// SealedEvents counts the events sealed with one team key that stay
// sealed here: the key is not held, or (Held) it is and they do not
// open with it, having been moved or damaged.
type SealedEvents struct {
	Key    string `json:"key"`
	Events int    `json:"events"`
	Held   bool   `json:"held"`
}

// OK reports whether Verify found nothing wrong.
func (r *VerifyReport) OK() bool { return len(r.Problems) == 0 }

// Problem is one thing Verify found wrong. File and Line name the log line
// it concerns, when there is one (File is relative to the data directory).
type Problem struct {
	File    string `json:"file,omitempty"`
	Line    int    `json:"line,omitempty"`
	Message string `json:"message"`
}

// String names the problem's place (file and line, or the message) and
// what is wrong there.
func (p Problem) String() string {
	switch {
	case p.File != "" && p.Line > 0:
		return fmt.Sprintf("%s:%d: %s", p.File, p.Line, p.Message)
	case p.File != "":
		return p.File + ": " + p.Message
	}
	return p.Message
}

// Verify checks the whole log against the projection: it reads every line
// of every shard (reporting each one that does not parse, and event IDs
// that repeat), then rebuilds the projection from the log into a temporary
// file next to the live one and compares them row by row, naming the log
// line of each message whose row differs. This finds what a start does not
// check (DESIGN.md, "Durability and storage faults"): a line changed in
// place before the projection's checkpoint. Writes wait while it runs, and
// it is meant for a quiet node (thrum doctor runs with the daemon
// stopped): batches that reach the log but not the projection while it
// runs are reported as rows the projection lacks.
// Problems are reported in the VerifyReport; the error is for a check that
// could not be done.
func (n *Node) Verify(ctx context.Context) (*VerifyReport, error) {
	n.proj.mu.Lock() // writes wait: their batches cannot apply
	defer n.proj.mu.Unlock()
	rep := &VerifyReport{Problems: []Problem{}}
	for _, r := range n.log.Repairs() {
		rep.Repairs = append(rep.Repairs, r.String())
	}
	if k := len(n.proj.pending); k > 0 {
		rep.Problems = append(rep.Problems, Problem{Message: fmt.Sprintf("%d committed event(s) wait to be applied to the projection (%v)", k, n.proj.applyErr)})
	}
	seen, bad, err := verifyLines(ctx, n.log, rep)
	if err != nil {
		return nil, err
	}
	if bad > 0 {
		rep.Problems = append(rep.Problems, Problem{Message: "the projection was not compared with the log: a rebuild needs every line to parse; fix or remove the lines above"})
		return rep, nil
	}
	if rep.Sealed, err = n.sealedEvents(ctx); err != nil {
		return nil, err
	}

	tmp := n.opts.DBPath + fmt.Sprintf(".verify-%d", os.Getpid())
	defer func() {
		for _, s := range []string{"", "-wal", "-shm"} {
			os.Remove(tmp + s)
		}
	}()
	rebuilt, err := n.Rebuild(ctx, tmp)
	if err != nil {
		return nil, fmt.Errorf("thrum: verify: %w", err)
	}
	want, err := rebuilt.Dump(ctx)
	rebuilt.Close()
	if err != nil {
		return nil, fmt.Errorf("thrum: verify: %w", err)
	}
	got, err := n.store.Dump(ctx)
	if err != nil {
		return nil, fmt.Errorf("thrum: verify: %w", err)
	}
	db := filepath.Base(n.opts.DBPath)
	if err := n.store.CheckSearchIndex(ctx); err != nil {
		rep.Problems = append(rep.Problems, Problem{File: db, Message: err.Error() + "; a rebuild of the projection rebuilds it"})
	}
	tables := make([]string, 0, len(want))
	for t := range want {
		// The search indexes' terms follow from the messages: a message
		// that differs is reported once, as a message, and the indexes
		// are checked against the live messages by CheckSearchIndex above.
		if !strings.HasPrefix(t, "messages_fts") {
			tables = append(tables, t)
		}
	}
	sort.Strings(tables)
	for _, t := range tables {
		onlyLog, onlyLive := rowsByKey(want[t]), rowsByKey(got[t])
		for k := range onlyLog {
			if _, ok := onlyLive[k]; ok && slices.Equal(onlyLog[k], onlyLive[k]) {
				delete(onlyLog, k)
				delete(onlyLive, k)
			}
		}
		keys := map[string]bool{}
		for k := range onlyLog {
			keys[k] = true
		}
		for k := range onlyLive {
			keys[k] = true
		}
		sorted := make([]string, 0, len(keys))
		for k := range keys {
			sorted = append(sorted, k)
		}
		sort.Strings(sorted)
		for _, k := range sorted {
			p := Problem{File: db}
			if at, ok := seen[k]; ok {
				p.File, p.Line = at.file, at.line
			}
			switch l, v := onlyLog[k], onlyLive[k]; {
			case v == nil:
				p.Message = fmt.Sprintf("table %s: the log has %s, the projection does not", t, clip(l))
			case l == nil:
				p.Message = fmt.Sprintf("table %s: the projection has %s, which the log does not", t, clip(v))
			default:
				p.Message = fmt.Sprintf("table %s: the log says %s, the projection %s", t, clip(l), clip(v))
			}
			rep.Problems = append(rep.Problems, p)
		}
	}
	return rep, nil
}

// pos is a line of the log.
type pos struct {
	file string
	line int
}

// verifyLines reads every line of the log into rep: lines that do not
// parse, event IDs that repeat, events out of their place and fields
// that break the log's rules (events an older thrum admitted) are
// problems. It returns where each
// event (and each message, by message ID) is, and how many lines are bad.
func verifyLines(ctx context.Context, lg *eventlog.Log, rep *VerifyReport) (map[string]pos, int, error) {
	seen := map[string]pos{}
	now := time.Now()
	bad := 0
	err := lg.Verify(ctx, func(li eventlog.LineInfo) error {
		rep.Lines++
		if li.Err != nil {
			bad++
			rep.Problems = append(rep.Problems, Problem{File: li.File, Line: li.Line, Message: "not a valid event: " + li.Err.Error()})
			return nil
		}
		rep.Events++
		if p, dup := seen[li.Event.ID]; dup {
			rep.Problems = append(rep.Problems, Problem{File: li.File, Line: li.Line,
				Message: fmt.Sprintf("event %s repeats the event at %s:%d", li.Event.ID, p.file, p.line)})
		}
		if err := eventlog.CheckPlace(li.Event.Shard, li.Event); err != nil {
			rep.Problems = append(rep.Problems, Problem{File: li.File, Line: li.Line,
				Message: err.Error() + " (taken from a remote before sync checked authorship, or written by hand): it is applied as it stands"})
		}
		if err := eventlog.CheckFields(li.Event, now); err != nil {
			rep.Problems = append(rep.Problems, Problem{File: li.File, Line: li.Line,
				Message: fmt.Sprintf("a %s whose %v (taken from a remote before sync checked fields, or written by hand): it is applied as it stands", li.Event.Type, err)})
		}
		seen[li.Event.ID] = pos{li.File, li.Line}
		if li.Event.Type == eventlog.TypeMessageCreate {
			if mid := messageIDOf(li.Event.Raw); mid != "" {
				seen[mid] = pos{li.File, li.Line} // rows of the messages table are keyed by message ID
			}
		}
		return nil
	})
	if err != nil {
		return nil, 0, fmt.Errorf("thrum: verify: %w", err)
	}
	return seen, bad, nil
}

// VerifyLog checks every line of the log in the data directory dir, for
// when Open fails on a damaged log: it reports each line that does not
// parse, with its file and line, without the projection. Like Open, it
// takes the directory's lock and moves torn final lines aside.
func VerifyLog(ctx context.Context, dir string) (*VerifyReport, error) {
	lock, err := dirlock.Lock(dir)
	if err != nil {
		return nil, err
	}
	defer lock.Close()
	lg, err := eventlog.Open(dir, nil)
	if err != nil {
		return nil, fmt.Errorf("thrum: verify: %w", err)
	}
	defer lg.Close()
	rep := &VerifyReport{Problems: []Problem{}}
	for _, r := range lg.Repairs() {
		rep.Repairs = append(rep.Repairs, r.String())
	}
	if _, _, err := verifyLines(ctx, lg, rep); err != nil {
		return nil, err
	}
	return rep, nil
}

// rowsByKey groups Dump rows by their first column.
func rowsByKey(rows []string) map[string][]string {
	out := map[string][]string{}
	for _, r := range rows {
		k := r
		if strings.HasPrefix(r, `["`) {
			if i := strings.Index(r[2:], `"`); i >= 0 {
				k = r[2 : 2+i]
			}
		}
		out[k] = append(out[k], r)
	}
	return out
}

func clip(rows []string) string {
	s := strings.Join(rows, "; ")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// messageIDOf returns the message_id field of a message.create line.
func messageIDOf(line []byte) string {
	const key = `"message_id":"`
	s := string(line)
	i := strings.Index(s, key)
	if i < 0 {
		return ""
	}
	rest := s[i+len(key):]
	if j := strings.IndexByte(rest, '"'); j >= 0 {
		return rest[:j]
	}
	return ""
}

// sealedEvents reads the log for the events whose body no held team key
// opens (the log opens what it can as it decodes), by key.
func (n *Node) sealedEvents(ctx context.Context) ([]SealedEvents, error) {
	keys := n.log.TeamKeys()
	counts := map[string]int{}
	_, err := n.log.Scan(ctx, nil, func(e *eventlog.Event) error { // nil: from the start
		var s *eventlog.Sealed
		switch e.Type {
		case eventlog.TypeMessageCreate:
			p, _ := eventlog.PayloadAs[eventlog.MessageCreate](e)
			s = p.Sealed
		case eventlog.TypeMessageEdit:
			p, _ := eventlog.PayloadAs[eventlog.MessageEdit](e)
			s = p.Sealed
		}
		if s != nil {
			counts[s.KeyID()]++
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("thrum: verify: %w", err)
	}
	var out []SealedEvents
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		out = append(out, SealedEvents{Key: k, Events: counts[k], Held: keys != nil && keys.TeamKey(k) != nil})
	}
	return out, nil
}
