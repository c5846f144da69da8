package chaos

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"time"
)

// round is one run of a scenario on one deployment: a fresh key, the
// worker processes, the resource they write to, and the history.
type round struct {
	key   string
	url   string // the deployment the workers use
	ttl   time.Duration
	slack time.Duration                 // the backend's ExpirySlack
	spawn func(url, key string) process // makes the round's workers
	start time.Time
	// started, if set, hears of each worker the round starts.
	started func(*proc)

	mu       sync.Mutex
	res      resource
	holds    []Hold
	open     map[string]int // client -> index in holds of its open hold
	timeline []Mark
	procs    []*proc

	// Set by the scenario: the time from the fault until a rival held
	// the key, and whether the key could be taken again at the end.
	newHolder time.Duration
	recovered bool
	// family is the kind of hold that takes the key again at the end:
	// "" (exclusive) for a mutex or a read/write lock, the semaphore's
	// kind for a semaphore, whose clients must agree on its limit.
	family string
}

// Mark is one moment of a round's timeline.
type Mark struct {
	At     time.Duration `json:"at"`
	Client string        `json:"client,omitempty"` // empty for the engine's own marks
	What   string        `json:"what"`
}

func newRound(key, url string, ttl, slack time.Duration, spawn func(url, key string) process, fencing bool) *round {
	return &round{key: key, url: url, ttl: ttl, slack: slack, spawn: spawn, start: time.Now(),
		res: resource{fencing: fencing}, open: map[string]int{}}
}

func (r *round) since() time.Duration { return time.Since(r.start) }

// mark adds the engine's own step (a fault, a restart) to the timeline.
func (r *round) mark(format string, args ...any) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	at := r.since()
	r.timeline = append(r.timeline, Mark{At: at, What: fmt.Sprintf(format, args...)})
	return at
}

// observe records a worker's event: holds begin and end, writes are
// judged by the resource.
func (r *round) observe(client string, e event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	what := e.Ev
	switch e.Ev {
	case evGranted, evElected:
		r.endHold(client, e.At, "re-granted")
		r.open[client] = len(r.holds)
		h := Hold{Client: client, From: e.At, To: -1, Kind: e.Kind, Limit: e.Limit, Weight: e.Weight}
		r.holds = append(r.holds, h)
		r.res.grant(client, h.claim())
		what = fmt.Sprintf("granted%s, fence %s", kindText(h), fenceText(e.Fence, e.Fenced))
		if e.Ev == evElected {
			what = fmt.Sprintf("elected leader, term %s, value %s", fenceText(e.Fence, e.Fenced), valueText(e.Value))
		}
	case evLeader:
		what = "reads the leader: " + e.Err
		if e.Err == "" {
			what = fmt.Sprintf("reads the leader: term %s, token %s, value %s", fenceText(e.Fence, e.Fenced), orNone(e.Token), valueText(e.Value))
		}
	case evWrite:
		w := r.res.write(client, e.Fence, e.At)
		access := "write"
		if w.Read {
			access = "read"
		}
		what = fmt.Sprintf("%s with fence %s: %s", access, fenceText(e.Fence, e.Fenced), w.Verdict)
	case evSkip:
		r.res.counts.Skipped++
		what = "write skipped: the lock was lost (" + e.Err + ")"
	case evLost:
		r.endHold(client, e.At, "lost")
		what = "lost: " + e.Err
	case evReleased:
		r.endHold(client, e.At, "released")
		r.res.release(client)
	case evError:
		if strings.HasPrefix(e.Err, "release:") {
			// The holder let go when it called Release (its Lost
			// closed then); a failed release leaves the lock on the
			// server until its TTL, where it blocks others but is
			// no one's belief.
			r.endHold(client, e.At, "release-failed")
			r.res.release(client)
		}
		what = "error: " + e.Err
	case evReady:
		return
	}
	r.timeline = append(r.timeline, Mark{At: e.At, Client: client, What: what})
}

// endHold ends client's open hold at at, if it has one. Callers hold
// r.mu.
func (r *round) endHold(client string, at time.Duration, why string) {
	i, ok := r.open[client]
	if !ok {
		return
	}
	delete(r.open, client)
	r.holds[i].To, r.holds[i].Ended = at, why
}

// kindText names a hold's kind for the timeline: "", " a shared hold",
// " 1 of 2 permits".
func kindText(h Hold) string {
	switch h.Kind {
	case "shared":
		return " a shared hold"
	case "permit":
		return fmt.Sprintf(" %d of %d permits", h.Weight, h.Limit)
	}
	return ""
}

// valueText is a leader's value for the timeline.
func valueText(v string) string {
	if v == "" {
		return "none"
	}
	return fmt.Sprintf("%q", v)
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func fenceText(fence uint64, fenced bool) string {
	if !fenced {
		return "none"
	}
	return fmt.Sprint(fence)
}

// kill kills p with SIGKILL; its hold ends there, as far as its belief
// goes; on the servers it lasts until it expires.
func (r *round) kill(p *proc) {
	p.signal(syscall.SIGKILL)
	at := r.mark("%s killed (SIGKILL)", p.name)
	r.mu.Lock()
	r.endHold(p.name, at, "killed")
	r.res.stall(p.name)
	r.mu.Unlock()
}

// pause stops p with SIGSTOP, and returns when: nothing refreshes its
// lock until it resumes.
func (r *round) pause(p *proc) time.Duration {
	p.signal(syscall.SIGSTOP)
	at := r.mark("%s paused (SIGSTOP)", p.name)
	r.mu.Lock()
	r.res.stall(p.name)
	r.mu.Unlock()
	return at
}

// stopAll stops every worker still running.
func (r *round) stopAll() {
	for _, p := range r.procs {
		p.stop()
	}
}

// outcome closes the round's books: holds still open end now.
func (r *round) outcome() RoundResult {
	r.mu.Lock()
	defer r.mu.Unlock()
	end := r.since()
	for c := range r.open {
		r.endHold(c, end, "round-end")
	}
	c := r.res.counts
	c.Overlaps = overlaps(r.holds)
	return RoundResult{Counts: c, Holds: r.holds, Writes: r.res.writes, Timeline: r.timeline, Took: end,
		NewHolder: r.newHolder, Recovered: r.recovered}
}

// acquire has p take the key with the round's TTL, waiting at most wait.
func (r *round) acquire(ctx context.Context, p *proc, ttl, wait time.Duration) (event, error) {
	return r.acquireAs(ctx, p, ttl, wait, "")
}

// acquireAs is acquire of a kind of hold: "" (exclusive), "shared",
// "limit=N" (see the worker's acquire command).
func (r *round) acquireAs(ctx context.Context, p *proc, ttl, wait time.Duration, kind string) (event, error) {
	return p.do(ctx, wait+10*time.Second, strings.TrimSpace(fmt.Sprintf("acquire %v %v %s", ttl, wait, kind)), evGranted)
}

// write has p write; with ifHeld only while it believes it holds.
func (r *round) write(ctx context.Context, p *proc, ifHeld bool) (event, error) {
	cmd := "write"
	if ifHeld {
		cmd = "write-if-held"
	}
	return p.do(ctx, 10*time.Second, cmd, evWrite, evSkip)
}
