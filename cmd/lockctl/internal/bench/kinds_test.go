package bench

import (
	"context"
	"strings"
	"testing"
	"time"
)

// starvingRW is a read/write lock that admits every reader at once and
// never the writer: its Lock waits until ctx ends, as a writer does on a
// backend without a queue while readers keep overlapping.
type starvingRW struct{}

func (starvingRW) Lock(ctx context.Context, _ string, _ time.Duration) (Unlock, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (starvingRW) LockShared(context.Context, string, time.Duration) (Unlock, error) {
	return func(context.Context) error { return nil }, nil
}

func (starvingRW) Close() error { return nil }

// TestReadWriteCountsStarvedWriter: a writer that never gets the key is
// counted as starved once per slice, with a longest wait of at least the
// quarter of a slice it stops asking before the end, and no write.
func TestReadWriteCountsStarvedWriter(t *testing.T) {
	d := Design{Backend: "fake", Name: "starving", Kind: KindLocker, Waits: true, Shared: true,
		Open: func(context.Context) (Client, error) { return starvingRW{}, nil }}
	const duration = 200 * time.Millisecond
	r := &Runner{Settings: Settings{Duration: duration, Readers: 3, WriteEvery: 5 * time.Millisecond}, TTL: time.Minute}
	r.ReadWrite(context.Background(), []Design{d})
	if len(r.results) != 1 {
		t.Fatalf("results %+v, want one", r.results)
	}
	res := r.results[0]
	v := res.ReadWrite
	slice := duration / 4
	switch {
	case v == nil:
		t.Fatalf("no read-write figures: %+v", res)
	case v.Writes != 0 || v.Starved != 4 || v.LongestWait < slice/4:
		t.Errorf("writes %d, starved %d, longest wait %v; want 0, 4 (one a slice), at least %v", v.Writes, v.Starved, v.LongestWait, slice/4)
	case res.Ops == 0 || res.Errors != 0 || res.Unit != "reads" || v.Readers != 3:
		t.Errorf("readers: %d reads, %d errors, unit %q, %d readers", res.Ops, res.Errors, res.Unit, v.Readers)
	}
}

// TestReadWriteAndSemaphoreMemory: on the embedded backend, which queues,
// readers stream, the writer gets its write locks, and the semaphore is
// never seen above its limit.
func TestReadWriteAndSemaphoreMemory(t *testing.T) {
	rep, err := Run(context.Background(), Options{URLs: []string{"memory://"}, Settings: Settings{
		Scenarios: []string{ScenarioReadWrite, ScenarioSemaphore}, Duration: 400 * time.Millisecond, WriteEvery: 10 * time.Millisecond, Permits: 3,
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 2 || !rep.Backends[0].Shared || !rep.Backends[0].Permits {
		t.Fatalf("results %+v on %+v, want read-write and semaphore on a backend that admits both", rep.Results, rep.Backends)
	}
	for _, res := range rep.Results {
		if res.Ops == 0 || res.Errors != 0 || res.Latency.Count != res.Ops {
			t.Errorf("%s: %d ops, %d errors (%s), %d latencies", res.Scenario, res.Ops, res.Errors, res.FirstError, res.Latency.Count)
		}
		switch res.Scenario {
		case ScenarioReadWrite:
			if v := res.ReadWrite; v == nil || v.Writes == 0 || v.Wait.Count != v.Writes || v.Readers != DefaultReaders || res.Params["readers"] != DefaultReaders {
				t.Errorf("read-write: %+v, params %v", v, res.Params)
			} else {
				t.Logf("memory read-write: %.0f reads/s, %d writes, writer p50 %v p99 %v longest %v, %d starved", res.PerSec, v.Writes, v.Wait.P50, v.Wait.P99, v.LongestWait, v.Starved)
			}
		case ScenarioSemaphore:
			if s := res.Semaphore; s == nil || s.Permits != 3 || s.Clients != 6 || s.MostHeld < 1 || s.MostHeld > 3 || res.Params["clients"] != 6 {
				t.Errorf("semaphore: %+v, params %v", s, res.Params)
			}
		}
	}
	var judged []string
	for _, tg := range rep.Targets {
		if tg.Name == "writer not starved" || tg.Name == "semaphore limit" {
			judged = append(judged, tg.Name)
			if !tg.Measured {
				t.Errorf("target %q not measured: %s", tg.Name, tg.Why)
			}
		}
	}
	if len(judged) != 2 {
		t.Errorf("targets judged: %q, want the writer's and the semaphore's", judged)
	}
}

// TestPermitCount: the count of permits held flags a grant beyond the
// limit, and only such a grant.
func TestPermitCount(t *testing.T) {
	c := permitCount{limit: 2}
	for i, want := range []bool{false, false, true} {
		if err := c.grant(); (err != nil) != want {
			t.Errorf("grant %d: %v, want an error %v", i+1, err, want)
		}
	}
	c.release()
	c.release()
	if err := c.grant(); err != nil || c.most != 3 || c.held != 2 {
		t.Errorf("after two releases: %v, most %d, held %d; want nil, 3, 2", err, c.most, c.held)
	}
}

// TestKindsNotRunNoted: a Locker whose backend admits neither kind is
// left out of both scenarios with a note naming the capability, and the
// targets say why they were not measured.
func TestKindsNotRunNoted(t *testing.T) {
	d := Design{Backend: "old", Name: "locker", Kind: KindLocker, Waits: true}
	r := &Runner{Settings: Settings{Duration: 10 * time.Millisecond}}
	r.ReadWrite(context.Background(), []Design{d})
	r.Semaphore(context.Background(), []Design{d})
	notes := strings.Join(r.Notes(), "\n")
	for _, want := range []string{"read-write: old locker: not run: the backend does not admit shared holds (Capabilities.Shared is false)",
		"semaphore: old locker: not run: the backend does not admit semaphores (Capabilities.Permits is false)"} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes lack %q:\n%s", want, notes)
		}
	}
	if len(r.results) != 0 {
		t.Errorf("results %+v, want none", r.results)
	}
	got := map[string]Target{}
	for _, tg := range Judge(&Report{Backends: []Backend{{Name: "old", FIFO: true}, {Name: "nofifo"}}}) {
		got[tg.Backend+"/"+tg.Name] = tg
	}
	if tg := got["old/writer not starved"]; tg.Measured || !strings.Contains(tg.Why, "Capabilities.Shared is false") {
		t.Errorf("the writer target of a FIFO backend without shared holds: %+v", tg)
	}
	if tg := got["old/semaphore limit"]; tg.Measured || !strings.Contains(tg.Why, "Capabilities.Permits is false") {
		t.Errorf("the semaphore target of a backend without semaphores: %+v", tg)
	}
	if _, ok := got["nofifo/writer not starved"]; ok {
		t.Errorf("a backend without a queue has a writer target, though it promises nothing")
	}
}
