package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/distlock/locker"
	"github.com/distlock/locker/conformance"
	"github.com/distlock/locker/memory"
)

// Pacing of the story: how long a worker holds the lock after writing, so
// that the others can be seen queueing; and how many turns each takes in
// the first phase. Neither decides the outcome.
const (
	holdTime      = 30 * time.Millisecond
	contendRounds = 2
)

// worker is one client of the backend, as a separate process would be.
type worker struct {
	name string
	l    locker.Locker
	// mem is the client on memory://, which can crash and pause.
	mem *memory.Client
	// proxies stand between a server backend's client and its servers:
	// cutting them crashes the client.
	proxies []*conformance.Proxy
}

// pause stops the worker as a long garbage collection would. On memory://
// its client stops too, watchdog and all; on a server backend the worker
// only stops acting, and the story takes its lock without auto-refresh
// (stoppedOpts).
func (w *worker) pause() {
	if w.mem != nil {
		w.mem.Pause()
	}
}

func (w *worker) resume() {
	if w.mem != nil {
		w.mem.Resume()
	}
}

// crash kills the worker's client, as far as the servers can tell: on
// memory:// the client crashes; on a server backend its proxies cut it
// off. Its lock was taken without auto-refresh there (stoppedOpts), so it
// expires even where the cut misses a connection: a Sentinel's or a
// Cluster's client dials the servers it learns of, not through the proxies.
func (w *worker) crash() {
	if w.mem != nil {
		w.mem.Crash()
		return
	}
	for _, p := range w.proxies {
		p.Cut()
	}
}

// close closes the worker's client. A crashed one is let through again
// first, so that closing it does not wait on connections that go nowhere.
func (w *worker) close() {
	for _, p := range w.proxies {
		p.Restore()
	}
	if w.l != nil {
		w.l.Close()
	}
	for _, p := range w.proxies {
		p.Close()
	}
}

// story is one run of the demo: the workers, the storage they write to,
// and the account of what happened.
type story struct {
	rep     *reporter
	url     string // redacted
	key     string
	ttl     time.Duration
	caps    locker.Capabilities
	mem     bool
	workers []*worker
	phase   int // the number of the phase told last

	// What opens a worker's client: the app and the deployment, and on
	// memory:// the demo's own store.
	app      *app
	t        target
	memStore *memory.Store

	mu       sync.Mutex
	store    storage
	sum      summary
	holder   string    // the worker that acquired last
	current  string    // the token of the latest acquisition
	expiring *expiring // a lock left to expire, reported by the next acquisition
	start    time.Time
	raised   string // says that the TTL was raised to the backend's minimum
}

// expiring is a holder that stopped (paused or crashed) with the lock.
type expiring struct {
	who, how string
	since    time.Time
}

// newStory opens a client per worker on t.
func newStory(ctx context.Context, a *app, t target, n int, rep *reporter) (*story, error) {
	s := &story{rep: rep, url: locker.Redact(t.url), key: demoKey(), mem: scheme(t.url) == "memory", start: time.Now(), app: a, t: t}
	// Open the URL once as given, even on memory://, so that a bad one
	// fails as it would anywhere else.
	probe, err := a.open(ctx, t, quietLogs)
	if err != nil {
		return nil, err
	}
	s.caps = probe.Capabilities()
	probe.Close()
	if s.mem {
		// A store of the demo's own: the URL's names a store of this
		// process, which nothing else here uses.
		s.memStore = memory.NewStore()
	}
	for i := range n {
		w, err := s.newWorker(ctx, fmt.Sprintf("w%d", i+1))
		if err != nil {
			s.close()
			return nil, err
		}
		s.workers = append(s.workers, w)
	}
	return s, nil
}

// quietLogs keeps the library's logs out of the story, which tells what
// the failures mean.
var quietLogs = locker.WithLogger(slog.New(slog.DiscardHandler))

// newWorker opens a client of its own for a worker named name: on
// memory:// a client of the demo's store, elsewhere a Locker behind
// loopback proxies that can cut it off. The caller closes it.
func (s *story) newWorker(ctx context.Context, name string) (*worker, error) {
	w := &worker{name: name}
	if s.mem {
		w.mem = memory.NewClient(&memory.Options{Store: s.memStore, Config: locker.Config{Logger: slog.New(slog.DiscardHandler)}})
		w.l = w.mem
		return w, nil
	}
	u, proxies, err := conformance.ProxyURL(s.t.url)
	if err != nil {
		return nil, exitf(exitError, "demo: proxies for %s: %w", s.url, err)
	}
	w.proxies = proxies
	if w.l, err = s.app.open(ctx, target{url: u, source: s.t.source}, quietLogs); err != nil {
		w.close()
		return nil, err
	}
	return w, nil
}

func (s *story) close() {
	for _, w := range s.workers {
		w.close()
	}
}

// setTTL sets the locks' TTL, raised to the backend's minimum.
func (s *story) setTTL(ttl time.Duration) error {
	s.ttl = ttl
	if s.caps.MinTTL > ttl {
		s.ttl = s.caps.MinTTL
		s.raised = fmt.Sprintf(" (raised from %v: %s's minimum)", ttl, s.caps.Name)
	}
	if s.caps.MaxTTL > 0 && s.ttl > s.caps.MaxTTL {
		return fmt.Errorf("--ttl %v: %s accepts TTLs up to %v", ttl, s.caps.Name, s.caps.MaxTTL)
	}
	return nil
}

// Stories the demo tells (--story).
const (
	storyAll     = "all"
	storyFencing = "fencing" // contention, a paused holder, a crashed holder
	storyKinds   = "rw"      // readers and a writer, a semaphore
)

// play tells the story which names: storyAll, storyFencing or
// storyKinds.
func (s *story) play(ctx context.Context, which string) error {
	s.sum = summary{URL: s.url, Backend: s.caps.Name, Fencing: s.caps.Fencing, Workers: len(s.workers), TTLMS: s.ttl.Milliseconds(), Story: which}
	s.rep.begin(startInfo{
		URL: s.url, Backend: s.caps.Name, Capabilities: s.caps.String(), Fencing: s.caps.Fencing,
		Key: s.key, Workers: len(s.workers), TTLMS: s.ttl.Milliseconds(),
		Message: s.opening(which),
	})
	var phases []func(context.Context) error
	if which != storyKinds {
		phases = append(phases, s.contend, s.pausedHolder, s.crashedHolder)
	}
	if which != storyFencing {
		phases = append(phases, s.readersAndWriter, s.semaphore)
	}
	for _, phase := range phases {
		if err := phase(ctx); err != nil {
			return err
		}
	}
	return nil
}

// beginPhase numbers the next phase and starts it.
func (s *story) beginPhase(title, text string) {
	s.phase++
	s.rep.beginPhase(fmt.Sprintf("%d. %s", s.phase, title), text)
}

// opening introduces the story in words.
func (s *story) opening(which string) string {
	msg := fmt.Sprintf("lockctl demo: %d workers, one lock %q, TTL %v%s, on %s\nbackend %s: %s\n",
		len(s.workers), s.key, s.ttl, s.raised, s.url, s.caps.Name, s.caps)
	if which == storyKinds {
		return msg + "Readers share a read/write lock, a writer takes it alone, and a semaphore admits its limit."
	}
	if s.caps.Fencing {
		return msg + "The storage rejects a write whose fence is lower than the highest it has accepted."
	}
	return msg + fmt.Sprintf("%s cannot mint safe fencing tokens (Fence() returns false): the storage has nothing to\n"+
		"compare, so it accepts every write, stale or not.", s.caps.Name)
}

// contend: every worker takes contendRounds turns, all at once.
func (s *story) contend(ctx context.Context) error {
	s.beginPhase("Contention", "The workers take turns on the lock; each writes while it holds it.")
	errs := make(chan error, len(s.workers))
	var wg sync.WaitGroup
	for _, w := range s.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range contendRounds {
				if err := s.turn(ctx, w); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// turn: w acquires the lock, writes, holds it a moment and releases it.
func (s *story) turn(ctx context.Context, w *worker) error {
	lock, err := w.l.Acquire(ctx, s.key, locker.WithTTL(s.ttl))
	if err != nil {
		return storyErr(w.name, "acquire", err)
	}
	s.acquired(w, lock)
	s.write(w, lock)
	select {
	case <-time.After(holdTime):
	case <-ctx.Done():
	}
	return s.release(ctx, w, lock)
}

// stoppedOpts are the options of the lock of a worker that will pause or
// crash. On a server backend it is taken without auto-refresh: the
// worker's process goes on here, so only that lets its lock run out as a
// stopped process's would. On memory:// the client's Pause and Crash stop
// its watchdog as they would stop a process.
func (s *story) stoppedOpts() []locker.Option {
	if s.mem {
		return []locker.Option{locker.WithTTL(s.ttl)}
	}
	return []locker.Option{locker.WithTTL(s.ttl), locker.WithAutoRefresh(false)}
}

// pausedHolder: a holder pauses past its TTL, another takes over, the
// paused one wakes and writes.
func (s *story) pausedHolder(ctx context.Context) error {
	s.beginPhase("A paused holder",
		"A worker stops while holding the lock, as in a long garbage-collection pause, and wakes up\nafter another worker has taken over.")
	a, b := s.workers[0], s.workers[1]
	lockA, err := a.l.Acquire(ctx, s.key, s.stoppedOpts()...)
	if err != nil {
		return storyErr(a.name, "acquire", err)
	}
	s.acquired(a, lockA)
	s.write(a, lockA)

	// b waits for the lock meanwhile, writes once it has it, and keeps it
	// until a has written: a's stale write meets b's newer data.
	bWrote := make(chan error, 1)
	aWrote := make(chan struct{})
	bDone := make(chan error, 1)
	letBGo := sync.OnceFunc(func() { close(aWrote) })
	defer letBGo() // on every path out, so that b's goroutine ends too
	go func() {
		lockB, err := b.l.Acquire(ctx, s.key, locker.WithTTL(s.ttl))
		if err != nil {
			bWrote <- storyErr(b.name, "acquire", err)
			return
		}
		s.acquired(b, lockB)
		s.write(b, lockB)
		bWrote <- nil
		<-aWrote
		bDone <- s.release(ctx, b, lockB)
	}()

	a.pause()
	s.stopped(a, "paused")
	s.rep.emit(event{Worker: a.name, Event: "paused",
		Message: "PAUSED while holding the lock: its lock is no longer refreshed, and it still believes it holds it"})
	select {
	case err := <-bWrote:
		if err != nil {
			a.resume()
			return err
		}
	case <-ctx.Done():
		a.resume()
		return storyErr(b.name, "acquire", ctx.Err())
	}
	a.resume()
	s.rep.emit(event{Worker: a.name, Event: "resumed", Message: "wakes up, still believing it holds the lock, and writes"})
	s.write(a, lockA)
	err = s.staleRelease(ctx, a, b, lockA)
	letBGo()
	if berr := <-bDone; err == nil {
		err = berr
	}
	return err
}

// staleRelease: the woken worker a releases a lock that b holds now.
// Release compares tokens, so it cannot free b's lock whatever it
// returns; a backend that could not tell whether its delete arrived (a
// Redlock node that timed out, then had no lock of ours) reports success.
func (s *story) staleRelease(ctx context.Context, a, b *worker, lock locker.Lock) error {
	err := lock.Release(ctx)
	switch {
	case errors.Is(err, locker.ErrNotHeld):
		s.rep.emit(event{Worker: a.name, Event: "release-refused", Message: fmt.Sprintf(
			"release refused: not held, its lock had expired; %s's lock is untouched", b.name)})
	case err == nil:
		s.rep.emit(event{Worker: a.name, Event: "released", Message: fmt.Sprintf(
			"released its expired lock without an error (the backend could not tell it was gone); %s's lock is untouched", b.name)})
	default:
		return storyErr(a.name, "release", err)
	}
	return nil
}

// crashedHolder: a holder crashes; its lock expires and goes to the
// next waiter.
func (s *story) crashedHolder(ctx context.Context) error {
	s.beginPhase("A crashed holder",
		"A worker crashes while holding the lock; the others wait until it expires at its TTL.")
	c := s.workers[2]
	lockC, err := c.l.Acquire(ctx, s.key, s.stoppedOpts()...)
	if err != nil {
		return storyErr(c.name, "acquire", err)
	}
	s.acquired(c, lockC)
	s.write(c, lockC)
	errs := make(chan error, len(s.workers))
	var wg sync.WaitGroup
	for _, w := range s.workers {
		if w == c {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.turn(ctx, w); err != nil {
				errs <- err
			}
		}()
	}
	c.crash()
	s.stopped(c, "crashed")
	s.rep.emit(event{Worker: c.name, Event: "crashed", Message: fmt.Sprintf(
		"CRASHED while holding the lock: nothing releases it, it expires at its TTL (%v)", s.ttl)})
	wg.Wait()
	close(errs)
	return <-errs
}

// stopped records that w stopped holding the lock without releasing it.
func (s *story) stopped(w *worker, how string) {
	s.mu.Lock()
	s.expiring = &expiring{who: w.name, how: how, since: time.Now()}
	s.mu.Unlock()
}

// acquired records and shows an acquisition.
func (s *story) acquired(w *worker, lock locker.Lock) {
	fence, fenced := lock.Fence()
	s.mu.Lock()
	s.sum.Acquisitions++
	from := ""
	if s.holder != "" && s.holder != w.name {
		s.sum.Handoffs++
		from = " from " + s.holder
	}
	s.holder, s.current = w.name, lock.Token()
	if fenced {
		s.sum.Fences = append(s.sum.Fences, fence)
	}
	note := ""
	if e := s.expiring; e != nil {
		note = fmt.Sprintf(": %s's lock expired, %v after it %s", e.who, time.Since(e.since).Round(time.Millisecond), e.how)
		s.expiring = nil
	}
	s.mu.Unlock()
	ev := event{Worker: w.name, Event: "acquired"}
	if fenced {
		ev.Fence = &fence
		ev.Message = fmt.Sprintf("acquired the lock%s, fence %d%s", from, fence, note)
	} else {
		ev.Message = fmt.Sprintf("acquired the lock%s, no fence%s", from, note)
	}
	s.rep.emit(ev)
}

// write has w write to the storage with its lock's fence, and shows what
// became of it.
func (s *story) write(w *worker, lock locker.Lock) {
	fence, fenced := lock.Fence()
	s.mu.Lock()
	stale := lock.Token() != s.current
	r := s.store.write(w.name, fence, fenced)
	holder := s.holder
	switch {
	case r.accepted && stale:
		s.sum.WritesAccepted++
		s.sum.StaleAccepted++
	case r.accepted:
		s.sum.WritesAccepted++
	case stale:
		s.sum.WritesRejected++
		s.sum.StaleRejected++
	default:
		s.sum.WritesRejected++
	}
	s.mu.Unlock()
	ev := event{Worker: w.name, Event: "write", Stale: stale, Outcome: "accepted"}
	if fenced {
		ev.Fence = &fence
	}
	switch {
	case !r.accepted:
		ev.Outcome = "rejected"
		ev.Message = fmt.Sprintf("writes with fence %d: REJECTED, stale: the storage has accepted fence %d (%s holds the lock)", fence, r.highest, holder)
	case stale && fenced:
		ev.Message = fmt.Sprintf("writes with fence %d: ACCEPTED although stale: %s holds the lock", fence, holder)
	case stale:
		ev.Message = fmt.Sprintf("writes without a fence: ACCEPTED, yet stale (%s holds the lock): %s mints no fencing token, so the storage cannot tell, and %s's data overwrote %s's newer data",
			holder, s.caps.Name, w.name, r.prev)
	case fenced:
		ev.Message = fmt.Sprintf("writes with fence %d: accepted", fence)
	default:
		ev.Message = "writes without a fence: accepted"
	}
	s.rep.emit(ev)
}

// release has w release its lock, and shows it. A lock found expired (the
// process stalled past the TTL: a machine far too busy) is told, not
// fatal: the story goes on.
func (s *story) release(ctx context.Context, w *worker, lock locker.Lock) error {
	err := lock.Release(ctx)
	switch {
	case errors.Is(err, locker.ErrNotHeld):
		s.rep.emit(event{Worker: w.name, Event: "release-refused", Message: fmt.Sprintf("release refused: its lock had expired (%v)", err)})
	case err != nil:
		return storyErr(w.name, "release", err)
	default:
		s.rep.emit(event{Worker: w.name, Event: "released", Message: "released the lock"})
	}
	return nil
}

// summary returns the account of the story.
func (s *story) summary() summary {
	s.mu.Lock()
	defer s.mu.Unlock()
	sum := s.sum
	sum.Fences = append([]uint64{}, s.sum.Fences...)
	sum.ElapsedMS = time.Since(s.start).Milliseconds()
	sum.Verdict = sum.verdict()
	return sum
}
