package locker_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/locker"
	"github.com/distlock/locker/backend"
	"github.com/distlock/locker/internal/memstore"
	"github.com/distlock/locker/memory"
)

// TestKindOptions: bad combinations of Shared, Limit and Weight are refused
// before anything reaches the backend, with an error that names them and
// wraps ErrInvalidOption.
func TestKindOptions(t *testing.T) {
	l := memory.New(&memory.Options{Store: memory.NewStore()})
	defer l.Close()
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		opts []locker.Option
		want string
	}{
		{"zero limit", []locker.Option{locker.Limit(0)}, "Limit(0): a semaphore has at least one permit"},
		{"negative limit", []locker.Option{locker.Limit(-3)}, "Limit(-3)"},
		{"huge limit", []locker.Option{locker.Limit(backend.SharedCapacity + 1)}, "at most 2147483647 permits"},
		{"weight without limit", []locker.Option{locker.Weight(2)}, "Weight(2) without Limit"},
		{"zero weight", []locker.Option{locker.Limit(3), locker.Weight(0)}, "Weight(0): a hold takes from 1 to the Limit of 3 permits"},
		{"weight over limit", []locker.Option{locker.Limit(3), locker.Weight(4)}, "Weight(4)"},
		{"shared semaphore", []locker.Option{locker.Shared(), locker.Limit(3)}, "Shared and Limit together"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, try := range []bool{false, true} {
				var err error
				if try {
					_, err = l.TryAcquire(ctx, "k", tc.opts...)
				} else {
					_, err = l.Acquire(ctx, "k", tc.opts...)
				}
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("try=%v: err = %v, want it to say %q", try, err, tc.want)
				}
				if !errors.Is(err, locker.ErrInvalidOption) {
					t.Errorf("try=%v: err = %v, want it to wrap ErrInvalidOption", try, err)
				}
			}
		})
	}
	// The key was never touched: an exclusive hold takes it at once.
	lk, err := l.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatalf("TryAcquire after refused requests: %v", err)
	}
	lk.Release(ctx)
}

// mutexOnly is the memory driver claiming no kinds but Exclusive, as a
// driver written before kinds existed does; it counts the requests that
// reach it.
type mutexOnly struct {
	*memstore.Driver
	calls atomic.Int32
}

func (d *mutexOnly) Capabilities() backend.Capabilities {
	c := d.Driver.Capabilities()
	c.Shared, c.Permits = false, false
	return c
}

func (d *mutexOnly) TryAcquire(ctx context.Context, req backend.Request) (backend.Acquisition, error) {
	d.calls.Add(1)
	return d.Driver.TryAcquire(ctx, req)
}

func (d *mutexOnly) Acquire(ctx context.Context, req backend.Request) (backend.Acquisition, error) {
	d.calls.Add(1)
	return d.Driver.Acquire(ctx, req)
}

// TestUnsupportedKinds: a backend that does not claim shared holds or
// semaphores never sees such a request; the caller gets ErrUnsupported
// naming the backend and the kind.
func TestUnsupportedKinds(t *testing.T) {
	d := &mutexOnly{Driver: memstore.NewDriver(memstore.NewStore())}
	l := locker.New(d, nil)
	defer l.Close()
	ctx := context.Background()
	for _, tc := range []struct {
		opt  locker.Option
		want string
	}{
		{locker.Shared(), "backend memory does not admit shared holds"},
		{locker.Limit(2), "backend memory does not admit semaphores"},
	} {
		_, err := l.Acquire(ctx, "k", tc.opt)
		if !errors.Is(err, locker.ErrUnsupported) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Acquire: %v, want ErrUnsupported saying %q", err, tc.want)
		}
	}
	if n := d.calls.Load(); n != 0 {
		t.Errorf("the driver saw %d requests of kinds it does not claim", n)
	}
	lk, err := l.Acquire(ctx, "k")
	if err != nil {
		t.Fatalf("exclusive Acquire: %v", err)
	}
	lk.Release(ctx)
}

// TestKindsOnMemory: the core passes kind, limit and weight through: shared
// holds coexist, a semaphore admits its permits, a disagreeing limit is
// refused with ErrKindMismatch, and Do takes the options too.
func TestKindsOnMemory(t *testing.T) {
	l := memory.New(&memory.Options{Store: memory.NewStore()})
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	r1, err := l.TryAcquire(ctx, "rw", locker.Shared())
	if err != nil {
		t.Fatal(err)
	}
	r2, err := l.TryAcquire(ctx, "rw", locker.Shared())
	if err != nil {
		t.Fatalf("second shared hold: %v", err)
	}
	if _, err := l.TryAcquire(ctx, "rw"); !errors.Is(err, locker.ErrNotAcquired) {
		t.Errorf("exclusive beside readers: %v, want ErrNotAcquired", err)
	}
	r1.Release(ctx)
	r2.Release(ctx)

	err = locker.Do(ctx, l, "sem", func(ctx context.Context, lk locker.Lock) error {
		if _, err := l.TryAcquire(ctx, "sem", locker.Limit(3), locker.Weight(1)); err != nil {
			return err
		}
		if _, err := l.TryAcquire(ctx, "sem", locker.Limit(3)); !errors.Is(err, locker.ErrNotAcquired) {
			t.Errorf("a fourth permit of three: %v, want ErrNotAcquired", err)
		}
		if _, err := l.TryAcquire(ctx, "sem", locker.Limit(4)); !errors.Is(err, locker.ErrKindMismatch) {
			t.Errorf("another limit: %v, want ErrKindMismatch", err)
		}
		return nil
	}, locker.Limit(3), locker.Weight(2))
	if err != nil {
		t.Fatal(err)
	}
}

// TestCloseDuringQueuedWriter: a writer queued behind a reader blocks
// later readers (queue order); the Close of its Locker during the wait
// takes it out of the queue at once, so the next reader gets in beside
// the first without waiting for any TTL.
func TestCloseDuringQueuedWriter(t *testing.T) {
	s := memory.NewStore()
	readers := memory.New(&memory.Options{Store: s})
	defer readers.Close()
	writers := memory.New(&memory.Options{Store: s})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	r1, err := readers.TryAcquire(ctx, "k", locker.Shared(), locker.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer r1.Release(ctx)
	waited := make(chan error, 1)
	go func() {
		_, err := writers.Acquire(ctx, "k", locker.WithTTL(time.Minute))
		waited <- err
	}()
	for {
		h, err := locker.Inspect(ctx, readers, "k")
		if err != nil {
			t.Fatal(err)
		}
		if len(h.Queue) == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := readers.TryAcquire(ctx, "k", locker.Shared()); !errors.Is(err, locker.ErrNotAcquired) {
		t.Fatalf("a reader behind the queued writer: %v, want ErrNotAcquired", err)
	}
	if err := writers.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; !errors.Is(err, locker.ErrClosed) {
		t.Errorf("the writer's Acquire after Close: %v, want ErrClosed", err)
	}
	r2, err := readers.TryAcquire(ctx, "k", locker.Shared())
	if err != nil {
		t.Fatalf("a reader once the writer's Locker closed: %v", err)
	}
	r2.Release(ctx)
}

// TestFullSemaphore: a semaphore request that finds too few permits free
// says so, counting the permits in use where the backend knows them, and
// still wraps ErrNotAcquired and the driver's *backend.Busy.
func TestFullSemaphore(t *testing.T) {
	ctx := context.Background()
	l := memory.New(&memory.Options{Store: memory.NewStore()})
	defer l.Close()
	lim := locker.Limit(3)
	a, err := l.TryAcquire(ctx, "exports", lim, locker.Weight(2))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release(ctx)
	_, err = l.TryAcquire(ctx, "exports", lim, locker.Weight(2))
	if want := "no 2 permits free: 2 of 3 in use"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("2 permits of 3 with 2 in use: %v; want it to say %q", err, want)
	}
	b, err := l.TryAcquire(ctx, "exports", lim)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release(ctx)
	_, err = l.TryAcquire(ctx, "exports", lim)
	if want := "no permit free: 3 of 3 in use"; err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "another owner") {
		t.Errorf("1 permit of 3 with 3 in use: %v; want it to say %q", err, want)
	}
	var busy *backend.Busy
	if !errors.Is(err, locker.ErrNotAcquired) || !errors.As(err, &busy) {
		t.Errorf("%v: want it to wrap ErrNotAcquired and a *backend.Busy", err)
	}
}
