package locker_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/distlock/locker"
	"github.com/distlock/locker/memory"
)

// Two instances of a service campaign on one name; the leader does the
// work with its term, the other follows who leads, and takes over when the
// leader resigns.
func ExampleElection() {
	ctx := context.Background()
	store := memory.NewStore() // one store: two clients of one server
	a := memory.New(&memory.Options{Store: store})
	b := memory.New(&memory.Options{Store: store})
	defer a.Close()
	defer b.Close()

	ea := locker.NewElection(a, "reports/scheduler")
	eb := locker.NewElection(b, "reports/scheduler")

	lead, err := ea.Campaign(ctx, []byte("host-a"))
	if err != nil {
		fmt.Println(err)
		return
	}
	term, _ := lead.Fence() // pass it with every write the leader makes
	ldr, _ := eb.Leader(ctx)
	fmt.Printf("leader %s, term matches: %v\n", ldr.Value, ldr.Term == term)

	octx, stop := context.WithCancel(ctx)
	changes := eb.Observe(octx)
	fmt.Printf("observed %s\n", (<-changes).Value)

	won := make(chan locker.Lock)
	go func() {
		lk, _ := eb.Campaign(ctx, []byte("host-b")) // waits while host-a leads
		won <- lk
	}()
	ea.Proclaim(ctx, []byte("host-a, draining"))
	fmt.Printf("observed %s\n", (<-changes).Value)
	ea.Resign(ctx)
	next := <-won
	nextTerm, _ := next.Fence()
	fmt.Printf("observed %s, a later term: %v\n", (<-changes).Value, nextTerm > term)
	stop()
	eb.Resign(ctx)
	// Output:
	// leader host-a, term matches: true
	// observed host-a
	// observed host-a, draining
	// observed host-b, a later term: true
}

// Under an owner, code that holds a key may acquire it again without
// waiting for itself; the key goes with the owner's last release.
func ExampleWithOwner() {
	ctx := locker.WithOwner(context.Background(), "invoice-run-42")
	l := memory.New(&memory.Options{Store: memory.NewStore()})
	defer l.Close()

	outer, _ := l.Acquire(ctx, "ledger")
	inner, err := l.Acquire(ctx, "ledger") // returns at once: same owner
	fmt.Println("inner:", err, "holds:", locker.HoldCount(inner))
	inner.Release(ctx)
	_, err = l.TryAcquire(context.Background(), "ledger")
	fmt.Println("held after the inner release:", err != nil)
	outer.Release(ctx)
	free, err := l.TryAcquire(context.Background(), "ledger")
	fmt.Println("free after the last:", err)
	free.Release(ctx)
	// Output:
	// inner: <nil> holds: 2
	// held after the inner release: true
	// free after the last: <nil>
}

// lead does the scheduler's work whenever this instance leads, until ctx
// ends or work fails while it leads. work's ctx is cancelled when the
// leadership is lost; every write it makes carries the term, so a
// resource that checks terms refuses a deposed leader.
func lead(ctx context.Context, l locker.Locker, host string, work func(ctx context.Context, term uint64) error) error {
	e := locker.NewElection(l, "reports/scheduler")
	return e.Run(ctx, []byte(host), func(ctx context.Context, lk locker.Lock) error {
		term, _ := lk.Fence()
		return work(ctx, term) // nil: resign and campaign again; an error: resign and stop
	}, locker.OnNewLeader(func(ldr locker.Leader) {
		slog.Info("new leader", "value", string(ldr.Value), "term", ldr.Term)
	}))
}

// An instance leads, works with its term, and hands over when its work
// ends.
func ExampleNewElection() {
	l := memory.New(nil)
	defer l.Close()
	done := errors.New("done for today")
	err := lead(context.Background(), l, "host-a", func(ctx context.Context, term uint64) error {
		fmt.Println("leading with a term:", term > 0)
		return done
	})
	fmt.Println(err)
	// Output:
	// leading with a term: true
	// done for today
}
