package msgindex

// SetSnapshotChunk makes Save encode n messages per hold of the lock,
// so that a test interleaves more commits with it; the returned function
// restores the default.
func SetSnapshotChunk(n int) func() {
	old := snapshotChunk
	snapshotChunk = n
	return func() { snapshotChunk = old }
}
