package locker_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/distlock/locker"
	"github.com/distlock/locker/memory"
)

// readCatalog reads while other readers may too; a writer (an Acquire
// of "catalog" without Shared) waits for them and holds the key alone.
func readCatalog(ctx context.Context, l locker.Locker) error {
	return locker.Do(ctx, l, "catalog", func(ctx context.Context, lock locker.Lock) error {
		return nil // ... read ...
	}, locker.Shared())
}

// export runs at most 4 exports at once across every process: a large
// one takes 2 of the 4 permits.
func export(ctx context.Context, l locker.Locker, large bool) error {
	weight := 1
	if large {
		weight = 2
	}
	return locker.Do(ctx, l, "exports", func(ctx context.Context, lock locker.Lock) error {
		return nil // ... export ...
	}, locker.Limit(4), locker.Weight(weight))
}

// Readers share a key, writers take it alone, and a semaphore admits at
// most its limit of permits.
func ExampleShared() {
	ctx := context.Background()
	l := memory.New(&memory.Options{Store: memory.NewStore()})
	defer l.Close()

	r1, _ := l.Acquire(ctx, "catalog", locker.Shared())
	r2, err := l.TryAcquire(ctx, "catalog", locker.Shared())
	fmt.Println("second reader:", err)
	_, err = l.TryAcquire(ctx, "catalog")
	fmt.Println("writer beside readers refused:", errors.Is(err, locker.ErrNotAcquired))
	r1.Release(ctx)
	r2.Release(ctx)
	fmt.Println("read:", readCatalog(ctx, l))

	big, _ := l.Acquire(ctx, "exports", locker.Limit(4), locker.Weight(3))
	_, err = l.TryAcquire(ctx, "exports", locker.Limit(4), locker.Weight(2))
	fmt.Println("2 permits when 1 is free refused:", errors.Is(err, locker.ErrNotAcquired))
	fmt.Println("1 permit:", export(ctx, l, false))
	big.Release(ctx)
	fmt.Println("2 permits:", export(ctx, l, true))
	_, err = l.TryAcquire(ctx, "catalog", locker.Limit(2))
	fmt.Println("a semaphore on a free key:", err)
	_, err = l.TryAcquire(ctx, "catalog", locker.Shared())
	fmt.Println("a reader on it:", err)
	// Output:
	// second reader: <nil>
	// writer beside readers refused: true
	// read: <nil>
	// 2 permits when 1 is free refused: true
	// 1 permit: <nil>
	// 2 permits: <nil>
	// a semaphore on a free key: <nil>
	// a reader on it: locker: try-acquire "catalog": lock kind or limit disagrees with the key's holders or waiters: the key is a semaphore of 2 permits, the request is for a read/write lock (exclusive and shared holds)
}
