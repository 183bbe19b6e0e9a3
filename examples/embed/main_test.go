package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestRun drives the example in process and checks the conversation
// happened, then checks the log it left on disk.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	if err := run(context.Background(), dir); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(dir + "/messages/bob.jsonl")
	if err != nil || !bytes.Contains(b, []byte("Looks good, merging now")) {
		t.Fatalf("bob's shard: %v\n%s", err, b)
	}
}

// TestProgram runs the program as a user would.
func TestProgram(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the example")
	}
	out, err := exec.Command("go", "run", ".", t.TempDir()).CombinedOutput()
	if err != nil {
		t.Fatalf("go run: %v\n%s", err, out)
	}
	for _, want := range []string{"alice -> @reviewer: msg_", `bob woken by alice: "Auth module complete`, "alice's inbox: bob says \"Looks good, merging now\""} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
