package zookeeper_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/distlock/locker"
	"github.com/distlock/locker/internal/testenv"
	"github.com/distlock/locker/zookeeper"
)

// waits records what the zookeeper hooks say about waiters: which node
// each watched for, how often each listed the queue, and which were handed
// the lock without a listing.
type waits struct {
	mu       sync.Mutex
	watching map[string][]string // waiter's node -> the nodes it watched, in order
	listed   map[string]int
	handed   map[string]bool
	last     [2]string     // the latest watch: the waiter's node, the node it watches
	signal   chan struct{} // a tick on every watch set
}

func watchWaits(t *testing.T) *waits {
	w := &waits{watching: map[string][]string{}, listed: map[string]int{}, handed: map[string]bool{}, signal: make(chan struct{}, 100)}
	zookeeper.SetHooks(t, zookeeper.Hooks{
		Watching: func(self, pred string) {
			w.mu.Lock()
			w.watching[self] = append(w.watching[self], pred)
			w.last = [2]string{self, pred}
			w.mu.Unlock()
			w.signal <- struct{}{}
		},
		Listed: func(self string, _ int) {
			w.mu.Lock()
			w.listed[self]++
			w.mu.Unlock()
		},
		HandedOver: func(self string) {
			w.mu.Lock()
			w.handed[self] = true
			w.mu.Unlock()
		},
	})
	return w
}

// nextWatch waits for a waiter to set a watch and returns its node and the
// node it watches; with several watches set since the last call, the
// latest.
func (w *waits) nextWatch(t *testing.T) (self, pred string) {
	t.Helper()
	select {
	case <-w.signal:
	case <-time.After(10 * time.Second):
		t.Fatal("no waiter set a watch within 10s")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last[0], w.last[1]
}

func (w *waits) counts(self string) (watches, listings int, handed bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.watching[self]), w.listed[self], w.handed[self]
}

// acquireAsync runs l.Acquire(key) in a goroutine.
func acquireAsync(l locker.Locker, key string, opts ...locker.Option) <-chan acquired {
	ch := make(chan acquired, 1)
	go func() {
		lk, err := l.Acquire(context.Background(), key, opts...)
		ch <- acquired{lk, err}
	}()
	return ch
}

type acquired struct {
	lk  locker.Lock
	err error
}

func await(t *testing.T, ch <-chan acquired, what string) locker.Lock {
	t.Helper()
	select {
	case r := <-ch:
		require.NoError(t, r.err, what)
		t.Cleanup(func() { r.lk.Release(context.Background()) })
		return r.lk
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: no lock within 20s", what)
	}
	return nil
}

// queued is a key held by one Locker with a waiter of another queued
// right behind it, on the test server.
type queued struct {
	base string
	c    *zk.Conn // a plain connection, for looking at the nodes
	w    *waits
	held locker.Lock     // the holder's lock on "k"
	got  <-chan acquired // the waiter's Acquire
	self string          // the waiter's node
	pred string          // the node it watches
}

// queue opens the two Lockers under a base node named after name, takes
// "k" with the first and queues the second behind it, Acquire taking
// opts, and waits until the waiter watches the holder's node.
func queue(t *testing.T, name string, opts ...locker.Option) queued {
	raw := testenv.Get(t, testenv.ZooKeeperURL)
	q := queued{base: "/" + uniq(name)}
	a, b := open(t, raw+q.base), open(t, raw+q.base)
	q.c = dial(t, testenv.Hosts(t, raw), 10*time.Second)
	q.w = watchWaits(t)
	var err error
	q.held, err = a.Acquire(context.Background(), "k")
	require.NoError(t, err)
	q.got = acquireAsync(b, "k", opts...)
	q.self, q.pred = q.w.nextWatch(t)
	return q
}

// TestHandover: a waiter whose only node ahead is released takes the lock
// from the watch event, without listing the queue again; its fence is
// above the holder's, and its lock node is the one it queued.
func TestHandover(t *testing.T) {
	q := queue(t, "handover")
	ctx := context.Background()
	base, c, w, held, got, self, pred := q.base, q.c, q.w, q.held, q.got, q.self, q.pred
	_, listings, _ := w.counts(self)
	require.NoError(t, held.Release(ctx))
	lk := await(t, got, "waiter")

	_, after, handed := w.counts(self)
	assert.True(t, handed, "the waiter was not handed the lock")
	assert.Equal(t, listings, after, "listings by the waiter after its wake")
	f1, _ := held.Fence()
	f2, _ := lk.Fence()
	assert.Greater(t, f2, f1, "fence")
	nodes := lockNodes(t, c, base, "k")
	require.Len(t, nodes, 1)
	assert.True(t, strings.HasSuffix(self, "/"+nodes[0]), "the lock node %v is not the waiter's %s", nodes, self)
	assert.NotEqual(t, self, pred)
	d, err := lk.TTL(ctx)
	require.NoError(t, err)
	assert.Greater(t, d, time.Duration(0))
}

// TestHandoverNotFromForeignNode: a node without the Locker's data (an
// earlier version, another client) does not announce a move; its deletion
// alone hands nothing over. A bare move of such a node (delete and create
// under the same name in one transaction) must leave the waiter waiting.
func TestHandoverNotFromForeignNode(t *testing.T) {
	raw := testenv.Get(t, testenv.ZooKeeperURL)
	base := "/" + uniq("foreign")
	l := open(t, raw+base)
	c := dial(t, testenv.Hosts(t, raw), 10*time.Second)
	ctx := context.Background()
	w := watchWaits(t)
	// The key node, made by a lock taken and released.
	lk, err := l.Acquire(ctx, "k")
	require.NoError(t, err)
	require.NoError(t, lk.Release(ctx))
	var g [16]byte
	rand.Read(g[:])
	keyPath := base + "/" + zookeeper.EncodeKey("k")
	foreign, err := c.Create(keyPath+"/_c_"+hex.EncodeToString(g[:])+"-lock-", nil, zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)

	got := acquireAsync(l, "k")
	self, pred := w.nextWatch(t)
	require.Equal(t, foreign, pred)
	_, err = c.Multi(
		&zk.DeleteRequest{Path: foreign, Version: -1},
		&zk.CreateRequest{Path: foreign, Acl: zk.WorldACL(zk.PermAll), Flags: zk.FlagEphemeral},
	)
	require.NoError(t, err)
	_, pred = w.nextWatch(t) // woken, listed, and watching the moved node again
	assert.Equal(t, foreign, pred)
	select {
	case r := <-got:
		t.Fatalf("the waiter took the lock when the node ahead moved: %v", r.err)
	default:
	}
	require.NoError(t, c.Delete(foreign, -1))
	await(t, got, "waiter after the foreign node went")
	_, _, handed := w.counts(self)
	assert.False(t, handed, "handed over by a node that does not announce its moves")
}

// TestHandoverNotWithoutOwnNode: a waiter whose own node was deleted from
// outside before the node ahead went is not handed the lock: it queues
// again, and holds the lock on a node that exists.
func TestHandoverNotWithoutOwnNode(t *testing.T) {
	q := queue(t, "ownnode")
	ctx := context.Background()
	base, c, w, held, got, self := q.base, q.c, q.w, q.held, q.got, q.self
	require.NoError(t, c.Delete(self, -1))
	require.NoError(t, held.Release(ctx))
	lk := await(t, got, "waiter")
	_, _, handed := w.counts(self)
	assert.False(t, handed, "handed the lock on a node that was deleted")
	nodes := lockNodes(t, c, base, "k")
	require.Len(t, nodes, 1)
	assert.False(t, strings.HasSuffix(self, "/"+nodes[0]), "the lock is on the deleted node")
	_, st, err := c.Get(base + "/" + zookeeper.EncodeKey("k") + "/" + nodes[0])
	require.NoError(t, err)
	f, _ := lk.Fence()
	assert.Equal(t, uint64(st.Czxid), f, "the fence is not the czxid of the lock's node")
}

// TestHandoverNotAfterLongWait: a waiter that waited a third of its
// session timeout or more lists the queue once woken, so that its lock's
// TTL runs from that listing rather than from the watch set long ago.
func TestHandoverNotAfterLongWait(t *testing.T) {
	const ttl = 2 * time.Second
	q := queue(t, "longwait", locker.WithTTL(ttl))
	ctx := context.Background()
	w, held, got, self := q.w, q.held, q.got, q.self
	_, listings, _ := w.counts(self)
	time.Sleep(ttl/3 + 100*time.Millisecond) // only ever longer than the limit
	require.NoError(t, held.Release(ctx))
	lk := await(t, got, "waiter")
	_, after, handed := w.counts(self)
	assert.False(t, handed, "handed over after a long wait")
	assert.Equal(t, listings+1, after, "listings by the waiter after its wake")
	d, err := lk.TTL(ctx)
	require.NoError(t, err)
	assert.Greater(t, d, ttl/2, "the lock's remaining TTL")
}

// TestHandoverAcrossReconnect: the waiter's connection drops while it
// waits; meanwhile its own node is deleted from outside and the node ahead
// is released. On the reconnect both watches fire in no particular order,
// so the waiter must not be handed the lock: it queues again. Run a few
// times, as the order differs from run to run.
func TestHandoverAcrossReconnect(t *testing.T) {
	raw := testenv.Get(t, testenv.ZooKeeperURL)
	p := testenv.Proxy(t, testenv.Hosts(t, raw)[0])
	base := "/" + uniq("reconnect")
	a := open(t, raw+base)
	b := open(t, "zookeeper://"+p.Addr()+base)
	c := dial(t, testenv.Hosts(t, raw), 10*time.Second)
	ctx := context.Background()
	w := watchWaits(t)
	ttl := locker.WithTTL(10 * time.Second) // the session outlives the drop
	for round := range 3 {
		held, err := a.Acquire(ctx, "k")
		require.NoError(t, err)
		got := acquireAsync(b, "k", ttl)
		self, _ := w.nextWatch(t)
		p.Cut()
		require.NoError(t, c.Delete(self, -1))
		require.NoError(t, held.Release(ctx))
		p.Restore()
		lk := await(t, got, "waiter")
		_, _, handed := w.counts(self)
		assert.False(t, handed, "round %d: handed the lock on a node deleted while disconnected", round)
		nodes := lockNodes(t, c, base, "k")
		require.Len(t, nodes, 1)
		assert.False(t, strings.HasSuffix(self, "/"+nodes[0]), "round %d: the lock is on the deleted node", round)
		require.NoError(t, lk.Release(ctx))
		for len(w.signal) > 0 {
			<-w.signal
		}
	}
}
