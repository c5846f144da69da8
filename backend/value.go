package backend

import "context"

// ValueSetter is implemented by a Held whose backend stores values with
// holds (Capabilities.MaxValueLen > 0). SetValue replaces the hold's value
// if the hold is still ours, atomically with checking that it is, and
// returns ErrNotHeld otherwise; it leaves the hold's TTL, fence and place
// unchanged. An empty value removes the value. Package locker checks the
// length before the call.
//
// When the reply is lost, the new value may or may not be in place; the
// caller may set it again.
type ValueSetter interface {
	SetValue(ctx context.Context, value []byte) error
}

// Observer is implemented by drivers that can tell of every change of a
// key's holders: a hold granted, released, expired or taken by force, or
// its value replaced (ValueSetter). package locker's Election.Observe
// inspects the key again after each notice, so a notice carries nothing
// and several changes may share one.
//
// Observe starts watching key. Each change sends on the returned channel
// without blocking (a full channel already says "look again"); stop ends
// the watch and closes nothing the caller reads. A change that the server
// does not report (a Redis key's expiry) sends nothing: the observer
// inspects the key again when the holder's TTL, as Inspect reported it,
// runs out. A watch that may have missed changes (a reconnect) sends a
// notice once it is back. The watch starts before Observe returns, so an
// Inspect made after it misses no later change.
type Observer interface {
	Observe(ctx context.Context, key string) (events <-chan struct{}, stop func(), err error)
}
