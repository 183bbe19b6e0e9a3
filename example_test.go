package thrum_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/rpc"
)

// Open a data directory, register two agents, send a message to a role,
// and read the recipient's inbox.
func Example() {
	dir, err := os.MkdirTemp("", "thrum-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	ctx := context.Background()
	n, err := thrum.Open(context.Background(), dir, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer n.Close()

	for _, a := range []rpc.RegisterAgentParams{
		{Name: "alice", Role: "implementer", Module: "auth"},
		{Name: "bob", Role: "reviewer", Module: "auth"},
	} {
		if _, err := n.RegisterAgent(ctx, &a); err != nil {
			log.Fatal(err)
		}
		if _, err := n.StartSession(ctx, &rpc.StartSessionParams{AgentID: a.Name}); err != nil {
			log.Fatal(err)
		}
	}

	alice := thrum.AsAgent(ctx, "alice")
	sent, err := n.SendMessage(alice, &rpc.SendMessageParams{
		Content:  "Auth module complete, all tests passing",
		Mentions: []string{"@reviewer"},
		Scopes:   []rpc.Pair{{Type: "module", Value: "auth"}},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("reached:", sent.Recipients[0].Agents)

	bob := thrum.AsAgent(ctx, "bob")
	inbox, err := n.ListMessages(bob, &rpc.ListMessagesParams{Mentions: true, Unread: true})
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range inbox.Messages {
		fmt.Printf("%s: %s (read: %v)\n", m.AgentID, m.Body.Content, m.IsRead)
	}
	fmt.Println("unread:", inbox.Unread)
	// Output:
	// reached: [bob]
	// alice: Auth module complete, all tests passing (read: false)
	// unread: 1
}

// A Subscription receives the messages matching its filters as they are
// committed.
func ExampleNode_Subscribe() {
	dir, _ := os.MkdirTemp("", "thrum-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	n, err := thrum.Open(context.Background(), dir, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer n.Close()
	for _, name := range []string{"alice", "bob"} {
		n.RegisterAgent(ctx, &rpc.RegisterAgentParams{Name: name, Role: "dev", Module: "core"})
		n.StartSession(ctx, &rpc.StartSessionParams{AgentID: name})
	}

	l := n.Listen(0)
	defer l.Close()
	bob := thrum.AsAgent(ctx, "bob")
	if _, err := n.Subscribe(bob, l, &rpc.SubscribeParams{MentionRole: "bob"}); err != nil {
		log.Fatal(err)
	}

	n.SendMessage(thrum.AsAgent(ctx, "alice"), &rpc.SendMessageParams{Content: "ping", Mentions: []string{"@bob"}})
	nt := <-l.C()
	fmt.Println(nt.Author.AgentID, nt.Preview, nt.MatchedSubscription.MatchType)
	// Output: alice ping mention
}
