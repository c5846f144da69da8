package gocronlocker_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/distlock/locker/contrib/gocronlocker"
)

// The schedule of TestLockerRunsEachTickOnce: a job every interval on
// three instances whose ticks are due skew apart, as if their clocks
// were off by that much.
const (
	interval = 100 * time.Millisecond
	minHold  = interval / 2
	ticks    = 30 // analysed; about 3 s
	// releaseAllowance is how long a release may take, after the
	// minimum hold, for a tick to count as clean: the next tick's
	// attempts must come later.
	releaseAllowance = 30 * time.Millisecond
)

var skews = []time.Duration{0, 10 * time.Millisecond, 20 * time.Millisecond}

// TestLockerRunsEachTickOnce runs three schedulers over one backend, a job
// every 100 ms on each, their ticks due 0, 10 and 20 ms apart (clock
// skew), and checks that every tick ran on exactly one instance.
//
// A tick's identity is its index k in the common schedule: instance i's
// tick k is due at t0 + skew[i] + k*interval. gocron tells the scheduler
// monitor the scheduled time of every run it starts, which must be on
// that grid exactly; a lock attempt is the tick whose due time is
// nearest.
//
// The guarantee holds under conditions of timing, so it is checked on the
// ticks where they held (clean ticks), as the attempts' times show: every
// instance tried the tick once; every attempt ended before the first
// acquisition's end plus the minimum hold (so no attempt may rightly
// take the key again); and every attempt started after the end of the
// latest acquisition of an earlier tick, plus the minimum hold, plus 30 ms
// for the release (so the key is free again). A loaded machine's late timer
// is not the adapter's fault. At least a quarter of the ticks must be
// clean.
//
// With no minimum hold (the control, on memory), the instance 10 ms
// behind takes the key released after the first's short run, and runs
// the tick again: the check can fail.
func TestLockerRunsEachTickOnce(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			r := runTicks(t, b, minHold)
			clean := r.cleanTicks()
			if len(clean) < ticks/4 {
				t.Fatalf("only %d of %d ticks were clean: the machine is too busy for this test; lateness: %s", len(clean), ticks, r.lateness())
			}
			for _, k := range clean {
				if got := r.runs[k]; len(got) != 1 {
					t.Errorf("tick %d ran on instances %v, want exactly one (attempts: %s)", k, got, r.describe(k))
				}
			}
			for k := range ticks {
				if got := r.runs[k]; len(got) != 1 && !slices.Contains(clean, k) {
					t.Logf("tick %d (not clean) ran on instances %v: %s; tick before: %s; tick after: %s", k, got, r.describe(k), r.describe(k-1), r.describe(k+1))
				}
			}
			t.Logf("%d of %d ticks clean; runs by instance: %v", len(clean), ticks, r.byInstance())
		})
	}
	t.Run("control-no-min-hold", func(t *testing.T) {
		t.Parallel()
		r := runTicks(t, backends[0], 0)
		twice := 0
		for _, k := range r.cleanTicks() {
			if len(r.runs[k]) > 1 {
				twice++
			}
		}
		if twice == 0 {
			t.Fatalf("without a minimum hold no clean tick ran twice; the test cannot tell a tick run twice (runs: %v)", r.runs)
		}
		t.Logf("without a minimum hold, %d clean ticks ran more than once", twice)
	})
}

// tickRun is what runTicks saw: every lock attempt and every run, by
// tick.
type tickRun struct {
	mu       sync.Mutex
	t0       time.Time
	attempts map[int][]attempt // by tick
	runs     map[int][]int     // by tick: the instances that ran it
	calls    []int             // job function calls, by instance
	errs     []string          // runs off the grid
	changed  chan struct{}
}

type attempt struct {
	inst       int
	start, end time.Time
	late       time.Duration // start - due time
	acquired   bool
}

// runTicks runs the schedulers with the given minimum hold until every
// instance has tried tick `ticks`, and returns what happened.
func runTicks(t *testing.T, b backend, hold time.Duration) *tickRun {
	ls, _ := openLockers(t, b, len(skews))
	r := &tickRun{attempts: map[int][]attempt{}, runs: map[int][]int{}, calls: make([]int, len(skews)), changed: make(chan struct{}, 1)}
	log := testLogger(t)
	scheds := make([]gocron.Scheduler, len(skews))
	for i, l := range ls {
		jl, err := gocronlocker.NewLocker(l, gocronlocker.WithMinHold(hold), gocronlocker.WithLogger(log))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { jl.Close() })
		s, err := gocron.NewScheduler(
			gocron.WithDistributedLocker(recordingLocker{r: r, inst: i, next: jl}),
			gocron.WithSchedulerMonitor(&monitor{r: r, inst: i}),
		)
		if err != nil {
			t.Fatal(err)
		}
		scheds[i] = s
		t.Cleanup(func() { s.Shutdown() }) // a second Shutdown only errors
	}
	// The first tick is due once every scheduler has started: far enough
	// ahead for a busy machine.
	r.t0 = time.Now().Add(500 * time.Millisecond).Truncate(interval)
	for i, s := range scheds {
		_, err := s.NewJob(gocron.DurationJob(interval),
			gocron.NewTask(func() { r.call(i) }),
			gocron.WithName("tick"),
			gocron.WithStartAt(gocron.WithStartDateTime(r.t0.Add(skews[i]))))
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range scheds {
		s.Start()
	}
	waitFor(t, r.changed, ticks*interval+30*time.Second, fmt.Sprintf("every instance to try tick %d", ticks), r.triedAll)
	for _, s := range scheds {
		if err := s.Shutdown(); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.errs {
		t.Error(e)
	}
	runs := 0
	for _, insts := range r.runs {
		runs += len(insts)
	}
	calls := 0
	for _, c := range r.calls {
		calls += c
	}
	if calls != runs {
		t.Errorf("the job ran %d times, the monitor saw %d runs: the tick identity misses runs", calls, runs)
	}
	return r
}

// due returns when instance inst's tick k is due.
func (r *tickRun) due(inst, k int) time.Time {
	return r.t0.Add(skews[inst] + time.Duration(k)*interval)
}

func (r *tickRun) call(inst int) {
	r.mu.Lock()
	r.calls[inst]++
	r.mu.Unlock()
}

// attempt records a lock attempt, as the tick nearest its start.
func (r *tickRun) attempt(inst int, start, end time.Time, acquired bool) {
	d := start.Round(0).Sub(r.t0.Add(skews[inst]).Round(0))
	k := int((d + interval/2) / interval)
	r.mu.Lock()
	r.attempts[k] = append(r.attempts[k], attempt{inst: inst, start: start, end: end, late: d - time.Duration(k)*interval, acquired: acquired})
	r.mu.Unlock()
	notify(r.changed)
}

// run records a run the monitor saw, by its scheduled time.
func (r *tickRun) run(inst int, scheduled time.Time) {
	d := scheduled.Round(0).Sub(r.t0.Add(skews[inst]).Round(0))
	r.mu.Lock()
	defer r.mu.Unlock()
	if d < 0 || d%interval != 0 {
		r.errs = append(r.errs, fmt.Sprintf("instance %d ran a tick scheduled at %v, %v after its first: not on its grid", inst, scheduled, d))
		return
	}
	k := int(d / interval)
	r.runs[k] = append(r.runs[k], inst)
}

// triedAll reports whether every instance has tried tick `ticks` (or
// a later one).
func (r *tickRun) triedAll() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	tried := map[int]bool{}
	for k, as := range r.attempts {
		for _, a := range as {
			if k >= ticks {
				tried[a.inst] = true
			}
		}
	}
	return len(tried) == len(skews)
}

// cleanTicks returns the ticks below `ticks` on which the timing was as
// the guarantee needs (see TestLockerRunsEachTickOnce).
func (r *tickRun) cleanTicks() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	var clean []int
	for k := range ticks {
		if r.clean(k) {
			clean = append(clean, k)
		}
	}
	return clean
}

func (r *tickRun) clean(k int) bool {
	as := r.attempts[k]
	tried := map[int]bool{}
	for _, a := range as {
		tried[a.inst] = true
	}
	if len(as) != len(skews) || len(tried) != len(skews) {
		return false
	}
	first, ok := acquired(as, time.Time.Before)
	// The hold the attempts must find released is the latest taken
	// before them, which need not be the previous tick's: a tick whose
	// every instance was still busy with a slow attempt on the one before
	// has no attempts at all.
	var prev time.Time
	for j := range k {
		if end, ok := acquired(r.attempts[j], time.Time.After); ok && end.After(prev) {
			prev = end
		}
	}
	prevOK := !prev.IsZero()
	for _, a := range as {
		if ok && !a.end.Before(first.Add(minHold)) {
			return false
		}
		if prevOK && a.start.Before(prev.Add(minHold+releaseAllowance)) {
			return false
		}
	}
	return true
}

// acquired returns the end of the first attempt that acquired the key
// (with time.Time.Before; the last with After), if one did.
func acquired(as []attempt, earlier func(a, b time.Time) bool) (time.Time, bool) {
	var t time.Time
	for _, a := range as {
		if a.acquired && (t.IsZero() || earlier(a.end, t)) {
			t = a.end
		}
	}
	return t, !t.IsZero()
}

func (r *tickRun) describe(k int) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var s []string
	for _, a := range r.attempts[k] {
		s = append(s, fmt.Sprintf("instance %d %v late, took %v, acquired %v", a.inst, a.late, a.end.Sub(a.start), a.acquired))
	}
	return strings.Join(s, "; ")
}

// lateness summarizes how late the attempts started.
func (r *tickRun) lateness() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var late []time.Duration
	for _, as := range r.attempts {
		for _, a := range as {
			late = append(late, a.late)
		}
	}
	if len(late) == 0 {
		return "no attempts"
	}
	sort.Slice(late, func(i, j int) bool { return late[i] < late[j] })
	return fmt.Sprintf("median %v, 90th percentile %v, max %v", late[len(late)/2], late[len(late)*9/10], late[len(late)-1])
}

func (r *tickRun) byInstance() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := make([]int, len(skews))
	for k, insts := range r.runs {
		if k < ticks {
			for _, i := range insts {
				n[i]++
			}
		}
	}
	return n
}

// recordingLocker records the attempts of an instance's Locker.
type recordingLocker struct {
	r    *tickRun
	inst int
	next gocron.Locker
}

func (l recordingLocker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	start := time.Now()
	lk, err := l.next.Lock(ctx, key)
	l.r.attempt(l.inst, start, time.Now(), err == nil)
	return lk, err
}

// monitor records the runs gocron starts, with their scheduled times; it
// ignores the other events.
type monitor struct {
	r    *tickRun
	inst int
}

func (m *monitor) JobSchedulingDelay(_ gocron.Job, scheduled, _ time.Time) {
	m.r.run(m.inst, scheduled)
}

func (*monitor) SchedulerStarted()                          {}
func (*monitor) SchedulerStopped()                          {}
func (*monitor) SchedulerShutdown()                         {}
func (*monitor) JobRegistered(gocron.Job)                   {}
func (*monitor) JobUnregistered(gocron.Job)                 {}
func (*monitor) JobStarted(gocron.Job)                      {}
func (*monitor) JobRunning(gocron.Job)                      {}
func (*monitor) JobFailed(gocron.Job, error)                {}
func (*monitor) JobCompleted(gocron.Job)                    {}
func (*monitor) JobExecutionTime(gocron.Job, time.Duration) {}
func (*monitor) ConcurrencyLimitReached(string, gocron.Job) {}
