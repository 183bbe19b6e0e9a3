package hosttest_test

import (
	"flag"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/thrumhq/thrum/internal/hosttest"
)

var update = flag.Bool("update", false, "with THRUM_HOSTS=1: record the live cases' hook inputs and request shapes into testdata/")

func record(t *testing.T, s *hosttest.Scene, h hosttest.Host, name string) {
	t.Helper()
	if err := s.Record(h, name).Save(filepath.Join("testdata", h.Name+"-"+name+".json")); err != nil {
		t.Fatal(err)
	}
}

// The replay part, run always (CI too): each recorded live run's hook
// inputs are given to today's `thrum hook HOST EVENT`, in order, with a
// message sent before the first of each event as the live run did, and each hook's output
// is put where the host put it in the recorded requests. The same
// properties as live must hold: each message shown once, a receipt
// delivered only if a request carried the message, no sender's frame
// end unescaped.
func TestReplay(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.json"))
	if len(files) == 0 {
		t.Fatal("no recordings in testdata/: record them with THRUM_HOSTS=1 go test ./internal/hosttest -run Live -update")
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rec, err := hosttest.LoadRecording(f)
			if err != nil {
				t.Fatal(err)
			}
			s := hosttest.NewScene(t)
			s.StartDaemon()
			s.Agent("alice")
			s.Agent("bob")
			s.SendMarked("bob", "@alice", "queued", 2)
			s.Send("bob", "@alice", hosttest.Attack("attack-replay"))
			paths := strings.NewReplacer("{{repo}}", s.Repo, "{{home}}", s.Home, "{{dir}}", s.Dir)
			texts := make([]string, len(rec.Hooks))
			seen := map[string]bool{}
			for i, h := range rec.Hooks {
				if !seen[h.Event] { // as the live run's wrapper: once per event
					seen[h.Event] = true
					s.Send("bob", "@alice", fmt.Sprintf("pre-%s-%04d is a note sent just before this hook", h.Event, i))
				}
				out, err := s.RunThrum(paths.Replace(string(h.Input)), "hook", rec.Host, h.Event, "--agent-id", "alice")
				if err != nil {
					t.Fatal(err)
				}
				texts[i] = hosttest.HookText([]byte(out))
				if texts[i] != "" && !h.Placed {
					t.Logf("hook %d (%s %s) answered, but in the recording %s %s put no output of it before the model", i, rec.Host, h.Event, rec.Host, rec.Version)
				}
			}
			reqs := rec.Build(texts, s.Repo, s.Home, s.Dir)
			hosttest.Check(t, "replay "+name, hosttest.Outcomes(s.Receipts("bob"), reqs, s.AllSent("bob")), "")
			hosttest.CheckFramed(t, reqs, "attack-replay", "")
		})
	}
}
