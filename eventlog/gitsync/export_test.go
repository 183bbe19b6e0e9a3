package gitsync

// DirectPushes counts the pushes s made without git push.
func DirectPushes(s *Syncer) int { return s.directPushes }

// DropUnpushedBlobs makes s's next direct pushes leave out the blobs
// they should send, as a wrong guess of what the remote lacks would.
// It returns a function that undoes it.
func DropUnpushedBlobs(s *Syncer) (undo func()) {
	beforeSendPack = func(t *Syncer) {
		if t != s {
			return
		}
		kept := t.unpushed[:0]
		for _, o := range t.unpushed {
			if o.kind != "blob" {
				kept = append(kept, o)
			}
		}
		t.unpushed = kept
	}
	return func() { beforeSendPack = nil }
}
