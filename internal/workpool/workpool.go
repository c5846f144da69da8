// Package workpool runs a list of jobs on a bounded number of goroutines:
// the drivers' batched requests (many transactions or multis at once).
package workpool

import (
	"sync"
	"sync/atomic"
)

// Run runs jobs on the caller's goroutine and on as many helpers as it can
// take a token for from tokens without waiting; each helper gives its
// token back when done. The channel's capacity thus bounds the helpers of
// every call that shares it (a driver's budget), or of one call given a
// channel of its own. The caller works too, so no call waits for another's
// helpers. Run returns once every job has run.
func Run(tokens chan struct{}, jobs []func()) {
	var next atomic.Int64
	work := func() {
		for {
			j := int(next.Add(1) - 1)
			if j >= len(jobs) {
				return
			}
			jobs[j]()
		}
	}
	var wg sync.WaitGroup
spawn:
	for range len(jobs) - 1 {
		select {
		case tokens <- struct{}{}:
			wg.Go(func() {
				defer func() { <-tokens }()
				work()
			})
		default:
			break spawn
		}
	}
	work()
	wg.Wait()
}
