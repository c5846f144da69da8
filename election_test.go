package locker_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distlock/locker"
	"github.com/distlock/locker/backend"
	"github.com/distlock/locker/internal/memstore"
	"github.com/distlock/locker/memory"
)

// TestValues: a hold's value is stored, reported by Inspect, replaced by
// SetValue, and checked against the backend's limit before anything is
// sent.
func TestValues(t *testing.T) {
	ctx := context.Background()
	l := memory.New(&memory.Options{Store: memory.NewStore()})
	defer l.Close()
	max := l.Capabilities().MaxValueLen
	if max <= 0 {
		t.Fatalf("memory's MaxValueLen = %d, want a limit", max)
	}
	if _, err := l.Acquire(ctx, "v", locker.WithValue(make([]byte, max+1))); !errors.Is(err, locker.ErrInvalidValue) ||
		!strings.Contains(err.Error(), "longer than") {
		t.Fatalf("Acquire with a value over the limit: %v, want ErrInvalidValue naming the limit", err)
	}
	v := []byte("host-a:8080")
	lk, err := l.Acquire(ctx, "v", locker.WithValue(v))
	if err != nil {
		t.Fatal(err)
	}
	v[0] = 'X' // the option copied it
	h, err := locker.Inspect(ctx, l, "v")
	if err != nil || string(h.Value) != "host-a:8080" || string(h.Holds[0].Value) != "host-a:8080" {
		t.Fatalf("Inspect = %q, %+v, %v; want the value", h.Value, h.Holds, err)
	}
	if err := lk.SetValue(ctx, []byte("host-b")); err != nil {
		t.Fatal(err)
	}
	if h, _ := locker.Inspect(ctx, l, "v"); string(h.Value) != "host-b" {
		t.Fatalf("after SetValue, Inspect = %q", h.Value)
	}
	if err := lk.SetValue(ctx, make([]byte, max+1)); !errors.Is(err, locker.ErrInvalidValue) {
		t.Fatalf("SetValue over the limit: %v", err)
	}
	if h, _ := locker.Inspect(ctx, l, "v"); string(h.Value) != "host-b" {
		t.Fatalf("a refused SetValue changed the value to %q", h.Value)
	}
	lk.Release(ctx)
	if err := lk.SetValue(ctx, []byte("late")); !errors.Is(err, locker.ErrNotHeld) {
		t.Fatalf("SetValue after Release: %v, want ErrNotHeld", err)
	}
}

// TestValueUnsupported: a backend that stores no values refuses them by
// name, before its driver sees the request.
func TestValueUnsupported(t *testing.T) {
	d := &noValues{mutexOnly{Driver: memstore.NewDriver(memstore.NewStore())}}
	l := locker.New(d, nil)
	defer l.Close()
	_, err := l.Acquire(context.Background(), "k", locker.WithValue([]byte("x")))
	if !errors.Is(err, locker.ErrUnsupported) || !strings.Contains(err.Error(), "stores no values") {
		t.Fatalf("err = %v", err)
	}
	if d.calls.Load() != 0 {
		t.Fatalf("the driver saw %d requests", d.calls.Load())
	}
	// An empty value is none, and needs no support.
	lk, err := l.Acquire(context.Background(), "k", locker.WithValue(nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := lk.SetValue(context.Background(), []byte("x")); !errors.Is(err, locker.ErrUnsupported) {
		t.Fatalf("SetValue: %v", err)
	}
	lk.Release(context.Background())
}

// noValues is the memory driver storing no values, as a driver written
// before values existed.
type noValues struct{ mutexOnly }

func (d *noValues) Capabilities() backend.Capabilities {
	c := d.mutexOnly.Capabilities()
	c.MaxValueLen = 0
	return c
}

// TestOwnerReentrancy: an owner's second Acquire of a key it holds returns
// at once with a new handle; the key is held until the last handle is
// released; another owner, or no owner, waits.
func TestOwnerReentrancy(t *testing.T) {
	ctx := context.Background()
	store := memory.NewStore()
	l := memory.New(&memory.Options{Store: store})
	defer l.Close()
	octx := locker.WithOwner(ctx, "job-7")
	a, err := l.Acquire(octx, "r")
	if err != nil {
		t.Fatal(err)
	}
	b, err := l.Acquire(octx, "r") // would wait for itself without an owner
	if err != nil {
		t.Fatal(err)
	}
	if locker.HoldCount(b) != 2 || a.Token() != b.Token() || a.Lost() != b.Lost() {
		t.Fatalf("handles: count %d, tokens %s %s", locker.HoldCount(b), a.Token(), b.Token())
	}
	fa, _ := a.Fence()
	fb, _ := b.Fence()
	if fa != fb {
		t.Fatalf("fences %d and %d: the handles share one hold", fa, fb)
	}
	// Another owner, and a caller with no owner, are other clients.
	tctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := l.Acquire(locker.WithOwner(tctx, "job-8"), "r"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("another owner: %v, want it to wait", err)
	}
	if _, err := l.TryAcquire(ctx, "r"); !errors.Is(err, locker.ErrNotAcquired) {
		t.Fatalf("no owner: %v", err)
	}
	// The same owner through another Locker of the store is another client.
	l2 := memory.New(&memory.Options{Store: store})
	defer l2.Close()
	if _, err := l2.TryAcquire(octx, "r"); !errors.Is(err, locker.ErrNotAcquired) {
		t.Fatalf("same owner, other Locker: %v", err)
	}
	// A semaphore request is not covered by the owner's exclusive hold
	// (nor a shared one: TestOwnerRefusesDowngrade).
	if _, err := l.TryAcquire(octx, "r", locker.Limit(2)); !errors.Is(err, locker.ErrKindMismatch) {
		t.Fatalf("semaphore request under an exclusive hold: %v", err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	if _, err := l.TryAcquire(ctx, "r"); !errors.Is(err, locker.ErrNotAcquired) {
		t.Fatalf("after 1 of 2 handles released, the key is free: %v", err)
	}
	if err := a.Release(ctx); !errors.Is(err, locker.ErrNotHeld) {
		t.Fatalf("a handle released twice: %v", err)
	}
	if b.Err() != nil {
		t.Fatalf("the last handle lost the hold: %v", b.Err())
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := l.TryAcquire(ctx, "r")
	if err != nil {
		t.Fatalf("after the last handle: %v", err)
	}
	c.Release(ctx)

	// A shared holder asking for the exclusive hold would wait for itself.
	r, err := l.Acquire(octx, "u", locker.Shared())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release(ctx)
	if _, err := l.Acquire(octx, "u"); !errors.Is(err, locker.ErrKindMismatch) || !strings.Contains(err.Error(), "does not cover") {
		t.Fatalf("upgrade: %v", err)
	}
}

// TestOwnerConcurrentFirst: while an owner's first Acquire waits, its
// second waits for the first's outcome and then shares the hold; a
// TryAcquire meanwhile fails.
func TestOwnerConcurrentFirst(t *testing.T) {
	ctx := context.Background()
	l := memory.New(&memory.Options{Store: memory.NewStore()})
	defer l.Close()
	blocker, err := l.Acquire(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	octx := locker.WithOwner(ctx, "o")
	first := make(chan locker.Lock, 1)
	go func() {
		lk, err := l.Acquire(octx, "q")
		if err != nil {
			t.Error(err)
		}
		first <- lk
	}()
	// The first is queued once the key shows a waiter.
	for {
		h, _ := locker.Inspect(ctx, l, "q")
		if h.Waiters == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := l.TryAcquire(octx, "q"); !errors.Is(err, locker.ErrNotAcquired) || !strings.Contains(err.Error(), "still acquiring") {
		t.Fatalf("TryAcquire while the owner's first waits: %v", err)
	}
	second := make(chan locker.Lock, 1)
	go func() {
		lk, err := l.Acquire(octx, "q")
		if err != nil {
			t.Error(err)
		}
		second <- lk
	}()
	blocker.Release(ctx)
	a, b := <-first, <-second
	if a == nil || b == nil || a.Token() != b.Token() || locker.HoldCount(a) != 2 {
		t.Fatalf("the owner's two acquisitions do not share one hold")
	}
	a.Release(ctx)
	b.Release(ctx)
}

// TestElection: one leader at a time, terms in order, Proclaim seen by
// Leader and Observe, Resign hands over, observe sees each change.
func TestElection(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store := memory.NewStore()
	la := memory.New(&memory.Options{Store: store})
	lb := memory.New(&memory.Options{Store: store})
	defer la.Close()
	defer lb.Close()
	ea := locker.NewElection(la, "leader")
	eb := locker.NewElection(lb, "leader")
	if _, err := ea.Leader(ctx); !errors.Is(err, locker.ErrNoLeader) {
		t.Fatalf("Leader before any campaign: %v", err)
	}
	obs := eb.Observe(ctx)
	lead, err := ea.Campaign(ctx, []byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ea.Campaign(ctx, []byte("a")); err == nil || !strings.Contains(err.Error(), "leads already") {
		t.Fatalf("second Campaign while leading: %v", err)
	}
	term1, _ := lead.Fence()
	want := func(value string, term uint64) {
		t.Helper()
		select {
		case ldr := <-obs:
			if string(ldr.Value) != value || !ldr.Termed || ldr.Term != term {
				t.Fatalf("observed %q term %d (%v), want %q term %d", ldr.Value, ldr.Term, ldr.Termed, value, term)
			}
		case <-ctx.Done():
			t.Fatalf("observer never saw %q", value)
		}
	}
	want("a", term1)
	if ldr, err := eb.Leader(ctx); err != nil || string(ldr.Value) != "a" || ldr.Term != term1 || ldr.Token != lead.Token() {
		t.Fatalf("Leader = %+v, %v", ldr, err)
	}
	if err := ea.Proclaim(ctx, []byte("a2")); err != nil {
		t.Fatal(err)
	}
	want("a2", term1)
	if err := eb.Proclaim(ctx, []byte("b")); !errors.Is(err, locker.ErrNotHeld) {
		t.Fatalf("Proclaim by a non-leader: %v", err)
	}
	won := make(chan locker.Lock, 1)
	go func() {
		lk, err := eb.Campaign(ctx, []byte("b"))
		if err != nil {
			t.Error(err)
		}
		won <- lk
	}()
	select {
	case <-won:
		t.Fatal("a second leader while the first leads")
	case <-time.After(20 * time.Millisecond):
	}
	if err := ea.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if ea.Leading() != nil {
		t.Fatal("Leading after Resign")
	}
	b := <-won
	term2, _ := b.Fence()
	if term2 <= term1 {
		t.Fatalf("terms %d then %d", term1, term2)
	}
	want("b", term2)
	if err := ea.Resign(ctx); err != nil {
		t.Fatalf("Resign when not leading: %v", err)
	}
	if _, err := locker.NewElection(la, "x", locker.Shared()).Campaign(ctx, nil); err == nil || !strings.Contains(err.Error(), "alone") {
		t.Fatalf("a shared campaign: %v", err)
	}
	cancel()
	for range obs { // closed once ctx ends
	}
}

// TestOwnerHoldLost: once an owner's hold is lost, the owner's next
// Acquire takes a new hold; releasing the old handles touches nothing of
// it.
func TestOwnerHoldLost(t *testing.T) {
	ctx := context.Background()
	l := memory.New(&memory.Options{Store: memory.NewStore()})
	defer l.Close()
	octx := locker.WithOwner(ctx, "o")
	a, err := l.Acquire(octx, "k", locker.WithTTL(30*time.Millisecond), locker.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	b, err := l.Acquire(octx, "k")
	if err != nil {
		t.Fatal(err)
	}
	<-a.Lost() // the validity runs out: no refresh
	c, err := l.Acquire(octx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if c.Token() == a.Token() || locker.HoldCount(c) != 1 {
		t.Fatalf("after the loss: token %s (old %s), count %d; want a new hold", c.Token(), a.Token(), locker.HoldCount(c))
	}
	for _, old := range []locker.Lock{a, b} {
		if err := old.Release(ctx); !errors.Is(err, locker.ErrNotHeld) {
			t.Fatalf("releasing a handle of the lost hold: %v, want ErrNotHeld", err)
		}
	}
	if c.Err() != nil {
		t.Fatalf("the new hold was touched: %v", c.Err())
	}
	if _, err := l.TryAcquire(ctx, "k"); !errors.Is(err, locker.ErrNotAcquired) {
		t.Fatalf("the new hold is not held: %v", err)
	}
	c.Release(ctx)
}

// TestOwnerNestedDo: Do under an owner nests; the key stays held until the
// outer Do returns.
func TestOwnerNestedDo(t *testing.T) {
	ctx := locker.WithOwner(context.Background(), "o")
	l := memory.New(&memory.Options{Store: memory.NewStore()})
	defer l.Close()
	err := locker.Do(ctx, l, "k", func(ctx context.Context, outer locker.Lock) error {
		err := locker.Do(ctx, l, "k", func(ctx context.Context, inner locker.Lock) error {
			if inner.Token() != outer.Token() {
				return errors.New("the inner Do took another hold")
			}
			return nil
		})
		if err != nil {
			return err
		}
		if outer.Err() != nil {
			return errors.New("the inner Do's release ended the hold")
		}
		_, err = l.TryAcquire(context.Background(), "k")
		if !errors.Is(err, locker.ErrNotAcquired) {
			return errors.New("the key was free inside the outer Do")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	lk, err := l.TryAcquire(context.Background(), "k")
	if err != nil {
		t.Fatalf("after the outer Do: %v", err)
	}
	lk.Release(context.Background())
}

// TestOwnerClose: Close ends an owner's waiting acquisitions and releases
// its hold; later ones fail with ErrClosed.
func TestOwnerClose(t *testing.T) {
	ctx := context.Background()
	store := memory.NewStore()
	other := memory.New(&memory.Options{Store: store})
	defer other.Close()
	blocker, err := other.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	l := memory.New(&memory.Options{Store: store})
	octx := locker.WithOwner(ctx, "o")
	h, err := l.Acquire(octx, "held")
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := l.Acquire(octx, "k")
			errs <- err
		}()
	}
	for {
		if hd, _ := locker.Inspect(ctx, other, "k"); hd.Waiters == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	l.Close()
	for range 2 {
		if err := <-errs; !errors.Is(err, locker.ErrClosed) {
			t.Fatalf("a waiting owner's Acquire after Close: %v", err)
		}
	}
	<-h.Lost()
	if _, err := l.Acquire(octx, "held"); !errors.Is(err, locker.ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
	if lk, err := other.TryAcquire(ctx, "held"); err != nil {
		t.Fatalf("the closed Locker's owner hold was not released: %v", err)
	} else {
		lk.Release(ctx)
	}
	blocker.Release(ctx)
}

// TestOwnersExclude: goroutines of two owners acquire and release one key
// at once, so that a last handle's release races its owner's next
// acquisition and the other owner's: at no moment do two owners hold
// handles, and the key is free at the end.
func TestOwnersExclude(t *testing.T) {
	ctx := context.Background()
	l := memory.New(&memory.Options{Store: memory.NewStore()})
	defer l.Close()
	var (
		mu     sync.Mutex
		inside = map[string]int{} // handles held, by owner
	)
	enter := func(owner string) {
		mu.Lock()
		defer mu.Unlock()
		for o, n := range inside {
			if o != owner && n > 0 {
				t.Errorf("owners %s and %s hold the key at once", o, owner)
			}
		}
		inside[owner]++
	}
	leave := func(owner string) {
		mu.Lock()
		inside[owner]--
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for _, owner := range []string{"a", "b"} {
		octx := locker.WithOwner(ctx, owner)
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 100 {
					lk, err := l.Acquire(octx, "k")
					if err != nil {
						t.Error(err)
						return
					}
					enter(owner)
					leave(owner) // before the release: the handle no longer counts
					if err := lk.Release(ctx); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	lk, err := l.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatalf("after every release: %v", err)
	}
	lk.Release(ctx)
}

// TestRunResignsOnPanic: a panic in Run's lead, recovered further up,
// leaves the name free and reaches the recoverer unchanged, as Do's does.
func TestRunResignsOnPanic(t *testing.T) {
	wantFreeAfterPanic(t, "Run", func(ctx context.Context, l locker.Locker, fn func(context.Context, locker.Lock) error) {
		locker.NewElection(l, "panics").Run(ctx, nil, fn)
	})
}

// TestRunReturns: Run campaigns again after lead returns nil, and
// returns the error lead returns while it leads, having resigned; bad
// input is an error naming it.
func TestRunReturns(t *testing.T) {
	ctx := context.Background()
	l := memory.New(&memory.Options{Store: memory.NewStore()})
	defer l.Close()
	e := locker.NewElection(l, "runs")
	done := errors.New("done")
	var terms []uint64
	err := e.Run(ctx, []byte("v"), func(ctx context.Context, lead locker.Lock) error {
		term, _ := lead.Fence()
		terms = append(terms, term)
		if len(terms) < 3 {
			return nil
		}
		return done
	})
	if !errors.Is(err, done) {
		t.Fatalf("Run = %v, want lead's error", err)
	}
	if len(terms) != 3 || terms[0] >= terms[1] || terms[1] >= terms[2] {
		t.Errorf("Run led in the terms %v, want 3 increasing", terms)
	}
	if e.Leading() != nil {
		t.Error("the Election leads after Run returned")
	}
	if _, err := e.Leader(ctx); !errors.Is(err, locker.ErrNoLeader) {
		t.Errorf("Leader after Run returned: %v, want ErrNoLeader", err)
	}
	if err := e.Run(ctx, nil, nil); err == nil || !strings.Contains(err.Error(), "nil lead") {
		t.Errorf("Run with a nil lead: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := e.Run(cctx, nil, func(context.Context, locker.Lock) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Errorf("Run under a cancelled context: %v", err)
	}
}
