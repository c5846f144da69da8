package memstore

import (
	"context"
	"errors"
	"time"

	"github.com/distlock/locker/backend"
)

var _ backend.Inspector = (*Driver)(nil)

// errForceReleased is what a holder's Lost reports after ForceRelease.
var errForceReleased = errors.New("memory: lock released by force (ForceRelease)")

// Inspect implements backend.Inspector: the store knows everything, the
// holder's token, fence and remaining TTL and its queue of waiters.
func (d *Driver) Inspect(ctx context.Context, key string) (backend.Holder, error) {
	if err := d.enter(ctx); err != nil {
		return backend.Holder{}, err
	}
	s := d.s
	s.mu.Lock()
	notify := s.expireDueLocked(key)
	h := backend.Holder{WaitersKnown: true}
	if e := s.keys[key]; e != nil {
		h.Waiters = e.liveWaitersLocked()
		if e.owner != nil {
			h.Held, h.Token = true, e.token
			h.Fence, h.Fenced = e.fence, true
			h.TTL, h.TTLKnown = max(time.Until(e.expires), 0), true
		}
	}
	s.mu.Unlock()
	notify()
	return h, nil
}

// liveWaitersLocked counts the waiters a hand-off would still serve: not
// those of clients that crashed or closed. s.mu is held.
func (e *entry) liveWaitersLocked() int {
	n := 0
	for el := e.waiters.Front(); el != nil; el = el.Next() {
		if el.Value.(*waiter).d.check() == nil {
			n++
		}
	}
	return n
}

// ForceRelease implements backend.Inspector: the key goes to its first
// waiter, as on a release, and the holder is told at once (its Lost
// closes), unless its client crashed.
func (d *Driver) ForceRelease(ctx context.Context, key string) (bool, error) {
	if err := d.enter(ctx); err != nil {
		return false, err
	}
	s := d.s
	s.mu.Lock()
	notify := s.expireDueLocked(key)
	e := s.keys[key]
	if e == nil || e.owner == nil {
		s.mu.Unlock()
		notify()
		return false, nil
	}
	onLost, owner := e.onLost, e.owner
	s.handOffLocked(e)
	s.mu.Unlock()
	notify()
	if onLost != nil && !owner.crashed.Load() {
		onLost(errForceReleased)
	}
	return true, nil
}
