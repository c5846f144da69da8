// Package benchkit holds the measurements every backend's benchmarks share,
// so that figures from different packages mean the same thing.
//
// Figures are reported through testing.B.ReportMetric and compared as
// ratios against a baseline measured in the same run (the raw server
// primitives), never against fixed numbers: a shared machine is noisy.
package benchkit

import (
	"context"
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
	total := make([]time.Duration, len(designs))
	lat := make([]Latencies, len(designs))
	for i := range lat {
		lat[i].d = make([]time.Duration, 0, b.N)
	}
	order := make([]int, len(designs))
	for i := range order {
		order[i] = i
	}
	b.ReportAllocs()
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, i := range order {
			t0 := time.Now()
			if err := designs[i].Op(ctx); err != nil {
				b.Fatalf("%s: %v", designs[i].Name, err)
			}
			d := time.Since(t0)
			total[i] += d
			lat[i].Add(d)
		}
	}
	b.StopTimer()
	for i, d := range designs {
		b.ReportMetric(float64(b.N)/total[i].Seconds(), d.Name+"-ops/s")
		b.ReportMetric(float64(lat[i].Quantile(0.5))/float64(time.Microsecond), d.Name+"-p50-µs")
		b.ReportMetric(float64(lat[i].Quantile(0.99))/float64(time.Microsecond), d.Name+"-p99-µs")
		for j := range i {
			b.ReportMetric(total[j].Seconds()/total[i].Seconds(), d.Name+"/"+designs[j].Name)
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
	lockers := make([]locker.Locker, waiters)
	for i := range lockers {
		l, err := newLocker()
		if err != nil {
			b.Fatal(err)
		}
		lockers[i] = l
	}
	defer func() {
		for _, l := range lockers {
			l.Close()
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var (
		mu        sync.Mutex
		lat       Latencies
		released  atomic.Int64 // UnixNano of the last holder's release; 0: none yet
		remaining atomic.Int64 // handoffs still to measure
		counts    = make([]int, waiters)
		firstErr  error
		wg        sync.WaitGroup
	)
	remaining.Store(int64(b.N))
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
		cancel()
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	var end time.Time
	for w := range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				lk, err := lockers[w].Acquire(ctx, key, opts...)
				if err != nil {
					if ctx.Err() == nil {
						fail(fmt.Errorf("waiter %d: %w", w, err))
					}
					return
				}
				now := time.Now()
				last := false
				if r := released.Load(); r != 0 {
					mu.Lock()
					lat.Add(now.Sub(time.Unix(0, r)))
					mu.Unlock()
					if remaining.Add(-1) == 0 {
						// The b.N-th handoff: stop everyone, waiters
						// still blocked in Acquire included.
						end = now
						last = true
					}
				}
				counts[w]++
				released.Store(time.Now().UnixNano())
				// Not ctx: it is cancelled when the run ends.
				rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
				err = lk.Release(rctx)
				rcancel()
				if err != nil {
					fail(fmt.Errorf("waiter %d: release: %w", w, err))
					return
				}
				if last {
					cancel()
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	elapsed := end.Sub(start)
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	b.ReportMetric(float64(len(lat.d))/elapsed.Seconds(), "handoffs/s")
	lat.Report(b)
	lo, hi := slices.Min(counts), slices.Max(counts)
	if lo == 0 {
		b.ReportMetric(float64(waiters-countNonZero(counts)), "starved")
	} else {
		b.ReportMetric(float64(hi)/float64(lo), "max/min")
	}
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
