package gitsync_test

import (
	"context"
	"crypto/ed25519"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/eventlog/admit"
	"github.com/thrumhq/thrum/identity"
	"github.com/thrumhq/thrum/internal/thrumtest"
	"github.com/thrumhq/thrum/rpc"
)

// forge appends lines to files of the remote's sync branch with plain
// git, as anyone who can push to the remote can: a clone of a-sync, the
// lines appended, a commit, a push.
func forge(t *testing.T, remote string, files map[string][]string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "forger")
	gitT(t, filepath.Dir(dir), "clone", "-q", "-b", "a-sync", remote, dir)
	gitT(t, dir, "config", "user.name", "mallory")
	gitT(t, dir, "config", "user.email", "mallory@example.com")
	for rel, lines := range files {
		path := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range lines {
			if _, err := f.WriteString(l + "\n"); err != nil {
				t.Fatal(err)
			}
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		gitT(t, dir, "add", rel)
	}
	gitT(t, dir, "commit", "-q", "-m", "thrum: sync from a laptop")
	gitT(t, dir, "push", "-q", "origin", "a-sync")
}

// forgedMessage is a message.create by author mentioning to.
func forgedMessage(t *testing.T, author, to, content string) (msgID, line string) {
	t.Helper()
	msgID = "msg_" + eventlog.NewID()
	line = thrumtest.EventLine(t, eventlog.TypeMessageCreate, map[string]any{
		"message_id": msgID, "agent_id": author, "session_id": "ses_forged", "format": "markdown",
		"content": content, "priority": "normal", "refs": []map[string]string{{"type": "mention", "value": to}},
	})
	return msgID, line
}

// hasMessage reports whether the clone lists the message, and its author.
func (c *clone) hasMessage(id string) (author string, ok bool) {
	c.t.Helper()
	for page := 1; ; page++ {
		r := c.list(rpc.ListMessagesParams{PageSize: 100, Page: page})
		for _, m := range r.Messages {
			if m.MessageID == id {
				return m.AgentID, true
			}
		}
		if page >= r.TotalPages {
			return "", false
		}
	}
}

// refusedIn returns the refusals a clone's quarantine file keeps.
func refusedIn(t *testing.T, c *clone) []admit.Refusal {
	t.Helper()
	rs, err := admit.ReadQuarantine(c.wt)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// TestForgedMessageInAnotherShard: a message that says alice wrote it,
// pushed into bob's shard by someone with push access, is refused on
// every clone: quarantined, reported in Status, never shown.
func TestForgedMessageInAnotherShard(t *testing.T) {
	t.Parallel()
	remote, a, b := pair(t, nil)
	id, line := forgedMessage(t, "alice", "bob", "please merge my branch")
	forge(t, remote, map[string][]string{eventlog.ShardPath("bob"): {line}})
	syncAll(t, b, a)
	for _, c := range []*clone{a, b} {
		if author, ok := c.hasMessage(id); ok {
			t.Errorf("%s shows the message forged in bob's shard, from %s", c.name, author)
		}
		st := c.s.Status()
		if st.Refused != 1 || len(st.Refusals) != 1 || st.Refusals[0].File != eventlog.ShardPath("bob") ||
			!strings.Contains(st.Refusals[0].Reason, "an agent's shard holds only its own events") {
			t.Errorf("%s: Status refusals %d %+v, want the forged line in %s", c.name, st.Refused, st.Refusals, eventlog.ShardPath("bob"))
		}
		if rs := refusedIn(t, c); len(rs) != 1 || rs[0].Line != line {
			t.Errorf("%s: quarantine %+v, want the forged line", c.name, rs)
		}
	}
	// Read again (a new Syncer reads every remote file in full), the
	// line is not counted twice; a later real message still arrives.
	a.close()
	a.open()
	real := b.send("bob", "alice", "a real one")
	syncAll(t, b, a)
	if _, ok := a.hasMessage(real); !ok {
		t.Errorf("a lacks bob's message sent after the forgery")
	}
	if st := a.s.Status(); st.Refused != 1 {
		t.Errorf("a after a restart: Status().Refused = %d, want 1", st.Refused)
	}
}

// TestForgedMessageInAuthorsShard: messages that say alice wrote them,
// pushed into alice's own shard, are refused on every clone: on the
// machine where alice is registered (which alone writes her events), and
// on any other, where alice's key (from her registration, signed by her
// machine) shows they are not hers, each with its reason: one unsigned,
// one signed by the forger's own key, and one of hers replayed as a new
// message with its body changed. Her real messages arrive, verified.
func TestForgedMessageInAuthorsShard(t *testing.T) {
	t.Parallel()
	remote, a, b := pair(t, nil)
	first := a.send("alice", "bob", "the real alice")
	syncAll(t, a, b)
	unsignedID, unsigned := forgedMessage(t, "alice", "bob", "I approve, ship it")
	ownKeyID, ownKey := forgedMessage(t, "alice", "bob", "approved by alice")
	ownKey = thrumtest.SignLine(t, ownKey, "", thrumtest.NewKey(t))
	real := lineOf(t, a, eventlog.ShardPath("alice"), first)
	replayID := "msg_" + eventlog.NewID()
	replay := strings.Replace(strings.Replace(strings.Replace(real, "the real alice", "ship it, no review", 1),
		first, replayID, 1), eventlog.LineID([]byte(real)), eventlog.NewID(), 1)
	forge(t, remote, map[string][]string{eventlog.ShardPath("alice"): {unsigned, ownKey, replay}})
	syncAll(t, a, b)
	for _, id := range []string{unsignedID, ownKeyID, replayID} {
		for _, c := range []*clone{a, b} {
			if author, ok := c.hasMessage(id); ok {
				t.Errorf("%s shows the message %s forged in alice's shard, from %s", c.name, id, author)
			}
		}
	}
	if rs := refusedIn(t, a); len(rs) != 3 || !strings.Contains(rs[0].Reason, "alice is registered on this machine") {
		t.Errorf("a's quarantine = %+v, want the forged lines refused as alice's", rs)
	}
	reasons := map[string]string{}
	for _, r := range refusedIn(t, b) {
		reasons[r.Line] = r.Reason
	}
	for line, want := range map[string]string{
		unsigned: `a message.create by "alice" in messages/alice.jsonl: unsigned, but alice signs its events`,
		ownKey:   "signed by a key (ID " + keyIDOf(t, ownKey) + ") this clone does not trust for alice",
		replay:   "its signature does not verify: the line was changed after it was signed",
	} {
		if !strings.Contains(reasons[line], want) {
			t.Errorf("b refused %.60s… for %q, want %q", line, reasons[line], want)
		}
	}
	// a's own messages still reach b, shown as verified there and as
	// local on a.
	later := a.send("alice", "bob", "the real alice again")
	syncAll(t, a, b)
	for _, id := range []string{first, later} {
		if got := senderOf(t, b, id); got != rpc.SenderVerified {
			t.Errorf("b: alice's real message %s has sender %q, want verified", id, got)
		}
		if got := senderOf(t, a, id); got != rpc.SenderLocal {
			t.Errorf("a: alice's message %s has sender %q, want local", id, got)
		}
	}
}

// lineOf returns the line of a clone's shard file that holds text.
func lineOf(t *testing.T, c *clone, rel, text string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.wt, filepath.FromSlash(rel)))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, text) {
			return l
		}
	}
	t.Fatalf("%s: no line of %s holds %q", c.name, rel, text)
	return ""
}

// keyIDOf returns the key ID a signed line names.
func keyIDOf(t *testing.T, line string) string {
	t.Helper()
	s, _, ok, err := eventlog.ParseSig([]byte(line))
	if !ok || err != nil {
		t.Fatalf("not a signed line: %s", line)
	}
	return s.KeyID
}

// senderOf returns what message.get says of a message's sender.
func senderOf(t *testing.T, c *clone, id string) string {
	t.Helper()
	r, err := c.n.GetMessage(context.Background(), &rpc.GetMessageParams{MessageID: id})
	if err != nil {
		t.Fatalf("%s: get %s: %v", c.name, id, err)
	}
	return r.Message.Sender
}

// TestForgedRegistration: agent.register events pushed to events.jsonl
// with a token hash of the forger's choosing, one for alice (existing),
// one for a new agent, authenticate on no clone; nor does a credential
// event pushed into events.jsonl or an agent's shard, nor a local shard
// file pushed to the remote. alice's real token keeps working where it
// was issued, and only there.
func TestForgedRegistration(t *testing.T) {
	t.Parallel()
	remote, a, b := pair(t, nil)
	ctx := context.Background()
	r, err := a.n.RegisterAgent(ctx, &rpc.RegisterAgentParams{Name: "alice", Role: "implementer", Module: "sync"})
	if err != nil || r.Status != "updated" {
		t.Fatalf("re-register alice: %+v %v", r, err)
	}
	realToken := r.Token
	syncAll(t, a, b)

	forged := map[string]string{} // token → what it claims
	token := func(what string) string {
		tok := identity.NewToken()
		forged[tok] = what
		return tok
	}
	takeover := thrumtest.EventLine(t, eventlog.TypeAgentUpdate, map[string]any{
		"agent_id": "alice", "kind": "agent", "name": "alice", "role": "implementer", "module": "sync",
		"token_hash": identity.HashToken(token("alice, through agent.update")), "revoke_tokens": true})
	newcomer := thrumtest.EventLine(t, eventlog.TypeAgentRegister, map[string]any{
		"agent_id": "mallory", "kind": "agent", "name": "mallory", "role": "implementer", "module": "sync",
		"token_hash": identity.HashToken(token("mallory, a new agent"))})
	cred := thrumtest.EventLine(t, eventlog.TypeCredentialAdd, map[string]any{
		"agent_id": "alice", "token_hash": identity.HashToken(token("alice, through credential.add in events.jsonl"))})
	credShard := thrumtest.EventLine(t, eventlog.TypeCredentialAdd, map[string]any{
		"agent_id": "mallory", "token_hash": identity.HashToken(token("mallory, through credential.add in her shard"))})
	credLocal := thrumtest.EventLine(t, eventlog.TypeCredentialAdd, map[string]any{
		"agent_id": "bob", "token_hash": identity.HashToken(token("bob, through a pushed local shard"))})
	forge(t, remote, map[string][]string{
		eventlog.EventsFile:           {takeover, newcomer, cred},
		eventlog.ShardPath("mallory"): {credShard},
		eventlog.LocalFile:            {credLocal},
	})
	syncAll(t, a, b, a)

	for _, c := range []*clone{a, b} {
		for tok, what := range forged {
			if id, err := c.n.Authenticate(ctx, tok); err == nil {
				t.Errorf("%s: the forged token for %s authenticates as %s", c.name, what, id)
			}
		}
		// Restarted, the projection rebuilt from the log: the same.
		c.close()
		for _, f := range []string{c.db, c.db + "-wal", c.db + "-shm"} {
			if err := os.Remove(f); err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
		}
		c.open()
		for tok, what := range forged {
			if id, err := c.n.Authenticate(ctx, tok); err == nil {
				t.Errorf("%s after a rebuild: the forged token for %s authenticates as %s", c.name, what, id)
			}
		}
	}
	if id, err := a.n.Authenticate(ctx, realToken); err != nil || id != "alice" {
		t.Errorf("a: alice's real token: %q, %v", id, err)
	}
	if id, err := b.n.Authenticate(ctx, realToken); err == nil {
		t.Errorf("b: alice's token, issued on a, authenticates as %s", id)
	}
	// a refused the takeover of its own alice; both refused the
	// credentials; b took mallory's registration, without a token.
	reasons := func(c *clone) string {
		var out []string
		for _, r := range refusedIn(t, c) {
			out = append(out, r.File+": "+r.Reason)
		}
		return strings.Join(out, "\n")
	}
	for _, want := range []string{
		"alice is registered on this machine",
		"a credential.add in events.jsonl: credentials are local",
		"a credential.add in messages/mallory.jsonl: credentials are local",
		"local.jsonl: the local shard belongs to the machine that wrote it",
	} {
		if got := reasons(a); !strings.Contains(got, want) {
			t.Errorf("a's refusals lack %q:\n%s", want, got)
		}
	}
	if got := reasons(b); strings.Contains(got, "registered on this machine") {
		t.Errorf("b refused an event as one of its own identities':\n%s", got)
	}
}

// TestRemoteLineNotAnEvent: a line that is not an event, pushed into a
// shard on the remote, is quarantined; rounds go on and bring what else
// the remote has (it used to fail every round, for good). b's merge
// pushes its own file, without the line.
func TestRemoteLineNotAnEvent(t *testing.T) {
	t.Parallel()
	remote, a, b := pair(t, nil)
	forge(t, remote, map[string][]string{eventlog.ShardPath("bob"): {"not an event at all"}})
	id := b.send("bob", "alice", "after the garbage")
	syncAll(t, b, a)
	if _, ok := a.hasMessage(id); !ok {
		t.Errorf("a lacks bob's message pushed after the garbage line")
	}
	rs := refusedIn(t, b)
	if len(rs) != 1 || rs[0].Line != "not an event at all" || !strings.HasPrefix(rs[0].Reason, "not an event: ") || rs[0].File != eventlog.ShardPath("bob") {
		t.Errorf("b's quarantine = %+v, want the garbage line", rs)
	}
}

// TestRemoteLineTooLong: a line longer than any event, pushed to the
// remote, is read no further than that and quarantined in part, and a
// new Syncer still loads the quarantine.
func TestRemoteLineTooLong(t *testing.T) {
	t.Parallel()
	remote, a, b := pair(t, nil)
	long := strings.Repeat("x", 2*eventlog.MaxLineBytes+10) // past what the quarantine file was read with
	forge(t, remote, map[string][]string{eventlog.ShardPath("bob"): {long}})
	id := b.send("bob", "alice", "after the long line")
	syncAll(t, b, a)
	if _, ok := a.hasMessage(id); !ok {
		t.Errorf("a lacks bob's message pushed after the long line")
	}
	rs := refusedIn(t, b)
	if len(rs) != 1 || rs[0].Bytes <= eventlog.MaxLineBytes || len(rs[0].Line) >= eventlog.MaxLineBytes || !strings.Contains(rs[0].Reason, "longer than any event") {
		for _, r := range rs {
			t.Logf("refusal: %d bytes, %d kept, %q", r.Bytes, len(r.Line), r.Reason)
		}
		t.Fatalf("b's quarantine: %d refusals, want the long line kept in part", len(rs))
	}
	b.close()
	b.open()
	if st := b.s.Status(); st.Refused != 1 {
		t.Errorf("b after a restart: Status().Refused = %d, want 1", st.Refused)
	}
}

// eventAt is an event line of type typ dated at, with the given payload
// fields, as anyone can write one.
func eventAt(t *testing.T, typ string, at time.Time, payload map[string]any) string {
	t.Helper()
	line := thrumtest.EventLine(t, typ, payload)
	head, rest, _ := strings.Cut(line, `"timestamp":"`)
	_, rest, _ = strings.Cut(rest, `"`)
	return head + `"timestamp":"` + eventlog.FormatTime(at) + `"` + rest
}

// Receipts pushed to the remote are held to the rules the local API
// keeps: a read naming a delivery path that is none (`via` a script) and
// an acknowledgement dated years before its message are refused; the
// message's receipts stay as bob's machine made them.
func TestForgedReceiptsRefused(t *testing.T) {
	t.Parallel()
	remote, a, b := pair(t, nil)
	id := a.send("alice", "bob", "review my branch")
	syncAll(t, a, b)
	read := eventAt(t, eventlog.TypeMessageRead, time.Now(), map[string]any{
		"agent_id": "bob", "session_id": "ses_forged", "message_ids": []string{id}, "via": "<script>alert(1)</script>"})
	ack := eventAt(t, eventlog.TypeMessageAck, time.Now().Add(-9829*24*time.Hour), map[string]any{
		"agent_id": "bob", "session_id": "ses_forged", "message_id": id, "note": "approved"})
	forge(t, remote, map[string][]string{eventlog.ShardPath("bob"): {read, ack}})
	a.sync()
	sent, err := a.n.ListSent(thrum.AsAgent(context.Background(), "alice"), &rpc.ListSentParams{})
	if err != nil || len(sent.Messages) != 1 || len(sent.Messages[0].Receipts) != 1 {
		t.Fatalf("alice's sent messages: %+v, %v", sent, err)
	}
	if r := sent.Messages[0].Receipts[0]; r.Via != "" || r.AckedAt != "" || r.State != rpc.ReceiptQueued {
		t.Errorf("bob's receipt on a = %+v, want it queued, as bob's machine left it", r)
	}
	var reasons []string
	for _, r := range refusedIn(t, a) {
		reasons = append(reasons, r.Reason)
	}
	got := strings.Join(reasons, "\n")
	for _, want := range []string{`via "<script>alert(1)</script>" is invalid`, "before its message"} {
		if !strings.Contains(got, want) {
			t.Errorf("a's refusals lack %q:\n%s", want, got)
		}
	}
}

// A message dated up to a day ahead of this clock is taken (another
// machine's clock may run ahead); one dated further ahead, or with a
// thread ID no thrum makes (20,000 characters), is refused.
func TestForgedMessageFieldsRefused(t *testing.T) {
	t.Parallel()
	remote, a, _ := pair(t, nil)
	msg := func(at time.Time, thread string) (string, string) {
		id := "msg_" + eventlog.NewID()
		p := map[string]any{"message_id": id, "agent_id": "mallory", "session_id": "ses_m", "format": "markdown",
			"content": "hello", "priority": "normal", "refs": []map[string]string{{"type": "mention", "value": "alice"}}}
		if thread != "" {
			p["thread_id"] = thread
		}
		return id, eventAt(t, eventlog.TypeMessageCreate, at, p)
	}
	soon, soonLine := msg(time.Now().Add(23*time.Hour), "")
	late, lateLine := msg(time.Now().Add(25*time.Hour), "")
	long, longLine := msg(time.Now(), strings.Repeat("x", 20000))
	forge(t, remote, map[string][]string{eventlog.ShardPath("mallory"): {soonLine, lateLine, longLine}})
	a.sync()
	if _, ok := a.hasMessage(soon); !ok {
		t.Error("a refused a message dated 23 hours ahead")
	}
	if _, ok := a.hasMessage(late); ok {
		t.Error("a took a message dated 25 hours ahead")
	}
	if _, ok := a.hasMessage(long); ok {
		t.Error("a took a message with a 20,000-character thread ID")
	}
	// The local API refuses what sync would.
	_, err := a.n.SendMessage(thrum.AsAgent(context.Background(), "alice"), &rpc.SendMessageParams{Content: "hi", ThreadID: strings.Repeat("x", 20000)})
	if err == nil {
		t.Error("a local send with a 20,000-character thread ID succeeded")
	}
}

// machineOf reads the machine ID a clone recorded in the group.create of
// a group it made, as anyone who can read the remote can.
func machineOf(t *testing.T, c *clone, group string) string {
	t.Helper()
	var machine string
	_, err := c.n.EventLog().Scan(context.Background(), nil, func(e *eventlog.Event) error {
		if p, err := eventlog.PayloadAs[eventlog.GroupCreate](e); err == nil && e.Type == eventlog.TypeGroupCreate && p.Name == group {
			machine = p.Machine
		}
		return nil
	})
	if err != nil || machine == "" {
		t.Fatalf("%s: no machine in the group.create of %s (%v)", c.name, group, err)
	}
	return machine
}

// A group is changed only by the machine that created it. Pushed to the
// remote: a group.delete of a's @backend by "owner", a member.add of
// mallory by mallory, and the same delete claiming a's machine. a refuses
// all three (the group is its own); b refuses the first two (they do not
// come from a). @backend, created on a, still reaches its members from b.
func TestSyncedEventsDoNotChangeAnotherMachinesGroup(t *testing.T) {
	t.Parallel()
	remote, a, b := pair(t, nil)
	owner := context.Background() // no caller: the owner, over the Unix socket
	if _, err := a.n.CreateGroup(owner, &rpc.CreateGroupParams{Name: "backend"}); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"alice", "bob"} {
		if _, err := a.n.AddGroupMember(owner, &rpc.GroupMembership{Group: "backend", MemberType: rpc.MemberAgent, MemberID: m}); err != nil {
			t.Fatalf("add %s to backend: %v", m, err)
		}
	}
	syncAll(t, a, b)
	del := thrumtest.EventLine(t, eventlog.TypeGroupDelete, map[string]any{"name": "backend", "agent_id": "owner"})
	join := thrumtest.EventLine(t, eventlog.TypeGroupMemberAdd, map[string]any{"group": "backend", "member_type": "agent", "member_id": "mallory", "agent_id": "mallory"})
	asA := thrumtest.EventLine(t, eventlog.TypeGroupDelete, map[string]any{"name": "backend", "agent_id": "owner", "machine": machineOf(t, a, "backend")})
	forge(t, remote, map[string][]string{eventlog.EventsFile: {del, join}})
	syncAll(t, a, b)
	members := func(c *clone) []string {
		t.Helper()
		r, err := c.n.GroupMembers(owner, &rpc.GroupMembersParams{Name: "backend", Expand: true})
		if err != nil {
			t.Fatalf("%s: members of backend: %v", c.name, err)
		}
		return r.ExpandedAgents
	}
	for _, c := range []*clone{a, b} {
		if got := members(c); !slices.Equal(got, []string{"alice", "bob"}) {
			t.Errorf("%s: backend reaches %v, want alice and bob", c.name, got)
		}
		if n := len(refusedIn(t, c)); n != 2 {
			t.Errorf("%s: %d refusals, want the forged delete and join", c.name, n)
		}
	}
	id := b.send("bob", "backend", "the build is red")
	syncAll(t, b, a)
	if _, ok := a.inbox("alice")[id]; !ok {
		t.Error("alice on a did not get bob's message to @backend sent from b")
	}
	// Deletes that claim a's machine, unsigned or signed by another key,
	// and one that a third machine signed as itself: both clones refuse
	// them all, b because a's machine signs what it writes.
	third := thrumtest.NewKey(t)
	thirdID := eventlog.MachineID(third.Public().(ed25519.PublicKey))
	asAOtherKey := thrumtest.SignLine(t, thrumtest.EventLine(t, eventlog.TypeGroupDelete, map[string]any{
		"name": "backend", "agent_id": "owner", "machine": machineOf(t, a, "backend")}), "", third)
	asThird := thrumtest.SignLine(t, thrumtest.EventLine(t, eventlog.TypeGroupMemberAdd, map[string]any{
		"group": "backend", "member_type": "agent", "member_id": "mallory", "agent_id": "owner", "machine": thirdID}), "", third)
	forge(t, remote, map[string][]string{eventlog.EventsFile: {asA, asAOtherKey, asThird}})
	syncAll(t, a, b)
	for _, c := range []*clone{a, b} {
		if got := members(c); !slices.Equal(got, []string{"alice", "bob"}) {
			t.Errorf("%s: after deletes claiming a's machine, backend reaches %v", c.name, got)
		}
	}
	reasons := map[string]string{}
	for _, r := range refusedIn(t, b) {
		reasons[r.Line] = r.Reason
	}
	for line, want := range map[string]string{
		asA:         "unsigned, but it names machine " + machineOf(t, a, "backend") + ", which signs all it writes",
		asAOtherKey: "not signed by machine " + machineOf(t, a, "backend"),
		asThird:     "the group was created on machine " + machineOf(t, a, "backend"),
	} {
		if !strings.Contains(reasons[line], want) {
			t.Errorf("b refused %.60s… for %q, want %q", line, reasons[line], want)
		}
	}
	// The local API refuses on b what a's rule would refuse from b.
	if _, err := b.n.AddGroupMember(owner, &rpc.GroupMembership{Group: "backend", MemberType: rpc.MemberAgent, MemberID: "bob"}); !errors.Is(err, rpc.ErrForbidden) {
		t.Errorf("b changing a's group: %v, want forbidden", err)
	}
}
