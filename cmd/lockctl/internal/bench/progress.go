package bench

import (
	"fmt"
	"time"
)

// Progress is what a long run (bench, chaos) says as each step starts:
// which step of how many, the time so far, an estimate of the time left,
// and what the step does.
type Progress struct {
	Step, Steps int
	Elapsed     time.Duration
	// Left estimates the time the rest of the run takes, the step
	// starting now included; negative when there is nothing to estimate
	// it from yet.
	Left time.Duration
	What string
}

// String is the progress line: "[12/19 3m46s, ~1m20s left] what".
func (p Progress) String() string {
	left := ""
	if p.Left >= 0 {
		left = ", ~" + roundLeft(p.Left).String() + " left"
	}
	return fmt.Sprintf("[%2d/%d %s%s] %s", p.Step, p.Steps, p.Elapsed.Round(time.Second), left, p.What)
}

// roundLeft rounds an estimate to what it is worth: whole seconds under
// a minute, ten seconds under ten minutes, whole minutes beyond.
func roundLeft(d time.Duration) time.Duration {
	switch {
	case d < time.Minute:
		return d.Round(time.Second)
	case d < 10*time.Minute:
		return d.Round(10 * time.Second)
	}
	return d.Round(time.Minute)
}

// estimateLeft is the time the steps from step (counting from 0) to the
// end of plan take, each planned to take as long as plan says: scaled by
// how much longer than planned the steps done so far took (in took, the
// time since the first step started), since every step also opens
// clients, warms up and closes, which the plan does not count. Before a
// step has ended, it is the plan as it stands.
func estimateLeft(plan []time.Duration, step int, took time.Duration) time.Duration {
	var done, left time.Duration
	for i, d := range plan {
		if i < step {
			done += d
		} else {
			left += d
		}
	}
	if done <= 0 || took <= 0 {
		return left
	}
	return time.Duration(float64(left) * float64(took) / float64(done))
}
