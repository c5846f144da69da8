package memory

// OnQueued sets a hook called whenever a waiter joins a key's queue.
func OnQueued(s *Store, f func(key string)) {
	s.mu.Lock()
	s.queued = f
	s.mu.Unlock()
}
