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
// A reentrant request must be covered by the owner's hold: a hold covers
// requests of its own kind, and a semaphore hold those of the same limit
// for no more permits. Anything else fails with ErrKindMismatch: a shared
// holder asking for the exclusive hold would wait for itself, and a shared
// request under the owner's exclusive hold is refused rather than given a
// handle on the exclusive hold, since releasing the write handle would not
// downgrade the hold to a shared one (as Curator and Redisson let a writer
// do): the key would stay exclusive. To downgrade, release the write lock
// and then take the read lock, which another writer may take in between.
// The options of a covered request other than its kind (TTL, value,
// refresh) are those of the hold, set by its first acquisition. While the
// owner's first acquisition of a key is waiting, its other Acquire calls
// on the key wait for its outcome, and TryAcquire calls fail with
// ErrNotAcquired. An empty owner is no owner.
//
// An Election's Campaign ignores the owner: leadership is never
// reentrant, so a Campaign under an owner waits for a leadership that the
// owner holds through another Election, like any other campaigner.
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

// acquireOwned is Acquire (wait) or TryAcquire under an owner: a new
// handle on the owner's hold of key where it has one that covers the
// request, otherwise a new hold.
func (c *client) acquireOwned(ctx context.Context, owner, key string, wait bool, opts []Option) (Lock, error) {
	op := "acquire"
	if !wait {
		op = "try-acquire"
	}
	if ctx == nil {
		return nil, opErr(op, key, errNilContext)
	}
	_, claim, err := c.request(key, opts)
	if err != nil {
		return nil, opErr(op, key, err)
	}
	k := ownedKey{owner, key}
	for {
		c.own.mu.Lock()
		if c.own.byID == nil {
			c.own.byID = map[ownedKey]*owned{}
		}
		ent := c.own.byID[k]
		if ent == nil {
			ent = &owned{ready: make(chan struct{}), claim: claim}
			c.own.byID[k] = ent
			c.own.mu.Unlock()
			return c.acquireFirst(ctx, k, ent, wait, opts)
		}
		lk, retry, err := c.reenterLocked(k, ent, claim, wait)
		c.own.mu.Unlock()
		if retry == nil {
			return lk, opErr(op, key, err)
		}
		select {
		case <-retry:
		case <-ctx.Done():
			return nil, opErr(op, key, ctx.Err())
		}
	}
}

// acquireFirst takes the owner's hold that ent records, a new one.
func (c *client) acquireFirst(ctx context.Context, k ownedKey, ent *owned, wait bool, opts []Option) (Lock, error) {
	lk, err := c.acquireNew(ctx, k.key, wait, opts)
	c.own.mu.Lock()
	defer c.own.mu.Unlock()
	close(ent.ready)
	if err != nil {
		delete(c.own.byID, k)
		return nil, err
	}
	ent.lk, ent.count = lk.(*lock), 1
	return &handle{lock: ent.lk, c: c, k: k, ent: ent}, nil
}

// retryNow is a closed channel: the caller may try again at once.
var retryNow = func() chan struct{} { ch := make(chan struct{}); close(ch); return ch }()

// reenterLocked answers a request of the owner of ent, its existing
// entry: a new handle, an error, or a channel to wait on before trying
// again (the first acquisition is still in flight, or the hold was lost).
// c.own.mu is held.
func (c *client) reenterLocked(k ownedKey, ent *owned, claim backend.Claim, wait bool) (Lock, <-chan struct{}, error) {
	switch {
	case ent.lk == nil && !wait:
		return nil, nil, fmt.Errorf("%w: owner %q is still acquiring the key", ErrNotAcquired, k.owner)
	case ent.lk == nil:
		return nil, ent.ready, nil
	case ent.lk.Err() != nil:
		// Lost: the owner holds it no longer, and its next acquisition
		// is a new one. Handles on the old hold release nothing that is
		// still held.
		delete(c.own.byID, k)
		return nil, retryNow, nil
	case ent.claim.Kind == backend.Exclusive && claim.Kind == backend.Shared:
		return nil, nil, fmt.Errorf("%w: owner %q holds the exclusive hold, and a shared handle on it would not downgrade it: release the write lock first",
			ErrKindMismatch, k.owner)
	case !covers(ent.claim, claim):
		return nil, nil, fmt.Errorf("%w: owner %q holds the key as %s, which does not cover a request for %s",
			ErrKindMismatch, k.owner, describeClaim(ent.claim), describeClaim(claim))
	case c.isClosed():
		return nil, nil, ErrClosed
	}
	ent.count++
	return &handle{lock: ent.lk, c: c, k: k, ent: ent}, nil, nil
}

// covers reports whether an owner holding held may take req by reentry.
func covers(held, req backend.Claim) bool {
	if held.Kind == backend.Permit {
		return req.Kind == backend.Permit && req.Limit == held.Limit && req.Weight <= held.Weight
	}
	return req.Kind == held.Kind
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
	// Whether the hold was lost is read while this handle still counts:
	// once it does not, the last handle may release the hold at any
	// moment, and that release is not this handle's loss.
	lost := h.lock.Err()
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
	return opErr("release", h.lock.key, lost)
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
