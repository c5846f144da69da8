// Package faulttest is a randomized fault test for lock backends. Several
// simulated client processes, each reaching the servers through fault
// proxies of its own (one per server host), contend for a few keys while
// the run, at random:
//
//   - delays traffic per direction; where clients pool connections
//     (Config.PerConn: Redis, Redlock) each connection gets a delay of
//     its own, so that one lock's requests on two pooled connections
//     reach the server in another order than they were sent;
//   - holds replies back (requests applied, answers late), sometimes
//     dropping them with the connection (a reply lost after its request
//     was applied), and cuts and restores connections;
//   - issues refreshes next to the watchdog, two at once with different
//     TTLs, some with deadlines so short that their outcome is unknown;
//   - cancels Acquire at random moments;
//   - closes Lockers while calls wait on them, and opens replacements;
//   - panics inside locker.Do (recovered by the run), and uses Do
//     normally too;
//   - campaigns in elections (locker.NewElection: Campaign, Proclaim,
//     Resign, Leader) on the keys that admit an exclusive hold, some
//     under an owner (locker.WithOwner), one the workers of a client
//     share, which must not make leadership reentrant;
//   - takes keys under reentrant owners (locker.WithOwner): an owner's
//     first Acquire, then one or two more handles on its hold through
//     the same Locker, released in a random order.
//
// The keys are of three uses, in turn: a mutex (exclusive holds only), a
// read/write lock (shared holds and exclusive ones) where the backend
// admits shared holds (Capabilities.Shared), and a semaphore of
// Config.Limit permits (holds of weight 1 or 2) where it admits
// semaphores (Capabilities.Permits); a use the backend does not admit
// is a mutex instead. The kinds share the run's time: more kinds, fewer
// holds of each.
//
// An oracle then checks what the clients believed against what a lock may
// promise:
//
//   - the beliefs held at once on one key fit it: an exclusive belief
//     overlaps no other (a leader's is one: one leader belief at a time),
//     shared beliefs overlap one another only, and a semaphore's
//     overlapping beliefs take at most its limit of permits together. A
//     belief starts when Acquire or Campaign returned (or Do called fn)
//     and ends at Lock.Until read after Lost closed: the lock's own
//     validity deadline, not the moment a goroutine noticed Lost, so that
//     scheduling lag on a loaded machine is no false alarm. The handles
//     of a reentrant owner's hold are one belief, from the first
//     handle's start to the hold's end;
//   - an owner's further handles on a hold it holds are granted at once,
//     and releasing all of them but the last leaves the hold held;
//   - where the backend fences, fences increase strictly in grant order,
//     across kinds (a leader's fence is its term), and the handles of one
//     hold share its fence. The oracle knows that a was granted before b
//     when they cannot be held together (an exclusive belief and any
//     other, two permits that exceed the limit together) and a's belief
//     started first, or when a's fence was in hand before b's Acquire was
//     called (shared holds and permits that fit together may be granted
//     in another order than their Acquire calls return). A fence is
//     asked for right after the acquisition, as a writer to a fenced
//     resource asks for it, by about half of the clients; the other half
//     ask for some of theirs late, after holding the lock a while through
//     the faults, as a writer does that writes only at the end (a
//     backend may mint fences on demand, when first asked for: a late
//     fence must exceed every earlier holder's all the same, and not be
//     given at all for a lock lost meanwhile). A belief whose Fence came
//     back without one is left out of this check, as its holder would
//     write nothing fenced;
//   - a leader's term, as Election.Leader reads it while it leads and as
//     an observer of the key (Election.Observe, through the checker)
//     reports it, is its Lock.Fence, and the observer's terms never go
//     back;
//   - no request is refused with ErrKindMismatch: every client of a key
//     agrees on its kind and limit;
//   - once the faults stop and every client has let go of what it knew it
//     held, while the Lockers are still open, every key can be acquired
//     whole (exclusively, or all of a semaphore's permits) within the
//     longest TTL used + ExpirySlack + the longest delay + Config.Slack;
//   - Close ends the calls waiting on its Locker within closeBound, and
//     closes the Lost channel of every lock it held.
//
// The caller checks for leaked goroutines once Run has returned: every
// Locker and proxy is closed by then.
//
// A seed chooses every decision the run makes (which operation, which
// key, which fault, every delay); the goroutines still interleave as the
// scheduler likes, so a seed replays the same choices, not the same
// interleaving.
package faulttest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/distlock/locker"
	"github.com/distlock/locker/backend"
	"github.com/distlock/locker/conformance"
)

// Config describes a run.
type Config struct {
	// Open starts a new client process. Required.
	Open func(ctx context.Context) (*Client, error)
	// Seed chooses the run's decisions.
	Seed uint64
	// Duration is how long the clients contend under faults. Required.
	Duration time.Duration
	// TTLs, shortest first, at least two: acquisitions take one of all
	// but the longest, refreshes any. The shortest also paces the faults.
	// Required.
	TTLs []time.Duration
	// MaxLatency bounds the delay added to one direction of a connection.
	// 0: no delays.
	MaxLatency time.Duration
	// PerConn gives every connection of a proxy a delay of its own; when
	// false, the connections of a proxy share one delay per direction.
	PerConn bool
	// Clients is how many client processes run at once (default 4), each
	// with Workers goroutines (default 3) contending for Keys keys
	// (default 3: one of each use, see the package documentation).
	Clients, Workers, Keys int
	// Limit is the number of permits of the semaphore keys, at least 2
	// (default 3).
	Limit int
	// Slack is the allowance for timers and scheduling on a loaded machine
	// in the liveness checks. Default 1s.
	Slack time.Duration
	// Logf, if set, receives a line per notable event.
	Logf func(format string, args ...any)
	// Describe, if set, tells what the servers hold for a key, read when
	// the key is found blocked after the faults stopped, so that the
	// report says who blocks it.
	Describe func(ctx context.Context, key string) string
}

// Client is one simulated client process.
type Client struct {
	Locker locker.Locker
	// Proxies stand between the client and its servers, one per server;
	// none where there is no network (the memory backend).
	Proxies []*conformance.Proxy
	// Crash, if set, cuts the client off for good, as a crashed process;
	// for clients without proxies.
	Crash func()
}

// Proxied returns a Config.Open that opens rawURL through a new proxy per
// host, as conformance.URLHarness does. The backend's package must be
// imported.
func Proxied(rawURL string) func(ctx context.Context) (*Client, error) {
	return func(ctx context.Context) (*Client, error) {
		u, proxies, err := conformance.ProxyURL(rawURL)
		if err != nil {
			return nil, err
		}
		l, err := locker.Open(ctx, u)
		if err != nil {
			for _, p := range proxies {
				p.Close()
			}
			return nil, err
		}
		return &Client{Locker: l, Proxies: proxies}, nil
	}
}

// Report is what a run did and what the oracle found.
type Report struct {
	Seed uint64
	// Counts are events by name: acquisitions by how, refreshes and
	// releases by outcome, faults by kind; see Summary.
	Counts     map[string]int64
	Violations []string
}

// closeBound is how long after Close a call waiting on the Locker may take
// to return.
const closeBound = 5 * time.Second

// Run runs the clients under faults for cfg.Duration, stops the faults,
// checks that every key can be acquired again, closes everything and
// returns the oracle's findings. Its error says that the run could not
// start.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Open == nil || cfg.Duration <= 0 || len(cfg.TTLs) < 2 {
		return nil, errors.New("faulttest: Config needs Open, Duration and at least two TTLs")
	}
	if cfg.Limit < 0 || cfg.Limit == 1 {
		return nil, fmt.Errorf("faulttest: Config.Limit %d: a semaphore key has at least 2 permits, for holds of weight 1 and 2", cfg.Limit)
	}
	cfg.Clients = cmp0(cfg.Clients, 4)
	cfg.Workers = cmp0(cfg.Workers, 3)
	cfg.Keys = cmp0(cfg.Keys, 3)
	cfg.Limit = cmp0(cfg.Limit, 3)
	cfg.Slack = cmp0(cfg.Slack, time.Second)
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	r := &run{cfg: cfg, t0: time.Now(), counts: map[string]int64{}}
	r.oracle.r = r
	if err := r.start(ctx); err != nil {
		return nil, err
	}
	r.contend(ctx)
	r.checkKeys(ctx)
	r.closeAll()
	r.oracle.check()
	r.mu.Lock()
	defer r.mu.Unlock()
	return &Report{Seed: cfg.Seed, Counts: r.counts, Violations: r.violations}, nil
}

func cmp0[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// run is one Run in progress.
type run struct {
	cfg     Config
	t0      time.Time // offsets in messages count from here
	caps    locker.Capabilities
	keys    []string
	uses    []use // of each key
	slots   []*slot
	checker *proc // opened at the start, never faulted: the liveness check's client
	oracle  oracle
	bg      sync.WaitGroup // background closes

	mu         sync.Mutex
	counts     map[string]int64
	violations []string
}

func (r *run) count(name string) {
	r.mu.Lock()
	r.counts[name]++
	r.mu.Unlock()
}

func (r *run) violate(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.cfg.Logf("VIOLATION: %s", msg)
	r.mu.Lock()
	r.violations = append(r.violations, msg)
	r.mu.Unlock()
}

// rng returns the random source of one of the run's actors; streams keep
// them apart.
func (r *run) rng(stream uint64) *rand.Rand {
	return rand.New(rand.NewPCG(r.cfg.Seed, stream))
}

// Random streams: an actor's kind in the high bits, its number below.
const (
	streamSetup uint64 = iota << 32
	streamFaults
	streamWorker
)

// at formats t as an offset from the start of the run.
func (r *run) at(t time.Time) string {
	return fmt.Sprintf("+%.3fs", t.Sub(r.t0).Seconds())
}

func (r *run) shortest() time.Duration { return r.cfg.TTLs[0] }
func (r *run) longest() time.Duration  { return r.cfg.TTLs[len(r.cfg.TTLs)-1] }

// start opens the checker and the first client of every slot, and checks
// the TTLs against the backend's range.
func (r *run) start(ctx context.Context) error {
	rng := r.rng(streamSetup)
	var err error
	if r.checker, err = r.open(ctx, "checker", rng); err != nil {
		return fmt.Errorf("faulttest: open: %w", err)
	}
	for _, l := range r.checker.lat {
		l.set(0) // never faulted: no delays either
	}
	r.caps = r.checker.Locker.Capabilities()
	for _, ttl := range r.cfg.TTLs {
		if ttl < r.caps.MinTTL || (r.caps.MaxTTL > 0 && ttl > r.caps.MaxTTL) {
			r.closeProc(r.checker)
			return fmt.Errorf("faulttest: TTL %v outside the backend's range [%v, %v]", ttl, r.caps.MinTTL, r.caps.MaxTTL)
		}
	}
	run := fmt.Sprintf("%08x", rng.Uint32())
	for i := range r.cfg.Keys {
		r.keys = append(r.keys, fmt.Sprintf("faulttest/%s/k%d", run, i))
		r.uses = append(r.uses, r.useOf(i))
	}
	for i := range r.cfg.Clients {
		s := &slot{r: r, i: i}
		if s.cur, err = r.open(ctx, s.nextName(), rng); err != nil {
			r.closeAll()
			return fmt.Errorf("faulttest: open: %w", err)
		}
		r.slots = append(r.slots, s)
	}
	r.cfg.Logf("seed %d, keys faulttest/%s/k0..%d used as %v, TTLs %v, capabilities %+v", r.cfg.Seed, run, r.cfg.Keys-1, r.uses, r.cfg.TTLs, r.caps)
	return nil
}

// contend runs the workers and the fault loops for the configured
// duration, then stops the faults and the workers and waits until every
// worker has let go of its locks and every background close has returned.
func (r *run) contend(ctx context.Context) {
	faultCtx, stopFaults := context.WithCancel(ctx)
	workCtx, stopWork := context.WithCancel(ctx)
	var faults, work sync.WaitGroup
	observers := r.observeLeaders(workCtx)
	for _, s := range r.slots {
		faults.Go(func() { s.faults(faultCtx) })
		for j := range r.cfg.Workers {
			w := &worker{r: r, s: s, rng: r.rng(streamWorker | uint64(s.i*64+j))}
			work.Go(func() { w.loop(workCtx) })
		}
	}
	timer := time.NewTimer(r.cfg.Duration)
	select {
	case <-timer.C:
	case <-ctx.Done():
		timer.Stop()
	}
	stopFaults()
	faults.Wait()
	stopWork()
	work.Wait()
	observers.Wait()
	r.bg.Wait()
}

// checkKeys checks that every key can be acquired within the longest TTL
// + ExpirySlack + the longest delay + Slack of the moment the faults and
// the workers stopped, while the clients' Lockers are still open: a lock
// left held (by a Do that did not release it when fn panicked, or an
// Acquire that left something behind) keeps its key blocked.
func (r *run) checkKeys(ctx context.Context) {
	stopped := time.Now()
	bound := r.longest() + r.caps.ExpirySlack + r.cfg.MaxLatency + r.cfg.Slack
	ctx, cancel := context.WithDeadline(ctx, stopped.Add(bound))
	defer cancel()
	var wg sync.WaitGroup
	for i, key := range r.keys {
		whole := r.uses[i].whole(r.cfg.Limit)
		wg.Go(func() {
			began := time.Now()
			lk, err := r.checker.Locker.Acquire(ctx, key, append(kindOptions(whole), locker.WithTTL(r.shortest()))...)
			if err != nil {
				var state string
				if r.cfg.Describe != nil {
					dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
					state = "; the servers hold: " + r.cfg.Describe(dctx, key)
					dcancel()
				}
				r.violate("key %q: not acquirable within %v (longest TTL %v + ExpirySlack %v + longest delay %v + slack %v) after the faults stopped at %s: %v%s",
					key, bound, r.longest(), r.caps.ExpirySlack, r.cfg.MaxLatency, r.cfg.Slack, r.at(stopped), err, state)
				return
			}
			r.count("check")
			b := r.oracle.add(r.checker, key, "check", whole, began, lk)
			rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer rcancel()
			err = lk.Release(rctx)
			b.note(r, "release: %v", err)
			if err != nil {
				r.violate("key %q: the checker's release after the faults stopped: %v", key, err)
			}
		})
	}
	wg.Wait()
}

// closeAll closes every client still open.
func (r *run) closeAll() {
	for _, s := range r.slots {
		r.bg.Go(func() { r.closeProc(s.current()) })
	}
	if r.checker != nil {
		r.bg.Go(func() { r.closeProc(r.checker) })
	}
	r.bg.Wait()
}

// open starts a client process, named name, whose proxies' delays are
// drawn from rng.
func (r *run) open(ctx context.Context, name string, rng *rand.Rand) (*proc, error) {
	c, err := r.cfg.Open(ctx)
	if err != nil {
		return nil, err
	}
	p := &proc{Client: c, name: name, fences: name == "checker" || rng.IntN(2) == 0}
	for _, px := range c.Proxies {
		l := newLatency(rng.Uint64(), r.cfg.PerConn, r.cfg.MaxLatency)
		px.SetConnLatency(l.of)
		p.lat = append(p.lat, l)
	}
	return p, nil
}

// closeProc closes p's Locker and then its proxies, and checks that Close
// closed the Lost channel of every lock p held.
func (r *run) closeProc(p *proc) {
	p.mu.Lock()
	p.closedAt = time.Now()
	p.mu.Unlock()
	if err := p.Locker.Close(); err != nil {
		r.count("close.error") // releases through a cut proxy fail
	}
	for _, b := range r.oracle.of(p) {
		select {
		case <-b.lock.Lost():
		default:
			r.violate("key %q: %s's lock (%s at %s) still has Lost open after its Locker's Close returned", b.key, p.name, b.how, r.at(b.start))
		}
	}
	for _, px := range p.Proxies {
		px.Close()
	}
}

// proc is one client process: the Locker a slot's workers use until the
// slot replaces it.
type proc struct {
	*Client
	name string
	lat  []*latency // per proxy
	// fences says that this client asks for the fence of every lock it
	// takes, right after taking it.
	fences bool

	mu       sync.Mutex
	closedAt time.Time // when Close was called; zero while open
}

// closedBefore reports when p was closed, if it was before t.
func (p *proc) closedBefore(t time.Time) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closedAt, !p.closedAt.IsZero() && p.closedAt.Before(t)
}

// latency chooses the delays of one proxy's connections: a base delay
// per connection and direction, drawn from the seed and the epoch (moved
// on by every latency fault), so that a connection keeps it until the next
// fault; half the connections get none, to overtake the slow ones. On top
// of it, jitter drawn for every chunk: a client's pool keeps reusing its
// fastest connection, and the jitter makes its requests overtake one
// another even then.
type latency struct {
	seed    uint64
	perConn bool

	mu     sync.Mutex
	epoch  uint64
	max    time.Duration // 0: none
	jitter *rand.Rand
}

func newLatency(seed uint64, perConn bool, max time.Duration) *latency {
	return &latency{seed: seed, perConn: perConn, max: max, jitter: rand.New(rand.NewPCG(seed, 0))}
}

func (l *latency) set(max time.Duration) {
	l.mu.Lock()
	l.epoch++
	l.max = max
	l.mu.Unlock()
}

func (l *latency) of(conn uint64, dir conformance.Direction) time.Duration {
	l.mu.Lock()
	epoch, max := l.epoch, l.max
	var jitter time.Duration
	if max > 0 && l.perConn {
		jitter = uniform(l.jitter, 0, max/2)
	}
	l.mu.Unlock()
	if max <= 0 {
		return 0
	}
	if !l.perConn {
		conn = 0
	}
	rng := rand.New(rand.NewPCG(l.seed+(epoch+1)*0x9e3779b97f4a7c15, conn<<1|uint64(dir)))
	if rng.IntN(2) == 0 {
		return jitter
	}
	return jitter + uniform(rng, max/4, max/2)
}

// slot is the place of one client process; the fault loop replaces the
// process in it now and then.
type slot struct {
	r   *run
	i   int
	gen int // processes started in the slot

	mu  sync.Mutex
	cur *proc
}

func (s *slot) nextName() string {
	s.gen++
	return fmt.Sprintf("c%d.%d", s.i, s.gen)
}

func (s *slot) current() *proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

func (s *slot) swap(p *proc) *proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.cur
	s.cur = p
	return old
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// uniform returns a duration uniform in [lo, hi).
func uniform(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(rng.Int64N(int64(hi-lo)))
}

// sleep waits for d or until ctx ends, and reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// summaryOrder lists the counts Summary shows first, in this order.
var summaryOrder = []string{
	"acquire", "try", "do", "campaign", "reenter", "reenter.handle", "check", "shared", "permit", "shared.together", "permits.together", "lost",
	"acquire.cancelled", "acquire.closed", "acquire.error", "try.busy", "try.error", "do.cancelled", "do.closed", "do.error", "do.panic",
	"refresh.ok", "refresh.pair", "refresh.unknown", "refresh.notheld", "refresh.closed",
	"release.ok", "release.notheld", "release.unknown", "proclaim.ok", "resign.ok",
}

// Summary formats the counts on one line: acquisitions by how, losses
// (Lost closed before the holder let go), calls by outcome, faults by
// kind.
func (rep *Report) Summary() string {
	var b strings.Builder
	seen := map[string]bool{}
	put := func(name string) {
		if n, ok := rep.Counts[name]; ok && !seen[name] {
			seen[name] = true
			fmt.Fprintf(&b, " %s=%d", name, n)
		}
	}
	for _, name := range summaryOrder {
		put(name)
	}
	rest := make([]string, 0, len(rep.Counts))
	for name := range rep.Counts {
		rest = append(rest, name)
	}
	slices.Sort(rest)
	for _, name := range rest {
		put(name)
	}
	return strings.TrimSpace(b.String())
}

// faults injects faults into the slot's client, one at a time, until ctx
// ends; each is undone before the next, and the last when ctx ends.
func (s *slot) faults(ctx context.Context) {
	rng := s.r.rng(streamFaults | uint64(s.i))
	t0 := s.r.shortest()
	for sleep(ctx, uniform(rng, t0/4, 2*t0)) {
		p := s.current()
		x := rng.Float64()
		switch {
		case x < 0.04:
			s.replace(ctx, rng, false)
		case x < 0.06:
			s.replace(ctx, rng, true)
		case len(p.Proxies) == 0:
			// No network to disturb: the calls and the closes are the
			// faults.
		case x < 0.35:
			s.r.count("fault.latency")
			for _, l := range p.lat {
				l.set(s.r.cfg.MaxLatency)
			}
		case x < 0.42:
			s.r.count("fault.calm")
			for _, l := range p.lat {
				l.set(0)
			}
		case x < 0.70:
			s.holdReplies(ctx, rng, p)
		default:
			s.cut(ctx, rng, p)
		}
	}
	p := s.current()
	for i, px := range p.Proxies {
		px.Restore()
		px.HoldReplies(false)
		p.lat[i].set(0)
	}
}

// some returns a non-empty random subset of the proxies: with several
// servers (Redlock), faults hit some of them, not always all.
func some(rng *rand.Rand, proxies []*conformance.Proxy) []*conformance.Proxy {
	out := slices.Clone(proxies)
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out[:1+rng.IntN(len(out))]
}

// holdReplies holds back the replies of some of p's servers for a while,
// and sometimes drops them with the connections: requests applied, their
// answers lost.
func (s *slot) holdReplies(ctx context.Context, rng *rand.Rand, p *proc) {
	t0 := s.r.shortest()
	proxies := some(rng, p.Proxies)
	d := uniform(rng, 5*time.Millisecond, t0/2)
	lose := rng.IntN(3) == 0
	cutFor := uniform(rng, time.Millisecond, t0/4)
	for _, px := range proxies {
		px.HoldReplies(true)
	}
	sleep(ctx, d)
	if lose {
		s.r.count("fault.lostreply")
		for _, px := range proxies {
			px.Cut()
		}
	} else {
		s.r.count("fault.hold")
	}
	for _, px := range proxies {
		px.HoldReplies(false)
	}
	if lose {
		sleep(ctx, cutFor)
		for _, px := range proxies {
			px.Restore()
		}
	}
}

// cut cuts some of p's servers off for a while: mostly shorter than the
// shortest TTL, sometimes long enough for locks to be lost.
func (s *slot) cut(ctx context.Context, rng *rand.Rand, p *proc) {
	t0 := s.r.shortest()
	proxies := some(rng, p.Proxies)
	d := uniform(rng, 5*time.Millisecond, t0/2)
	if rng.IntN(4) == 0 {
		d = uniform(rng, t0/2, 3*t0/2)
	}
	s.r.count("fault.cut")
	for _, px := range proxies {
		px.Cut()
	}
	sleep(ctx, d)
	for _, px := range proxies {
		px.Restore()
	}
}

// replace opens a new client process for the slot and closes the old one
// in the background while its workers' calls are waiting on it; crash
// first cuts the old one off (or crashes it), so that its Close cannot
// release anything.
func (s *slot) replace(ctx context.Context, rng *rand.Rand, crash bool) {
	np, err := s.r.open(ctx, s.nextName(), rng)
	if err != nil {
		s.r.count("open.error")
		s.r.cfg.Logf("slot %d: open a replacement: %v", s.i, err)
		return
	}
	old := s.swap(np)
	if crash {
		s.r.count("fault.crash")
		for _, px := range old.Proxies {
			px.Cut()
		}
		if old.Crash != nil {
			old.Crash()
		}
	} else {
		s.r.count("fault.close")
	}
	s.r.bg.Go(func() { s.r.closeProc(old) })
}

// worker is one goroutine of a client process, taking locks in a loop.
type worker struct {
	r   *run
	s   *slot
	rng *rand.Rand // not shared: draw before starting goroutines
}

// errPanic is what fn panics with inside locker.Do.
var errPanic = errors.New("faulttest: panic inside Do")

func (w *worker) loop(ctx context.Context) {
	for ctx.Err() == nil {
		p := w.s.current()
		i := w.rng.IntN(len(w.r.keys))
		rq := request{key: w.r.keys[i], claim: w.claim(w.r.uses[i])}
		switch x := w.rng.Float64(); {
		case x < 0.30:
			w.acquire(ctx, p, rq, true)
		case x < 0.55:
			w.acquire(ctx, p, rq, false)
		case x < 0.80:
			w.do(ctx, p, rq)
		case x < 0.90:
			w.campaign(ctx, p, rq)
		default:
			w.reenter(ctx, p, rq)
		}
		sleep(ctx, uniform(w.rng, 0, w.r.shortest()/10))
	}
}

// request is what a worker asks for: a key, and what of it.
type request struct {
	key   string
	claim backend.Claim
}

// claim chooses what a hold of a key of use u takes: on a read/write lock
// a shared hold three times in five, an exclusive one otherwise; on a
// semaphore one or two permits. A mutex's key draws nothing, so that a
// run on a backend that admits no other kind makes the same choices as
// before there were kinds.
func (w *worker) claim(u use) backend.Claim {
	switch u {
	case useReadWrite:
		if w.rng.IntN(5) < 3 {
			return backend.Claim{Kind: backend.Shared}
		}
	case useSemaphore:
		return backend.Claim{Kind: backend.Permit, Limit: w.r.cfg.Limit, Weight: 1 + w.rng.IntN(2)}
	}
	return backend.Claim{Kind: backend.Exclusive}
}

// lockOptions chooses a lock's TTL (any but the longest) and whether the
// watchdog refreshes it (half the time), after the options that ask for
// c.
func (w *worker) lockOptions(c backend.Claim) []locker.Option {
	ttls := w.r.cfg.TTLs
	return append(kindOptions(c),
		locker.WithTTL(ttls[w.rng.IntN(len(ttls)-1)]),
		locker.WithAutoRefresh(w.rng.IntN(2) == 0),
	)
}

// kindOptions returns the options that ask for c.
func kindOptions(c backend.Claim) []locker.Option {
	switch c.Kind {
	case backend.Shared:
		return []locker.Option{locker.Shared()}
	case backend.Permit:
		return []locker.Option{locker.Limit(c.Limit), locker.Weight(c.Weight)}
	}
	return nil
}

// use is what a run uses a key as.
type use uint8

const (
	useMutex     use = iota // exclusive holds only
	useReadWrite            // shared and exclusive holds
	useSemaphore            // permits of Config.Limit, weights 1 and 2
)

func (u use) String() string {
	switch u {
	case useReadWrite:
		return "read/write lock"
	case useSemaphore:
		return "semaphore"
	}
	return "mutex"
}

// useOf returns the use of key i: mutex, read/write lock and semaphore in
// turn, a mutex where the backend does not admit the kind.
func (r *run) useOf(i int) use {
	switch {
	case i%3 == 1 && r.caps.Shared:
		return useReadWrite
	case i%3 == 2 && r.caps.Permits:
		return useSemaphore
	}
	return useMutex
}

// whole returns the claim that takes all of a key of use u: an exclusive
// hold, or all of a semaphore's limit of permits.
func (u use) whole(limit int) backend.Claim {
	if u == useSemaphore {
		return backend.Claim{Kind: backend.Permit, Limit: limit, Weight: limit}
	}
	return backend.Claim{Kind: backend.Exclusive}
}

// waitFor chooses how long an acquisition may wait: often less than a
// TTL, so that it is cancelled at a random moment of its wait.
func (w *worker) waitFor() time.Duration {
	if w.rng.IntN(2) == 0 {
		return uniform(w.rng, 0, w.r.shortest())
	}
	return uniform(w.rng, w.r.shortest(), w.r.longest())
}

// callTimeout chooses the deadline of a refresh or a release: now and
// then so short that the call fails with its outcome unknown.
func (w *worker) callTimeout() time.Duration {
	if w.rng.IntN(5) == 0 {
		return uniform(w.rng, 500*time.Microsecond, 2*time.Millisecond+w.r.cfg.MaxLatency)
	}
	return 5 * time.Second
}

func (w *worker) acquire(ctx context.Context, p *proc, rq request, wait bool) {
	key := rq.key
	how := "try"
	if wait {
		how = "acquire"
	}
	actx, cancel := context.WithTimeout(ctx, w.waitFor())
	defer cancel()
	opts := w.lockOptions(rq.claim)
	began := time.Now()
	var (
		lk  locker.Lock
		err error
	)
	if wait {
		lk, err = p.Locker.Acquire(actx, key, opts...)
	} else {
		lk, err = p.Locker.TryAcquire(actx, key, opts...)
	}
	if err != nil {
		w.failed(how, p, key, began, err)
		return
	}
	w.r.count(how)
	b := w.r.oracle.add(p, key, how, rq.claim, began, lk)
	w.hold(ctx, b)
	w.release(b)
}

// failed classifies an acquisition that failed, and checks that one
// waiting when its Locker was closed returned promptly.
func (w *worker) failed(how string, p *proc, key string, began time.Time, err error) {
	now := time.Now()
	switch {
	case errors.Is(err, locker.ErrClosed):
		w.r.count(how + ".closed")
	case errors.Is(err, locker.ErrNotAcquired) && how == "try":
		w.r.count("try.busy")
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		w.r.count(how + ".cancelled")
	case errors.Is(err, locker.ErrKindMismatch):
		w.r.count(how + ".error")
		w.r.violate("key %q: %s's %s, which asked for what every client of the key asks for, was refused as a kind mismatch: %v", key, p.name, how, err)
	default:
		w.r.count(how + ".error")
	}
	if closedAt, ok := p.closedBefore(now); ok && began.Before(closedAt) && now.Sub(closedAt) > closeBound {
		w.r.violate("key %q: %s's %s, waiting since %s when its Locker was closed at %s, returned only at %s: %v",
			key, p.name, how, w.r.at(began), w.r.at(closedAt), w.r.at(now), err)
	}
}

// do takes key through locker.Do; fn holds the lock for a while, and now
// and then panics.
func (w *worker) do(ctx context.Context, p *proc, rq request) {
	key := rq.key
	dctx, cancel := context.WithTimeout(ctx, w.waitFor())
	defer cancel()
	opts := w.lockOptions(rq.claim)
	panics := w.rng.IntN(5) == 0
	entered := false
	var held locker.Lock
	began := time.Now()
	err := w.callDo(dctx, p.Locker, key, func(fctx context.Context, lk locker.Lock) error {
		entered, held = true, lk
		w.r.count("do")
		b := w.r.oracle.add(p, key, "do", rq.claim, began, lk)
		w.hold(fctx, b)
		if closed(lk.Lost()) {
			w.r.count("lost")
		}
		if panics {
			w.r.count("do.panic")
			b.note(w.r, "panic")
			panic(errPanic)
		}
		b.note(w.r, "return")
		return nil
	}, opts)
	if !entered && err != nil {
		w.failed("do", p, key, began, err)
	}
	// However fn ended, a panic included, Do has let the lock go by the
	// time it returns: Lost is closed (the release itself may fail on a
	// cut link; the holder has let go all the same).
	if entered && !closed(held.Lost()) {
		how := "returned"
		if errors.Is(err, errPanic) {
			how = "panicked"
		}
		w.r.violate("key %q: %s's Do returned, after fn %s, with its lock's Lost still open: the lock was not released", key, p.name, how)
	}
}

// callDo calls locker.Do and recovers the panic fn raises on purpose.
func (w *worker) callDo(ctx context.Context, l locker.Locker, key string, fn func(context.Context, locker.Lock) error, opts []locker.Option) (err error) {
	defer func() {
		if v := recover(); v != nil {
			if v != errPanic {
				panic(v)
			}
			err = errPanic
		}
	}()
	return locker.Do(ctx, l, key, fn, opts...)
}

// hold keeps the lock for a while, until ctx ends or it is lost, and now
// and then refreshes it, alone or with two refreshes at once of different
// TTLs, or asks its TTL. Some holders are busy, others work quietly for
// long stretches between refreshes, as a holder does that trusts its
// validity.
func (w *worker) hold(ctx context.Context, b *belief) {
	lk := b.lock
	ttls := w.r.cfg.TTLs
	until := time.Now().Add(uniform(w.rng, 0, 3*ttls[len(ttls)-2]/2))
	pace := uniform(w.rng, w.r.shortest()/10, ttls[len(ttls)-2])
	for {
		d := min(time.Until(until), uniform(w.rng, 0, pace))
		if d <= 0 {
			return
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
		case <-lk.Lost():
		case <-t.C:
		}
		t.Stop()
		if ctx.Err() != nil || closed(lk.Lost()) {
			return
		}
		switch x := w.rng.Float64(); {
		case x < 0.5:
			w.refreshPair(ctx, b)
			if w.rng.IntN(2) == 0 {
				// Work on, trusting the validity the refreshes gave.
				until = later(until, time.Now().Add(uniform(w.rng, ttls[0], ttls[len(ttls)-2])))
				pace = max(pace, ttls[len(ttls)-2])
			}
		case x < 0.7:
			w.refresh(ctx, b, ttls[w.rng.IntN(len(ttls))], w.callTimeout())
		case x < 0.8:
			tctx, cancel := context.WithTimeout(ctx, w.callTimeout())
			d, err := lk.TTL(tctx)
			cancel()
			b.note(w.r, "ttl %v, %v", d, err)
		case x < 0.9 && b.election != nil:
			w.proclaim(ctx, b)
		case x >= 0.9 && !b.fenced && w.r.caps.Fencing:
			w.lateFence(b)
		}
	}
}

// lateFence asks for the fence of a lock held a while, whose holder did
// not ask as it took it: a backend that mints fences on demand mints it
// now, after whatever the faults did meanwhile. The oracle checks it as
// it checks the others, from the moment it was in hand.
func (w *worker) lateFence(b *belief) {
	f, ok := b.lock.Fence()
	b.note(w.r, "late fence %d (ok %v)", f, ok)
	w.r.count("fence.late")
	if ok {
		b.fence, b.fenced, b.fencedAt = f, true, time.Now()
	}
}

// refreshPair sends two refreshes with different TTLs at once, mostly the
// shorter first (often the shortest and the longest): on a connection
// slower than the other's, it reaches the server last.
func (w *worker) refreshPair(ctx context.Context, b *belief) {
	ttls := w.r.cfg.TTLs
	i, j := 0, len(ttls)-1
	if w.rng.IntN(2) == 0 {
		i = w.rng.IntN(len(ttls))
		j = (i + 1 + w.rng.IntN(len(ttls)-1)) % len(ttls)
	}
	if (ttls[i] > ttls[j]) == (w.rng.IntN(10) < 8) {
		i, j = j, i
	}
	first, second := w.callTimeout(), w.callTimeout()
	gap := uniform(w.rng, 0, 5*time.Millisecond)
	w.r.count("refresh.pair")
	var wg sync.WaitGroup
	wg.Go(func() { w.refresh(ctx, b, ttls[i], first) })
	sleep(ctx, gap)
	wg.Go(func() { w.refresh(ctx, b, ttls[j], second) })
	wg.Wait()
}

// refresh refreshes lk with ttl under a deadline; safe to call from
// several goroutines (it draws nothing).
func (w *worker) refresh(ctx context.Context, b *belief, ttl, timeout time.Duration) {
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	began := time.Now()
	err := b.lock.Refresh(rctx, ttl)
	b.note(w.r, "refresh %v sent %s (timeout %v): %v; until %s", ttl, w.r.at(began), timeout, err, w.r.at(b.lock.Until()))
	switch {
	case err == nil:
		w.r.count("refresh.ok")
	case errors.Is(err, locker.ErrNotHeld):
		w.r.count("refresh.notheld")
	case errors.Is(err, locker.ErrClosed):
		w.r.count("refresh.closed")
	default:
		w.r.count("refresh.unknown")
	}
}

// release lets go of a lock taken by Acquire or TryAcquire, sometimes
// with a deadline too short to learn the outcome.
func (w *worker) release(b *belief) {
	if closed(b.lock.Lost()) {
		w.r.count("lost")
	}
	ctx, cancel := context.WithTimeout(context.Background(), w.callTimeout())
	defer cancel()
	err := b.lock.Release(ctx)
	b.note(w.r, "release: %v", err)
	switch {
	case err == nil:
		w.r.count("release.ok")
	case errors.Is(err, locker.ErrNotHeld):
		w.r.count("release.notheld")
	case errors.Is(err, locker.ErrClosed):
		w.r.count("release.closed")
	default:
		w.r.count("release.unknown")
	}
}

// belief is the interval during which a client believed it held a key:
// from the return of Acquire (or Do's call of fn) to the lock's Until,
// read once Lost is closed.
type belief struct {
	proc  *proc
	key   string
	how   string
	claim backend.Claim // what the client asked for
	lock  locker.Lock
	// election is the leadership lock is (how "campaign").
	election *leadership
	// owner is the owner (locker.WithOwner) whose handle lock is; its
	// handles on one hold are one belief (handles counts them) once the
	// oracle has merged them.
	owner   string
	handles int

	began time.Time // when Acquire (or Do) was called
	start time.Time
	end   time.Time // set by check
	// fence, when fenced: asked for as the belief began, or late
	// (lateFence), and in hand at fencedAt.
	fence    uint64
	fenced   bool
	fencedAt time.Time

	mu     sync.Mutex
	events []string // what the holder did, for the report
}

// note records what the holder did with the lock, and when.
func (b *belief) note(r *run, format string, args ...any) {
	ev := r.at(time.Now()) + " " + fmt.Sprintf(format, args...)
	b.mu.Lock()
	b.events = append(b.events, ev)
	b.mu.Unlock()
}

// oracle records beliefs and checks them once the run is over.
type oracle struct {
	r        *run
	mu       sync.Mutex
	beliefs  []*belief
	observed []*observed // the observers' reports, by key
}

// add records the belief of p, which asked for claim of key at began
// and got lk.
func (o *oracle) add(p *proc, key, how string, claim backend.Claim, began time.Time, lk locker.Lock) *belief {
	return o.record(&belief{proc: p, key: key, how: how, claim: claim, lock: lk, began: began, start: time.Now(), handles: 1})
}

// addOwned records the belief of p's owner, which asked for claim of key
// at began and got lk, a handle on its hold.
func (o *oracle) addOwned(p *proc, key, owner string, claim backend.Claim, began time.Time, lk locker.Lock) *belief {
	return o.record(&belief{proc: p, key: key, how: "reenter", owner: owner, claim: claim, lock: lk, began: began, start: time.Now(), handles: 1})
}

// record records b, whose lock was just acquired.
func (o *oracle) record(b *belief) *belief {
	p, how, claim, lk := b.proc, b.how, b.claim, b.lock
	b.note(o.r, "%s %s returned; until %s", how, claimText(claim), o.r.at(lk.Until()))
	switch claim.Kind {
	case backend.Shared:
		o.r.count("shared")
	case backend.Permit:
		o.r.count("permit")
	}
	if p.fences && o.r.caps.Fencing {
		b.fence, b.fenced = lk.Fence()
		b.fencedAt = time.Now()
		b.note(o.r, "fence %d (ok %v)", b.fence, b.fenced)
	}
	o.mu.Lock()
	o.beliefs = append(o.beliefs, b)
	o.mu.Unlock()
	return b
}

// claimText names what a claim takes.
func claimText(c backend.Claim) string {
	if c.Kind == backend.Permit {
		return fmt.Sprintf("%d of %d permits", c.Weight, c.Limit)
	}
	return c.Kind.String()
}

// of returns the beliefs of client p.
func (o *oracle) of(p *proc) []*belief {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []*belief
	for _, b := range o.beliefs {
		if b.proc == p {
			out = append(out, b)
		}
	}
	return out
}

// check compares the beliefs of each key: those held at once fit the key,
// and, where the backend fences, fences increase in grant order. Every
// Locker is closed by now, so every Lost is closed and every Until final.
func (o *oracle) check() {
	o.mu.Lock()
	defer o.mu.Unlock()
	byKey := map[string][]*belief{}
	holds := map[heldBy]*belief{} // an owner's handles, merged into the first
	for _, b := range o.beliefs {
		if !closed(b.lock.Lost()) {
			continue // closeProc reported it
		}
		b.end = b.lock.Until()
		if !b.end.After(b.start) { // an empty belief claims nothing
			continue
		}
		if b.owner != "" {
			by := heldBy{b.proc, b.owner, b.key, b.lock.Token()}
			if first := holds[by]; first != nil {
				o.merge(first, b)
				continue
			}
			holds[by] = b
		}
		byKey[b.key] = append(byKey[b.key], b)
	}
	for _, key := range o.r.keys {
		bs := byKey[key]
		slices.SortFunc(bs, func(a, b *belief) int { return a.start.Compare(b.start) })
		var active []*belief // the beliefs not yet ended, in order of start
		var fenced []*belief // the beliefs with a fence, in order of start
		for _, b := range bs {
			active = slices.DeleteFunc(active, func(a *belief) bool { return !b.start.Before(a.end) })
			o.checkFits(key, active, b)
			if b.fenced {
				o.checkFence(key, fenced, b)
				fenced = append(fenced, b)
			}
			active = append(active, b)
		}
	}
	o.checkObserved()
}

// heldBy names an owner's hold: its handles are one holder.
type heldBy struct {
	proc       *proc
	owner, key string
	token      string
}

// merge makes first, an owner's first handle on a hold, stand for the
// hold with b, another handle on it: the owner believed it held the key
// from the first handle's start to the hold's end (all handles share
// Lost and Until), and the handles share the hold's fence.
func (o *oracle) merge(first, b *belief) {
	if b.fenced && first.fenced && b.fence != first.fence {
		o.r.violate("key %q: handles on one hold report the fences %d and %d: %s", first.key, first.fence, b.fence, o.pair(first, b))
	}
	if b.fenced && (!first.fenced || b.fencedAt.Before(first.fencedAt)) {
		first.fence, first.fenced, first.fencedAt = b.fence, true, b.fencedAt
	}
	first.began, first.start, first.end = earlier(first.began, b.began), earlier(first.start, b.start), later(first.end, b.end)
	first.handles++
	b.mu.Lock()
	events := b.events
	b.mu.Unlock()
	first.mu.Lock()
	first.events = append(first.events, fmt.Sprintf("handle %d (token %.8s):", first.handles, b.lock.Token()))
	first.events = append(first.events, events...)
	first.mu.Unlock()
}

// checkFits checks that b fits key beside the beliefs active as it
// started: their units and b's (backend.Claim.Units) within the key's
// capacity.
func (o *oracle) checkFits(key string, active []*belief, b *belief) {
	units, capacity := b.claim.Units()
	var held int64
	shared := false
	for _, a := range active {
		u, _ := a.claim.Units()
		held += u
		shared = shared || a.claim.Kind == backend.Shared
	}
	if held+units <= capacity {
		switch {
		case b.claim.Kind == backend.Shared && shared:
			o.r.count("shared.together")
		case b.claim.Kind == backend.Permit && len(active) > 0:
			o.r.count("permits.together")
		}
		return
	}
	for _, a := range active {
		if a.claim.Kind != backend.Exclusive && b.claim.Kind != backend.Exclusive {
			continue
		}
		what := "two clients believed they held it at once"
		switch {
		case a.how == "campaign" && b.how == "campaign":
			what = "two clients believed they led at once"
		case a.how == "campaign" || b.how == "campaign":
			what = "a client believed it led while another believed it held the key"
		case a.claim.Kind != b.claim.Kind:
			what = "a client believed it held it shared while another believed it held it exclusively"
		}
		o.r.violate("key %q: %s: %s, overlap %v", key, what, o.pair(a, b), earlier(a.end, b.end).Sub(b.start))
		return
	}
	var all []string
	for _, a := range append(slices.Clone(active), b) {
		all = append(all, o.describe(a))
	}
	o.r.violate("key %q: %d permits of its %d believed held at once, by:\n\t%s", key, held+units, capacity, strings.Join(all, "\n\tand "))
}

// checkFence checks b's fence against those of the fenced beliefs that
// started before it and were granted before it: those that cannot be
// held with it (granted before b, since b started later and a correct
// backend never grants both at once), and those whose fence was in hand
// before b's Acquire was called. Of the violations for b it reports the
// first.
func (o *oracle) checkFence(key string, fenced []*belief, b *belief) {
	for _, a := range fenced {
		if (a.claim.Conflicts(b.claim) || a.fencedAt.Before(b.began)) && b.fence <= a.fence {
			o.r.violate("key %q: fences do not increase: %s", key, o.pair(a, b))
			return
		}
	}
}

func (o *oracle) describe(b *belief) string {
	s := fmt.Sprintf("%s (%s %s, token %.8s", b.proc.name, b.how, claimText(b.claim), b.lock.Token())
	if b.owner != "" {
		s += fmt.Sprintf(", owner %q with %d handle(s)", b.owner, b.handles)
	}
	if b.fenced {
		s += fmt.Sprintf(", fence %d", b.fence)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return s + fmt.Sprintf(") during [%s, %s]:\n\t\t%s", o.r.at(b.start), o.r.at(b.end), strings.Join(b.events, "\n\t\t"))
}

func (o *oracle) pair(a, b *belief) string {
	return o.describe(a) + "\n\tand " + o.describe(b)
}
