package etcd_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/locker"
	"github.com/distlock/locker/backend"
	"github.com/distlock/locker/etcd"
	"github.com/distlock/locker/internal/testenv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A lock the Locker finds lost while its entry is still on the server (put
// on a lease the lock is not on, or left on another lease by a move when
// the lease it was on ends) is deleted by the Locker, which frees the key.
// Lost must close first: a waiter granted the key before it would hold it
// while the old holder, told nothing yet, still believed it did. The tests
// hold the goroutine that found the loss right after it started the
// delete, until a waiter of another Locker has been granted the key, and
// look at the old holder's Lost at that moment. Before Lost closed first,
// it was still open.

// handoff follows the key of holder, whose entry is entry, from the
// moment its loss is found to a waiter's grant.
type handoff struct {
	holder locker.Lock
	entry  string

	once    sync.Once
	queued  chan struct{} // closed when the waiter watches entry
	granted chan struct{} // closed when the waiter holds the key, after lostAtGrant is set
	lost    bool          // whether the holder's Lost was closed when the waiter got the key
	err     error         // the waiter's Acquire
	removed chan struct{} // closed when the delete of entry was started
	waited  chan bool     // whether the delete's goroutine saw the grant before it went on
}

// newHandoff installs the hooks for a handoff from holder; moved, if not
// nil, is the Moved hook.
func newHandoff(t *testing.T, holder locker.Lock, entry string, moved func(entry string)) *handoff {
	h := &handoff{
		holder: holder, entry: entry,
		queued: make(chan struct{}), granted: make(chan struct{}),
		removed: make(chan struct{}), waited: make(chan bool, 1),
	}
	var queuedOnce sync.Once
	etcd.SetHooks(t, etcd.Hooks{
		Watching: func(_, watched string) {
			if watched == entry {
				queuedOnce.Do(func() { close(h.queued) })
			}
		},
		Moved: moved,
		Removing: func(e string) {
			if e != entry {
				return
			}
			h.once.Do(func() {
				close(h.removed)
				// Whatever comes after the delete on this goroutine waits
				// until the delete has let the waiter in (a bound, so that
				// a broken delete fails the test rather than hangs it).
				select {
				case <-h.granted:
					h.waited <- true
				case <-time.After(30 * time.Second):
					h.waited <- false
				}
			})
		},
	})
	return h
}

// queue starts waiter's Acquire of key and waits until it watches the
// holder's entry.
func (h *handoff) queue(t *testing.T, waiter locker.Locker, key string) {
	t.Helper()
	go func() {
		lk, err := waiter.Acquire(context.Background(), key, locker.WithTTL(watchTTL))
		h.lost = testenv.Closed(h.holder.Lost())
		h.err = err
		close(h.granted)
		if err == nil {
			lk.Release(context.Background())
		}
	}()
	select {
	case <-h.queued:
	case <-time.After(30 * time.Second):
		t.Fatal("the waiter did not queue behind the holder within 30s")
	}
}

// check waits for the delete of the holder's entry and the waiter's grant,
// and checks that the holder's Lost was closed by then.
func (h *handoff) check(t *testing.T) {
	t.Helper()
	select {
	case <-h.removed:
	case <-time.After(30 * time.Second):
		t.Fatal("the Locker did not delete the lost lock's entry within 30s")
	}
	if !<-h.waited {
		t.Fatal("the waiter was not granted the key within 30s of the delete")
	}
	require.NoError(t, h.err, "the waiter's Acquire")
	if !h.lost {
		t.Error("a waiter was granted the key while the old holder's Lost was still open: the Locker deleted the lost lock's entry before it told the holder")
	}
	<-h.holder.Lost()
}

// TestLostElsewhereTellsFirst: the watcher finds our entry put on no
// lease by someone else; the lock is lost, and the Locker deletes the
// entry, which our lease no longer bounds.
func TestLostElsewhereTellsFirst(t *testing.T) {
	etcd.SetWatchAfter(t, 0) // the watch from the first lock on
	url := testenv.Get(t, testenv.EtcdURL)
	raw := rawClient(t, testenv.Hosts(t, url)...)
	holder, waiter := open(t, url), open(t, url)
	ctx := context.Background()
	key := uniqueKey("elsewhere-tells-first")
	lk := acquireUnrefreshed(t, holder, key)
	entry := entryOf(t, raw, key)
	h := newHandoff(t, lk, entry, nil)
	h.queue(t, waiter, key)

	_, err := raw.Put(ctx, entry, "")
	require.NoError(t, err)
	h.check(t)
	wantLostBy(t, lk, etcd.ErrEntryMoved)
}

// TestLostLeaseTellsFirst: a Refresh to another TTL moves the entry to
// that TTL's lease; before its reply is taken in, the lease the lock was
// on ends. The lock is lost with that lease, and the Locker deletes the
// entry, which lives on on the other lease.
func TestLostLeaseTellsFirst(t *testing.T) {
	etcd.SetWatchAfter(t, time.Hour) // no watch: the lease alone tells
	url := testenv.Get(t, testenv.EtcdURL)
	raw := rawClient(t, testenv.Hosts(t, url)...)
	holder, waiter := open(t, url), open(t, url)
	ctx := context.Background()
	// The old lease is found revoked at its next keepalive, a sixth of
	// from later at most: well within the lock's validity, so that the
	// lease, not the validity, ends the lock.
	const from, to = 9 * time.Second, 15 * time.Second
	key := uniqueKey("lease-tells-first")
	lk, err := holder.Acquire(ctx, key, locker.WithTTL(from), locker.WithAutoRefresh(false))
	require.NoError(t, err)
	t.Cleanup(func() { lk.Release(context.Background()) })
	entry := entryOf(t, raw, key)
	old := leaseOf(t, raw, key)

	applied, reply := make(chan struct{}), make(chan struct{})
	var movedOnce sync.Once
	h := newHandoff(t, lk, entry, func(e string) {
		if e == entry {
			movedOnce.Do(func() {
				close(applied)
				<-reply
			})
		}
	})
	h.queue(t, waiter, key)
	refreshed := make(chan error, 1)
	go func() { refreshed <- lk.Refresh(ctx, to) }()
	<-applied
	g, err := raw.Get(ctx, entry)
	require.NoError(t, err)
	require.Len(t, g.Kvs, 1)
	require.NotEqual(t, int64(old), g.Kvs[0].Lease, "the move applied")
	_, err = raw.Revoke(ctx, old)
	require.NoError(t, err)
	h.check(t)
	close(reply)
	assert.ErrorIs(t, <-refreshed, locker.ErrNotHeld)
	_, err = lk.TTL(ctx)
	assert.ErrorIs(t, err, etcd.ErrLeaseExpired, "Lost closed for the end of the lease")
}

// TestTTLChecksLease: TTL and Refresh agree on what makes a lock ours:
// its entry with our create revision, on a lease the lock is on. An entry
// put on no lease by someone else keeps our create revision, but our lease
// no longer bounds it: both must say ErrNotHeld, close Lost, and delete
// the entry. (TTL used to check the create revision alone, and reported
// the lease's time left for an entry that lease no longer bounded.)
func TestTTLChecksLease(t *testing.T) {
	etcd.SetWatchAfter(t, time.Hour) // no watch: the call alone must find it
	url := testenv.Get(t, testenv.EtcdURL)
	raw := rawClient(t, testenv.Hosts(t, url)...)
	l := open(t, url)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		call func(lk locker.Lock) error
	}{
		{"Refresh", func(lk locker.Lock) error { return lk.Refresh(ctx, watchTTL) }},
		{"TTL", func(lk locker.Lock) error { _, err := lk.TTL(ctx); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := uniqueKey("ttl-lease")
			lk := acquireUnrefreshed(t, l, key)
			// Ours still: after a move to another lease, the call succeeds.
			require.NoError(t, lk.Refresh(ctx, 2*watchTTL))
			require.NoError(t, tc.call(lk), "%s of a lock moved to another lease of ours", tc.name)
			entry := entryOf(t, raw, key)
			t.Cleanup(func() { raw.Delete(ctx, entry) })
			_, err := raw.Put(ctx, entry, "")
			require.NoError(t, err)
			err = tc.call(lk)
			require.ErrorIs(t, err, locker.ErrNotHeld, "%s of a lock whose entry was put on no lease", tc.name)
			wantLostBy(t, lk, etcd.ErrEntryMoved)
			testenv.WaitFor(t, 10*time.Second, "the entry put on no lease deleted", func() bool {
				resp, err := raw.Get(ctx, entry, clientv3.WithCountOnly())
				return err == nil && resp.Count == 0
			})
		})
	}
}

// TestStaleReleaseSparesReusedName: entry names are reused (a Locker's
// entries are named after its lease, to keep etcd's index small), though
// only once the entry is known to be deleted. A Release can still come
// after that: package locker sends one when the holder releases a lock
// whose validity has run out, while the driver's Expire deletes the entry
// (Expire frees the name, then tells Lost); another goroutine of the same
// process may take the key meanwhile and get the same name. The late
// Release must then leave the new entry alone: Release compares the
// create revision. (With a bare delete here, the conformance suite and
// the randomized fault test passed: neither makes a Release reach the
// driver after its lock's name was reused.)
func TestStaleReleaseSparesReusedName(t *testing.T) {
	url := testenv.Get(t, testenv.EtcdURL)
	hosts := testenv.Hosts(t, url)
	raw := rawClient(t, hosts...)
	ns := uniqueKey("stale-release")
	d := etcd.NewDriver(rawClient(t, hosts...), ns)
	t.Cleanup(func() { d.Close() })
	ctx := context.Background()
	req := backend.Request{Key: "k", Token: "t", TTL: watchTTL}
	prefix := etcd.QueuePrefix(ns, "k")

	a, err := d.TryAcquire(ctx, req)
	require.NoError(t, err)
	first := queue(t, raw, prefix)
	require.Len(t, first, 1)
	// A's validity ran out: its entry is deleted, and the name is free.
	a.Held.(backend.Expirer).Expire()
	require.Empty(t, queue(t, raw, prefix), "A's entry after Expire")
	b, err := d.TryAcquire(ctx, req)
	require.NoError(t, err)
	second := queue(t, raw, prefix)
	require.Equal(t, first, second, "B's entry is named as A's was")
	require.Greater(t, b.Fence, a.Fence)

	err = a.Held.Release(ctx)
	if !errors.Is(err, backend.ErrNotHeld) {
		t.Errorf("A's Release after its entry was deleted and its name reused = %v, want ErrNotHeld", err)
	}
	g, err := raw.Get(ctx, second[0])
	require.NoError(t, err)
	if len(g.Kvs) != 1 || g.Kvs[0].CreateRevision != int64(b.Fence) {
		t.Fatalf("B's entry after A's late Release: %v, want it there with create revision %d", g.Kvs, b.Fence)
	}
	require.NoError(t, b.Held.Release(ctx))
}
