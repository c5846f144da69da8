package locker

import (
	"container/heap"
	"context"
	"errors"
	"sync"
	"time"

	"github.com/distlock/locker/backend"
)

// watchdog refreshes every auto-refreshed lock of one Locker from a single
// goroutine: a heap ordered by when each lock is due. Locks due together
// go out as one batch (one round trip on drivers with RefreshBatch).
type watchdog struct {
	c     *client
	batch backend.BatchRefresher

	mu      sync.Mutex
	due     lockHeap
	running bool
	stopped bool
	// timer wakes the loop when the first lock falls due; armed is when
	// it is set to fire (zero: not set). schedule moves it earlier
	// itself, so queueing a lock costs no goroutine wake-up.
	timer  *time.Timer
	armed  time.Time
	ctx    context.Context // cancelled by stop; parent of every refresh
	cancel context.CancelFunc
	wg     sync.WaitGroup // the loop and its in-flight batches
}

// batchWindow: locks due within this long of the first are refreshed in
// the same batch, a little early, to share a round trip.
const batchWindow = 5 * time.Millisecond

func newWatchdog(c *client) *watchdog {
	w := &watchdog{c: c, timer: time.NewTimer(time.Hour)}
	w.timer.Stop()
	w.ctx, w.cancel = context.WithCancel(context.Background())
	w.batch, _ = c.d.(backend.BatchRefresher)
	return w
}

// schedule (re)queues lk to be refreshed at due.
func (w *watchdog) schedule(lk *lock, due time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	lk.due = due
	if lk.heapIndex >= 0 {
		heap.Fix(&w.due, lk.heapIndex)
	} else {
		heap.Push(&w.due, lk)
	}
	if !w.running {
		w.running = true
		w.wg.Add(1)
		go w.loop()
	}
	if w.armed.IsZero() || due.Before(w.armed) {
		w.arm(due)
	}
}

// arm sets the timer to fire at t; w.mu is held.
func (w *watchdog) arm(t time.Time) {
	w.armed = t
	w.timer.Reset(max(time.Until(t), 0))
}

func (w *watchdog) remove(lk *lock) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if lk.heapIndex >= 0 {
		heap.Remove(&w.due, lk.heapIndex)
	}
}

// stop ends the loop and waits for in-flight refreshes.
func (w *watchdog) stop() {
	w.mu.Lock()
	if !w.stopped {
		w.stopped = true
		w.cancel()
	}
	w.mu.Unlock()
	w.wg.Wait()
}

func (w *watchdog) loop() {
	defer w.wg.Done()
	defer w.timer.Stop()
	for {
		w.mu.Lock()
		now := time.Now()
		var batch []*lock
		for len(w.due) > 0 && !w.due[0].due.After(now.Add(batchWindow)) {
			batch = append(batch, heap.Pop(&w.due).(*lock))
		}
		if len(w.due) > 0 {
			w.arm(w.due[0].due)
		} else {
			w.armed = time.Time{}
		}
		if len(batch) > 0 {
			w.wg.Add(1)
		}
		w.mu.Unlock()

		if len(batch) > 0 {
			go func() {
				defer w.wg.Done()
				w.refresh(batch)
			}()
		}
		select {
		case <-w.ctx.Done():
			return
		case <-w.timer.C:
		}
	}
}

// refresh sends one refresh for each lock in batch and reschedules those
// still held: at a third of the TTL after success, sooner after a
// transient failure, until the local deadline closes Lost.
func (w *watchdog) refresh(due []*lock) {
	batch := due[:0]
	var ttls []time.Duration
	var helds []backend.Held
	var earliest time.Time
	for _, lk := range due {
		lk.mu.Lock()
		if lk.state == stateHeld { // not released or lost since it was queued
			batch = append(batch, lk)
			ttls = append(ttls, lk.ttl)
			helds = append(helds, lk.held)
			if earliest.IsZero() || lk.deadline.Before(earliest) {
				earliest = lk.deadline
			}
		}
		lk.mu.Unlock()
	}
	if len(batch) == 0 {
		return
	}
	// No refresh is useful after the earliest deadline: Lost is closed then.
	ctx, cancel := context.WithDeadline(w.ctx, earliest)
	defer cancel()

	start := time.Now()
	errs := make([]error, len(batch))
	switch {
	case w.batch != nil && len(batch) > 1:
		copy(errs, w.batch.RefreshBatch(ctx, helds, ttls))
	case len(batch) == 1:
		errs[0] = helds[0].Refresh(ctx, ttls[0])
	default:
		var wg sync.WaitGroup
		for i := range batch {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = helds[i].Refresh(ctx, ttls[i])
			}()
		}
		wg.Wait()
	}
	for i, lk := range batch {
		err := lk.refreshed(start, ttls[i], errs[i])
		switch {
		case err == nil:
			w.schedule(lk, start.Add(ttls[i]/3))
		case errors.Is(errs[i], ErrNotHeld):
			w.c.log.Warn("locker: lock lost: the server no longer has it", "key", lk.key, "err", errs[i])
		case errors.Is(err, ErrNotHeld):
			// Released or expired locally while the refresh was in flight.
		default:
			lk.mu.Lock()
			left := time.Until(lk.deadline)
			held := lk.state == stateHeld
			lk.mu.Unlock()
			if held {
				retry := min(ttls[i]/10, left/3)
				w.c.log.Warn("locker: refresh failed, retrying", "key", lk.key, "in", retry, "validity_left", left, "err", err)
				w.schedule(lk, time.Now().Add(max(retry, minPoll)))
			}
		}
	}
}

type lockHeap []*lock

func (h lockHeap) Len() int           { return len(h) }
func (h lockHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h lockHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIndex = i
	h[j].heapIndex = j
}
func (h *lockHeap) Push(x any) {
	lk := x.(*lock)
	lk.heapIndex = len(*h)
	*h = append(*h, lk)
}
func (h *lockHeap) Pop() any {
	old := *h
	lk := old[len(old)-1]
	old[len(old)-1] = nil
	lk.heapIndex = -1
	*h = old[:len(old)-1]
	return lk
}
