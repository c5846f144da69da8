package locker

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/distlock/locker/backend"
	"github.com/distlock/locker/internal/workpool"
)

// watchdog keeps the timetable of one Locker's locks, from a single
// goroutine and timer: when each auto-refreshed lock is due for a refresh,
// and when each lock's validity runs out. Locks due together are refreshed
// in one batch (one round trip on drivers with RefreshBatch). One timer
// for all, rather than one per lock, because arming a timer can wake an
// idle thread of the runtime, a cost every acquisition would pay.
type watchdog struct {
	c       *client
	batch   backend.BatchRefresher
	helpers chan struct{} // workpool tokens of refreshes sent one by one

	mu      sync.Mutex
	heaps   [2]lockHeap // by refreshHeap and expiryHeap
	running bool
	stopped bool
	// timer wakes the loop when the first lock falls due; armed is when
	// it is set to fire (zero: not set). putLocked moves it earlier
	// itself, so queueing a lock costs no goroutine wake-up.
	timer  *time.Timer
	armed  time.Time
	ctx    context.Context // cancelled by stop; parent of every refresh
	cancel context.CancelFunc
	wg     sync.WaitGroup // the loop and its in-flight batches

	// Drivers' Expire calls waiting for one of at most maxExpirers
	// goroutines; under mu.
	expireQ  []backend.Expirer
	expirers int
}

// The watchdog's heaps, and a lock's place in each (lock.slots).
const (
	refreshHeap = iota // when an auto-refreshed lock is due for a refresh
	expiryHeap         // when a lock's validity runs out
)

// A slot is a lock's place in one of the watchdog's heaps.
type slot struct {
	at    time.Time
	index int // in the heap; -1 when not in it
	// window is the batch window of the lock's TTL when it was queued
	// (refresh heap only): set under lk.mu, which every caller of add and
	// schedule holds, and read under w.mu.
	window time.Duration
}

// noSlots is a lock's slots before the watchdog has it.
var noSlots = [2]slot{{index: -1}, {index: -1}}

// Locks due within a window of the first are refreshed in the same batch,
// a little early, to share a round trip: a thirtieth of the first's TTL
// (a refresh due at a third of the TTL goes out at most a tenth of the
// remaining two thirds early), within [minBatchWindow, maxBatchWindow].
// Locks taken one after another fall due spread over a whole refresh
// period; the window gathers them into a few batches per period, however
// many there are (10,000 locks at a 3s TTL: about ten per second).
const (
	minBatchWindow = 5 * time.Millisecond
	maxBatchWindow = time.Second
)

func batchWindow(ttl time.Duration) time.Duration {
	return min(max(ttl/30, minBatchWindow), maxBatchWindow)
}

// Bounds on the goroutines the watchdog runs besides its loop, so that
// they never grow with the number of locks: drivers without RefreshBatch
// get at most maxRefreshers refreshes in flight per batch, and at most
// maxExpirers Expire calls (a round trip each) run at once.
const (
	maxRefreshers = 64
	maxExpirers   = 16
)

func newWatchdog(c *client) *watchdog {
	w := &watchdog{c: c, timer: time.NewTimer(time.Hour)}
	w.timer.Stop()
	w.heaps[refreshHeap].kind = refreshHeap
	w.heaps[expiryHeap].kind = expiryHeap
	w.ctx, w.cancel = context.WithCancel(context.Background())
	w.batch, _ = c.d.(backend.BatchRefresher)
	w.helpers = make(chan struct{}, maxRefreshers-1)
	return w
}

// add queues a new lock: lk.expire runs at deadline, and unless due is
// zero, the first refresh at due. lk.mu is held, as for schedule.
func (w *watchdog) add(lk *lock, deadline, due time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.putLocked(expiryHeap, lk, deadline)
	if !due.IsZero() {
		w.putLocked(refreshHeap, lk, due)
	}
}

// schedule (re)queues lk to be refreshed at due.
func (w *watchdog) schedule(lk *lock, due time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.putLocked(refreshHeap, lk, due)
}

// expireAt moves lk's validity deadline (lk.expire runs then).
func (w *watchdog) expireAt(lk *lock, deadline time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.putLocked(expiryHeap, lk, deadline)
}

// forget takes lk out of the whole timetable.
func (w *watchdog) forget(lk *lock) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.takeLocked(refreshHeap, lk)
	w.takeLocked(expiryHeap, lk)
}

// putLocked (re)queues lk in one heap at at; w.mu is held.
func (w *watchdog) putLocked(kind int, lk *lock, at time.Time) {
	if w.stopped {
		return
	}
	s := &lk.slots[kind]
	s.at = at
	if kind == refreshHeap {
		s.window = batchWindow(lk.ttl)
	}
	if s.index >= 0 {
		heap.Fix(&w.heaps[kind], s.index)
	} else {
		heap.Push(&w.heaps[kind], lk)
	}
	if !w.running {
		w.running = true
		w.wg.Add(1)
		go w.loop()
	}
	if w.armed.IsZero() || at.Before(w.armed) {
		w.arm(at)
	}
}

func (w *watchdog) takeLocked(kind int, lk *lock) {
	if i := lk.slots[kind].index; i >= 0 {
		heap.Remove(&w.heaps[kind], i)
	}
}

// arm sets the timer to fire at t; w.mu is held.
func (w *watchdog) arm(t time.Time) {
	w.armed = t
	w.timer.Reset(max(time.Until(t), 0))
}

// stop ends the loop and waits for in-flight refreshes. Validity deadlines
// still pending are dropped: Close has released every lock by then, or
// found it lost.
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
		var batch, expired []*lock
		refresh, expiry := &w.heaps[refreshHeap], &w.heaps[expiryHeap]
		if refresh.Len() > 0 {
			until := now.Add(refresh.locks[0].slots[refreshHeap].window)
			for refresh.Len() > 0 && !refresh.first().After(until) {
				batch = append(batch, heap.Pop(refresh).(*lock))
			}
		}
		for expiry.Len() > 0 && !expiry.first().After(now) {
			expired = append(expired, heap.Pop(expiry).(*lock))
		}
		var next time.Time
		for i := range w.heaps {
			if h := &w.heaps[i]; h.Len() > 0 && (next.IsZero() || h.first().Before(next)) {
				next = h.first()
			}
		}
		if next.IsZero() {
			w.armed = time.Time{}
		} else {
			w.arm(next)
		}
		if len(batch) > 0 {
			w.wg.Add(1)
		}
		w.mu.Unlock()

		// Lost closes here for every expired lock at once; the drivers'
		// Expire calls, a round trip each, go to the bounded expirers.
		var expire []backend.Expirer
		for _, lk := range expired {
			if e := lk.expire(); e != nil {
				expire = append(expire, e)
			}
		}
		w.queueExpire(expire)
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

// refresh sends one refresh for each lock in due that is still held and
// not being refreshed already (a user's Refresh in flight schedules the
// next one when it ends). refreshed reschedules each: at a third of the
// TTL after success, sooner after a transient failure, until the local
// deadline closes Lost.
func (w *watchdog) refresh(due []*lock) {
	batch := due[:0]
	var ttls []time.Duration
	var helds []backend.Held
	var deadlines []time.Time
	var latest time.Time
	// Taken before the requests are sent: a start a little early only
	// makes the deadlines that follow from it earlier.
	start := time.Now()
	for _, lk := range due {
		lk.mu.Lock()
		if lk.tryTakeSlotLocked() {
			lk.sendingLocked(start, lk.ttl)
			batch = append(batch, lk)
			ttls = append(ttls, lk.ttl)
			helds = append(helds, lk.held)
			deadlines = append(deadlines, lk.deadline)
			latest = later(latest, lk.deadline)
		}
		lk.mu.Unlock()
	}
	if len(batch) == 0 {
		return
	}
	// No refresh is useful after the last deadline of the batch: every
	// Lost is closed by then. Not the first deadline: one lock near the end
	// of its validity (a retry after a failed refresh) would cut short the
	// refreshes of all the others, which would then fail and be retried
	// together, near their own ends, until a whole batch is lost. A lock
	// whose deadline passes while the batch is in flight is lost at its
	// deadline all the same (expire), and refreshed does not revive it.
	// Refreshes sent one by one each stop at their own lock's deadline.
	ctx, cancel := context.WithDeadline(w.ctx, latest)
	defer cancel()

	errs := w.send(ctx, helds, ttls, deadlines)
	for i, lk := range batch {
		err := lk.refreshed(start, ttls[i], errs[i])
		if t := w.c.tel; t != nil {
			t.refreshed(ctx, lk, start, err)
		}
		switch {
		case err == nil:
		case errors.Is(err, ErrNotHeld) && lk.endedLocally():
			// Released or expired here while the refresh was in flight:
			// that the server no longer has it is no news.
		case errors.Is(errs[i], ErrNotHeld):
			w.c.log.Warn("locker: lock lost: the server no longer has it", "key", lk.key, "err", errs[i])
		case errors.Is(err, ErrNotHeld):
			// Lost meanwhile on the backend's own report (a session or
			// lease that ended): Lost and Err say so.
		default:
			w.c.log.Warn("locker: refresh failed, retrying", "key", lk.key, "err", err)
		}
	}
}

// send refreshes helds with ttls: in one batch where the driver can, one
// by one on up to maxRefreshers goroutines (for all batches in flight)
// where it cannot. A refresh sent on its own is not sent, or stops, once
// its lock's deadline has passed: a lock already reported lost here must
// not be extended on the server, where it would block its key for another
// TTL.
func (w *watchdog) send(ctx context.Context, helds []backend.Held, ttls []time.Duration, deadlines []time.Time) []error {
	errs := make([]error, len(helds))
	if w.batch != nil && len(helds) > 1 {
		got := w.batch.RefreshBatch(ctx, helds, ttls)
		for i := copy(errs, got); i < len(errs); i++ {
			// A driver that answers for fewer locks than it was given
			// refreshed none of the rest as far as we know.
			errs[i] = fmt.Errorf("the driver's RefreshBatch returned %d outcomes for %d locks", len(got), len(helds))
		}
		return errs
	}
	if len(helds) == 1 { // the common case: no pool to set up
		errs[0] = helds[0].Refresh(ctx, ttls[0])
		return errs
	}
	jobs := make([]func(), len(helds))
	for i := range helds {
		jobs[i] = func() {
			jctx, cancel := context.WithDeadline(ctx, deadlines[i])
			defer cancel()
			if errs[i] = jctx.Err(); errs[i] == nil {
				errs[i] = helds[i].Refresh(jctx, ttls[i])
			}
		}
	}
	workpool.Run(w.helpers, jobs)
	return errs
}

// later returns the later of a and b; the zero time is earlier than any.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// queueExpire hands the drivers' Expire calls to the expirers, starting
// more of them, up to maxExpirers, while calls wait.
func (w *watchdog) queueExpire(es []backend.Expirer) {
	if len(es) == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.expireQ = append(w.expireQ, es...)
	for n := min(len(w.expireQ), maxExpirers-w.expirers); n > 0; n-- {
		w.expirers++
		go w.expirer()
	}
}

// expirer runs queued Expire calls until none is left.
func (w *watchdog) expirer() {
	for {
		w.mu.Lock()
		if len(w.expireQ) == 0 {
			w.expirers--
			w.expireQ = nil // let a large backlog's array go
			w.mu.Unlock()
			return
		}
		e := w.expireQ[0]
		w.expireQ[0] = nil
		w.expireQ = w.expireQ[1:]
		w.mu.Unlock()
		e.Expire()
	}
}

// lockHeap orders locks by their time in one of the watchdog's heaps.
type lockHeap struct {
	locks []*lock
	kind  int // refreshHeap or expiryHeap: which of a lock's slots
}

func (h *lockHeap) first() time.Time { return h.locks[0].slots[h.kind].at }

func (h *lockHeap) Len() int { return len(h.locks) }
func (h *lockHeap) Less(i, j int) bool {
	return h.locks[i].slots[h.kind].at.Before(h.locks[j].slots[h.kind].at)
}
func (h *lockHeap) Swap(i, j int) {
	h.locks[i], h.locks[j] = h.locks[j], h.locks[i]
	h.locks[i].slots[h.kind].index = i
	h.locks[j].slots[h.kind].index = j
}
func (h *lockHeap) Push(x any) {
	lk := x.(*lock)
	lk.slots[h.kind].index = len(h.locks)
	h.locks = append(h.locks, lk)
}
func (h *lockHeap) Pop() any {
	n := len(h.locks) - 1
	lk := h.locks[n]
	h.locks[n] = nil
	lk.slots[h.kind].index = -1
	h.locks = h.locks[:n]
	return lk
}
