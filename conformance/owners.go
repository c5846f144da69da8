package conformance

import (
	"context"
	"errors"
	"fmt"

	"github.com/distlock/locker"
)

// The case about reentrant owners (locker.WithOwner). Reentrancy lives in
// package locker, above every backend, but a backend's Locker is what
// users get, so the case runs on each: it needs nothing the backend
// claims.

// reentryBound is how long an owner's Acquire of a key it holds may take:
// it returns at once, without a round trip; one that waits for itself
// waits until its context ends.
const reentryBound = closeBound

// wantRefused checks that l.TryAcquire(key) under ctx fails with
// ErrNotAcquired; why says who tries and who holds the key.
func (t *T) wantRefused(ctx context.Context, l locker.Locker, key, why string) {
	lk, err := l.TryAcquire(ctx, key, locker.WithTTL(t.LongTTL()))
	if err == nil {
		lk.Release(t.ctx)
		t.Errorf("%s: TryAcquire(%s) succeeded; want ErrNotAcquired", why, keyText(key))
		return
	}
	if !errors.Is(err, locker.ErrNotAcquired) {
		t.Errorf("%s: TryAcquire(%s) = %v; want ErrNotAcquired", why, keyText(key), err)
	}
}

// wantHoldCount checks locker.HoldCount(lk), the number of the owner's
// handles not yet released.
func (t *T) wantHoldCount(lk locker.Lock, want int, when string) {
	if got := locker.HoldCount(lk); got != want {
		t.Errorf("%s: HoldCount = %d, want %d", when, got, want)
	}
}

func caseReentrancy(t *T) {
	l, other := t.Locker(), t.Locker()
	key := t.Key("k")
	long := locker.WithTTL(t.LongTTL())
	own := locker.WithOwner(t.ctx, "conformance owner")

	first, err := l.Acquire(own, key, long)
	if err != nil {
		t.Fatalf("Acquire(%s) under an owner, on a free key: %v", keyText(key), err)
	}
	t.Cleanup(func() { first.Release(context.WithoutCancel(t.ctx)) })
	second, err := l.TryAcquire(own, key, long)
	if err != nil {
		t.Fatalf("TryAcquire(%s) by the owner that holds the key, through the same Locker: %v; want a second handle", keyText(key), err)
	}
	t.Cleanup(func() { second.Release(context.WithoutCancel(t.ctx)) })
	ctx, cancel := context.WithTimeout(own, reentryBound)
	third, err := l.Acquire(ctx, key, long)
	cancel()
	if err != nil {
		t.Fatalf("Acquire(%s) by the owner that holds the key, through the same Locker, did not return a handle within %v (it waits for itself): %v",
			keyText(key), reentryBound, err)
	}
	t.Cleanup(func() { third.Release(context.WithoutCancel(t.ctx)) })
	t.wantHoldCount(third, 3, "an owner's third handle on its hold")
	t.wantShared(first, second, third)

	t.wantRefused(locker.WithOwner(t.ctx, "another owner"), l, key, "another owner, through the Locker whose owner holds the key")
	t.wantRefused(t.ctx, l, key, "a call without an owner, through the Locker whose owner holds the key")
	t.wantRefused(own, other, key, "the owner that holds the key, through another Locker (another client)")
	if t.Capabilities().Shared {
		// A backend without shared holds refuses the request as such.
		if r, err := l.TryAcquire(own, key, long, locker.Shared()); err == nil {
			r.Release(t.ctx)
			t.Errorf("TryAcquire(%s, Shared) by the owner that holds the exclusive hold returned a handle, which releasing the write handles would leave exclusive; want ErrKindMismatch", keyText(key))
		} else if !errors.Is(err, locker.ErrKindMismatch) {
			t.Errorf("TryAcquire(%s, Shared) by the owner that holds the exclusive hold: %v; want ErrKindMismatch", keyText(key), err)
		}
	}

	if err := second.Release(t.ctx); err != nil {
		t.Fatalf("Release of the second of three handles: %v", err)
	}
	t.WantErr(second.Release(t.ctx), locker.ErrNotHeld, "a second Release of the same handle")
	t.wantRefused(own, other, key, "two of the owner's three handles still held")
	if err := first.Release(t.ctx); err != nil {
		t.Fatalf("Release of the first of three handles: %v", err)
	}
	t.wantRefused(own, other, key, "one of the owner's three handles still held")
	if isClosed(third.Lost()) {
		t.Errorf("the last handle's Lost() closed when the other handles were released: %v", third.Err())
	}
	t.wantHoldCount(third, 1, "two of three handles released")

	t.Release(third)
	if !isClosed(third.Lost()) {
		t.Errorf("the last handle's Lost() is still open after its Release returned")
	}
	// The hold went with the last handle: the key is free, and the
	// owner's next acquisition through l is a new hold.
	elsewhere := t.TryAcquire(other, key, long)
	t.Release(elsewhere)
	again, err := l.TryAcquire(own, key, long)
	if err != nil {
		t.Fatalf("TryAcquire(%s) by the owner after its last handle was released: %v", keyText(key), err)
	}
	if again.Token() == first.Token() {
		t.Errorf("the owner's acquisition after its hold went got the old hold's token %q; want a new hold", again.Token())
	}
	t.wantHoldCount(again, 1, "the owner's first handle on a new hold")
	t.Release(again)
}

// wantShared checks that handles of one owner's hold share its token and
// fence, and that none is lost.
func (t *T) wantShared(handles ...locker.Lock) {
	f0, ok0 := handles[0].Fence()
	for i, h := range handles {
		if h.Token() != handles[0].Token() {
			t.Errorf("handle %d of an owner's hold has the token %q, handle 1 %q: the handles share one hold", i+1, h.Token(), handles[0].Token())
		}
		if f, ok := h.Fence(); f != f0 || ok != ok0 {
			t.Errorf("handle %d of an owner's hold has the fence %s, handle 1 %s: the handles share one hold", i+1, fenceText(f, ok), fenceText(f0, ok0))
		}
		if isClosed(h.Lost()) {
			t.Errorf("handle %d of an owner's hold has Lost() closed: %v", i+1, h.Err())
		}
	}
}

// fenceText formats what Fence returned.
func fenceText(f uint64, ok bool) string {
	if !ok {
		return "none"
	}
	return fmt.Sprint(f)
}
