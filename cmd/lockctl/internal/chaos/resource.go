package chaos

import (
	"sort"
	"time"
)

// resource is the shared resource every holder of a round writes to,
// and the checker that judges each write against the truth the engine
// knows: who was granted the lock last.
//
// Where the backend fences, the resource does what a fencing-checked
// store does: it accepts a write whose fence is larger than every fence
// it accepted before (or equal, from the same holder), and rejects the
// rest. Where the backend cannot fence (Redlock), it has nothing to
// check, and accepts every write.
type resource struct {
	fencing bool

	top       uint64 // the largest fence accepted
	topHolder string

	latest      string // the client granted the lock last
	latestWrote bool   // whether it has written since

	counts Counts
	writes []Write
}

// Counts are what the checker counts in a round, or summed over rounds.
type Counts struct {
	// Overlaps: pairs of clients that believed they held the key at the
	// same moment (each from its grant to its loss, release or death).
	Overlaps int `json:"overlaps"`
	// StaleRejected: writes of a superseded holder refused by the fence:
	// fencing at work.
	StaleRejected int `json:"stale_rejected"`
	// StaleAccepted: writes of a superseded holder accepted after the
	// newer holder wrote: what fencing must prevent.
	StaleAccepted int `json:"stale_accepted"`
	// LateAccepted: writes of a superseded holder accepted before the
	// newer holder's first write: they land in an order a single holder
	// could have made, but came from a holder that no longer held the key.
	LateAccepted int `json:"late_accepted"`
	// RightfulRejected: writes of the current holder refused because
	// its fence was not larger than an older holder's: a fence that went
	// backwards.
	RightfulRejected int `json:"rightful_rejected"`
	// Skipped: writes a holder did not make because it knew its lock
	// was lost (the lost-lock signal at work).
	Skipped int `json:"skipped"`
}

func (c *Counts) add(o Counts) {
	c.Overlaps += o.Overlaps
	c.StaleRejected += o.StaleRejected
	c.StaleAccepted += o.StaleAccepted
	c.LateAccepted += o.LateAccepted
	c.RightfulRejected += o.RightfulRejected
	c.Skipped += o.Skipped
}

// Write is one write the resource saw.
type Write struct {
	Client   string        `json:"client"`
	Fence    uint64        `json:"fence,omitempty"`
	At       time.Duration `json:"at"`
	Accepted bool          `json:"accepted"`
	// Verdict: rightful, stale-rejected, stale-accepted, late-accepted
	// or rightful-rejected.
	Verdict string `json:"verdict"`
}

// grant records that client was granted the lock.
func (r *resource) grant(client string) {
	r.latest, r.latestWrote = client, false
}

// write judges a write of client with fence at time at.
func (r *resource) write(client string, fence uint64, at time.Duration) Write {
	accept := true
	if r.fencing {
		accept = fence > r.top || fence == r.top && client == r.topHolder
	}
	if accept && r.fencing {
		r.top, r.topHolder = fence, client
	}
	w := Write{Client: client, Fence: fence, At: at, Accepted: accept}
	rightful := client == r.latest
	switch {
	case rightful && accept:
		w.Verdict = "rightful"
		r.latestWrote = true
	case rightful:
		w.Verdict = "rightful-rejected"
		r.counts.RightfulRejected++
	case !accept:
		w.Verdict = "stale-rejected"
		r.counts.StaleRejected++
	case r.latestWrote:
		w.Verdict = "stale-accepted"
		r.counts.StaleAccepted++
	default:
		w.Verdict = "late-accepted"
		r.counts.LateAccepted++
	}
	r.writes = append(r.writes, w)
	return w
}

// Hold is the time a client believed it held the lock: from its grant
// to its loss, release or death, or to the round's end.
type Hold struct {
	Client string        `json:"client"`
	From   time.Duration `json:"from"`
	To     time.Duration `json:"to"`
	// Ended: lost, released, killed, or round-end.
	Ended string `json:"ended"`
}

// overlaps counts the pairs of clients that both believed they held the
// lock at some moment: pairs of clients, not of holds, so that a rival
// taking the key twice while a paused holder still believes counts once.
func overlaps(holds []Hold) int {
	hs := append([]Hold(nil), holds...)
	sort.Slice(hs, func(i, j int) bool { return hs[i].From < hs[j].From })
	pairs := map[[2]string]bool{}
	for i := range hs {
		for j := i + 1; j < len(hs) && hs[j].From < hs[i].To; j++ {
			a, b := hs[i].Client, hs[j].Client
			if a != b {
				pairs[[2]string{min(a, b), max(a, b)}] = true
			}
		}
	}
	return len(pairs)
}
