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

// Hooks observe the driver from tests: the driver's own hooks, whose
// fields say when each runs.
type Hooks = hooks

// SetHooks installs h for the rest of the test, or until restore is
// called. restore may be called more than once; it removes h only if no
// later SetHooks replaced it.
func SetHooks(t testing.TB, h Hooks) (restore func()) {
	p := &h
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
