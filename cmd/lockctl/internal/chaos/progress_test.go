package chaos

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestScheduleTimeLeft: the deployments run their rounds at once, so the
// time left is the longest any one has left; a round is estimated from
// the rounds of its scenario, or of every scenario before its own has
// had one.
func TestScheduleTimeLeft(t *testing.T) {
	t0 := time.Now()
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	s := newSchedule([][]string{{"pause", "pause", "kill"}, {"pause", "leader-kill"}})
	s.start(0, at(0))
	s.start(1, at(0))
	if got := s.timeLeft(at(1)); got >= 0 {
		t.Errorf("before any round ended: %v, want none (negative)", got)
	}
	s.end(0, at(10)) // pause: 10 s
	s.start(0, at(10))
	// Deployment 0: its second pause, 2 s in (8 s left), then kill (no
	// kill yet: the mean of every round, 10 s). Deployment 1: its pause is
	// past the mean (0 left), then leader-kill (10 s).
	if got, want := s.timeLeft(at(12)), 18*time.Second; got != want {
		t.Errorf("at 12 s: %v, want %v", got, want)
	}
	s.end(1, at(14)) // pause: 14 s; the mean of pause is now 12 s
	s.start(1, at(14))
	s.end(0, at(20)) // pause: 10 s; pause's mean 34/3 s, every round's too
	s.start(0, at(20))
	s.end(0, at(50)) // kill: 30 s
	// Deployment 0 is done; deployment 1's leader-kill, 36 s in, has no
	// round of its own to go by: the mean of all four rounds, 16 s, is
	// past; nothing is left that the schedule can see.
	if got := s.timeLeft(at(50)); got != 0 {
		t.Errorf("at 50 s: %v, want 0", got)
	}
	s.end(1, at(60))
	if got := s.timeLeft(at(60)); got != 0 {
		t.Errorf("at the end: %v, want 0", got)
	}
}

// TestConnsNote: chaos says how many sessions it opens on ZooKeeper at
// once, and whether a server at the default maxClientCnxns takes them.
func TestConnsNote(t *testing.T) {
	for _, tc := range []struct {
		backends []string
		want     string
	}{
		{[]string{"redis", "etcd"}, "two worker processes at once per deployment, each with one client of its own; 2 deployment(s) at once"},
		{[]string{"redis", "zookeeper"}, "on ZooKeeper at most 2 sessions at once, one connection each: under the default maxClientCnxns (60 connections per client address)"},
		{slices.Repeat([]string{"zookeeper"}, 30), "on ZooKeeper up to 60 sessions at once, one connection each: more than a server at the default maxClientCnxns"},
	} {
		e := &engine{}
		for _, b := range tc.backends {
			e.deps = append(e.deps, &deployment{backend: b})
		}
		if got := e.connsNote(); !strings.Contains(got, tc.want) {
			t.Errorf("%v: %q, want it to say %q", tc.backends, got, tc.want)
		}
	}
	// A scenario with three workers a round, planned on 20 ZooKeeper
	// deployments that admit its kind: 60 sessions.
	e := &engine{o: Options{Rounds: 1}, rep: &Report{}}
	for range 20 {
		e.deps = append(e.deps, &deployment{backend: "zookeeper", shared: true})
	}
	e.plan([]*Scenario{scenario(t, "kill-shared")})
	if got, want := e.connsNote(), "three worker processes at once per deployment"; !strings.Contains(got, want) || !strings.Contains(got, "up to 60 sessions") {
		t.Errorf("%q, want it to say %q and up to 60 sessions", got, want)
	}
}
