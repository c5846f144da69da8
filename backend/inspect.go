package backend

import (
	"context"
	"time"
)

// Inspector is implemented by drivers that can tell who holds a key and
// free it by force: the operator's tools behind package locker's Inspect
// and ForceRelease. Without it those return an error wrapping
// locker.ErrUnsupported.
//
// key is the full key as the driver sees it in Request.Key (the Locker's
// prefix included), already validated.
type Inspector interface {
	// Inspect reports the key's holder, if any, as the servers see it
	// now. A free key is a Holder with Held false and a nil error; the
	// error is for a question that could not be answered.
	Inspect(ctx context.Context, key string) (Holder, error)
	// ForceRelease deletes the key's lock, whoever holds it, and wakes
	// its waiters as a release does. It reports whether it deleted
	// anything: false with a nil error means that no one held the key
	// (or the holder it found left before the delete landed). It never
	// deletes a waiter's place in a queue. A driver over several servers
	// (Redlock) releases the key on every server it reaches, and returns
	// true with an error naming the servers it could not reach.
	//
	// It breaks mutual exclusion when the holder is alive: that holder
	// goes on believing it holds the lock until its Lost closes.
	ForceRelease(ctx context.Context, key string) (released bool, err error)
}

// Holder is what an Inspector found of a key. Fields that a backend cannot
// tell come with their Known flag false; the zero Holder is a free key.
type Holder struct {
	// Held reports that someone holds the key. The other fields describe
	// the holder and are zero when Held is false, except Waiters and
	// Detail.
	Held bool
	// Token is the holder's Lock.Token, where the backend stores it on
	// the server (memory, redis, redlock, postgres); "" where it does not
	// (zookeeper, etcd, whose queue entries are named otherwise).
	Token string
	// Fence is the holder's fencing token, meaningful when Fenced is
	// true; see each backend's Inspect for how it relates to the
	// holder's Lock.Fence.
	Fence  uint64
	Fenced bool
	// TTL is how long the server keeps the lock unless it is refreshed,
	// meaningful when TTLKnown is true. It bounds the holder's Lock.Until
	// from above: the holder's own validity ends earlier, by its
	// clock-drift allowance at least.
	TTL      time.Duration
	TTLKnown bool
	// Waiters is how many acquisitions queue for the key behind the
	// holder, meaningful when WaitersKnown is true: only backends that
	// keep a queue on the server (memory, zookeeper, etcd) can count
	// them. Elsewhere waiters wait for release notices or poll, and
	// nothing on the server counts them.
	Waiters      int
	WaitersKnown bool
	// Value is the holder's value (Request.Value), nil when none.
	Value []byte
	// Detail is what else the backend can say, for display: server key
	// names, node paths, lease ids, per-server answers. Its names are
	// backend-specific; see each backend's Inspect. Nil when there is
	// nothing to add.
	Detail map[string]string
	// Holds lists every holder of the key, in grant order where the
	// backend knows it: one for a mutex or a write lock, each shared
	// holder of a read lock, each permit holder of a semaphore. The
	// fields above describe the first of them. Nil when no one holds the
	// key.
	Holds []Hold
	// Queue lists the waiters, in queue order, where the backend keeps a
	// queue on the server (WaitersKnown); nil elsewhere.
	Queue []Hold
}

// Hold is one holder, or one waiter, of a key as an Inspector found it.
// Fields a backend cannot tell are zero, with their Known flag false.
type Hold struct {
	// Kind is the hold's; Limit and Weight a Permit's (the key's
	// permits, and how many of them the hold takes).
	Kind          Kind
	Limit, Weight int
	// Value is the hold's value (Request.Value, ValueSetter), nil when it
	// has none or the backend stores none.
	Value []byte
	// Token, Fence and TTL are as in Holder.
	Token    string
	Fence    uint64
	Fenced   bool
	TTL      time.Duration
	TTLKnown bool
	// Detail is as in Holder: node paths, lease ids.
	Detail map[string]string
}
