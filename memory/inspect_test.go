package memory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/distlock/locker"
	"github.com/distlock/locker/internal/inspecttest"
	"github.com/distlock/locker/internal/testenv"
	"github.com/distlock/locker/memory"
)

// TestInspect runs the shared cases on *memory.Client, which wraps the
// Locker package locker made (Unwrap).
func TestInspect(t *testing.T) {
	s := memory.NewStore()
	inspecttest.Run(t, inspecttest.Backend{
		Open:       func(testing.TB) locker.Locker { return memory.NewClient(&memory.Options{Store: s}) },
		TTL:        5 * time.Second,
		Token:      true,
		TTLKnown:   true,
		Waiters:    true,
		LostWithin: 5 * time.Second, // at once: the store tells the holder
	})
}

// TestInspectCrashedClients: a crashed holder's lock is reported until it
// expires, and can be released by force; a crashed client's waiter is not
// counted, as the next hand-off skips it.
func TestInspectCrashedClients(t *testing.T) {
	ctx := context.Background()
	s := memory.NewStore()
	op := memory.New(&memory.Options{Store: s})
	defer op.Close()
	holder := memory.NewClient(&memory.Options{Store: s})
	defer holder.Close()
	lk, err := holder.Acquire(ctx, "k", locker.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	waiter := memory.NewClient(&memory.Options{Store: s})
	defer waiter.Close()
	done := make(chan error, 1)
	go func() {
		_, err := waiter.Acquire(ctx, "k")
		done <- err
	}()
	testenv.WaitFor(t, 5*time.Second, "the waiter to queue", func() bool {
		return inspecttest.Inspect(t, op, "k").Waiters == 1
	})
	waiter.Crash()
	if err := <-done; err == nil {
		t.Fatal("a crashed waiter acquired the key")
	}
	holder.Crash()
	h := inspecttest.Inspect(t, op, "k")
	if !h.Held || h.Token != lk.Token() || h.Waiters != 0 || h.TTL <= 0 || h.TTL > time.Minute {
		t.Errorf("Inspect with a crashed holder and waiter = %+v, want held by %q for at most a minute, no waiters", h, lk.Token())
	}
	if !inspecttest.ForceRelease(t, op, "k") {
		t.Fatal("ForceRelease of a crashed holder's lock reported nothing released")
	}
	next, err := op.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatalf("TryAcquire after the forced release: %v", err)
	}
	next.Release(ctx)
}

// TestInspectPausedClient: a paused client's Inspect waits, as every call
// of a paused client does, until its context ends.
func TestInspectPausedClient(t *testing.T) {
	c := memory.NewClient(&memory.Options{Store: memory.NewStore()})
	defer c.Close()
	c.Pause()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := locker.Inspect(ctx, c, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Inspect of a paused client: %v, want context.DeadlineExceeded", err)
	}
	c.Resume()
	if h := inspecttest.Inspect(t, c, "k"); h.Held {
		t.Errorf("Inspect after Resume = %+v, want a free key", h)
	}
}
