package gocronlocker_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/distlock/locker"
	"github.com/distlock/locker/contrib/gocronlocker"
	"github.com/distlock/locker/memory"
)

// TestElectorHandsOver runs three schedulers with Electors over one
// backend, a job every 100 ms: every run comes from one instance, the
// leader, until its scheduler is shut down and its Elector closed; then
// another instance runs every later tick, and takes over in less than the
// TTL, as Close resigned (a leader that vanished would be replaced only
// once its TTL ran out).
func TestElectorHandsOver(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			ls, ttl := openLockers(t, b, 3)
			els, scheds, log := startLeaders(t, ls, nil)

			lead := log.waitRuns(t, 0, 5, 20*time.Second, "5 runs")
			if err := scheds[lead].Shutdown(); err != nil {
				t.Fatalf("Shutdown of the leader's scheduler: %v", err)
			}
			before := len(log.snapshot())
			if err := els[lead].Close(); err != nil {
				t.Errorf("Close (resign) of the leader's Elector: %v", err)
			}
			stopped := time.Now()
			next := log.waitRuns(t, before, 5, ttl+20*time.Second, "5 runs after the leader stopped")
			if next == lead {
				t.Fatalf("instance %d ran the job after its scheduler was shut down", lead)
			}
			handover := log.snapshot()[before].at.Sub(stopped)
			if handover >= ttl {
				t.Errorf("instance %d took over %v after the leader resigned, not less than the TTL %v: Close did not resign", next, handover, ttl)
			}
			t.Logf("instance %d led, then instance %d, %v after the first resigned", lead, next, handover)
		})
	}
}

// TestElectorCutOff: a leader whose instance is cut off from the backend
// (a memory.Client that crashed) while its scheduler runs on stops running
// jobs when its leadership's validity ends, and another instance takes
// over once the TTL has run out on the store: never both at once.
func TestElectorCutOff(t *testing.T) {
	const ttl = 300 * time.Millisecond
	store := memory.NewStore()
	clients := make([]*memory.Client, 3)
	ls := make([]locker.Locker, 3)
	for i := range clients {
		c := memory.NewClient(&memory.Options{Store: store})
		t.Cleanup(func() { c.Close() })
		clients[i], ls[i] = c, c
	}
	els, _, log := startLeaders(t, ls, []gocronlocker.ElectorOption{gocronlocker.WithTTL(ttl)})

	lead := log.waitRuns(t, 0, 5, 20*time.Second, "5 runs")
	clients[lead].Crash()
	crashed := time.Now()
	var first int
	waitFor(t, log.changed, ttl+20*time.Second, "another instance to run the job", func() bool {
		for i, r := range log.snapshot() {
			if r.inst != lead {
				first = i
				return true
			}
		}
		return false
	})
	runs := log.snapshot()
	handover := runs[first].at.Sub(crashed)
	leadRuns := func(rs []leaderRun) (n int) {
		for _, r := range rs {
			if r.inst == lead {
				n++
			}
		}
		return n
	}
	atTakeover := leadRuns(runs)
	next := log.waitRuns(t, first, 5, 20*time.Second, "5 runs of the new leader")
	// One run of the old leader may have been on its way when the new
	// leader's first was recorded; more means it ran on after losing.
	if n := leadRuns(log.snapshot()); n > atTakeover+1 || next == lead {
		t.Fatalf("the cut-off leader ran %d times after instance %d took over", n-atTakeover, next)
	}
	if err := els[lead].IsLeader(context.Background()); !errors.Is(err, gocronlocker.ErrNotLeader) {
		t.Errorf("the cut-off leader's IsLeader = %v, want ErrNotLeader", err)
	}
	t.Logf("instance %d took over %v after the leader was cut off (TTL %v)", next, handover, ttl)
}

// startLeaders starts a scheduler with an Elector on each of ls, all
// running one job every interval, which logs its runs.
func startLeaders(t *testing.T, ls []locker.Locker, opts []gocronlocker.ElectorOption) ([]*gocronlocker.Elector, []gocron.Scheduler, *runLog) {
	t.Helper()
	log := &runLog{changed: make(chan struct{}, 1)}
	logger := testLogger(t)
	els := make([]*gocronlocker.Elector, len(ls))
	scheds := make([]gocron.Scheduler, len(ls))
	for i, l := range ls {
		el, err := gocronlocker.NewElector(l, "leader", append([]gocronlocker.ElectorOption{gocronlocker.WithLogger(logger)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { el.Close() })
		s, err := gocron.NewScheduler(gocron.WithDistributedElector(el))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Shutdown() }) // before el.Close; a second Shutdown only errors
		if _, err := s.NewJob(gocron.DurationJob(interval), gocron.NewTask(func() { log.add(i) })); err != nil {
			t.Fatal(err)
		}
		els[i], scheds[i] = el, s
	}
	for _, s := range scheds {
		s.Start()
	}
	return els, scheds, log
}

// runLog logs the runs of a job on several instances.
type runLog struct {
	mu      sync.Mutex
	runs    []leaderRun
	changed chan struct{}
}

type leaderRun struct {
	inst int
	at   time.Time
}

func (l *runLog) add(inst int) {
	l.mu.Lock()
	l.runs = append(l.runs, leaderRun{inst, time.Now()})
	l.mu.Unlock()
	notify(l.changed)
}

func (l *runLog) snapshot() []leaderRun {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]leaderRun(nil), l.runs...)
}

// waitRuns waits for n runs from the from-th on, checks that they all
// came from one instance, and returns it.
func (l *runLog) waitRuns(t *testing.T, from, n int, d time.Duration, what string) int {
	t.Helper()
	waitFor(t, l.changed, d, what, func() bool { return len(l.snapshot()) >= from+n })
	runs := l.snapshot()[from:]
	for _, r := range runs {
		if r.inst != runs[0].inst {
			t.Fatalf("runs came from instances %v, want all from one leader", instances(runs))
		}
	}
	return runs[0].inst
}

func instances(runs []leaderRun) []int {
	var out []int
	for _, r := range runs {
		out = append(out, r.inst)
	}
	return out
}

// TestElector: an Elector leads alone, with its value and term on the
// servers; it campaigns again when it loses the leadership; Close resigns,
// and a closed Locker ends the campaigning.
func TestElector(t *testing.T) {
	ctx := context.Background()
	store := memory.NewStore()
	la := memory.New(&memory.Options{Store: store})
	lb := memory.New(&memory.Options{Store: store})
	t.Cleanup(func() { la.Close(); lb.Close() })
	opts := func(v string) []gocronlocker.ElectorOption {
		return []gocronlocker.ElectorOption{gocronlocker.WithTTL(300 * time.Millisecond), gocronlocker.WithValue([]byte(v)), gocronlocker.WithLogger(testLogger(t))}
	}
	a, err := gocronlocker.NewElector(la, "leader", opts("a")...)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	waitLeads(t, a, "a")
	lk := a.Leadership()
	term, ok := lk.Fence()
	if !ok {
		t.Fatal("the leadership has no fence on memory")
	}
	if ldr, err := locker.NewElection(lb, "leader").Leader(ctx); err != nil || string(ldr.Value) != "a" || ldr.Term != term {
		t.Fatalf("Leader = %+v, %v; want value a, term %d", ldr, err, term)
	}

	b, err := gocronlocker.NewElector(lb, "leader", opts("b")...)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.IsLeader(ctx); !errors.Is(err, gocronlocker.ErrNotLeader) {
		t.Fatalf("b.IsLeader while a leads = %v, want ErrNotLeader", err)
	}

	// Deposed: the leadership is lost, b (queued first) leads, and a
	// campaigns again, as Close of b shows.
	waitFor(t, nil, 10*time.Second, "b to queue for the leadership", func() bool {
		h, err := locker.Inspect(ctx, lb, "leader")
		return err == nil && h.WaitersKnown && h.Waiters == 1
	})
	if _, err := locker.ForceRelease(ctx, lb, "leader"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lk.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("a's leadership not lost after a force release")
	}
	waitLeads(t, b, "b after a was deposed")
	if err := a.IsLeader(ctx); !errors.Is(err, gocronlocker.ErrNotLeader) {
		t.Fatalf("a.IsLeader after it was deposed = %v, want ErrNotLeader", err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("b.Close: %v", err)
	}
	if err := b.IsLeader(ctx); !errors.Is(err, gocronlocker.ErrNotLeader) || !errors.Is(err, locker.ErrClosed) {
		t.Fatalf("IsLeader after Close = %v, want ErrNotLeader and ErrClosed", err)
	}
	if b.Leadership() != nil {
		t.Fatal("Leadership after Close is not nil")
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	waitLeads(t, a, "a again after b resigned")

	// The Locker closes under the Elector: campaigning stops, for good.
	if err := la.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, nil, 10*time.Second, "IsLeader to say the Locker is closed", func() bool {
		return errors.Is(a.IsLeader(ctx), locker.ErrClosed)
	})
	if err := a.Close(); err != nil {
		t.Fatalf("Close after the Locker closed: %v", err)
	}
}

func waitLeads(t *testing.T, e *gocronlocker.Elector, who string) {
	t.Helper()
	waitFor(t, nil, 10*time.Second, fmt.Sprintf("%s to lead", who), func() bool { return e.IsLeader(context.Background()) == nil })
	if e.Leadership() == nil {
		t.Fatalf("%s leads, but Leadership is nil", who)
	}
}
