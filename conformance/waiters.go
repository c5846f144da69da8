package conformance

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/distlock/locker"
)

// The cases about clients waiting in Acquire while another holds the key.

// fifoWaiters is how many clients queue behind the holder in fifo-order.
const fifoWaiters = 4

// fifoTrials is how many times fifo-order queues its waiters, each time
// further apart, before an order other than the queueing order counts as
// a failure.
const fifoTrials = 3

// caseFIFO queues waiters one after another behind a holder and checks
// that the release hands the key on in that order.
//
// No portable signal says that a waiter has queued: a waiter is in the
// queue once its request has reached the servers, which Acquire does not
// report. So the waiters start a gap apart, each once the previous one's
// Acquire has been called, the gap many times what a round trip to the
// servers took when measured just before (and at least 50ms). An order
// other than the queueing order can then still come from a waiter whose
// request was held up longer than the gap (a stalled process or server),
// so it is run again, the gap four times longer each time, and fails only
// if the order is wrong every time: with the defaults, a correct backend
// would need requests held up for more than 50ms, 200ms and 800ms in
// three runs in a row, each time in the one way that reverses the order.
// A backend that does not hand off in order fails every run.
func caseFIFO(t *T) {
	if !t.Capabilities().FIFO {
		t.Skipf("the backend does not claim FIFO hand-off (Capabilities().FIFO is false)")
	}
	holder := t.Locker()
	waiters := make([]locker.Locker, fifoWaiters)
	for i := range waiters {
		waiters[i] = t.Locker()
	}
	gap := max(50*time.Millisecond, 10*slowestRoundTrip(t, waiters))
	var orders, gaps []string
	for run := range fifoTrials {
		order := fifoRun(t, holder, waiters, t.Key(fmt.Sprintf("k%d", run)), gap)
		if slices.IsSorted(order) {
			return
		}
		orders = append(orders, fmt.Sprint(plusOne(order)))
		gaps = append(gaps, gap.String())
		gap *= 4
	}
	t.Errorf("waiters queued in the order 1 to %d got the key in the orders %s (queued %s apart, in %d runs)",
		fifoWaiters, strings.Join(orders, ", "), strings.Join(gaps, ", "), fifoTrials)
}

// plusOne numbers the waiters of an order from 1.
func plusOne(o []int) []int {
	r := make([]int, len(o))
	for i, v := range o {
		r[i] = v + 1
	}
	return r
}

// slowestRoundTrip returns the longest an uncontended TryAcquire and
// Release took on any of ls.
func slowestRoundTrip(t *T, ls []locker.Locker) time.Duration {
	var slowest time.Duration
	for i, l := range ls {
		start := time.Now()
		t.Release(t.TryAcquire(l, t.Key(fmt.Sprintf("rtt%d", i))))
		slowest = max(slowest, time.Since(start))
	}
	return slowest
}

// fifoRun has holder take key, queues waiters behind it gap apart in
// their order, releases, and returns the order (indexes into waiters) in
// which they got the key, each releasing it at once.
func fifoRun(t *T, holder locker.Locker, waiters []locker.Locker, key string, gap time.Duration) []int {
	lk := t.Acquire(holder, key, locker.WithTTL(t.LongTTL()))
	ctx, cancel := context.WithTimeout(t.Context(), time.Duration(len(waiters)+1)*gap+t.LongTTL()/2)
	defer cancel()
	var (
		mu       sync.Mutex
		order    []int
		released bool
		wg       sync.WaitGroup
	)
	for i, w := range waiters {
		calling := make(chan struct{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			close(calling)
			lkW, err := w.Acquire(ctx, key, locker.WithTTL(t.LongTTL()))
			if err != nil {
				t.Errorf("waiter %d: Acquire: %v", i+1, err)
				return
			}
			mu.Lock()
			if !released {
				t.Errorf("waiter %d got the key while the holder still held it", i+1)
			}
			order = append(order, i)
			mu.Unlock()
			if err := lkW.Release(t.Context()); err != nil {
				t.Errorf("waiter %d: Release: %v", i+1, err)
			}
		}()
		<-calling
		t.ClosedWithin(ctx.Done(), gap)
	}
	mu.Lock()
	released = true
	mu.Unlock()
	err := lk.Release(t.Context())
	if err != nil {
		t.Errorf("the holder's Release: %v", err)
		cancel()
	}
	wg.Wait()
	return order
}

// handoffRuns is how many times crashed-holder-handoff tries before it
// gives up on a machine too loaded to keep a lock alive for half a TTL.
const handoffRuns = 3

func caseCrashedHolderHandoff(t *T) {
	for i := range handoffRuns {
		if crashedHolderHandoff(t, t.Key(fmt.Sprintf("k%d", i))) {
			return
		}
	}
	t.Errorf("in %d runs out of %d the holder's validity ran out before it was cut off (the process stalled for a whole TTL each time)", handoffRuns, handoffRuns)
}

// crashedHolderHandoff has a crashable client hold key, another wait for
// it, cuts the holder off, and checks that the waiter gets the key in
// time. It reports false when the run could not check it: the waiter got
// the key before the crash, and rightly, the holder's validity having run
// out on its own.
func crashedHolderHandoff(t *T, key string) bool {
	a := t.CrashableClient()
	b := t.Locker()
	lk := t.Acquire(a.Locker, key, locker.WithTTL(t.TTL())) // auto-refresh on: only the crash ends it
	type result struct {
		lk  locker.Lock
		err error
		at  time.Time
	}
	got := make(chan result, 1)
	bound := t.ExpiryBound(t.TTL())
	ctx, cancel := context.WithTimeout(t.Context(), t.TTL()+bound+t.LongTTL())
	defer cancel()
	go func() {
		lkB, err := b.Acquire(ctx, key, locker.WithTTL(t.LongTTL()))
		got <- result{lkB, err, time.Now()}
	}()
	// Let B start waiting; if it has not yet, it must get the key all the same.
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("the waiting Acquire failed before its holder was cut off: %v", r.err)
		}
		defer r.lk.Release(t.Context())
		if lk.Until().Before(r.at) {
			return false
		}
		t.Fatalf("the waiting Acquire got the key while its live holder's lock was still valid: two holders")
	case <-time.After(t.TTL() / 2):
	}
	a.Crash()
	crashed := time.Now()
	var r result
	select {
	case r = <-got:
	case <-time.After(bound):
		t.Fatalf("the waiting Acquire did not get the key within %v of its holder being cut off (TTL %v + ExpirySlack %v + Slack %v)",
			bound, t.TTL(), t.Capabilities().ExpirySlack, t.s.h.Slack)
	}
	if r.err != nil {
		t.Fatalf("the waiting Acquire failed after its holder was cut off: %v", r.err)
	}
	if !t.ClosedWithin(lk.Lost(), time.Until(crashed.Add(bound))) {
		t.Errorf("the cut-off holder's Lost() stayed open %v after it was cut off (TTL %v)", time.Since(crashed), t.TTL())
	}
	t.Release(r.lk)
	return true
}
