// Package heldtest measures what holding many locks at once costs: one
// process acquires N distinct keys and keeps them, with the watchdog
// refreshing them, for several refresh periods. It reports the locks lost
// while held (none should be: no faults are injected), the goroutines the
// Locker runs while holding them, the client heap each held lock costs and
// the requests per second the servers received meanwhile.
//
// The held-lock test (every backend, 10,000 locks, under make test) and the
// held-lock benchmark (10,000 and 100,000 locks, make bench-go) both run it.
package heldtest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distlock/locker"
)

// Config describes a run.
type Config struct {
	// Locker holds the locks. Required; Run does not close it.
	Locker locker.Locker
	// N is how many distinct keys are acquired and held. Required.
	N int
	// TTL of every lock; 0: the Locker's default.
	TTL time.Duration
	// Hold is how long the locks are kept once all are held. Required.
	Hold time.Duration
	// Workers acquire and release the keys concurrently (default 64).
	Workers int
	// Prefix of the keys; Run adds a number per key.
	Prefix string
	// Requests, if set, returns a counter of the requests the servers
	// received so far (all clients'); Run reports its rate during Hold.
	Requests func(ctx context.Context) (int64, error)
}

// Result is what a run measured.
type Result struct {
	N           int
	TTL         time.Duration
	Acquiring   time.Duration // until all N were held
	Held        time.Duration // how long they were then kept
	Lost        int           // locks whose Lost closed while held
	LostCause   error         // why the first lost lock was lost
	Goroutines  int           // the process's goroutines while holding, less those before the Locker held anything
	HeapPerLock float64       // bytes of live heap per held lock
	// RequestsPerSec the servers received during Hold; -1 when
	// Config.Requests is nil or failed.
	RequestsPerSec float64
}

func (r Result) String() string {
	ttl := "default TTL"
	if r.TTL > 0 {
		ttl = "TTL " + r.TTL.String()
	}
	req := "n/a"
	if r.RequestsPerSec >= 0 {
		req = fmt.Sprintf("%.0f/s", r.RequestsPerSec)
	}
	s := fmt.Sprintf("%d locks, %s: acquired in %v, held %v, lost %d, goroutines +%d, heap %.0f B/lock, server requests %s",
		r.N, ttl, r.Acquiring.Round(time.Millisecond), r.Held.Round(time.Millisecond), r.Lost, r.Goroutines, r.HeapPerLock, req)
	if r.LostCause != nil {
		s += fmt.Sprintf(" (the first lost: %v)", r.LostCause)
	}
	return s
}

// Run acquires cfg.N keys, holds them for cfg.Hold, counts what was lost
// and releases the rest. Its error says the run could not be done (an
// acquisition or a release failed); the losses are in the Result.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if cfg.Locker == nil || cfg.N <= 0 || cfg.Hold <= 0 {
		return Result{}, errors.New("heldtest: Config needs Locker, N and Hold")
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 64
	}
	res := Result{N: cfg.N, TTL: cfg.TTL, RequestsPerSec: -1}
	var opts []locker.Option
	if cfg.TTL > 0 {
		opts = append(opts, locker.WithTTL(cfg.TTL))
	}
	g0 := runtime.NumGoroutine()
	heap0 := liveHeap()

	start := time.Now()
	locks := make([]locker.Lock, cfg.N)
	err := parallel(cfg.Workers, cfg.N, func(i int) error {
		lk, err := cfg.Locker.Acquire(ctx, fmt.Sprintf("%s%d", cfg.Prefix, i), opts...)
		locks[i] = lk
		return err
	})
	res.Acquiring = time.Since(start)
	if err != nil {
		releaseAll(locks, cfg.Workers)
		return res, fmt.Errorf("heldtest: acquiring %d locks: %w", cfg.N, err)
	}

	res.HeapPerLock = float64(liveHeap()-heap0) / float64(cfg.N)
	reqs0, rerr := requests(ctx, cfg.Requests)
	held := time.Now()
	t := time.NewTimer(cfg.Hold)
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
	}
	res.Held = time.Since(held)
	if reqs1, err := requests(ctx, cfg.Requests); rerr == nil && err == nil && reqs0 >= 0 {
		res.RequestsPerSec = float64(reqs1-reqs0) / res.Held.Seconds()
	}
	res.Goroutines = runtime.NumGoroutine() - g0
	for _, lk := range locks {
		select {
		case <-lk.Lost():
			if res.Lost == 0 {
				_, res.LostCause = lk.TTL(ctx) // ErrNotHeld, with the cause
			}
			res.Lost++
		default:
		}
	}
	if err := releaseAll(locks, cfg.Workers); err != nil {
		return res, err
	}
	return res, ctx.Err()
}

func requests(ctx context.Context, f func(context.Context) (int64, error)) (int64, error) {
	if f == nil {
		return -1, nil
	}
	return f(ctx)
}

// releaseAll releases the locks taken (nil ones are skipped); a lock lost
// meanwhile is no error.
func releaseAll(locks []locker.Lock, workers int) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return parallel(workers, len(locks), func(i int) error {
		if locks[i] == nil {
			return nil
		}
		if err := locks[i].Release(ctx); err != nil && !errors.Is(err, locker.ErrNotHeld) {
			return fmt.Errorf("heldtest: release: %w", err)
		}
		return nil
	})
}

// parallel runs f(0..n-1) on workers goroutines and returns the first
// error; after an error the remaining indexes are skipped.
func parallel(workers, n int, f func(i int) error) error {
	var (
		next    atomic.Int64
		wg      sync.WaitGroup
		errOnce sync.Once
		first   error
		failed  atomic.Bool
	)
	for range min(workers, n) {
		wg.Go(func() {
			for !failed.Load() {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					errOnce.Do(func() { first = err })
					failed.Store(true)
				}
			}
		})
	}
	wg.Wait()
	return first
}

// liveHeap is the heap in use after a full collection.
func liveHeap() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
