package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// Scenario names, in the order a full run measures them.
const (
	ScenarioUncontended = "uncontended"
	ScenarioThroughput  = "throughput"
	ScenarioHotKey      = "hot-key"
	ScenarioFreshKeys   = "fresh-keys"
	ScenarioFanout      = "fanout"
	ScenarioRecovery    = "recovery"
	ScenarioFailover    = "failover"
	ScenarioHeldLocks   = "held-locks"
	ScenarioReadWrite   = "read-write"
	ScenarioSemaphore   = "semaphore"
)

// Scenarios are every scenario, in run order.
var Scenarios = []string{ScenarioUncontended, ScenarioThroughput, ScenarioHotKey, ScenarioFreshKeys, ScenarioFanout, ScenarioRecovery, ScenarioFailover,
	ScenarioHeldLocks, ScenarioReadWrite, ScenarioSemaphore}

// A Runner measures designs in scenarios and collects the results.
type Runner struct {
	Settings Settings
	// TTL is the TTL of every lock taken; long enough that no lock
	// expires while it is held in a scenario.
	TTL time.Duration
	// KeyPrefix starts every key, unique to the run, so that a run on a
	// shared deployment touches nothing else and runs do not meet.
	KeyPrefix string
	// Progress, when set, hears of each step as it starts: step of
	// steps, the time left, and what it measures.
	Progress func(Progress)
	// Holder runs the holders the recovery scenario kills; without it,
	// the scenario is left out with a note.
	Holder HolderCommand
	// Campaigner runs the campaigners of the failover scenario; without
	// it, the scenario is left out with a note.
	Campaigner CampaignerCommand

	step    int
	plan    []time.Duration // how long each step measures, in run order
	began   time.Time       // when the run began, for Progress's Elapsed
	first   time.Time       // when the first step started
	results []Result
	notes   []string
	conns   ConnPeaks // the most connections open at once, per server
}

// Results returns what the runner measured so far.
func (r *Runner) Results() []Result { return r.results }

// Notes returns what the runner wants the reader to know.
func (r *Runner) Notes() []string { return r.notes }

func (r *Runner) notef(format string, args ...any) {
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
}

// Plan tells the runner the steps coming, for Progress: how long each
// measures, in the order they run.
func (r *Runner) Plan(steps []time.Duration) { r.plan = steps }

func (r *Runner) progress(what string) {
	now := time.Now()
	if r.step == 0 {
		r.first = now
		if r.began.IsZero() {
			r.began = now
		}
	}
	r.step++
	if r.Progress != nil {
		left := time.Duration(-1) // a step the plan did not count: no estimate
		if r.step <= len(r.plan) {
			left = estimateLeft(r.plan, r.step-1, now.Sub(r.first))
		}
		r.Progress(Progress{Step: r.step, Steps: max(len(r.plan), r.step), Elapsed: now.Sub(r.began), Left: left, What: what})
	}
}

func (r *Runner) key(parts ...any) string {
	k := r.KeyPrefix
	for i, p := range parts {
		if i > 0 {
			k += "/"
		}
		k += fmt.Sprint(p)
	}
	return k
}

// opened is a design with its clients open.
type opened struct {
	d       Design
	clients []Client
}

// open opens n clients of each design; a design that cannot open is left
// out with a note.
func (r *Runner) open(ctx context.Context, scenario string, designs []Design, n int) []opened {
	var out []opened
	for _, d := range designs {
		o := opened{d: d}
		var err error
		for range n {
			var c Client
			if c, err = d.Open(ctx); err != nil {
				break
			}
			o.clients = append(o.clients, c)
		}
		if err != nil {
			closeClients(o.clients)
			r.notef("%s: %s %s could not open a client: %v", scenario, d.Backend, d.Name, err)
			continue
		}
		out = append(out, o)
	}
	return out
}

// closeAll closes the clients of a step, once it has counted their
// connections: each step's clients are all open at its end, their pools
// grown to what the step needed.
func (r *Runner) closeAll(os []opened) {
	r.conns.Sample([]int{0})
	closeAll(os)
}

func closeClients(cs []Client) {
	for _, c := range cs {
		c.Close()
	}
}

func closeAll(os []opened) {
	for _, o := range os {
		closeClients(o.clients)
	}
}

// tally is what one design did in one scenario and parameter set.
type tally struct {
	ops, errs int64
	busy      time.Duration // time spent in operations (turns) or running (slices)
	lat       *hist
	first     error
}

func newTally() *tally { return &tally{lat: newHist()} }

func (t *tally) record(d time.Duration, err error) {
	if err != nil {
		t.errs++
		if t.first == nil {
			t.first = err
		}
		return
	}
	t.ops++
	t.lat.add(d)
}

func (t *tally) result(scenario string, d Design, params map[string]int, rtt time.Duration, unit string) Result {
	res := Result{
		Scenario: scenario, Backend: d.Backend, Design: d.Name, Kind: d.Kind, Params: params, RTT: rtt,
		Ops: t.ops, Errors: t.errs, Elapsed: t.busy, Unit: unit, Latency: t.lat.latency(),
	}
	if t.busy > 0 {
		res.PerSec = float64(t.ops) / t.busy.Seconds()
	}
	if t.first != nil {
		res.FirstError = t.first.Error()
	}
	return res
}

// lockUnlock is one operation: take key and release it. The release
// runs even when ctx ended meanwhile (the end of a slice): a lock left
// behind would hold its key for a whole TTL into the next slice.
func lockUnlock(ctx context.Context, c Client, key string, ttl time.Duration) error {
	unlock, err := c.Lock(ctx, key, ttl)
	if err != nil {
		return err
	}
	return unlock(context.WithoutCancel(ctx))
}

// turns runs op on every design, one operation each in a shuffled order
// per round, until each has had d of operations, so that whatever else
// the machine does slows every design alike. It gives each design a few
// operations first, untimed.
func turns(ctx context.Context, os []opened, d time.Duration, op func(ctx context.Context, o opened, i int) error) []*tally {
	ts := make([]*tally, len(os))
	for i := range ts {
		ts[i] = newTally()
	}
	for i, o := range os {
		for n := range 3 {
			op(ctx, o, -1-n-3*i)
		}
	}
	order := rand.Perm(len(os))
	deadline := time.Now().Add(d * time.Duration(len(os)))
	for n := 0; time.Now().Before(deadline) && ctx.Err() == nil; n++ {
		rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, i := range order {
			t0 := time.Now()
			err := op(ctx, os[i], n)
			el := time.Since(t0)
			ts[i].busy += el
			ts[i].record(el, err)
		}
	}
	return ts
}

// inSlices runs each design on its own for d in all, in sliceCount turns of
// d/sliceCount, rotating between designs, so that a burst of noise on
// the machine does not land on one design only. run measures one slice
// of one design into its tally.
func inSlices(ctx context.Context, os []opened, d time.Duration, run func(ctx context.Context, i int, o opened, t *tally, slice time.Duration)) []*tally {
	const sliceCount = 4
	ts := make([]*tally, len(os))
	for i := range ts {
		ts[i] = newTally()
	}
	for range sliceCount {
		for i, o := range os {
			if ctx.Err() != nil {
				return ts
			}
			start := time.Now()
			run(ctx, i, o, ts[i], d/sliceCount)
			ts[i].busy += time.Since(start)
		}
	}
	return ts
}

// concurrently runs f(i) for i in [0, n) at once and waits for them.
func concurrently(n int, f func(i int)) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(i)
		}()
	}
	wg.Wait()
}

// isStop reports whether err is only the end of a slice: any error once
// the slice's context has ended.
func isStop(ctx context.Context, err error) bool { return err != nil && ctx.Err() != nil }
