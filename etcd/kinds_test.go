package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/locker"
	"github.com/distlock/locker/backend"
	"github.com/distlock/locker/etcd"
	"github.com/distlock/locker/internal/testenv"
)

// Shared holds and semaphores: the queue's entries carry their claims in
// their names, and each waiter judges itself by backend.Admit over the
// entries ahead of its own. The tests drive the order of the queue by
// reading it (Inspect, or the server) until a waiter's entry is there, and
// learn that a waiter has judged itself from the hook it calls before it
// waits: never by sleeping.

// kinds is one key of a test, its clients and what it watches.
type kinds struct {
	t   *testing.T
	url string
	raw *clientv3.Client
	key string
	qp  string
	op  locker.Locker // inspects

	mu       sync.Mutex
	watching map[string][]string // waiter entry -> the entries it waits for now
	checking func(self string)   // if set, the Checking hook for the key's waiters
	put      func(entry string)  // if set, the Put hook for the key's entries
}

func newKinds(t *testing.T, name string) *kinds {
	url := testenv.Get(t, testenv.EtcdURL)
	key := uniqueKey("kinds/" + name)
	k := &kinds{
		t: t, url: url, raw: rawClient(t, testenv.Hosts(t, url)...),
		key: key, qp: etcd.QueuePrefix(etcd.DefaultNamespace, key),
		watching: map[string][]string{},
	}
	k.op = open(t, url)
	note := func(self string, watched []string) {
		if strings.HasPrefix(self, k.qp) {
			k.mu.Lock()
			k.watching[self] = watched
			k.mu.Unlock()
		}
	}
	// forward calls *f, if set, for the key's entries.
	forward := func(f *func(string)) func(string) {
		return func(entry string) {
			k.mu.Lock()
			g := *f
			k.mu.Unlock()
			if g != nil && strings.HasPrefix(entry, k.qp) {
				g(entry)
			}
		}
	}
	etcd.SetHooks(t, etcd.Hooks{
		Watching:    func(self, watched string) { note(self, []string{watched}) },
		WatchingAll: note,
		Checking:    forward(&k.checking),
		Put:         forward(&k.put),
	})
	return k
}

// set makes f the hook (k.checking or k.put) that hook points to; nil
// removes it.
func (k *kinds) set(hook *func(string), f func(string)) {
	k.mu.Lock()
	*hook = f
	k.mu.Unlock()
}

// hold acquires the key with opts through a Locker of its own.
func (k *kinds) hold(opts ...locker.Option) locker.Lock {
	k.t.Helper()
	return k.holdWith(open(k.t, k.url), opts...)
}

func (k *kinds) holdWith(l locker.Locker, opts ...locker.Option) locker.Lock {
	k.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lk, err := l.Acquire(ctx, k.key, opts...)
	if err != nil {
		k.t.Fatalf("Acquire(%v): %v", opts, err)
	}
	k.t.Cleanup(func() { lk.Release(context.Background()) })
	return lk
}

// pending is an Acquire running on a goroutine of its own.
type pending struct {
	cancel context.CancelFunc
	done   chan struct{}
	lk     locker.Lock
	err    error
}

// start runs Acquire with opts through a Locker of its own. When the test
// ends, the call is cancelled and what it got released.
func (k *kinds) start(opts ...locker.Option) *pending {
	l := open(k.t, k.url)
	ctx, cancel := context.WithCancel(context.Background())
	p := &pending{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		p.lk, p.err = l.Acquire(ctx, k.key, opts...)
	}()
	k.t.Cleanup(func() {
		cancel()
		<-p.done
		if p.err == nil {
			p.lk.Release(context.Background())
		}
	})
	return p
}

// await waits for p to get the key.
func (k *kinds) await(p *pending, what string) locker.Lock {
	k.t.Helper()
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		k.t.Fatalf("%s: Acquire did not return within 30s", what)
	}
	if p.err != nil {
		k.t.Fatalf("%s: Acquire: %v", what, p.err)
	}
	return p.lk
}

// inspect returns the key as Inspect sees it.
func (k *kinds) inspect() locker.Holder {
	k.t.Helper()
	h, err := locker.Inspect(context.Background(), k.op, k.key)
	if err != nil {
		k.t.Fatal(err)
	}
	return h
}

// queued waits until n waiters queue, and returns them in queue order.
// None of ps may return meanwhile: each was to wait.
func (k *kinds) queued(n int, ps ...*pending) []locker.Hold {
	k.t.Helper()
	var q []locker.Hold
	testenv.WaitFor(k.t, 30*time.Second, fmt.Sprintf("%d waiters queued", n), func() bool {
		for _, p := range ps {
			if testenv.Closed(p.done) {
				k.t.Fatalf("an Acquire that was to wait returned: %v", p.outcome())
			}
		}
		q = k.inspect().Queue
		return len(q) >= n
	})
	if len(q) != n {
		k.t.Fatalf("Queue = %v, want %d waiters", q, n)
	}
	return q
}

func (p *pending) outcome() string {
	if p.err != nil {
		return "failed: " + p.err.Error()
	}
	return fmt.Sprintf("got the key, fence %d", fence(p.lk))
}

// waitsFor waits until the waiter whose entry is self is about to wait for
// some entries to go, and fails the test unless they are want. p, its
// Acquire, must not return. who names the waiter and whom what it should
// wait for, in the failure message.
func (k *kinds) waitsFor(self string, p *pending, want []string, who, whom string) {
	k.t.Helper()
	var got []string
	testenv.WaitFor(k.t, 30*time.Second, "the waiter "+self+" waits", func() bool {
		if testenv.Closed(p.done) {
			k.t.Fatalf("the waiter %s was to wait; its Acquire %s", self, p.outcome())
		}
		k.mu.Lock()
		defer k.mu.Unlock()
		got = k.watching[self]
		return got != nil
	})
	if !slices.Equal(got, want) {
		k.t.Fatalf("%s waits for %q; want %s, %q", who, got, whom, want)
	}
}

// wantRefused fails the test unless a TryAcquire of the key with opts,
// through a Locker of its own, fails with ErrNotAcquired; what names it.
func (k *kinds) wantRefused(what string, opts ...locker.Option) {
	k.t.Helper()
	if _, err := open(k.t, k.url).TryAcquire(context.Background(), k.key, opts...); !errors.Is(err, locker.ErrNotAcquired) {
		k.t.Fatalf("%s = %v, want ErrNotAcquired", what, err)
	}
}

// wantQueue checks that the key's queue is still before, as it was
// before op.
func (k *kinds) wantQueue(before []string, op string) {
	k.t.Helper()
	if after := k.entries(); !slices.Equal(after, before) {
		k.t.Errorf("the queue after %s = %q, want it as before, %q", op, after, before)
	}
}

// release releases lk, failing the test on an error.
func (k *kinds) release(lk locker.Lock) {
	k.t.Helper()
	if err := lk.Release(context.Background()); err != nil {
		k.t.Fatal(err)
	}
}

// entries returns the keys of the key's queue entries, oldest first.
func (k *kinds) entries() []string {
	k.t.Helper()
	return queue(k.t, k.raw, k.qp)
}

func fence(lk locker.Lock) uint64 {
	f, _ := lk.Fence()
	return f
}

func holdEntry(h locker.Hold) string { return h.Detail["entry"] }

// TestSharedTogetherExclusiveAlone: readers hold the key together; a
// writer waits until they are all gone, and then holds it alone.
func TestSharedTogetherExclusiveAlone(t *testing.T) {
	k := newKinds(t, "together")
	r1 := k.hold(locker.Shared())
	r2 := k.hold(locker.Shared())
	if h := k.inspect(); len(h.Holds) != 2 || h.Holds[0].Kind != backend.Shared || h.Holds[1].Kind != backend.Shared {
		t.Fatalf("Holds = %+v, want the two readers", h.Holds)
	}
	k.wantRefused("a writer's TryAcquire while readers hold")
	w := k.start()
	q := k.queued(1, w)
	k.waitsFor(holdEntry(q[0]), w, []string{k.entries()[1]}, "the writer", "the reader just before it")
	k.release(r1)
	if testenv.Closed(w.done) {
		t.Fatalf("the writer's Acquire returned while a reader held the key: %s", w.outcome())
	}
	k.release(r2)
	wl := k.await(w, "the writer, the readers gone")
	k.wantRefused("a reader's TryAcquire while the writer holds", locker.Shared())
	if f := fence(wl); f <= fence(r1) || f <= fence(r2) {
		t.Errorf("the writer's fence %d is not above the readers' %d and %d", f, fence(r1), fence(r2))
	}
}

// TestSharedTryAcquire: a reader's TryAcquire succeeds beside readers, and
// fails behind a waiting writer (FIFO) or a holding one; a refused
// TryAcquire leaves nothing in the queue. It puts its entry only if no
// entry joined the queue since it read it: a writer that queues in
// between turns it away.
func TestSharedTryAcquire(t *testing.T) {
	k := newKinds(t, "try")
	ctx := context.Background()
	k.hold(locker.Shared())

	g, err := k.raw.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	defer k.raw.Revoke(ctx, g.ID)
	writer := k.qp + fmt.Sprintf("%x", int64(g.ID)) // an exclusive entry, as a Locker names it
	puts := 0
	k.set(&k.put, func(string) {
		// The first put is tried only on an empty queue, and reads it
		// instead; the second is conditional on that read.
		if puts++; puts == 2 {
			if _, err := k.raw.Put(ctx, writer, "", clientv3.WithLease(g.ID)); err != nil {
				t.Error(err)
			}
		}
	})
	k.wantRefused("a reader's TryAcquire beside a reader, a writer queueing after it read the queue", locker.Shared())
	if q := k.entries(); len(q) != 2 || q[1] != writer || puts != 2 {
		t.Fatalf("queue = %q after %d puts, want the reader's entry and the writer's %s", q, puts, writer)
	}
	k.set(&k.put, nil)
	if _, err := k.raw.Delete(ctx, writer); err != nil {
		t.Fatal(err)
	}

	lk, err := open(t, k.url).TryAcquire(ctx, k.key, locker.Shared())
	if err != nil {
		t.Fatalf("a reader's TryAcquire beside a reader: %v", err)
	}
	defer lk.Release(ctx)
	w := k.start()
	k.queued(1, w)
	before := k.entries()
	k.wantRefused("a reader's TryAcquire behind a waiting writer", locker.Shared())
	k.wantQueue(before, "a refused TryAcquire")
}

// TestReaderBehindWaitingWriter: a reader that queues behind a waiting
// writer waits for that writer, though readers hold the key: the writer
// gets the key first, and the reader after it.
func TestReaderBehindWaitingWriter(t *testing.T) {
	k := newKinds(t, "fifo")
	r1 := k.hold(locker.Shared())
	w := k.start()
	k.queued(1, w)
	r2 := k.start(locker.Shared())
	q := k.queued(2, w, r2)
	if q[0].Kind != backend.Exclusive || q[1].Kind != backend.Shared {
		t.Fatalf("Queue = %+v, want the writer, then the reader", q)
	}
	k.waitsFor(holdEntry(q[1]), r2, []string{holdEntry(q[0])}, "the reader", "the waiting writer's entry")
	k.release(r1)
	wl := k.await(w, "the writer, the first reader gone")
	if testenv.Closed(r2.done) {
		t.Fatalf("the second reader's Acquire returned while the writer held the key: %s", r2.outcome())
	}
	if h := k.inspect(); len(h.Holds) != 1 || h.Holds[0].Kind != backend.Exclusive || len(h.Queue) != 1 {
		t.Fatalf("Inspect while the writer holds: Holds %+v, Queue %+v; want the writer holding, the reader waiting", h.Holds, h.Queue)
	}
	k.release(wl)
	rl := k.await(r2, "the second reader, the writer gone")
	if fence(rl) <= fence(wl) {
		t.Errorf("the reader's fence %d is not above the writer's %d", fence(rl), fence(wl))
	}
}

// TestCancelledWriterUnblocksReaders: a writer queued ahead of a reader
// gives up; the reader, which waited for the writer alone, then joins the
// readers that hold the key.
func TestCancelledWriterUnblocksReaders(t *testing.T) {
	k := newKinds(t, "cancelled")
	k.hold(locker.Shared())
	w := k.start()
	k.queued(1, w)
	r2 := k.start(locker.Shared())
	q := k.queued(2, w, r2)
	k.waitsFor(holdEntry(q[1]), r2, []string{holdEntry(q[0])}, "the reader", "the writer's entry")
	w.cancel()
	<-w.done
	if !errors.Is(w.err, context.Canceled) {
		t.Fatalf("the cancelled writer's Acquire = %s, want context.Canceled", w.outcome())
	}
	k.await(r2, "the reader behind the cancelled writer, beside the holding reader")
	if h := k.inspect(); len(h.Holds) != 2 || len(h.Queue) != 0 {
		t.Fatalf("Inspect after the writer left: Holds %+v, Queue %+v; want both readers holding", h.Holds, h.Queue)
	}
}

// TestSemaphore: permits of several weights up to the limit; a waiter that
// does not fit waits for the one holder whose departure it needs, or for
// any of them when no single one is enough; a waiter of weight 2 keeps a
// later waiter of weight 1 out even while one permit is free.
func TestSemaphore(t *testing.T) {
	// A semaphore of 3 with holders of 1 and of held permits, which leave
	// no room for a waiter of weight; either holder's departure makes
	// room, so the waiter waits for both. Its TryAcquire is refused and
	// leaves the queue as it was.
	for _, tc := range []struct {
		name         string
		held, weight int
	}{
		{"at-limit", 2, 1},   // all 3 permits taken
		{"any-holder", 1, 2}, // 2 taken, 1 free
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := newKinds(t, tc.name)
			a := k.hold(locker.Limit(3))
			k.hold(locker.Limit(3), locker.Weight(tc.held))
			before := k.entries()
			k.wantRefused(fmt.Sprintf("TryAcquire of %d of 3 permits, %d taken", tc.weight, 1+tc.held), locker.Limit(3), locker.Weight(tc.weight))
			k.wantQueue(before, "a refused TryAcquire")
			c := k.start(locker.Limit(3), locker.Weight(tc.weight))
			q := k.queued(1, c)
			h := k.inspect()
			if len(h.Holds) != 2 || h.Holds[0].Weight != 1 || h.Holds[1].Weight != tc.held || h.Holds[1].Limit != 3 || q[0].Weight != tc.weight {
				t.Fatalf("Inspect: Holds %+v, Queue %+v; want holders of 1 and %d of 3 permits, a waiter of %d", h.Holds, q, tc.held, tc.weight)
			}
			k.waitsFor(holdEntry(q[0]), c, []string{holdEntry(h.Holds[0]), holdEntry(h.Holds[1])},
				fmt.Sprintf("a waiter for %d of 3 permits, taken by holders of 1 and %d,", tc.weight, tc.held), "both holders")
			k.release(a)
			k.await(c, fmt.Sprintf("%d permits, the first holder gone", tc.weight))
		})
	}
	t.Run("heavy-waiter-first", func(t *testing.T) {
		k := newKinds(t, "heavy-first")
		a := k.hold(locker.Limit(2))
		heavy := k.start(locker.Limit(2), locker.Weight(2))
		k.queued(1, heavy)
		light := k.start(locker.Limit(2))
		q := k.queued(2, heavy, light)
		k.waitsFor(holdEntry(q[1]), light, []string{holdEntry(q[0])}, "the waiter of weight 1", "the waiter of weight 2 ahead of it")
		k.release(a)
		hl := k.await(heavy, "the waiter of weight 2, the holder gone")
		if testenv.Closed(light.done) {
			t.Fatalf("the waiter of weight 1 returned while the one of weight 2 held both permits: %s", light.outcome())
		}
		k.release(hl)
		ll := k.await(light, "the waiter of weight 1")
		if fence(ll) <= fence(hl) || fence(hl) <= fence(a) {
			t.Errorf("fences %d, %d, %d: want them increasing in grant order", fence(a), fence(hl), fence(ll))
		}
	})
}

// TestKindMismatch: a request that disagrees with the key's holders or
// waiters fails with ErrKindMismatch (a *backend.Mismatch saying what the
// key is), by Acquire and by TryAcquire, and leaves no entry behind.
func TestKindMismatch(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name      string
		held      []locker.Option
		asked     []locker.Option
		heldKind  backend.Kind
		heldLimit int
	}{
		{"shared-on-semaphore", []locker.Option{locker.Limit(2)}, []locker.Option{locker.Shared()}, backend.Permit, 2},
		{"exclusive-on-semaphore", []locker.Option{locker.Limit(2)}, nil, backend.Permit, 2},
		{"other-limit", []locker.Option{locker.Limit(2)}, []locker.Option{locker.Limit(3)}, backend.Permit, 2},
		{"permit-on-shared", []locker.Option{locker.Shared()}, []locker.Option{locker.Limit(2)}, backend.Shared, 0},
		{"permit-on-exclusive", nil, []locker.Option{locker.Limit(2)}, backend.Exclusive, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			k := newKinds(t, tc.name)
			k.hold(tc.held...)
			before := k.entries()
			check := func(op string, err error) {
				t.Helper()
				var m *backend.Mismatch
				if !errors.Is(err, locker.ErrKindMismatch) || !errors.As(err, &m) {
					t.Fatalf("%s = %v, want a *backend.Mismatch", op, err)
				}
				if m.HeldKind != tc.heldKind || m.HeldLimit != tc.heldLimit {
					t.Errorf("%s: %+v, want the key's kind %v and limit %d", op, m, tc.heldKind, tc.heldLimit)
				}
				k.wantQueue(before, op)
			}
			l := open(t, k.url)
			_, err := l.TryAcquire(ctx, k.key, tc.asked...)
			check("TryAcquire", err)
			actx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			_, err = l.Acquire(actx, k.key, tc.asked...)
			check("Acquire", err)
		})
	}
}

// TestLaterEntryOfOtherKind: an entry of another kind created after ours,
// between our put and our read of the queue, is behind us and has no say
// in our admission: the exclusive request (which reads its predecessor)
// and the shared one (which reads every entry ahead) are granted, and the
// entry, once it is ahead of a new request, is what refuses it.
func TestLaterEntryOfOtherKind(t *testing.T) {
	for _, kind := range []string{"exclusive", "shared"} {
		t.Run(kind, func(t *testing.T) {
			k := newKinds(t, "later-"+kind)
			ctx := context.Background()
			var opts []locker.Option
			if kind == "shared" {
				opts = []locker.Option{locker.Shared()}
			}
			holder := k.hold() // a writer, so that both wait and read again
			g, err := k.raw.Grant(ctx, 30)
			if err != nil {
				t.Fatal(err)
			}
			defer k.raw.Revoke(ctx, g.ID)
			other := k.qp + fmt.Sprintf("%x", int64(g.ID)) + etcd.ClaimSuffix(backend.Permit, 2, 1)
			var once sync.Once
			k.set(&k.checking, func(string) {
				// Just before the waiter reads the queue (again), a
				// semaphore's entry joins it, behind the waiter.
				once.Do(func() {
					if _, err := k.raw.Put(ctx, other, "", clientv3.WithLease(g.ID)); err != nil {
						t.Error(err)
					}
				})
			})
			p := k.start(opts...)
			var self string
			testenv.WaitFor(t, 30*time.Second, "the request's entry", func() bool {
				q := k.entries()
				if len(q) > 1 {
					self = q[1]
				}
				return self != ""
			})
			k.waitsFor(self, p, []string{k.entries()[0]}, "the "+kind+" request", "the holder")
			k.release(holder)
			lk := k.await(p, "the "+kind+" request, with a semaphore's entry behind it")
			if q := k.entries(); len(q) != 2 || q[0] != self || q[1] != other {
				t.Fatalf("queue = %q, want the %s holder's entry %s and the later one %s", q, kind, self, other)
			}
			actx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			if _, err := open(t, k.url).Acquire(actx, k.key, opts...); !errors.Is(err, locker.ErrKindMismatch) {
				t.Errorf("a new %s request behind the semaphore's entry = %v, want ErrKindMismatch", kind, err)
			}
			lk.Release(ctx)
		})
	}
}

// TestCrashedShareFreed: a shared holder, or a permit holder, whose
// process is cut off frees its share when its lease expires, within the
// TTL and ExpirySlack: the writer, or the permit waiter, then gets in.
func TestCrashedShareFreed(t *testing.T) {
	cases := []struct {
		name   string
		held   []locker.Option
		waiter []locker.Option
	}{
		{"shared", []locker.Option{locker.Shared()}, nil},
		{"permit", []locker.Option{locker.Limit(2)}, []locker.Option{locker.Limit(2), locker.Weight(2)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			k := newKinds(t, "crash-"+tc.name)
			const ttl = 3 * time.Second
			p := testenv.Proxy(t, testenv.Hosts(t, k.url)[0])
			crashed := open(t, "etcd://"+p.Addr())
			lk := k.holdWith(crashed, append([]locker.Option{locker.WithTTL(ttl)}, tc.held...)...)
			alive := k.hold(tc.held...)
			w := k.start(tc.waiter...)
			k.queued(1, w)
			k.release(alive)
			if h := k.inspect(); len(h.Holds) != 1 || h.Holds[0].Fence != fence(lk) {
				t.Fatalf("Holds = %+v, want the holder about to be cut off alone", h.Holds)
			}
			p.Cut()
			defer p.Restore()
			cut := time.Now()
			k.await(w, "the waiter, the holder cut off")
			bound := ttl + crashed.Capabilities().ExpirySlack
			if took := time.Since(cut); took > bound+time.Second {
				t.Errorf("the waiter got the key %v after the holder was cut off, want within %v", took, bound)
			}
		})
	}
}

// TestFencesInGrantOrder: fences increase in the order of the grants,
// across readers and writers; readers granted together have their queue
// order.
func TestFencesInGrantOrder(t *testing.T) {
	k := newKinds(t, "fences")
	ctx := context.Background()
	w1 := k.hold()
	kinds := []string{"reader", "reader", "writer", "reader"}
	ps := make([]*pending, len(kinds))
	for i, kind := range kinds {
		if kind == "reader" {
			ps[i] = k.start(locker.Shared())
		} else {
			ps[i] = k.start()
		}
		k.queued(i+1, ps[:i+1]...)
	}
	k.release(w1)
	r1, r2 := k.await(ps[0], "the first reader"), k.await(ps[1], "the second reader")
	if h := k.inspect(); len(h.Holds) != 2 || h.Holds[0].Fence != fence(r1) || h.Holds[1].Fence != fence(r2) {
		t.Fatalf("Holds = %+v, want the two readers, fences %d and %d", h.Holds, fence(r1), fence(r2))
	}
	r1.Release(ctx)
	r2.Release(ctx)
	w2 := k.await(ps[2], "the second writer")
	if testenv.Closed(ps[3].done) {
		t.Fatalf("the last reader's Acquire returned while the writer queued ahead of it held the key: %s", ps[3].outcome())
	}
	w2.Release(ctx)
	r3 := k.await(ps[3], "the last reader")
	got := []uint64{fence(w1), fence(r1), fence(r2), fence(w2), fence(r3)}
	for i := 1; i < len(got); i++ {
		if got[i] <= got[i-1] {
			t.Fatalf("fences of the writer, 2 readers, the writer, the reader, in grant order: %v, want them increasing", got)
		}
	}
}

// TestInspectKinds: Inspect lists every holder with its kind, fence, TTL,
// entry and lease, and every waiter in queue order; ForceRelease deletes
// every holder's entry and no waiter's.
func TestInspectKinds(t *testing.T) {
	k := newKinds(t, "inspect")
	ctx := context.Background()
	const ttl = 5 * time.Second
	r1 := k.hold(locker.Shared(), locker.WithTTL(ttl))
	r2 := k.hold(locker.Shared(), locker.WithTTL(ttl))
	w := k.start()
	k.queued(1, w)
	r3 := k.start(locker.Shared())
	k.queued(2, w, r3)
	h := k.inspect()
	entries := k.entries()
	if !h.Held || len(h.Holds) != 2 || len(h.Queue) != 2 || h.Waiters != 2 || len(entries) != 4 {
		t.Fatalf("Inspect = %+v, want 2 readers holding, a writer and a reader waiting (entries %q)", h, entries)
	}
	for i, lk := range []locker.Lock{r1, r2} {
		hd := h.Holds[i]
		kv, err := k.raw.Get(ctx, entries[i])
		if err != nil || len(kv.Kvs) != 1 {
			t.Fatal(kv, err)
		}
		if hd.Kind != backend.Shared || !hd.Fenced || hd.Fence != fence(lk) || !hd.TTLKnown || hd.TTL <= 0 || hd.TTL > ttl ||
			hd.Detail["entry"] != entries[i] || hd.Detail["lease"] != fmt.Sprintf("%x", kv.Kvs[0].Lease) || hd.Detail["lease granted"] != "5s" {
			t.Errorf("Holds[%d] = %+v, want reader %d: shared, fence %d, TTL within %v, entry %s", i, hd, i+1, fence(lk), ttl, entries[i])
		}
	}
	if h.Fence != fence(r1) || h.Detail["entry"] != entries[0] {
		t.Errorf("Holder = %+v, want it to describe the first reader", h)
	}
	if q := h.Queue; q[0].Kind != backend.Exclusive || q[1].Kind != backend.Shared || holdEntry(q[0]) != entries[2] || holdEntry(q[1]) != entries[3] || q[0].Fenced {
		t.Errorf("Queue = %+v, want the writer, then the reader", q)
	}
	if !inspectForce(t, k) {
		t.Fatal("ForceRelease of a key held by readers reported nothing released")
	}
	for i, lk := range []locker.Lock{r1, r2} {
		select {
		case <-lk.Lost():
		case <-time.After(15 * time.Second):
			t.Errorf("reader %d's Lost still open after ForceRelease", i+1)
		}
	}
	k.await(w, "the writer, the readers released by force")
	if after := k.entries(); !slices.Equal(after, entries[2:]) {
		t.Errorf("entries after ForceRelease %q, want the waiters' %q", after, entries[2:])
	}
}

func inspectForce(t *testing.T, k *kinds) bool {
	t.Helper()
	ok, err := locker.ForceRelease(context.Background(), k.op, k.key)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// TestEntryNames: an exclusive hold's entry is named by its lease alone,
// as before kinds (so that older Lockers read it as they always did); a
// shared or permit hold's name carries its claim, which names of other
// forms do not.
func TestEntryNames(t *testing.T) {
	k := newKinds(t, "names")
	ctx := context.Background()
	for _, tc := range []struct {
		opts   []locker.Option
		suffix string
	}{
		{nil, ""},
		{[]locker.Option{locker.Shared()}, ".shared"},
		{[]locker.Option{locker.Limit(5), locker.Weight(2)}, ".permit-2-of-5"},
	} {
		key := uniqueKey("kinds/names")
		lk, err := open(t, k.url).Acquire(ctx, key, tc.opts...)
		if err != nil {
			t.Fatal(err)
		}
		qp := etcd.QueuePrefix(etcd.DefaultNamespace, key)
		g, err := k.raw.Get(ctx, qp, clientv3.WithPrefix())
		if err != nil || len(g.Kvs) != 1 {
			t.Fatal(g, err)
		}
		if got, want := string(g.Kvs[0].Key), qp+fmt.Sprintf("%x", g.Kvs[0].Lease)+tc.suffix; got != want {
			t.Errorf("entry of a hold with %d options = %s, want %s", len(tc.opts), got, want)
		}
		lk.Release(ctx)
	}
	qp := "ns/k/"
	for name, want := range map[string]backend.Claim{
		"694d8c1e2b1a3f04":                {},
		"694d8c1e2b1a3f04-3":              {},
		"694d8c1e2b1a3f04-3.shared":       {Kind: backend.Shared},
		"694d8c1e2b1a3f04.permit-1-of-1":  {Kind: backend.Permit, Limit: 1, Weight: 1},
		"694d8c1e2b1a3f04.permit-2-of-10": {Kind: backend.Permit, Limit: 10, Weight: 2},
		"694d8c1e2b1a3f04.permit-02-of-5": {}, // not a form this package writes
		"694d8c1e2b1a3f04.permit-6-of-5":  {},
		"694d8c1e2b1a3f04.permit-0-of-5":  {},
		"694d8c1e2b1a3f04.permit-1-of-":   {},
		"694d8c1e2b1a3f04.sharedx":        {},
		"694d8c1e2b1a3f04.reader":         {},
	} {
		if got := etcd.ClaimOf(qp, qp+name); got != want {
			t.Errorf("claim of %s = %+v, want %+v", name, got, want)
		}
	}
}
