package memory_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/distlock/locker"
	"github.com/distlock/locker/memory"
)

// The embedded backend, for one process (tests, examples, single-instance
// tools): Lockers on the same Store exclude each other.
func ExampleNew() {
	store := memory.NewStore()
	a := memory.New(&memory.Options{Store: store, Config: locker.Config{Prefix: "app/"}})
	b := memory.New(&memory.Options{Store: store, Config: locker.Config{Prefix: "app/"}})
	defer a.Close()
	defer b.Close()
	ctx := context.Background()
	lk, _ := a.Acquire(ctx, "k", locker.WithTTL(time.Second))
	_, err := b.TryAcquire(ctx, "k")
	fmt.Println(err != nil)
	lk.Release(ctx)
	// Output:
	// true
}

// A holder that pauses (a long garbage collection, say) past its TTL loses
// its lock to the next client; the fencing token lets the resource reject
// what the paused holder writes once it resumes.
func ExampleClient_Pause() {
	ctx := context.Background()
	store := memory.NewStore()
	a := memory.NewClient(&memory.Options{Store: store})
	b := memory.NewClient(&memory.Options{Store: store})
	defer a.Close()
	defer b.Close()

	var highest uint64 // the resource remembers the highest fence it saw
	write := func(fence uint64) bool {
		if fence < highest {
			return false
		}
		highest = fence
		return true
	}

	lkA, _ := a.Acquire(ctx, "report", locker.WithTTL(100*time.Millisecond))
	fenceA, _ := lkA.Fence()
	a.Pause() // nothing refreshes a's lock now

	lkB, _ := b.Acquire(ctx, "report") // waits until a's lock expires
	fenceB, _ := lkB.Fence()
	fmt.Println("b writes:", write(fenceB))

	a.Resume() // a goes on where it stopped, unaware
	fmt.Println("a writes:", write(fenceA))
	fmt.Println("a was told it lost the lock:", errors.Is(lkA.Err(), locker.ErrNotHeld))
	lkB.Release(ctx)
	// Output:
	// b writes: true
	// a writes: false
	// a was told it lost the lock: true
}
