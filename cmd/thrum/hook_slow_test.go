package main

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/thrumhq/thrum/internal/fault"
	"github.com/thrumhq/thrum/internal/thrumtest"
)

// TestHookBoundToItsClaimWhenTheDaemonIsSlow runs the daemon in this
// process, its fsync slowed through the fault seam to 0.3, 0.8 and 2 s,
// and a context hook (the binary, as a host runs it) against it: after
// each run every message is either in the hook's output or still unread —
// never claimed into a hook that gave up (at 0.8 and 2 s it printed {}
// after its 500 ms, and the daemon then committed the claim it had
// queued). A claim the daemon queues before
// the hook's budget is waited for up to the host's timeout and printed;
// one it could not queue in time it refuses, claiming nothing.
func TestHookBoundToItsClaimWhenTheDaemonIsSlow(t *testing.T) {
	h := &hookRig{t: t, bin: thrumtest.Binary(t), repo: thrumtest.GitRepo(t)}
	h.main = &thrumCLI{t: t, repo: h.repo, bin: h.bin}
	h.bobs = h.repo
	h.main.ok("", "init")

	var delay, syncing atomic.Int64
	defer fault.Set(func(op, path string) error {
		if op == fault.LogSync && strings.HasPrefix(path, h.repo) {
			syncing.Add(1)
			time.Sleep(time.Duration(delay.Load()))
			syncing.Add(-1)
		}
		return nil
	})()
	ctx, stop := context.WithCancel(context.Background())
	var daemonErr bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"--repo", h.repo, "daemon", "run", "--ws-addr", "127.0.0.1:0"}, &bytes.Buffer{}, &daemonErr)
	}()
	t.Cleanup(func() {
		stop()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Errorf("the daemon in the test did not stop:\n%s", daemonErr.String())
		}
	})
	answering := func() bool {
		r := h.main.run("--json", "daemon", "status")
		var st map[string]any
		return r.code == 0 && json.Unmarshal([]byte(r.stdout), &st) == nil && st["error"] == nil
	}
	for deadline := time.Now().Add(30 * time.Second); !answering(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the daemon in the test did not start:\n%s", daemonErr.String())
		}
	}
	h.main.ok("", "quickstart", "--name", "alice", "--role", "implementer", "--module", "auth")
	h.main.ok("", "quickstart", "--name", "bob", "--role", "reviewer", "--module", "auth")
	bob := []string{"THRUM_NAME=bob"}
	spec := hookEvents[1] // claude user-prompt-submit

	for _, d := range []time.Duration{300 * time.Millisecond, 800 * time.Millisecond, 2 * time.Second} {
		t.Run(d.String(), func(t *testing.T) {
			h.t = t
			delay.Store(0)
			h.main.ok("bob", "message", "read", "--all")
			ids := []string{h.send("--to", "@bob", "first, sent at "+d.String()), h.send("--to", "@bob", "second")}
			delay.Store(int64(d))
			r := h.hook(bob, hookInputFor(t, spec, h.repo, false), spec.host, spec.event)
			delay.Store(0)
			// What the daemon was writing when the hook ended is written
			// before the messages are counted: a claim the hook gave up on
			// would be committed by then.
			for deadline := time.Now().Add(30 * time.Second); syncing.Load() > 0 && time.Now().Before(deadline); {
				time.Sleep(10 * time.Millisecond)
			}
			if r.code != 0 {
				t.Fatalf("hook: exit %d, stderr %q", r.code, r.stderr)
			}
			var out map[string]any
			if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
				t.Fatalf("hook output %q: %v", r.stdout, err)
			}
			var shown []string
			if len(out) > 0 {
				for _, m := range framesIn(t, str(out, "hookSpecificOutput.additionalContext")) {
					shown = append(shown, m.ID)
				}
			}
			var v struct {
				Messages []struct {
					MessageID string `json:"message_id"`
				} `json:"messages"`
			}
			h.main.okJSON(&v, "bob", "inbox", "--mentions", "--unread")
			var unread []string
			for _, m := range v.Messages {
				unread = append(unread, m.MessageID)
			}
			for _, id := range ids {
				in, left := slices.Contains(shown, id), slices.Contains(unread, id)
				if in == left {
					t.Errorf("%s: shown %v, unread %v: want it in the hook's output or unread, not %s", id, in, left,
						map[bool]string{true: "both", false: "neither"}[in])
				}
			}
			t.Logf("fsync %v: the hook took %v, showed %d, left %d unread", d, r.took.Round(time.Millisecond), len(shown), len(unread))
		})
	}
	h.t = t
}
