package locker_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distlock/locker"
	"github.com/distlock/locker/backend"
	"github.com/distlock/locker/internal/memstore"
)

// wireDriver puts the memory store behind a simulated network on which the
// test can hold a refresh "on the wire": the request has left the client,
// and reaches the store only when the test lets it go, even after the
// caller gave up on it. Requests not held go straight through, so a later
// request can overtake a held one, as on two pooled connections.
type wireDriver struct {
	*memstore.Driver
	// bound, if set, is every lock's backend.Bounded answer.
	bound func() time.Time

	mu      sync.Mutex
	holdTTL time.Duration // a refresh with this TTL is held; 0: none
	held    chan struct{} // closed to let the held refresh through
	sent    chan time.Duration
	landed  sync.WaitGroup // held requests still to reach the store
	inner   backend.Held   // the last lock taken, as the store sees it
}

func newWireDriver() *wireDriver {
	return &wireDriver{Driver: memstore.NewDriver(memstore.NewStore()), sent: make(chan time.Duration, 16)}
}

func (d *wireDriver) TryAcquire(ctx context.Context, req backend.Request) (backend.Acquisition, error) {
	acq, err := d.Driver.TryAcquire(ctx, req)
	if err != nil {
		return acq, err
	}
	d.mu.Lock()
	d.inner = acq.Held
	d.mu.Unlock()
	if d.bound != nil {
		acq.Held = &boundedHeld{wireHeld{Held: acq.Held, d: d}}
	} else {
		acq.Held = &wireHeld{Held: acq.Held, d: d}
	}
	return acq, nil
}

// hold makes the next refresh with ttl wait on the wire until the returned
// func is called.
func (d *wireDriver) hold(ttl time.Duration) (letGo func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.holdTTL, d.held = ttl, make(chan struct{})
	ch := d.held
	return sync.OnceFunc(func() { close(ch) })
}

// serverExpiry is when the store will expire the last lock taken.
func (d *wireDriver) serverExpiry(t *testing.T) time.Time {
	t.Helper()
	d.mu.Lock()
	h := d.inner
	d.mu.Unlock()
	left, err := h.TTL(context.Background())
	if err != nil {
		t.Fatalf("the store no longer has the lock: %v", err)
	}
	return time.Now().Add(left)
}

type wireHeld struct {
	backend.Held
	d *wireDriver
}

func (h *wireHeld) Refresh(ctx context.Context, ttl time.Duration) error {
	d := h.d
	d.mu.Lock()
	var gate chan struct{}
	if d.holdTTL == ttl {
		gate, d.holdTTL = d.held, 0
	}
	d.mu.Unlock()
	if gate != nil {
		// Counted before the test hears of it, so that its landed.Wait
		// comes after.
		d.landed.Add(1)
	}
	d.sent <- ttl
	if gate == nil {
		return h.Held.Refresh(ctx, ttl)
	}
	// On the wire: it reaches the store when let go, whatever the caller
	// does meanwhile.
	reply := make(chan error, 1)
	go func() {
		defer d.landed.Done()
		<-gate
		reply <- h.Held.Refresh(context.Background(), ttl)
	}()
	select {
	case err := <-reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

type boundedHeld struct{ wireHeld }

func (h *boundedHeld) ValidUntil() time.Time { return h.d.bound() }

// wantWithinServer fails unless the lock's local validity ends no later
// than the store's expiry of it: the client must never believe it holds
// the lock after the server may have given it to someone else.
func wantWithinServer(t *testing.T, d *wireDriver, lk locker.Lock) {
	t.Helper()
	until, server := lk.Until(), d.serverExpiry(t)
	if until.After(server.Add(time.Millisecond)) {
		t.Errorf("the client believes it holds the lock %v after the server expires it (until %v, server %v)",
			until.Sub(server).Round(time.Millisecond), until.Format("15:04:05.000"), server.Format("15:04:05.000"))
	}
}

// TestConcurrentRefreshesApplyInOrder: Refresh(3s) is delayed on the wire
// and Refresh(30s), issued meanwhile, must not overtake it; the server
// would keep the 3s TTL while the client believed 30s. Refreshes of one
// lock are serialised, so the second waits for the first.
func TestConcurrentRefreshesApplyInOrder(t *testing.T) {
	ctx := context.Background()
	d := newWireDriver()
	l := locker.New(d, nil)
	defer l.Close()
	lk, err := l.TryAcquire(ctx, "k", locker.WithTTL(10*time.Second), locker.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	letGo := d.hold(3 * time.Second)
	defer letGo()
	first := make(chan error, 1)
	go func() { first <- lk.Refresh(ctx, 3*time.Second) }()
	if got := <-d.sent; got != 3*time.Second {
		t.Fatalf("first refresh sent with TTL %v", got)
	}

	waiting := make(chan struct{}, 1)
	locker.SetSlotWaitHook(func() {
		select {
		case waiting <- struct{}{}:
		default:
		}
	})
	defer locker.SetSlotWaitHook(nil)
	second := make(chan error, 1)
	go func() { second <- lk.Refresh(ctx, 30*time.Second) }()
	select {
	case <-waiting: // serialised: it waits for the first
	case ttl := <-d.sent:
		t.Errorf("a refresh with TTL %v was sent while another was in flight", ttl)
	}
	letGo()
	if err := <-first; err != nil {
		t.Fatalf("first Refresh = %v", err)
	}
	if err := <-second; err != nil {
		t.Fatalf("second Refresh = %v", err)
	}
	d.landed.Wait()
	wantWithinServer(t, d, lk)
	if left := time.Until(lk.Until()); left < 25*time.Second {
		t.Errorf("after Refresh(30s) the lock is valid for %v more, want about 30s", left)
	}
}

// TestUnknownRefreshCapsValidity: a Refresh(3s) whose caller gave up may
// still reach the server after a later Refresh(30s) succeeded. The lock's
// local validity must not assume more than 3s from then on.
func TestUnknownRefreshCapsValidity(t *testing.T) {
	ctx := context.Background()
	d := newWireDriver()
	l := locker.New(d, nil)
	defer l.Close()
	lk, err := l.TryAcquire(ctx, "k", locker.WithTTL(10*time.Second), locker.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	letGo := d.hold(3 * time.Second)
	defer letGo()
	cctx, cancel := context.WithCancel(ctx)
	first := make(chan error, 1)
	go func() { first <- lk.Refresh(cctx, 3*time.Second) }()
	<-d.sent
	cancel() // the caller gives up; the request stays on the wire
	if err := <-first; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Refresh = %v, want context.Canceled", err)
	}
	if err := lk.Refresh(ctx, 30*time.Second); err != nil {
		t.Fatalf("Refresh(30s) = %v", err)
	}
	<-d.sent
	letGo() // the old request lands last
	d.landed.Wait()
	wantWithinServer(t, d, lk)
	if testClosed(lk.Lost()) {
		t.Error("Lost closed although the lock is still held")
	}
}

// TestWatchdogWaitsForUserRefresh: the watchdog does not refresh a lock
// while the user's Refresh of it is in flight, and the lock stays
// auto-refreshed after it.
func TestWatchdogWaitsForUserRefresh(t *testing.T) {
	ctx := context.Background()
	d := newWireDriver()
	l := locker.New(d, nil)
	defer l.Close()
	const ttl = 150 * time.Millisecond
	lk, err := l.TryAcquire(ctx, "k", locker.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	letGo := d.hold(2 * ttl)
	defer letGo()
	done := make(chan error, 1)
	go func() { done <- lk.Refresh(ctx, 2*ttl) }()
	for got := <-d.sent; got != 2*ttl; got = <-d.sent {
		// A watchdog refresh sent before the user's Refresh began: a
		// stall of this goroutine past ttl/3 lets one through.
	}
	// The watchdog's refresh falls due at ttl/3 and must not be sent while
	// the user's is held; the lock's validity runs out meanwhile (Lost),
	// since its last refresh succeeded long ago.
	select {
	case <-lk.Lost():
	case got := <-d.sent:
		t.Fatalf("the watchdog sent a refresh (TTL %v) while the user's was in flight", got)
	}
	letGo()
	if err := <-done; !errors.Is(err, locker.ErrNotHeld) {
		t.Errorf("Refresh that landed after the validity ran out = %v, want ErrNotHeld", err)
	}
}

// TestBoundedCapsValidity: a driver that knows its lease or session ends
// earlier than the lock's TTL caps the lock's validity, after the
// acquisition and after each refresh.
func TestBoundedCapsValidity(t *testing.T) {
	ctx := context.Background()
	d := newWireDriver()
	var mu sync.Mutex
	bound := time.Now().Add(2 * time.Second)
	d.bound = func() time.Time { mu.Lock(); defer mu.Unlock(); return bound }
	l := locker.New(d, nil)
	defer l.Close()
	lk, err := l.TryAcquire(ctx, "k", locker.WithTTL(10*time.Second), locker.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	if !lk.Until().Equal(bound) {
		t.Errorf("after acquiring, Until = %v, want the lease's bound %v", lk.Until(), bound)
	}
	mu.Lock()
	bound = time.Now().Add(time.Second)
	mu.Unlock()
	if err := lk.Refresh(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	<-d.sent
	if !lk.Until().Equal(bound) {
		t.Errorf("after a refresh, Until = %v, want the lease's bound %v", lk.Until(), bound)
	}
	mu.Lock()
	bound = time.Now().Add(-time.Millisecond) // the lease lapsed
	mu.Unlock()
	if err := lk.Refresh(ctx, 10*time.Second); !errors.Is(err, locker.ErrNotHeld) {
		t.Errorf("Refresh on a lapsed lease = %v, want ErrNotHeld", err)
	}
	<-d.sent
	<-lk.Lost() // the validity is already over: expired at once
}

func testClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestShorteningRefreshCapsValidityInFlight: a Refresh with a TTL shorter
// than the time the lock has left replaces the server's TTL the moment it
// is applied, which may be long before its reply arrives (a slow link),
// or without a reply ever arriving (the client library retrying on another
// connection may then find the key already gone). While it is in flight
// the lock's local validity must already end by its start + TTL.
func TestShorteningRefreshCapsValidityInFlight(t *testing.T) {
	ctx := context.Background()
	d := newWireDriver()
	l := locker.New(d, nil)
	defer l.Close()
	lk, err := l.TryAcquire(ctx, "k", locker.WithTTL(30*time.Second), locker.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	letGo := d.hold(time.Second)
	defer letGo()
	before := time.Now()
	done := make(chan error, 1)
	go func() { done <- lk.Refresh(ctx, time.Second) }()
	<-d.sent // on the wire: the server may apply it at any moment now
	if until := lk.Until(); until.After(before.Add(time.Second)) {
		t.Errorf("while Refresh(1s) is in flight the lock is valid until %v after it was sent, want at most 1s: the server may already have applied it",
			until.Sub(before).Round(time.Millisecond))
	}
	letGo()
	if err := <-done; err != nil {
		t.Fatalf("Refresh(1s) = %v", err)
	}
	wantWithinServer(t, d, lk)
}

// stallDriver holds the watchdog's first batch of refreshes "at the
// server" until the test lets it go or the batch's context ends, and
// records that context's deadline and the batch's outcome. Locks taken
// under keys in bounded are Bounded by the time set there.
type stallDriver struct {
	*memstore.Driver
	bounded map[string]time.Time

	mu       sync.Mutex
	arrived  chan struct{} // closed when the first batch arrives
	letGo    chan struct{} // closed by the test
	done     chan struct{} // closed when the first batch has its outcome
	deadline time.Time     // the first batch's context deadline
	outcome  map[string]error
}

type stallHeld struct {
	backend.Held
	key   string
	until time.Time
}

func (h *stallHeld) ValidUntil() time.Time { return h.until }

func (d *stallDriver) TryAcquire(ctx context.Context, req backend.Request) (backend.Acquisition, error) {
	acq, err := d.Driver.TryAcquire(ctx, req)
	if err == nil {
		acq.Held = &stallHeld{Held: acq.Held, key: req.Key, until: d.bounded[req.Key]}
	}
	return acq, err
}

func (d *stallDriver) RefreshBatch(ctx context.Context, locks []backend.Held, ttls []time.Duration) []error {
	errs := make([]error, len(locks))
	d.mu.Lock()
	first := d.outcome == nil
	if first {
		d.outcome = make(map[string]error)
		d.deadline, _ = ctx.Deadline()
		close(d.arrived)
	}
	d.mu.Unlock()
	if first {
		select {
		case <-d.letGo:
		case <-ctx.Done():
		}
	}
	for i, h := range locks {
		if errs[i] = ctx.Err(); errs[i] == nil {
			errs[i] = h.(*stallHeld).Held.Refresh(ctx, ttls[i])
		}
		if first {
			d.mu.Lock()
			d.outcome[h.(*stallHeld).key] = errs[i]
			d.mu.Unlock()
		}
	}
	if first {
		close(d.done)
	}
	return errs
}

// TestBatchOutlivesItsFirstDeadline: a batch of refreshes may take as long
// as its last lock's validity, not its first's. One lock near the end of
// its validity (here bounded by its lease; in practice a retry after a
// failed refresh) must not cut short the refreshes of the others due with
// it: with 100,000 etcd locks at a 3 s TTL, that made whole batches fail
// and retry together, near their ends, until thousands were lost.
func TestBatchOutlivesItsFirstDeadline(t *testing.T) {
	ctx := context.Background()
	const ttl = 3 * time.Second
	start := time.Now()
	d := &stallDriver{
		Driver:  memstore.NewDriver(memstore.NewStore()),
		bounded: map[string]time.Time{"near": start.Add(ttl/3 + 300*time.Millisecond)},
		arrived: make(chan struct{}),
		letGo:   make(chan struct{}),
		done:    make(chan struct{}),
	}
	l := locker.New(d, nil)
	defer l.Close()
	near, err := l.TryAcquire(ctx, "near", locker.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	far, err := l.TryAcquire(ctx, "far", locker.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	farUntil := far.Until()
	select {
	case <-d.arrived:
	case <-time.After(ttl):
		// Only if more than the batching window (ttl/30) passed between
		// the two acquisitions: they were then refreshed apart.
		t.Fatal("no batch of refreshes reached the driver within a TTL")
	}
	// The near lock's validity runs out while the batch is at the server.
	<-near.Lost()
	close(d.letGo)
	<-d.done
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.deadline.Before(farUntil) {
		t.Errorf("the batch's context ends %v before the far lock's validity: the near lock's deadline cuts the batch short",
			farUntil.Sub(d.deadline).Round(time.Millisecond))
	}
	if err, ok := d.outcome["far"]; !ok || (err != nil && time.Now().Before(farUntil)) {
		t.Errorf("the far lock's refresh in the batch: %v (in the batch: %v), want success", err, ok)
	}
}

// warnCounter counts the warnings a logger receives that contain a text.
type warnCounter struct {
	mu   sync.Mutex
	text string
	n    int
}

func (c *warnCounter) Enabled(context.Context, slog.Level) bool { return true }
func (c *warnCounter) WithAttrs([]slog.Attr) slog.Handler       { return c }
func (c *warnCounter) WithGroup(string) slog.Handler            { return c }
func (c *warnCounter) Handle(_ context.Context, r slog.Record) error {
	if r.Level == slog.LevelWarn && strings.Contains(r.Message, c.text) {
		c.mu.Lock()
		c.n++
		c.mu.Unlock()
	}
	return nil
}

// TestReleaseDuringRefreshIsNoLoss: a lock released while the watchdog's
// refresh of it is on the wire is not reported lost when that refresh
// finds it gone: the holder let it go. (Closing a Locker with many locks
// logged a warning for every lock whose refresh was in flight.)
func TestReleaseDuringRefreshIsNoLoss(t *testing.T) {
	ctx := context.Background()
	d := newWireDriver()
	warns := &warnCounter{text: "lock lost"}
	l := locker.New(d, &locker.Config{Logger: slog.New(warns)})
	const ttl = 300 * time.Millisecond
	lk, err := l.TryAcquire(ctx, "k", locker.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	letGo := d.hold(ttl) // the watchdog's next refresh
	if got := <-d.sent; got != ttl {
		t.Fatalf("first refresh sent with TTL %v, want the watchdog's %v", got, ttl)
	}
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	letGo() // the refresh reaches the store after the release: not held
	d.landed.Wait()
	l.Close() // waits for the watchdog's refresh to finish
	warns.mu.Lock()
	defer warns.mu.Unlock()
	if warns.n != 0 {
		t.Errorf("%d warnings of a lost lock for a lock released while its refresh was in flight, want none", warns.n)
	}
}
