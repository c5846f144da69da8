package conformance_test

import (
	"context"
	"fmt"
	"time"

	"github.com/distlock/locker"
	"github.com/distlock/locker/conformance"
	_ "github.com/distlock/locker/memory"
)

// Check runs the suite outside go test (lockctl check does) and returns a
// report. On the embedded memory:// the clients share the named store,
// and the cases that crash a client crash it as memory.Client.Crash does.
func ExampleCheck() {
	report, err := conformance.Check(context.Background(), conformance.URLHarness("memory://check-example"))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("failed:", len(report.Failed()))
	// Output:
	// failed: 0
}

// A platform team adds checks of its own deployment to the run: here,
// that a released key reaches a waiting client within the team's budget.
// The cases run after the built-in ones, with the same helpers.
func ExampleCase() {
	const budget = time.Second
	h := conformance.URLHarness("memory://case-example")
	h.Cases = []conformance.Case{{
		Name: "handoff-within-budget",
		Rule: "A waiting Acquire gets a released key within 1s",
		Func: func(t *conformance.T) {
			a, b := t.Locker(), t.Locker()
			key := t.Key("k")
			// A TTL no case waits out: only the release frees the key in time.
			lk := t.Acquire(a, key, locker.WithTTL(t.LongTTL()))
			released := make(chan time.Time, 1)
			go func() {
				time.Sleep(20 * time.Millisecond) // b is waiting by then
				released <- time.Now()
				t.Release(lk)
			}()
			lkB := t.AcquireWithin(b, key, t.LongTTL()/2, "the holder released")
			if d := time.Since(<-released); d > budget {
				t.Errorf("the waiter got the key %v after the release, want at most %v", d, budget)
			}
			t.Release(lkB)
		},
	}}
	report, err := conformance.Check(context.Background(), h)
	if err != nil {
		fmt.Println(err)
		return
	}
	res, _ := report.Result("handoff-within-budget")
	fmt.Println(res.Name, res.Status)
	// Output:
	// handoff-within-budget pass
}
