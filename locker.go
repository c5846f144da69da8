// Package locker provides distributed locks behind one interface, with
// backends for a single Redis, Redlock, ZooKeeper, etcd, PostgreSQL and an
// in-process store, chosen by URL:
//
//	l, err := locker.Open(ctx, os.Getenv("LOCKER_URL")) // e.g. "redis://127.0.0.1:6379"
//	if err != nil { ... }
//	defer l.Close()
//	err = locker.Do(ctx, l, "orders/42", func(ctx context.Context, lock locker.Lock) error {
//		// ctx is cancelled if the lock is lost.
//		return process(ctx, lock)
//	})
//
// A backend package registers its URL schemes when imported, so import the
// ones a program may use for their side effect:
//
//	import _ "github.com/distlock/locker/memory"
//
// # Semantics
//
// Every backend gives the same guarantees, checked by package conformance:
// at most one holder of a key at a time while the holder is not paused past
// its TTL; a crashed holder's lock expires within its TTL plus the backend's
// documented slack; Release and Refresh never touch another holder's lock;
// Lost is closed when the lock is released or may no longer be held.
//
// By default a held lock is refreshed by a watchdog at a third of its TTL
// for as long as the process lives and the Locker is open
// ([WithAutoRefresh], [WithMaxHold]), so the TTL bounds how long a crashed
// process blocks others, not how long work may take.
//
// # Shared holds and semaphores
//
// A key is a mutex, a read/write lock or a semaphore, as its clients ask:
//
//	w, err := l.Acquire(ctx, "catalog")                   // exclusive: a mutex, or a writer
//	r, err := l.Acquire(ctx, "catalog", locker.Shared())  // a reader beside other readers
//	p, err := l.Acquire(ctx, "exports", locker.Limit(4))  // one of 4 permits
//	q, err := l.Acquire(ctx, "exports", locker.Limit(4), locker.Weight(2))
//
// Every hold is a Lock like any other: Lost, Until, Refresh, Release, the
// watchdog, Do and telemetry work the same. Shared holds coexist with each
// other and never with an exclusive one; a semaphore's holds never take
// more than its limit of permits together. All clients of a key must agree
// on what it is: a request for another limit, or a read/write request on a
// semaphore's key (and the reverse), fails with ErrKindMismatch while the
// key has holders or waiters.
//
// Each backend decides admission by one rule, of which the mutex is the
// simplest case (package backend's Admit): where the backend keeps a queue
// (memory, ZooKeeper, etcd), holds are granted in queue order, and a waiter
// that does not fit (a writer behind readers, a request for 3 permits when
// 2 are free) blocks the ones behind it, so neither writers nor large
// requests starve. Redis, Redlock and PostgreSQL keep no queue: a waiter
// takes the key when it next tries and fits, and a waiting writer marks the
// key so that no new reader is granted until the writer gets in or stops
// waiting (the mark lapses at the writer's TTL if it crashes); a large
// semaphore request can still wait as long as smaller ones overlap.
// Capabilities.Shared and Capabilities.Permits say what a
// backend admits; a kind it does not admit fails with ErrUnsupported.
//
// Fences are strictly increasing with every grant on a key, in grant
// order, whatever the kind: an exclusive holder's fence exceeds that of
// every earlier holder, so a resource that rejects a writer's fence below
// the largest it has seen rejects a paused writer's write after any later
// grant. Shared holders' fences order them against writers only: a
// resource checks a reader's fence against the largest fence of a writer
// it has seen, since readers that overlap may reach it in any order.
//
// # Leader election
//
// An Election is a lock on a name with a value, in the shape of etcd's
// concurrency.Election, on every backend:
//
//	e := locker.NewElection(l, "billing/scheduler")
//	lead, err := e.Campaign(ctx, []byte(hostname)) // blocks until this client leads
//	if err != nil { ... }
//	defer e.Resign(ctx)
//	term, _ := lead.Fence() // pass it with every write; <-lead.Lost() ends the term
//
// Campaign returns the leadership as a Lock: the watchdog keeps it, Lost
// closes when it ends, and its fence is the term, strictly larger for each
// new leader, so that a resource that checks terms rejects a deposed
// leader's late writes (Redlock mints no terms). Proclaim replaces the
// leader's value, Resign hands over, Leader reads the current leader and
// Observe follows every change, from the backend's watches or notices
// rather than a poll per observer.
//
// Any hold may carry a small value (WithValue, Lock.SetValue) that Inspect
// reports; Capabilities.MaxValueLen says how large.
//
// # Reentrancy is opt-in, per owner
//
// A Lock belongs to the code that acquired it, not to a goroutine or a
// process. Goroutines of one process sharing a Locker take turns on a key
// like any other clients (that is normal use, not an error), so code that
// calls Acquire on a key it already holds waits for itself until its
// context ends. Pass the Lock down to the code that needs it, or name an
// owner: under a context from [WithOwner], an Acquire of a key the owner
// already holds through the same Locker returns at once with a new handle
// on the same hold ([HoldCount] tells how many), and the key is released
// with the last handle, as Redisson's locks count holds per thread. The
// same owner through another Locker, or in another process, is another
// client.
//
// # Validity, refresh and loss
//
// Every lock has a local validity deadline on the process's monotonic
// clock, reported by [Lock.Until]. Lost closes no later than that
// deadline (a timer loop may observe it a little late; Until does not), and
// the deadline never runs past the moment the server may give the lock to
// someone else, allowing for the backend's clock-drift rule (by default 1%
// of the TTL plus 2 ms). Precisely:
//
//   - After an acquisition whose request was sent at s, the deadline is
//     s + TTL - drift (Redlock: less the time the vote took).
//   - Refreshes of one lock, Refresh and the watchdog's, run one at a
//     time, and each starts its clock once its turn has come: after a
//     refresh sent at s with TTL t succeeds, the deadline is s + t - drift.
//     Two refreshes in flight at once could reach the server in either
//     order and leave it with the TTL this process did not believe.
//   - A refresh replaces the server's TTL when it is applied, which may
//     be at any moment between its sending and its reply (or without a
//     reply ever arriving): from the moment a refresh sent at s with TTL
//     t is in flight, the deadline is at most s + t - drift. A refresh
//     with a TTL shorter than the time left thus shortens the validity
//     before it is sent.
//   - A refresh that failed without an answer (a timeout, a dropped
//     connection, a cancelled context) may still reach the server later,
//     after any refresh that follows it. It cuts the deadline to its own
//     s + t - drift, and no later deadline of the lock assumes a TTL
//     longer than its t.
//   - Where a lock lives as long as a lease or session shared by many
//     locks (etcd, ZooKeeper), the deadline also never passes the lease's
//     or session's validity as last confirmed by the server.
//   - Lost closes earlier when the lock is released, when a refresh finds
//     it gone (ErrNotHeld), or when the backend learns it is gone (a
//     session expired, a lease revoked). A refresh that succeeds after
//     Lost closed does not revive the lock.
//
// The server side of the bargain is the backend's: each backend's package
// documentation says what its server does with the TTL. What no lease can
// cover is a holder paused past Until; fencing covers that.
//
// # Fencing
//
// A lease cannot protect against a holder that is paused (a GC pause, a
// stopped VM) past its TTL: it wakes up believing it still holds the lock.
// Backends that can mint a safe fencing token return one from
// [Lock.Fence]: strictly larger for every successive holder of a key. Pass
// it to the protected resource and have the resource reject any write with
// a token smaller than the largest it has seen. Redlock cannot mint a safe
// token and says so (ok is false).
//
// # Errors
//
// Errors wrap the sentinels below; test them with errors.Is. Errors from a
// backend's client library are wrapped, never replaced, and stay reachable
// with errors.As. Every error returned by a Locker or a Lock is an
// [*OpError] naming the operation and the key.
//
// # URLs
//
// Open accepts any scheme a backend registered. Parameters every scheme
// accepts: ttl (the default TTL, a Go duration such as 10s) and prefix
// (prepended to every key). Unknown parameters are an error that names them.
package locker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/distlock/locker/backend"
)

// Locker acquires locks on one backend. It is safe for concurrent use.
type Locker interface {
	// Acquire blocks until key is held, ctx ends, or an error occurs.
	Acquire(ctx context.Context, key string, opts ...Option) (Lock, error)
	// TryAcquire makes one attempt; ErrNotAcquired if someone else holds key.
	TryAcquire(ctx context.Context, key string, opts ...Option) (Lock, error)
	// Capabilities says what this backend guarantees (Fencing, FIFO, ...).
	Capabilities() Capabilities
	// Close releases every lock this Locker holds, stops its watchdog and
	// closes the clients it opened itself. Calls after Close return
	// ErrClosed; a second Close returns nil.
	Close() error
}

// Lock is a held lock. It is safe for concurrent use.
type Lock interface {
	// Key returns the key as given to Acquire.
	Key() string
	// Token returns a string unique to this acquisition.
	Token() string
	// Fence returns the fencing token: strictly increasing per key across
	// successive holders. ok is false where the backend cannot mint a safe
	// one (see Capabilities.Fencing).
	//
	// A backend may mint the fence on demand (Redis does): the first call
	// then makes one round trip, bounded by the lock's validity, and mints
	// a fence only while the lock is still held; later calls return the
	// same fence at once. If that first call finds the lock lost or cannot
	// reach the server, ok is false: do not write to a fenced resource
	// without a fence. Ask for the fence right after acquiring, before the
	// work, as a resource checked by fences needs it anyway.
	Fence() (fence uint64, ok bool)
	// Refresh resets the lock's TTL to ttl (and uses ttl for later
	// automatic refreshes). It returns ErrNotHeld once the lock is lost.
	Refresh(ctx context.Context, ttl time.Duration) error
	// TTL returns the remaining validity of the lock.
	TTL(ctx context.Context) (time.Duration, error)
	// Release frees the lock. It never deletes another holder's lock.
	//
	// The release is not cut short by the cancellation of ctx: it goes
	// out, and is waited for, even when ctx is already cancelled or past
	// its deadline (a deferred Release with a handler's request context),
	// for at most 10 seconds; ctx's values (a trace) are kept. A deadline
	// of ctx that has not passed when Release is called still bounds the
	// wait. If the release fails, Err says that the server may hold the
	// lock until its TTL runs out, and a later Release tries again.
	//
	// Release returns ErrNotHeld, wrapping the reason, if the lock was
	// already released or Lost had closed before the call (its validity
	// ran out, WithMaxHold, a refresh or the backend found it gone); it
	// still deletes the lock from the server if it is there, so that the
	// key is free at once. Once Close has begun, Release returns ErrClosed
	// and lets the lock go here (Lost closes); Close deletes it from the
	// server.
	Release(ctx context.Context) error
	// Lost returns a channel closed when the lock is released or may no
	// longer be held: a refresh found it gone, the backend reported it
	// gone, or its validity ran out on the local clock without a
	// successful refresh.
	Lost() <-chan struct{}
	// Err returns nil while the lock is held. Once Lost is closed it
	// returns why: an error wrapping ErrNotHeld and, where the cause is
	// the Locker's own, one of ErrReleased, ErrExpired or ErrMaxHold;
	// otherwise the backend's account of a lock found gone (a refresh
	// found another holder or none, a session expired, a lease was
	// revoked).
	Err() error
	// SetValue replaces the value stored with the hold (WithValue), which
	// Inspect and an Election's Leader and Observe report, without
	// touching the hold itself: its TTL, fence and place stay. An empty
	// value removes it. It returns ErrNotHeld once the lock is lost,
	// ErrInvalidValue for a value longer than Capabilities.MaxValueLen,
	// and ErrUnsupported on a backend that stores no values. When it
	// fails otherwise (a timeout), the new value may or may not be in
	// place.
	SetValue(ctx context.Context, value []byte) error
	// Until returns the end of the lock's local validity on this
	// process's clock: the moment Lost closes unless a refresh moves it
	// first. The server keeps the lock at least until then, allowing for
	// clock drift, so a holder that finishes its work (and its writes) by
	// Until is safe without fencing. Once Lost is closed, Until returns the
	// moment it closed, or the deadline if that was earlier.
	Until() time.Time
}

// Capabilities says what a backend guarantees; see backend.Capabilities
// for the fields.
type Capabilities = backend.Capabilities

// Kind is what a hold takes of its key: backend.Exclusive (the whole key,
// the default), backend.Shared (Shared) or backend.Permit (Limit), as
// Inspect reports it in Holder.Holds.
type Kind = backend.Kind

// Hold is one holder or waiter of a key as Inspect found it; see
// backend.Hold.
type Hold = backend.Hold

// Errors returned by Lockers and Locks, wrapped in an *OpError.
var (
	// ErrNotAcquired: the key is held by someone else (TryAcquire).
	ErrNotAcquired = backend.ErrNotAcquired
	// ErrNotHeld: the lock was lost (expired, taken over) or released.
	ErrNotHeld = backend.ErrNotHeld
	// ErrClosed: the Locker was closed.
	ErrClosed = backend.ErrClosed
	// ErrInvalidKey: the key is empty or longer than the backend accepts.
	ErrInvalidKey = backend.ErrInvalidKey
	// ErrInvalidTTL: the TTL is not positive or outside the backend's range.
	ErrInvalidTTL = backend.ErrInvalidTTL
	// ErrKindMismatch: the request's kind or limit disagrees with the
	// key's holders or waiters (Shared, Limit).
	ErrKindMismatch = backend.ErrKindMismatch
	// ErrInvalidValue: a hold's value is longer than the backend stores
	// (WithValue, Lock.SetValue; Capabilities.MaxValueLen).
	ErrInvalidValue = backend.ErrInvalidValue
	// ErrInvalidOption: the call's options, or the Locker's defaults, are
	// wrong alone or together (Limit(0), Weight above its Limit, Shared
	// with Limit, a nil Option); nothing reached the backend.
	ErrInvalidOption = errors.New("invalid option")
)

// Why a lock stopped being held, as Lock.Err reports it (wrapped with
// ErrNotHeld) when the cause is the Locker's own.
var (
	// ErrReleased: Release was called (by the holder, by Do, or by Close).
	ErrReleased = errors.New("released")
	// ErrExpired: the lock's validity ran out on the local clock before a
	// refresh succeeded (the watchdog's failed, or auto-refresh was off).
	ErrExpired = errors.New("validity ran out on the local clock without a successful refresh")
	// ErrMaxHold: WithMaxHold ended the automatic refreshes and the
	// validity of the last one ran out.
	ErrMaxHold = errors.New("held for its maximum hold time (WithMaxHold): refreshes ended and its validity ran out")
)

// errNilContext is returned for a nil context.Context, which the context
// package forbids (pass context.Background or context.TODO instead).
var errNilContext = errors.New("nil context (use context.Background())")

// OpError is the error returned by every Locker and Lock method. It names
// the operation and the key, and wraps the cause.
type OpError struct {
	// Op is the operation: "acquire", "try-acquire", "refresh", "ttl",
	// "release", "set-value", "close", "do" (Do's own errors: a nil fn,
	// the lock lost while fn ran), "inspect", "force-release", or an
	// Election's "campaign", "proclaim", "resign" and "leader".
	Op  string
	Key string
	Err error
}

// maxErrKey bounds how much of a key an error message quotes.
const maxErrKey = 64

func (e *OpError) Error() string {
	key := e.Key
	if len(key) > maxErrKey {
		key = key[:maxErrKey] + "..."
	}
	if e.Key == "" && e.Op == "close" {
		return fmt.Sprintf("locker: %s: %v", e.Op, e.Err)
	}
	return fmt.Sprintf("locker: %s %q: %v", e.Op, key, e.Err)
}

// Unwrap returns the cause.
func (e *OpError) Unwrap() error { return e.Err }

func opErr(op, key string, err error) error {
	if err == nil {
		return nil
	}
	var oe *OpError
	if errors.As(err, &oe) && oe.Op == op && oe.Key == key {
		return err
	}
	return &OpError{Op: op, Key: key, Err: err}
}

// DefaultTTL is the TTL of a lock when neither the call, the Locker nor
// its URL says otherwise.
const DefaultTTL = 30 * time.Second

// Option changes how one lock is acquired and kept.
type Option func(*options)

type options struct {
	ttl         time.Duration
	autoRefresh bool
	maxHold     time.Duration
	maxHoldSet  bool
	ttlSet      bool // WithTTL was given

	// What the hold takes of its key: Shared, Limit and Weight.
	shared    bool
	limit     int
	limitSet  bool
	weight    int
	weightSet bool

	// value is stored with the hold (WithValue).
	value []byte
}

func defaultOptions() options {
	return options{ttl: DefaultTTL, autoRefresh: true}
}

// WithTTL sets how long the lock lives on the server unless refreshed
// (default 30s). A holder that crashes blocks others for at most this long
// plus the backend's ExpirySlack.
func WithTTL(ttl time.Duration) Option {
	return func(o *options) { o.ttl, o.ttlSet = ttl, true }
}

// WithAutoRefresh turns the watchdog on or off for the lock (default on).
// With it on, the lock is refreshed at a third of its TTL until it is
// released, lost, or the Locker is closed. With it off, the lock expires at
// its TTL unless Refresh is called, and Lost is closed at that moment.
func WithAutoRefresh(on bool) Option {
	return func(o *options) { o.autoRefresh = on }
}

// WithMaxHold bounds how long the watchdog keeps the lock: it makes no
// automatic refresh due more than d after the acquisition, so a holder
// that is stuck (a deadlock, a hung call) cannot keep the lock for ever.
// The lock then lasts the validity of its last refresh, at most d plus its
// TTL after the acquisition, and Lost closes with Err wrapping ErrMaxHold.
// An explicit Refresh still extends it. d must be positive; default: no
// bound.
func WithMaxHold(d time.Duration) Option {
	return func(o *options) { o.maxHold, o.maxHoldSet = d, true }
}

// Shared makes the hold a shared one, a read lock: any number of shared
// holds of a key coexist, never with an exclusive one (a hold without
// Shared or Limit, a write lock). Where the backend queues (memory,
// ZooKeeper, etcd), holds are granted in queue order: a shared request
// behind a waiting writer waits for it, so a stream of readers cannot
// starve a writer. Elsewhere (Redis, Redlock, PostgreSQL) waiters poll or
// are notified, and a waiting writer marks the key so that no new reader
// is granted while it waits; see each backend's documentation.
//
// Shared and exclusive holds of one key are one read/write lock; a key
// used as a semaphore (Limit) refuses them with ErrKindMismatch.
func Shared() Option {
	return func(o *options) { o.shared = true }
}

// Limit makes the key a semaphore of n permits (n >= 1) and the hold one
// of its permit holds, taking one permit unless Weight says how many: at
// no time do a key's holds take more than n permits together. Every
// client of the key must give the same n: a request with another limit,
// or one without Limit, while the key has holders or waiters, fails with
// ErrKindMismatch. Where the backend queues, permits are granted in queue
// order: a request that does not fit blocks the smaller ones behind it.
func Limit(n int) Option {
	return func(o *options) { o.limit, o.limitSet = n, true }
}

// Weight makes a semaphore hold (Limit) take w permits (1 <= w <= n)
// instead of one, as golang.org/x/sync/semaphore.Weighted's Acquire does.
func Weight(w int) Option {
	return func(o *options) { o.weight, o.weightSet = w, true }
}

// kind returns the hold's kind, limit and weight as the options give
// them, or an error naming what they get wrong.
func (o *options) kind() (backend.Kind, int, int, error) {
	switch {
	case o.limitSet && o.limit < 1:
		return 0, 0, 0, fmt.Errorf("%w: Limit(%d): a semaphore has at least one permit", ErrInvalidOption, o.limit)
	case o.limitSet && o.limit > backend.SharedCapacity:
		return 0, 0, 0, fmt.Errorf("%w: Limit(%d): a semaphore has at most %d permits", ErrInvalidOption, o.limit, backend.SharedCapacity)
	case o.weightSet && !o.limitSet:
		return 0, 0, 0, fmt.Errorf("%w: Weight(%d) without Limit: a weight is a number of a semaphore's permits", ErrInvalidOption, o.weight)
	case o.weightSet && (o.weight < 1 || o.weight > o.limit):
		return 0, 0, 0, fmt.Errorf("%w: Weight(%d): a hold takes from 1 to the Limit of %d permits", ErrInvalidOption, o.weight, o.limit)
	case o.shared && o.limitSet:
		return 0, 0, 0, fmt.Errorf("%w: Shared and Limit together: a key is a read/write lock or a semaphore, not both", ErrInvalidOption)
	case o.limitSet:
		w := 1
		if o.weightSet {
			w = o.weight
		}
		return backend.Permit, o.limit, w, nil
	case o.shared:
		return backend.Shared, 0, 0, nil
	}
	return backend.Exclusive, 0, 0, nil
}

// Do acquires key, calls fn while holding it, and releases it. fn's ctx is
// cancelled when the lock is lost (context.Cause then wraps ErrNotHeld).
// Do returns fn's error, joined with an error wrapping ErrNotHeld if the
// lock was lost before fn returned, and with Release's error.
//
// The lock is released on every path out of fn: if fn panics (or calls
// runtime.Goexit), Do releases the lock and lets the panic go on with its
// own stack, so that a panic recovered further up (net/http recovers a
// handler's) leaves no lock behind. The release goes out detached from
// ctx, its deadline included, as a Release under an ended context does:
// fn returning just before that deadline still frees the key at once.
func Do(ctx context.Context, l Locker, key string, fn func(ctx context.Context, lock Lock) error, opts ...Option) error {
	switch {
	case ctx == nil:
		return opErr("do", key, errNilContext)
	case l == nil:
		return opErr("do", key, errors.New("nil Locker"))
	case fn == nil:
		return opErr("do", key, errors.New("nil fn"))
	}
	lk, err := l.Acquire(ctx, key, opts...)
	if err != nil {
		return err
	}
	fctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-lk.Lost():
			cancel(opErr("do", key, fmt.Errorf("%w: lost while fn was running", ErrNotHeld)))
		case <-done:
		}
	}()
	// finish stops the watcher and releases the lock; it runs on every
	// path, a panic in fn included.
	finished := false
	var lostErr, relErr error
	finish := func() {
		finished = true
		close(done)
		<-watched
		if cause := context.Cause(fctx); errors.Is(cause, ErrNotHeld) {
			lostErr = cause
		}
		cancel(nil)
		// Detached from ctx, deadline included: fn may return just before
		// it, and a release cut short there would leave the key held.
		relErr = lk.Release(context.WithoutCancel(ctx))

		if lostErr != nil && errors.Is(relErr, ErrNotHeld) {
			relErr = nil // already reported as lost
		}
	}
	defer func() {
		if !finished { // fn panicked or called runtime.Goexit
			finish()
		}
	}()
	fnErr := fn(fctx, lk)
	finish()
	return errors.Join(fnErr, lostErr, relErr)
}

// releaseTimeout bounds a release, which is not cut short by its caller's
// context (see Lock.Release).
const releaseTimeout = 10 * time.Second
