package chaos

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"
)

// memEngine is an engine whose workers run in this process on one
// memory store (memWorkers; each round has a key of its own), for
// rounds of one deployment d.
func memEngine(d *deployment, rounds int) *engine {
	return &engine{o: Options{Rounds: rounds}, rep: &Report{Started: time.Now()}, id: "test", deps: []*deployment{d}, spawn: memWorkers()}
}

// scenario returns the scenario named name.
func scenario(t *testing.T, name string) *Scenario {
	t.Helper()
	for _, sc := range Scenarios {
		if sc.Name == name {
			return sc
		}
	}
	t.Fatalf("no scenario %q", name)
	return nil
}

// TestKindsScenariosOnMemory runs the scenarios of shared holds and
// semaphores on the memory backend, whose clients pause and crash as
// processes do: a paused writer's, reader's or permit holder's stale
// access is refused by its fence; a killed reader's share and a killed
// holder's permit come back within TTL + slack, and a rival takes them.
func TestKindsScenariosOnMemory(t *testing.T) {
	const rounds = 2
	for _, name := range []string{"pause-writer", "pause-shared", "pause-permit", "kill-shared", "kill-permit"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			sc := scenario(t, name)
			d := &deployment{backend: "memory", label: "memory", url: "memory://", fencing: true, shared: true, permits: true, ttl: 300 * time.Millisecond}
			e := memEngine(d, rounds)
			e.plan([]*Scenario{sc})
			c := e.cell(context.Background(), sc, d)
			n := c.Counts
			if !c.Expected || len(c.Errors) > 0 || c.Recovered != rounds {
				t.Fatalf("%s: %s; errors %q; recovered %d of %d", name, c.Verdict, c.Errors, c.Recovered, rounds)
			}
			if n.RightfulRejected != 0 || n.StaleAccepted+n.LateAccepted != 0 {
				t.Errorf("counts %+v: want no rightful write refused and no stale one accepted", n)
			}
			if strings.HasPrefix(name, "pause") && n.StaleRejected != rounds {
				t.Errorf("%d stale accesses refused, want one a round: %+v", n.StaleRejected, n)
			}
			if strings.HasPrefix(name, "kill") && (c.Bound != d.ttl+expiryMargin || c.NewHolder <= 0 || c.NewHolder > c.Bound) {
				t.Errorf("the rival held the key %v after the kill, bound %v", c.NewHolder, c.Bound)
			}
			if c.Example == nil || len(c.Example.Holds) < 3 {
				t.Errorf("example round: %+v", c.Example)
			}
		})
	}
}

// TestKindsScenariosWithoutFencing: on a backend that cannot fence (as
// Redlock, the deployment is named so), the paused holders' stale
// accesses get through, and the checker counts them: the scenarios can
// see what they are for.
func TestKindsScenariosWithoutFencing(t *testing.T) {
	for _, name := range []string{"pause-writer", "pause-shared", "pause-permit"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			sc := scenario(t, name)
			d := &deployment{backend: "redlock", label: "redlock", url: "memory://", shared: true, permits: true, ttl: 300 * time.Millisecond}
			e := memEngine(d, 1)
			e.plan([]*Scenario{sc})
			c := e.cell(context.Background(), sc, d)
			if !c.Expected || c.Counts.StaleAccepted != 1 || c.StaleRounds != 1 {
				t.Errorf("%s without fencing: %s; counts %+v, errors %q", name, c.Verdict, c.Counts, c.Errors)
			}
		})
	}
}

// TestKindsScenariosGated: a deployment whose backend does not admit a
// scenario's kind does not run it, and the plan notes why, naming the
// capability.
func TestKindsScenariosGated(t *testing.T) {
	d := &deployment{backend: "redis", label: "redis"}
	e := memEngine(d, 1)
	e.plan(Scenarios)
	notes := strings.Join(e.rep.Notes, "\n")
	for _, sc := range Scenarios {
		applies := e.applies(sc, d)
		switch sc.Needs {
		case needShared:
			if applies || !strings.Contains(notes, sc.Name+": not run on redis: the backend does not admit shared holds (Capabilities.Shared is false)") {
				t.Errorf("%s on a backend without shared holds: applies %v; notes:\n%s", sc.Name, applies, notes)
			}
		case needPermits:
			if applies || !strings.Contains(notes, sc.Name+": not run on redis: the backend does not admit semaphores (Capabilities.Permits is false)") {
				t.Errorf("%s on a backend without semaphores: applies %v; notes:\n%s", sc.Name, applies, notes)
			}
		default:
			if applies != slices.Contains(sc.Backends, "redis") {
				t.Errorf("%s: applies %v on redis", sc.Name, applies)
			}
		}
	}
	d.shared, d.permits = true, true
	for _, name := range []string{"pause-writer", "kill-permit"} {
		if !e.applies(scenario(t, name), d) {
			t.Errorf("%s does not apply to a backend that admits its kind", name)
		}
	}
}

// TestCellBound: a Bounded cell whose rival got the key past its bound
// is unexpected, and says so.
func TestCellBound(t *testing.T) {
	c := Cell{Rounds: 2, Recovered: 2, Bound: time.Second, History: []RoundResult{{NewHolder: 900 * time.Millisecond}, {NewHolder: 1500 * time.Millisecond}}, NewHolder: 1500 * time.Millisecond}
	c.judge(expectation{fencing: true})
	if c.Expected || !strings.Contains(c.Verdict, "in 1 round(s) the rival waited past TTL + expiry slack") {
		t.Errorf("verdict %q, want one round past the bound", c.Verdict)
	}
	c.History[1].NewHolder = time.Second
	c.judge(expectation{fencing: true})
	if !c.Expected {
		t.Errorf("within the bound: %q", c.Verdict)
	}
}

// TestKindsScenariosBrokenBackend: on a backend that excludes no one
// (every worker on a memory store of its own), every scenario of kinds
// comes out unexpected, the pauses with beliefs that overlap against the
// key's rule: the checker sees what the scenarios are for.
func TestKindsScenariosBrokenBackend(t *testing.T) {
	for _, name := range []string{"pause-writer", "pause-shared", "pause-permit", "kill-shared", "kill-permit"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			sc := scenario(t, name)
			d := &deployment{backend: "memory", label: "memory", url: "memory://", fencing: true, shared: true, permits: true, ttl: 300 * time.Millisecond}
			e := memEngine(d, 1)
			e.spawn = func(url, key string) process { return memWorkers()(url, key) } // a store per worker
			e.plan([]*Scenario{sc})
			c := e.cell(context.Background(), sc, d)
			if c.Expected || strings.HasPrefix(name, "pause") && c.Counts.Overlaps == 0 {
				t.Errorf("%s on a backend that excludes no one: %s; counts %+v", name, c.Verdict, c.Counts)
			}
		})
	}
}
