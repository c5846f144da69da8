package locker_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/distlock/locker"
	"github.com/distlock/locker/backend"
	"github.com/distlock/locker/internal/memstore"
	"github.com/distlock/locker/internal/testenv"
	"github.com/distlock/locker/memory"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestOpenErrors(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		url  string
		want []string // substrings the error must contain
	}{
		{"", []string{"empty URL", "memory"}},
		{"::not a url", []string{"malformed URL"}},
		{"localhost:6379", []string{"unknown scheme", "memory"}},
		{"nosuch://host", []string{`unknown scheme "nosuch"`, "registered schemes: memory"}},
		{"memory://?colour=blue", []string{`invalid query parameter "colour"`, "known: prefix, ttl"}},
		{"memory://?a=1&b=2", []string{`invalid query parameters ["a" "b"]`}},
		{"memory://?ttl=soon", []string{`ttl="soon"`, "duration"}},
		{"memory://?ttl=-1s", []string{"ttl", "positive"}},
		{"memory://?ttl=0s", []string{"ttl", "positive"}},
		{"memory://x/some/path", []string{"unexpected path"}},
		{"memory://user:secret@x?bad=1", []string{"bad", "xxxxx"}},
	}
	for _, tt := range tests {
		l, err := locker.Open(ctx, tt.url)
		if err == nil {
			l.Close()
			t.Errorf("Open(%q) succeeded, want an error", tt.url)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("Open(%q) = %q, want it to mention %q", tt.url, err, w)
			}
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("Open(%q) error leaks the password: %q", tt.url, err)
		}
	}
}

func TestOpenSharedParams(t *testing.T) {
	ctx := context.Background()
	a, err := locker.Open(ctx, "memory://params?ttl=150ms&prefix=app1/")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := locker.Open(ctx, "memory://params?prefix=app2/")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	lk, err := a.TryAcquire(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if lk.Key() != "job" {
		t.Errorf("Key() = %q, want the key without prefix", lk.Key())
	}
	if d, err := lk.TTL(ctx); err != nil || d > 150*time.Millisecond {
		t.Errorf("TTL() = %v, %v; want at most the URL's ttl=150ms", d, err)
	}
	// Another prefix is another namespace.
	lk2, err := b.TryAcquire(ctx, "job")
	if err != nil {
		t.Errorf("prefix app2/ collides with prefix app1/: %v", err)
	} else {
		lk2.Release(ctx)
	}
	lk.Release(ctx)
}

func TestErrorsNameOpAndKey(t *testing.T) {
	ctx := context.Background()
	l := memory.New(&memory.Options{Store: memory.NewStore()})
	defer l.Close()
	lk, err := l.TryAcquire(ctx, "orders/42")
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.TryAcquire(ctx, "orders/42")
	var oe *locker.OpError
	if !errors.As(err, &oe) || oe.Op != "try-acquire" || oe.Key != "orders/42" {
		t.Fatalf("error %v is not an *OpError for try-acquire of orders/42", err)
	}
	if !errors.Is(err, locker.ErrNotAcquired) {
		t.Errorf("errors.Is(%v, ErrNotAcquired) = false", err)
	}
	if want := `locker: try-acquire "orders/42": lock not acquired`; !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error = %q, want prefix %q", err, want)
	}
	lk.Release(ctx)

	huge := strings.Repeat("x", 1<<20)
	_, err = l.TryAcquire(ctx, huge)
	if !errors.Is(err, locker.ErrInvalidKey) || len(err.Error()) > 300 {
		t.Errorf("1 MiB key: error %.300q, want a short ErrInvalidKey", err)
	}
}

func TestDo(t *testing.T) {
	ctx := context.Background()
	l := memory.New(&memory.Options{Store: memory.NewStore()})
	defer l.Close()

	// fn runs exclusively: concurrent Do calls never overlap.
	var mu sync.Mutex
	inside, maxInside := 0, 0
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := locker.Do(ctx, l, "do", func(ctx context.Context, lk locker.Lock) error {
				mu.Lock()
				inside++
				maxInside = max(maxInside, inside)
				mu.Unlock()
				time.Sleep(time.Millisecond) // the work
				mu.Lock()
				inside--
				mu.Unlock()
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if maxInside != 1 {
		t.Errorf("%d Do bodies ran at once, want 1", maxInside)
	}

	// Acquire failure is returned and fn does not run.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	ran := false
	err := locker.Do(cctx, l, "do", func(context.Context, locker.Lock) error { ran = true; return nil })
	if ran || !errors.Is(err, context.Canceled) {
		t.Errorf("Do with a cancelled context: ran=%v err=%v", ran, err)
	}

	// fn cancelling its own work does not stop the release.
	err = locker.Do(ctx, l, "do", func(ctx context.Context, lk locker.Lock) error {
		return nil
	})
	if err != nil {
		t.Errorf("Do = %v", err)
	}
	lk, err := l.TryAcquire(ctx, "do")
	if err != nil {
		t.Fatalf("Do left the key held: %v", err)
	}
	lk.Release(ctx)
}

// countingDriver counts refresh round trips and can refresh in batches.
type countingDriver struct {
	*memstore.Driver
	mu      sync.Mutex
	single  int
	batches []int
}

func (d *countingDriver) TryAcquire(ctx context.Context, req backend.Request) (backend.Acquisition, error) {
	acq, err := d.Driver.TryAcquire(ctx, req)
	if err == nil {
		acq.Held = &countingHeld{Held: acq.Held, d: d}
	}
	return acq, err
}

func (d *countingDriver) RefreshBatch(ctx context.Context, locks []backend.Held, ttls []time.Duration) []error {
	d.mu.Lock()
	d.batches = append(d.batches, len(locks))
	d.mu.Unlock()
	errs := make([]error, len(locks))
	for i, h := range locks {
		errs[i] = h.(*countingHeld).Held.Refresh(ctx, ttls[i])
	}
	return errs
}

type countingHeld struct {
	backend.Held
	d *countingDriver
}

func (h *countingHeld) Refresh(ctx context.Context, ttl time.Duration) error {
	h.d.mu.Lock()
	h.d.single++
	h.d.mu.Unlock()
	return h.Held.Refresh(ctx, ttl)
}

// TestWatchdogBatches checks that locks due together are refreshed in one
// batch by one watchdog, and stay held.
func TestWatchdogBatches(t *testing.T) {
	ctx := context.Background()
	d := &countingDriver{Driver: memstore.NewDriver(memstore.NewStore())}
	l := locker.New(d, nil)
	defer l.Close()
	const n, ttl = 20, 300 * time.Millisecond
	var locks []locker.Lock
	for i := range n {
		lk, err := l.TryAcquire(ctx, "batch/"+string(rune('a'+i)), locker.WithTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		locks = append(locks, lk)
	}
	// Two refresh periods, and half of one: between two rounds.
	time.Sleep(5 * ttl / 6)
	// What the watchdog did while all were held: a round during the
	// releases below may find a single lock left.
	d.mu.Lock()
	single, batches := d.single, slices.Clone(d.batches)
	d.mu.Unlock()
	for _, lk := range locks {
		if _, err := lk.TTL(ctx); err != nil {
			t.Fatalf("lock %s lost under the watchdog: %v", lk.Key(), err)
		}
		lk.Release(ctx)
	}
	if single != 0 {
		t.Errorf("%d single refreshes, want all batched", single)
	}
	total := 0
	for _, b := range batches {
		total += b
	}
	if len(batches) == 0 || total < n || len(batches) >= total {
		t.Errorf("batches %v: want the %d locks refreshed in batches of several", batches, n)
	}
}

func TestLoggerSeesFailedRefresh(t *testing.T) {
	ctx := context.Background()
	var buf testenv.SyncBuffer
	d := memstore.NewDriver(memstore.NewStore())
	l := locker.New(d, &locker.Config{Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	defer l.Close()
	// Long enough that a refresh is tried before the validity runs out,
	// even a few hundred ms late.
	lk, err := l.Acquire(ctx, "k", locker.WithTTL(600*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	d.Crash()
	<-lk.Lost()
	if !strings.Contains(buf.String(), "refresh failed") {
		t.Errorf("log %q does not report the failed refresh", buf.String())
	}
}

// expiringDriver's locks count their Expire calls; a release can be made
// to fail in transit, leaving the lock on the (memory) server.
type expiringDriver struct {
	*memstore.Driver
	failRelease atomic.Bool
	last        atomic.Pointer[expiringHeld]
}

func (d *expiringDriver) TryAcquire(ctx context.Context, req backend.Request) (backend.Acquisition, error) {
	acq, err := d.Driver.TryAcquire(ctx, req)
	if err == nil {
		h := &expiringHeld{Held: acq.Held, d: d}
		d.last.Store(h)
		acq.Held = h
	}
	return acq, err
}

type expiringHeld struct {
	backend.Held
	d       *expiringDriver
	expired atomic.Int32
}

func (h *expiringHeld) Release(ctx context.Context) error {
	if h.d.failRelease.Load() {
		return errors.New("connection reset")
	}
	return h.Held.Release(ctx)
}

func (h *expiringHeld) Expire() { h.expired.Add(1) }

// TestExpirer: a driver's Expire is called once when a lock's validity runs
// out without a refresh, and when a release that failed in transit may
// have left the lock behind; never after a release that succeeded, nor
// while the watchdog keeps the lock.
func TestExpirer(t *testing.T) {
	ctx := context.Background()
	const ttl = 200 * time.Millisecond
	cases := []struct {
		name        string
		opts        []locker.Option
		release     bool // release before the TTL runs out
		failRelease bool
		want        int32
	}{
		{"unrefreshed", []locker.Option{locker.WithAutoRefresh(false)}, false, false, 1},
		{"released", []locker.Option{locker.WithAutoRefresh(false)}, true, false, 0},
		{"release-failed", []locker.Option{locker.WithAutoRefresh(false)}, true, true, 1},
		{"refreshed", nil, false, false, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := &expiringDriver{Driver: memstore.NewDriver(memstore.NewStore())}
			d.failRelease.Store(c.failRelease)
			l := locker.New(d, nil)
			defer l.Close()
			lk, err := l.TryAcquire(ctx, "k", append(c.opts, locker.WithTTL(ttl))...)
			if err != nil {
				t.Fatal(err)
			}
			if c.release {
				err := lk.Release(ctx)
				if c.failRelease != (err != nil) {
					t.Fatalf("Release = %v", err)
				}
			}
			if c.want > 0 {
				// Expire runs at the validity deadline: wait for it
				// rather than for a fixed time a loaded machine may miss.
				testenv.WaitFor(t, 10*time.Second, "Expire called", func() bool { return d.last.Load().expired.Load() >= c.want })
			} else {
				time.Sleep(3 * ttl) // time for a wrong Expire to happen
			}
			if !c.release && c.want == 0 {
				if testenv.Closed(lk.Lost()) {
					t.Fatal("Lost closed under the watchdog")
				}
			}
			d.failRelease.Store(false)
			lk.Release(ctx)
			if got := d.last.Load().expired.Load(); got != c.want {
				t.Errorf("Expire called %d times, want %d", got, c.want)
			}
		})
	}
}

// TestDoReleasesOnPanic: a panic in fn, recovered further up (as net/http
// recovers a handler's), leaves no lock behind and no goroutine running
// (TestMain checks for leaks), and reaches the recoverer unchanged.
func TestDoReleasesOnPanic(t *testing.T) {
	wantFreeAfterPanic(t, "Do", func(ctx context.Context, l locker.Locker, fn func(context.Context, locker.Lock) error) {
		locker.Do(ctx, l, "panics", fn)
	})
}

// wantFreeAfterPanic checks that call, which holds the key "panics" of l
// while it calls fn, lets the panic of fn reach the recoverer unchanged
// and leaves the key free.
func wantFreeAfterPanic(t *testing.T, what string, call func(ctx context.Context, l locker.Locker, fn func(context.Context, locker.Lock) error)) {
	t.Helper()
	ctx := context.Background()
	l := memory.New(&memory.Options{Store: memory.NewStore()})
	defer l.Close()
	type boom struct{}
	func() {
		defer func() {
			if r := recover(); r != (boom{}) {
				t.Errorf("recovered %v, want fn's own panic value", r)
			}
		}()
		call(ctx, l, func(context.Context, locker.Lock) error { panic(boom{}) })
		t.Errorf("%s returned although fn panicked", what)
	}()
	lk, err := l.TryAcquire(ctx, "panics")
	if err != nil {
		t.Fatalf("after a panic in %s's fn the key is still held: %v", what, err)
	}
	lk.Release(ctx)
}

// pollingDriver hides the memory driver's native wait, so that waiting is
// package locker's own poll loop; refused reports each refused attempt.
type pollingDriver struct {
	d       *memstore.Driver
	refused chan struct{}
}

func (p *pollingDriver) TryAcquire(ctx context.Context, req backend.Request) (backend.Acquisition, error) {
	acq, err := p.d.TryAcquire(ctx, req)
	if errors.Is(err, locker.ErrNotAcquired) {
		select {
		case p.refused <- struct{}{}:
		default:
		}
	}
	return acq, err
}
func (p *pollingDriver) Capabilities() backend.Capabilities { return p.d.Capabilities() }
func (p *pollingDriver) Close() error                       { return p.d.Close() }

// TestCloseEndsPendingAcquire: Close ends Acquire calls waiting on a key,
// natively or by polling, with an error wrapping ErrClosed, and the waiter
// leaves nothing behind.
func TestCloseEndsPendingAcquire(t *testing.T) {
	ctx := context.Background()
	store := memory.NewStore()
	holder := memory.New(&memory.Options{Store: store})
	defer holder.Close()
	lk, err := holder.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	p := &pollingDriver{d: memstore.NewDriver(store), refused: make(chan struct{}, 1)}
	waiter := locker.New(p, nil)
	done := make(chan error, 1)
	go func() {
		_, err := waiter.Acquire(ctx, "k")
		done <- err
	}()
	<-p.refused // waiting
	closed := make(chan error, 1)
	go func() { closed <- waiter.Close() }()
	// Without the Close reaching it, the waiter would sleep until its next
	// poll, up to a second away, then fail on the closed driver, and Close
	// would wait for it for 10s.
	select {
	case err := <-done:
		if !errors.Is(err, locker.ErrClosed) {
			t.Errorf("pending Acquire after Close = %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("pending Acquire did not return within 5s of Close")
	}
	if err := <-closed; err != nil {
		t.Errorf("Close = %v", err)
	}
	lk.Release(ctx)
	lk2, err := holder.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatalf("after the closed waiter, the key is not free: %v", err)
	}
	lk2.Release(ctx)
}
