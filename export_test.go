package locker

// SetSlotWaitHook sets a function called when a refresh starts waiting for
// another refresh of the same lock to finish; it returns the previous one.
func SetSlotWaitHook(f func()) (old func()) {
	old, slotWaitHook = slotWaitHook, f
	return old
}
