// Package benchkit holds the measurements every backend's benchmarks share,
// so that figures from different packages mean the same thing.
//
// Figures are reported through testing.B.ReportMetric and compared as
// ratios against a baseline measured in the same run (the raw server
// primitives), never against fixed numbers: a shared machine is noisy.
package benchkit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/locker"
)

// Latencies collects durations and reports their quantiles.
type Latencies struct {
	d []time.Duration
}

// Add records one duration.
func (l *Latencies) Add(d time.Duration) { l.d = append(l.d, d) }

// Quantile returns the q-quantile (0 <= q <= 1) of what was recorded, or 0
// if nothing was.
func (l *Latencies) Quantile(q float64) time.Duration {
	if len(l.d) == 0 {
		return 0
	}
	s := slices.Clone(l.d)
	slices.Sort(s)
	i := int(q * float64(len(s)-1))
	return s[i]
}

// Report adds p50, p90 and p99 in microseconds to b's results.
func (l *Latencies) Report(b *testing.B) {
	for _, q := range []struct {
		q    float64
		name string
	}{{0.5, "p50-µs"}, {0.9, "p90-µs"}, {0.99, "p99-µs"}} {
		b.ReportMetric(float64(l.Quantile(q.q))/float64(time.Microsecond), q.name)
	}
}

// Loop runs op b.N times on one goroutine, timing each call, and reports
// ops/s and latency quantiles. op's error fails the benchmark.
func Loop(b *testing.B, op func(ctx context.Context, i int) error) {
	b.Helper()
	ctx := context.Background()
	var lat Latencies
	lat.d = make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if err := op(ctx, i); err != nil {
			b.Fatal(err)
		}
		lat.Add(time.Since(t0))
	}
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "ops/s")
	lat.Report(b)
}

// AcquireRelease runs uncontended Acquire+Release of one key on l, b.N
// times, through Loop.
func AcquireRelease(b *testing.B, l locker.Locker, key string, opts ...locker.Option) {
	b.Helper()
	op := AcquireReleaseOp(l, key, opts...)
	Loop(b, func(ctx context.Context, _ int) error { return op(ctx) })
}

// A Design is one way of doing the operation a benchmark compares.
type Design struct {
	Name string
	Op   func(ctx context.Context) error
}

// Interleave compares designs of one operation in one run: it runs each
// design b.N times, taking turns one operation at a time in an order
// shuffled every round, so that whatever else the machine does meanwhile
// (a shared, noisy machine; a server compacting or syncing) slows every
// design alike. Run one design after the other instead and the ratios
// between them move by 10% from run to run on a two-core machine.
//
// Reported for each design: "<name>-ops/s" and "<name>-p50-µs" /
// "<name>-p99-µs"; and for each design, "<name>/<other>" for every design
// listed before it: its throughput relative to that one (1 is as fast,
// above 1 faster). List the baselines first. Each design runs a few
// operations before the timing starts.
func Interleave(b *testing.B, designs ...Design) {
	b.Helper()
	ctx := context.Background()
	for _, d := range designs {
		for range 5 {
			if err := d.Op(ctx); err != nil {
				b.Fatalf("%s (warm-up): %v", d.Name, err)
			}
		}
	}
	lat := make([]Latencies, len(designs))
	for i := range lat {
		lat[i].d = make([]time.Duration, 0, b.N)
	}
	total := takeTurns(b, len(designs), func(i int) string { return designs[i].Name }, func(i int) error {
		t0 := time.Now()
		err := designs[i].Op(ctx)
		lat[i].Add(time.Since(t0))
		return err
	})
	names := make([]string, len(designs))
	rate := make([]float64, len(designs))
	for i, d := range designs {
		names[i], rate[i] = d.Name, float64(b.N)/total[i].Seconds()
	}
	reportDesigns(b, names, "ops/s", rate, lat)
}

// A ClientsDesign is one way of doing the operation a benchmark compares,
// by many clients at once: Ops[i] is client i's, with connections (and a
// Locker) of its own, as separate processes would have.
type ClientsDesign struct {
	Name string
	Ops  []func(ctx context.Context) error
}

// InterleaveClients compares designs of one operation done by many
// clients at once, each on a key of its own: in each of b.N rounds, in an
// order shuffled every round, each design's clients all run perRound
// operations concurrently, and the round's wall time is the design's.
// Taking turns by rounds, as Interleave does by operations, makes the
// machine's noise hit every design alike. Reported as Interleave does:
// "<name>-ops/s" over all clients, latency quantiles of single
// operations, and "<name>/<other>" ratios against the designs listed
// before it. Every client runs a few operations before the timing starts.
func InterleaveClients(b *testing.B, perRound int, designs ...ClientsDesign) {
	b.Helper()
	ctx := context.Background()
	run := func(d ClientsDesign, n int, lat *Latencies) error {
		var (
			wg    sync.WaitGroup
			mu    sync.Mutex
			first error
		)
		for _, op := range d.Ops {
			wg.Go(func() {
				ds := make([]time.Duration, 0, n)
				var err error
				for range n {
					t0 := time.Now()
					if err = op(ctx); err != nil {
						break
					}
					ds = append(ds, time.Since(t0))
				}
				mu.Lock()
				defer mu.Unlock()
				if lat != nil {
					lat.d = append(lat.d, ds...)
				}
				if first == nil && err != nil {
					first = err
				}
			})
		}
		wg.Wait()
		return first
	}
	for _, d := range designs {
		if err := run(d, 3, nil); err != nil {
			b.Fatalf("%s (warm-up): %v", d.Name, err)
		}
	}
	lat := make([]Latencies, len(designs))
	total := takeTurns(b, len(designs), func(i int) string { return designs[i].Name }, func(i int) error {
		return run(designs[i], perRound, &lat[i])
	})
	names := make([]string, len(designs))
	rate := make([]float64, len(designs))
	for i, d := range designs {
		ops := b.N * perRound * len(d.Ops)
		names[i], rate[i] = d.Name, float64(ops)/total[i].Seconds()
	}
	reportDesigns(b, names, "ops/s", rate, lat)
}

// takeTurns runs b.N rounds, each calling do once for each of n designs
// in an order shuffled every round, timed from here, and returns the time
// each design took in all. An error fails the benchmark, naming the design.
func takeTurns(b *testing.B, n int, name func(int) string, do func(i int) error) []time.Duration {
	b.Helper()
	total := make([]time.Duration, n)
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, i := range order {
			t0 := time.Now()
			if err := do(i); err != nil {
				b.Fatalf("%s: %v", name(i), err)
			}
			total[i] += time.Since(t0)
		}
	}
	b.StopTimer()
	return total
}

// reportDesigns reports each design's rate ("<name>-<unit>") and latency
// quantiles, and for each design its rate relative to every design listed
// before it ("<name>/<other>").
func reportDesigns(b *testing.B, names []string, unit string, rate []float64, lat []Latencies) {
	for i, name := range names {
		b.ReportMetric(rate[i], name+"-"+unit)
		b.ReportMetric(float64(lat[i].Quantile(0.5))/float64(time.Microsecond), name+"-p50-µs")
		b.ReportMetric(float64(lat[i].Quantile(0.99))/float64(time.Microsecond), name+"-p99-µs")
		for j := range i {
			b.ReportMetric(rate[i]/rate[j], name+"/"+names[j])
		}
	}
}

// AcquireReleaseOp is the operation of AcquireRelease as a Design's Op.
func AcquireReleaseOp(l locker.Locker, key string, opts ...locker.Option) func(context.Context) error {
	return func(ctx context.Context) error {
		lk, err := l.Acquire(ctx, key, opts...)
		if err != nil {
			return err
		}
		return lk.Release(ctx)
	}
}

// AcquireFenceReleaseOp is AcquireReleaseOp by a holder that asks for
// its fence, as a writer to a fenced resource does: Acquire, Fence (which
// must return one), Release.
func AcquireFenceReleaseOp(l locker.Locker, key string, opts ...locker.Option) func(context.Context) error {
	return func(ctx context.Context) error {
		lk, err := l.Acquire(ctx, key, opts...)
		if err != nil {
			return err
		}
		if _, ok := lk.Fence(); !ok {
			lk.Release(ctx)
			return errors.New("Fence() = false")
		}
		return lk.Release(ctx)
	}
}

// Handoff measures how long a lock takes to pass from one holder to the
// next: waiters goroutines, each with its own Locker from newLocker (as
// separate processes would have), contend for one key. Each holder notes
// the time and releases; the next Acquire to return measures from that
// note. b.N handoffs are measured in all.
//
// Reported: p50/p90/p99 of the handoff latency, handoffs/s, and fairness
// as the ratio of the most to the fewest acquisitions by one waiter (1 is
// perfectly fair; a waiter that never got the lock makes it +Inf and is
// reported as starved).
func Handoff(b *testing.B, waiters int, newLocker func() (locker.Locker, error), key string, opts ...locker.Option) {
	b.Helper()
	lockers, err := openLockers(waiters, newLocker)
	if err != nil {
		b.Fatal(err)
	}
	defer closeAll(lockers)
	b.ReportAllocs()
	b.ResetTimer()
	r := runHandoffs(lockers, key, b.N, opts)
	b.StopTimer()
	if r.err != nil {
		b.Fatal(r.err)
	}
	b.ReportMetric(float64(len(r.lat.d))/r.elapsed.Seconds(), "handoffs/s")
	r.lat.Report(b)
	lo, hi := slices.Min(r.counts), slices.Max(r.counts)
	if lo == 0 {
		b.ReportMetric(float64(waiters-countNonZero(r.counts)), "starved")
	} else {
		b.ReportMetric(float64(hi)/float64(lo), "max/min")
	}
}

// A HandoffDesign is one way of handing a lock over that
// HandoffInterleave compares: a Locker per waiter from NewLocker, and the
// options of every Acquire.
type HandoffDesign struct {
	Name      string
	NewLocker func() (locker.Locker, error)
	Opts      []locker.Option
}

// handoffChunk is how many handoffs one design runs in a turn of
// HandoffInterleave.
const handoffChunk = 50

// HandoffInterleave compares designs of a handoff between waiters on one
// key in one run, as Interleave does for single operations: the designs
// take turns, handoffChunk handoffs at a time in an order shuffled every
// round, until each has run b.N, so that the machine's noise slows every
// design alike.
//
// Reported for each design: "<name>-handoffs/s" and "<name>-p50-µs" /
// "<name>-p99-µs"; and "<name>/<other>" for every design listed before
// it: its handoffs/s relative to that one's.
func HandoffInterleave(b *testing.B, waiters int, key string, designs ...HandoffDesign) {
	b.Helper()
	lockers := make([][]locker.Locker, len(designs))
	for i, d := range designs {
		ls, err := openLockers(waiters, d.NewLocker)
		if err != nil {
			b.Fatalf("%s: %v", d.Name, err)
		}
		defer closeAll(ls)
		lockers[i] = ls
	}
	lat := make([]Latencies, len(designs))
	elapsed := make([]time.Duration, len(designs))
	done := make([]int, len(designs))
	order := make([]int, len(designs))
	for i := range order {
		order[i] = i
	}
	b.ReportAllocs()
	b.ResetTimer()
	for done[0] < b.N {
		n := min(handoffChunk, b.N-done[0])
		rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, i := range order {
			r := runHandoffs(lockers[i], key, n, designs[i].Opts)
			if r.err != nil {
				b.Fatalf("%s: %v", designs[i].Name, r.err)
			}
			lat[i].d = append(lat[i].d, r.lat.d...)
			elapsed[i] += r.elapsed
			done[i] += n
		}
	}
	b.StopTimer()
	names := make([]string, len(designs))
	rate := make([]float64, len(designs))
	for i, d := range designs {
		names[i], rate[i] = d.Name, float64(len(lat[i].d))/elapsed[i].Seconds()
	}
	reportDesigns(b, names, "handoffs/s", rate, lat)
}

func openLockers(n int, newLocker func() (locker.Locker, error)) ([]locker.Locker, error) {
	lockers := make([]locker.Locker, 0, n)
	for range n {
		l, err := newLocker()
		if err != nil {
			closeAll(lockers)
			return nil, err
		}
		lockers = append(lockers, l)
	}
	return lockers, nil
}

func closeAll(ls []locker.Locker) {
	for _, l := range ls {
		l.Close()
	}
}

// handoffs is the outcome of runHandoffs.
type handoffs struct {
	lat     Latencies
	elapsed time.Duration // from the start to the n-th handoff
	counts  []int         // acquisitions per waiter
	err     error
}

// runHandoffs has a goroutine per Locker acquire key, note the time and
// release it, over and over, until n handoffs were measured: an Acquire
// that returns after another waiter's release measures from its note.
func runHandoffs(lockers []locker.Locker, key string, n int, opts []locker.Option) handoffs {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	h := &handoffRun{ctx: ctx, cancel: cancel, key: key, opts: opts}
	h.r.counts = make([]int, len(lockers))
	h.r.lat.d = make([]time.Duration, 0, n)
	h.remaining.Store(int64(n))
	start := time.Now()
	var wg sync.WaitGroup
	for w, l := range lockers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.waiter(w, l)
		}()
	}
	wg.Wait()
	h.r.elapsed = h.end.Sub(start)
	return h.r
}

// handoffRun is one runHandoffs in progress.
type handoffRun struct {
	ctx    context.Context
	cancel context.CancelFunc // ends the run: after the n-th handoff, or on an error
	key    string
	opts   []locker.Option

	mu        sync.Mutex // guards r.lat and r.err
	r         handoffs
	end       time.Time    // the n-th handoff, written by the waiter that measured it
	released  atomic.Int64 // UnixNano of the last holder's release; 0: none yet
	remaining atomic.Int64 // handoffs still to measure
}

// waiter acquires and releases the key with l until the run ends.
func (h *handoffRun) waiter(w int, l locker.Locker) {
	for h.ctx.Err() == nil {
		lk, err := l.Acquire(h.ctx, h.key, h.opts...)
		if err != nil {
			if h.ctx.Err() == nil {
				h.fail(fmt.Errorf("waiter %d: %w", w, err))
			}
			return
		}
		last := h.measure(time.Now())
		h.r.counts[w]++
		h.released.Store(time.Now().UnixNano())
		// Not h.ctx: it is cancelled when the run ends.
		rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = lk.Release(rctx)
		rcancel()
		if err != nil {
			h.fail(fmt.Errorf("waiter %d: release: %w", w, err))
			return
		}
		if last {
			h.cancel() // stops everyone, waiters still blocked in Acquire included
		}
	}
}

// measure records the handoff to an Acquire that returned at now, if
// another holder released before, and reports whether it was the last.
func (h *handoffRun) measure(now time.Time) (last bool) {
	rel := h.released.Load()
	if rel == 0 {
		return false
	}
	h.mu.Lock()
	h.r.lat.Add(now.Sub(time.Unix(0, rel)))
	h.mu.Unlock()
	if h.remaining.Add(-1) != 0 {
		return false
	}
	h.end = now
	return true
}

func (h *handoffRun) fail(err error) {
	h.mu.Lock()
	if h.r.err == nil {
		h.r.err = err
	}
	h.mu.Unlock()
	h.cancel()
}

func countNonZero(c []int) int {
	n := 0
	for _, v := range c {
		if v != 0 {
			n++
		}
	}
	return n
}

// WaitersName names a sub-benchmark by its number of waiters.
func WaitersName(n int) string { return fmt.Sprintf("waiters=%d", n) }

// Warm acquires and releases one key on l before the timing starts, so
// that whatever a Locker opens on first use (a ZooKeeper session per TTL,
// an etcd lease) is open. It takes Open's or New's results as they come
// and closes l if the warm-up fails.
func Warm(l locker.Locker, err error) (locker.Locker, error) {
	if err != nil {
		return nil, err
	}
	lk, err := l.Acquire(context.Background(), "warm-up")
	if err == nil {
		err = lk.Release(context.Background())
	}
	if err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}
