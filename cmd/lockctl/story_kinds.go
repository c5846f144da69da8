package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/distlock/locker"
	"github.com/distlock/locker/backend"
)

// This file tells the demo's second story: shared holds and semaphores.
// Readers share a read/write lock while a writer waits, and a reader
// that comes after the writer does not overtake it where the backend
// queues; then a semaphore of n permits admits n clients at once and
// makes one more wait. The story keeps a book of who holds each key, of
// what kind, and counts a grant that the kinds' rules forbid (a writer
// beside anyone, more permits than the limit) as a violation.

// rwSummary is the account of the readers-and-writer phase.
type rwSummary struct {
	// Skipped says why the phase did not run: the backend does not admit
	// shared holds.
	Skipped string `json:"skipped,omitempty"`
	// ReadersTogether is the most readers that held the key at once.
	ReadersTogether int `json:"readers_together"`
	// WriterWaitMS is how long the writer waited for the key.
	WriterWaitMS int64 `json:"writer_wait_ms"`
	// Overtaken counts the readers granted the key while the writer
	// waited for it, having asked after it: none where the backend
	// queues (FIFO).
	Overtaken int  `json:"writer_overtaken"`
	FIFO      bool `json:"fifo"`
	// Fences are the grants' fences, in grant order, of both kinds.
	Fences []uint64 `json:"fences"`
	// Violations counts the grants the rules forbid: a writer beside a
	// reader or another writer.
	Violations int `json:"violations"`
}

// semSummary is the account of the semaphore phase.
type semSummary struct {
	Skipped string `json:"skipped,omitempty"` // why the phase did not run
	Limit   int    `json:"limit"`             // the semaphore's permits
	Clients int    `json:"clients"`           // one more than Limit
	// MostHeld is the most permits held at once; Waited counts the
	// clients that found every permit taken and waited.
	MostHeld int      `json:"most_held"`
	Waited   int      `json:"waited"`
	Fences   []uint64 `json:"fences"` // in grant order
	// Violations counts the grants that took more permits than the
	// limit left.
	Violations int `json:"violations"`
}

// book is who holds one key, and of what kind, as the story saw the
// grants and releases: a holder is entered once its grant returned and
// struck off before it releases, so that the book never lists more than
// the servers hold.
type book struct {
	mu     sync.Mutex
	holds  map[string]backend.Claim
	fences []uint64
	most   int // the most units held at once
	bad    int // grants the rules forbid
}

func newBook() *book { return &book{holds: map[string]backend.Claim{}} }

// grant enters who's hold of claim with its fence, and reports what the
// key's holders were before it and whether the grant broke the rules.
func (b *book) grant(who string, c backend.Claim, lock locker.Lock) (others []string, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	units, capacity := c.Units()
	held := int64(0)
	for name, o := range b.holds {
		others = append(others, name)
		u, _ := o.Units()
		held += u
	}
	slices.Sort(others)
	ok = held+units <= capacity
	if !ok {
		b.bad++
	}
	b.holds[who] = c
	if f, fenced := lock.Fence(); fenced {
		b.fences = append(b.fences, f)
	}
	switch c.Kind {
	case backend.Shared:
		b.most = max(b.most, len(b.holds))
	case backend.Permit:
		b.most = max(b.most, int(held+units))
	}
	return others, ok
}

// release strikes who off.
func (b *book) release(who string) {
	b.mu.Lock()
	delete(b.holds, who)
	b.mu.Unlock()
}

// holding reports whether who holds the key.
func (b *book) holding(who string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.holds[who]
	return ok
}

// skipped starts a phase that the backend cannot run, saying why.
func (s *story) skipped(title, why string) {
	s.beginPhase(title, "Skipped: "+why+".")
}

// queuePacing is how long the story gives a client to join a queue it
// cannot see (the backend keeps none, or lists none), before it goes on.
const queuePacing = 200 * time.Millisecond

// awaitQueued waits until key has n waiters on the servers, as l's
// Inspect sees them, or until done says the wait is over. Where the
// backend lists no waiters, it gives them queuePacing to arrive.
func (s *story) awaitQueued(ctx context.Context, l locker.Locker, key string, n int, done func() bool) error {
	for !done() {
		h, err := locker.Inspect(ctx, l, key)
		if err != nil || !h.WaitersKnown {
			return sleepCtx(ctx, queuePacing)
		}
		if h.Waiters >= n {
			return nil
		}
		if err := sleepCtx(ctx, 5*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// openWorkers opens a client for each name, for a phase of its own.
func (s *story) openWorkers(ctx context.Context, names ...string) ([]*worker, error) {
	var ws []*worker
	for _, n := range names {
		w, err := s.newWorker(ctx, n)
		if err != nil {
			closeWorkers(ws)
			return nil, err
		}
		ws = append(ws, w)
	}
	return ws, nil
}

func closeWorkers(ws []*worker) {
	for _, w := range ws {
		w.close()
	}
}

// take has w take key with opts: at once if it can, else after it says
// it waits (waiting, which says why, given the book's holders). It
// enters the grant in the book and returns the lock and the key's
// holders before it.
func (s *story) take(ctx context.Context, w *worker, key string, bk *book, c backend.Claim, waiting func(holders []string) string, opts ...locker.Option) (locker.Lock, []string, error) {
	opts = append(opts, locker.WithTTL(s.ttl))
	lock, err := w.l.TryAcquire(ctx, key, opts...)
	if errors.Is(err, locker.ErrNotAcquired) {
		bk.mu.Lock()
		holders := slices.Sorted(maps.Keys(bk.holds))
		bk.mu.Unlock()
		s.rep.emit(event{Worker: w.name, Event: "waiting", Message: waiting(holders)})
		lock, err = w.l.Acquire(ctx, key, opts...)
	}
	if err != nil {
		return nil, nil, storyErr(w.name, "acquire", err)
	}
	others, ok := bk.grant(w.name, c, lock)
	if !ok {
		s.rep.emit(event{Worker: w.name, Event: "violation", Message: fmt.Sprintf(
			"UNEXPECTED: granted %s while %s held the key: the backend broke the rule of its kind", claimText(c), strings.Join(others, ", "))})
	}
	return lock, others, nil
}

// claimText names what a claim takes: "a read lock", "the write lock",
// "1 of 3 permits".
func claimText(c backend.Claim) string {
	switch c.Kind {
	case backend.Shared:
		return "a read lock"
	case backend.Permit:
		return fmt.Sprintf("%d of %d permits", max(c.Weight, 1), c.Limit)
	}
	return "the write lock"
}

// giveBack has w release lock, struck off the book first. It says so
// before the release, which may hand the key on at once: the story then
// tells the release before the grant it lets in.
func (s *story) giveBack(ctx context.Context, w *worker, bk *book, lock locker.Lock, what string) error {
	bk.release(w.name)
	s.rep.emit(event{Worker: w.name, Event: "releases", Message: "releases " + what})
	if err := lock.Release(ctx); err != nil && !errors.Is(err, locker.ErrNotHeld) {
		return storyErr(w.name, "release", err)
	}
	return nil
}

// fenceNote is ", fence N" for a fenced lock.
func fenceNote(lock locker.Lock) string {
	if f, ok := lock.Fence(); ok {
		return fmt.Sprintf(", fence %d", f)
	}
	return ""
}

func fencePtr(lock locker.Lock) *uint64 {
	if f, ok := lock.Fence(); ok {
		return &f
	}
	return nil
}

// readersAndWriter: two readers share the key; a writer asks for it and
// waits; one reader finishes and asks again, after the writer; the other
// finishes. Where the backend queues, the writer goes next and the
// returning reader after it; where it does not, the writer's mark keeps
// the reader out until the writer has had the key (a backend without such
// a mark lets the reader overtake the writer, which the summary counts).
func (s *story) readersAndWriter(ctx context.Context) error {
	const title = "Readers share, a writer waits"
	rw := &rwSummary{FIFO: s.caps.FIFO}
	s.sum.ReadWrite = rw
	if !s.caps.Shared {
		rw.Skipped = fmt.Sprintf("%s does not admit shared holds (Capabilities.Shared is false)", s.caps.Name)
		s.skipped(title, rw.Skipped)
		return nil
	}
	s.beginPhase(title, "Two readers hold a read/write lock together; a writer needs it alone and waits for them. A reader that asks\n"+
		"again after the writer asked "+s.queueText()+".")
	ws, err := s.openWorkers(ctx, "r1", "r2", "W")
	if err != nil {
		return err
	}
	defer closeWorkers(ws)
	p := &rwPhase{s: s, key: s.key + "/rw", bk: newBook(), sum: rw, r1: ws[0], r2: ws[1], w: ws[2]}
	err = p.play(ctx)
	rw.ReadersTogether, rw.Fences, rw.Violations = p.bk.most, p.bk.fences, p.bk.bad
	return err
}

// queueText says what becomes of a reader that asks after a waiting
// writer, by what the backend claims.
func (s *story) queueText() string {
	if s.caps.FIFO {
		return "waits behind it: " + s.caps.Name + " grants in queue order, so readers cannot starve a writer"
	}
	return "waits for it too: " + s.caps.Name + " keeps no queue, but a waiting writer marks the key so that no new reader gets in ahead of it\n" +
		"(a backend without such a mark would let the reader overtake the writer)"
}

// rwPhase is one telling of readersAndWriter.
type rwPhase struct {
	s         *story
	key       string
	bk        *book
	sum       *rwSummary
	r1, r2, w *worker

	mu            sync.Mutex
	writerWaiting bool
}

var (
	sharedClaim    = backend.Claim{Kind: backend.Shared}
	exclusiveClaim = backend.Claim{Kind: backend.Exclusive}
)

func (p *rwPhase) play(ctx context.Context) error {
	s := p.s
	l1, err := p.read(ctx, p.r1)
	if err != nil {
		return err
	}
	l2, err := p.read(ctx, p.r2)
	if err != nil {
		return err
	}
	wrote := make(chan error, 1)
	p.setWaiting(true)
	go func() { wrote <- p.write(ctx) }()
	if err := s.awaitQueued(ctx, p.r1.l, p.key, 1, func() bool { return !p.waiting() }); err != nil {
		return err
	}
	if err := s.giveBack(ctx, p.r1, p.bk, l1, "its read lock, and asks for another"); err != nil {
		return err
	}
	reread := make(chan error, 1)
	go func() {
		lock, err := p.read(ctx, p.r1)
		if err == nil {
			err = sleepCtx(ctx, holdTime)
			err = errors.Join(err, s.giveBack(ctx, p.r1, p.bk, lock, "its read lock"))
		}
		reread <- err
	}()
	if err := s.awaitQueued(ctx, p.r2.l, p.key, 2, func() bool { return p.bk.holding(p.r1.name) }); err != nil {
		return err
	}
	if err := s.giveBack(ctx, p.r2, p.bk, l2, "its read lock"); err != nil {
		return err
	}
	return errors.Join(<-wrote, <-reread)
}

func (p *rwPhase) setWaiting(b bool) {
	p.mu.Lock()
	p.writerWaiting = b
	p.mu.Unlock()
}

func (p *rwPhase) waiting() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.writerWaiting
}

// read has r take a read lock and say with whom it reads.
func (p *rwPhase) read(ctx context.Context, r *worker) (locker.Lock, error) {
	s := p.s
	lock, others, err := s.take(ctx, r, p.key, p.bk, sharedClaim, func(holders []string) string {
		if s.caps.FIFO {
			return fmt.Sprintf("asks for a read lock: %s waits for the write lock ahead of it, so it waits too (queue order)", p.w.name)
		}
		return fmt.Sprintf("asks for a read lock: %s waits for the write lock, and %s holds new readers off meanwhile", p.w.name, s.caps.Name)
	}, locker.Shared())
	if err != nil {
		return nil, err
	}
	msg := "acquired a read lock" + fenceNote(lock)
	switch {
	case p.waiting():
		p.mu.Lock()
		p.sum.Overtaken++
		p.mu.Unlock()
		msg += fmt.Sprintf(", OVERTAKING %s, which waits for the write lock: %s keeps no queue", p.w.name, s.caps.Name)
	case len(others) > 0:
		msg += "; reading together with " + strings.Join(others, ", ")
	}
	s.rep.emit(event{Worker: r.name, Event: "acquired", Fence: fencePtr(lock), Message: msg})
	return lock, nil
}

// write has the writer take the write lock, write, and release it.
func (p *rwPhase) write(ctx context.Context) error {
	s := p.s
	asked := time.Now()
	lock, _, err := s.take(ctx, p.w, p.key, p.bk, exclusiveClaim, func(holders []string) string {
		return fmt.Sprintf("asks for the write lock: %s hold a read lock, so it waits for them", strings.Join(holders, " and "))
	})
	p.setWaiting(false)
	if err != nil {
		return err
	}
	waited := time.Since(asked)
	p.sum.WriterWaitMS = waited.Milliseconds()
	s.rep.emit(event{Worker: p.w.name, Event: "acquired", Fence: fencePtr(lock), Message: fmt.Sprintf(
		"acquired the write lock%s, after waiting %v: no reader holds the key", fenceNote(lock), waited.Round(time.Millisecond))})
	s.rep.emit(event{Worker: p.w.name, Event: "write", Fence: fencePtr(lock), Outcome: "accepted",
		Message: "writes alone: every reader before it has finished, none after it has begun"})
	if err := sleepCtx(ctx, holdTime); err != nil {
		return err
	}
	return s.giveBack(ctx, p.w, p.bk, lock, "the write lock")
}

// semaphore: one more client than the semaphore has permits asks for a
// permit at once; every permit is taken, the last client waits, and gets
// one when a holder releases.
func (s *story) semaphore(ctx context.Context) error {
	const title = "A semaphore"
	limit := max(2, len(s.workers)-1)
	sem := &semSummary{Limit: limit, Clients: limit + 1}
	s.sum.Semaphore = sem
	if !s.caps.Permits {
		sem.Skipped = fmt.Sprintf("%s does not admit semaphores (Capabilities.Permits is false)", s.caps.Name)
		s.skipped(title, sem.Skipped)
		return nil
	}
	s.beginPhase(title, fmt.Sprintf("%d clients ask at once for a permit of a semaphore of %d: %d hold one together, the last waits\n"+
		"until a permit is given back.", limit+1, limit, limit))
	names := make([]string, limit+1)
	for i := range names {
		names[i] = fmt.Sprintf("p%d", i+1)
	}
	ws, err := s.openWorkers(ctx, names...)
	if err != nil {
		return err
	}
	defer closeWorkers(ws)
	bk := newBook()
	claim := backend.Claim{Kind: backend.Permit, Limit: limit, Weight: 1}
	var tried sync.WaitGroup // every client has tried once
	tried.Add(len(ws))
	triedAll := make(chan struct{})
	go func() { tried.Wait(); close(triedAll) }()
	errs := make(chan error, len(ws))
	var waited sync.WaitGroup
	for _, w := range ws {
		waited.Go(func() { errs <- s.permitTurn(ctx, w, bk, claim, sem, tried.Done, triedAll) })
	}
	waited.Wait()
	close(errs)
	sem.MostHeld, sem.Fences, sem.Violations = bk.most, bk.fences, bk.bad
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return errors.Join(all...)
}

// permitTurn: w asks for a permit (tried is called once it has tried
// once, or waits), holds it until every client has tried, and gives it
// back.
func (s *story) permitTurn(ctx context.Context, w *worker, bk *book, c backend.Claim, sem *semSummary, tried func(), triedAll <-chan struct{}) error {
	once := sync.OnceFunc(tried)
	defer once()
	lock, _, err := s.take(ctx, w, s.key+"/sem", bk, c, func([]string) string {
		bk.mu.Lock()
		sem.Waited++
		bk.mu.Unlock()
		once()
		// Not named: the others' grants race with this try, and the
		// book may not have them all yet.
		return fmt.Sprintf("asks for a permit: all %d are taken, so it waits", c.Limit)
	}, locker.Limit(c.Limit))
	if err != nil {
		return err
	}
	once()
	bk.mu.Lock()
	inUse := 0
	for _, o := range bk.holds {
		inUse += o.Weight
	}
	bk.mu.Unlock()
	s.rep.emit(event{Worker: w.name, Event: "acquired", Fence: fencePtr(lock), Message: fmt.Sprintf(
		"acquired a permit%s: %d of %d in use", fenceNote(lock), inUse, c.Limit)})
	select {
	case <-triedAll:
	case <-ctx.Done():
		return storyErr(w.name, "hold", ctx.Err())
	}
	if err := sleepCtx(ctx, holdTime); err != nil {
		return err
	}
	return s.giveBack(ctx, w, bk, lock, "its permit")
}
