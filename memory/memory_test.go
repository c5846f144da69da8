package memory_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/distlock/locker"
	"github.com/distlock/locker/conformance"
	"github.com/distlock/locker/internal/memstore"
	"github.com/distlock/locker/internal/testenv"
	"github.com/distlock/locker/memory"
	"go.uber.org/goleak"
)

// harness makes clients of one Store, each of which can crash.
func harness() conformance.Harness {
	s := memory.NewStore()
	return conformance.Harness{
		NewClient: func(context.Context) (conformance.Client, error) {
			c := memory.NewClient(&memory.Options{Store: s})
			return conformance.Client{Locker: c.Locker, Crash: c.Crash}, nil
		},
		TTL: 250 * time.Millisecond,
	}
}

func TestConformance(t *testing.T) {
	conformance.Run(t, harness())
}

// TestConformanceURL runs the suite through Open, as lockctl check does:
// the clients share the named store, and crash as Client.Crash does.
func TestConformanceURL(t *testing.T) {
	h := conformance.URLHarness("memory://conformance-url?prefix=app/")
	h.TTL = 250 * time.Millisecond
	conformance.Run(t, h)
}

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestFIFOHandOff checks that blocked Acquire calls get the key in the
// order they queued.
func TestFIFOHandOff(t *testing.T) {
	ctx := context.Background()
	s := memory.NewStore()
	queued := make(chan struct{})
	memstore.SetHooks(t, s, memstore.Hooks{Queued: func(string) { queued <- struct{}{} }})
	l := memory.New(&memory.Options{Store: s})
	defer l.Close()
	first, err := l.Acquire(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	const n = 5
	order := make(chan int, n)
	for i := range n {
		go func() {
			lk, err := l.Acquire(ctx, "q")
			if err != nil {
				t.Error(err)
				return
			}
			order <- i
			lk.Release(ctx)
		}()
		<-queued // waiter i is in the queue before waiter i+1 starts
	}
	first.Release(ctx)
	for want := range n {
		if got := <-order; got != want {
			t.Fatalf("waiter %d got the key in turn %d: not FIFO", got, want)
		}
	}
}

// TestPausedHolder: a paused client's lock expires in the store and goes
// to the waiter, whose fence is higher; the paused client's Lost closes at
// its local deadline, and once resumed it finds the lock gone.
func TestPausedHolder(t *testing.T) {
	ctx := context.Background()
	s := memory.NewStore()
	a, b := memory.NewClient(&memory.Options{Store: s}), memory.NewClient(&memory.Options{Store: s})
	defer a.Close()
	defer b.Close()
	const ttl = 100 * time.Millisecond
	lk, err := a.Acquire(ctx, "k", locker.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	a.Pause()
	// Refreshes wait: the store lets the lock go at its TTL.
	lk2, err := b.Acquire(ctx, "k", locker.WithTTL(time.Minute))
	if err != nil {
		t.Fatalf("Acquire behind a paused holder: %v", err)
	}
	defer lk2.Release(ctx)
	select {
	case <-lk.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("the paused holder's Lost still open after its lock went to another")
	}
	f1, _ := lk.Fence()
	f2, _ := lk2.Fence()
	if f2 <= f1 {
		t.Errorf("fence of the next holder %d, not above the paused holder's %d", f2, f1)
	}
	// A paused client's calls wait, until their context ends...
	tctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	_, err = a.TryAcquire(tctx, "other")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("TryAcquire by a paused client = %v, want it to wait until its deadline", err)
	}
	// ... or it resumes.
	a.Resume()
	if err := lk.Release(ctx); !errors.Is(err, locker.ErrNotHeld) {
		t.Fatalf("Release by the resumed holder = %v, want ErrNotHeld", err)
	}
	lk3, err := a.TryAcquire(ctx, "other")
	if err != nil {
		t.Fatalf("TryAcquire after Resume: %v", err)
	}
	lk3.Release(ctx)
}

// TestPausedWaiter: a grant that reaches a paused waiter is read on
// Resume; a paused waiter whose context ends hands the grant on.
func TestPausedWaiter(t *testing.T) {
	ctx := context.Background()
	s := memory.NewStore()
	holder, a, b := memory.NewClient(&memory.Options{Store: s}), memory.NewClient(&memory.Options{Store: s}), memory.NewClient(&memory.Options{Store: s})
	for _, c := range []*memory.Client{holder, a, b} {
		defer c.Close()
	}
	queued := make(chan struct{}, 2)
	memstore.SetHooks(t, s, memstore.Hooks{Queued: func(string) { queued <- struct{}{} }})
	lk, err := holder.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithCancel(ctx)
	aDone := make(chan error, 1)
	go func() {
		_, err := a.Acquire(actx, "k")
		aDone <- err
	}()
	<-queued
	bDone := make(chan locker.Lock, 1)
	go func() {
		lk, err := b.Acquire(ctx, "k")
		if err != nil {
			t.Error(err)
		}
		bDone <- lk
	}()
	<-queued
	a.Pause()
	lk.Release(ctx) // the key goes to a, first in the queue, but a is paused
	select {
	case err := <-aDone:
		t.Fatalf("a paused waiter's Acquire returned %v before Resume or its context's end", err)
	case <-time.After(20 * time.Millisecond):
	}
	cancel()
	if err := <-aDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("paused waiter's Acquire after its context ended = %v, want context.Canceled", err)
	}
	select {
	case lkB := <-bDone:
		lkB.Release(ctx)
	case <-time.After(10 * time.Second):
		t.Fatal("the grant declined by the paused waiter did not go on to the next")
	}
}

// TestCloseWhilePaused: Close does not wait for Resume: the paused client
// crashes, and its lock expires at its TTL.
func TestCloseWhilePaused(t *testing.T) {
	c := memory.NewClient(&memory.Options{Store: memory.NewStore()})
	lk, err := c.Acquire(context.Background(), "close-paused")
	if err != nil {
		t.Fatal(err)
	}
	c.Pause()
	done := make(chan error, 1)
	go func() { done <- c.Close() }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "crashed") {
			t.Errorf("Close of a paused client holding a lock = %v, want the release it could not make", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close of a paused client still waits after 10s")
	}
	if !testenv.Closed(lk.Lost()) {
		t.Error("Lost open after Close")
	}
}
