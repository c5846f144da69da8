package benchkit

import (
	"context"
	"sync"
	"testing"
	"time"
)

func TestInterleave(t *testing.T) {
	var seq []int // which design ran, in order, in the last run
	res := testing.Benchmark(func(b *testing.B) {
		seq = seq[:0]
		Interleave(b,
			Design{Name: "fast", Op: func(context.Context) error { seq = append(seq, 0); return nil }},
			Design{Name: "slow", Op: func(context.Context) error {
				seq = append(seq, 1)
				time.Sleep(time.Millisecond)
				return nil
			}},
		)
	})
	const warm = 5
	if res.N == 0 || len(seq) != 2*(res.N+warm) {
		t.Fatalf("N=%d, %d operations ran; want 2*(N+%d)", res.N, len(seq), warm)
	}
	timed := seq[2*warm:]
	orders := map[[2]int]bool{}
	for i := 0; i < len(timed); i += 2 {
		pair := [2]int{timed[i], timed[i+1]}
		if pair[0] == pair[1] {
			t.Fatalf("round %d ran design %d twice: the designs must take turns", i/2, pair[0])
		}
		orders[pair] = true
	}
	if res.N >= 20 && len(orders) != 2 {
		t.Errorf("%d rounds all ran in the same order; want the order shuffled", res.N)
	}
	for _, m := range []string{"fast-ops/s", "slow-ops/s", "fast-p50-µs", "slow-p99-µs", "slow/fast"} {
		if _, ok := res.Extra[m]; !ok {
			t.Errorf("metric %q not reported; got %v", m, res.Extra)
		}
	}
	if _, ok := res.Extra["fast/slow"]; ok {
		t.Error(`"fast/slow" reported: a design is compared only with those listed before it`)
	}
	// The slow design sleeps a millisecond per operation, the fast one
	// does nothing: its relative throughput is far below one half.
	if r := res.Extra["slow/fast"]; !(r > 0 && r < 0.5) {
		t.Errorf("slow/fast = %v; want the sleeping design's throughput well below the other's", r)
	}
}

func TestInterleaveClients(t *testing.T) {
	const clients, perRound, warm = 4, 3, 3
	var (
		mu      sync.Mutex
		running [2]int // clients of each design inside an operation now
		overlap bool   // both designs ran at once
		count   [2]int
	)
	op := func(d int, sleep time.Duration) func(context.Context) error {
		return func(context.Context) error {
			mu.Lock()
			running[d]++
			count[d]++
			if running[1-d] > 0 {
				overlap = true
			}
			mu.Unlock()
			time.Sleep(sleep)
			mu.Lock()
			running[d]--
			mu.Unlock()
			return nil
		}
	}
	design := func(name string, d int, sleep time.Duration) ClientsDesign {
		cd := ClientsDesign{Name: name}
		for range clients {
			cd.Ops = append(cd.Ops, op(d, sleep))
		}
		return cd
	}
	res := testing.Benchmark(func(b *testing.B) {
		mu.Lock()
		count, overlap = [2]int{}, false
		mu.Unlock()
		InterleaveClients(b, perRound, design("fast", 0, 0), design("slow", 1, time.Millisecond))
	})
	if res.N == 0 {
		t.Fatal("no round ran")
	}
	for d, n := range count {
		if want := clients * (perRound*res.N + warm); n != want {
			t.Errorf("design %d ran %d operations in N=%d rounds; want %d (%d clients, %d a round, one warm-up round of %d)",
				d, n, res.N, clients*(perRound*res.N+warm), clients, perRound, warm)
		}
	}
	if overlap {
		t.Error("the two designs ran at once: they must take turns")
	}
	if r := res.Extra["slow/fast"]; !(r > 0 && r < 0.5) {
		t.Errorf("slow/fast = %v; want the sleeping design's throughput well below the other's", r)
	}
	for _, m := range []string{"fast-ops/s", "slow-ops/s", "fast-p50-µs", "slow-p99-µs"} {
		if _, ok := res.Extra[m]; !ok {
			t.Errorf("metric %q not reported; got %v", m, res.Extra)
		}
	}
}
