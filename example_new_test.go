package thrum_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/rpc"
	"github.com/thrumhq/thrum/store"
)

// wordCount is an embedder's read model: the words of every message.
type wordCount struct{ words int }

func (w *wordCount) Apply(_ context.Context, batch []*eventlog.Event) error {
	for _, e := range batch {
		if e.Type != eventlog.TypeMessageCreate {
			continue
		}
		m, err := eventlog.PayloadAs[eventlog.MessageCreate](e)
		if err != nil {
			return err
		}
		// A real projection would skip events it has seen (Apply must be
		// idempotent); this one is only ever given each batch once.
		for i, inWord := 0, false; i < len(m.Content); i++ {
			if space := m.Content[i] == ' '; !space && !inWord {
				w.words++
				inWord = true
			} else if space {
				inWord = false
			}
		}
	}
	return nil
}

// Build a node from its parts: a store, a projector over it and an extra
// projection, and a log whose commits go to the projector.
func ExampleNew() {
	dir, err := os.MkdirTemp("", "thrum-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()

	st, err := store.Open(filepath.Join(dir, "messages.db"), nil)
	if err != nil {
		log.Fatal(err)
	}
	words := &wordCount{}
	p := thrum.NewProjector(st, words)
	lg, err := eventlog.Open(dir, &eventlog.Options{OnCommit: p.Commit})
	if err != nil {
		log.Fatal(err)
	}
	n, err := thrum.New(ctx, lg, p, nil) // n owns lg and st from here
	if err != nil {
		log.Fatal(err)
	}
	defer n.Close()

	for _, name := range []string{"alice", "bob"} {
		n.RegisterAgent(ctx, &rpc.RegisterAgentParams{Name: name, Role: "dev", Module: "core"})
		n.StartSession(ctx, &rpc.StartSessionParams{AgentID: name})
	}
	n.SendMessage(thrum.AsAgent(ctx, "alice"), &rpc.SendMessageParams{Content: "the auth module is done", Mentions: []string{"@bob"}})
	fmt.Println("words:", words.words)
	// Output: words: 5
}
