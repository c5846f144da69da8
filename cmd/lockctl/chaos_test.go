package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/distlock/locker/cmd/lockctl/internal/chaos"
)

// TestChaos runs the reduced matrix, one round of every scenario on every
// server backend it applies to (the backends at once), and checks what
// must hold: the key can be taken again after every fault; no write of
// the current holder is refused; no stale write is accepted wherever the
// backend fences; and Redlock, which cannot fence, lets a stale write
// through where the fault hands a rival a majority (pause, a node's clock
// running ahead, a node restarted at once without persistence), and not
// where the node stays down for the TTL first; PostgreSQL's failover to
// an asynchronous replica grants the lock twice with a repeated fence:
// the checker is shown able to see a violation, and the backends'
// guarantees are measured, not assumed.
//
// Not parallel to the other tests: its rounds start server clusters (three
// JVMs for a ZooKeeper ensemble), and the load would slow the servers the
// parallel tests time, such as Redlock's 100 ms node timeouts in TestBench.
func TestChaos(t *testing.T) {
	forEachServer(t, func(t *testing.T, s server, url string) {
		out := t.TempDir()
		p, rep := runChaos(t, "--url", url, "--rounds", "1", "--out", out)
		checkCells(t, s, rep)
		if len(rep.Backends) != 1 || !strings.Contains(rep.Backends[0].Servers, map[string]string{"redis": "Redis ", "redlock": "Redis ", "zookeeper": "ZooKeeper ", "etcd": "etcd ", "postgres": "PostgreSQL "}[s.name]) {
			t.Errorf("the report's deployment does not name its servers' version: %+v", rep.Backends)
		}
		for _, f := range []string{"report.json", "report.md", "report.html"} {
			if fi, err := os.Stat(filepath.Join(out, f)); err != nil || fi.Size() == 0 {
				t.Errorf("--out wrote no %s: %v", f, err)
			}
		}
		if !strings.Contains(p.stderr.String(), "pause on "+s.name+", round 1 of 1") {
			t.Errorf("the progress does not name the rounds:\n%s", p.stderr.String())
		}
	})
}

// runChaos runs lockctl chaos --json with args, fails the test unless it
// exits 0 with a report, and returns the process and the report.
func runChaos(t *testing.T, args ...string) (*proc, *chaos.Report) {
	t.Helper()
	p := start(t, testEnv(t), append([]string{"chaos", "--json"}, args...)...)
	code := p.wait(t, 5*time.Minute)
	var rep chaos.Report
	if err := json.Unmarshal([]byte(p.stdout.String()), &rep); err != nil {
		t.Fatalf("exit %d, --json output: %v\n%s\nstderr:\n%s", code, err, p.stdout.String(), p.stderr.String())
	}
	if code != 0 {
		t.Errorf("exit code %d, want 0; stderr:\n%s", code, p.stderr.String())
	}
	return p, &rep
}

// checkCells checks the matrix of one backend's run.
func checkCells(t *testing.T, s server, rep *chaos.Report) {
	t.Helper()
	// The scenarios of shared holds and semaphores run where the backend
	// admits them, and are noted where it does not.
	if len(rep.Backends) != 1 {
		t.Fatalf("deployments %+v, want one", rep.Backends)
	}
	b := rep.Backends[0]
	notes := strings.Join(rep.Notes, "\n")
	var want []string
	for _, sc := range chaos.Scenarios {
		needs := map[string]bool{"pause-writer": !b.Shared, "pause-shared": !b.Shared, "kill-shared": !b.Shared, "pause-permit": !b.Permits, "kill-permit": !b.Permits}
		switch {
		case !slices.Contains(sc.Backends, s.name):
		case needs[sc.Name]:
			if !strings.Contains(notes, sc.Name+": not run on "+s.name+": the backend does not admit") {
				t.Errorf("%s is not run on %s, and no note says why:\n%s", sc.Name, s.name, notes)
			}
		default:
			want = append(want, sc.Name)
		}
	}
	// Where a scenario loses the lock and its fence (PostgreSQL's
	// failover to an asynchronous replica), a second holder and a fence
	// not above the old holder's are what the round must show.
	loses := map[string]bool{}
	for _, sc := range chaos.Scenarios {
		loses[sc.Name] = slices.Contains(sc.Loses, s.name)
	}
	var got []string
	for _, c := range rep.Cells {
		got = append(got, c.Scenario)
		n := c.Counts
		switch {
		case !c.Expected || len(c.Errors) > 0:
			t.Errorf("%s: %s %v", c.Scenario, c.Verdict, c.Errors)
		case loses[c.Scenario]:
			if n.Overlaps != c.Rounds || n.RightfulRejected+n.StaleAccepted+n.LateAccepted == 0 {
				t.Errorf("%s: counts %+v: want a second holder and a repeated fence in each of %d round(s)", c.Scenario, n, c.Rounds)
			}
		case c.Recovered != c.Rounds:
			t.Errorf("%s: the key was taken again in %d of %d rounds", c.Scenario, c.Recovered, c.Rounds)
		case n.RightfulRejected != 0:
			t.Errorf("%s: %d rightful writes rejected", c.Scenario, n.RightfulRejected)
		case s.fencing && n.StaleAccepted+n.LateAccepted != 0:
			t.Errorf("%s: %d stale writes accepted on a fencing backend", c.Scenario, n.StaleAccepted+n.LateAccepted)
		}
		if s.name == "redlock" {
			violates := slices.Contains([]string{"pause", "clock-fast", "restart", "pause-writer", "pause-shared", "pause-permit", "pause-leader"}, c.Scenario)
			if violates != (n.StaleAccepted > 0) {
				t.Errorf("redlock %s: %d stale writes accepted; want some: %v", c.Scenario, n.StaleAccepted, violates)
			}
		}
		if (c.Scenario == "pause" || c.Scenario == "pause-leader") && n.Overlaps == 0 {
			t.Errorf("%s: no overlap seen, though the paused holder believed it held the lock when the rival took it", c.Scenario)
		}
		if c.Scenario == "pause-leader" && s.fencing && n.StaleRejected != c.Rounds {
			t.Errorf("pause-leader: %d stale terms refused in %d rounds, want one a round", n.StaleRejected, c.Rounds)
		}
		if c.Example == nil || len(c.Example.Timeline) == 0 {
			t.Errorf("%s: no round history", c.Scenario)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("scenarios run on %s: %v, want %v", s.name, got, want)
	}
}

// TestChaosErrors: bad input gets a clear error and lockctl's own exit
// code, before any round runs.
func TestChaosErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"chaos", "--url", "memory://"}, "processes of their own"},
		{[]string{"chaos", "--url", "redis://127.0.0.1:1", "--scenario", "meteor"}, `unknown scenario "meteor"`},
		{[]string{"chaos", "--url", "redis://127.0.0.1:1", "--rounds", "0"}, "--rounds"},
		{[]string{"chaos", "--url", "nosuch://x"}, "nosuch"},
	} {
		r := runLockctl(t, testEnv(t), tc.args...)
		wantCode(t, r, exitError, tc.want)
	}
}

// TestChaosSentinelCluster: on a Sentinel deployment and a Redis Cluster,
// whose clients dial the addresses the servers hand out (the master a
// Sentinel names, the Cluster's nodes), the faults still reach every
// connection of the holder: cut off, it loses the lock and knows it
// (partition), and its applied but unanswered acquisition is undone
// (lost-replies). Were the master's connections left out, the holder
// would keep refreshing through a partition and the rival would never get
// the key.
func TestChaosSentinelCluster(t *testing.T) {
	sentinel, cluster := serverURL(t, "LOCKER_TEST_REDIS_SENTINEL_URL"), serverURL(t, "LOCKER_TEST_REDIS_CLUSTER_URL")
	_, rep := runChaos(t, "--url", sentinel, "--url", cluster, "--scenario", "partition,lost-replies", "--rounds", "1")
	got := map[string]int{}
	for _, c := range rep.Cells {
		got[c.Backend]++
		if !c.Expected || c.Recovered != c.Rounds {
			t.Errorf("%s on %s: %s %v", c.Scenario, c.Backend, c.Verdict, c.Errors)
		}
		if c.Scenario == "partition" && c.Counts.Skipped != c.Rounds {
			t.Errorf("partition on %s: the holder skipped %d of %d writes; it should have known it lost the lock", c.Backend, c.Counts.Skipped, c.Rounds)
		}
	}
	if got["redis"] != 2 || got["redis#2"] != 2 {
		t.Errorf("cells per deployment: %v, want 2 each for redis and redis#2", got)
	}
}
