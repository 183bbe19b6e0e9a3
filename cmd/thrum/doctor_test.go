package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/thrumhq/thrum/internal/thrumtest"
)

// TestStartsDoctorAndRepairs runs the real binary through the storage
// fault paths a user meets: several `daemon start` at once (one starts, the
// others report it running), a send retried with its idempotency key,
// doctor finding a same-length overwrite and --rebuild fixing it, a garbage
// line stopping the start with its line named (and only this run's log
// shown), and a torn tail repaired and reported by start.
func TestStartsDoctorAndRepairs(t *testing.T) {
	t.Parallel()
	thrumBin := thrumtest.Binary(t)
	repo := t.TempDir()
	c := &thrumCLI{t: t, repo: repo, bin: thrumBin}
	c.ok("", "init")
	t.Cleanup(func() { c.run("daemon", "stop") })

	results := make([]result, 4)
	var wg sync.WaitGroup
	for i := range results {
		wg.Add(1)
		go func() { defer wg.Done(); results[i] = c.run("daemon", "start") }()
	}
	wg.Wait()
	started, running := 0, map[string]bool{}
	re := regexp.MustCompile(`Daemon (started|already running) \(pid (\d+)\)`)
	for _, r := range results {
		m := re.FindStringSubmatch(r.stdout)
		if r.code != 0 || m == nil {
			t.Fatalf("concurrent start:\n%s", r)
		}
		if m[1] == "started" {
			started++
		}
		running[m[2]] = true
	}
	if started != 1 || len(running) != 1 {
		t.Fatalf("%d of 4 concurrent starts said started, pids %v:\n%v", started, running, results)
	}

	c.ok("", "quickstart", "--name", "alice", "--role", "dev", "--module", "m")
	c.ok("alice", "send", "hello one")
	a := c.ok("alice", "send", "hello two", "--idempotency-key", "k1")
	b := c.ok("alice", "send", "hello two", "--idempotency-key", "k1")
	if a.stdout != b.stdout {
		t.Fatalf("a send repeating a key stored a second message:\n%s\n%s", a, b)
	}
	// The key with other content is refused, not answered with the first.
	c.fails(exitError, "alice", []string{"send", "hello two again", "--idempotency-key", "k1"}, "idempotency_key", "different content")
	c.ok("", "daemon", "stop")

	shard := filepath.Join(repo, ".thrum", "log", "messages", "alice.jsonl")
	orig, err := os.ReadFile(shard)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(shard, []byte(strings.Replace(string(orig), "hello one", "jello one", 1)), 0o644)
	r := c.run("doctor")
	if r.code != exitError || !strings.Contains(r.stdout, "messages/alice.jsonl:1: table messages") || !strings.Contains(r.stdout, "jello one") {
		t.Fatalf("doctor after an overwrite:\n%s", r)
	}
	r = c.ok("", "doctor", "--rebuild")
	contains(t, "doctor --rebuild", r.stdout, "Rebuilt ", "No problems found.")
	var rep map[string]any
	c.okJSON(&rep, "", "doctor")
	if rep["ok"] != true {
		t.Fatalf("doctor --json after the rebuild: %v", rep)
	}

	lines := strings.SplitAfter(string(orig), "\n")
	os.WriteFile(shard, []byte(lines[0]+"garbage\n"+strings.Join(lines[1:], "")), 0o644)
	r = c.fails(exitError, "", []string{"daemon", "start"}, "messages/alice.jsonl:2: corrupt event: line is not valid JSON\n", "thrum doctor")
	if strings.Contains(r.stderr, "thrum daemon ready") {
		t.Errorf("the failed start shows an earlier run's log:\n%s", r)
	}
	r = c.fails(exitError, "", []string{"doctor"})
	contains(t, "doctor on a garbage line", r.stdout, "messages/alice.jsonl:2: not a valid event")

	// A torn tail (a crash mid-write) is moved aside, and start says so.
	os.WriteFile(shard, append(orig, `{"event_id":"01J`...), 0o644)
	r = c.ok("", "daemon", "start")
	contains(t, "start after a torn tail", r.stdout, "Daemon started", "repaired: messages/alice.jsonl: moved an unterminated final line")
	r = c.ok("", "daemon", "status")
	contains(t, "status after a repair", r.stdout, "repaired: messages/alice.jsonl")
}

// TestStartNamesDamageInAnEarlierSegment runs the real binary on a shard
// continued in segments: a line in the middle of the first segment
// replaced by shorter text moves every later position, and `daemon
// start` refuses naming that line in that file, as doctor does, not the
// last segment that the projection's saved position now falls past.
func TestStartNamesDamageInAnEarlierSegment(t *testing.T) {
	t.Parallel()
	c := &thrumCLI{t: t, repo: t.TempDir(), bin: thrumtest.Binary(t)}
	c.ok("", "init")
	t.Cleanup(func() { c.run("daemon", "stop") })
	c.ok("", "daemon", "start")
	c.ok("", "quickstart", "--name", "alice", "--role", "dev", "--module", "m")
	for i := range 9 {
		c.ok("alice", "send", fmt.Sprintf("message number %d", i))
	}
	c.ok("", "daemon", "stop")

	// Cut alice's shard into three segments, as the log rolls a long
	// one: the files read in order are the same bytes, so every saved
	// position stays valid, and start succeeds.
	dir := filepath.Join(c.repo, ".thrum", "log", "messages")
	orig, err := os.ReadFile(filepath.Join(dir, "alice.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(orig), "\n")
	if len(lines) < 10 {
		t.Fatalf("alice's shard has %d lines, want 9 or more", len(lines)-1)
	}
	if err := os.MkdirAll(filepath.Join(dir, "alice"), 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(rel string, lines []string) {
		if err := os.WriteFile(filepath.Join(dir, rel), []byte(strings.Join(lines, "")), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("alice.jsonl", lines[:3])
	write("alice/000001.jsonl", lines[3:6])
	write("alice/000002.jsonl", lines[6:])
	c.ok("", "daemon", "start")
	c.ok("", "daemon", "stop")

	write("alice.jsonl", []string{lines[0], "garbage\n", lines[2]})
	c.fails(exitError, "", []string{"daemon", "start"}, "messages/alice.jsonl:2: corrupt event: line is not valid JSON")
	r := c.fails(exitError, "", []string{"doctor"})
	contains(t, "doctor on a garbage line in the first segment", r.stdout, "messages/alice.jsonl:2: not a valid event")
}
