package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/distlock/locker/cmd/lockctl/internal/bench"
)

// TestBench runs a short bench against every test server in one
// invocation, as make bench does at length, and checks the report's
// structure: every scenario produced figures for every backend and
// design kind it applies to, the targets are judged, and every format is
// written. It checks no speed: that is make bench's to measure. The
// failover scenario, which waits out a TTL per design and round, has a
// test of its own on one backend (TestBenchFailover).
func TestBench(t *testing.T) {
	t.Parallel()
	takeTurn(t)
	out := t.TempDir()
	var scenarios []string
	for _, sc := range bench.Scenarios {
		if sc != bench.ScenarioFailover {
			scenarios = append(scenarios, sc)
		}
	}
	args := []string{"bench", "--scenario", strings.Join(scenarios, ","), "--duration", "150ms", "--clients", "1,4", "--waiters", "2", "--held-locks", "300", "--held-ttl", "1s", "--recovery-rounds", "1", "--out", out, "--json"}
	var names []string
	hasPeers := map[string]bool{} // postgres has none: applications use the server's primitives
	for _, s := range servers {
		u := serverURL(t, s.env)
		args = append(args, "--url", u)
		names = append(names, s.name)
		peers, err := bench.PeerDesigns(s.name, u)
		if err != nil {
			t.Fatalf("PeerDesigns(%s): %v", s.name, err)
		}
		hasPeers[s.name] = len(peers) > 0
	}
	r := runLockctl(t, testEnv(t), args...)
	wantCode(t, r, 0)
	var rep bench.Report
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("--json output: %v\n%s", err, r.stdout)
	}
	for _, sc := range []string{"uncontended", "throughput", "hot-key", "fresh-keys", "fanout", "held-locks", "recovery", "read-write", "semaphore"} {
		if !strings.Contains(r.stderr, sc+":") {
			t.Errorf("the progress does not mention %s:\n%s", sc, r.stderr)
		}
	}
	type cell struct{ scenario, backend, kind string }
	got := map[cell]int{}
	for _, res := range rep.Results {
		held := res.Scenario == "held-locks"
		// A peer may hand a hot key over less often than once in so
		// short a run (concurrency.Mutex waits up to about 100 ms a
		// handoff): it must not fail, but may hand over nothing.
		slowPeer := res.Scenario == "hot-key" && res.Kind == bench.KindPeer && res.Ops == 0 && res.Errors == 0
		if slowPeer {
			t.Logf("%s %s %s %v: no handoff in this short run", res.Scenario, res.Backend, res.Design, res.Params)
		} else if res.Ops == 0 || res.PerSec <= 0 || !held && res.Latency.P50 <= 0 || held && (res.Memory == nil || res.Memory.Locks == 0 || res.Memory.Held <= 0) {
			t.Errorf("%s %s %s %v: no figures (errors %d: %s)", res.Scenario, res.Backend, res.Design, res.Params, res.Errors, res.FirstError)
		}
		got[cell{res.Scenario, res.Backend, res.Kind}]++
	}
	for _, b := range names {
		kinds := []string{bench.KindLocker, bench.KindRaw, bench.KindPeer}
		if !hasPeers[b] {
			kinds = kinds[:2]
			for _, sc := range []string{"uncontended", "fresh-keys", "throughput", "hot-key"} {
				if n := got[cell{sc, b, bench.KindPeer}]; n != 0 {
					t.Errorf("%s: %d peer results on %s, which has no peer design", sc, n, b)
				}
			}
		}
		for _, sc := range []string{"uncontended", "fresh-keys"} {
			for _, kind := range kinds {
				if got[cell{sc, b, kind}] == 0 {
					t.Errorf("%s: no %s result on %s", sc, kind, b)
				}
			}
		}
		for _, kind := range kinds {
			// Clients 1 and 4, for each design of the kind.
			if n := got[cell{"throughput", b, kind}]; n < 2 || n%2 != 0 {
				t.Errorf("throughput: %d %s results on %s, want 2 per design (clients 1 and 4)", n, kind, b)
			}
		}
		if got[cell{"hot-key", b, bench.KindLocker}] != 1 || hasPeers[b] && got[cell{"hot-key", b, bench.KindPeer}] == 0 {
			t.Errorf("hot-key on %s: %d locker and %d peer results", b, got[cell{"hot-key", b, bench.KindLocker}], got[cell{"hot-key", b, bench.KindPeer}])
		}
		if got[cell{"held-locks", b, bench.KindLocker}] != 1 {
			t.Errorf("held-locks: no result on %s", b)
		}
		if got[cell{"recovery", b, bench.KindLocker}] != 1 {
			t.Errorf("recovery: no result on %s", b)
		}
	}
	// read-write and semaphore: the Locker where its backend admits the
	// kind, a note naming the capability where it does not; etcd's
	// recipe.RWMutex in read-write.
	notes := strings.Join(rep.Notes, "\n")
	for _, be := range rep.Backends {
		for _, k := range []struct {
			scenario, capability string
			admits               bool
		}{{"read-write", "Capabilities.Shared", be.Shared}, {"semaphore", "Capabilities.Permits", be.Permits}} {
			ran := got[cell{k.scenario, be.Name, bench.KindLocker}] == 1
			noted := strings.Contains(notes, k.scenario+": "+be.Name+" locker: not run") && strings.Contains(notes, k.capability+" is false")
			if ran != k.admits || noted == k.admits {
				t.Errorf("%s on %s (admits: %v): %d Locker results, noted %v", k.scenario, be.Name, k.admits, got[cell{k.scenario, be.Name, bench.KindLocker}], noted)
			}
		}
	}
	if got[cell{"read-write", "etcd", bench.KindPeer}] != 1 {
		t.Errorf("read-write: no recipe.RWMutex result on etcd")
	}
	for _, n := range []string{"redlock-3", "redlock-5"} {
		if got[cell{"fanout", n, bench.KindLocker}] != 1 || got[cell{"fanout", n, bench.KindRaw}] != 1 {
			t.Errorf("fanout: no locker and raw results on %s", n)
		}
	}
	measured := 0
	for _, tg := range rep.Targets {
		if tg.Measured {
			measured++
		}
	}
	if measured == 0 {
		t.Errorf("no target was measured: %+v", rep.Targets)
	}
	for _, f := range []string{"report.json", "report.md", "report.html"} {
		data, err := os.ReadFile(filepath.Join(out, f))
		if err != nil || len(data) == 0 {
			t.Errorf("%s: %v (%d bytes)", f, err, len(data))
		}
		if f == "report.html" && !strings.Contains(string(data), "<svg") {
			t.Errorf("report.html has no chart")
		}
	}
}

func TestBenchErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "--url", "memory://", "--scenario", "warp"}, `--scenario "warp"`},
		{[]string{"bench", "--url", "memory://", "--duration", "0s"}, "--duration"},
		{[]string{"bench", "--url", "memory://", "--clients", "0"}, "--clients"},
		{[]string{"bench", "--url", "memory://", "--readers", "0"}, "--readers 0: want a count from 1 to 10000"},
		{[]string{"bench", "--url", "memory://", "--write-every", "-1s"}, "--write-every -1s: want a positive duration"},
		{[]string{"bench", "--url", "memory://", "--permits", "0"}, "--permits 0: want a count from 1 to 5000"},
		{[]string{"bench", "--url", "memory://", "--failover-rounds", "0"}, "--failover-rounds 0: want a positive count"},
		{[]string{"bench", "--url", "nosuch://x", "--scenario", "uncontended"}, "nosuch"},
	} {
		r := runApp(t, nil, tc.args...)
		wantCode(t, r, exitError, tc.want)
	}
}

// TestBenchFailover runs the failover scenario on etcd, one leader killed
// per design: the Locker's Election and etcd's concurrency.Election each
// elect a successor to a killed leader, and the report gives the time
// it took (p50, p90, slowest) beside the TTL, which bounds it, with the
// expiry slack and the start of a loaded machine's processes.
func TestBenchFailover(t *testing.T) {
	t.Parallel()
	r := runLockctl(t, testEnv(t), "bench", "--url", serverURL(t, "LOCKER_TEST_ETCD_URL"), "--scenario", "failover", "--failover-rounds", "1", "--json")
	wantCode(t, r, 0)
	var rep bench.Report
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("--json output: %v\n%s", err, r.stdout)
	}
	designs := map[string]bool{}
	for _, res := range rep.Results {
		designs[res.Design] = true
		f := res.Failover
		switch {
		case res.Scenario != bench.ScenarioFailover || f == nil:
			t.Errorf("a result of %s with failover figures %+v", res.Scenario, f)
		case res.Errors != 0 || f.Rounds != 1 || f.Campaigners != 3 || f.TTL < 2*time.Second:
			t.Errorf("%s: %d errors (%s), %+v; want one leader killed of three, a TTL of 2s or more", res.Design, res.Errors, res.FirstError, f)
		case res.Latency.P50 <= 0 || res.Latency.P90 < res.Latency.P50 || res.Latency.Max > f.TTL+f.ExpirySlack+10*time.Second:
			t.Errorf("%s: failover took p50 %v, p90 %v, at most %v with a TTL of %v", res.Design, res.Latency.P50, res.Latency.P90, res.Latency.Max, f.TTL)
		}
	}
	if len(rep.Results) != 2 || !designs["locker"] || !designs[bench.ElectionEtcd] {
		t.Errorf("failover results of %v, want locker and %s; notes: %q", designs, bench.ElectionEtcd, rep.Notes)
	}
}
