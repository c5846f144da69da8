package redlock

import (
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
