package zookeeper

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// The outcome of a request sent by session.call goes to exactly one side:
// the caller, or the undo. When the caller gets it the undo must not run
// (it would, say, delete the node the caller just took as its lock); when
// the caller gave up, the undo runs once, with the request's outcome. The
// tests order the two sides with hooks, not by timing, so each takes the
// path it names on every run.

// TestCallOutcome: a caller that waits gets the outcome. It can only have
// received it after the request's goroutine claimed it, so no undo can
// follow.
func TestCallOutcome(t *testing.T) {
	s := &session{}
	var undone atomic.Int64
	for i := range 50 {
		ctx, cancel := context.WithCancel(context.Background())
		err := s.call(ctx, newEpoch(), func() error { return nil }, func(error) { undone.Add(1) })
		cancel()
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if undone.Load() != 0 {
			t.Fatalf("call %d: the undo ran for a request whose outcome the caller got", i)
		}
	}

	// The context ends just as the request's goroutine decides: either
	// side may win, but only one. A call that returns the outcome has no
	// undo, ever; one that returns the context's error had it run, once,
	// before it returned.
	t.Cleanup(func() { testHooks.Store(nil) })
	for i := range 200 {
		ctx, cancel := context.WithCancel(context.Background())
		testHooks.Store(&hooks{decide: cancel})
		var n atomic.Int64
		err := s.call(ctx, newEpoch(), func() error { return nil }, func(error) { n.Add(1) })
		cancel()
		if got := n.Load(); (err == nil && got != 0) || (err != nil && got != 1) {
			t.Fatalf("call %d = %v, with the undo run %d times", i, err, got)
		}
	}
}

// TestCallAbandoned: a caller whose context or epoch ends while its
// request is out returns that error, and the undo gets the request's
// outcome: before the call returns if the context ended (so that a
// cancelled call leaves nothing behind), later if the epoch did.
func TestCallAbandoned(t *testing.T) {
	s := &session{}
	outcome := errors.New("the request's own outcome")
	t.Run("context", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		undo, got := holdDecision(t)
		err := s.call(ctx, newEpoch(), func() error {
			cancel() // the request is out; the caller stops waiting
			return outcome
		}, undo)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("call whose context ended first = %v, want context.Canceled", err)
		}
		select {
		case e := <-got:
			if e != outcome {
				t.Fatalf("undo got %v, want the request's outcome", e)
			}
		default:
			t.Fatal("a call whose context ended returned before the undo ran")
		}
	})
	t.Run("epoch", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background()) // one that can end: a call that waits
		defer cancel()
		ep := newEpoch()
		undo, got := holdDecision(t)
		err := s.call(ctx, ep, func() error {
			ep.cause = errSessionExpired
			close(ep.gone)
			return outcome
		}, undo)
		if err != errSessionExpired {
			t.Fatalf("call whose epoch ended first = %v, want its cause", err)
		}
		select {
		case e := <-got:
			if e != outcome {
				t.Fatalf("undo got %v, want the request's outcome", e)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the undo did not run for a request abandoned with its epoch")
		}
	})
}

// TestCallEndedEpoch: a call in an epoch that has ended sends nothing.
func TestCallEndedEpoch(t *testing.T) {
	ep := newEpoch()
	ep.cause = errSessionExpired
	close(ep.gone)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sent := false
	err := (&session{}).call(ctx, ep, func() error { sent = true; return nil }, nil)
	if err != errSessionExpired || sent {
		t.Fatalf("call in an ended epoch = %v (request sent: %v), want its cause and nothing sent", err, sent)
	}
}

// holdDecision makes requests' goroutines wait, before claiming their
// outcome, until the caller has given up, and returns an undo that passes
// the outcome it is given to got.
func holdDecision(t *testing.T) (undo func(error), got <-chan error) {
	gaveUp := make(chan struct{})
	testHooks.Store(&hooks{
		gaveUp: func() { close(gaveUp) },
		decide: func() {
			select {
			case <-gaveUp:
			case <-time.After(10 * time.Second):
				// The caller never gave up: it gets the outcome, and the
				// test says so.
			}
		},
	})
	t.Cleanup(func() { testHooks.Store(nil) })
	ch := make(chan error, 1)
	return func(err error) { ch <- err }, ch
}
