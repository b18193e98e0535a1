package kafka

// SetFetchWaiting sets a hook run as a fetch starts its long-poll wait.
func (s *Server) SetFetchWaiting(f func()) { s.fetchWaiting = f }
