package locker_test

import (
	"context"
	"errors"
	"fmt"
	"time"

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
