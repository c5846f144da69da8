package locker_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/distlock/locker"
	_ "github.com/distlock/locker/memory" // registers memory://
)

func Example() {
	ctx := context.Background()
	// The URL picks the backend: redis://, redlock://, zookeeper://, etcd://.
	l, err := locker.Open(ctx, "memory://example")
	if err != nil {
		panic(err)
	}
	defer l.Close()

	err = locker.Do(ctx, l, "reports/daily", func(ctx context.Context, lock locker.Lock) error {
		fence, _ := lock.Fence()
		fmt.Println("holding", lock.Key(), "with fence", fence)
		return nil // ctx is cancelled if the lock is lost
	})
	fmt.Println("done:", err)
	// Output:
	// holding reports/daily with fence 1
	// done: <nil>
}

// Acquire waits for as long as its context lets it: give it a deadline to
// bound the wait. A key still held when the deadline passes fails with the
// context's error.
func ExampleLocker_Acquire_timeout() {
	ctx := context.Background()
	l, _ := locker.Open(ctx, "memory://example-timeout")
	defer l.Close()
	holder, _ := l.Acquire(ctx, "jobs/nightly")

	wait, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err := l.Acquire(wait, "jobs/nightly")
	fmt.Println("timed out:", errors.Is(err, context.DeadlineExceeded))

	holder.Release(ctx)
	wait, cancel = context.WithTimeout(ctx, time.Second)
	defer cancel()
	lk, err := l.Acquire(wait, "jobs/nightly")
	fmt.Println("acquired after the release:", err == nil)
	lk.Release(ctx)
	// Output:
	// timed out: true
	// acquired after the release: true
}

func ExampleLocker_TryAcquire() {
	ctx := context.Background()
	l, _ := locker.Open(ctx, "memory://example-try")
	defer l.Close()

	first, _ := l.TryAcquire(ctx, "cron/cleanup", locker.WithTTL(time.Minute))
	_, err := l.TryAcquire(ctx, "cron/cleanup")
	fmt.Println(errors.Is(err, locker.ErrNotAcquired))
	first.Release(ctx)
	_, err = l.TryAcquire(ctx, "cron/cleanup")
	fmt.Println(err)
	// Output:
	// true
	// <nil>
}

func ExampleLock_Fence() {
	ctx := context.Background()
	l, _ := locker.Open(ctx, "memory://example-fence")
	defer l.Close()

	// A storage service that rejects writes with an older fence is safe
	// even against a holder paused past its TTL.
	var newest uint64
	write := func(fence uint64) error {
		if fence <= newest {
			return fmt.Errorf("stale fence %d, newest is %d", fence, newest)
		}
		newest = fence
		return nil
	}
	a, _ := l.Acquire(ctx, "doc/7")
	fa, _ := a.Fence()
	a.Release(ctx)
	b, _ := l.Acquire(ctx, "doc/7")
	fb, _ := b.Fence()
	fmt.Println(write(fb))
	fmt.Println(write(fa)) // the earlier holder, waking up late
	b.Release(ctx)
	// Output:
	// <nil>
	// stale fence 1, newest is 2
}

func ExampleLock_Lost() {
	ctx := context.Background()
	l, _ := locker.Open(ctx, "memory://example-lost")
	defer l.Close()

	// Without the watchdog, the lock lapses at its TTL unless refreshed.
	lk, _ := l.Acquire(ctx, "jobs/export", locker.WithTTL(50*time.Millisecond), locker.WithAutoRefresh(false))
	select {
	case <-lk.Lost():
		// Stop writing: someone else may hold the lock now.
		fmt.Println("lost:", errors.Is(lk.Err(), locker.ErrNotHeld))
	case <-time.After(time.Minute):
		fmt.Println("still held")
	}
	// Output:
	// lost: true
}

func ExampleLock_Refresh() {
	ctx := context.Background()
	l, _ := locker.Open(ctx, "memory://example-refresh")
	defer l.Close()

	lk, _ := l.Acquire(ctx, "jobs/import", locker.WithTTL(10*time.Second))
	// A long step ahead: give the lock a longer TTL (the watchdog keeps
	// using it from now on).
	if err := lk.Refresh(ctx, time.Minute); err != nil {
		fmt.Println("no longer ours:", err)
		return
	}
	left, _ := lk.TTL(ctx)
	fmt.Println(left > 50*time.Second)
	lk.Release(ctx)
	fmt.Println(lk.Err())
	// Output:
	// true
	// lock not held: released
}

func ExampleWithMaxHold() {
	ctx := context.Background()
	l, _ := locker.Open(ctx, "memory://example-maxhold")
	defer l.Close()

	// However long the work hangs, the lock is kept alive for at most
	// 300 ms (plus one TTL): then others get their turn.
	lk, _ := l.Acquire(ctx, "reports/monthly", locker.WithTTL(300*time.Millisecond), locker.WithMaxHold(300*time.Millisecond))
	<-lk.Lost()
	fmt.Println(errors.Is(lk.Err(), locker.ErrMaxHold))
	// Output:
	// true
}

func ExampleOpen_options() {
	ctx := context.Background()
	// The Locker's and the backend's warnings go to the logger given.
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	l, err := locker.Open(ctx, "memory://example-options?ttl=10s", locker.WithLogger(log))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Close()
	fmt.Println(l.Capabilities().Fencing)
	// Output:
	// true
}

func ExampleWithMeterProvider() {
	ctx := context.Background()
	// The application's providers: here the global ones, which record
	// nothing until it installs an SDK (otel.SetMeterProvider,
	// otel.SetTracerProvider). Metrics and spans are named in the package
	// documentation's Telemetry section.
	l, err := locker.Open(ctx, "memory://example-telemetry",
		locker.WithMeterProvider(otel.GetMeterProvider()),
		locker.WithTracerProvider(otel.GetTracerProvider()))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Close()
	lk, err := l.Acquire(ctx, "reports/weekly") // counted and traced
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(lk.Release(ctx))
	// Output:
	// <nil>
}
