package zookeeper_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/locker"
	"github.com/distlock/locker/backend"
	"github.com/distlock/locker/internal/inspecttest"
	"github.com/distlock/locker/internal/testenv"
	"github.com/distlock/locker/zookeeper"
)

// Shared holds and semaphores against the real server: the order of
// grants is driven by waiting until a waiter's node shows in Inspect's
// queue (its place is then fixed), never by sleeping.

// lockers opens n Lockers on url, each a client of its own.
func lockers(t *testing.T, url string, n int) []locker.Locker {
	t.Helper()
	ls := make([]locker.Locker, n)
	for i := range ls {
		ls[i] = open(t, url)
	}
	return ls
}

// take acquires key on l, and releases it when the test ends if it is
// still held.
func take(t *testing.T, l locker.Locker, key string, opts ...locker.Option) locker.Lock {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	lk, err := l.Acquire(ctx, key, opts...)
	if err != nil {
		t.Fatalf("Acquire(%q): %v", key, err)
	}
	t.Cleanup(func() { lk.Release(context.Background()) })
	return lk
}

// waitQueue polls Inspect through l until key has n waiters, and returns
// what it saw.
func waitQueue(t *testing.T, l locker.Locker, key string, n int) locker.Holder {
	t.Helper()
	var h locker.Holder
	testenv.WaitFor(t, 20*time.Second, fmt.Sprintf("%d waiters of %q", n, key), func() bool {
		h = inspecttest.Inspect(t, l, key)
		return len(h.Queue) == n
	})
	return h
}

// release releases lk, failing the test on an error.
func release(t *testing.T, lk locker.Lock) {
	t.Helper()
	if err := lk.Release(context.Background()); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// busy checks that TryAcquire of key with opts is refused as busy.
func busy(t *testing.T, l locker.Locker, key, what string, opts ...locker.Option) {
	t.Helper()
	lk, err := l.TryAcquire(context.Background(), key, opts...)
	if err == nil {
		lk.Release(context.Background())
	}
	if !errors.Is(err, locker.ErrNotAcquired) {
		t.Errorf("%s: TryAcquire = %v, want ErrNotAcquired", what, err)
	}
}

// TestReadersTogetherWriterAlone: shared holds coexist; an exclusive
// request waits for all of them, and shared requests for it.
func TestReadersTogetherWriterAlone(t *testing.T) {
	raw := testenv.Get(t, testenv.ZooKeeperURL)
	base := "/" + uniq("rw")
	ls := lockers(t, raw+base, 5)
	c := dial(t, testenv.Hosts(t, raw), 10*time.Second)
	key := "k"
	var readers []locker.Lock
	for i := range 3 {
		readers = append(readers, take(t, ls[i], key, locker.Shared()))
	}
	if nodes := lockNodes(t, c, base, key); len(nodes) != 3 {
		t.Fatalf("three readers queued %d nodes %v, want 3", len(nodes), nodes)
	}
	busy(t, ls[3], key, "a writer while three readers hold")
	var released atomic.Int32 // readers released so far
	wch := make(chan acquired, 1)
	go func() {
		lk, err := ls[3].Acquire(context.Background(), key)
		if err == nil && released.Load() != 3 {
			t.Errorf("the writer got the key with %d of 3 readers released", released.Load())
		}
		wch <- acquired{lk, err}
	}()
	waitQueue(t, ls[4], key, 1)
	for _, r := range readers {
		released.Add(1)
		release(t, r)
	}
	w := await(t, wch, "the writer once the readers left")
	busy(t, ls[4], key, "a reader while a writer holds", locker.Shared())
	var wDone atomic.Bool
	rch := make(chan acquired, 1)
	go func() {
		lk, err := ls[4].Acquire(context.Background(), key, locker.Shared())
		if err == nil && !wDone.Load() {
			t.Error("a reader got the key while the writer held it")
		}
		rch <- acquired{lk, err}
	}()
	waitQueue(t, ls[0], key, 1)
	wDone.Store(true)
	release(t, w)
	await(t, rch, "the reader once the writer left")
}

// TestReaderBehindWaitingWriter: FIFO. A reader that queues behind a
// waiting writer is not admitted before it, though only readers hold the
// key; it waits for the writer's turn to end. Fences follow the grants.
func TestReaderBehindWaitingWriter(t *testing.T) {
	raw := testenv.Get(t, testenv.ZooKeeperURL)
	ls := lockers(t, raw+"/"+uniq("fifo"), 4)
	key := "k"
	r1 := take(t, ls[0], key, locker.Shared())
	var wReleased atomic.Bool
	wch := acquireAsync(ls[1], key)
	waitQueue(t, ls[3], key, 1)
	rch := make(chan acquired, 1)
	go func() {
		lk, err := ls[2].Acquire(context.Background(), key, locker.Shared())
		if err == nil && !wReleased.Load() {
			t.Error("the reader queued behind a waiting writer got the key before the writer's turn ended")
		}
		rch <- acquired{lk, err}
	}()
	h := waitQueue(t, ls[3], key, 2)
	if h.Queue[0].Kind != backend.Exclusive || h.Queue[1].Kind != backend.Shared {
		t.Fatalf("queue %+v, want the writer, then the reader", h.Queue)
	}
	busy(t, ls[3], key, "a reader behind a waiting writer", locker.Shared())
	release(t, r1)
	w := await(t, wch, "the writer")
	wReleased.Store(true)
	release(t, w)
	r2 := await(t, rch, "the reader behind the writer")
	f1, _ := r1.Fence()
	fw, _ := w.Fence()
	f2, _ := r2.Fence()
	if !(f1 < fw && fw < f2) {
		t.Errorf("fences %d (reader), %d (writer), %d (reader): want them increasing in grant order", f1, fw, f2)
	}
}

// TestCancelledWriterUnblocksReaders: a writer queued ahead of readers
// gives up; the readers behind it hold the key with the reader in front,
// at once.
func TestCancelledWriterUnblocksReaders(t *testing.T) {
	raw := testenv.Get(t, testenv.ZooKeeperURL)
	base := "/" + uniq("cancelw")
	ls := lockers(t, raw+base, 5)
	c := dial(t, testenv.Hosts(t, raw), 10*time.Second)
	key := "k"
	take(t, ls[0], key, locker.Shared()) // held throughout
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	werr := make(chan error, 1)
	go func() {
		lk, err := ls[1].Acquire(ctx, key)
		if err == nil {
			lk.Release(context.Background())
		}
		werr <- err
	}()
	waitQueue(t, ls[4], key, 1)
	readers := []<-chan acquired{acquireAsync(ls[2], key, locker.Shared())}
	waitQueue(t, ls[4], key, 2)
	readers = append(readers, acquireAsync(ls[3], key, locker.Shared()))
	h := waitQueue(t, ls[4], key, 3)
	writerNode := h.Queue[0].Detail["node"]
	cancel()
	if err := <-werr; !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled writer's Acquire = %v, want context.Canceled", err)
	}
	for i, ch := range readers {
		await(t, ch, fmt.Sprintf("reader %d behind the cancelled writer", i))
	}
	for _, n := range lockNodes(t, c, base, key) {
		if strings.HasSuffix(writerNode, "/"+n) {
			t.Errorf("the cancelled writer's node %s is still queued", n)
		}
	}
	if h := inspecttest.Inspect(t, ls[4], key); len(h.Holds) != 3 || len(h.Queue) != 0 {
		t.Errorf("Inspect = %d holders, %d waiters; want the 3 readers holding", len(h.Holds), len(h.Queue))
	}
}

// TestSemaphore: at most Limit permits are held, each hold taking its
// Weight; a waiter of weight 2 that does not fit blocks a later one of
// weight 1 that would.
func TestSemaphore(t *testing.T) {
	raw := testenv.Get(t, testenv.ZooKeeperURL)
	ls := lockers(t, raw+"/"+uniq("sem"), 5)
	w := watchWaits(t)
	key := "k"
	limit := locker.Limit(3)
	a := take(t, ls[0], key, limit)
	b := take(t, ls[1], key, limit, locker.Weight(2))
	busy(t, ls[2], key, "a permit with all 3 taken", limit)
	var bReleased atomic.Bool
	cch := acquireAsync(ls[2], key, limit, locker.Weight(2))
	waitQueue(t, ls[4], key, 1)
	dch := make(chan acquired, 1)
	go func() {
		lk, err := ls[3].Acquire(context.Background(), key, limit)
		if err == nil && !bReleased.Load() {
			t.Error("the weight-1 waiter got a permit ahead of the weight-2 waiter queued before it")
		}
		dch <- acquired{lk, err}
	}()
	h := waitQueue(t, ls[4], key, 2)
	dNode := h.Queue[1].Detail["node"]
	if h.Queue[0].Weight != 2 || h.Queue[1].Weight != 1 || h.Queue[1].Limit != 3 {
		t.Fatalf("queue %+v, want the weight-2 waiter, then the weight-1 one, of 3 permits", h.Queue)
	}
	// One permit frees: the weight-1 waiter, which no single node blocks,
	// looks again (its child watch fires), and waits on.
	testenv.WaitFor(t, 20*time.Second, "the weight-1 waiter to watch the key node's children", func() bool {
		n, _, _ := w.counts(dNode)
		return n > 0
	})
	_, listed, _ := w.counts(dNode)
	release(t, a)
	testenv.WaitFor(t, 20*time.Second, "the weight-1 waiter to look at the queue again", func() bool {
		_, n, _ := w.counts(dNode)
		return n > listed
	})
	h = inspecttest.Inspect(t, ls[4], key)
	if len(h.Holds) != 1 || h.Holds[0].Weight != 2 || len(h.Queue) != 2 {
		t.Fatalf("after the first release: %d holders, %d waiters; want the weight-2 holder and both waiters", len(h.Holds), len(h.Queue))
	}
	busy(t, ls[4], key, "a permit behind the waiters, one permit free", limit)
	bReleased.Store(true)
	release(t, b)
	await(t, cch, "the weight-2 waiter")
	await(t, dch, "the weight-1 waiter")
	h = inspecttest.Inspect(t, ls[4], key)
	if len(h.Holds) != 2 || h.Holds[0].Weight != 2 || h.Holds[1].Weight != 1 || h.Holds[0].Kind != backend.Permit || len(h.Queue) != 0 {
		t.Errorf("Inspect = %+v, want the weight-2 and weight-1 holders, none waiting", h)
	}
}

// TestSemaphoreNeverOverLimit: clients taking 1 or 2 of 3 permits over and
// over never hold more than 3 together.
func TestSemaphoreNeverOverLimit(t *testing.T) {
	raw := testenv.Get(t, testenv.ZooKeeperURL)
	ls := lockers(t, raw+"/"+uniq("semstress"), 4)
	const limit, rounds = 3, 15
	var (
		mu      sync.Mutex
		held    int
		peak    int
		granted int
		wg      sync.WaitGroup
	)
	for i, l := range ls {
		weight := 1 + i%2
		wg.Go(func() {
			for range rounds {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				lk, err := l.Acquire(ctx, "k", locker.Limit(limit), locker.Weight(weight), locker.WithAutoRefresh(false))
				cancel()
				if err != nil {
					t.Errorf("client %d: Acquire: %v", i, err)
					return
				}
				mu.Lock()
				held += weight
				granted++
				peak = max(peak, held)
				if held > limit {
					t.Errorf("client %d: %d permits held at once, limit %d", i, held, limit)
				}
				mu.Unlock()
				// Hold across a round trip to the server, so that holds
				// overlap.
				if _, err := lk.TTL(context.Background()); err != nil {
					t.Errorf("client %d: TTL of a held lock: %v", i, err)
				}
				mu.Lock()
				held -= weight
				mu.Unlock()
				if err := lk.Release(context.Background()); err != nil {
					t.Errorf("client %d: Release: %v", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d grants, at most %d permits held at once", granted, peak)
}

// TestKindMismatch: a request that disagrees with the key's holders or
// waiters is refused at once, with ErrKindMismatch, and leaves no node.
func TestKindMismatch(t *testing.T) {
	raw := testenv.Get(t, testenv.ZooKeeperURL)
	base := "/" + uniq("mismatch")
	holder, other := open(t, raw+base), open(t, raw+base)
	c := dial(t, testenv.Hosts(t, raw), 10*time.Second)
	cases := []struct {
		name     string
		held     []locker.Option
		req      []locker.Option
		heldKind backend.Kind
	}{
		{"permit on a read lock", []locker.Option{locker.Shared()}, []locker.Option{locker.Limit(2)}, backend.Shared},
		{"permit on a write lock", nil, []locker.Option{locker.Limit(1)}, backend.Exclusive},
		{"shared on a semaphore", []locker.Option{locker.Limit(2)}, []locker.Option{locker.Shared()}, backend.Permit},
		{"exclusive on a semaphore", []locker.Option{locker.Limit(2)}, nil, backend.Permit},
		{"another limit", []locker.Option{locker.Limit(2)}, []locker.Option{locker.Limit(3)}, backend.Permit},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			key := uniq("k")
			lk := take(t, holder, key, tc.held...)
			for _, op := range []string{"TryAcquire", "Acquire"} {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				f := other.TryAcquire
				if op == "Acquire" {
					f = other.Acquire
				}
				got, err := f(ctx, key, tc.req...)
				cancel()
				if err == nil {
					got.Release(context.Background())
				}
				var m *backend.Mismatch
				if !errors.Is(err, locker.ErrKindMismatch) || !errors.As(err, &m) || m.HeldKind != tc.heldKind {
					t.Errorf("%s = %v, want a *backend.Mismatch (ErrKindMismatch) naming the holder's kind %v", op, err, tc.heldKind)
				}
				if nodes := lockNodes(t, c, base, key); len(nodes) != 1 {
					t.Errorf("after the refused %s the queue is %v, want the holder's node alone", op, nodes)
				}
			}
			if testenv.Closed(lk.Lost()) {
				t.Error("the holder's lock was lost")
			}
		})
	}
}

// TestKindBehindOurs: a node of another kind or limit created between
// our create and our listing sits behind ours, and is not ours to judge:
// we are admitted, and its request (a real one here) is the one refused.
// The Locker is made with New, whose create and listing are separate
// round trips, so that the node can be made in between.
func TestKindBehindOurs(t *testing.T) {
	raw := testenv.Get(t, testenv.ZooKeeperURL)
	hosts := testenv.Hosts(t, raw)
	timeout := readRange(t, hosts[0]).clamp(10 * time.Second)
	for _, tc := range []struct {
		name    string
		ours    []locker.Option
		foreign backend.Claim
		theirs  []locker.Option // a real request like the foreign node
	}{
		{"permit behind a reader", []locker.Option{locker.Shared()}, backend.Claim{Kind: backend.Permit, Limit: 2, Weight: 1}, []locker.Option{locker.Limit(2)}},
		{"another limit", []locker.Option{locker.Limit(2)}, backend.Claim{Kind: backend.Permit, Limit: 3, Weight: 1}, []locker.Option{locker.Limit(3)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := "/" + uniq("behind")
			l, err := zookeeper.New(dial(t, hosts, timeout), &zookeeper.Options{SessionTimeout: timeout, Path: base})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			other := open(t, raw+base)
			c := dial(t, hosts, 10*time.Second)
			key := "k"
			keyPath := base + "/" + zookeeper.EncodeKey(key)
			var once sync.Once
			var foreign string
			restore := zookeeper.SetHooks(t, zookeeper.Hooks{Created: func(path string) {
				once.Do(func() {
					p, err := c.Create(keyPath+"/"+zookeeper.LockPrefix(tc.foreign), []byte(zookeeper.NodeData), zk.FlagEphemeralSequential, zk.WorldACL(zk.PermAll))
					if err != nil {
						t.Errorf("the node of another kind: %v", err)
					}
					foreign = p
				})
			}})
			lk, err := l.TryAcquire(context.Background(), key, tc.ours...)
			restore()
			if err != nil {
				t.Fatalf("TryAcquire with a node of another kind created behind ours: %v", err)
			}
			defer lk.Release(context.Background())
			nodes := lockNodes(t, c, base, key)
			if len(nodes) != 2 || !strings.HasSuffix(foreign, "/"+nodes[1]) {
				t.Fatalf("queue %v, want ours and then the other node %s", nodes, foreign)
			}
			_, err = other.TryAcquire(context.Background(), key, tc.theirs...)
			if !errors.Is(err, locker.ErrKindMismatch) {
				t.Errorf("a request like the node behind ours = %v, want ErrKindMismatch", err)
			}
			if err := c.Delete(foreign, -1); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestKindBehindWaiter: on the Locker's own connections, a waiter woken
// by the release ahead of it finds a node of another kind queued behind
// it since, and takes the key all the same.
func TestKindBehindWaiter(t *testing.T) {
	raw := testenv.Get(t, testenv.ZooKeeperURL)
	base := "/" + uniq("behindw")
	ls := lockers(t, raw+base, 3)
	c := dial(t, testenv.Hosts(t, raw), 10*time.Second)
	key := "k"
	r := take(t, ls[0], key, locker.Shared())
	wch := acquireAsync(ls[1], key)
	waitQueue(t, ls[2], key, 1)
	foreign, err := c.Create(base+"/"+zookeeper.EncodeKey(key)+"/"+zookeeper.LockPrefix(backend.Claim{Kind: backend.Permit, Limit: 4, Weight: 1}),
		[]byte(zookeeper.NodeData), zk.FlagEphemeralSequential, zk.WorldACL(zk.PermAll))
	if err != nil {
		t.Fatal(err)
	}
	release(t, r)
	await(t, wch, "the writer with a permit node queued behind it")
	if err := c.Delete(foreign, -1); err != nil {
		t.Fatal(err)
	}
}

// TestCrashedSharedHolder: a shared holder and a permit holder cut off
// from the server free their share when the server expires their session,
// within the TTL and the backend's slack; each is told (Lost) before the
// key moves on.
func TestCrashedSharedHolder(t *testing.T) {
	raw := testenv.Get(t, testenv.ZooKeeperURL)
	p := testenv.Proxy(t, testenv.Hosts(t, raw)[0])
	base := "/" + uniq("crashshared")
	crashed := open(t, "zookeeper://"+p.Addr()+base)
	ls := lockers(t, raw+base, 3)
	ttl := time.Second
	reader := take(t, crashed, "rw", locker.Shared(), locker.WithTTL(ttl))
	permits := take(t, crashed, "sem", locker.Limit(2), locker.Weight(2), locker.WithTTL(ttl))
	live := take(t, ls[0], "rw", locker.Shared())
	type grant struct {
		at   time.Time
		told bool // the crashed holder's Lost had closed
	}
	wait := func(l locker.Locker, key string, lost <-chan struct{}, opts ...locker.Option) <-chan grant {
		ch := make(chan grant, 1)
		go func() {
			lk, err := l.Acquire(context.Background(), key, opts...)
			if err != nil {
				if !errors.Is(err, locker.ErrClosed) {
					t.Errorf("%s: %v", key, err)
				}
				close(ch)
				return
			}
			ch <- grant{time.Now(), testenv.Closed(lost)}
			lk.Release(context.Background())
		}()
		return ch
	}
	writer := wait(ls[1], "rw", reader.Lost())
	waitQueue(t, ls[0], "rw", 1)
	permit := wait(ls[2], "sem", permits.Lost(), locker.Limit(2))
	waitQueue(t, ls[0], "sem", 1)
	release(t, live) // the writer now waits for the crashed reader alone
	cut := time.Now()
	p.Cut()
	within := ttl + ls[0].Capabilities().ExpirySlack + 10*time.Second // generous: a loaded machine
	for key, ch := range map[string]<-chan grant{"rw": writer, "sem": permit} {
		select {
		case g, ok := <-ch:
			if !ok {
				continue
			}
			if !g.told {
				t.Errorf("%s: the key moved on %v after the cut, before the crashed holder's Lost closed", key, g.at.Sub(cut))
			}
			t.Logf("%s: the crashed holder's share freed %v after the cut", key, g.at.Sub(cut).Round(time.Millisecond))
		case <-time.After(within):
			t.Fatalf("%s: the crashed holder's share not freed within %v", key, within)
		}
	}
}

// TestFencesAcrossKinds: fences increase with every grant on a key,
// whatever its kind: a writer's exceeds every earlier reader's, a reader's
// exceeds every earlier writer's. Clients mix shared and exclusive holds
// over and over; a resource checks each fence as it would.
func TestFencesAcrossKinds(t *testing.T) {
	raw := testenv.Get(t, testenv.ZooKeeperURL)
	ls := lockers(t, raw+"/"+uniq("fences"), 4)
	const rounds = 12
	var (
		mu        sync.Mutex
		readers   int    // holding now
		writing   bool   // a writer holds now
		lastWrite uint64 // the latest writer's fence
		highest   uint64 // the highest fence granted so far
		together  int    // the most readers seen holding at once
		wg        sync.WaitGroup
	)
	for i, l := range ls {
		wg.Go(func() {
			for r := range rounds {
				write := (i+r)%3 == 0
				var opts []locker.Option
				if !write {
					opts = append(opts, locker.Shared())
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				lk, err := l.Acquire(ctx, "k", append(opts, locker.WithAutoRefresh(false))...)
				cancel()
				if err != nil {
					t.Errorf("client %d: Acquire: %v", i, err)
					return
				}
				f, ok := lk.Fence()
				mu.Lock()
				switch {
				case !ok:
					t.Errorf("client %d: no fence", i)
				case writing:
					t.Errorf("client %d: granted (writer %v) while a writer holds", i, write)
				case write && readers > 0:
					t.Errorf("client %d: a writer granted while %d readers hold", i, readers)
				case write && f <= highest:
					t.Errorf("client %d: a writer's fence %d, not above the earlier grants' %d", i, f, highest)
				case !write && f <= lastWrite:
					t.Errorf("client %d: a reader's fence %d, not above the earlier writer's %d", i, f, lastWrite)
				}
				highest = max(highest, f)
				if write {
					writing, lastWrite = true, f
				} else {
					readers++
					together = max(together, readers)
				}
				mu.Unlock()
				// Hold across a round trip to the server, so that holds
				// overlap.
				if _, err := lk.TTL(context.Background()); err != nil {
					t.Errorf("client %d: TTL of a held lock: %v", i, err)
				}
				mu.Lock()
				if write {
					writing = false
				} else {
					readers--
				}
				mu.Unlock()
				if err := lk.Release(context.Background()); err != nil {
					t.Errorf("client %d: Release: %v", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	t.Logf("up to %d readers held at once", together)
}

// TestInspectKinds: Inspect lists every holder with its kind and fence,
// and the waiters in order; ForceRelease deletes every holder's node and
// no waiter's.
func TestInspectKinds(t *testing.T) {
	raw := testenv.Get(t, testenv.ZooKeeperURL)
	base := "/" + uniq("inspectkinds")
	ls := lockers(t, raw+base, 5)
	c := dial(t, testenv.Hosts(t, raw), 10*time.Second)
	key := "k"
	// A short TTL: a force-released holder learns of it at its next
	// refresh, a third of the TTL on.
	ttl := locker.WithTTL(1500 * time.Millisecond)
	r1 := take(t, ls[0], key, locker.Shared(), ttl)
	r2 := take(t, ls[1], key, locker.Shared(), ttl)
	wch := acquireAsync(ls[2], key)
	waitQueue(t, ls[4], key, 1)
	rch := acquireAsync(ls[3], key, locker.Shared())
	h := waitQueue(t, ls[4], key, 2)
	nodes := lockNodes(t, c, base, key)
	keyNode := base + "/" + zookeeper.EncodeKey(key)
	if !h.Held || len(h.Holds) != 2 || h.Waiters != 2 || len(nodes) != 4 {
		t.Fatalf("Inspect = %+v over the queue %v, want 2 readers holding and 2 waiting", h, nodes)
	}
	for i, lk := range []locker.Lock{r1, r2} {
		hd := h.Holds[i]
		if f, _ := lk.Fence(); hd.Kind != backend.Shared || hd.Fence != f || !hd.Fenced || hd.Detail["node"] != keyNode+"/"+nodes[i] || hd.Detail["session"] == "" {
			t.Errorf("Holds[%d] = %+v, want reader %d's: shared, fence %d, node %s", i, hd, i, f, nodes[i])
		}
	}
	if f, _ := r1.Fence(); h.Fence != f || h.Detail["node"] != h.Holds[0].Detail["node"] {
		t.Errorf("the Holder's fence %d and Detail %q, want the first holder's (fence %d)", h.Fence, h.Detail, f)
	}
	for i, want := range []backend.Kind{backend.Exclusive, backend.Shared} {
		if w := h.Queue[i]; w.Kind != want || w.Fenced || w.Detail["node"] != keyNode+"/"+nodes[2+i] {
			t.Errorf("Queue[%d] = %+v, want %v waiting in %s", i, w, want, nodes[2+i])
		}
	}
	if !inspecttest.ForceRelease(t, ls[4], key) {
		t.Fatal("ForceRelease of a read-locked key released nothing")
	}
	w := await(t, wch, "the writer once the readers were released by force")
	if after := lockNodes(t, c, base, key); len(after) != 2 || after[0] != nodes[2] || after[1] != nodes[3] {
		t.Errorf("queue after ForceRelease %v, want the waiters' %v", after, nodes[2:])
	}
	h = inspecttest.Inspect(t, ls[4], key)
	if f, _ := w.Fence(); len(h.Holds) != 1 || h.Holds[0].Kind != backend.Exclusive || h.Fence != f || len(h.Queue) != 1 {
		t.Errorf("Inspect after ForceRelease = %+v, want the writer holding and the reader waiting", h)
	}
	for _, lk := range []locker.Lock{r1, r2} {
		testenv.WaitFor(t, 20*time.Second, "a force-released reader's Lost", func() bool { return testenv.Closed(lk.Lost()) })
	}
	release(t, w)
	await(t, rch, "the reader behind the writer")

	// A semaphore: limit and weights.
	sem := "sem"
	take(t, ls[0], sem, locker.Limit(4), locker.Weight(3))
	take(t, ls[1], sem, locker.Limit(4))
	h = inspecttest.Inspect(t, ls[4], sem)
	type claim struct {
		kind          backend.Kind
		limit, weight int
	}
	var got []claim
	for _, hd := range h.Holds {
		got = append(got, claim{hd.Kind, hd.Limit, hd.Weight})
	}
	if want := []claim{{backend.Permit, 4, 3}, {backend.Permit, 4, 1}}; !slices.Equal(got, want) {
		t.Errorf("Inspect of a semaphore: holds %+v, want %+v", got, want)
	}
}

// TestSharedWaitersWatch: on the ensemble, each waiter watches the one
// node whose deletion may admit it: a writer its predecessor, a reader the
// nearest writer ahead (not its predecessor), a permit that no single
// node blocks the key node's children; and the servers hold those data
// watches and no others.
func TestSharedWaitersWatch(t *testing.T) {
	raw := testenv.Get(t, testenv.ZooKeeperEnsembleURL)
	base := "/" + uniq("sharedwatch")
	ls := lockers(t, raw+base, 6)
	w := watchWaits(t)
	key, sem := "k", "sem"
	keyNode, semNode := base+"/"+zookeeper.EncodeKey(key), base+"/"+zookeeper.EncodeKey(sem)
	take(t, ls[0], key, locker.Shared())
	acquireAsync(ls[1], key)
	writer, writerWatch := w.nextWatch(t)
	acquireAsync(ls[2], key, locker.Shared())
	r2, r2Watch := w.nextWatch(t)
	acquireAsync(ls[3], key, locker.Shared())
	r3, r3Watch := w.nextWatch(t)
	nodes := lockNodes(t, dial(t, testenv.Hosts(t, raw), 10*time.Second), base, key)
	if len(nodes) != 4 || writer != keyNode+"/"+nodes[1] || r2 != keyNode+"/"+nodes[2] || r3 != keyNode+"/"+nodes[3] {
		t.Fatalf("queue %v; waiters %s, %s, %s", nodes, writer, r2, r3)
	}
	if writerWatch != keyNode+"/"+nodes[0] || r2Watch != writer || r3Watch != writer {
		t.Errorf("the writer watches %s, the readers %s and %s; want the reader ahead, then the writer for both", writerWatch, r2Watch, r3Watch)
	}
	take(t, ls[4], sem, locker.Limit(2))
	take(t, ls[0], sem, locker.Limit(2))
	acquireAsync(ls[5], sem, locker.Limit(2))
	_, semWatch := w.nextWatch(t)
	if semWatch != semNode {
		t.Errorf("a permit waiter blocked by two holders watches %s, want the key node %s (its children)", semWatch, semNode)
	}
	watches := serverWatches(t, testenv.Hosts(t, raw), base+"/")
	if got := len(watches[keyNode+"/"+nodes[0]]); got != 1 {
		t.Errorf("the holding reader's node is watched by %d sessions %v, want the writer's alone", got, watches[keyNode+"/"+nodes[0]])
	}
	// The writer, next to the holder, watches its own node too (see
	// handover).
	if got := len(watches[keyNode+"/"+nodes[1]]); got != 3 {
		t.Errorf("the writer's node is watched by %d sessions %v, want the two readers' and its own", got, watches[keyNode+"/"+nodes[1]])
	}
	if got := len(watches[keyNode+"/"+nodes[2]]) + len(watches[keyNode+"/"+nodes[3]]); got != 0 {
		t.Errorf("the readers' nodes are watched %d times, want none", got)
	}
	// A child watch does not show in wchp, which lists data watches: the
	// servers show that the permit waiter watches no holder's node.
	for _, n := range lockNodes(t, dial(t, testenv.Hosts(t, raw), 10*time.Second), base, sem) {
		if got := watches[semNode+"/"+n]; len(got) != 0 {
			t.Errorf("the semaphore's node %s is watched by %v, want none", n, got)
		}
	}
}

// TestCancelledCreateShared: a shared Acquire cancelled while its create's
// reply is held back (the create applied on the server) leaves nothing
// behind once the reply comes: the late create is undone; and one whose
// reply is lost with the connection has its node found by its tag and
// deleted.
func TestCancelledCreateShared(t *testing.T) {
	for _, lost := range []bool{false, true} {
		t.Run(map[bool]string{false: "late", true: "lost"}[lost], func(t *testing.T) {
			raw := testenv.Get(t, testenv.ZooKeeperURL)
			p := testenv.Proxy(t, testenv.Hosts(t, raw)[0])
			base := "/" + uniq("cancelcreate")
			l := open(t, "zookeeper://"+p.Addr()+base)
			c := dial(t, testenv.Hosts(t, raw), 10*time.Second)
			opts := []locker.Option{locker.Shared(), locker.WithTTL(10 * time.Second)} // the session outlives the drop
			release(t, take(t, l, "k", opts...))                                       // the session and the key node
			zookeeper.SetHooks(t, zookeeper.Hooks{BeforeCreate: func(prefix string) {
				if strings.Contains(prefix, zookeeper.EncodeKey("k")+"/") {
					p.HoldReplies(true)
				}
			}})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			errc := make(chan error, 1)
			go func() {
				lk, err := l.Acquire(ctx, "k", opts...)
				if err == nil {
					lk.Release(context.Background())
				}
				errc <- err
			}()
			testenv.WaitFor(t, 10*time.Second, "the create applied on the server", func() bool {
				return len(lockNodes(t, c, base, "k")) == 1
			})
			cancel()
			if lost {
				p.Cut()
			}
			p.HoldReplies(false)
			p.Restore()
			if err := <-errc; !errors.Is(err, context.Canceled) {
				t.Fatalf("Acquire cancelled during its create = %v, want context.Canceled", err)
			}
			testenv.WaitFor(t, 20*time.Second, "the cancelled create's node gone", func() bool {
				return len(lockNodes(t, c, base, "k")) == 0
			})
		})
	}
}
