package gocronlocker_test

import (
	"context"
	"fmt"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/google/uuid"

	"github.com/distlock/locker"
	"github.com/distlock/locker/contrib/gocronlocker"
)

// Two instances of a service schedule the same hourly report; the job's
// lock makes one of them run it and the other skip it. In production each
// instance opens its own Locker on the same server (redis://,
// zookeeper://, ...); here both use one in-process store.
func Example() {
	ctx := context.Background()
	outcomes := make(chan string, 2)
	for range 2 {
		l, err := locker.Open(ctx, "memory://gocron-example")
		if err != nil {
			panic(err)
		}
		defer l.Close()
		jl, err := gocronlocker.NewLocker(l, gocronlocker.WithMinHold(30*time.Minute))
		if err != nil {
			panic(err)
		}
		defer jl.Close()
		s, err := gocron.NewScheduler(gocron.WithDistributedLocker(jl))
		if err != nil {
			panic(err)
		}
		defer s.Shutdown()
		_, err = s.NewJob(gocron.DurationJob(time.Hour),
			gocron.NewTask(func() { outcomes <- "ran" }),
			gocron.WithName("hourly-report"),
			gocron.WithStartAt(gocron.WithStartImmediately()),
			gocron.WithEventListeners(gocron.AfterLockError(func(uuid.UUID, string, error) { outcomes <- "skipped" })))
		if err != nil {
			panic(err)
		}
		s.Start()
	}
	got := map[string]int{}
	for range 2 {
		got[<-outcomes]++
	}
	fmt.Printf("ran %d time, skipped %d time\n", got["ran"], got["skipped"])
	// Output:
	// ran 1 time, skipped 1 time
}

// Three instances elect a leader, which alone runs the jobs. Closing its
// Elector resigns, and another instance leads at once.
func ExampleNewElector() {
	ctx := context.Background()
	var els []*gocronlocker.Elector
	for range 3 {
		l, err := locker.Open(ctx, "memory://gocron-example-elector")
		if err != nil {
			panic(err)
		}
		defer l.Close()
		el, err := gocronlocker.NewElector(l, "reports-leader", gocronlocker.WithTTL(10*time.Second))
		if err != nil {
			panic(err)
		}
		defer el.Close()
		// Each instance passes its Elector to its scheduler:
		//	gocron.NewScheduler(gocron.WithDistributedElector(el))
		els = append(els, el)
	}
	leader := waitForLeader(els)
	fmt.Println("leaders:", countLeaders(els))
	els[leader].Close()
	els[leader] = els[len(els)-1]
	els = els[:len(els)-1]
	waitForLeader(els)
	fmt.Println("leaders after the first resigned:", countLeaders(els))
	// Output:
	// leaders: 1
	// leaders after the first resigned: 1
}

// waitForLeader returns the index of the Elector that leads, once one
// does.
func waitForLeader(els []*gocronlocker.Elector) int {
	for {
		for i, el := range els {
			if el.IsLeader(context.Background()) == nil {
				return i
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func countLeaders(els []*gocronlocker.Elector) int {
	n := 0
	for _, el := range els {
		if el.IsLeader(context.Background()) == nil {
			n++
		}
	}
	return n
}
