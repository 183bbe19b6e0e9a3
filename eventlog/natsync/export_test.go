package natsync

import "testing"

// SetTailBytes bounds what the publisher's tails hold, until the test
// ends.
func SetTailBytes(t testing.TB, n int64) {
	old := tailBytes
	tailBytes = n
	t.Cleanup(func() { tailBytes = old })
}
