package faulttest_test

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/distlock/locker"
	"github.com/distlock/locker/internal/faulttest"
	"github.com/distlock/locker/internal/faulttest/flawed"
	"github.com/distlock/locker/internal/memstore"
	"github.com/distlock/locker/memory"
)

// stuckFences is a Locker whose locks all report the same fence, as a
// backend whose counter never moves would.
type stuckFences struct{ locker.Locker }

func (s stuckFences) Acquire(ctx context.Context, key string, opts ...locker.Option) (locker.Lock, error) {
	lk, err := s.Locker.Acquire(ctx, key, opts...)
	if err != nil {
		return nil, err
	}
	return stuckFence{lk}, nil
}

func (s stuckFences) TryAcquire(ctx context.Context, key string, opts ...locker.Option) (locker.Lock, error) {
	lk, err := s.Locker.TryAcquire(ctx, key, opts...)
	if err != nil {
		return nil, err
	}
	return stuckFence{lk}, nil
}

type stuckFence struct{ locker.Lock }

func (stuckFence) Fence() (uint64, bool) { return 7, true }

// TestOracleCatchesStuckFences: the oracle's fence check is not vacuous. On
// a backend whose fences never increase (asked for right after each
// acquisition, as the fault test asks), a run reports it.
func TestOracleCatchesStuckFences(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	store := memory.NewStore()
	rep, err := faulttest.Run(context.Background(), faulttest.Config{
		Open: func(context.Context) (*faulttest.Client, error) {
			c := memory.NewClient(&memory.Options{Store: store})
			return &faulttest.Client{Locker: stuckFences{c.Locker}, Crash: c.Crash}, nil
		},
		Seed:     1,
		Duration: 2 * time.Second,
		TTLs:     []time.Duration{200 * time.Millisecond, 500 * time.Millisecond, time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range rep.Violations {
		if strings.Contains(v, "fences do not increase") {
			return
		}
	}
	t.Fatalf("a run on fences that never increase reported no such violation; it found: %q (%s)", rep.Violations, rep.Summary())
}

// TestOracleCatchesKindFlaws: the oracle's checks of shared holds and
// permits are not vacuous. On a memory backend whose semaphores admit one
// permit more than their limit, and whose read locks let a writer in
// beside their readers (package flawed), a run reports both.
func TestOracleCatchesKindFlaws(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	store := memstore.NewStore()
	quiet := &locker.Config{Logger: slog.New(slog.DiscardHandler)}
	rep, err := faulttest.Run(context.Background(), faulttest.Config{
		Open: func(context.Context) (*faulttest.Client, error) {
			d := memstore.NewDriver(store)
			l := locker.New(flawed.New(d, flawed.ExtraPermit|flawed.WriterBesideReaders), quiet)
			return &faulttest.Client{Locker: l, Crash: d.Crash}, nil
		},
		Seed:     1,
		Duration: 2 * time.Second,
		TTLs:     []time.Duration{200 * time.Millisecond, 500 * time.Millisecond, time.Second},
		// Of 2 permits, with holds of 1 and 2: an extra permit lets
		// three be held at once more often than of 3 (a handful of
		// times a run rather than once or twice).
		Limit: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"permits of its 2 believed held at once",
		"a client believed it held it shared while another believed it held it exclusively",
	} {
		if !slices.ContainsFunc(rep.Violations, func(v string) bool { return strings.Contains(v, want) }) {
			t.Errorf("a run on a backend with both flaws reported no violation saying %q; it found: %q (%s)", want, rep.Violations, rep.Summary())
		}
	}
}

// TestOracleCatchesElectionAndOwnerFlaws: the oracle's checks of
// campaigns and of reentrant owners are not vacuous. A run reports two
// leaders at once on a backend whose mutex admits two holders, an owner
// refused a second handle on a Locker that ignores owners, and a hold
// gone before its last handle's release on a Locker whose every handle
// releases the hold (package flawed).
func TestOracleCatchesElectionAndOwnerFlaws(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	tests := []struct {
		name  string
		flaws flawed.Flaw
		wrap  func(locker.Locker) locker.Locker
		want  string
	}{
		{"a mutex admits two holders", flawed.TwoExclusive, nil, " led "},
		{"owners are not reentrant", 0, flawed.NotReentrant, "of another handle through the same Locker failed"},
		{"the first handle released releases the hold", 0, flawed.ReleasesAll, "and the hold went"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			store := memstore.NewStore()
			quiet := &locker.Config{Logger: slog.New(slog.DiscardHandler)}
			rep, err := faulttest.Run(context.Background(), faulttest.Config{
				Open: func(context.Context) (*faulttest.Client, error) {
					d := memstore.NewDriver(store)
					l := locker.New(flawed.New(d, tt.flaws), quiet)
					if tt.wrap != nil {
						l = tt.wrap(l)
					}
					return &faulttest.Client{Locker: l, Crash: d.Crash}, nil
				},
				Seed:     1,
				Duration: 2 * time.Second,
				TTLs:     []time.Duration{200 * time.Millisecond, 500 * time.Millisecond, time.Second},
				// More workers than by default: more campaigns and
				// owners in the short run.
				Workers: 8,
			})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.ContainsFunc(rep.Violations, func(v string) bool { return strings.Contains(v, tt.want) }) {
				t.Errorf("a run where %s reported no violation saying %q; it found: %q (%s)", tt.name, tt.want, rep.Violations, rep.Summary())
			}
		})
	}
}

// lapsing is a Locker on which an owner's hold always lapses before the
// owner asks for it again: an owner's acquisitions take no auto-refresh,
// and one under an owner that holds the key waits until that hold's Lost
// has closed (its TTL ran out) before it goes on. The reentrant request
// then finds the hold lost and takes a new one, as WithOwner says: the
// interleaving that a fault-test run on Redis met once, when a cut lost
// an owner's hold between its first Acquire and its second.
type lapsing struct {
	locker.Locker
	mu    sync.Mutex
	holds map[[2]string]locker.Lock // the last hold of each owner and key
}

func (l *lapsing) Acquire(ctx context.Context, key string, opts ...locker.Option) (locker.Lock, error) {
	return l.owned(ctx, key, opts, l.Locker.Acquire)
}

func (l *lapsing) TryAcquire(ctx context.Context, key string, opts ...locker.Option) (locker.Lock, error) {
	return l.owned(ctx, key, opts, l.Locker.TryAcquire)
}

// Unwrap returns the Locker wrapped, for locker.Inspect.
func (l *lapsing) Unwrap() locker.Locker { return l.Locker }

func (l *lapsing) owned(ctx context.Context, key string, opts []locker.Option,
	call func(context.Context, string, ...locker.Option) (locker.Lock, error)) (locker.Lock, error) {
	owner, ok := locker.OwnerFrom(ctx)
	if !ok {
		return call(ctx, key, opts...)
	}
	id := [2]string{owner, key}
	l.mu.Lock()
	held := l.holds[id]
	l.mu.Unlock()
	if held != nil {
		<-held.Lost() // within the TTL, or at the Locker's Close
		// The wait may have used up the caller's deadline: the new hold
		// gets a second of its own.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
	}
	lk, err := call(ctx, key, append(opts, locker.WithAutoRefresh(false))...)
	if err == nil {
		l.mu.Lock()
		l.holds[id] = lk
		l.mu.Unlock()
	}
	return lk, err
}

// TestOracleOwnerHoldLapsed: an owner whose hold lapsed before its next
// Acquire gets a new hold (WithOwner), not a handle on the lost one; the
// run tells the two apart, and reports no hold gone before its last
// handle when the owner released the new hold's only handle first.
func TestOracleOwnerHoldLapsed(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	store := memory.NewStore()
	quiet := &locker.Config{Logger: slog.New(slog.DiscardHandler)}
	rep, err := faulttest.Run(context.Background(), faulttest.Config{
		Open: func(context.Context) (*faulttest.Client, error) {
			d := memstore.NewDriver(store)
			l := &lapsing{Locker: locker.New(d, quiet), holds: map[[2]string]locker.Lock{}}
			return &faulttest.Client{Locker: l, Crash: d.Crash}, nil
		},
		Seed:     1,
		Duration: 4 * time.Second,
		TTLs:     []time.Duration{200 * time.Millisecond, 500 * time.Millisecond, time.Second},
		// Few clients on many keys: an owner's new hold after its
		// hold lapsed is seldom refused for another holder's.
		Clients: 2, Workers: 2, Keys: 9,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Violations) > 0 {
		t.Errorf("a run whose owners' holds lapse before each reentry reported: %q (%s)", rep.Violations, rep.Summary())
	}
	if rep.Counts["reenter.lapsed"] == 0 {
		t.Errorf("no owner took a new hold after its hold lapsed: the run did not drive the interleaving (%s)", rep.Summary())
	}
}
