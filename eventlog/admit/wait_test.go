package admit_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/eventlog/admit"
)

// waitForKey is a Judge under which zed's events wait until keyed is
// set (zed's registration arrived), and lines saying "junk" are refused.
func waitForKey(keyed *atomic.Bool) admit.Judge {
	return eachEvent(func(e *eventlog.Event) admit.Verdict {
		switch {
		case strings.Contains(string(e.Raw), "junk"):
			return admit.Verdict{Refuse: "junk"}
		case eventlog.Author(e) == "zed" && e.Type != eventlog.TypeAgentRegister && !keyed.Load():
			return admit.Verdict{Wait: "zed's key has not arrived"}
		}
		return admit.Verdict{}
	})
}

func registration(agent string) []byte {
	return line(eventlog.TypeAgentRegister, time.Now(), fmt.Sprintf(`"agent_id":%q,"kind":"agent","name":%q`, agent, agent))
}

// A message that waits is kept whole, however long (up to the longest
// line an event may be, and whatever it holds): the quarantine stays
// readable, so the gate opens again after a restart and the message is
// imported when its author's key arrives.
func TestALongLineThatWaitsKeepsTheQuarantineReadable(t *testing.T) {
	l := openLog(t)
	var keyed atomic.Bool
	g := newGate(t, l, &admit.Options{Judge: waitForKey(&keyed)})
	long := bytes.Replace(message("zed"), []byte(`"content":"hi"`), []byte(`"content":"`+strings.Repeat(`<\"`, 400<<10)+`"`), 1)
	res, err := g.Admit(t.Context(), admit.Source{File: "messages/zed.jsonl"}, "zed", [][]byte{long})
	if err != nil || res.Waiting != 1 {
		t.Fatalf("Admit: %+v, %v; want the long line waiting", res, err)
	}
	g, err = admit.New(l, &admit.Options{Judge: waitForKey(&keyed)})
	if err != nil {
		t.Fatalf("a new gate (a restart) over a quarantine with a long line that waits: %v", err)
	}
	keyed.Store(true)
	if _, err := g.Admit(t.Context(), admit.Source{File: eventlog.EventsFile}, "", [][]byte{registration("zed")}); err != nil {
		t.Fatalf("zed's registration: %v", err)
	}
	if got := shardLines(t, l, "zed"); len(got) != 1 || !bytes.Equal(got[0], long) {
		t.Errorf("zed's shard holds %d lines once the key arrived, want the long message", len(got))
	}
}

// Junk refused past the quarantine's bound (anyone who can push writes
// any amount) does not crowd out a line that waits for its author's
// key: it is imported when the key arrives.
func TestRefusedJunkDoesNotCrowdOutALineThatWaits(t *testing.T) {
	l := openLog(t)
	var keyed atomic.Bool
	g := newGate(t, l, &admit.Options{Judge: waitForKey(&keyed)})
	ctx := context.Background()
	for i := 0; i < 300; i++ {
		junk := bytes.Replace(message("mallory"), []byte(`"content":"hi"`), []byte(`"content":"junk`+strings.Repeat("x", 16<<10)+`"`), 1)
		if _, err := g.Admit(ctx, admit.Source{File: "messages/mallory.jsonl"}, "mallory", [][]byte{junk}); err != nil {
			t.Fatal(err)
		}
	}
	waits := message("zed")
	if _, err := g.Admit(ctx, admit.Source{File: "messages/zed.jsonl"}, "zed", [][]byte{waits}); err != nil {
		t.Fatal(err)
	}
	keyed.Store(true)
	if _, err := g.Admit(ctx, admit.Source{File: eventlog.EventsFile}, "", [][]byte{registration("zed")}); err != nil {
		t.Fatal(err)
	}
	if got := shardLines(t, l, "zed"); len(got) != 1 || !bytes.Equal(got[0], waits) {
		t.Errorf("zed's shard holds %d lines once the key arrived, want the message that waited", len(got))
	}
}
