package thrum_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/internal/thrumtest"
	"github.com/thrumhq/thrum/rpc"
	"github.com/thrumhq/thrum/store"
)

// TestReceiptsFollowTheLog drives a node through random sends (to names,
// roles, groups and everyone, some asking for an acknowledgement, some
// replies), deliveries by every path (message.markRead with each via, and
// standing claims filled in a send's own commit), acknowledgements (by
// recipients and by others), changes of group membership, new agents,
// restarts and rebuilds, and checks after each round that:
//
//   - each message's recipients are the agents its mentions reached when
//     it was sent — as this test resolves them from the directory it
//     built — never the sender, each exactly once;
//   - message.get's receipts equal what a model computes from the log
//     alone (the earliest read delivers, the first acknowledgement or
//     reply of a recipient acknowledges);
//   - no receipt goes back: its state never falls, and a delivery or an
//     acknowledgement once seen never changes;
//   - a projection rebuilt from the log holds the same receipts.
//
// THRUM_SEED replays a run.
func TestReceiptsFollowTheLog(t *testing.T) {
	seed := thrumtest.Seed(t)
	r := rand.New(rand.NewPCG(seed, seed^0x5eed))
	w := &receiptWorld{t: t, r: r, dir: t.TempDir(), ctx: context.Background(),
		roles: map[string]string{}, groups: map[string]map[[2]string]bool{}, seen: map[[2]string]rpc.Receipt{}}
	w.n = thrumtest.OpenNodeIn(t, w.dir, nil)
	t.Cleanup(func() { // the claims still armed: their connections end with the test
		for _, c := range w.claims {
			c.Close()
		}
	})
	for _, a := range [][2]string{{"ann", "reviewer"}, {"bo", "reviewer"}, {"cy", "implementer"}, {"di", "implementer"}, {"ed", "tester"}} {
		w.register(a[0], a[1])
	}
	for _, g := range []string{"crew", "night"} {
		if _, err := w.n.CreateGroup(w.as("ann"), &rpc.CreateGroupParams{Name: g}); err != nil {
			t.Fatal(err)
		}
		w.groups[g] = map[[2]string]bool{}
	}
	w.groups["everyone"] = nil // implicit: every agent

	const rounds, steps = 12, 25
	for round := range rounds {
		for range steps {
			w.step()
		}
		switch r.IntN(4) {
		case 0:
			w.restart()
		case 1:
			w.checkRebuild()
		}
		w.check(fmt.Sprintf("round %d", round))
		if t.Failed() {
			return
		}
	}
	w.checkRebuild()
	t.Logf("%d messages, %d acknowledgements, %d deliveries, %d standing claims filled, %d refused acknowledgements",
		len(w.msgs), w.acked, w.delivered, w.filled, w.refused)
	if w.acked == 0 || w.delivered == 0 || w.filled == 0 || w.refused == 0 {
		t.Errorf("a path was never taken: the run proves less than it says")
	}
}

type receiptWorld struct {
	t   *testing.T
	r   *rand.Rand
	dir string
	ctx context.Context
	n   *thrum.Node

	agents []string                      // registered, in order
	roles  map[string]string             // agent → role
	groups map[string]map[[2]string]bool // group → {member type, id}
	msgs   []string                      // sent, in order
	want   map[string][]string           // message → its recipients as this test resolved them
	seen   map[[2]string]rpc.Receipt     // (message, agent) → the receipt last seen
	claims map[string]*rpc.Client        // agent → a connection with a standing claim armed

	acked, delivered, filled, refused int
}

func (w *receiptWorld) as(agent string) context.Context { return thrum.AsAgent(w.ctx, agent) }

func (w *receiptWorld) pick(xs []string) string { return xs[w.r.IntN(len(xs))] }

func (w *receiptWorld) register(name, role string) {
	thrumtest.Register(w.t, w.n, name, role, "m")
	w.agents = append(w.agents, name)
	w.roles[name] = role
}

// receiptVias are the paths a read may name (ViaAck is message.ack's own;
// a channel only announces).
var receiptVias = []string{"", rpc.ViaWaitForMessage, rpc.ViaCheckMessages, rpc.ViaHook, rpc.ViaStream,
	rpc.ViaMarkRead, rpc.ViaReply}

func (w *receiptWorld) step() {
	switch k := w.r.IntN(20); {
	case k < 6:
		w.send("")
	case k < 8:
		if len(w.msgs) > 0 {
			w.send(w.pick(w.msgs))
		}
	case k < 12:
		w.markRead()
	case k < 14:
		w.armClaim()
	case k < 17:
		w.ack()
	case k < 19:
		w.regroup()
	default:
		if len(w.agents) < 9 && w.r.IntN(3) == 0 {
			w.register(fmt.Sprintf("new%d", len(w.agents)), w.pick([]string{"reviewer", "implementer", "tester"}))
		}
	}
}

// resolve is whom mention reaches now, by this test's own book.
func (w *receiptWorld) resolve(mention string) []string {
	if mention == "everyone" {
		return slices.Clone(w.agents)
	}
	if _, ok := w.roles[mention]; ok {
		return []string{mention}
	}
	if members, ok := w.groups[mention]; ok {
		var out []string
		for m := range members {
			if m[0] == rpc.MemberAgent {
				out = append(out, m[1])
			} else {
				out = append(out, w.resolve(m[1])...)
			}
		}
		return out
	}
	var out []string // a role
	for _, a := range w.agents {
		if w.roles[a] == mention {
			out = append(out, a)
		}
	}
	return out
}

func (w *receiptWorld) send(replyTo string) {
	from := w.pick(w.agents)
	addrs := append(slices.Clone(w.agents), "reviewer", "implementer", "tester", "crew", "night", "everyone")
	var mentions []string
	for range 1 + w.r.IntN(3) {
		mentions = append(mentions, addrs[w.r.IntN(len(addrs))])
	}
	want := map[string]bool{}
	for _, m := range mentions {
		for _, a := range w.resolve(m) {
			if a != from {
				want[a] = true
			}
		}
	}
	p := &rpc.SendMessageParams{Content: "m", Mentions: mentions}
	if replyTo != "" {
		p.Refs = []rpc.Pair{{Type: rpc.RefReplyTo, Value: replyTo}}
	}
	switch w.r.IntN(3) {
	case 0:
		p.AckRequired = true
	case 1:
		p.AckWithin = "10m"
	}
	res, err := w.n.SendMessage(w.as(from), p)
	if p.AckRequired || p.AckWithin != "" {
		if len(want) == 0 {
			if !errors.Is(err, rpc.ErrInvalidParams) {
				w.t.Errorf("a request for an acknowledgement from no one: %v, want invalid params", err)
			}
			return
		}
	}
	if err != nil {
		// A group no longer reaches anyone: the only refusal expected.
		if !errors.Is(err, rpc.ErrNotFound) {
			w.t.Errorf("send %+v from %s: %v", p, from, err)
		}
		return
	}
	w.msgs = append(w.msgs, res.MessageID)
	if w.want == nil {
		w.want = map[string][]string{}
	}
	for a := range want {
		w.want[res.MessageID] = append(w.want[res.MessageID], a)
	}
	slices.Sort(w.want[res.MessageID])
	for a, c := range w.claims {
		if want[a] {
			delete(w.claims, a) // the send filled it
			c.Close()
			w.filled++
		}
	}
}

func (w *receiptWorld) markRead() {
	if len(w.msgs) == 0 {
		return
	}
	var ids []string
	for range 1 + w.r.IntN(4) {
		ids = append(ids, w.pick(w.msgs))
	}
	res, err := w.n.MarkRead(w.as(w.pick(w.agents)), &rpc.MarkReadParams{MessageIDs: ids, Via: w.pick(receiptVias)})
	if err != nil {
		w.t.Errorf("mark read: %v", err)
		return
	}
	w.delivered += res.MarkedCount
}

// armClaim arms a standing claim for an agent on a connection of its own,
// as a waiting MCP server does: the next send to it is read for it in the
// send's own commit.
func (w *receiptWorld) armClaim() {
	a := w.pick(w.agents)
	if w.claims == nil {
		w.claims = map[string]*rpc.Client{}
	}
	if w.claims[a] != nil {
		return
	}
	c := w.n.Dial(nil)
	if _, err := c.Auth(w.ctx, &rpc.AuthParams{AgentID: a}); err != nil {
		w.t.Fatal(err)
	}
	if _, err := c.ClaimNext(w.ctx, &rpc.ClaimNextParams{Via: w.pick(receiptVias[1:])}); err != nil {
		w.t.Fatal(err)
	}
	w.claims[a] = c
}

func (w *receiptWorld) ack() {
	if len(w.msgs) == 0 {
		return
	}
	id, who := w.pick(w.msgs), w.pick(w.agents)
	_, err := w.n.AckMessage(w.as(who), &rpc.AckMessageParams{MessageID: id, Note: w.pick([]string{"", "ok", "on it"})})
	switch {
	case slices.Contains(w.want[id], who):
		if err != nil {
			w.t.Errorf("%s acknowledging %s, addressed to it: %v", who, id, err)
		}
		w.acked++
	case !errors.Is(err, rpc.ErrForbidden):
		w.t.Errorf("%s acknowledging %s, not addressed to it: %v, want forbidden", who, id, err)
	default:
		w.refused++
	}
}

func (w *receiptWorld) regroup() {
	g := w.pick([]string{"crew", "night"})
	m := [2]string{rpc.MemberAgent, w.pick(w.agents)}
	if w.r.IntN(2) == 0 {
		m = [2]string{rpc.MemberRole, w.pick([]string{"reviewer", "implementer", "tester"})}
	}
	p := &rpc.GroupMembership{Group: g, MemberType: m[0], MemberID: m[1]}
	if w.groups[g][m] {
		if _, err := w.n.RemoveGroupMember(w.as("ann"), p); err != nil {
			w.t.Fatal(err)
		}
		delete(w.groups[g], m)
		return
	}
	if _, err := w.n.AddGroupMember(w.as("ann"), p); err != nil {
		w.t.Fatal(err)
	}
	w.groups[g][m] = true
}

func (w *receiptWorld) restart() {
	for a, c := range w.claims {
		c.Close()
		delete(w.claims, a)
	}
	if err := w.n.Close(); err != nil {
		w.t.Fatal(err)
	}
	w.n = thrumtest.OpenNodeIn(w.t, w.dir, nil)
}

// model computes every message's receipts from the log alone.
func (w *receiptWorld) model() map[string][]rpc.Receipt {
	type msg struct{ recipients []string }
	type read struct{ at, session, via string }
	type ack struct{ at, note, reply string }
	msgs := map[string]*msg{}
	reads := map[[2]string]read{}
	acks := map[[2]string]ack{}
	firstAck := func(k [2]string, a ack) {
		if _, ok := acks[k]; !ok {
			acks[k] = a
		}
	}
	_, err := w.n.EventLog().Scan(w.ctx, nil, func(e *eventlog.Event) error {
		at := e.Timestamp()
		switch e.Type {
		case eventlog.TypeMessageCreate:
			p, err := eventlog.PayloadAs[eventlog.MessageCreate](e)
			if err != nil {
				return err
			}
			msgs[p.MessageID] = &msg{recipients: p.Recipients}
			for _, r := range p.Refs {
				if r.Type == rpc.RefReplyTo {
					firstAck([2]string{r.Value, p.AgentID}, ack{at: at, reply: p.MessageID})
				}
			}
		case eventlog.TypeMessageRead:
			p, err := eventlog.PayloadAs[eventlog.MessageRead](e)
			if err != nil {
				return err
			}
			for _, id := range p.MessageIDs {
				k := [2]string{id, p.AgentID}
				if old, ok := reads[k]; !ok || cmp.Or(cmp.Compare(at, old.at), cmp.Compare(p.SessionID, old.session)) < 0 {
					reads[k] = read{at: at, session: p.SessionID, via: p.Via}
				}
			}
		case eventlog.TypeMessageAck:
			p, err := eventlog.PayloadAs[eventlog.MessageAck](e)
			if err != nil {
				return err
			}
			firstAck([2]string{p.MessageID, p.AgentID}, ack{at: at, note: p.Note})
		}
		return nil
	})
	if err != nil {
		w.t.Fatal(err)
	}
	out := map[string][]rpc.Receipt{}
	for id, m := range msgs {
		for _, a := range m.recipients {
			r := rpc.Receipt{AgentID: a, State: rpc.ReceiptQueued}
			if rd, ok := reads[[2]string{id, a}]; ok {
				r.State, r.Via, r.At = rpc.ReceiptDelivered, rd.via, rd.at
			}
			if ak, ok := acks[[2]string{id, a}]; ok {
				r.State, r.AckedAt, r.Note, r.ReplyID = rpc.ReceiptAcknowledged, ak.at, ak.note, ak.reply
			}
			out[id] = append(out[id], r)
		}
	}
	return out
}

var stateRank = map[string]int{rpc.ReceiptQueued: 0, rpc.ReceiptDelivered: 1, rpc.ReceiptAcknowledged: 2}

func (w *receiptWorld) check(when string) {
	model := w.model()
	for _, id := range w.msgs {
		g, err := w.n.GetMessage(w.ctx, &rpc.GetMessageParams{MessageID: id})
		if err != nil {
			w.t.Fatal(err)
		}
		got := g.Message.Receipts
		var agents []string
		for _, r := range got {
			agents = append(agents, r.AgentID)
		}
		slices.Sort(agents)
		if !slices.Equal(agents, w.want[id]) || len(slices.Compact(slices.Clone(agents))) != len(agents) {
			w.t.Errorf("%s: %s has receipts for %v, want each of %v once (resolved at send)", when, id, agents, w.want[id])
		}
		if !slices.Equal(got, model[id]) {
			w.t.Errorf("%s: %s receipts\n got %+v\nwant %+v (from the log)", when, id, got, model[id])
		}
		for _, r := range got {
			k := [2]string{id, r.AgentID}
			old, ok := w.seen[k]
			switch {
			case !ok:
			case stateRank[r.State] < stateRank[old.State]:
				w.t.Errorf("%s: %s for %s went back from %s to %s", when, id, r.AgentID, old.State, r.State)
			case old.At != "" && (r.At != old.At || r.Via != old.Via),
				old.AckedAt != "" && (r.AckedAt != old.AckedAt || r.Note != old.Note || r.ReplyID != old.ReplyID):
				w.t.Errorf("%s: %s for %s changed from %+v to %+v", when, id, r.AgentID, old, r)
			}
			w.seen[k] = r
		}
	}
}

// checkRebuild rebuilds the projection from the log and compares its
// receipts with the live one's.
func (w *receiptWorld) checkRebuild() {
	rebuilt, err := w.n.Rebuild(w.ctx, filepath.Join(w.t.TempDir(), "rebuilt.db"))
	if err != nil {
		w.t.Fatal(err)
	}
	defer rebuilt.Close()
	live, err := thrum.ProjectionOf(w.n).Receipts(w.ctx, w.msgs)
	if err != nil {
		w.t.Fatal(err)
	}
	fresh, err := rebuilt.Receipts(w.ctx, w.msgs)
	if err != nil {
		w.t.Fatal(err)
	}
	for _, id := range w.msgs {
		if !receiptsEqual(live[id], fresh[id]) {
			w.t.Errorf("rebuilt receipts of %s\n got %+v\nwant %+v", id, fresh[id], live[id])
		}
	}
}

func receiptsEqual(a, b *store.Receipts) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.MessageID == b.MessageID && a.AuthorID == b.AuthorID && a.AckRequired == b.AckRequired &&
		a.AckDue == b.AckDue && slices.Equal(a.Recipients, b.Recipients)
}
