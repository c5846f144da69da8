package memstore

import (
	"bytes"
	"context"
	"errors"
	"time"

	"github.com/distlock/locker/backend"
)

var _ backend.Inspector = (*Driver)(nil)

// errForceReleased is what a holder's Lost reports after ForceRelease.
var errForceReleased = errors.New("memory: lock released by force (ForceRelease)")

// Inspect implements backend.Inspector: the store knows everything, every
// holder's kind, token, fence and remaining TTL, and the queue of waiters.
func (d *Driver) Inspect(ctx context.Context, key string) (backend.Holder, error) {
	if err := d.enter(ctx); err != nil {
		return backend.Holder{}, err
	}
	s := d.s
	s.mu.Lock()
	notify := s.expireDueLocked(key)
	h := backend.Holder{WaitersKnown: true}
	if e := s.keys[key]; e != nil {
		for el := e.holds.Front(); el != nil; el = el.Next() {
			hd := el.Value.(*hold)
			h.Holds = append(h.Holds, backend.Hold{
				Kind: hd.claim.Kind, Limit: hd.claim.Limit, Weight: hd.claim.Weight,
				Token: hd.token, Fence: hd.fence, Fenced: true, Value: bytes.Clone(hd.value),
				TTL: max(time.Until(hd.expires), 0), TTLKnown: true,
			})
		}
		for el := e.waiters.Front(); el != nil; el = el.Next() {
			if w := el.Value.(*waiter); w.d.check() == nil {
				h.Queue = append(h.Queue, backend.Hold{Kind: w.req.Kind, Limit: w.req.Limit, Weight: w.req.Weight})
			}
		}
		h.Waiters = len(h.Queue)
		if len(h.Holds) > 0 {
			first := h.Holds[0]
			h.Held, h.Token, h.Value = true, first.Token, first.Value
			h.Fence, h.Fenced = first.Fence, true
			h.TTL, h.TTLKnown = first.TTL, true
		}
	}
	s.mu.Unlock()
	notify()
	return h, nil
}

// ForceRelease implements backend.Inspector: every hold of the key ends,
// the key goes to its first waiters, as on a release, and the holders are
// told at once (their Lost closes), unless their client crashed.
func (d *Driver) ForceRelease(ctx context.Context, key string) (bool, error) {
	if err := d.enter(ctx); err != nil {
		return false, err
	}
	s := d.s
	s.mu.Lock()
	notify := s.expireDueLocked(key)
	e := s.keys[key]
	if e == nil || e.holds.Len() == 0 {
		s.mu.Unlock()
		notify()
		return false, nil
	}
	var ended []*hold
	for e.holds.Len() > 0 {
		h := e.holds.Front().Value.(*hold)
		s.removeLocked(h)
		ended = append(ended, h)
	}
	s.handOffLocked(e)
	s.mu.Unlock()
	notify()
	for _, h := range ended {
		h.tellLost(errForceReleased)
	}
	return true, nil
}
