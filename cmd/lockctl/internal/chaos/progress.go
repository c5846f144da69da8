package chaos

import (
	"time"
)

// schedule keeps the rounds a run has left, for the estimate of the time
// left: each deployment runs its rounds one after another, the
// deployments at once, so the run ends when the deployment with the
// most left to do ends. A round not yet run is estimated to take as long
// as the rounds of its scenario took so far (on any deployment), or,
// before the scenario has had one, as long as every round so far took
// on average; the round running is what its estimate has left.
type schedule struct {
	left    [][]string     // per deployment, the scenarios of its rounds not ended; the first is running once started
	started []time.Time    // per deployment, when its running round started; zero when none runs
	took    map[string]sum // per scenario, the rounds ended
	all     sum            // every round ended
}

// sum is a count of rounds and the time they took.
type sum struct {
	n int
	d time.Duration
}

func (s sum) mean() time.Duration { return s.d / time.Duration(s.n) }

// newSchedule plans rounds: per deployment, the scenario of each round
// in the order they run.
func newSchedule(rounds [][]string) *schedule {
	s := &schedule{left: rounds, started: make([]time.Time, len(rounds)), took: map[string]sum{}}
	return s
}

// start notes that deployment dep started its next round at now.
func (s *schedule) start(dep int, now time.Time) { s.started[dep] = now }

// end notes that deployment dep's running round ended at now.
func (s *schedule) end(dep int, now time.Time) {
	if s.started[dep].IsZero() || len(s.left[dep]) == 0 {
		return
	}
	sc, d := s.left[dep][0], now.Sub(s.started[dep])
	s.left[dep], s.started[dep] = s.left[dep][1:], time.Time{}
	t := s.took[sc]
	s.took[sc] = sum{t.n + 1, t.d + d}
	s.all = sum{s.all.n + 1, s.all.d + d}
}

// timeLeft estimates the time until every deployment has ended its
// rounds, at now; negative before any round has ended, when there is
// nothing to estimate from.
func (s *schedule) timeLeft(now time.Time) time.Duration {
	if s.all.n == 0 {
		return -1
	}
	longest := time.Duration(0)
	for dep, scs := range s.left {
		var left time.Duration
		for i, sc := range scs {
			est := s.all.mean()
			if t := s.took[sc]; t.n > 0 {
				est = t.mean()
			}
			if i == 0 && !s.started[dep].IsZero() {
				est = max(est-now.Sub(s.started[dep]), 0)
			}
			left += est
		}
		longest = max(longest, left)
	}
	return longest
}
