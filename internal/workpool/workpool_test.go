package workpool

import (
	"sync/atomic"
	"testing"
)

// TestRun: every job runs once, and no more goroutines than the tokens
// allow (plus the caller's) run jobs at once.
func TestRun(t *testing.T) {
	const jobs, helpers = 200, 3
	tokens := make(chan struct{}, helpers)
	var ran, running, most atomic.Int64
	js := make([]func(), jobs)
	for i := range js {
		js[i] = func() {
			n := running.Add(1)
			for {
				m := most.Load()
				if n <= m || most.CompareAndSwap(m, n) {
					break
				}
			}
			ran.Add(1)
			running.Add(-1)
		}
	}
	Run(tokens, js)
	if ran.Load() != jobs {
		t.Errorf("%d jobs ran, want %d", ran.Load(), jobs)
	}
	if most.Load() > helpers+1 {
		t.Errorf("%d jobs ran at once, want at most %d", most.Load(), helpers+1)
	}
	if len(tokens) != 0 {
		t.Errorf("%d tokens still taken after Run", len(tokens))
	}
	Run(tokens, nil) // nothing to do
}
