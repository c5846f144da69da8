package bench

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/distlock/locker/internal/heldtest"
)

// Uncontended: one client per design takes and releases its own key,
// back to back, the designs taking turns one operation at a time.
func (r *Runner) Uncontended(ctx context.Context, designs []Design) {
	r.progress("uncontended: one client, Acquire+Release back to back")
	os := r.open(ctx, ScenarioUncontended, designs, 1)
	defer r.closeAll(os)
	ts := turns(ctx, os, r.Settings.Duration, func(ctx context.Context, o opened, _ int) error {
		return lockUnlock(ctx, o.clients[0], r.key("uncontended", o.d.Backend, o.d.Name), r.TTL)
	})
	for i, o := range os {
		r.results = append(r.results, ts[i].result(ScenarioUncontended, o.d, nil, r.Settings.RTT, "ops"))
	}
}

// FreshKeys: as Uncontended, but every operation on a key never locked
// before, as with a lock per order id.
func (r *Runner) FreshKeys(ctx context.Context, designs []Design) {
	r.progress("fresh-keys: every acquisition on a new key")
	os := r.open(ctx, ScenarioFreshKeys, designs, 1)
	defer r.closeAll(os)
	ts := turns(ctx, os, r.Settings.Duration, func(ctx context.Context, o opened, i int) error {
		return lockUnlock(ctx, o.clients[0], r.key("fresh", o.d.Backend, o.d.Name, i), r.TTL)
	})
	for i, o := range os {
		r.results = append(r.results, ts[i].result(ScenarioFreshKeys, o.d, nil, r.Settings.RTT, "ops"))
	}
}

// Throughput: n clients per design, each taking and releasing one of n
// distinct keys (client i on key i) as fast as it can, for each n in
// Settings.Clients.
func (r *Runner) Throughput(ctx context.Context, designs []Design) {
	for _, n := range r.Settings.Clients {
		r.progress(fmt.Sprintf("throughput: %d clients on %d keys", n, n))
		os := r.open(ctx, ScenarioThroughput, designs, n)
		ts := inSlices(ctx, os, r.Settings.Duration, func(ctx context.Context, _ int, o opened, t *tally, d time.Duration) {
			sctx, cancel := context.WithTimeout(ctx, d)
			defer cancel()
			var mu sync.Mutex
			concurrently(n, func(i int) {
				local := newTally()
				key := r.key("throughput", o.d.Backend, o.d.Name, n, i)
				// The slice ends between operations, not during one: a raw
				// SET whose reply is cut off would leave its key held for
				// a TTL, failing every later try of the design.
				for sctx.Err() == nil {
					t0 := time.Now()
					err := lockUnlock(ctx, o.clients[i], key, r.TTL)
					local.record(time.Since(t0), err)
				}
				mu.Lock()
				t.ops, t.errs = t.ops+local.ops, t.errs+local.errs
				t.lat.merge(local.lat)
				if t.first == nil {
					t.first = local.first
				}
				mu.Unlock()
			})
		})
		for i, o := range os {
			r.results = append(r.results, ts[i].result(ScenarioThroughput, o.d, map[string]int{"clients": n, "keys": n}, r.Settings.RTT, "ops"))
		}
		r.closeAll(os)
	}
}

// HotKey: w clients per design wait for one key; each takes it, notes the
// time, and releases it. The handoff is the time from that note to the
// next holder's acquisition. For each w in Settings.Waiters; designs
// that do not wait are left out.
func (r *Runner) HotKey(ctx context.Context, designs []Design) {
	var waiting []Design
	for _, d := range designs {
		if d.Waits {
			waiting = append(waiting, d)
		}
	}
	for _, w := range r.Settings.Waiters {
		r.progress(fmt.Sprintf("hot-key: %d waiters on one key", w))
		os := r.open(ctx, ScenarioHotKey, waiting, w)
		fair := make([]*handoffs, len(os))
		ts := inSlices(ctx, os, r.Settings.Duration, func(ctx context.Context, i int, o opened, t *tally, d time.Duration) {
			if fair[i] == nil {
				fair[i] = &handoffs{counts: make([]int64, w)}
			}
			fair[i].run(ctx, o, t, d, r.key("hot", o.d.Backend, o.d.Name, w), r.TTL)
		})
		for i, o := range os {
			res := ts[i].result(ScenarioHotKey, o.d, map[string]int{"waiters": w}, r.Settings.RTT, "handoffs")
			res.Fairness = fair[i].fairness()
			r.results = append(r.results, res)
		}
		r.closeAll(os)
	}
}

// handoffs measures a hot key across the slices of one design.
type handoffs struct {
	counts  []int64       // acquisitions per waiter
	longest time.Duration // the longest wait for one acquisition
}

func (h *handoffs) run(ctx context.Context, o opened, t *tally, d time.Duration, key string, ttl time.Duration) {
	sctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var mu sync.Mutex
	var released time.Time // when the last holder noted its release; zero before the first
	concurrently(len(o.clients), func(i int) {
		for sctx.Err() == nil {
			asked := time.Now()
			unlock, err := o.clients[i].Lock(sctx, key, ttl)
			if isStop(sctx, err) {
				return
			}
			now := time.Now()
			mu.Lock()
			h.longest = max(h.longest, now.Sub(asked))
			if err != nil {
				t.record(0, err)
				mu.Unlock()
				time.Sleep(10 * time.Millisecond) // a failing backend is not to be spun on
				continue
			}
			if !released.IsZero() {
				t.record(now.Sub(released), nil)
			}
			h.counts[i]++
			released = time.Now()
			mu.Unlock()
			if err := unlock(context.WithoutCancel(sctx)); err != nil {
				mu.Lock()
				t.record(0, err)
				mu.Unlock()
			}
		}
	})
}

func (h *handoffs) fairness() *Fairness {
	if h == nil {
		return nil
	}
	f := &Fairness{LongestWait: h.longest}
	lo, hi := int64(-1), int64(0)
	for _, c := range h.counts {
		if c == 0 {
			f.Starved++
		}
		if lo < 0 || c < lo {
			lo = c
		}
		hi = max(hi, c)
	}
	switch {
	case lo > 0:
		f.MaxMin = float64(hi) / float64(lo)
	case hi > 0:
		f.MaxMin = -1 // a waiter starved: infinite, which JSON cannot carry
	}
	return f
}

// Fanout: Redlock on each node count, the Locker against the raw
// parallel fan-out, taking turns as Uncontended does. sets maps a node
// count to that many nodes' designs.
func (r *Runner) Fanout(ctx context.Context, sets map[int][]Design) {
	for _, n := range slices.Sorted(maps.Keys(sets)) {
		r.progress(fmt.Sprintf("fanout: Redlock on %d nodes", n))
		os := r.open(ctx, ScenarioFanout, sets[n], 1)
		ts := turns(ctx, os, r.Settings.Duration, func(ctx context.Context, o opened, _ int) error {
			return lockUnlock(ctx, o.clients[0], r.key("fanout", n, o.d.Name), r.TTL)
		})
		for i, o := range os {
			r.results = append(r.results, ts[i].result(ScenarioFanout, o.d, map[string]int{"nodes": n}, r.Settings.RTT, "ops"))
		}
		r.closeAll(os)
	}
}

// HeldLocks: one client of each library design takes Settings.HeldLocks
// distinct keys with a TTL of Settings.HeldTTL (default 3 s) and holds
// them all for two of it, the watchdog refreshing them: how many were lost meanwhile, the heap
// and goroutines they cost the client, and how fast they were taken.
func (r *Runner) HeldLocks(ctx context.Context, designs []Design) {
	n := r.Settings.HeldLocks
	for _, d := range designs {
		if d.Kind != KindLocker {
			continue
		}
		r.progress(fmt.Sprintf("held-locks: %d locks held at once on %s, TTL %v, for %v", n, d.Backend, r.heldTTL(), 2*r.heldTTL()))
		res, err := r.heldLocks(ctx, d, n)
		if err != nil {
			r.notef("held-locks: %s %s: %v", d.Backend, d.Name, err)
		}
		r.results = append(r.results, res)
	}
}

// heldTTL is the TTL of the held-locks scenario: short, so that holding
// the locks for two of it spans several refresh periods, where the
// watchdog's cost per lock shows.
func (r *Runner) heldTTL() time.Duration {
	if r.Settings.HeldTTL > 0 {
		return r.Settings.HeldTTL
	}
	return 3 * time.Second
}

func (r *Runner) heldLocks(ctx context.Context, d Design, n int) (Result, error) {
	params := map[string]int{"locks": n}
	res := Result{Scenario: ScenarioHeldLocks, Backend: d.Backend, Design: d.Name, Kind: d.Kind, Params: params, RTT: r.Settings.RTT, Unit: "ops"}
	c, err := d.Open(ctx)
	if err != nil {
		return res, err
	}
	defer func() {
		r.conns.Sample([]int{0})
		c.Close()
	}()
	lc, ok := c.(lockerClient)
	if !ok {
		return res, fmt.Errorf("%s is not a Locker", d.Name)
	}
	// The TTL asked for, or the backend's smallest (etcd leases are whole
	// seconds, at least two). The library's own held-lock benchmark does
	// the work.
	ttl := max(r.heldTTL(), lc.l.Capabilities().MinTTL)
	h, err := heldtest.Run(ctx, heldtest.Config{Locker: lc.l, N: n, TTL: ttl, Hold: 2 * ttl, Prefix: r.key("held", d.Backend) + "/"})
	res.Elapsed = h.Acquiring
	if h.Acquiring > 0 {
		res.Ops, res.PerSec = int64(n), float64(n)/h.Acquiring.Seconds()
	}
	res.Memory = &Memory{Locks: n, TTL: ttl, Held: h.Held, Lost: h.Lost, Goroutines: h.Goroutines,
		BytesPerLock: max(h.HeapPerLock, 0), HeapBytes: uint64(max(h.HeapPerLock, 0) * float64(n)), AcquireSecond: res.PerSec}
	if err != nil {
		res.Errors, res.FirstError = 1, err.Error()
	}
	return res, err
}
