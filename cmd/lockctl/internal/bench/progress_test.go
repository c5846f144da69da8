package bench

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestProgressLine(t *testing.T) {
	for _, tc := range []struct {
		p    Progress
		want string
	}{
		{Progress{Step: 12, Steps: 19, Elapsed: 3*time.Minute + 46*time.Second + 300*time.Millisecond, Left: 80 * time.Second, What: "hot-key: 8 waiters on one key"},
			"[12/19 3m46s, ~1m20s left] hot-key: 8 waiters on one key"},
		{Progress{Step: 1, Steps: 7, Left: -1, What: "pause on redis, round 1 of 1"}, "[ 1/7 0s] pause on redis, round 1 of 1"},
		{Progress{Step: 2, Steps: 7, Elapsed: time.Second, Left: 0, What: "x"}, "[ 2/7 1s, ~0s left] x"},
		{Progress{Step: 3, Steps: 40, Elapsed: time.Minute, Left: 4*time.Minute + 44*time.Second, What: "x"}, "[ 3/40 1m0s, ~4m40s left] x"},
		{Progress{Step: 3, Steps: 40, Elapsed: time.Minute, Left: 72*time.Minute + 31*time.Second, What: "x"}, "[ 3/40 1m0s, ~1h13m0s left] x"},
	} {
		if got := tc.p.String(); got != tc.want {
			t.Errorf("%+v:\n got %q\nwant %q", tc.p, got, tc.want)
		}
	}
}

func TestEstimateLeft(t *testing.T) {
	plan := []time.Duration{10 * time.Second, 10 * time.Second, 20 * time.Second}
	for _, tc := range []struct {
		step int
		took time.Duration
		want time.Duration
	}{
		{0, 0, 40 * time.Second},                // nothing done: the plan
		{1, 15 * time.Second, 45 * time.Second}, // the first step took half again its plan: so will the rest
		{2, 10 * time.Second, 10 * time.Second}, // faster than planned
		{3, 50 * time.Second, 0},                // the end
	} {
		if got := estimateLeft(plan, tc.step, tc.took); got != tc.want {
			t.Errorf("estimateLeft(plan, %d, %v) = %v, want %v", tc.step, tc.took, got, tc.want)
		}
	}
}

// TestRunMemoryProgress: a run says, as each step starts, how many steps
// there are and how long the rest will take, from the time the settings
// give each step: at the first step, the whole plan.
func TestRunMemoryProgress(t *testing.T) {
	var got []Progress
	_, err := Run(context.Background(), Options{URLs: []string{"memory://"}, Settings: quick, Progress: func(p Progress) { got = append(got, p) }})
	if err != nil {
		t.Fatal(err)
	}
	// One design (the Locker; memory has no raw or peer designs), 100 ms
	// each: uncontended, throughput with 1 and 3 clients, hot-key with 2
	// and 4 waiters, fresh keys; then two TTLs of held locks; then
	// read-write and semaphore, which memory admits; no recovery
	// (memory's locks live in one process), no fanout.
	d, held := quick.Duration, 2*quick.HeldTTL
	plan := []time.Duration{d, d, d, d, d, d, held, d, d}
	if len(got) != len(plan) {
		t.Fatalf("%d progress lines, want %d:\n%v", len(got), len(plan), got)
	}
	var total time.Duration
	for _, p := range plan {
		total += p
	}
	if got[0].Left != total {
		t.Errorf("the first step's estimate is %v, want the whole plan, %v", got[0].Left, total)
	}
	for i, p := range got {
		if p.Step != i+1 || p.Steps != len(plan) || p.Left < 0 {
			t.Errorf("line %d: %s, want step %d of %d with an estimate", i+1, p, i+1, len(plan))
		}
	}
	if !slices.IsSortedFunc(got, func(a, b Progress) int { return int(a.Elapsed - b.Elapsed) }) || !strings.Contains(got[len(got)-1].String(), "left] semaphore") {
		t.Errorf("progress lines:\n%v", got)
	}
}
