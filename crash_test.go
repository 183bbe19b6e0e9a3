//go:build unix

package thrum_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/internal/thrumtest"
	"github.com/thrumhq/thrum/rpc"
)

// crashChildEnv names the data directory of the child process of
// TestCrashLosesNoAcknowledgedMessage; TestCrashChild does nothing without
// it.
const crashChildEnv = "THRUM_CRASH_CHILD"

// crashAgents send the messages; the child has two goroutines for the
// first, so that one agent's shard sees concurrent appends too.
var crashAgents = []string{"crash_a", "crash_b", "crash_c"}

// TestCrashLosesNoAcknowledgedMessage checks "acknowledged means durable"
// (DESIGN.md) against the real thing: a child process sends messages from
// several goroutines with a durable node and prints each message ID once
// SendMessage has returned it; the parent SIGKILLs the child at a random
// moment, reopens the directory and checks that every acknowledged message
// is there exactly once — in the projection, in listings and in the log —
// and that the log still parses end to end. Torn tails must be repaired
// by Open, never be fatal. Twenty-odd kills in a row hit the same
// directory, so each recovery starts from the previous one's repairs.
func TestCrashLosesNoAcknowledgedMessage(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a child process 20 times: skipped in -short mode")
	}
	t.Parallel() // its own directory and child processes; mostly waiting on them
	seed := thrumtest.Seed(t)
	r := rand.New(rand.NewPCG(seed, 1))

	const (
		minRounds = 20
		maxRounds = 25
		budget    = 20 * time.Second // no rounds past minRounds after this
	)
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "data")
	acked := map[string]string{} // message_id → author
	var (
		kills, atStartup, repairs, tears, unacked int
		start                                     = time.Now()
	)
	for round := 0; round < maxRounds; round++ {
		if round >= minRounds && time.Since(start) > budget {
			break
		}
		// Mostly kill while the child sends; every fourth time count from
		// the process start instead, to also hit Open, its repairs and the
		// registration.
		delay := time.Duration(20+r.IntN(281)) * time.Millisecond
		fromStart := round%4 == 3
		acks := runCrashChild(t, dir, round, delay, fromStart)
		kills++
		if fromStart {
			atStartup++
		}
		fresh := map[string]string{}
		for _, a := range acks {
			if prev, ok := acked[a.id]; ok {
				t.Fatalf("round %d: message %s acknowledged twice (by %s and %s)", round, a.id, prev, a.agent)
			}
			acked[a.id], fresh[a.id] = a.agent, a.agent
		}
		// A kill rarely lands inside a write(2), so tear a tail by hand
		// every fifth round too: half of the last line, as a torn write
		// leaves it, or (every tenth) that half line with a newline, a
		// final line that does not parse.
		var tear *tornTail
		if round%5 == 2 {
			shard := crashAgents[round%len(crashAgents)]
			if round%10 == 2 {
				shard = "" // the events shard
			}
			tear = tearTail(t, dir, lastSegment(dir, shard), round%10 == 7)
			if tear != nil {
				tears++
			}
		}
		last := round == maxRounds-1 || round >= minRounds-1 && time.Since(start) > budget
		st := verifyAfterCrash(t, dir, filepath.Join(tmp, fmt.Sprintf("rebuilt%d.db", round)), round, acked, fresh, tear, round == 9 || last)
		repairs += st.repairs
		unacked = st.logged - len(acked)
		if t.Failed() {
			t.FailNow()
		}
	}
	if len(acked) == 0 {
		t.Fatalf("no message was acknowledged in %d rounds: the test checked nothing", kills)
	}
	t.Logf("%d kills (%d timed from process start), %d messages acknowledged, %d more written but unacknowledged, "+
		"%d torn tails repaired (%d torn by hand, %d by kills), %v",
		kills, atStartup, len(acked), unacked, repairs, tears, repairs-tears, time.Since(start).Round(time.Millisecond))
}

// lastSegment returns the path of a shard's last segment file: the only
// one ever written to, so the only one a write can tear.
func lastSegment(dir, shard string) string {
	n := 0
	for k := 1; ; k++ {
		if _, err := os.Stat(filepath.Join(dir, filepath.FromSlash(eventlog.SegmentPath(shard, k)))); err != nil {
			return eventlog.SegmentPath(shard, n)
		}
		n = k
	}
}

// tornTail is a tail tearTail appended to a shard.
type tornTail struct {
	shard     string // relative to the log directory
	offset    int64  // the shard's size before
	bytes     []byte // what was appended
	malformed bool   // a complete line that does not parse
}

// tearTail appends to shard the first half of its last line, without a
// newline or, with malformed, with one. It returns nil (and tears
// nothing) if the shard is missing, empty or already torn.
func tearTail(t *testing.T, dir, shard string, malformed bool) *tornTail {
	t.Helper()
	path := filepath.Join(dir, filepath.FromSlash(shard))
	b, err := os.ReadFile(path)
	if err != nil || len(b) == 0 || b[len(b)-1] != '\n' {
		t.Logf("not tearing %s: %d bytes, %v", shard, len(b), err)
		return nil
	}
	lastLine := b[bytes.LastIndexByte(b[:len(b)-1], '\n')+1:]
	frag := append([]byte(nil), lastLine[:len(lastLine)/2]...)
	if malformed {
		frag = append(frag, '\n')
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(frag); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return &tornTail{shard: shard, offset: int64(len(b)), bytes: frag, malformed: malformed}
}

type crashAck struct{ agent, id string }

// runCrashChild runs one child on dir, SIGKILLs it delay after it reports
// ready (or after its start, with fromStart) and returns the messages it
// acknowledged.
func runCrashChild(t *testing.T, dir string, round int, delay time.Duration, fromStart bool) []crashAck {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+dir, "THRUM_CRASH_ROUND="+strconv.Itoa(round))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 256)
	go func() {
		defer close(lines)
		br := bufio.NewReader(stdout)
		for {
			s, err := br.ReadString('\n')
			if err != nil {
				return // a last fragment without its newline is no acknowledgement
			}
			lines <- strings.TrimSuffix(s, "\n")
		}
	}()

	var (
		acks   []crashAck
		errs   []string // ERR lines, and anything else the child printed
		kill   <-chan time.Time
		killed bool
	)
	if fromStart {
		kill = time.After(delay)
	}
	notReady := time.After(20 * time.Second)
read:
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				break read
			}
			switch {
			case l == "READY":
				notReady = nil
				if kill == nil && !killed {
					kill = time.After(delay)
				}
			case strings.HasPrefix(l, "ACK "):
				f := strings.Fields(l)
				if len(f) != 3 || !strings.HasPrefix(f[2], "msg_") {
					t.Errorf("round %d: malformed acknowledgement %q", round, l)
					continue
				}
				acks = append(acks, crashAck{agent: f[1], id: f[2]})
			case l != "PASS" && !strings.HasPrefix(l, "=== RUN") && len(errs) < 50:
				errs = append(errs, l)
			}
		case <-kill:
			if err := cmd.Process.Kill(); err != nil { // SIGKILL: no deferred cleanup runs
				t.Fatalf("round %d: kill: %v", round, err)
			}
			kill, killed = nil, true
		case <-notReady:
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("round %d: child not ready after 20s; stderr:\n%s", round, stderr.String())
		}
	}
	werr := cmd.Wait()
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !killed || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("round %d: child ended by itself (%v) instead of being killed; output:\n%s\nstderr:\n%s",
			round, werr, strings.Join(errs, "\n"), stderr.String())
	}
	if len(errs) > 0 {
		t.Errorf("round %d: the child reported errors before it was killed:\n%s", round, strings.Join(errs, "\n"))
	}
	if bytes.Contains(stderr.Bytes(), []byte("DATA RACE")) {
		t.Errorf("round %d: the race detector fired in the child:\n%s", round, stderr.String())
	}
	return acks
}

type crashStats struct {
	repairs int // torn tails Open repaired
	logged  int // message.create events in the log
}

// verifyAfterCrash opens dir as a node after a kill and checks it against
// the acknowledged messages: fresh ones (this round's) are read one by
// one; all are listed exactly once; the log parses and holds each
// message once, the same set as the projection. A tail torn by hand must
// have been repaired exactly so. With deep, a projection rebuilt from the
// log must also equal the recovered one.
func verifyAfterCrash(t *testing.T, dir, rebuildPath string, round int, acked, fresh map[string]string, tear *tornTail, deep bool) crashStats {
	ctx := context.Background()
	n, err := thrum.Open(context.Background(), dir, nil)
	if err != nil {
		t.Fatalf("round %d: open after kill: %v", round, err)
	}
	defer n.Close()
	var st crashStats
	tearRepaired := false
	for _, rp := range n.Repairs() {
		st.repairs++
		t.Logf("round %d: repaired %s", round, rp)
		if tear != nil && rp.File == tear.shard {
			tearRepaired = true
			if rp.Offset != tear.offset || rp.Bytes != len(tear.bytes) || rp.Malformed != tear.malformed {
				t.Errorf("round %d: repair %+v, want offset %d, %d bytes, malformed %v", round, rp, tear.offset, len(tear.bytes), tear.malformed)
			}
		}
	}
	if tear != nil {
		if !tearRepaired {
			t.Errorf("round %d: the tail torn in %s (%d bytes at %d) was not repaired; repairs: %v", round, tear.shard, len(tear.bytes), tear.offset, n.Repairs())
		}
		fi, err := os.Stat(filepath.Join(dir, filepath.FromSlash(tear.shard)))
		if err != nil || fi.Size() != tear.offset {
			t.Errorf("round %d: %s after repair: %v, %v; want %d bytes", round, tear.shard, fi, err, tear.offset)
		}
		moved, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(tear.shard)+".corrupt"))
		want := bytes.TrimSuffix(tear.bytes, []byte("\n"))
		if err != nil || !bytes.HasSuffix(moved, append(want, '\n')) {
			t.Errorf("round %d: %s.corrupt does not end with the torn tail: %v", round, tear.shard, err)
		}
	}

	for id, agent := range fresh {
		res, err := n.GetMessage(ctx, &rpc.GetMessageParams{MessageID: id})
		if err != nil {
			t.Errorf("round %d: acknowledged message %s lost: %v", round, id, err)
			continue
		}
		if res.Message.Author.AgentID != agent {
			t.Errorf("round %d: message %s has author %q, acknowledged for %q", round, id, res.Message.Author.AgentID, agent)
		}
	}

	listed := map[string]int{}
	for _, agent := range crashAgents {
		total := -1
		count := 0
		for page := 1; ; page++ {
			res, err := n.ListMessages(ctx, &rpc.ListMessagesParams{AuthorID: agent, PageSize: 100, Page: page, SortOrder: "asc"})
			if err != nil {
				t.Fatalf("round %d: list %s page %d: %v", round, agent, page, err)
			}
			if total >= 0 && res.Total != total {
				t.Errorf("round %d: list %s: total changed from %d to %d between pages", round, agent, total, res.Total)
			}
			total = res.Total
			for _, m := range res.Messages {
				listed[m.MessageID]++
				count++
				if m.AgentID != agent {
					t.Errorf("round %d: listing by author %s returned %s by %s", round, agent, m.MessageID, m.AgentID)
				}
			}
			if page >= res.TotalPages {
				break
			}
		}
		if count != total {
			t.Errorf("round %d: list %s: %d messages over all pages, total says %d", round, agent, count, total)
		}
	}
	for id, c := range listed {
		if c != 1 {
			t.Errorf("round %d: message %s listed %d times", round, id, c)
		}
	}
	for id := range acked {
		if listed[id] != 1 {
			t.Errorf("round %d: acknowledged message %s (by %s) listed %d times, want once", round, id, acked[id], listed[id])
		}
	}

	creates := map[string]int{}
	_, err = n.EventLog().Scan(ctx, nil, func(e *eventlog.Event) error {
		if e.Type != eventlog.TypeMessageCreate {
			return nil
		}
		id := messageIDOf(e.Raw)
		if id == "" {
			return fmt.Errorf("event %s: message.create without a message_id: %.200s", e.ID, e.Raw)
		}
		creates[id]++
		return nil
	})
	if err != nil {
		t.Fatalf("round %d: the log does not scan after repair: %v", round, err)
	}
	st.logged = len(creates)
	for id, c := range creates {
		if c != 1 {
			t.Errorf("round %d: message %s has %d message.create events in the log", round, id, c)
		}
		if listed[id] != 1 {
			t.Errorf("round %d: message %s is in the log but not in the recovered projection", round, id)
		}
	}
	for id := range listed {
		if creates[id] == 0 {
			t.Errorf("round %d: message %s is in the projection but not in the log", round, id)
		}
	}

	if deep {
		rebuilt, err := n.Rebuild(ctx, rebuildPath)
		if err != nil {
			t.Fatalf("round %d: rebuild: %v", round, err)
		}
		defer rebuilt.Close()
		if d := diffDumps(dumpProjection(t, thrum.ProjectionOf(n)), dumpProjection(t, rebuilt)); d != "" {
			t.Errorf("round %d: the recovered projection differs from one rebuilt from the log (first = recovered):\n%s", round, d)
		}
	}
	return st
}

// messageIDOf returns the message_id of a message.create line without
// decoding the rest (some contents are large; Scan has validated the line
// as JSON already). The envelope holds no message_id, and inside a JSON
// string a quote is escaped, so the first match is the payload's field.
func messageIDOf(line []byte) string {
	const key = `"message_id":"`
	i := bytes.Index(line, []byte(key))
	if i < 0 {
		return ""
	}
	rest := line[i+len(key):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return ""
	}
	return string(rest[:j])
}

// TestCrashChild is the child process of TestCrashLosesNoAcknowledgedMessage.
// It runs only with THRUM_CRASH_CHILD set to a data directory: it opens a
// durable node there, makes sure its agents are registered with a session,
// prints READY, then sends messages from four goroutines and prints
// "ACK <agent> <message_id>" after each send returns, until it is killed.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashChildEnv)
	if dir == "" {
		t.Skip("helper process of TestCrashLosesNoAcknowledgedMessage")
	}
	out := &lineWriter{}
	ctx := context.Background()
	n, err := thrum.Open(context.Background(), dir, nil) // durable: fsync before every acknowledgement
	if err != nil {
		out.printf("ERR open: %v", err)
		t.Fatal(err)
	}
	defer n.Close()

	have := map[string]bool{}
	agents, err := n.ListAgents(ctx, &rpc.ListAgentsParams{Role: "crasher"})
	if err != nil {
		out.printf("ERR list agents: %v", err)
		t.Fatal(err)
	}
	for _, a := range agents.Agents {
		have[a.AgentID] = true
	}
	for _, name := range crashAgents {
		if !have[name] {
			if _, err := n.RegisterAgent(ctx, &rpc.RegisterAgentParams{Name: name, Role: "crasher", Module: "crash"}); err != nil {
				out.printf("ERR register %s: %v", name, err)
				t.Fatal(err)
			}
		}
		ss, err := n.ListSessions(ctx, &rpc.ListSessionsParams{AgentID: name, ActiveOnly: true})
		if err != nil {
			out.printf("ERR list sessions %s: %v", name, err)
			t.Fatal(err)
		}
		if len(ss.Sessions) == 0 {
			if _, err := n.StartSession(thrum.AsAgent(ctx, name), &rpc.StartSessionParams{AgentID: name}); err != nil {
				out.printf("ERR start session %s: %v", name, err)
				t.Fatal(err)
			}
		}
	}
	out.printf("READY")

	round := os.Getenv("THRUM_CRASH_ROUND")
	deadline := time.Now().Add(30 * time.Second)     // the parent kills long before
	big := strings.Repeat("0123456789abcdef", 4<<10) // 64 KiB: a write the kill may tear
	var wg sync.WaitGroup
	for g, agent := range append(crashAgents, crashAgents[0]) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			actx := thrum.AsAgent(ctx, agent)
			r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(g)))
			for i := 0; time.Now().Before(deadline); i++ {
				// A little pause keeps the log (and the checks after each
				// kill) small while appends still overlap.
				time.Sleep(time.Duration(r.IntN(4000)) * time.Microsecond)
				p := &rpc.SendMessageParams{Content: fmt.Sprintf("round %s sender %d message %d", round, g, i)}
				switch i % 32 {
				case 5, 21:
					p.Mentions = []string{crashAgents[(g+1)%len(crashAgents)]}
				case 11:
					p.Content += " " + big
				}
				res, err := n.SendMessage(actx, p)
				if err != nil {
					out.printf("ERR send as %s: %v", agent, err)
					return
				}
				out.printf("ACK %s %s", agent, res.MessageID)
			}
		}()
	}
	wg.Wait()
}

// lineWriter writes each line to stdout in one write(2), unbuffered: a
// line is out as soon as printf returns, and lines never interleave.
type lineWriter struct{ mu sync.Mutex }

func (w *lineWriter) printf(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	os.Stdout.WriteString(fmt.Sprintf(format, args...) + "\n")
}
