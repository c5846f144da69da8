package conformance_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/locker"
	"github.com/distlock/locker/backend"
	"github.com/distlock/locker/conformance"
	"github.com/distlock/locker/internal/memstore"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The suite must be able to fail: each broken backend below makes a
// deliberate, well-known mistake, and a named case has to catch it. The
// backends share one store per harness; a client is a driver whose
// "connection" can be cut, as a crashed process's is.

// flaw is one deliberate mistake.
type flaw int

const (
	correct flaw = iota
	// releaseWithoutOwnerCheck deletes the key whoever holds it (DEL
	// instead of compare-and-delete).
	releaseWithoutOwnerCheck
	// noExpiry never expires a lock: a crashed holder blocks forever.
	noExpiry
	// setThenExpire takes the lock in two round trips (SETNX, then
	// EXPIRE): a crash between them leaves a lock that never expires.
	setThenExpire
	// fenceResets keeps the fence counter with the lock, so it starts
	// again at 1 once the key is free, like ZooKeeper sequence numbers
	// after the parent node is deleted.
	fenceResets
	// tryIgnoresHolder takes the key even when someone holds it.
	tryIgnoresHolder
	// waits is no flaw: the backend waits natively (waitingDriver),
	// claiming FIFO.
	waits
	// lifoWaiters claims FIFO but hands a released key to the waiter
	// that queued last.
	lifoWaiters
	// waiterMissesExpiry wakes a waiter when the key is released, never
	// when the holder's lock expires: a waiter behind a crashed holder
	// waits forever, although a new Acquire would get the key at once.
	waiterMissesExpiry
	// blindMint mints a lock's fence on demand (backend.FenceMinter),
	// not with its grant, and mints it whoever holds the key now, as a
	// mint script that does not compare the token: a holder whose lock
	// was taken over gets a fence above its successor's.
	blindMint
)

// waiting reports whether the backend with flaw f waits natively.
func (f flaw) waiting() bool { return f == waits || f == lifoWaiters || f == waiterMissesExpiry }

type entry struct {
	token   string
	expires time.Time // zero: never
	fence   uint64
}

type store struct {
	flaw    flaw
	mu      sync.Mutex
	keys    map[string]*entry
	fence   uint64
	waiters map[string][]*waiter // in the order they queued
}

// A waiter is a blocked Acquire of a waitingDriver.
type waiter struct {
	wake   chan struct{} // buffered 1
	queued bool          // in store.waiters; under store.mu
}

// wakeLocked wakes the waiter next in line for key, if any: the first to
// queue, or the last with lifoWaiters.
func (s *store) wakeLocked(key string) {
	q := s.waiters[key]
	if len(q) == 0 {
		return
	}
	var w *waiter
	if s.flaw == lifoWaiters {
		w, s.waiters[key] = q[len(q)-1], q[:len(q)-1]
	} else {
		w, s.waiters[key] = q[0], q[1:]
	}
	w.queued = false
	w.wake <- struct{}{}
}

func (s *store) dequeueLocked(key string, w *waiter) {
	if w.queued {
		s.waiters[key] = slices.DeleteFunc(s.waiters[key], func(x *waiter) bool { return x == w })
		w.queued = false
	}
}

// liveLocked returns key's entry if it is held and not expired.
func (s *store) liveLocked(key string) *entry {
	e := s.keys[key]
	if e == nil {
		return nil
	}
	if !e.expires.IsZero() && !time.Now().Before(e.expires) {
		delete(s.keys, key)
		return nil
	}
	return e
}

type driver struct {
	s   *store
	cut atomic.Bool
}

var errCut = errors.New("connection cut")

// rtt stands in for a network round trip in the two-step acquire.
const rtt = 2 * time.Millisecond

func (d *driver) TryAcquire(ctx context.Context, req backend.Request) (backend.Acquisition, error) {
	if d.cut.Load() {
		return backend.Acquisition{}, errCut
	}
	s := d.s
	s.mu.Lock()
	if e := s.liveLocked(req.Key); e != nil && s.flaw != tryIgnoresHolder {
		var left time.Duration
		if !e.expires.IsZero() {
			left = time.Until(e.expires)
		}
		s.mu.Unlock()
		return backend.Acquisition{}, &backend.Busy{Remaining: left}
	}
	e := &entry{token: req.Token}
	switch s.flaw {
	case fenceResets:
		if old := s.keys[req.Key]; old != nil {
			e.fence = old.fence
		}
		e.fence++
	default:
		s.fence++
		e.fence = s.fence
	}
	if s.flaw != noExpiry && s.flaw != setThenExpire {
		e.expires = time.Now().Add(req.TTL)
	}
	s.keys[req.Key] = e
	s.mu.Unlock()

	if s.flaw == setThenExpire {
		time.Sleep(rtt) // the EXPIRE is a second round trip
		if d.cut.Load() {
			return backend.Acquisition{}, errCut
		}
		s.mu.Lock()
		e.expires = time.Now().Add(req.TTL)
		s.mu.Unlock()
	}
	if s.flaw == blindMint {
		return backend.Acquisition{Held: &held{d: d, key: req.Key, token: req.Token}}, nil
	}
	return backend.Acquisition{Held: &held{d: d, key: req.Key, token: req.Token}, Fence: e.fence, Fenced: true}, nil
}

func (d *driver) Capabilities() backend.Capabilities {
	return backend.Capabilities{Fencing: true}
}

func (d *driver) Close() error { return nil }

type held struct {
	d     *driver
	key   string
	token string
}

func (h *held) owned() (*entry, error) {
	if h.d.cut.Load() {
		return nil, errCut
	}
	e := h.d.s.liveLocked(h.key)
	if e == nil || e.token != h.token {
		return nil, backend.ErrNotHeld
	}
	return e, nil
}

// MintFence mints the fence of a lock granted without one (blindMint),
// without checking that the lock is still ours.
func (h *held) MintFence(ctx context.Context) (uint64, error) {
	s := h.d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fence++
	return s.fence, nil
}

func (h *held) Refresh(ctx context.Context, ttl time.Duration) error {
	h.d.s.mu.Lock()
	defer h.d.s.mu.Unlock()
	e, err := h.owned()
	if err != nil {
		return err
	}
	if h.d.s.flaw != noExpiry {
		e.expires = time.Now().Add(ttl)
	}
	return nil
}

func (h *held) TTL(ctx context.Context) (time.Duration, error) {
	h.d.s.mu.Lock()
	defer h.d.s.mu.Unlock()
	e, err := h.owned()
	if err != nil {
		return 0, err
	}
	if e.expires.IsZero() {
		return time.Hour, nil
	}
	return time.Until(e.expires), nil
}

func (h *held) Release(ctx context.Context) error {
	s := h.d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.flaw == releaseWithoutOwnerCheck {
		if h.d.cut.Load() {
			return errCut
		}
		if s.liveLocked(h.key) == nil {
			return backend.ErrNotHeld
		}
		delete(s.keys, h.key) // whoever holds it
		return nil
	}
	if _, err := h.owned(); err != nil {
		return err
	}
	delete(s.keys, h.key)
	s.wakeLocked(h.key)
	return nil
}

// waitingDriver waits natively: a blocked Acquire queues on the key and
// is woken by the release, or, unless the flaw is waiterMissesExpiry, once
// the holder's lock expires.
type waitingDriver struct{ *driver }

func (d waitingDriver) Capabilities() backend.Capabilities {
	c := d.driver.Capabilities()
	c.FIFO, c.WakeOnRelease = true, true
	return c
}

func (d waitingDriver) Acquire(ctx context.Context, req backend.Request) (backend.Acquisition, error) {
	s := d.s
	w := &waiter{wake: make(chan struct{}, 1)}
	defer func() {
		s.mu.Lock()
		s.dequeueLocked(req.Key, w)
		s.mu.Unlock()
	}()
	for {
		if d.cut.Load() {
			return backend.Acquisition{}, errCut
		}
		s.mu.Lock()
		e := s.liveLocked(req.Key)
		if e == nil {
			s.mu.Unlock()
			start := time.Now() // the TTL starts at the grant, not at the call
			acq, err := d.TryAcquire(ctx, req)
			if errors.Is(err, backend.ErrNotAcquired) {
				continue // taken in between: queue again
			}
			acq.Start = start
			return acq, err
		}
		if !w.queued {
			s.waiters[req.Key] = append(s.waiters[req.Key], w)
			w.queued = true
		}
		var expiry <-chan time.Time
		if s.flaw != waiterMissesExpiry && !e.expires.IsZero() {
			timer := time.NewTimer(time.Until(e.expires))
			defer timer.Stop()
			expiry = timer.C
		}
		s.mu.Unlock()
		select {
		case <-w.wake:
		case <-expiry:
		case <-ctx.Done():
			return backend.Acquisition{}, ctx.Err()
		}
	}
}

// forcingDriver can release a key by force (backend.Inspector), so that
// a holder's lock is taken over while it still believes it holds it.
type forcingDriver struct{ *driver }

func (d forcingDriver) Inspect(ctx context.Context, key string) (backend.Holder, error) {
	d.s.mu.Lock()
	defer d.s.mu.Unlock()
	if e := d.s.liveLocked(key); e != nil {
		return backend.Holder{Held: true, Token: e.token}, nil
	}
	return backend.Holder{}, nil
}

func (d forcingDriver) ForceRelease(ctx context.Context, key string) (bool, error) {
	d.s.mu.Lock()
	defer d.s.mu.Unlock()
	e := d.s.liveLocked(key)
	delete(d.s.keys, key)
	return e != nil, nil
}

func harness(f flaw) conformance.Harness {
	s := &store{flaw: f, keys: map[string]*entry{}, waiters: map[string][]*waiter{}}
	return conformance.Harness{
		NewClient: func(context.Context) (conformance.Client, error) {
			d := &driver{s: s}
			var bd backend.Driver = d
			switch {
			case f.waiting():
				bd = waitingDriver{d}
			case f == blindMint:
				bd = forcingDriver{d}
			}
			return conformance.Client{Locker: locker.New(bd, nil), Crash: func() { d.cut.Store(true) }}, nil
		},
		TTL: 250 * time.Millisecond,
	}
}

// TestCorrectBackendPasses shows the reference backend the flaws are made
// in is itself correct, so that each failure below is the flaw's doing:
// as it is, which runs the root package's polling wait, since it neither
// waits natively nor notifies, and waiting natively in FIFO order.
func TestCorrectBackendPasses(t *testing.T) {
	t.Run("polling", func(t *testing.T) {
		t.Parallel()
		conformance.Run(t, harness(correct))
	})
	t.Run("waiting", func(t *testing.T) {
		t.Parallel()
		conformance.Run(t, harness(waits))
	})
}

func TestBrokenBackendsFail(t *testing.T) {
	tests := []struct {
		name   string
		flaw   flaw
		caught []string // cases that must fail
	}{
		{"release without owner check", releaseWithoutOwnerCheck, []string{"stale-owner"}},
		{"no expiry", noExpiry, []string{"stale-owner", "crashed-holder-expiry", "crashed-holder-handoff", "crash-during-acquire", "lost-on-expiry"}},
		{"set then expire in two steps", setThenExpire, []string{"crash-during-acquire"}},
		{"fences reset when the key is free", fenceResets, []string{"fencing", "mutual-exclusion-stress"}},
		{"TryAcquire ignores the holder", tryIgnoresHolder, []string{"try-acquire-contended", "mutual-exclusion-stress"}},
		{"claims FIFO but hands off last in, first out", lifoWaiters, []string{"fifo-order"}},
		{"waiters are not woken by expiry", waiterMissesExpiry, []string{"crashed-holder-handoff"}},
		{"mints a fence on demand for a lock taken over", blindMint, []string{"stale-fence"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			wantCaught(t, harness(tt.flaw), "a backend whose "+tt.name, tt.caught)
		})
	}
}

// wantCaught checks that Check fails the backend of h, described by what
// ("a backend whose ..."), and that each of the cases caught is among
// those that failed; it returns the report.
func wantCaught(t *testing.T, h conformance.Harness, what string, caught []string) conformance.Report {
	t.Helper()
	rep, err := conformance.Check(context.Background(), h)
	if err == nil {
		t.Fatalf("Check passed %s:\n%s", what, rep)
	}
	var failed []string
	for _, r := range rep.Failed() {
		failed = append(failed, r.Name)
		t.Logf("caught by %s: %s", r.Name, r.Detail)
	}
	for _, name := range caught {
		if !slices.Contains(failed, name) {
			t.Errorf("case %s did not catch %s (failed: %v)", name, what, failed)
		}
	}
	return rep
}

// coldDriver fails its client's first attempts, as a Redlock node whose
// answer is awaited for 100 ms fails a burst of first requests that must
// each open a connection (through a proxy, on a loaded machine).
type coldDriver struct {
	*driver
	cold atomic.Int32 // attempts still to fail
}

var errCold = errors.New("no answer within 100ms (a connection still being opened)")

func (d *coldDriver) TryAcquire(ctx context.Context, req backend.Request) (backend.Acquisition, error) {
	if d.cold.Add(-1) >= 0 {
		return backend.Acquisition{}, errCold
	}
	return d.driver.TryAcquire(ctx, req)
}

// TestCrashDuringAcquireWarmsUp: crash-during-acquire warms its observer
// up with an Acquire per key at once; a client whose first attempts fail
// for want of connections is no finding about the keys, and the case
// passes on a correct backend. (The warm-up's failures failed the case,
// in lockctl check on Redlock, now and then.)
func TestCrashDuringAcquireWarmsUp(t *testing.T) {
	s := &store{flaw: correct, keys: map[string]*entry{}, waiters: map[string][]*waiter{}}
	h := conformance.Harness{
		NewClient: func(context.Context) (conformance.Client, error) {
			d := &coldDriver{driver: &driver{s: s}}
			d.cold.Store(20) // more than the case's keys: every one of them fails once
			return conformance.Client{Locker: locker.New(d, nil), Crash: func() { d.cut.Store(true) }}, nil
		},
		TTL:    250 * time.Millisecond,
		Select: func(name string) bool { return name == "crash-during-acquire" },
	}
	rep, err := conformance.Check(context.Background(), h)
	if err != nil {
		t.Fatalf("crash-during-acquire failed a correct backend whose clients' first attempts fail:\n%s", rep)
	}
	if len(rep.Results) != 1 {
		t.Fatalf("want one case run, got %d", len(rep.Results))
	}
}

// earlyExpiry is a memory store's client whose store lets a lock go a
// fifth of its TTL before the holder's local validity ends: it asks the
// store for a shorter TTL than the Locker's. The store's report that the
// lock expired then reaches the Locker before its watchdog's own expiry,
// which is the order a loaded machine produces now and then, when the
// watchdog's timer fires late.
type earlyExpiry struct{ *memstore.Driver }

func (d earlyExpiry) TryAcquire(ctx context.Context, req backend.Request) (backend.Acquisition, error) {
	req.TTL -= req.TTL / 5
	return d.Driver.TryAcquire(ctx, req)
}

func (d earlyExpiry) Acquire(ctx context.Context, req backend.Request) (backend.Acquisition, error) {
	req.TTL -= req.TTL / 5
	return d.Driver.Acquire(ctx, req)
}

// TestReleaseAfterLostTakesEitherReason: release-after-lost passes a
// backend whose own expiry closes Lost before the validity runs out on
// the local clock: Err and Release then name the backend's reason, which
// is as true as ErrExpired. (The case wanted ErrExpired alone, and
// failed on memory on a busy machine.)
func TestReleaseAfterLostTakesEitherReason(t *testing.T) {
	s := memstore.NewStore()
	h := conformance.Harness{
		NewClient: func(context.Context) (conformance.Client, error) {
			d := memstore.NewDriver(s)
			return conformance.Client{Locker: locker.New(earlyExpiry{d}, nil), Crash: d.Crash}, nil
		},
		TTL:    250 * time.Millisecond,
		Select: func(name string) bool { return name == "release-after-lost" },
	}

	// The order the test claims: the store's report comes first.
	l := locker.New(earlyExpiry{memstore.NewDriver(s)}, nil)
	defer l.Close()
	lk, err := l.Acquire(context.Background(), "early", locker.WithTTL(h.TTL), locker.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	<-lk.Lost()
	if err := lk.Err(); !errors.Is(err, locker.ErrNotHeld) || errors.Is(err, locker.ErrExpired) {
		t.Fatalf("Err() = %v; want the store's report of the expiry, ahead of the local clock's", err)
	}

	if rep, err := conformance.Check(context.Background(), h); err != nil {
		t.Fatalf("release-after-lost failed a backend whose store reports the expiry before the Locker's watchdog does:\n%s", rep)
	}
}
