package mcpserver

// Test hooks for the external tests (package mcpserver_test). Notifications
// arrive asynchronously, so a test that needs every one of them queued
// before it calls wait_for_message polls these.

// QueueLen reports how many notifications wait for wait_for_message.
func QueueLen(s *Server) int { return len(s.ib.Stats().Queued) }

// QueueDropped reports how many notifications the queue has dropped
// because it was full.
func QueueDropped(s *Server) int { return s.ib.Stats().Dropped }

// QueueIDs lists the message IDs of the queued notifications, oldest
// first.
func QueueIDs(s *Server) []string { return s.ib.Stats().Queued }

// Waiting reports whether a wait_for_message is waiting.
func Waiting(s *Server) bool { return s.ib.Stats().Waiting }

// Held reports how many claimed messages wait for the next consuming call.
func Held(s *Server) int { return s.ib.Stats().Held }

// ArmedInDaemon reports whether a wait has a standing claim armed that the
// daemon has answered: a send from then on fills it.
func ArmedInDaemon(s *Server) bool { return s.ib.Stats().Armed }
