package chaos

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"time"
)

// round is one run of a scenario on one deployment: a fresh key, the
// worker processes, the resource they write to, and the history.
type round struct {
	key    string
	url    string // the deployment the workers use
	ttl    time.Duration
	slack  time.Duration // the backend's ExpirySlack
	worker WorkerCommand
	start  time.Time
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
}

// Mark is one moment of a round's timeline.
type Mark struct {
	At     time.Duration `json:"at"`
	Client string        `json:"client,omitempty"` // empty for the engine's own marks
	What   string        `json:"what"`
}

func newRound(key, url string, ttl, slack time.Duration, worker WorkerCommand, fencing bool) *round {
	return &round{key: key, url: url, ttl: ttl, slack: slack, worker: worker, start: time.Now(),
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
	case evGranted:
		r.endHold(client, e.At, "re-granted")
		r.open[client] = len(r.holds)
		r.holds = append(r.holds, Hold{Client: client, From: e.At, To: -1})
		r.res.grant(client)
		what = fmt.Sprintf("granted, fence %s", fenceText(e.Fence, e.Fenced))
	case evWrite:
		w := r.res.write(client, e.Fence, e.At)
		what = fmt.Sprintf("write with fence %s: %s", fenceText(e.Fence, e.Fenced), w.Verdict)
	case evSkip:
		r.res.counts.Skipped++
		what = "write skipped: the lock was lost (" + e.Err + ")"
	case evLost:
		r.endHold(client, e.At, "lost")
		what = "lost: " + e.Err
	case evReleased:
		r.endHold(client, e.At, "released")
	case evError:
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

func fenceText(fence uint64, fenced bool) string {
	if !fenced {
		return "none"
	}
	return fmt.Sprint(fence)
}

// kill kills p with SIGKILL; its hold ends there.
func (r *round) kill(p *proc) {
	p.signal(syscall.SIGKILL)
	at := r.mark("%s killed (SIGKILL)", p.name)
	r.mu.Lock()
	r.endHold(p.name, at, "killed")
	r.mu.Unlock()
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
	return p.do(ctx, wait+10*time.Second, fmt.Sprintf("acquire %v %v", ttl, wait), evGranted)
}

// write has p write; with ifHeld only while it believes it holds.
func (r *round) write(ctx context.Context, p *proc, ifHeld bool) (event, error) {
	cmd := "write"
	if ifHeld {
		cmd = "write-if-held"
	}
	return p.do(ctx, 10*time.Second, cmd, evWrite, evSkip)
}
