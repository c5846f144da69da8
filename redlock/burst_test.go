package redlock_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/distlock/locker"
	"github.com/distlock/locker/internal/testenv"
)

// TestBurst: a thousand Acquire calls at once on one Locker over the five
// shared nodes all succeed within their context, on distinct keys and
// (a hundred) on four keys. Their requests queue on
// the client for its connections, well past the node timeout: that wait
// is not the node's failing to answer, and a round that no majority
// answered in time is tried again while the context allows.
func TestBurst(t *testing.T) {
	const n = 1000
	l := mustOpen(t, testenv.Get(t, testenv.RedlockURL))
	prefix := fmt.Sprintf("burst-%d-", time.Now().UnixNano())
	t.Run("distinct", func(t *testing.T) {
		burst(t, l, n, func(i int) string { return fmt.Sprintf("%s%d", prefix, i) }, true)
	})
	t.Run("contended", func(t *testing.T) {
		burst(t, l, n/10, func(i int) string { return fmt.Sprintf("%sc%d", prefix, i%4) }, false)
	})
}

// burst runs n Acquire calls at once, on the key key(i) for the i-th,
// and fails on any error. With distinct keys every lock is held until all
// are taken; on shared keys each is released at once. Release failures are
// only counted: a release asks the nodes a bounded number of times, by
// design, and a lock it misses expires with its TTL.
func burst(t *testing.T, l locker.Locker, n int, key func(i int) string, holdAll bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := make(chan struct{})
	errs := make(chan error, n)
	locks := make(chan locker.Lock, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			lk, err := l.Acquire(ctx, key(i), locker.WithTTL(time.Minute))
			if err != nil {
				errs <- fmt.Errorf("Acquire %s: %w", key(i), err)
				return
			}
			if holdAll {
				locks <- lk
				return
			}
			lk.Release(context.Background())
		}()
	}
	began := time.Now()
	close(start)
	wg.Wait()
	took := time.Since(began)
	close(errs)
	close(locks)
	failed := 0
	for err := range errs {
		if failed++; failed <= 3 {
			t.Error(err)
		}
	}
	if failed > 0 {
		t.Errorf("%d of %d calls failed", failed, n)
	}
	unreleased := 0
	for lk := range locks {
		if lk.Release(context.Background()) != nil {
			unreleased++
		}
	}
	t.Logf("%d calls in %v; %d releases failed", n, took.Round(time.Millisecond), unreleased)
}
