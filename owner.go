package locker

import (
	"context"
	"fmt"
	"sync"

	"github.com/distlock/locker/backend"
)

// ownerCtxKey is the context key of WithOwner.
type ownerCtxKey struct{}

// WithOwner returns a context that makes the Acquire and TryAcquire calls
// made under it reentrant for owner, as Redisson's locks are for a
// thread: an acquisition of a key that owner already holds through the
// same Locker returns at once, with a new handle on the same hold, instead
// of waiting for itself. The hold goes when the last of its handles is
// released (or lost): until then the key stays held. The handles share
// the hold's Lost, Err, fence, token, validity and value; Refresh and
// SetValue through any of them act on the hold. A handle released twice
// returns ErrNotHeld, and releasing it never releases the others'.
//
// Reentrancy is by owner, Locker and key, nothing else: the same owner
// through another Locker, or in another process, is another client and
// waits its turn, and so do acquisitions under a context without an owner
// (locks stay non-reentrant by default). An owner names one logical
// holder: a request id, a job, a goroutine's task; two goroutines under
// one owner share its holds, and so must not count on excluding each other.
//
// A reentrant request must be covered by the owner's hold: an exclusive
// hold covers exclusive and shared requests of the key, a shared hold
// covers shared requests, and a semaphore hold covers requests of the same
// limit for no more permits. Anything else (a shared holder asking for the
// exclusive hold, which would wait for itself) fails with ErrKindMismatch.
// The options of a covered request other than its kind (TTL, value,
// refresh) are those of the hold, set by its first acquisition. While the
// owner's first acquisition of a key is waiting, its other Acquire calls
// on the key wait for its outcome, and TryAcquire calls fail with
// ErrNotAcquired. An empty owner is no owner.
func WithOwner(ctx context.Context, owner string) context.Context {
	return context.WithValue(ctx, ownerCtxKey{}, owner)
}

// OwnerFrom returns the owner WithOwner put in ctx, if any.
func OwnerFrom(ctx context.Context) (string, bool) {
	if ctx == nil {
		return "", false
	}
	owner, _ := ctx.Value(ownerCtxKey{}).(string)
	return owner, owner != ""
}

// ownedKey names an owner's hold of a key in one Locker.
type ownedKey struct{ owner, key string }

// owned is an owner's hold of a key and its handles.
type owned struct {
	lk    *lock // nil while the first acquisition is in flight
	claim backend.Claim
	count int           // handles not yet released
	ready chan struct{} // closed when the first acquisition ends
}

// owners is a Locker's table of owned holds.
type owners struct {
	mu   sync.Mutex
	byID map[ownedKey]*owned
}

// acquireOwned is Acquire (wait) or TryAcquire under an owner.
func (c *client) acquireOwned(ctx context.Context, owner, key string, wait bool, opts []Option) (Lock, error) {
	op := "acquire"
	if !wait {
		op = "try-acquire"
	}
	o, err := c.options(opts)
	if err != nil {
		return nil, opErr(op, key, err)
	}
	kind, limit, weight, err := o.kind()
	if err != nil {
		return nil, opErr(op, key, err)
	}
	claim := backend.Claim{Kind: kind, Limit: limit, Weight: weight}
	k := ownedKey{owner, key}
	for {
		c.own.mu.Lock()
		if c.own.byID == nil {
			c.own.byID = map[ownedKey]*owned{}
		}
		ent := c.own.byID[k]
		switch {
		case ent == nil:
			ent = &owned{ready: make(chan struct{}), claim: claim}
			c.own.byID[k] = ent
			c.own.mu.Unlock()
			lk, err := c.acquireNew(ctx, key, wait, opts)
			c.own.mu.Lock()
			defer c.own.mu.Unlock()
			close(ent.ready)
			if err != nil {
				delete(c.own.byID, k)
				return nil, err
			}
			ent.lk, ent.count = lk.(*lock), 1
			return &handle{lock: ent.lk, c: c, k: k, ent: ent}, nil
		case ent.lk == nil:
			c.own.mu.Unlock()
			if !wait {
				return nil, opErr(op, key, fmt.Errorf("%w: owner %q is still acquiring the key", ErrNotAcquired, owner))
			}
			select {
			case <-ent.ready:
				continue
			case <-ctx.Done():
				return nil, opErr(op, key, ctx.Err())
			}
		case ent.lk.Err() != nil:
			// Lost: the owner holds it no longer, and its next
			// acquisition is a new one. Handles on the old hold release
			// nothing that is still held.
			delete(c.own.byID, k)
			c.own.mu.Unlock()
			continue
		case !covers(ent.claim, claim):
			c.own.mu.Unlock()
			return nil, opErr(op, key, fmt.Errorf("%w: owner %q holds the key as %s, which does not cover a request for %s",
				ErrKindMismatch, owner, describeClaim(ent.claim), describeClaim(claim)))
		default:
			if c.isClosed() {
				c.own.mu.Unlock()
				return nil, opErr(op, key, ErrClosed)
			}
			ent.count++
			c.own.mu.Unlock()
			return &handle{lock: ent.lk, c: c, k: k, ent: ent}, nil
		}
	}
}

// covers reports whether an owner holding held may take req by reentry.
func covers(held, req backend.Claim) bool {
	switch held.Kind {
	case backend.Exclusive:
		return req.Kind != backend.Permit
	case backend.Shared:
		return req.Kind == backend.Shared
	default:
		return req.Kind == backend.Permit && req.Limit == held.Limit && req.Weight <= held.Weight
	}
}

// describeClaim names a claim in messages.
func describeClaim(c backend.Claim) string {
	switch c.Kind {
	case backend.Shared:
		return "a shared hold"
	case backend.Permit:
		return fmt.Sprintf("%d of %d permits", c.Weight, c.Limit)
	}
	return "the exclusive hold"
}

// handle is one of an owner's handles on its hold: the hold's Lock, but
// for Release, which lets the hold go with the last handle.
type handle struct {
	*lock
	c        *client
	k        ownedKey
	ent      *owned
	released bool // under c.own.mu
}

// Release releases this handle; the hold goes with the last one.
func (h *handle) Release(ctx context.Context) error {
	if ctx == nil {
		return opErr("release", h.lock.key, errNilContext)
	}
	h.c.own.mu.Lock()
	if h.released {
		h.c.own.mu.Unlock()
		return opErr("release", h.lock.key, fmt.Errorf("%w: this handle was released already", ErrNotHeld))
	}
	h.released = true
	h.ent.count--
	last := h.ent.count == 0
	if last && h.c.own.byID[h.k] == h.ent {
		delete(h.c.own.byID, h.k)
	}
	h.c.own.mu.Unlock()
	if last {
		return h.lock.Release(ctx)
	}
	if err := h.lock.Err(); err != nil {
		return opErr("release", h.lock.key, err)
	}
	return nil
}

// HoldCount returns the hold count of l: how many of its owner's handles
// on the hold (WithOwner) are not yet released, counting l itself if it is
// not; 1 for a lock acquired without an owner.
func HoldCount(l Lock) int {
	h, ok := l.(*handle)
	if !ok {
		return 1
	}
	h.c.own.mu.Lock()
	defer h.c.own.mu.Unlock()
	return h.ent.count
}

var _ Lock = (*handle)(nil)
