package locker_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/distlock/locker"
	"github.com/distlock/locker/memory"
)

// TestOwnerRefusesDowngrade: under an owner's exclusive hold, a shared
// request is refused with ErrKindMismatch and says why, rather than given
// a handle on the exclusive hold that releasing the write handle would
// leave exclusive; once the write lock is released, the read lock is
// taken, and another client's reader shares the key.
func TestOwnerRefusesDowngrade(t *testing.T) {
	ctx := context.Background()
	l, other := twoLockers(t)
	octx := locker.WithOwner(ctx, "job-9")

	w, err := l.Acquire(octx, "catalog")
	if err != nil {
		t.Fatal(err)
	}
	for _, try := range []bool{true, false} {
		var r locker.Lock
		if try {
			r, err = l.TryAcquire(octx, "catalog", locker.Shared())
		} else {
			r, err = l.Acquire(octx, "catalog", locker.Shared())
		}
		if err == nil {
			r.Release(ctx)
			t.Fatalf("try=%v: a shared request under the owner's exclusive hold got a handle; want ErrKindMismatch", try)
		}
		if !errors.Is(err, locker.ErrKindMismatch) || !strings.Contains(err.Error(), "would not downgrade") ||
			!strings.Contains(err.Error(), "release the write lock first") {
			t.Fatalf("try=%v: %v; want ErrKindMismatch saying a shared handle would not downgrade the hold", try, err)
		}
	}
	if locker.HoldCount(w) != 1 {
		t.Fatalf("HoldCount of the write handle = %d after refused reads, want 1", locker.HoldCount(w))
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := l.TryAcquire(octx, "catalog", locker.Shared())
	if err != nil {
		t.Fatalf("the read lock after the write lock was released: %v", err)
	}
	defer r.Release(ctx)
	r2, err := other.TryAcquire(ctx, "catalog", locker.Shared())
	if err != nil {
		t.Fatalf("another client's reader beside the owner's: %v", err)
	}
	r2.Release(ctx)
}

// TestWaitForOwnHold: an Acquire whose context ends while its own Locker
// holds the key says so, still wrapping the context's error; one that
// waited for another Locker's hold does not.
func TestWaitForOwnHold(t *testing.T) {
	ctx := context.Background()
	l, other := twoLockers(t)

	lk, err := l.Acquire(locker.WithOwner(ctx, "job-1"), "report")
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Release(ctx)
	for _, tc := range []struct {
		name string
		l    locker.Locker
		ctx  context.Context
		want string // "" for no mention of this Locker's hold
	}{
		{"no owner", l, ctx, "this Locker holds the key: without WithOwner an acquisition never reenters"},
		{"another owner", l, locker.WithOwner(ctx, "job-2"), `this Locker holds the key, not for owner "job-2"`},
		{"another Locker", other, ctx, ""},
	} {
		wctx, cancel := context.WithTimeout(tc.ctx, 20*time.Millisecond)
		_, err := tc.l.Acquire(wctx, "report")
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s: %v, want it to wrap context.DeadlineExceeded", tc.name, err)
		}
		switch said := strings.Contains(err.Error(), "this Locker holds the key"); {
		case tc.want == "" && said:
			t.Errorf("%s: %v; another Locker holds the key, not this one", tc.name, err)
		case tc.want != "" && !strings.Contains(err.Error(), tc.want):
			t.Errorf("%s: %v; want it to say %q", tc.name, err, tc.want)
		}
	}
}

// twoLockers returns two Lockers on one memory store, closed when the
// test ends: two clients of one key.
func twoLockers(t *testing.T) (locker.Locker, locker.Locker) {
	store := memory.NewStore()
	l := memory.New(&memory.Options{Store: store})
	other := memory.New(&memory.Options{Store: store})
	t.Cleanup(func() { l.Close(); other.Close() })
	return l, other
}
