package redlock

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestWorkersBurst drives a burst of requests that all block at once:
// none waits for another's worker, and once they are done at most maxIdle
// workers are left, which end at stop.
func TestWorkersBurst(t *testing.T) {
	const burst, maxIdle = 40, 3
	base := runtime.NumGoroutine()
	stop := make(chan struct{})
	w := newWorkers(maxIdle, stop)

	// Every request blocks until all of them have started: had one
	// waited for a busy worker, the burst would never complete.
	var (
		started atomic.Int32
		done    sync.WaitGroup
	)
	done.Add(burst)
	release := make(chan struct{})
	for range burst {
		w.do(func() {
			defer done.Done()
			started.Add(1)
			<-release
		})
	}
	waitFor(t, "every request of the burst to start", func() bool { return started.Load() == burst })
	close(release)
	done.Wait()

	waitFor(t, "the workers beyond maxIdle to end", func() bool {
		return runtime.NumGoroutine()-base <= maxIdle && w.idle.Load() == maxIdle
	})
	if n := w.idle.Load(); n != maxIdle {
		t.Fatalf("%d idle workers after the burst, want %d", n, maxIdle)
	}

	// An idle worker takes the next request: no new goroutine.
	ran := make(chan struct{})
	w.do(func() { close(ran) })
	<-ran
	waitFor(t, "the worker to be idle again", func() bool { return w.idle.Load() == maxIdle })
	if n := runtime.NumGoroutine() - base; n > maxIdle {
		t.Fatalf("%d goroutines more after a request on idle workers, want at most %d", n, maxIdle)
	}

	close(stop)
	waitFor(t, "the idle workers to end at stop", func() bool {
		return w.idle.Load() == 0 && runtime.NumGoroutine() <= base
	})
}

// waitFor polls cond until it holds, failing the test after a generous
// bound (the machine may be loaded; the bound is not a measurement).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
