package hosttest

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"time"
)

// RingClaude writes text as a user turn to an interactive Claude Code
// session through its messaging socket (the session's children get
// CLAUDE_CODE_MESSAGING_SOCKET and CLAUDE_CODE_MESSAGING_TOKEN): an auth
// line, then a user line. It says nothing of whether the session took
// it: the model's next request does.
func RingClaude(socket, token, text string) error {
	c, err := net.DialTimeout("unix", socket, 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	enc := json.NewEncoder(c)
	if err := enc.Encode(map[string]any{"type": "auth", "token": token}); err != nil {
		return err
	}
	err = enc.Encode(map[string]any{"type": "user", "message": map[string]any{"role": "user", "content": text}})
	time.Sleep(200 * time.Millisecond) // let the session read before the close
	return err
}

// RingCodex queues text as the next user turn of a Codex thread with
// `codex queue --thread ID --message=TEXT`, run without a shell and with
// the message as one argument (so a text starting with "-" is not taken
// for a flag). It returns the command's output.
func (s *Scene) RingCodex(thread, text string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := s.Command(ctx, Codex.Path(s.T), "queue", "--thread", thread, "--message="+text).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("codex queue: %w: %s", err, out)
	}
	return string(out), nil
}
