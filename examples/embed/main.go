// Command embed runs thrum inside a Go program, with no daemon: two
// agents talk through an embedded node, one of them woken by a push
// notification rather than by polling.
//
//	go run ./examples/embed [dir]
//
// With no dir it uses a temporary directory and removes it afterwards.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/rpc"
)

func main() {
	dir := ""
	if len(os.Args) > 1 {
		dir = os.Args[1]
	} else {
		tmp, err := os.MkdirTemp("", "thrum-embed")
		if err != nil {
			log.Fatal(err)
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	if err := run(context.Background(), dir); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, dir string) error {
	n, err := thrum.Open(ctx, dir, nil)
	if err != nil {
		return err
	}
	defer n.Close()

	// Two agents, each with a session.
	for _, a := range []rpc.RegisterAgentParams{
		{Name: "alice", Role: "implementer", Module: "auth"},
		{Name: "bob", Role: "reviewer", Module: "auth"},
	} {
		if _, err := n.RegisterAgent(ctx, &a); err != nil {
			return err
		}
		if _, err := n.StartSession(ctx, &rpc.StartSessionParams{AgentID: a.Name}); err != nil {
			return err
		}
	}
	alice, bob := thrum.AsAgent(ctx, "alice"), thrum.AsAgent(ctx, "bob")

	// Bob waits for anything addressed to him, by name, role or group.
	l := n.Listen(0)
	defer l.Close()
	if _, err := n.Subscribe(bob, l, &rpc.SubscribeParams{MentionRole: "bob"}); err != nil {
		return err
	}

	sent, err := n.SendMessage(alice, &rpc.SendMessageParams{
		Content:  "Auth module complete, all tests passing",
		Mentions: []string{"@reviewer"},
		Scopes:   []rpc.Pair{{Type: "module", Value: "auth"}},
	})
	if err != nil {
		return err
	}
	fmt.Printf("alice -> @reviewer: %s\n", sent.MessageID)

	select {
	case nt := <-l.C():
		fmt.Printf("bob woken by %s: %q\n", nt.Author.AgentID, nt.Preview)
		msg, err := n.GetMessage(bob, &rpc.GetMessageParams{MessageID: nt.MessageID})
		if err != nil {
			return err
		}
		reply, err := n.SendMessage(bob, &rpc.SendMessageParams{
			Content:  "Looks good, merging now",
			Mentions: []string{"@" + msg.Message.Author.AgentID},
			Refs:     []rpc.Pair{{Type: rpc.RefReplyTo, Value: nt.MessageID}},
		})
		if err != nil {
			return err
		}
		if _, err := n.MarkRead(bob, &rpc.MarkReadParams{MessageIDs: []string{nt.MessageID}}); err != nil {
			return err
		}
		fmt.Printf("bob -> alice: %s\n", reply.MessageID)
	case <-time.After(5 * time.Second):
		return fmt.Errorf("bob was never notified")
	}

	inbox, err := n.ListMessages(alice, &rpc.ListMessagesParams{Mentions: true, Unread: true})
	if err != nil {
		return err
	}
	for _, m := range inbox.Messages {
		fmt.Printf("alice's inbox: %s says %q\n", m.AgentID, m.Body.Content)
	}
	return nil
}
