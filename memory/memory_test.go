package memory_test

import (
	"context"
	"testing"
	"time"

	"github.com/distlock/locker"
	"github.com/distlock/locker/conformance"
	"github.com/distlock/locker/memory"
	"go.uber.org/goleak"
)

// harness makes clients of one Store; Crash cuts a client off the store.
func harness() conformance.Harness {
	s := memory.NewStore()
	return conformance.Harness{
		NewClient: func(context.Context) (conformance.Client, error) {
			d := memory.NewDriver(s)
			return conformance.Client{Locker: locker.New(d, nil), Crash: d.Cut}, nil
		},
		TTL: 100 * time.Millisecond,
	}
}

func TestConformance(t *testing.T) {
	conformance.Run(t, harness())
}

func TestConformanceURL(t *testing.T) {
	// Through Open, as an application would; no crash support.
	conformance.Run(t, conformance.Harness{
		NewClient: func(ctx context.Context) (conformance.Client, error) {
			l, err := locker.Open(ctx, "memory://conformance-url")
			return conformance.Client{Locker: l}, err
		},
		TTL: 100 * time.Millisecond,
	})
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
	memory.OnQueued(s, func(string) { queued <- struct{}{} })
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
