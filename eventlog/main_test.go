package eventlog

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a goroutine outlives its tests: a log
// that Close left running, a committer or a reader still waiting.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
