package flawed

import (
	"context"
	"sync"

	"github.com/distlock/locker"
)

// NotReentrant returns l with owners ignored: under locker.WithOwner, an
// Acquire of a key its owner holds waits for itself, and a TryAcquire is
// refused, as without an owner.
func NotReentrant(l locker.Locker) locker.Locker { return notReentrant{l} }

type notReentrant struct{ locker.Locker }

func (n notReentrant) Acquire(ctx context.Context, key string, opts ...locker.Option) (locker.Lock, error) {
	return n.Locker.Acquire(locker.WithOwner(ctx, ""), key, opts...)
}

func (n notReentrant) TryAcquire(ctx context.Context, key string, opts ...locker.Option) (locker.Lock, error) {
	return n.Locker.TryAcquire(locker.WithOwner(ctx, ""), key, opts...)
}

// Unwrap returns the Locker wrapped, for locker.Inspect.
func (n notReentrant) Unwrap() locker.Locker { return n.Locker }

// ReleasesAll returns l whose owners' handles each release the whole
// hold: the first handle released lets the key go, and the owner's other
// handles with it, as a hold count that is not counted.
func ReleasesAll(l locker.Locker) locker.Locker {
	return &releasesAll{Locker: l, handles: map[string][]locker.Lock{}}
}

type releasesAll struct {
	locker.Locker
	mu      sync.Mutex
	handles map[string][]locker.Lock // an owner's handles not yet released, by the hold's token
}

func (r *releasesAll) Acquire(ctx context.Context, key string, opts ...locker.Option) (locker.Lock, error) {
	lk, err := r.Locker.Acquire(ctx, key, opts...)
	return r.track(ctx, lk, err)
}

func (r *releasesAll) TryAcquire(ctx context.Context, key string, opts ...locker.Option) (locker.Lock, error) {
	lk, err := r.Locker.TryAcquire(ctx, key, opts...)
	return r.track(ctx, lk, err)
}

// Unwrap returns the Locker wrapped, for locker.Inspect.
func (r *releasesAll) Unwrap() locker.Locker { return r.Locker }

// track records a handle an owner got.
func (r *releasesAll) track(ctx context.Context, lk locker.Lock, err error) (locker.Lock, error) {
	if _, owned := locker.OwnerFrom(ctx); err != nil || !owned {
		return lk, err
	}
	r.mu.Lock()
	r.handles[lk.Token()] = append(r.handles[lk.Token()], lk)
	r.mu.Unlock()
	return &allHandle{Lock: lk, r: r}, nil
}

// allHandle is a handle whose Release releases every handle of its hold.
type allHandle struct {
	locker.Lock
	r *releasesAll
}

func (h *allHandle) Release(ctx context.Context) error {
	h.r.mu.Lock()
	all := h.r.handles[h.Token()]
	delete(h.r.handles, h.Token())
	h.r.mu.Unlock()
	err := h.Lock.Release(ctx)
	for _, o := range all {
		if o != h.Lock {
			o.Release(ctx)
		}
	}
	return err
}

// OwnersAcross returns l whose owners' acquisitions go to shared, as
// every Locker made with the same shared does: an owner holding a key
// through one of them takes it again through any other, as if they were
// one client.
func OwnersAcross(l, shared locker.Locker) locker.Locker { return ownersAcross{l, shared} }

type ownersAcross struct {
	locker.Locker
	shared locker.Locker
}

func (o ownersAcross) pick(ctx context.Context) locker.Locker {
	if _, owned := locker.OwnerFrom(ctx); owned {
		return o.shared
	}
	return o.Locker
}

func (o ownersAcross) Acquire(ctx context.Context, key string, opts ...locker.Option) (locker.Lock, error) {
	return o.pick(ctx).Acquire(ctx, key, opts...)
}

func (o ownersAcross) TryAcquire(ctx context.Context, key string, opts ...locker.Option) (locker.Lock, error) {
	return o.pick(ctx).TryAcquire(ctx, key, opts...)
}

// Unwrap returns the Locker wrapped, for locker.Inspect.
func (o ownersAcross) Unwrap() locker.Locker { return o.Locker }
