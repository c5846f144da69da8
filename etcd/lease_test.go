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
	"github.com/distlock/locker/etcd"
	"github.com/distlock/locker/internal/testenv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// leaseOf returns the lease of the only entry in the queue of key.
func leaseOf(t *testing.T, raw *clientv3.Client, key string) clientv3.LeaseID {
	t.Helper()
	g, err := raw.Get(context.Background(), etcd.QueuePrefix(etcd.DefaultNamespace, key), clientv3.WithPrefix())
	if err != nil || len(g.Kvs) != 1 || g.Kvs[0].Lease == 0 {
		t.Fatalf("queue of %q: %v %v, want one entry on a lease", key, g, err)
	}
	return clientv3.LeaseID(g.Kvs[0].Lease)
}

// TestLostWithinConfirmedLease: a lock's validity never runs past the
// validity of its lease as last confirmed by a keepalive, whatever else
// the Locker is busy with. The holder's lease loop sends a keepalive
// KeepAliveInterval after the last confirmed one was sent; the test holds
// that keepalive back (the hook blocks it), so the lease's confirmed
// validity ends at most the TTL less that interval after that moment, and
// the server may expire the lease from then on. The lock is then
// refreshed (a same-TTL refresh renews no lease), the holder is cut off,
// and waiters of the same Locker give up, leaving entries their cleanups
// cannot delete. The holder's Until must lie within the lease's confirmed
// validity, and its Lost close before another client gets the key.
func TestLostWithinConfirmedLease(t *testing.T) {
	addr := testenv.Hosts(t, testenv.Get(t, testenv.EtcdURL))[0]
	raw := rawClient(t, addr)
	ctx := context.Background()
	p := testenv.Proxy(t, addr)
	holder, other := open(t, "etcd://"+p.Addr()), open(t, "etcd://"+addr)
	const ttl = 9 * time.Second // a drift allowance of 92ms
	key := uniqueKey("confirmed")
	lk, err := holder.Acquire(ctx, key, locker.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	giveUp, waited := queueWaiters(t, raw, holder, holdBusy(t, other), ttl)
	defer waited()
	defer giveUp()
	heldBack, release := holdKeepalive(t, fmt.Sprintf("%x", int64(leaseOf(t, raw, key))), ttl)
	defer release()
	// The last confirmed keepalive was sent KeepAliveInterval or more
	// before heldBack: the lease's confirmed validity ends by then.
	confirmed := heldBack.Add(ttl - etcd.KeepAliveInterval(ttl))
	since := func(at time.Time) time.Duration { return at.Sub(heldBack).Round(time.Millisecond) }

	if err := lk.Refresh(ctx, ttl); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	if u := lk.Until(); u.After(confirmed) {
		t.Errorf("after a Refresh, Until is %v past the lease's confirmed validity", u.Sub(confirmed).Round(time.Millisecond))
	}
	got := acquireLater(t, raw, other, key, ttl, lk)
	lost := make(chan time.Time, 1)
	go func() {
		<-lk.Lost()
		lost <- time.Now()
	}()
	p.Cut()
	defer p.Restore() // so that Close need not wait for its release to time out
	giveUp()          // their cleanups fail: orphans on the holder's lease

	r := <-got
	if r.err != nil {
		t.Fatalf("the other client's Acquire after the holder was cut off: %v", r.err)
	}
	defer r.lk.Release(ctx)
	// Judged by the other client as it took the key: times noted by two
	// goroutines after they wake would be ordered by the scheduler.
	if !r.holderLost {
		t.Fatalf("the other client acquired the key %v after the held-back keepalive, and the holder's Lost was still open (its Until is %v after)",
			since(r.at), since(lk.Until()))
	}
	lostAt := <-lost
	if u := lk.Until(); u.After(confirmed) || !u.Before(r.at) {
		t.Errorf("Until is %v after the held-back keepalive; want no later than %v (the lease's confirmed validity), before the other client's acquire (%v)",
			since(u), since(confirmed), since(r.at))
	}
	t.Logf("Lost %v, the other client's acquire %v after the held-back keepalive", since(lostAt), since(r.at))
}

// holdBusy makes other hold a new key until the test ends, and returns
// the key.
func holdBusy(t *testing.T, other locker.Locker) string {
	t.Helper()
	busy := uniqueKey("busy")
	lk, err := other.Acquire(context.Background(), busy)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lk.Release(context.Background()) })
	return busy
}

// queueWaiters queues waiters of l, on its lease for ttl, for busy, a key
// someone else holds, and returns once they are queued. giveUp ends their
// Acquires; waited waits until they have returned.
func queueWaiters(t *testing.T, raw *clientv3.Client, l locker.Locker, busy string, ttl time.Duration) (giveUp, waited func()) {
	t.Helper()
	const n = 6
	ctx := context.Background()
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if lk, err := l.Acquire(wctx, busy, locker.WithTTL(ttl)); err == nil {
				lk.Release(ctx)
				t.Errorf("a waiter got a key someone else holds")
			}
		}()
	}
	waited = func() {
		cancel()
		wg.Wait()
	}
	testenv.WaitFor(t, 10*time.Second, "the waiters queue", func() bool {
		return len(queue(t, raw, etcd.QueuePrefix(etcd.DefaultNamespace, busy))) == n+1
	})
	return cancel, waited
}

// holdKeepalive blocks the next keepalive of the lease whose id is hex,
// just before it is sent, until release is called, and returns when it
// was held back. It fails the test if there is none within d.
func holdKeepalive(t *testing.T, hex string, d time.Duration) (heldBack time.Time, release func()) {
	t.Helper()
	blocked, unblock := make(chan time.Time, 1), make(chan struct{})
	var once sync.Once
	restore := etcd.SetHooks(t, etcd.Hooks{Keepalive: func(lease string) {
		if lease == hex {
			once.Do(func() {
				blocked <- time.Now()
				<-unblock
			})
		}
	}})
	release = func() {
		close(unblock)
		restore()
	}
	select {
	case heldBack = <-blocked:
		return heldBack, release
	case <-time.After(d):
		release()
		t.Fatalf("no keepalive of lease %s within %v", hex, d)
		return
	}
}

// acquireLater starts an Acquire of key by l and returns once it is
// queued; its outcome comes on the channel.
func acquireLater(t *testing.T, raw *clientv3.Client, l locker.Locker, key string, ttl time.Duration, holder locker.Lock) <-chan acquired {
	t.Helper()
	got := make(chan acquired, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 4*ttl)
		defer cancel()
		lk, err := l.Acquire(ctx, key, locker.WithTTL(ttl))
		got <- acquired{lk: lk, err: err, at: time.Now(), holderLost: testenv.Closed(holder.Lost())}
	}()
	testenv.WaitFor(t, 10*time.Second, "the other client queues", func() bool {
		return len(queue(t, raw, etcd.QueuePrefix(etcd.DefaultNamespace, key))) == 2
	})
	return got
}

// TestLatePutAfterCleanup: an acquire whose put fails without an answer
// (its context ends around the send) deletes what the put may have made
// before it returns. But etcd serves the put and that cleanup as separate
// requests, concurrently, and may apply the put after the cleanup looked:
// the entry then sits on the Locker's lease, which is kept alive for its
// other locks. The test makes that order certain: the hook cancels the
// acquire just before its put is sent (so it is never sent), the cleanup
// finds nothing, and the test then applies the put itself, the same name
// on the same lease, as the server would have. With another lock of the
// same TTL held, the key must still be free for another client within
// TTL + ExpirySlack, and the Locker must be able to take it again later.
func TestLatePutAfterCleanup(t *testing.T) {
	url := testenv.Get(t, testenv.EtcdURL)
	raw := rawClient(t, testenv.Hosts(t, url)...)
	ctx := context.Background()
	const ttl = 3 * time.Second
	for _, mode := range []string{"acquire", "try-acquire"} {
		t.Run(mode, func(t *testing.T) {
			a, b := open(t, url), open(t, url)
			keep := uniqueKey("late-put-keep")
			kept, err := a.Acquire(ctx, keep, locker.WithTTL(ttl))
			if err != nil {
				t.Fatal(err)
			}
			defer kept.Release(ctx)
			lease := leaseOf(t, raw, keep)
			key := uniqueKey("late-put")
			prefix := etcd.QueuePrefix(etcd.DefaultNamespace, key)
			name := prefix + fmt.Sprintf("%x", int64(lease))

			actx, cancel := context.WithCancel(ctx)
			defer cancel()
			restore := etcd.SetHooks(t, etcd.Hooks{Put: func(entry string) {
				if entry == name {
					cancel()
				}
			}})
			if mode == "acquire" {
				_, err = a.Acquire(actx, key, locker.WithTTL(ttl))
			} else {
				_, err = a.TryAcquire(actx, key, locker.WithTTL(ttl))
			}
			restore()
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("%s cancelled as its put was sent: %v, want context.Canceled", mode, err)
			}
			if q := queue(t, raw, prefix); len(q) != 0 {
				t.Fatalf("the cancelled put reached the server: queue %q", q)
			}
			// The put lands now, after the cleanup looked.
			if _, err := raw.Put(ctx, name, "", clientv3.WithLease(lease)); err != nil {
				t.Fatal(err)
			}
			landed := time.Now()
			bound := ttl + a.Capabilities().ExpirySlack
			bctx, bcancel := context.WithTimeout(ctx, bound)
			lk, err := b.Acquire(bctx, key, locker.WithTTL(ttl))
			bcancel()
			if err != nil {
				t.Fatalf("another client could not take the key within %v (TTL + ExpirySlack) of the late put, the first Locker's lease kept alive: %v; queue %q",
					bound, err, queue(t, raw, prefix))
			}
			t.Logf("the late put's entry was removed %v after it landed", time.Since(landed).Round(time.Millisecond))
			if err := lk.Release(ctx); err != nil {
				t.Fatal(err)
			}
			lk, err = a.TryAcquire(ctx, key, locker.WithTTL(ttl))
			if err != nil {
				t.Fatalf("the first Locker cannot take the key again: %v", err)
			}
			if err := lk.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestOrphansSwept: waiters that give up while their Locker is cut off
// cannot delete their queue entries; once etcd is reachable again the
// lease's sweeper deletes them, while the lease stays alive for another
// lock, and their names are free for the next waiters.
func TestOrphansSwept(t *testing.T) {
	addr := testenv.Hosts(t, testenv.Get(t, testenv.EtcdURL))[0]
	raw := rawClient(t, addr)
	ctx := context.Background()
	p := testenv.Proxy(t, addr)
	l, other := open(t, "etcd://"+p.Addr()), open(t, "etcd://"+addr)
	const ttl = 10 * time.Second // outlives the cut below
	key := uniqueKey("swept")
	kept, err := l.Acquire(ctx, key, locker.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	defer kept.Release(ctx)
	hex := fmt.Sprintf("%x", int64(leaseOf(t, raw, key)))
	entries := func(busy string) []string {
		var ours []string
		for _, k := range queue(t, raw, etcd.QueuePrefix(etcd.DefaultNamespace, busy)) {
			if strings.Contains(k, "/"+hex) {
				ours = append(ours, k)
			}
		}
		return ours
	}

	busy := holdBusy(t, other)
	giveUp, waited := queueWaiters(t, raw, l, busy, ttl)
	first := entries(busy)
	p.Cut()
	giveUp()
	waited() // each cleanup failed after its timeout
	p.Restore()
	if got := entries(busy); len(got) != len(first) {
		t.Fatalf("after the cleanups failed, %d of the %d waiters' entries are queued, want all", len(got), len(first))
	}
	testenv.WaitFor(t, 15*time.Second, "the sweeper deletes the entries", func() bool { return len(entries(busy)) == 0 })
	if err := kept.Refresh(ctx, ttl); err != nil {
		t.Fatalf("the lock on the lease after the sweep: %v", err)
	}

	// The names are free again: new waiters queue under the same ones.
	giveUp, waited = queueWaiters(t, raw, l, busy, ttl)
	again := entries(busy)
	giveUp()
	waited()
	slices.Sort(first)
	slices.Sort(again)
	if !slices.Equal(first, again) {
		t.Errorf("new waiters queued as %q, want the names freed by the sweep, %q", again, first)
	}
}

// TestLostWithTargetLeaseOfMoveInFlight: a Refresh to another TTL moves
// the entry to that TTL's lease, and the server may apply the move long
// before its reply comes back. Should that lease end meanwhile, the entry
// goes with it on the server, so the lock must be reported lost then, not
// only at the validity the Refresh would give: here the move's reply is
// held back, the target lease is revoked, and Lost must close for the
// lease's end. (Found by the randomized fault test: a move to a lease
// whose keepalives were failing let another client take the key while the
// mover, its reply cut off, still believed it held it.)
func TestLostWithTargetLeaseOfMoveInFlight(t *testing.T) {
	etcd.SetWatchAfter(t, time.Hour) // no watch: only the lease can tell
	url := testenv.Get(t, testenv.EtcdURL)
	raw := rawClient(t, testenv.Hosts(t, url)...)
	l := open(t, url)
	ctx := context.Background()
	const from, to = 20 * time.Second, 10 * time.Second
	key := uniqueKey("move-in-flight")
	lk, err := l.Acquire(ctx, key, locker.WithTTL(from), locker.WithAutoRefresh(false))
	require.NoError(t, err)
	t.Cleanup(func() { lk.Release(context.Background()) })
	entry := entryOf(t, raw, key)

	applied, reply := make(chan struct{}), make(chan struct{})
	etcd.SetHooks(t, etcd.Hooks{Moved: func(e string) {
		if e == entry {
			close(applied)
			<-reply
		}
	}})
	refreshed := make(chan error, 1)
	go func() { refreshed <- lk.Refresh(ctx, to) }()
	<-applied
	r, err := raw.Get(ctx, entry)
	require.NoError(t, err)
	require.Len(t, r.Kvs, 1)
	_, err = raw.Revoke(ctx, clientv3.LeaseID(r.Kvs[0].Lease))
	require.NoError(t, err)
	select {
	case <-lk.Lost():
	case <-time.After(to + 5*time.Second):
		t.Fatal("Lost still open")
	}
	close(reply)
	_, err = lk.TTL(ctx)
	assert.ErrorIs(t, err, locker.ErrNotHeld)
	assert.ErrorIs(t, err, etcd.ErrLeaseExpired, "Lost closed by the end of the lock's validity, not by the end of the lease the move put it on")
	assert.ErrorIs(t, <-refreshed, locker.ErrNotHeld)
}
