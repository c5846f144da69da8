// Command swap runs the same locking code on whichever backend a URL
// names: several workers take turns on one lock and write to a resource
// that checks fencing tokens, then the program reports what happened.
//
//	go run ./examples/swap                                  # embedded memory:// backend
//	go run ./examples/swap -url redis://127.0.0.1:6379      # a Redis server
//	LOCKER_URL=etcd://127.0.0.1:2379 go run ./examples/swap
//
// Nothing in the code below depends on the backend: that is the point.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distlock/locker"
	_ "github.com/distlock/locker/etcd"
	_ "github.com/distlock/locker/memory"
	_ "github.com/distlock/locker/redis"
	_ "github.com/distlock/locker/redlock"
	_ "github.com/distlock/locker/zookeeper"
)

func main() {
	def := os.Getenv("LOCKER_URL")
	if def == "" {
		def = "memory://"
	}
	url := flag.String("url", def, "locker URL (default $LOCKER_URL, else memory://)")
	workers := flag.Int("workers", 4, "concurrent workers")
	rounds := flag.Int("rounds", 25, "critical sections per worker")
	key := flag.String("key", "examples/swap", "lock key")
	flag.Parse()
	if err := run(*url, *key, *workers, *rounds); err != nil {
		fmt.Fprintln(os.Stderr, "swap:", err)
		os.Exit(1)
	}
}

// account is the protected resource. Like a storage service that checks
// fencing tokens, it rejects a write whose fence is older than the newest
// it has seen.
type account struct {
	mu       sync.Mutex
	balance  int
	newest   uint64
	rejected int
	inside   atomic.Int32
	overlaps atomic.Int32
}

func (a *account) deposit(fence uint64, fenced bool) {
	if a.inside.Add(1) > 1 {
		a.overlaps.Add(1)
	}
	defer a.inside.Add(-1)
	a.mu.Lock()
	defer a.mu.Unlock()
	if fenced && fence <= a.newest {
		a.rejected++
		return
	}
	a.newest = fence
	a.balance++
}

func run(url, key string, workers, rounds int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	var acct account
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	start := time.Now()
	for w := range workers {
		// One Locker per worker, as separate processes would have.
		l, err := locker.Open(ctx, url)
		if err != nil {
			return err
		}
		defer l.Close()
		if w == 0 {
			fmt.Printf("backend %s (%+v)\n", locker.Redact(url), l.Capabilities())
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				err := locker.Do(ctx, l, key, func(ctx context.Context, lock locker.Lock) error {
					fence, ok := lock.Fence()
					acct.deposit(fence, ok)
					return nil
				}, locker.WithTTL(10*time.Second))
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	elapsed := time.Since(start)
	n := workers * rounds
	fmt.Printf("%d critical sections by %d workers in %v (%.0f/s)\n", n, workers, elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds())
	fmt.Printf("balance %d, overlapping critical sections %d, writes rejected by fencing %d\n",
		acct.balance, acct.overlaps.Load(), acct.rejected)
	if acct.overlaps.Load() > 0 || acct.balance+acct.rejected != n {
		return fmt.Errorf("mutual exclusion violated")
	}
	return nil
}
