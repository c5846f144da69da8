package etcd

import (
	"io"
	"log/slog"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/locker/backend"
)

// QueuePrefix is the etcd key prefix under which the queue of lock key
// lives in namespace ns.
func QueuePrefix(ns, key string) string { return ns + "/" + encodeKey(key) + "/" }

// SetHook makes f observe waiters ("watch": waiter entry, watched entry;
// "check": waiter entry), puts of queue entries ("put": entry), lease
// keepalives ("keepalive": lease id in hex), held locks ("held": entry,
// before the watcher learns of it) and the watcher ("resync", "resynced",
// "change": etcd key, PUT or DELETE) until restore is called.
func SetHook(f func(event, key, other string)) (restore func()) {
	hookFn.Store(&f)
	return func() { hookFn.Store(nil) }
}

// Why the watcher reports a lock lost.
var (
	ErrEntryDeleted     = errEntryDeleted
	ErrEntryOverwritten = errEntryOverwritten
	ErrEntryMoved       = errEntryMoved
)

// SetIdleLinger changes how long an unused lease is kept, until restore.
func SetIdleLinger(d time.Duration) (restore func()) {
	old := idleLinger
	idleLinger = d
	return func() { idleLinger = old }
}

// KeepAliveInterval is how long after the sending of a lease's last
// answered keepalive the next one is sent, for a lease of ttl.
func KeepAliveInterval(ttl time.Duration) time.Duration { return ttl / keepAlivesPerTTL }

// NewDriver returns the driver of a Locker over c with namespace ns, for
// tests that call it directly. The caller closes it.
func NewDriver(c *clientv3.Client, ns string) backend.Driver {
	return newDriver(c, false, ns, time.Second, slog.New(slog.NewTextHandler(io.Discard, nil)))
}
