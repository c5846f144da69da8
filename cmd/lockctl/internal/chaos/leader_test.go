package chaos

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestPauseLeaderOnMemory: on the memory backend, whose clients pause as
// processes do, the paused leader's write with its old term is refused
// in every round, the new leader's is accepted, and each reading of the
// leader names the one elected, with its term and value.
func TestPauseLeaderOnMemory(t *testing.T) {
	t.Parallel()
	const rounds = 2
	sc := scenario(t, "pause-leader")
	d := &deployment{backend: "memory", label: "memory", url: "memory://", fencing: true, values: true, ttl: 300 * time.Millisecond}
	e := memEngine(d, rounds)
	e.plan([]*Scenario{sc})
	c := e.cell(context.Background(), sc, d)
	n := c.Counts
	if !c.Expected || len(c.Errors) > 0 || c.Recovered != rounds {
		t.Fatalf("%s; errors %q; recovered %d of %d", c.Verdict, c.Errors, c.Recovered, rounds)
	}
	if n.StaleRejected != rounds || n.StaleAccepted+n.LateAccepted+n.RightfulRejected != 0 || n.Overlaps != rounds {
		t.Errorf("counts %+v: want the paused leader's write refused and its belief overlapping the new leader's once a round", n)
	}
	var timeline []string
	for _, m := range c.Example.Timeline {
		timeline = append(timeline, m.Client+": "+m.What)
	}
	text := strings.Join(timeline, "\n")
	for _, want := range []string{`A: elected leader, term `, `value "leader-A"`, `B: reads the leader: term `, `B: elected leader, term `, `value "leader-B"`} {
		if !strings.Contains(text, want) {
			t.Errorf("the timeline does not say %q:\n%s", want, text)
		}
	}
}

// TestPauseLeaderWithoutFencing: where the backend mints no terms (as on
// Redlock, the deployment is named so), the paused leader's write gets
// through, and the checker counts it.
func TestPauseLeaderWithoutFencing(t *testing.T) {
	t.Parallel()
	sc := scenario(t, "pause-leader")
	d := &deployment{backend: "redlock", label: "redlock", url: "memory://", ttl: 300 * time.Millisecond}
	e := memEngine(d, 1)
	e.plan([]*Scenario{sc})
	c := e.cell(context.Background(), sc, d)
	if !c.Expected || c.Counts.StaleAccepted != 1 || c.StaleRounds != 1 {
		t.Errorf("without fencing: %s; counts %+v, errors %q", c.Verdict, c.Counts, c.Errors)
	}
}

// TestPauseLeaderBrokenBackend: on a backend that excludes no one (every
// worker on a memory store of its own), the second campaigner reads no
// leader while the first leads, and the round fails saying so.
func TestPauseLeaderBrokenBackend(t *testing.T) {
	t.Parallel()
	sc := scenario(t, "pause-leader")
	d := &deployment{backend: "memory", label: "memory", url: "memory://", fencing: true, values: true, ttl: 300 * time.Millisecond}
	e := memEngine(d, 1)
	e.spawn = func(url, key string) process { return memWorkers()(url, key) } // a store per worker
	e.plan([]*Scenario{sc})
	c := e.cell(context.Background(), sc, d)
	if c.Expected || len(c.Errors) != 1 || !strings.Contains(c.Errors[0], `B read "no leader" while A led`) {
		t.Errorf("on a backend that excludes no one: %s; errors %q", c.Verdict, c.Errors)
	}
}
