package etcd

import (
	"io"
	"log/slog"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/locker/backend"
)

// QueuePrefix is the etcd key prefix under which the queue of lock key
// lives in namespace ns.
func QueuePrefix(ns, key string) string { return ns + "/" + encodeKey(key) + "/" }

// Hooks observe the driver from tests. Each runs on the goroutine of its
// event, which waits for it: Keepalive on a goroutine of its own, which a
// test may block without holding up the lease's lapse; Resync, Resynced and
// Change on the watcher's.
type Hooks struct {
	Watching func(self, watched string) // a waiter is about to wait for watched, one entry ahead of its own (its predecessor, when exclusive), to go
	// WatchingAll: a waiter is about to wait for any of watched, every
	// entry ahead of its own, to go.
	WatchingAll func(self string, watched []string)
	Checking    func(self string)     // a waiter is about to look at the entries before its own
	Put         func(entry string)    // the put of a queue entry is about to be sent
	Keepalive   func(lease string)    // a keepalive of the lease (id in hex) is about to be sent
	Held        func(entry string)    // a lock was taken, before the watcher learns of it
	Resync      func()                // the watcher starts, before it looks at every held entry
	Resynced    func()                // the watcher looked at every held entry, before it starts the watch
	Change      func(key, typ string) // the watcher applied a change (typ PUT or DELETE) of etcd key
	Due         func()                // the watcher is about to check whether a lock has been held for watchAfter
	Moved       func(entry string)    // a move's transaction returned, before its outcome is taken in
	Removing    func(entry string)    // the delete of a lost (or expired) lock's entry was started, on the goroutine that started it: a test may block it while the delete goes on
}

// SetHooks installs h for the rest of the test, or until restore is
// called. restore may be called more than once; it removes h only if no
// later SetHooks replaced it.
func SetHooks(t testing.TB, h Hooks) (restore func()) {
	p := &hooks{watching: h.Watching, watchingAll: h.WatchingAll, checking: h.Checking, put: h.Put, keepalive: h.Keepalive, held: h.Held, resync: h.Resync, resynced: h.Resynced, change: h.Change, due: h.Due, moved: h.Moved, removing: h.Removing}
	testHooks.Store(p)
	restore = func() { testHooks.CompareAndSwap(p, nil) }
	t.Cleanup(restore)
	return restore
}

// Why the watcher reports a lock lost.
var (
	ErrEntryDeleted     = errEntryDeleted
	ErrEntryOverwritten = errEntryOverwritten
	ErrEntryMoved       = errEntryMoved
	ErrLeaseExpired     = errLeaseExpired
)

// SetWatchAfter changes how long a lock is held before the watch must
// cover it, for the rest of the test; 0 starts the watch with the first
// lock, as the tests of the watch itself want.
func SetWatchAfter(t testing.TB, d time.Duration) {
	old := watchAfter.Swap(int64(d))
	t.Cleanup(func() { watchAfter.Store(old) })
}

// SetIdleLinger changes how long an unused lease is kept, for the rest of
// the test.
func SetIdleLinger(t testing.TB, d time.Duration) {
	old := idleLinger
	idleLinger = d
	t.Cleanup(func() { idleLinger = old })
}

// KeepAliveInterval is how long after the sending of a lease's last
// answered keepalive the next one is sent, for a lease of ttl.
func KeepAliveInterval(ttl time.Duration) time.Duration { return ttl / keepAlivesPerTTL }

// NewDriver returns the driver of a Locker over c with namespace ns, for
// tests that call it directly. The caller closes it.
func NewDriver(c *clientv3.Client, ns string) backend.Driver {
	return newDriver(c, false, ns, time.Second, slog.New(slog.NewTextHandler(io.Discard, nil)))
}

// ClaimOf returns the claim the name of entry key, in the queue whose
// prefix is qp, carries.
func ClaimOf(qp, key string) backend.Claim { return claimOf(qp, []byte(key)) }

// ClaimSuffix is what the name of an entry for a hold of kind, limit and
// weight bears after the lease id (and its number).
func ClaimSuffix(kind backend.Kind, limit, weight int) string {
	return claimSuffix(backend.Request{Kind: kind, Limit: limit, Weight: weight})
}
