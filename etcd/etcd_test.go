package etcd_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.etcd.io/etcd/client/v3/namespace"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"google.golang.org/grpc/connectivity"

	"github.com/distlock/locker"
	"github.com/distlock/locker/conformance"
	"github.com/distlock/locker/etcd"
	"github.com/distlock/locker/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestConformance runs the suite against one etcd member, and against the
// three-member cluster, at once (the cases spend their time waiting for
// TTLs). Every client reaches the members through proxies of its own, so
// the crash cases cut a holder off without touching the servers.
func TestConformance(t *testing.T) {
	deployments := []struct{ name, url string }{
		{"member", testenv.Get(t, testenv.EtcdURL)},
		{"cluster", testenv.Get(t, testenv.EtcdClusterURL)},
	}
	var wg sync.WaitGroup
	for _, d := range deployments {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.Run(d.name, func(t *testing.T) { conformance.Run(t, conformance.URLHarness(d.url)) })
		}()
	}
	wg.Wait()
}

// recorder records the events under a prefix from the moment watchPrefix
// starts it.
type recorder struct {
	mu     sync.Mutex
	events []*clientv3.Event
	cancel context.CancelFunc
	done   chan struct{}
}

func watchPrefix(t *testing.T, c *clientv3.Client, prefix string) *recorder {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &recorder{cancel: cancel, done: make(chan struct{})}
	wch := c.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	if wr := <-wch; !wr.Created {
		t.Fatalf("watch not created: %v", wr.Err())
	}
	go func() {
		defer close(r.done)
		for wr := range wch {
			r.mu.Lock()
			r.events = append(r.events, wr.Events...)
			r.mu.Unlock()
		}
	}()
	t.Cleanup(r.stop)
	return r
}

func (r *recorder) stop() {
	r.cancel()
	<-r.done
}

// count returns how many events of type typ were seen.
func (r *recorder) count(typ mvccpb.Event_EventType) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, ev := range r.events {
		if ev.Type == typ {
			n++
		}
	}
	return n
}

// TestLostReplyCleanup: an acquire whose request is applied but whose reply
// never arrives (the caller's context ends while the request is on the
// server) must delete what it created before it reports the failure,
// whatever the kind of hold (each puts its entry by a transaction of its
// own form).
func TestLostReplyCleanup(t *testing.T) {
	addr := testenv.Hosts(t, testenv.Get(t, testenv.EtcdURL))[0]
	raw := rawClient(t, addr)
	other := open(t, "etcd://"+addr)
	kinds := []struct {
		name string
		opts []locker.Option
	}{{"exclusive", nil}, {"shared", []locker.Option{locker.Shared()}}, {"permit", []locker.Option{locker.Limit(2)}}}
	for _, kind := range kinds {
		modes := []string{"try-acquire", "acquire"}
		if kind.opts != nil {
			// A TryAcquire beside holders puts its entry by a second,
			// conditional transaction, after a read.
			modes = append(modes, "try-acquire-busy")
		}
		for _, mode := range modes {
			t.Run(kind.name+"/"+mode, func(t *testing.T) { testLostReplyCleanup(t, addr, raw, other, mode, kind.opts) })
		}
	}
}

// testLostReplyCleanup is one case of TestLostReplyCleanup: mode's call
// (Acquire or TryAcquire) with opts on a free key.
func testLostReplyCleanup(t *testing.T, addr string, raw *clientv3.Client, other locker.Locker, mode string, opts []locker.Option) {
	p := testenv.Proxy(t, addr)
	slow := open(t, "etcd://"+p.Addr())
	ctx := context.Background()
	// Take the shared lease first, so that the attempt below is the
	// transaction alone.
	warm, err := slow.Acquire(ctx, uniqueKey("warm-up"))
	if err != nil {
		t.Fatal(err)
	}
	warm.Release(ctx)

	// The proxy holds the server's replies back; once the put is
	// seen applied, the caller gives up. The call may return only
	// after its cleanup, whose reply is held too: release the
	// replies once the cleanup's delete is seen.
	key := uniqueKey("lost-reply")
	prefix := etcd.QueuePrefix(etcd.DefaultNamespace, key)
	var busy locker.Lock
	if mode == "try-acquire-busy" {
		// Another client holds a share; the replies are held back from
		// the second put on (the first reads the queue).
		if busy, err = other.Acquire(ctx, key, opts...); err != nil {
			t.Fatal(err)
		}
		var puts atomic.Int32
		etcd.SetHooks(t, etcd.Hooks{Put: func(entry string) {
			if strings.HasPrefix(entry, prefix) && puts.Add(1) == 2 {
				p.HoldReplies(true)
			}
		}})
	} else {
		p.HoldReplies(true)
	}
	rec := watchPrefix(t, raw, prefix)
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		var lk locker.Lock
		var err error
		if mode == "acquire" {
			lk, err = slow.Acquire(actx, key, opts...)
		} else {
			lk, err = slow.TryAcquire(actx, key, opts...)
		}
		if err == nil {
			lk.Release(ctx)
		}
		errc <- err
	}()
	testenv.WaitFor(t, 10*time.Second, "the server applies the put", func() bool {
		return rec.count(mvccpb.PUT) > 0
	})
	cancel()
	testenv.WaitFor(t, 10*time.Second, "the server applies the cleanup's delete", func() bool {
		return rec.count(mvccpb.DELETE) > 0
	})
	p.HoldReplies(false)
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("%s cancelled while its reply was held: %v, want a cancellation error", mode, err)
	}
	if busy != nil {
		if q := queue(t, raw, prefix); len(q) != 1 {
			t.Fatalf("after the failed %s the queue is %q, want the other holder's entry alone", mode, q)
		}
		if err := busy.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if q := queue(t, raw, prefix); len(q) != 0 {
		t.Fatalf("after the failed %s its entry is still queued: %q", mode, q)
	}
	lk, err := other.TryAcquire(ctx, key)
	if err != nil {
		t.Fatalf("the lost acquire left the key taken: %v", err)
	}
	lk.Release(ctx)
}

// TestRetriedReleaseSparesNewerHolder is the scenario of etcd issue 22082:
// a release whose reply was lost is retried after another client took the
// lock. The retry must not delete the new holder's entry.
func TestRetriedReleaseSparesNewerHolder(t *testing.T) {
	addr := testenv.Hosts(t, testenv.Get(t, testenv.EtcdURL))[0]
	raw := rawClient(t, addr)
	ctx := context.Background()

	t.Run("lost-reply", func(t *testing.T) {
		p := testenv.Proxy(t, addr)
		a := open(t, "etcd://"+p.Addr())
		b, c := open(t, "etcd://"+addr), open(t, "etcd://"+addr)
		key := uniqueKey("retried-release")
		prefix := etcd.QueuePrefix(etcd.DefaultNamespace, key)
		lkA, err := a.Acquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		// A's delete is applied and its reply held back; A gives up
		// waiting for it.
		rec := watchPrefix(t, raw, prefix)
		p.HoldReplies(true)
		rctx, cancel := context.WithCancel(ctx)
		defer cancel()
		errc := make(chan error, 1)
		go func() { errc <- lkA.Release(rctx) }()
		testenv.WaitFor(t, 10*time.Second, "the server applies A's delete", func() bool {
			return rec.count(mvccpb.DELETE) > 0
		})
		cancel()
		err = <-errc
		p.HoldReplies(false)
		if err == nil {
			t.Fatal("A's Release succeeded without its reply")
		}
		if q := queue(t, raw, prefix); len(q) != 0 {
			t.Fatalf("queue %q after A's delete was applied, want it empty", q)
		}
		lkB, err := b.TryAcquire(ctx, key)
		if err != nil {
			t.Fatalf("B after A's release was applied: %v", err)
		}
		if err := lkA.Release(ctx); !errors.Is(err, locker.ErrNotHeld) {
			t.Fatalf("A's retried Release = %v, want ErrNotHeld", err)
		}
		if _, err := c.TryAcquire(ctx, key); !errors.Is(err, locker.ErrNotAcquired) {
			t.Fatalf("after A's retried Release, C's TryAcquire = %v, want ErrNotAcquired (B holds)", err)
		}
		if testenv.Closed(lkB.Lost()) {
			t.Fatal("B's Lost closed after A's retried Release")
		}
		if err := lkB.Release(ctx); err != nil {
			t.Fatalf("B's Release: %v", err)
		}
	})

	// The same with the name reused: with etcd's own Mutex a holder's key
	// is named after its lease, so a newer holder can own the very same
	// key. Release compares the create revision, not the name.
	t.Run("same-name", func(t *testing.T) {
		a := open(t, "etcd://"+addr)
		key := uniqueKey("same-name")
		lk, err := a.Acquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		q := queue(t, raw, etcd.QueuePrefix(etcd.DefaultNamespace, key))
		if len(q) != 1 {
			t.Fatalf("queue = %q, want A's entry alone", q)
		}
		if _, err := raw.Delete(ctx, q[0]); err != nil {
			t.Fatal(err)
		}
		if _, err := raw.Put(ctx, q[0], "newer holder"); err != nil {
			t.Fatal(err)
		}
		defer raw.Delete(ctx, q[0])
		if err := lk.Refresh(ctx, time.Minute); !errors.Is(err, locker.ErrNotHeld) {
			t.Errorf("Refresh of a lock whose entry was recreated by someone else = %v, want ErrNotHeld", err)
		}
		if err := lk.Release(ctx); !errors.Is(err, locker.ErrNotHeld) {
			t.Errorf("Release = %v, want ErrNotHeld", err)
		}
		g, err := raw.Get(ctx, q[0])
		if err != nil || len(g.Kvs) != 1 || string(g.Kvs[0].Value) != "newer holder" || g.Kvs[0].Lease != 0 {
			t.Fatalf("the newer holder's key after A's Release: %v %v, want it untouched", g, err)
		}
	})
}

// TestNestedNames: locks on a, a/b and a%2Fb are independent, and their
// queues hold only their own entries. etcd's own Mutex, for comparison,
// lets a held a/b block a, since one queue prefix contains the other.
func TestNestedNames(t *testing.T) {
	addr := testenv.Hosts(t, testenv.Get(t, testenv.EtcdURL))[0]
	raw := rawClient(t, addr)
	ctx := context.Background()
	base := uniqueKey("nested")
	l1, l2 := open(t, "etcd://"+addr), open(t, "etcd://"+addr)
	names := []string{base + "/a/b", base + "/a", base + "/a%2Fb", base + "/a/"}
	var held []locker.Lock
	for i, n := range names {
		l := l1
		if i%2 == 1 {
			l = l2
		}
		lk, err := l.TryAcquire(ctx, n)
		if err != nil {
			t.Fatalf("TryAcquire(%q) while holding %q: %v", n, names[:i], err)
		}
		held = append(held, lk)
	}
	for _, n := range names {
		if q := queue(t, raw, etcd.QueuePrefix(etcd.DefaultNamespace, n)); len(q) != 1 {
			t.Errorf("queue of %q = %q, want its own entry alone", n, q)
		}
	}
	for _, lk := range held {
		lk.Release(ctx)
	}

	// The layout this avoids: concurrency.Mutex on "<p>/a" sees the holder
	// of "<p>/a/b" as its own holder.
	s1, err := concurrency.NewSession(raw)
	if err != nil {
		t.Fatal(err)
	}
	defer s1.Close()
	s2, err := concurrency.NewSession(raw)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	mb := concurrency.NewMutex(s1, "mutex/"+base+"/a/b")
	if err := mb.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	defer mb.Unlock(ctx)
	if err := concurrency.NewMutex(s2, "mutex/"+base+"/a").TryLock(ctx); !errors.Is(err, concurrency.ErrLocked) {
		t.Errorf("concurrency.Mutex on a while a/b is held: TryLock = %v, want ErrLocked: the layout this test guards against no longer interferes, so the comparison shows nothing", err)
	}
}

// TestNamespacedClient: over a client whose KV, Watcher and Lease are
// namespaced (clientv3/namespace), the Locker's entries stay inside the
// namespace, and two such Lockers exclude each other and hand the lock
// over (the waiter's watch sees the release the holder's request made).
func TestNamespacedClient(t *testing.T) {
	addr := testenv.Hosts(t, testenv.Get(t, testenv.EtcdURL))[0]
	raw := rawClient(t, addr)
	ctx := context.Background()
	ns := uniqueKey("namespaced") + "/"
	newLocker := func() locker.Locker {
		c := rawClient(t, addr)
		c.KV = namespace.NewKV(c.KV, ns)
		c.Watcher = namespace.NewWatcher(c.Watcher, ns)
		c.Lease = namespace.NewLease(c.Lease, ns)
		l, err := etcd.New(c, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	}
	l1, l2 := newLocker(), newLocker()
	const key = "k"
	inside, outside := ns+etcd.QueuePrefix(etcd.DefaultNamespace, key), etcd.QueuePrefix(etcd.DefaultNamespace, key)

	lk1, err := l1.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if q := queue(t, raw, inside); len(q) != 1 {
		t.Fatalf("queue inside the namespace = %q, want the holder's entry", q)
	}
	if q := queue(t, raw, outside); len(q) != 0 {
		t.Fatalf("entries outside the namespace: %q", q)
	}
	if _, err := l2.TryAcquire(ctx, key); !errors.Is(err, locker.ErrNotAcquired) {
		t.Fatalf("TryAcquire while held: %v, want ErrNotAcquired", err)
	}
	got := make(chan error, 1)
	go func() {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		lk2, err := l2.Acquire(actx, key)
		if err == nil {
			err = lk2.Release(ctx)
		}
		got <- err
	}()
	testenv.WaitFor(t, 5*time.Second, "the waiter's entry", func() bool { return len(queue(t, raw, inside)) == 2 })
	if err := lk1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter after the release: %v", err)
	}
	if q := queue(t, raw, inside); len(q) != 0 {
		t.Errorf("entries left after both released: %q", q)
	}
}

// TestCancelledAcquireRemovesEntry: a waiter whose context ends removes its
// queue entry before Acquire returns.
func TestCancelledAcquireRemovesEntry(t *testing.T) {
	url := testenv.Get(t, testenv.EtcdURL)
	raw := rawClient(t, testenv.Hosts(t, url)...)
	ctx := context.Background()
	a, b := open(t, url), open(t, url)
	key := uniqueKey("cancelled")
	prefix := etcd.QueuePrefix(etcd.DefaultNamespace, key)
	lk, err := a.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Release(ctx)
	wctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := b.Acquire(wctx, key)
		errc <- err
	}()
	testenv.WaitFor(t, 5*time.Second, "the waiter queues", func() bool { return len(queue(t, raw, prefix)) == 2 })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Acquire = %v, want context.Canceled", err)
	}
	if q := queue(t, raw, prefix); len(q) != 1 {
		t.Fatalf("queue after the waiter's Acquire returned = %q, want the holder's entry alone", q)
	}
}

// TestWaiterWatchesPredecessor: each waiter watches only the entry just
// before its own, so a release wakes one waiter, not all of them, and the
// lock goes round in queue order. A waiter that leaves wakes only the one
// behind it, which then watches the entry before the one that left.
func TestWaiterWatchesPredecessor(t *testing.T) {
	url := testenv.Get(t, testenv.EtcdURL)
	raw := rawClient(t, testenv.Hosts(t, url)...)
	ctx := context.Background()
	key := uniqueKey("predecessor")
	prefix := etcd.QueuePrefix(etcd.DefaultNamespace, key)

	var mu sync.Mutex
	watched := map[string]string{} // waiter entry -> entry it watches now
	events := map[string]int{}     // waiter entry -> watches and checks so far
	defer etcd.SetHooks(t, etcd.Hooks{
		Watching: func(self, pred string) {
			if !strings.HasPrefix(self, prefix) {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			events[self]++
			watched[self] = pred
		},
		Checking: func(self string) {
			if !strings.HasPrefix(self, prefix) {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			events[self]++
		},
	})()
	snapshot := func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		m := map[string]int{}
		for k, v := range events {
			m[k] = v
		}
		return m
	}

	holder := open(t, url)
	lk, err := holder.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	const n = 4
	type result struct {
		i  int
		lk locker.Lock
	}
	got := make(chan result, n)
	cancels := make([]context.CancelFunc, n)
	for i := range n {
		l := open(t, url)
		wctx, cancel := context.WithCancel(ctx)
		cancels[i] = cancel
		defer cancel()
		go func() {
			lk, err := l.Acquire(wctx, key)
			if err != nil {
				got <- result{i, nil}
				return
			}
			got <- result{i, lk}
		}()
		testenv.WaitFor(t, 5*time.Second, "waiter queues and watches", func() bool {
			q := queue(t, raw, prefix)
			if len(q) != i+2 {
				return false
			}
			mu.Lock()
			defer mu.Unlock()
			_, ok := watched[q[i+1]]
			return ok
		})
	}
	q := queue(t, raw, prefix) // holder, w0, w1, w2, w3
	for i := 1; i <= n; i++ {
		mu.Lock()
		w := watched[q[i]]
		mu.Unlock()
		if w != q[i-1] {
			t.Fatalf("waiter %d watches %q, want its predecessor %q", i-1, w, q[i-1])
		}
	}

	// Waiter 1 leaves: only waiter 2 wakes, and it then watches waiter 0.
	before := snapshot()
	cancels[1]()
	if r := <-got; r.i != 1 || r.lk != nil {
		t.Fatalf("after cancelling waiter 1, waiter %d returned (lock %v)", r.i, r.lk != nil)
	}
	testenv.WaitFor(t, 5*time.Second, "waiter 2 watches waiter 0", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return watched[q[3]] == q[1]
	})
	time.Sleep(100 * time.Millisecond) // time for a wrongly woken waiter to show
	after := snapshot()
	if after[q[3]] == before[q[3]] {
		t.Errorf("waiter 2 did not look again when waiter 1, its predecessor, left")
	}
	for _, w := range []int{0, 3} {
		if e := q[w+1]; after[e] != before[e] {
			t.Errorf("waiter %d woke when waiter 1 left (%d events, before %d): it watches more than its predecessor", w, after[e], before[e])
		}
	}

	// Releases hand the lock down the queue in order, each waking one.
	order := []int{0, 2, 3}
	prev := lk
	for j, want := range order {
		before := snapshot()
		if err := prev.Release(ctx); err != nil {
			t.Fatal(err)
		}
		var r result
		select {
		case r = <-got:
		case <-time.After(5 * time.Second):
			t.Fatalf("no waiter got the lock within 5s of a release")
		}
		if r.i != want || r.lk == nil {
			t.Fatalf("after release %d waiter %d got the lock, want waiter %d", j, r.i, want)
		}
		time.Sleep(50 * time.Millisecond)
		after := snapshot()
		for _, later := range order[j+1:] {
			e := q[later+1]
			if after[e] != before[e] {
				t.Errorf("release %d woke waiter %d too (%d events, before %d)", j, later, after[e], before[e])
			}
		}
		prev = r.lk
	}
	prev.Release(ctx)
}

// TestSharedLeases: locks with one TTL share one lease per Locker; another
// TTL gets another lease; Refresh to another TTL moves the entry to that
// TTL's lease and keeps its create revision, so the fence and the queue
// position stay. A TTL that is not whole seconds is rounded up, and Lock.TTL
// reports the TTL in force.
func TestSharedLeases(t *testing.T) {
	url := testenv.Get(t, testenv.EtcdURL)
	raw := rawClient(t, testenv.Hosts(t, url)...)
	ctx := context.Background()
	l := open(t, url)
	base := uniqueKey("leases")
	entry := func(key string) *mvccpb.KeyValue {
		t.Helper()
		g, err := raw.Get(ctx, etcd.QueuePrefix(etcd.DefaultNamespace, key), clientv3.WithPrefix())
		if err != nil || len(g.Kvs) != 1 {
			t.Fatalf("queue of %q: %v %v, want one entry", key, g, err)
		}
		return g.Kvs[0]
	}
	leaseTTL := func(id int64) int64 {
		t.Helper()
		r, err := raw.TimeToLive(ctx, clientv3.LeaseID(id))
		if err != nil {
			t.Fatal(err)
		}
		return r.GrantedTTL
	}
	a, err := l.Acquire(ctx, base+"/a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := l.Acquire(ctx, base+"/b")
	if err != nil {
		t.Fatal(err)
	}
	c, err := l.Acquire(ctx, base+"/c", locker.WithTTL(2500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ea, eb, ec := entry(base+"/a"), entry(base+"/b"), entry(base+"/c")
	if ea.Lease == 0 || ea.Lease != eb.Lease {
		t.Errorf("two locks with the default TTL are on leases %x and %x, want one shared lease", ea.Lease, eb.Lease)
	}
	if ec.Lease == ea.Lease {
		t.Errorf("a 2.5s lock shares the default TTL's lease %x", ea.Lease)
	}
	if got := leaseTTL(ea.Lease); got != int64(locker.DefaultTTL/time.Second) {
		t.Errorf("default lease TTL = %ds, want %v", got, locker.DefaultTTL)
	}
	if got := leaseTTL(ec.Lease); got != 3 {
		t.Errorf("lease of a 2.5s lock has TTL %ds, want 3s (rounded up)", got)
	}
	if d, err := c.TTL(ctx); err != nil || d <= 2500*time.Millisecond || d > 3*time.Second {
		t.Errorf("TTL of a 2.5s lock = %v, %v; want the 3s in force", d, err)
	}
	fence, _ := c.Fence()
	if err := c.Refresh(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	moved := entry(base + "/c")
	if moved.CreateRevision != ec.CreateRevision || moved.Lease == ec.Lease || leaseTTL(moved.Lease) != 60 {
		t.Errorf("after Refresh(1m): create revision %d (was %d), lease %x with %ds (was %x); want the same revision on a 60s lease",
			moved.CreateRevision, ec.CreateRevision, moved.Lease, leaseTTL(moved.Lease), ec.Lease)
	}
	if f, _ := c.Fence(); f != fence || f != uint64(ec.CreateRevision) {
		t.Errorf("fence = %d, want the entry's create revision %d", f, ec.CreateRevision)
	}
	for _, lk := range []locker.Lock{a, b, c} {
		if err := lk.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFailedReleaseExpires: a release that never reached the server leaves
// the entry on a lease the Locker keeps alive; the entry must still go when
// the lock's TTL runs out, and the lease with other locks on it must stay.
func TestFailedReleaseExpires(t *testing.T) {
	addr := testenv.Hosts(t, testenv.Get(t, testenv.EtcdURL))[0]
	raw := rawClient(t, addr)
	p := testenv.Proxy(t, addr)
	l := open(t, "etcd://"+p.Addr())
	ctx := context.Background()
	const ttl = 3 * time.Second
	key := uniqueKey("failed-release")
	prefix := etcd.QueuePrefix(etcd.DefaultNamespace, key)
	lk, err := l.Acquire(ctx, key, locker.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	acquired := time.Now()
	g, err := raw.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil || len(g.Kvs) != 1 {
		t.Fatal(g, err)
	}
	lease := clientv3.LeaseID(g.Kvs[0].Lease)
	// Another lock on the same lease keeps it in use.
	other, err := l.Acquire(ctx, uniqueKey("failed-release-other"), locker.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}

	p.Cut()
	rctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	err = lk.Release(rctx)
	cancel()
	p.Restore()
	if err == nil || errors.Is(err, locker.ErrNotHeld) {
		t.Fatalf("Release through a cut connection = %v, want a transport or deadline error", err)
	}
	if q := queue(t, raw, prefix); len(q) != 1 {
		t.Fatalf("queue after the failed Release = %q, want the entry still there", q)
	}
	bound := ttl + l.Capabilities().ExpirySlack
	testenv.WaitFor(t, bound+2*time.Second, "the entry deleted at the lock's TTL", func() bool {
		return len(queue(t, raw, prefix)) == 0
	})
	if took := time.Since(acquired); took > bound+time.Second {
		t.Errorf("the entry went %v after the acquire, want within %v of a %v TTL", took, bound, ttl)
	}
	ttlResp, err := raw.TimeToLive(ctx, lease)
	if err != nil || ttlResp.TTL <= 0 {
		t.Fatalf("the lease with another lock on it: %v %v, want it alive (the entry was deleted by the Locker, not by a lapse)", ttlResp, err)
	}
	if err := other.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := lk.Release(ctx); !errors.Is(err, locker.ErrNotHeld) {
		t.Fatalf("Release after expiry = %v, want ErrNotHeld", err)
	}
}

// TestLostLeaseDeletesEntryElsewhere: a refresh that moves a lock to
// another lease (another TTL) is applied but its reply is lost, so the
// entry may be on either lease. When the old lease then dies, the lock is
// lost, and its entry, which is on the new lease, kept alive for another
// lock, must be deleted: left there, it would block the key for as long
// as that lease lives.
func TestLostLeaseDeletesEntryElsewhere(t *testing.T) {
	addr := testenv.Hosts(t, testenv.Get(t, testenv.EtcdURL))[0]
	raw := rawClient(t, addr)
	p := testenv.Proxy(t, addr)
	l := open(t, "etcd://"+p.Addr())
	ctx := context.Background()
	key := uniqueKey("lost-elsewhere")
	prefix := etcd.QueuePrefix(etcd.DefaultNamespace, key)
	// The 2s lease, kept in use by another lock.
	other, err := l.Acquire(ctx, uniqueKey("lost-elsewhere-other"), locker.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release(ctx)
	lk, err := l.Acquire(ctx, key, locker.WithTTL(5*time.Second), locker.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	entryLease := func() clientv3.LeaseID {
		g, err := raw.Get(ctx, prefix, clientv3.WithPrefix())
		if err != nil || len(g.Kvs) != 1 {
			t.Fatalf("queue of %s: %v %v, want one entry", key, g, err)
		}
		return clientv3.LeaseID(g.Kvs[0].Lease)
	}
	old := entryLease()

	// The move to the 2s lease reaches the server; its reply does not
	// come back in time.
	p.HoldReplies(true)
	rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err = lk.Refresh(rctx, 2*time.Second)
	cancel()
	p.HoldReplies(false)
	if err == nil || errors.Is(err, locker.ErrNotHeld) {
		t.Fatalf("Refresh whose reply was held = %v, want its outcome unknown", err)
	}
	testenv.WaitFor(t, 5*time.Second, "the move applied", func() bool { return entryLease() != old })

	if _, err := raw.Revoke(ctx, old); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lk.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("Lost still open 10s after the lease the lock was on was revoked")
	}
	// The 2s lease is kept alive all along: only the Locker's delete
	// frees the key.
	testenv.WaitFor(t, 10*time.Second, "the entry on the other lease deleted", func() bool {
		return len(queue(t, raw, prefix)) == 0
	})
	if err := lk.Release(ctx); !errors.Is(err, locker.ErrNotHeld) {
		t.Fatalf("Release of the lost lock = %v, want ErrNotHeld", err)
	}
	lk2, err := l.TryAcquire(ctx, key)
	if err != nil {
		t.Fatalf("TryAcquire after the lost lock's entry was deleted: %v", err)
	}
	lk2.Release(ctx)
}

// TestLostWhenLeaseRevoked: when the server drops the lease under a held
// lock, Lost closes at the next keepalive, well before the TTL.
func TestLostWhenLeaseRevoked(t *testing.T) {
	url := testenv.Get(t, testenv.EtcdURL)
	raw := rawClient(t, testenv.Hosts(t, url)...)
	ctx := context.Background()
	l := open(t, url)
	key := uniqueKey("revoked")
	const ttl = 6 * time.Second
	lk, err := l.Acquire(ctx, key, locker.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	g, err := raw.Get(ctx, etcd.QueuePrefix(etcd.DefaultNamespace, key), clientv3.WithPrefix())
	if err != nil || len(g.Kvs) != 1 {
		t.Fatal(g, err)
	}
	if _, err := raw.Revoke(ctx, clientv3.LeaseID(g.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	revoked := time.Now()
	select {
	case <-lk.Lost():
	case <-time.After(ttl / 2):
		t.Fatalf("Lost still open %v after the lease was revoked (keepalives run every %v)", time.Since(revoked), etcd.KeepAliveInterval(ttl))
	}
	if err := lk.Release(ctx); !errors.Is(err, locker.ErrNotHeld) {
		t.Fatalf("Release after the lease was revoked = %v, want ErrNotHeld", err)
	}
	lk2, err := l.TryAcquire(ctx, key)
	if err != nil {
		t.Fatalf("TryAcquire after the lease was revoked: %v", err)
	}
	lk2.Release(ctx)
}

// TestUnreachableAcquireEnds: an Acquire whose etcd became unreachable
// waits no longer than its lease can live, also with a context that never
// ends: the lease's end cuts the request short, and a new lease cannot be
// granted either.
func TestUnreachableAcquireEnds(t *testing.T) {
	addr := testenv.Hosts(t, testenv.Get(t, testenv.EtcdURL))[0]
	p := testenv.Proxy(t, addr)
	c := rawClient(t, p.Addr())
	l, err := etcd.New(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ttl := l.Capabilities().MinTTL
	type ctxKey struct{}
	for name, ctx := range map[string]context.Context{
		"background": context.Background(),
		"with value": context.WithValue(context.Background(), ctxKey{}, 1),
	} {
		base := uniqueKey("unreachable")
		p.Restore()
		c.ActiveConnection().ResetConnectBackoff()
		held, err := l.Acquire(ctx, base+"/held", locker.WithTTL(ttl)) // a live lease for the TTL
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		p.Cut()
		// Once the client has seen its connection go, requests wait for a
		// new one (clientv3 waits for ready): only a context ends them.
		testenv.WaitFor(t, 5*time.Second, "the client to see the cut", func() bool {
			return c.ActiveConnection().GetState() != connectivity.Ready
		})
		start := time.Now()
		done := make(chan error, 1)
		go func() {
			lk, err := l.Acquire(ctx, base+"/other", locker.WithTTL(ttl))
			if err == nil {
				err = errors.New("acquired through a cut connection")
				lk.Release(context.Background())
			}
			done <- err
		}()
		// The lease lapses here within its TTL (plus the drift allowance),
		// and the grant of a new one gives up after the TTL.
		limit := 2*ttl + 5*time.Second
		select {
		case err := <-done:
			t.Logf("%s: Acquire ended after %v: %v", name, time.Since(start).Round(time.Millisecond), err)
		case <-time.After(limit):
			p.Restore()
			<-done
			t.Fatalf("%s: Acquire through a cut connection still waiting after %v, with a %v lease", name, limit, ttl)
		}
		held.Release(context.Background())
	}
}

// TestNewWithOwnClient: New over the caller's client, which the Locker does
// not close; its MinTTL is the server's minimum lease TTL.
func TestNewWithOwnClient(t *testing.T) {
	url := testenv.Get(t, testenv.EtcdURL)
	c := rawClient(t, testenv.Hosts(t, url)...)
	ctx := context.Background()
	l, err := etcd.New(c, &etcd.Options{Namespace: "own-client/"})
	if err != nil {
		t.Fatal(err)
	}
	g, err := c.Grant(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	c.Revoke(ctx, g.ID)
	if want := time.Duration(g.TTL) * time.Second; l.Capabilities().MinTTL != want {
		t.Errorf("MinTTL = %v, want the server's minimum lease TTL %v", l.Capabilities().MinTTL, want)
	}
	key := uniqueKey("own")
	lk, err := l.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if q := queue(t, c, etcd.QueuePrefix("own-client", key)); len(q) != 1 {
		t.Fatalf("entry not under the namespace: %q", q)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if !testenv.Closed(lk.Lost()) {
		t.Error("Close left the lock open")
	}
	if q := queue(t, c, etcd.QueuePrefix("own-client", key)); len(q) != 0 {
		t.Errorf("Close left the entry: %q", q)
	}
	if _, err := c.Get(ctx, "x"); err != nil {
		t.Fatalf("the Locker closed the caller's client: %v", err)
	}
}

func TestOpenErrors(t *testing.T) {
	testenv.WantOpenErrors(t, [][2]string{
		{"etcd://", "no host"},
		{"etcd://127.0.0.1:2379,,127.0.0.2", "empty host"},
		{"etcd://127.0.0.1:2379?colour=red", `"colour"`},
		{"etcd://127.0.0.1:2379?dial_timeout=soon", "dial_timeout"},
		{"etcd://127.0.0.1:2379?dial_timeout=-1s", "dial_timeout"},
		{"etcd://127.0.0.1:2379?cacert=/x.pem", "etcds://"},
		{"etcds://127.0.0.1:2379?cert=/x.pem", "cert and key go together"},
		{"etcds://127.0.0.1:2379?cacert=/does/not/exist.pem", "cacert"},
		{"etcd://127.0.0.1:2379?ttl=0s", "ttl"},
	})
}

// TestServerDown: opening a Locker where no etcd listens fails within its
// dial timeout with an error that says so.
func TestServerDown(t *testing.T) {
	testenv.Get(t, testenv.EtcdURL) // the same servers-required policy
	addr := "127.0.0.1:" + freePort(t)
	start := time.Now()
	_, err := locker.Open(context.Background(), "etcd://"+addr+"?dial_timeout=1s")
	if err == nil || !strings.Contains(err.Error(), "unreachable") || !strings.Contains(err.Error(), addr) {
		t.Fatalf("Open on a closed port = %v, want an unreachable error naming %s", err, addr)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("Open took %v with dial_timeout=1s", el)
	}
}

// TestTLSAgainstPlainServer: an etcds:// URL naming a server without TLS
// fails at Open saying so, not with "unreachable" once the dial timeout
// has passed.
func TestTLSAgainstPlainServer(t *testing.T) {
	addr := testenv.Hosts(t, testenv.Get(t, testenv.EtcdURL))[0]
	_, err := locker.Open(context.Background(), "etcds://"+addr+"?dial_timeout=1m")
	if err == nil || !strings.Contains(err.Error(), "plain text") || !strings.Contains(err.Error(), addr) {
		t.Fatalf("Open(etcds://) of a plain-text server = %v, want an error naming %s as plain text", err, addr)
	}
}

// TestAuth runs a private etcd with authentication on: a user whose role
// may read and write one prefix uses it as the namespace; a wrong password
// and a namespace outside the user's permissions fail with clear errors
// and leave nothing behind.
func TestAuth(t *testing.T) {
	s := startServer(t, "http", plainReady)
	ctx := context.Background()
	root := rawClient(t, s.addr)
	steps := []func() error{
		func() error { _, err := root.UserAdd(ctx, "root", "rootpw"); return err },
		func() error { _, err := root.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := root.RoleAdd(ctx, "lockers"); return err },
		func() error {
			_, err := root.RoleGrantPermission(ctx, "lockers", "app/", clientv3.GetPrefixRangeEnd("app/"), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := root.UserAdd(ctx, "app", "s3cret"); return err },
		func() error { _, err := root.UserGrantRole(ctx, "app", "lockers"); return err },
		func() error { _, err := root.AuthEnable(ctx); return err },
	}
	for i, f := range steps {
		if err := f(); err != nil {
			t.Fatalf("auth setup step %d: %v", i, err)
		}
	}

	a := open(t, "etcd://app:s3cret@"+s.addr+"/app")
	b := open(t, "etcd://app:s3cret@"+s.addr+"/app")
	key := "orders/42"
	lk, err := a.Acquire(ctx, key, locker.WithTTL(3*time.Second))
	if err != nil {
		t.Fatalf("Acquire as a user allowed on the namespace: %v", err)
	}
	if _, err := b.TryAcquire(ctx, key); !errors.Is(err, locker.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a held key = %v, want ErrNotAcquired", err)
	}
	if err := lk.Refresh(ctx, 10*time.Second); err != nil {
		t.Fatalf("Refresh to another TTL: %v", err)
	}
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lk, err = b.TryAcquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	lk.Release(ctx)

	if _, err := locker.Open(ctx, "etcd://app:wrong@"+s.addr+"/app?dial_timeout=2s"); err == nil ||
		!strings.Contains(err.Error(), "authentication failed") {
		t.Errorf("Open with a wrong password = %v, want an authentication error", err)
	}

	outside := open(t, "etcd://app:s3cret@"+s.addr+"/other")
	for _, try := range []func() (locker.Lock, error){
		func() (locker.Lock, error) { return outside.Acquire(ctx, key) },
		func() (locker.Lock, error) { return outside.TryAcquire(ctx, key) },
	} {
		if _, err := try(); !errors.Is(err, rpctypes.ErrPermissionDenied) {
			t.Errorf("acquire outside the user's permissions = %v, want permission denied", err)
		}
	}
	rootAuthed, err := clientv3.New(clientv3.Config{Endpoints: []string{s.addr}, Username: "root", Password: "rootpw",
		DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer rootAuthed.Close()
	if g, err := rootAuthed.Get(ctx, "", clientv3.WithFromKey(), clientv3.WithKeysOnly()); err != nil || len(g.Kvs) != 0 {
		t.Errorf("keys left on the server: %v %v", g, err)
	}
}

// TestTLS runs a private etcd that serves clients over TLS and requires a
// client certificate: etcds:// with the CA and client files works; without
// a client certificate, or over plain etcd://, it does not.
func TestTLS(t *testing.T) {
	p := newPKI(t)
	ready := func(addr string) error {
		tc, err := clientTLS(p)
		if err != nil {
			return err
		}
		return statusWith(addr, tc)
	}
	s := startServer(t, "https", ready, "--cert-file", p.serverCert, "--key-file", p.serverKey,
		"--trusted-ca-file", p.ca, "--client-cert-auth")
	ctx := context.Background()
	url := fmt.Sprintf("etcds://%s/tls?cacert=%s&cert=%s&key=%s", s.addr, p.ca, p.clientCert, p.clientKey)
	a, b := open(t, url), open(t, url)
	lk, err := a.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryAcquire(ctx, "k"); !errors.Is(err, locker.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a held key = %v, want ErrNotAcquired", err)
	}
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// A CA that does not vouch for the server's certificate: the
	// handshake's error, at once.
	if _, err := locker.Open(ctx, fmt.Sprintf("etcds://%s/tls?dial_timeout=1m", s.addr)); err == nil ||
		!strings.Contains(err.Error(), "TLS handshake with "+s.addr) || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("Open(etcds://) without the server's CA = %v, want the TLS handshake's certificate error", err)
	}
	for _, bad := range []string{
		fmt.Sprintf("etcds://%s/tls?cacert=%s&dial_timeout=1s", s.addr, p.ca),
		fmt.Sprintf("etcd://%s/tls?dial_timeout=1s", s.addr),
	} {
		if l, err := locker.Open(ctx, bad); err == nil {
			l.Close()
			t.Errorf("Open(%q) succeeded on a server that requires a client certificate", bad)
		}
	}
}

func clientTLS(p pki) (*tls.Config, error) {
	pair, err := tls.LoadX509KeyPair(p.clientCert, p.clientKey)
	if err != nil {
		return nil, err
	}
	pool, err := certPool(p.ca)
	if err != nil {
		return nil, err
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}}, nil
}

// TestIdleLeaseRevoked: a lease no lock has used for a while is revoked,
// and the next lock with that TTL gets a new one.
func TestIdleLeaseRevoked(t *testing.T) {
	etcd.SetIdleLinger(t, 300*time.Millisecond) // restored after the Locker below is closed
	url := testenv.Get(t, testenv.EtcdURL)
	raw := rawClient(t, testenv.Hosts(t, url)...)
	ctx := context.Background()
	l := open(t, url)
	key := uniqueKey("idle")
	prefix := etcd.QueuePrefix(etcd.DefaultNamespace, key)
	leaseOf := func(lk locker.Lock) clientv3.LeaseID {
		t.Helper()
		g, err := raw.Get(ctx, prefix, clientv3.WithPrefix())
		if err != nil || len(g.Kvs) != 1 {
			t.Fatalf("queue: %v %v", g, err)
		}
		return clientv3.LeaseID(g.Kvs[0].Lease)
	}
	const ttl = 3 * time.Second
	lk, err := l.Acquire(ctx, key, locker.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	first := leaseOf(lk)
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// The lease loop looks at a third of the TTL.
	testenv.WaitFor(t, ttl, "the idle lease is revoked", func() bool {
		r, err := raw.TimeToLive(ctx, first)
		return err == nil && r.TTL == -1
	})
	lk, err = l.Acquire(ctx, key, locker.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	if second := leaseOf(lk); second == first {
		t.Errorf("a lock after the lease was revoked is on the revoked lease %x", first)
	}
	lk.Release(ctx)
}

// TestOpenTTLRange: a default TTL below the server's shortest lease fails
// Open, naming the minimum, rather than every Acquire.
func TestOpenTTLRange(t *testing.T) {
	raw := testenv.Get(t, testenv.EtcdURL)
	testenv.WantOpenErrors(t, [][2]string{{raw + "?ttl=500ms", "below this backend's minimum"}})
}
