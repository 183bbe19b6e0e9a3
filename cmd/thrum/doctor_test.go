package main

import (
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
	b := c.ok("alice", "send", "hello two again", "--idempotency-key", "k1")
	if a.stdout != b.stdout {
		t.Fatalf("a send repeating a key stored a second message:\n%s\n%s", a, b)
	}
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
