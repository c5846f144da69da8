package bench

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// quick is a setting for runs that check structure, not speed.
var quick = Settings{
	Scenarios: Scenarios, Duration: 100 * time.Millisecond,
	Clients: []int{1, 3}, Waiters: []int{2, 4}, HeldLocks: 200, HeldTTL: 300 * time.Millisecond,
}

// TestRunMemory runs every scenario on the embedded backend, which has no
// raw primitives and no peers: the Locker's figures are all there, and
// the scenarios a memory deployment cannot have say so.
func TestRunMemory(t *testing.T) {
	rep, err := Run(context.Background(), Options{URLs: []string{"memory://"}, Settings: quick})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Backends) != 1 || rep.Backends[0].Name != "memory" {
		t.Fatalf("backends = %+v, want memory", rep.Backends)
	}
	want := map[string]int{ScenarioUncontended: 1, ScenarioThroughput: 2, ScenarioHotKey: 2, ScenarioFreshKeys: 1, ScenarioHeldLocks: 1}
	got := map[string]int{}
	for _, res := range rep.Results {
		got[res.Scenario]++
		// Held locks give their figures in Memory (checked below); the
		// others a latency per operation.
		timed := res.Scenario != ScenarioHeldLocks
		if res.Ops == 0 || res.PerSec <= 0 || timed && (res.Latency.P50 <= 0 || res.Latency.Count != res.Ops && res.Scenario != ScenarioHotKey) {
			t.Errorf("%s %v: no figures: %+v", res.Scenario, res.Params, res)
		}
		if res.Errors != 0 {
			t.Errorf("%s %v: %d errors, the first: %s", res.Scenario, res.Params, res.Errors, res.FirstError)
		}
		switch res.Scenario {
		case ScenarioHotKey:
			if f := res.Fairness; f == nil || f.MaxMin < 1 || f.Starved != 0 || f.LongestWait <= 0 {
				t.Errorf("hot-key %v fairness = %+v", res.Params, f)
			}
		case ScenarioHeldLocks:
			if m := res.Memory; m == nil || m.Locks != quick.HeldLocks || m.Lost != 0 || m.Held < 2*quick.HeldTTL {
				t.Errorf("held-locks memory = %+v", m)
			}
		}
	}
	for sc, n := range want {
		if got[sc] != n {
			t.Errorf("%s: %d results, want %d", sc, got[sc], n)
		}
	}
	notes := strings.Join(rep.Notes, "\n")
	for _, want := range []string{"fanout: no redlock:// deployment", "recovery: memory's locks live in one process", "failover: memory's elections live in one process"} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes lack %q:\n%s", want, notes)
		}
	}
	if len(rep.Targets) == 0 {
		t.Error("no targets judged")
	}
}

func TestRunErrors(t *testing.T) {
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{Settings: quick}, "no deployment"},
		{Options{URLs: []string{"nosuch://x"}, Settings: quick}, "nosuch"},
		{Options{URLs: []string{"memory://"}, Settings: Settings{Scenarios: []string{"warp"}, Duration: time.Millisecond}}, `unknown scenario "warp"`},
	} {
		_, err := Run(context.Background(), tc.o)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Run(%+v) = %v, want an error containing %q", tc.o.URLs, err, tc.want)
		}
	}
}

// TestTurnsShareTheTime: designs that take turns get the same number of
// operations, whatever each costs.
func TestTurnsShareTheTime(t *testing.T) {
	slow := opened{d: Design{Name: "slow"}}
	fast := opened{d: Design{Name: "fast"}}
	ts := turns(context.Background(), []opened{slow, fast}, 20*time.Millisecond, func(_ context.Context, o opened, _ int) error {
		if o.d.Name == "slow" {
			time.Sleep(2 * time.Millisecond)
		}
		return nil
	})
	if ts[0].ops != ts[1].ops || ts[0].ops == 0 {
		t.Fatalf("ops = %d and %d, want equal and not zero", ts[0].ops, ts[1].ops)
	}
	if ts[0].busy <= ts[1].busy {
		t.Errorf("the slow design's time %v is not above the fast one's %v", ts[0].busy, ts[1].busy)
	}
}

func TestTallyErrors(t *testing.T) {
	tl := newTally()
	tl.record(time.Millisecond, nil)
	tl.record(0, errors.New("first"))
	tl.record(0, errors.New("second"))
	tl.busy = time.Second
	res := tl.result("s", Design{Name: "d"}, nil, 0, "ops")
	if res.Ops != 1 || res.Errors != 2 || res.FirstError != "first" || res.PerSec != 1 {
		t.Fatalf("result = %+v", res)
	}
}

func TestJudge(t *testing.T) {
	lat := func(p50, p99 time.Duration) Latency { return Latency{Count: 1, P50: p50, P99: p99} }
	// postgres: the lease pair is the raw target's baseline, not the
	// faster advisory lock listed first; the hot key is judged against
	// the pair's p50.
	pgUncontended := []Result{
		{Scenario: ScenarioUncontended, Backend: "postgres", Design: "locker", Kind: KindLocker, Ops: 10, PerSec: 960, Latency: lat(time.Millisecond, 2*time.Millisecond)},
		{Scenario: ScenarioUncontended, Backend: "postgres", Design: "raw-advisory", Kind: KindRaw, Ops: 10, PerSec: 2000, Latency: lat(500*time.Microsecond, time.Millisecond)},
		{Scenario: ScenarioUncontended, Backend: "postgres", Design: "raw", Kind: KindRaw, Ops: 10, PerSec: 1000, Latency: lat(time.Millisecond, 2*time.Millisecond)},
	}
	pgHot := Result{Scenario: ScenarioHotKey, Backend: "postgres", Design: "locker", Kind: KindLocker, Params: map[string]int{"waiters": 2}, Ops: 10, PerSec: 800, Latency: lat(1400*time.Microsecond, 3*time.Millisecond)}
	rep := &Report{
		Backends: []Backend{{Name: "redis"}, {Name: "etcd"}, {Name: "postgres"}},
		Results: append([]Result{
			{Scenario: ScenarioUncontended, Backend: "redis", Design: "locker", Kind: KindLocker, Ops: 10, PerSec: 960, Latency: lat(time.Millisecond, 2*time.Millisecond)},
			{Scenario: ScenarioUncontended, Backend: "redis", Design: "raw", Kind: KindRaw, Ops: 10, PerSec: 1000},
			{Scenario: ScenarioUncontended, Backend: "redis", Design: "redsync", Kind: KindPeer, Ops: 10, PerSec: 900},
			{Scenario: ScenarioUncontended, Backend: "redis", Design: "redislock", Kind: KindPeer, Ops: 10, PerSec: 1100},
			{Scenario: ScenarioHotKey, Backend: "redis", Design: "locker", Kind: KindLocker, Params: map[string]int{"waiters": 2}, Ops: 10, PerSec: 500, Latency: lat(600*time.Microsecond, time.Millisecond)},
			{Scenario: ScenarioUncontended, Backend: "etcd", Design: "locker", Kind: KindLocker, Ops: 10, PerSec: 900},
			{Scenario: ScenarioUncontended, Backend: "etcd", Design: "raw", Kind: KindRaw, Ops: 10, PerSec: 1000},
		}, append(pgUncontended, pgHot)...),
	}
	got := map[string]Target{}
	for _, tg := range Judge(rep) {
		got[tg.Backend+"/"+tg.Name] = tg
	}
	for name, want := range map[string]struct{ measured, met bool }{
		"redis/uncontended vs raw":       {true, true},  // 0.96
		"redis/uncontended vs best peer": {true, false}, // 960 < redislock's 1100
		"redis/hot key":                  {true, true},
		"redis/held locks":               {false, false},
		"etcd/uncontended vs raw":        {true, false}, // 0.90
		"etcd/uncontended vs best peer":  {false, false},
		"etcd/hot key vs peer":           {false, false},
		"postgres/uncontended vs raw":    {true, true}, // 0.96 of the pair; 0.48 of the advisory lock
		"postgres/hot key":               {true, true}, // 1.4x the pair's p50
	} {
		tg, ok := got[name]
		if !ok {
			t.Errorf("no target %s", name)
			continue
		}
		if tg.Measured != want.measured || tg.Met != want.met {
			t.Errorf("%s = measured %v met %v (%s; %s), want measured %v met %v", name, tg.Measured, tg.Met, tg.Got, tg.Why, want.measured, want.met)
		}
		if tg.Measured && !tg.Met && tg.Why == "" {
			t.Errorf("%s missed without saying why", name)
		}
	}
	if tg := got["redis/uncontended vs best peer"]; !strings.Contains(tg.Want, "redislock") {
		t.Errorf("the peer target names %q, want the best peer, redislock", tg.Want)
	}
	if tg, ok := got["postgres/uncontended vs best peer"]; ok {
		t.Errorf("postgres, which has no peer library, has a peer target: %+v", tg)
	}

	// A handoff slower than the bound is missed, saying why; without the
	// raw pair's figures it is not measured.
	pg := func(rs ...Result) *Report { return &Report{Backends: []Backend{{Name: "postgres"}}, Results: rs} }
	slowHot := pgHot
	slowHot.Latency.P50 = 1600 * time.Microsecond
	for _, tc := range []struct {
		rep               *Report
		measured, met     bool
		got, why, missing string
	}{
		{pg(append(slices.Clone(pgUncontended), slowHot)...), true, false, "1.60x", "NOTIFY", ""},
		{pg(pgHot), false, false, "", "", "uncontended"},
		{pg(pgUncontended...), false, false, "", "", "hot-key"},
	} {
		for _, tg := range Judge(tc.rep) {
			if tg.Name != "hot key" {
				continue
			}
			if tg.Measured != tc.measured || tg.Met != tc.met || !strings.Contains(tg.Got, tc.got) || !strings.Contains(tg.Why, tc.why) || !strings.Contains(tg.Why, tc.missing) {
				t.Errorf("hot key = %+v; want measured %v, met %v, got %q, why %q/%q", tg, tc.measured, tc.met, tc.got, tc.why, tc.missing)
			}
		}
	}
}

func TestURLHosts(t *testing.T) {
	u := "redlock://u:p@h1:1,h2:2,h3:3,h4:4,h5:5/db?x=1"
	if got := hostsOf(u); len(got) != 5 || got[0] != "h1:1" || got[4] != "h5:5" {
		t.Fatalf("hostsOf = %q", got)
	}
	if got := withHosts(u, hostsOf(u)[:3]); got != "redlock://u:p@h1:1,h2:2,h3:3/db?x=1" {
		t.Fatalf("withHosts = %q", got)
	}
}

// TestRTT: --rtt puts its delay in front of every design's server: an
// Acquire+Release (two round trips at least) takes at least two of it,
// and the report says what the machine's timers made of it.
func TestRTT(t *testing.T) {
	url := serverURL(t, envRedis)
	const rtt = 2 * time.Millisecond
	rep, err := Run(context.Background(), Options{URLs: []string{url}, Settings: Settings{
		Scenarios: []string{ScenarioUncontended}, Duration: 50 * time.Millisecond, RTT: rtt,
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) < 2 {
		t.Fatalf("results = %+v, want the locker, raw and peer designs", rep.Results)
	}
	for _, res := range rep.Results {
		if res.Ops == 0 || res.Latency.P50 < 2*rtt || res.RTT != rtt {
			t.Errorf("%s with --rtt %v: %d ops, p50 %v, RTT %v; want a p50 of at least two round trips", res.Design, rtt, res.Ops, res.Latency.P50, res.RTT)
		}
	}
	if !strings.Contains(strings.Join(rep.Notes, "\n"), "--rtt 2ms") {
		t.Errorf("notes do not describe the added round trip: %q", rep.Notes)
	}
}
