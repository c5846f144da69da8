package redlock

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// workers runs each node's part of a request on goroutines that outlive
// one request. A goroutine started per node and request grows its stack
// into the client library on every round, and that copying cost the
// Locker's requests more client CPU than the requests themselves (see
// Performance in the package doc); a worker keeps its grown stack.
//
// A request never waits for a worker: it is handed to an idle one, or a
// new one starts for it. At most maxIdle workers wait for the next
// request, each for at most workerIdle; the others end as soon as their
// request is done. So a burst (thousands of locks acquired at once) leaves
// no more than maxIdle goroutines behind, and an idle Locker none after
// workerIdle.
type workers struct {
	jobs    chan func() // unbuffered: a send succeeds only on an idle worker
	idle    atomic.Int32
	maxIdle int32
	stop    <-chan struct{}
}

// workerIdle is how long an idle worker waits for a request before it
// ends.
const workerIdle = 5 * time.Second

func newWorkers(maxIdle int, stop <-chan struct{}) *workers {
	return &workers{jobs: make(chan func()), maxIdle: int32(maxIdle), stop: stop}
}

// do runs f on an idle worker, or on a new one.
func (w *workers) do(f func()) {
	select {
	case w.jobs <- f:
	default:
		go w.loop(f)
	}
}

func (w *workers) loop(f func()) {
	var idle *time.Timer
	for {
		f()
		if w.idle.Add(1) > w.maxIdle {
			w.idle.Add(-1)
			return
		}
		if idle == nil {
			idle = time.NewTimer(workerIdle)
			defer idle.Stop()
		} else {
			idle.Reset(workerIdle)
		}
		select {
		case f = <-w.jobs:
			w.idle.Add(-1)
		case <-idle.C:
			w.idle.Add(-1)
			return
		case <-w.stop:
			w.idle.Add(-1)
			return
		}
	}
}

// A window bounds the requests sent to one node and not yet answered, so
// that a request waits in our own queue, before its node timeout starts,
// rather than after it: a burst of our own requests is not taken for a
// node that does not answer. Without it, a thousand Acquire calls at once
// queued in the client for its connections, spent their node timeouts
// there, and failed (TestBurst).
//
// In flight, requests still wait: for the CPU, on a loaded machine, and
// for the server. So the window narrows by one with each request that
// timed out (all those in flight timing out about halve it or more), down
// to one, and widens by one again after as many answers in a row as it is
// wide, up to maxInFlight, much as TCP's congestion window does: on a
// machine with load 25 on 2 cores, a fixed 20 in flight per node timed
// out nearly every round of that burst, and 1,000 of 1,000 calls failed.
type window struct {
	slots   chan struct{} // a token per request in flight, or held back
	mu      sync.Mutex
	closed  int // slots held back after timeouts
	answers int // answers in a row since the window last changed
}

// maxInFlight is the widest window: go-redis's default pool size, so
// that a request in the window does not wait for a connection.
func maxInFlight() int { return 10 * runtime.GOMAXPROCS(0) }

func newWindow(size int) *window { return &window{slots: make(chan struct{}, size)} }

// done frees the slot of a request answered, or that timed out.
func (w *window) done(timedOut bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case timedOut && w.closed < cap(w.slots)-1:
		w.closed++
		w.answers = 0
		return // its slot stays taken
	case timedOut:
		w.answers = 0
	case w.closed > 0:
		if w.answers++; w.answers >= cap(w.slots)-w.closed {
			w.answers = 0
			w.closed--
			<-w.slots // a held-back slot
		}
	}
	<-w.slots
}
