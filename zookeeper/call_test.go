package zookeeper

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// TestCallOutcome: the outcome of a request goes to exactly one side.
// When the caller gets it, the undo must not run (it would, say, delete
// the node the caller just took as its lock); when the caller gave up, the
// undo runs once, with the request's outcome, before the call returns.
func TestCallOutcome(t *testing.T) {
	s := &session{}
	ep := newEpoch()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// The request's goroutine is slow to decide: the caller is already
	// waiting for the outcome, and must get it.
	testHooks.Store(&hooks{decide: func() { time.Sleep(2 * time.Millisecond) }})
	defer testHooks.Store(nil)
	var undone atomic.Int64
	for i := range 50 {
		err := s.call(ctx, ep, func() error { return nil }, func(error) { undone.Add(1) })
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	time.Sleep(20 * time.Millisecond) // the goroutines' last steps
	if n := undone.Load(); n != 0 {
		t.Fatalf("the undo ran %d times for requests whose outcome the caller got", n)
	}
	testHooks.Store(nil)

	outcome := errors.New("the request's own outcome")
	got := make(chan error, 1)
	release := make(chan struct{})
	gaveUp, giveUp := context.WithCancel(ctx)
	go func() {
		<-release
		giveUp()
	}()
	close(release)
	err := s.call(gaveUp, ep, func() error {
		<-gaveUp.Done()
		time.Sleep(10 * time.Millisecond)
		return outcome
	}, func(err error) { got <- err })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("call whose context ended first = %v, want context.Canceled", err)
	}
	if len(got) == 0 {
		t.Fatal("a call whose context ended returned before the undo ran")
	}
	select {
	case e := <-got:
		if e != outcome {
			t.Fatalf("undo got %v, want the request's outcome", e)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the undo did not run for an abandoned request")
	}

	// An epoch that ends is the same as a context that ends.
	ep2 := newEpoch()
	ep2.cause = errSessionExpired
	close(ep2.gone)
	if err := s.call(ctx, ep2, func() error { return nil }, nil); err != errSessionExpired {
		t.Fatalf("call in an ended epoch = %v, want its cause", err)
	}
}
