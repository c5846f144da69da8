package locker_test

import (
	"context"
	"errors"
	"strings"
	"testing"

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
	store := memory.NewStore()
	l := memory.New(&memory.Options{Store: store})
	defer l.Close()
	other := memory.New(&memory.Options{Store: store})
	defer other.Close()
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
