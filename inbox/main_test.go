package inbox_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a goroutine outlives its tests: an
// inbox's connection loop, a cancel of a standing claim, or a connection
// to the node left open.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
