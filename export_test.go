package locker

// SetSlotWaitHook sets a function called when a refresh starts waiting for
// another refresh of the same lock to finish; it returns the previous one.
func SetSlotWaitHook(f func()) (old func()) {
	old, slotWaitHook = slotWaitHook, f
	return old
}

// HeldCount returns how many locks l, a Locker made by New, tracks as
// held.
func HeldCount(l Locker) int {
	c := l.(*client)
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.held)
}

// IsClosed reports whether Close has begun on l, a Locker made by New.
func IsClosed(l Locker) bool { return l.(*client).isClosed() }
