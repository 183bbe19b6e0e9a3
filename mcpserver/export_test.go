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
