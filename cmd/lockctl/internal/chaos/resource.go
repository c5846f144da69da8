package chaos

import (
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/distlock/locker/backend"
)

// resource is the shared resource every holder of a round writes to,
// and the checker that judges each write against the truth the engine
// knows: the grants the servers made, in order, and the releases.
//
// Where the backend fences, the resource does what a fencing-checked
// store does, by the admission rule of the key's kind (backend.Admit)
// applied to fences: it accepts an access when its hold's units and
// those of every access it accepted with a larger fence (or the same
// fence from another client) fit the key's capacity. For a mutex that
// is "a fence larger than every fence accepted before, or equal from
// the same holder"; a reader is refused once a writer with a larger
// fence has written, a writer once anyone with a larger fence has
// accessed it; a permit holder once the larger fences take the permits
// it needs. Where the backend cannot fence (Redlock), it has nothing to
// check, and accepts every access.
//
// A holder's access is a write for an exclusive hold and a read for a
// shared one; the resource judges both alike.
type resource struct {
	fencing bool

	accepted []access // the accesses accepted, for the fence check

	grants []grantRec     // every grant, in order
	last   map[string]int // client -> index in grants of its latest grant
	counts Counts
	writes []Write
}

// access is an accepted access: its fence, its client and what its hold
// takes of the key.
type access struct {
	fence  uint64
	client string
	units  int64
}

// grantRec is one grant of the key, as the truth the checker judges by.
type grantRec struct {
	client string
	claim  backend.Claim
	// live: not released; a killed or lost holder stays live, as the
	// servers hold its grant until it expires.
	live bool
	// stalled: its holder was paused or killed, so that nothing
	// refreshes the grant any more: it is the first to expire.
	stalled bool
	// superseded: a later grant could not have been made while this one
	// held, so it had ended on the servers by then.
	superseded bool
	wrote      bool // its holder has written since the grant
}

// grant records that client was granted the key with claim c. Where the
// grants that may still hold, this one included, exceed the key's
// capacity, the servers must have ended some of the earlier ones by
// then: those whose holders stalled first, then the earliest, until the
// rest fit. (With exclusive and shared holds that choice is forced: an
// exclusive grant ends every earlier one, a shared grant the exclusive
// one; only a semaphore's permits leave one, and a stalled holder's
// grant, which nothing refreshes, is the one that expired.)
func (r *resource) grant(client string, c backend.Claim) {
	if r.last == nil {
		r.last = map[string]int{}
	}
	if i, ok := r.last[client]; ok {
		r.grants[i].live = false // a client holds one grant at a time
	}
	r.grants = append(r.grants, grantRec{client: client, claim: c, live: true})
	r.last[client] = len(r.grants) - 1
	over, capacity := c.Units()
	var held []int // the earlier grants that may still hold
	for i, g := range r.grants[:len(r.grants)-1] {
		if g.live && !g.superseded {
			u, _ := g.claim.Units()
			over += u
			held = append(held, i)
		}
	}
	over -= capacity
	slices.SortStableFunc(held, func(a, b int) int { return compareBool(r.grants[b].stalled, r.grants[a].stalled) })
	for _, i := range held {
		if over <= 0 {
			break
		}
		r.grants[i].superseded = true
		u, _ := r.grants[i].claim.Units()
		over -= u
	}
}

// compareBool orders false before true.
func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// stall records that client's holder stopped (paused, killed): nothing
// refreshes its grant any more.
func (r *resource) stall(client string) {
	if i, ok := r.last[client]; ok {
		r.grants[i].stalled = true
	}
}

// release records that client released its grant on the servers.
func (r *resource) release(client string) {
	if i, ok := r.last[client]; ok {
		r.grants[i].live = false
	}
}

// write judges an access of client with fence at time at.
func (r *resource) write(client string, fence uint64, at time.Duration) Write {
	i, granted := r.last[client]
	claim := backend.Claim{}
	if granted {
		claim = r.grants[i].claim
	}
	units, capacity := claim.Units()
	accept := true
	if r.fencing {
		accept = r.fits(client, fence, units, capacity)
	}
	if accept && r.fencing {
		r.accepted = append(r.accepted, access{fence: fence, client: client, units: units})
	}
	w := Write{Client: client, Fence: fence, At: at, Accepted: accept}
	if claim.Kind == backend.Shared {
		w.Read = true
	}
	rightful := granted && !r.grants[i].superseded
	switch {
	case rightful && accept:
		w.Verdict = "rightful"
		r.grants[i].wrote = true
	case rightful:
		w.Verdict = "rightful-rejected"
		r.counts.RightfulRejected++
	case !accept:
		w.Verdict = "stale-rejected"
		r.counts.StaleRejected++
	case r.newerWrote(i, granted):
		w.Verdict = "stale-accepted"
		r.counts.StaleAccepted++
	default:
		w.Verdict = "late-accepted"
		r.counts.LateAccepted++
	}
	r.writes = append(r.writes, w)
	return w
}

// fits applies the key's admission rule to fences: the access's units
// and those of every accepted access with a larger fence, or the same
// fence from another client, fit the capacity.
func (r *resource) fits(client string, fence uint64, units, capacity int64) bool {
	for _, a := range r.accepted {
		if a.fence > fence || a.fence == fence && a.client != client {
			units += a.units
		}
	}
	return units <= capacity
}

// newerWrote reports whether a holder granted after grant i has written
// since its grant: then a superseded holder's write lands after newer
// data. Without a grant, any holder's write counts.
func (r *resource) newerWrote(i int, granted bool) bool {
	if !granted {
		i = -1
	}
	for _, g := range r.grants[i+1:] {
		if g.wrote {
			return true
		}
	}
	return false
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

// Write is one access the resource saw: a write, or a shared holder's
// read.
type Write struct {
	Client   string        `json:"client"`
	Fence    uint64        `json:"fence,omitempty"`
	At       time.Duration `json:"at"`
	Read     bool          `json:"read,omitempty"` // a shared holder's access
	Accepted bool          `json:"accepted"`
	// Verdict: rightful, stale-rejected, stale-accepted, late-accepted
	// or rightful-rejected.
	Verdict string `json:"verdict"`
}

// Hold is the time a client believed it held the lock: from its grant
// to its loss, release or death, or to the round's end.
type Hold struct {
	Client string        `json:"client"`
	From   time.Duration `json:"from"`
	To     time.Duration `json:"to"`
	// Ended: lost, released, release-failed (Release returned an error:
	// the holder let go, the server keeps the lock until its TTL),
	// killed, or round-end.
	Ended string `json:"ended"`
	// Kind is "shared" or "permit" (with the semaphore's Limit and the
	// hold's Weight); empty for an exclusive hold.
	Kind   string `json:"kind,omitempty"`
	Limit  int    `json:"limit,omitempty"`
	Weight int    `json:"weight,omitempty"`
}

// claim is what the hold took of the key.
func (h Hold) claim() backend.Claim {
	switch h.Kind {
	case backend.Shared.String():
		return backend.Claim{Kind: backend.Shared}
	case backend.Permit.String():
		return backend.Claim{Kind: backend.Permit, Limit: h.Limit, Weight: h.Weight}
	}
	return backend.Claim{}
}

// overlaps counts the beliefs that broke the key's rule: pairs of
// clients that believed at one moment they held holds that conflict (two
// exclusive holds, a shared one beside an exclusive one), and groups of
// clients whose permits, believed held at one moment, were more than
// the semaphore's limit. Clients, not holds, are counted, so that a
// rival taking the key twice while a paused holder still believes counts
// once; shared holds together, and permits within the limit, are no
// overlap.
func overlaps(holds []Hold) int {
	hs := append([]Hold(nil), holds...)
	sort.SliceStable(hs, func(i, j int) bool { return hs[i].From < hs[j].From })
	seen := map[string]bool{}
	for j, h := range hs {
		c := h.claim()
		units, capacity := c.Units()
		var group []string
		paired := false
		for i, o := range hs {
			if i == j || o.Client == h.Client || o.From > h.From || o.From == h.From && i > j || h.From >= o.To {
				continue
			}
			if c.Conflicts(o.claim()) {
				a, b := h.Client, o.Client
				seen[min(a, b)+"\x00"+max(a, b)] = true
				paired = true
			}
			u, _ := o.claim().Units()
			units += u
			group = append(group, o.Client)
		}
		if !paired && units > capacity {
			group = append(group, h.Client)
			slices.Sort(group)
			seen[strings.Join(slices.Compact(group), "\x00")] = true
		}
	}
	return len(seen)
}
