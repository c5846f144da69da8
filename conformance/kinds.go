package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/distlock/locker"
)

// The cases about kinds of hold: shared holds (read/write locks) and
// permits (semaphores). Each runs where the backend claims the kinds it
// needs (Capabilities.Shared, Capabilities.Permits) and is skipped,
// naming them, where it does not.

// skipUnlessShared skips the case unless the backend admits shared holds.
func skipUnlessShared(t *T) {
	if !t.Capabilities().Shared {
		t.Skipf("the backend does not admit shared holds (Capabilities().Shared is false)")
	}
}

// skipUnlessPermits skips the case unless the backend admits semaphores.
func skipUnlessPermits(t *T) {
	if !t.Capabilities().Permits {
		t.Skipf("the backend does not admit semaphores (Capabilities().Permits is false)")
	}
}

// byKind runs shared where the backend admits shared holds and permits
// where it admits semaphores, and skips the case where it admits neither.
func byKind(t *T, shared, permits func(*T)) {
	c := t.Capabilities()
	if !c.Shared && !c.Permits {
		t.Skipf("the backend admits neither shared holds (Capabilities().Shared is false) nor semaphores (Capabilities().Permits is false)")
	}
	if c.Shared {
		shared(t)
	}
	if c.Permits {
		permits(t)
	}
}

// pending is an Acquire running on a goroutine of its own, so that a case
// can watch it wait.
type pending struct {
	name   string
	op     string // the call: "Acquire", "Campaign"
	cancel context.CancelFunc
	done   chan struct{} // closed once the call returned
	// Set before done is closed.
	lk  locker.Lock
	err error
	at  time.Time
}

// startAcquire calls l.Acquire(key, opts) as name, with a TTL of LongTTL
// unless opts give another, on a goroutine of its own. When the case
// ends, its cleanup cancels the call, waits for it, and releases what it
// got.
func (t *T) startAcquire(name string, l locker.Locker, key string, opts ...locker.Option) *pending {
	opts = append([]locker.Option{locker.WithTTL(t.LongTTL())}, opts...)
	return t.startCall(name, "Acquire", func(ctx context.Context) (locker.Lock, error) { return l.Acquire(ctx, key, opts...) })
}

// startCall runs call, the op (an Acquire, a Campaign) of name, on a
// goroutine of its own. When the case ends, its cleanup cancels the
// call, waits for it, and releases what it got.
func (t *T) startCall(name, op string, call func(ctx context.Context) (locker.Lock, error)) *pending {
	ctx, cancel := context.WithCancel(t.ctx)
	p := &pending{name: name, op: op, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		p.lk, p.err = call(ctx)
		p.at = time.Now()
	}()
	t.Cleanup(func() {
		cancel()
		<-p.done
		if p.err == nil {
			p.lk.Release(context.WithoutCancel(t.ctx))
		}
	})
	return p
}

// returned reports whether p's call has returned.
func (p *pending) returned() bool { return isClosed(p.done) }

// outcome says how p's call ended, once it has.
func (p *pending) outcome() string {
	if p.err != nil {
		return "failed: " + p.err.Error()
	}
	return "got the key"
}

// await waits up to d for p's call to get the key and returns the
// lock, or fails the case, saying why it should have got the key by
// then, and ends the calling goroutine.
func (t *T) await(p *pending, d time.Duration, why string) locker.Lock {
	if !t.ClosedWithin(p.done, d) {
		t.Fatalf("%s: %s's %s did not return within %v", why, p.name, p.op, d)
	}
	if p.err != nil {
		t.Fatalf("%s: %s's %s: %v", why, p.name, p.op, p.err)
	}
	return p.lk
}

// blindQueueWait is how long a case waits for a client to queue where the
// backend cannot list its waiters: many times a round trip to a server,
// even on a loaded machine.
const blindQueueWait = time.Second

// queueing tells a case when its clients have queued on a key: as the
// servers report it where the backend lists its waiters
// (locker.Inspect's Holder.Queue, or Holder.Waiters), after
// blindQueueWait where it does not.
type queueing struct {
	t     *T
	l     locker.Locker // the client that asks
	key   string
	blind bool // the backend cannot tell: the case waited blindly
	// blindWait, if set, replaces blindQueueWait: for a case that holds
	// whether or not its clients queued in time, and only checks more
	// where they did.
	blindWait time.Duration
}

// until waits until the servers report at least n waiters on the key, or
// one of ps returned (it did not stay queued: the caller checks that), or
// fails the case when neither happens within LongTTL/2.
func (q *queueing) until(n int, ps ...*pending) {
	t := q.t
	anyReturned := func() bool {
		for _, p := range ps {
			if p.returned() {
				return true
			}
		}
		return false
	}
	deadline := time.Now().Add(t.LongTTL() / 2)
	poll := time.Millisecond
	seen := 0
	for !anyReturned() {
		if !q.blind {
			h, err := locker.Inspect(t.ctx, q.l, q.key)
			switch {
			case errors.Is(err, locker.ErrUnsupported) || (err == nil && !h.WaitersKnown):
				q.blind = true
			case err != nil:
				t.Fatalf("inspecting %s for its waiters: %v", keyText(q.key), err)
			default:
				if seen = max(len(h.Queue), h.Waiters); seen >= n {
					return
				}
			}
		}
		if q.blind {
			// Sleep out the blind wait in steps, to notice a client that
			// was admitted instead of queueing.
			for end := time.Now().Add(q.blindFor()); time.Now().Before(end); {
				if anyReturned() || t.ClosedWithin(t.ctx.Done(), 10*time.Millisecond) {
					break
				}
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the servers report %d waiters on %s, not the %d that should queue, %v after the last of them called Acquire",
				seen, keyText(q.key), n, t.LongTTL()/2)
		}
		t.ClosedWithin(t.ctx.Done(), poll)
		poll = min(2*poll, 20*time.Millisecond)
	}
}

// blindFor is how long the case waits for a client to queue where the
// backend cannot list its waiters.
func (q *queueing) blindFor() time.Duration {
	if q.blindWait > 0 {
		return q.blindWait
	}
	return blindQueueWait
}

// note is what a failure message adds when the case could not see its
// clients queue.
func (q *queueing) note() string {
	if !q.blind {
		return ""
	}
	return fmt.Sprintf(" (the backend cannot list its waiters: the case gave each waiter %v to queue)", q.blindFor())
}

// holdFence returns lk's fence, or fails the case and ends the calling
// goroutine if lk has none on a backend that claims fencing.
func (t *T) holdFence(lk locker.Lock, what string) uint64 {
	f, ok := lk.Fence()
	if !ok {
		t.Fatalf("%s: Fence() reports ok=false on a backend whose Capabilities().Fencing is true", what)
	}
	return f
}

// wantMismatch checks that a request that disagrees with the key's
// holders failed with ErrKindMismatch.
func (t *T) wantMismatch(lk locker.Lock, err error, what string) {
	if err == nil {
		lk.Release(t.ctx)
		t.Errorf("%s succeeded; want an error wrapping ErrKindMismatch", what)
		return
	}
	t.WantErr(err, locker.ErrKindMismatch, what)
}

// semaphoreN is the limit of semaphore-limit's semaphore.
const semaphoreN = 3

func caseSemaphoreLimit(t *T) {
	skipUnlessPermits(t)
	semaphoreConcurrent(t)
	semaphoreWeights(t)
}

// semaphoreConcurrent has n + 2 clients try a semaphore of n at once:
// at most n may get a permit. A backend whose votes can split (a quorum
// of independent servers, as for the mutex) may refuse them all under
// such contention, so the semaphore is then filled one client at a time:
// it must take exactly n.
func semaphoreConcurrent(t *T) {
	const n = semaphoreN
	key := t.Key("n")
	sem := []locker.Option{locker.Limit(n), locker.WithTTL(t.LongTTL())}
	clients := make([]locker.Locker, n+2)
	for i := range clients {
		clients[i] = t.Locker()
	}
	held := tryAtOnce(t, clients, key, sem)
	t.Cleanup(func() {
		for _, lk := range held {
			if lk != nil {
				lk.Release(context.WithoutCancel(t.ctx))
			}
		}
	})
	got := 0
	for _, lk := range held {
		if lk != nil {
			got++
		}
	}
	if got > n {
		t.Fatalf("%d of %d concurrent TryAcquire on a semaphore of %d got a permit: more than %d holders at once", got, len(clients), n, n)
	}
	for i, l := range clients {
		if held[i] != nil || got == n {
			continue
		}
		lk, err := l.TryAcquire(t.ctx, key, sem...)
		if err != nil {
			t.Fatalf("client %d: TryAcquire on a semaphore of %d with only %d permits held: %v", i+1, n, got, err)
		}
		held[i] = lk
		got++
	}
	semaphoreFull(t, clients, held, key, sem)
}

// tryAtOnce has every client TryAcquire key with opts at the same moment
// and returns the locks they got (nil where refused); an error other
// than ErrNotAcquired fails the case.
func tryAtOnce(t *T, clients []locker.Locker, key string, opts []locker.Option) []locker.Lock {
	held := make([]locker.Lock, len(clients))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, l := range clients {
		wg.Go(func() {
			<-start
			lk, err := l.TryAcquire(t.ctx, key, opts...)
			switch {
			case err == nil:
				held[i] = lk
			case !errors.Is(err, locker.ErrNotAcquired):
				t.Errorf("client %d: TryAcquire on a semaphore under contention: %v", i+1, err)
			}
		})
	}
	close(start)
	wg.Wait()
	return held
}

// semaphoreFull checks a semaphore whose permits held (by clients, nil
// where none) are all taken: every other client is refused, and a
// release lets one of them in.
func semaphoreFull(t *T, clients []locker.Locker, held []locker.Lock, key string, sem []locker.Option) {
	waiting := -1 // a client without a permit
	for i, l := range clients {
		if held[i] == nil {
			t.WantNotAcquired(l, key, fmt.Sprintf("client %d, with all %d permits held", i+1, semaphoreN), locker.Limit(semaphoreN))
			waiting = i
		}
	}
	for i, lk := range held {
		if lk != nil {
			t.Release(lk)
			held[i] = nil
			break
		}
	}
	held[waiting] = t.TryAcquire(clients[waiting], key, sem...)
}

// semaphoreWeights fills a semaphore of 3 with a weight-2 and a weight-1
// hold, refusing a weight-2 request with one permit left, and admits it
// once the first hold's release frees two.
func semaphoreWeights(t *T) {
	const n = semaphoreN
	a, b, c := t.Locker(), t.Locker(), t.Locker()
	key := t.Key("w")
	two := t.TryAcquire(a, key, locker.Limit(n), locker.Weight(2), locker.WithTTL(t.LongTTL()))
	t.WantNotAcquired(b, key, fmt.Sprintf("a weight-2 request with %d of %d permits held", 2, n), locker.Limit(n), locker.Weight(2))
	one := t.TryAcquire(b, key, locker.Limit(n), locker.WithTTL(t.LongTTL()))
	t.WantNotAcquired(c, key, fmt.Sprintf("a weight-1 request with all %d permits held (weights 2 and 1)", n), locker.Limit(n))
	t.Release(two)
	again := t.TryAcquire(c, key, locker.Limit(n), locker.Weight(2), locker.WithTTL(t.LongTTL()))
	t.Release(one)
	t.Release(again)
}

func caseReadersWriters(t *T) {
	skipUnlessShared(t)
	a, b, c := t.Locker(), t.Locker(), t.Locker()
	key := t.Key("k")
	shared := []locker.Option{locker.Shared(), locker.WithTTL(t.LongTTL())}

	r1 := t.TryAcquire(a, key, shared...)
	r2 := t.TryAcquire(b, key, shared...)
	t.WantNotAcquired(c, key, "an exclusive request while two shared holds hold the key")
	t.Release(r1)
	t.WantNotAcquired(c, key, "an exclusive request while one shared hold still holds the key")
	t.Release(r2)

	w := t.TryAcquire(c, key, locker.WithTTL(t.LongTTL()))
	t.WantNotAcquired(a, key, "a shared request while an exclusive hold holds the key", locker.Shared())
	t.Release(w)
	if v := t.value("the writer's"); v != nil {
		// A backend may keep an exclusive hold with a value as it keeps
		// shared holds (Redis: in a hash of holders): it keeps readers
		// out all the same.
		w = t.TryAcquire(c, key, locker.WithTTL(t.LongTTL()), locker.WithValue(v))
		t.WantNotAcquired(a, key, "a shared request while an exclusive hold with a value holds the key", locker.Shared(), locker.WithValue(t.value("a reader's")))
		t.WantNotAcquired(b, key, "a shared request without a value while an exclusive hold with a value holds the key", locker.Shared())
		t.Release(w)
	}

	// Waiting: a writer gets the key once the last reader leaves, a
	// reader once the writer does.
	r1 = t.TryAcquire(a, key, shared...)
	pw := t.startAcquire("the writer", c, key)
	// Give the writer time to start waiting; whether or not it has, it
	// must get the key once the reader leaves.
	if t.ClosedWithin(pw.done, 50*time.Millisecond) {
		t.Fatalf("an exclusive Acquire returned while a shared hold held the key: %s", pw.outcome())
	}
	t.Release(r1)
	w = t.await(pw, t.LongTTL()/2, "the only reader released")
	pr := t.startAcquire("the reader", a, key, locker.Shared())
	if t.ClosedWithin(pr.done, 50*time.Millisecond) {
		t.Fatalf("a shared Acquire returned while an exclusive hold held the key: %s", pr.outcome())
	}
	t.Release(w)
	t.Release(t.await(pr, t.LongTTL()/2, "the writer released"))
}

func caseKindsFIFO(t *T) {
	if !t.Capabilities().FIFO {
		t.Skipf("the backend does not claim admission in queue order (Capabilities().FIFO is false)")
	}
	byKind(t, func(t *T) { readersBehindWriter().check(t) }, func(t *T) { smallBehindLarge().check(t) })
}

// queueJump is a key whose holder leaves room for a later request but not
// for the earlier one queued ahead of it: holder holds the key, first
// queues, and later, which would fit beside holder, queues behind first.
type queueJump struct {
	key                  string // the key's name in the case
	holder, first, later string // who they are, in failure messages
	// The kinds of hold they ask for, besides a TTL of LongTTL.
	holderOpts, firstOpts, laterOpts []locker.Option
	starves                          string // what a later request that jumps the queue does to the first
}

// readersBehindWriter: reader R1 holds; writer W queues; reader R2 queues
// behind W.
func readersBehindWriter() queueJump {
	return queueJump{
		key: "rw", holder: "reader R1", first: "writer W", later: "reader R2",
		holderOpts: []locker.Option{locker.Shared()}, laterOpts: []locker.Option{locker.Shared()},
		starves: "readers can starve a writer",
	}
}

// smallBehindLarge: on a semaphore of 2 with one permit held, a weight-2
// request queues, and a weight-1 request queues behind it.
func smallBehindLarge() queueJump {
	return queueJump{
		key: "sem", holder: "holder H of 1 of 2 permits", first: "request B of weight 2", later: "request S of weight 1",
		holderOpts: []locker.Option{locker.Limit(2)}, firstOpts: []locker.Option{locker.Limit(2), locker.Weight(2)}, laterOpts: []locker.Option{locker.Limit(2)},
		starves: "large requests can starve",
	}
}

// queue has j's holder take the key and its first and later requests
// queue for it, in that order, and fails the case if first does not
// wait. Whether later waits is for the caller to judge.
func (j queueJump) queue(t *T) (q *queueing, held locker.Lock, first, later *pending) {
	a, b, c := t.Locker(), t.Locker(), t.Locker()
	key := t.Key(j.key)
	q = &queueing{t: t, l: a, key: key}
	held = t.TryAcquire(a, key, append([]locker.Option{locker.WithTTL(t.LongTTL())}, j.holderOpts...)...)
	first = t.startAcquire(j.first, b, key, j.firstOpts...)
	q.until(1, first)
	j.wantWaiting(t, q, first)
	later = t.startAcquire(j.later, c, key, j.laterOpts...)
	q.until(2, first, later)
	j.wantWaiting(t, q, first)
	return q, held, first, later
}

// wantWaiting fails the case if first's Acquire returned while the holder
// held the key.
func (j queueJump) wantWaiting(t *T, q *queueing, first *pending) {
	if first.returned() {
		t.Fatalf("%s's Acquire returned while %s held the key: %s%s", j.first, j.holder, first.outcome(), q.note())
	}
}

// check queues j's requests; later must not get in ahead of first (a
// stream of later ones would starve it): the holder's release admits
// first, and first's admits later.
func (j queueJump) check(t *T) {
	q, held, first, later := j.queue(t)
	if later.returned() {
		t.Fatalf("%s, queued behind waiting %s, %s while %s held the key, ahead of %s: %s%s",
			j.later, j.first, later.outcome(), j.holder, j.first, j.starves, q.note())
	}
	t.Release(held)
	lkFirst := t.await(first, t.LongTTL()/2, fmt.Sprintf("%s, the only holder, released with %s first in the queue", j.holder, j.first))
	q.until(1, later)
	if later.returned() {
		t.Fatalf("%s %s while %s held the key%s", j.later, later.outcome(), j.first, q.note())
	}
	t.Release(lkFirst)
	t.Release(t.await(later, t.LongTTL()/2, fmt.Sprintf("%s released with %s next in the queue", j.first, j.later)))
}

func caseKindsFencing(t *T) {
	if !t.Capabilities().Fencing {
		t.Skipf("the backend mints no fencing tokens (Capabilities().Fencing is false)")
	}
	byKind(t, fencesReadWrite, fencesPermits)
}

// fencesReadWrite grants a key exclusively, then to two shared holds at
// once, then exclusively again, and checks the fences in that order.
func fencesReadWrite(t *T) {
	a, b, c := t.Locker(), t.Locker(), t.Locker()
	key := t.Key("rw")
	e1 := t.Acquire(a, key)
	f1 := t.holdFence(e1, "the first exclusive hold")
	t.Release(e1)
	s1 := t.Acquire(a, key, locker.Shared())
	f2 := t.holdFence(s1, "the first shared hold")
	s2 := t.Acquire(b, key, locker.Shared())
	f3 := t.holdFence(s2, "the second shared hold")
	t.Release(s1)
	t.Release(s2)
	e2 := t.Acquire(c, key)
	f4 := t.holdFence(e2, "the second exclusive hold")
	t.Release(e2)
	got := fmt.Sprintf("exclusive %d, shared %d and %d (held together), exclusive %d", f1, f2, f3, f4)
	if f2 <= f1 || f3 <= f1 {
		t.Errorf("a shared hold's fence does not exceed the earlier exclusive hold's: fences in grant order %s", got)
	}
	if f3 <= f2 {
		t.Errorf("the second shared hold's fence does not exceed the first's, granted before it: fences in grant order %s", got)
	}
	if f4 <= max(f1, f2, f3) {
		t.Errorf("the last exclusive hold's fence does not exceed every earlier hold's: fences in grant order %s", got)
	}
}

// fencesPermits grants two permits of a semaphore of 2, then, after one
// release, a third, and checks the fences in that order.
func fencesPermits(t *T) {
	a, b, c := t.Locker(), t.Locker(), t.Locker()
	key := t.Key("sem")
	sem := locker.Limit(2)
	p1 := t.Acquire(a, key, sem)
	f1 := t.holdFence(p1, "the first permit")
	p2 := t.Acquire(b, key, sem)
	f2 := t.holdFence(p2, "the second permit")
	t.Release(p1)
	p3 := t.Acquire(c, key, sem)
	f3 := t.holdFence(p3, "the third permit")
	t.Release(p2)
	t.Release(p3)
	if f2 <= f1 || f3 <= f2 {
		t.Errorf("permits' fences do not increase in grant order: %d, %d (held together), then %d after the first's release", f1, f2, f3)
	}
}

func caseCrashedSharedHolder(t *T) {
	byKind(t, func(t *T) { crashedReader(t); crashedReaderBesideLive(t) }, crashedPermitHolder)
}

// crashedReaderBesideLive cuts off one of two shared holders while the
// other, with a long TTL, keeps the key alive: once the crashed
// holder's TTL + ExpirySlack has passed, its share is gone, and a writer
// waiting for the key gets it when the live holder leaves.
func crashedReaderBesideLive(t *T) {
	a := t.CrashableClient()
	b, c := t.Locker(), t.Locker()
	key := t.Key("rw-beside-live")
	lk := t.Acquire(a.Locker, key, locker.Shared(), locker.WithTTL(t.TTL()))
	// A long TTL keeps the key alive past the crashed holder's (a
	// backend that counts expired holders would keep the writer out for
	// it), and no late refresh on a loaded machine loses it.
	kept := t.TryAcquire(b, key, locker.Shared(), locker.WithTTL(t.LongTTL()))
	a.Crash()
	freed := time.Now().Add(t.ExpiryBound(t.TTL()))
	pw := t.startAcquire("the writer", c, key)
	if !t.ClosedWithin(lk.Lost(), time.Until(freed)) {
		t.Errorf("the crashed shared holder's Lost() stayed open for TTL + ExpirySlack after the crash (TTL %v)", t.TTL())
	}
	t.ClosedWithin(t.ctx.Done(), time.Until(freed)) // wait the crashed holder's share out
	if pw.returned() {
		t.Fatalf("the writer's Acquire returned while the live shared holder held the key: %s", pw.outcome())
	}
	if isClosed(kept.Lost()) {
		t.Fatalf("the live shared holder's Lost() closed while it refreshed its hold: %v", kept.Err())
	}
	t.Release(kept)
	t.Release(t.await(pw, t.LongTTL()/2, fmt.Sprintf(
		"the live shared holder released, %v (TTL + ExpirySlack) after the other was cut off", t.ExpiryBound(t.TTL()))))
}

// crashedReader cuts off a shared holder: a writer gets the key within
// TTL + ExpirySlack.
func crashedReader(t *T) {
	a := t.CrashableClient()
	b := t.Locker()
	key := t.Key("rw")
	lk := t.Acquire(a.Locker, key, locker.Shared(), locker.WithTTL(t.TTL()))
	t.Release(t.crashHolder(a, lk, "the crashed shared holder", b, key, "the only shared holder crashed; an exclusive request"))
}

// crashedPermitHolder fills a semaphore of 2 with a live holder and one
// that it cuts off: the crashed holder's
// permit, and only it, is free for another within TTL + ExpirySlack.
func crashedPermitHolder(t *T) {
	a := t.CrashableClient()
	b, c := t.Locker(), t.Locker()
	key := t.Key("sem")
	sem := locker.Limit(2)
	lk := t.Acquire(a.Locker, key, sem, locker.WithTTL(t.TTL()))
	// The live holder's long TTL keeps the key alive while the crashed
	// one's permit lapses, and no late refresh on a loaded machine loses
	// it.
	kept := t.TryAcquire(b, key, sem, locker.WithTTL(t.LongTTL()))
	if got, err := c.TryAcquire(t.ctx, key, sem); err == nil {
		t.Release(got)
		if time.Now().After(lk.Until()) {
			// The cut-off holder's short TTL ran out before its watchdog
			// refreshed it (a loaded machine): its permit was free.
			t.Skipf("the first permit holder's validity (TTL %v) ran out before the case could cut it off", t.TTL())
		}
		t.Fatalf("both permits of a semaphore of 2 held: TryAcquire(%s) succeeded while two other clients hold a permit each", keyText(key))
	}
	t.Release(t.crashHolder(a, lk, "the crashed permit holder", c, key, "one of 2 permit holders crashed, the other holds on", sem))
	t.Release(kept)
}

func caseCancelledWriter(t *T) {
	skipUnlessShared(t)
	// Where admission is in queue order R2 queues behind W; elsewhere it
	// may be admitted beside R1 at once.
	_, r1, w, r2 := readersBehindWriter().queue(t)
	w.cancel()
	if !t.ClosedWithin(w.done, t.LongTTL()/2) {
		t.Fatalf("writer W's Acquire did not return within %v of its context being cancelled", t.LongTTL()/2)
	}
	if w.err == nil {
		t.Fatalf("writer W got the key, cancelled, while reader R1 held it")
	}
	t.WantErr(w.err, context.Canceled, "writer W's Acquire, cancelled while queued")
	// A backend that polls sees W gone at its next poll: the bound is
	// generous for it. It is below W's TTL, so that whatever W left to
	// keep readers out while it waited must go with its cancel, not lapse.
	lkR2 := t.await(r2, t.LongTTL()/2, "writer W, queued ahead of reader R2, was cancelled, and reader R1 still holds the key")
	if isClosed(r1.Lost()) {
		t.Errorf("reader R1's Lost() closed while it held the key with a long TTL: %v", r1.Err())
	}
	t.Release(lkR2)
	t.Release(r1)
}

func caseKindMismatch(t *T) {
	skipUnlessPermits(t)
	shared := t.Capabilities().Shared
	a, b := t.Locker(), t.Locker()
	long := locker.WithTTL(t.LongTTL())

	key := t.Key("sem")
	held := t.TryAcquire(a, key, locker.Limit(2), long)
	lk, err := b.TryAcquire(t.ctx, key, locker.Limit(3), long)
	t.wantMismatch(lk, err, "TryAcquire with Limit(3) on a key held with Limit(2)")
	ctx, cancel := context.WithTimeout(t.ctx, t.LongTTL()/2)
	lk, err = b.Acquire(ctx, key, locker.Limit(3), long)
	cancel()
	t.wantMismatch(lk, err, "Acquire with Limit(3) on a key held with Limit(2), which must fail rather than wait")
	lk, err = b.TryAcquire(t.ctx, key, long)
	t.wantMismatch(lk, err, "an exclusive TryAcquire on a key held with Limit(2)")
	if shared {
		lk, err = b.TryAcquire(t.ctx, key, locker.Shared(), long)
		t.wantMismatch(lk, err, "a shared TryAcquire on a key held with Limit(2)")
	}
	t.Release(held)
	// Only holders and waiters that exist count: the key is free for any
	// kind once they are gone.
	t.Release(t.TryAcquire(b, key, locker.Limit(3), long))

	if shared {
		key := t.Key("rw")
		r := t.TryAcquire(a, key, locker.Shared(), long)
		lk, err := b.TryAcquire(t.ctx, key, locker.Limit(2), long)
		t.wantMismatch(lk, err, "TryAcquire with Limit(2) on a key held shared")
		t.Release(r)
	}

	key = t.Key("x")
	x := t.TryAcquire(a, key, long)
	lk, err = b.TryAcquire(t.ctx, key, locker.Limit(2), long)
	t.wantMismatch(lk, err, "TryAcquire with Limit(2) on a key held exclusively")
	t.Release(x)
	t.Release(t.TryAcquire(b, key, locker.Limit(2), long))
}

func caseWriterNotStarved(t *T) {
	skipUnlessShared(t)
	overlappingReaders(t)
	crashedWaitingWriter(t)
}

// starveRounds is how many readers in turn overlapping-readers lets
// arrive while its writer waits, each before the last one leaves: a
// writer not admitted by then waits as long as readers keep coming.
const starveRounds = 4

// writerBehindReader has a reader hold key (for LongTTL) and a writer of
// another client wait behind it, and returns the queue's watcher, the
// reader's lock and the writer's pending Acquire.
func writerBehindReader(t *T, key, reader, writer string) (*queueing, locker.Lock, *pending) {
	a := t.Locker()
	q := &queueing{t: t, l: a, key: key}
	held := t.TryAcquire(a, key, locker.Shared(), locker.WithTTL(t.LongTTL()))
	pw := t.startAcquire(writer, t.Locker(), key)
	q.until(1, pw)
	if pw.returned() {
		t.Fatalf("%s's Acquire returned while %s held the key: %s%s", writer, reader, pw.outcome(), q.note())
	}
	return q, held, pw
}

// overlappingReaders has reader R1 hold the key and a writer wait for it;
// then a new reader arrives each round and the one before it leaves, so
// that the key never lacks a reader. A new reader must not get in while
// the writer waits: it waits (or is refused), and the writer gets the key
// once the readers holding it leave.
func overlappingReaders(t *T) {
	key := t.Key("rw")
	q, held, pw := writerBehindReader(t, key, "reader R1", "the writer")
	for i := 2; i < starveRounds+2; i++ {
		pr := t.startAcquire(fmt.Sprintf("reader R%d", i), t.Locker(), key, locker.Shared())
		q.until(2, pw, pr)
		if pw.returned() {
			t.Fatalf("the writer's Acquire returned while reader R%d held the key: %s", i-1, pw.outcome())
		}
		if !pr.returned() {
			// The reader waits behind the writer: once the readers
			// holding the key leave, the writer gets it, and the reader
			// waits for the writer.
			t.Release(held)
			lkW := t.await(pw, t.LongTTL()/2, fmt.Sprintf("the only reader released while the writer and reader R%d waited", i))
			if pr.returned() {
				t.Fatalf("reader R%d's Acquire returned while the writer held the key: %s", i, pr.outcome())
			}
			t.Release(lkW)
			t.Release(t.await(pr, t.LongTTL()/2, "the writer released"))
			return
		}
		if pr.err != nil {
			t.Fatalf("reader R%d's Acquire failed while reader R%d held the key and the writer waited: %v", i, i-1, pr.err)
		}
		// R_i got in beside R_{i-1}: R_{i-1} leaves, R_i holds on.
		t.Release(held)
		held = pr.lk
	}
	t.Fatalf("the writer waited through %d readers in turn, each admitted beside the last while the writer waited%s: readers that overlap starve a writer",
		starveRounds, q.note())
}

// crashedWaitingWriter cuts off a writer while it waits behind reader R1:
// whatever the writer left to keep new readers out, a new reader gets in
// within TTL + ExpirySlack of the cut (the writer's TTL), while R1 still
// holds the key.
func crashedWaitingWriter(t *T) {
	key := t.Key("crashed-writer")
	a, b := t.Locker(), t.Locker()
	q := &queueing{t: t, l: a, key: key}
	held := t.TryAcquire(a, key, locker.Shared(), locker.WithTTL(t.LongTTL()))
	c := t.CrashableClient()
	pw := t.startAcquire("the writer", c.Locker, key, locker.WithTTL(t.TTL()))
	q.until(1, pw)
	if pw.returned() {
		t.Fatalf("the writer's Acquire returned while reader R1 held the key: %s%s", pw.outcome(), q.note())
	}
	c.Crash()
	lk := t.AcquireWithin(b, key, t.ExpiryBound(t.TTL()),
		fmt.Sprintf("the writer (TTL %v) was cut off while it waited behind reader R1, which still holds the key; a new reader", t.TTL()),
		locker.Shared())
	t.Release(lk)
	t.Release(held)
}

// readersBehind is how many readers caseReadersAfterWriter queues behind
// its writer: enough that a reader watching the node just before its own
// watches another reader.
const readersBehind = 3

func caseReadersAfterWriter(t *T) {
	skipUnlessShared(t)
	readersAfterWriter(t, "cancelled")
	if t.Capabilities().FIFO {
		// Elsewhere the readers may be admitted beside reader R0, ahead
		// of the writer: it is not granted before them.
		readersAfterWriter(t, "released")
	}
}

// readersAfterWriter has reader R0 hold the key, writer W queue, and
// readers queue behind W; then W leaves the queue (how: "cancelled"
// while R0 holds, or "released" once R0's release admitted it), and every
// reader must be admitted, none waiting for a TTL to run out: the bound
// is half the TTL of every hold.
func readersAfterWriter(t *T, how string) {
	key := t.Key("rw-" + how)
	q, r0, w := writerBehindReader(t, key, "reader R0", "writer W")
	readers := make([]*pending, readersBehind)
	for i := range readers {
		readers[i] = t.startAcquire(fmt.Sprintf("reader R%d", i+1), t.Locker(), key, locker.Shared())
		q.until(2+i, append([]*pending{w}, readers[:i+1]...)...)
	}
	bound := t.LongTTL() / 2
	switch how {
	case "cancelled":
		w.cancel()
		if !t.ClosedWithin(w.done, bound) {
			t.Fatalf("writer W's Acquire did not return within %v of its context being cancelled", bound)
		}
		if w.err == nil {
			t.Fatalf("writer W got the key, cancelled, while reader R0 held it")
		}
	case "released":
		t.Release(r0)
		lkW := t.await(w, bound, "reader R0, the only holder, released with writer W first in the queue")
		for _, r := range readers {
			if r.returned() {
				t.Fatalf("%s, queued behind writer W, %s while W held the key%s", r.name, r.outcome(), q.note())
			}
		}
		t.Release(lkW)
	}
	// All are admitted while all hold: one reader's release must not be
	// what admits the next.
	held := make([]locker.Lock, len(readers))
	for i, r := range readers {
		held[i] = t.await(r, bound, fmt.Sprintf("writer W, queued ahead of %d readers, was %s, and the readers ahead of %s still hold the key", readersBehind, how, r.name))
	}
	for _, lk := range held {
		t.Release(lk)
	}
	if how == "cancelled" {
		t.Release(r0)
	}
}

func caseWriterAfterReaders(t *T) {
	skipUnlessShared(t)
	a, b := t.Locker(), t.Locker()
	key := t.Key("k")
	q := &queueing{t: t, l: a, key: key}
	shared := []locker.Option{locker.Shared(), locker.WithTTL(t.LongTTL())}
	r1 := t.TryAcquire(a, key, shared...)
	r2 := t.TryAcquire(b, key, shared...)
	w := t.startAcquire("writer W", t.Locker(), key)
	q.until(1, w)
	if w.returned() {
		t.Fatalf("writer W's Acquire returned while readers R1 and R2 held the key: %s%s", w.outcome(), q.note())
	}
	// R2, the reader nearer to W in the queue, leaves first.
	t.Release(r2)
	if t.ClosedWithin(w.done, 100*time.Millisecond) {
		t.Fatalf("writer W's Acquire returned once reader R2 left, while reader R1 still held the key: %s", w.outcome())
	}
	t.Release(r1)
	t.Release(t.await(w, t.LongTTL()/2, "readers R2 and then R1, the last holder, released"))
}
