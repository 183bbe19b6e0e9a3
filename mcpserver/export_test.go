package mcpserver

// Test hooks for the external tests (package mcpserver_test). Notifications
// arrive asynchronously, so a test that needs every one of them queued
// before it calls wait_for_message polls these.

// QueueLen reports how many notifications wait for wait_for_message.
func QueueLen(s *Server) int { return s.queue.len() }

// QueueDropped reports how many notifications the queue has dropped
// because it was full.
func QueueDropped(s *Server) int {
	s.queue.mu.Lock()
	defer s.queue.mu.Unlock()
	return s.queue.dropped
}

// QueueIDs lists the message IDs of the queued notifications, oldest
// first.
func QueueIDs(s *Server) []string {
	s.queue.mu.Lock()
	defer s.queue.mu.Unlock()
	ids := make([]string, len(s.queue.items))
	for i, n := range s.queue.items {
		ids[i] = n.id
	}
	return ids
}

// Waiting reports whether a wait_for_message holds the single-waiter slot.
func Waiting(s *Server) bool {
	if s.waitMu.TryLock() {
		s.waitMu.Unlock()
		return false
	}
	return true
}

// Held reports how many claimed messages wait for the next consuming call.
func Held(s *Server) int {
	s.heldMu.Lock()
	defer s.heldMu.Unlock()
	return len(s.held)
}

// Armed reports whether a wait has a standing claim armed: asked for, and
// not yet fired or cancelled.
func Armed(s *Server) bool {
	s.armMu.Lock()
	defer s.armMu.Unlock()
	return s.armedOn != nil
}

// ArmedInDaemon reports whether a wait has a standing claim armed that the
// daemon has answered: a send from then on fills it. arm holds armCalls
// until the daemon answers, so this waits for any arm in flight.
func ArmedInDaemon(s *Server) bool {
	s.armCalls.Lock()
	defer s.armCalls.Unlock()
	return Armed(s)
}

// Claimed reports how many messages a standing claim took that wait for
// the next consuming call.
func Claimed(s *Server) int {
	s.heldMu.Lock()
	defer s.heldMu.Unlock()
	return len(s.claimed)
}
