package mcpserver_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a goroutine outlives its tests: a
// server's wait or channel left running, or a connection to the node
// left open.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
