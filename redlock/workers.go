package redlock

import "time"

// workers runs the requests of a round, one per node, on goroutines that
// outlive a request. A goroutine started for each request grows its stack
// into the client library every time, and that copying cost a round more
// client CPU than the requests themselves (BenchmarkFanOut); a worker
// keeps its stack. A request that finds no idle worker starts one, so
// requests never queue behind one another; a worker idle for
// workerIdle, or left running at Close, ends.
type workers struct {
	jobs chan func()
	stop <-chan struct{}
}

// workerIdle is how long a worker waits for another request before it
// ends.
const workerIdle = 5 * time.Second

func newWorkers(stop <-chan struct{}) *workers {
	return &workers{jobs: make(chan func()), stop: stop}
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
	f()
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		select {
		case f := <-w.jobs:
			f()
			idle.Reset(workerIdle)
		case <-idle.C:
			return
		case <-w.stop:
			return
		}
	}
}
