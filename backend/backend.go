// Package backend defines what a lock backend implements.
//
// A backend is a small [Driver]: one attempt to take a key with a token and
// a TTL, and, on the [Held] lock it returns, refresh, release and a TTL
// query. Everything users see beyond that (input validation, tokens,
// waiting, the watchdog that refreshes held locks, the Lost signal, error
// wrapping) is written once in package locker over this interface, so it
// behaves the same on every backend.
//
// Optional interfaces work like database/sql/driver's: a driver that
// implements [Waiter] waits natively (a ZooKeeper or etcd queue); one that
// implements [Notifier] wakes waiters when a key is released; without
// either, package locker polls with jitter, bounded by the holder's
// remaining TTL as reported through [Busy]. A driver that implements
// [BatchRefresher] lets the watchdog refresh many locks in one round trip;
// a Held that implements [Expirer] is told when its TTL ran out; one that
// implements [Bounded] caps its lock's validity by its lease or session.
// A driver that implements [Inspector] tells who holds a key and releases
// it by force, for operators (locker.Inspect, locker.ForceRelease). Holds
// may carry a small value (Request.Value, Capabilities.MaxValueLen) that a
// Held implementing [ValueSetter] replaces; a driver that implements
// [Observer] tells of every change of a key's holders, which
// locker.Election's Observe follows.
//
// A driver is used through package locker, never directly by applications:
// locker.New(driver, config) returns the [locker.Locker].
//
// # Writing a backend
//
// A new backend is a package beside redis/ and etcd/ (those two, with
// memory/, are the ones to read first):
//
//   - Implement [Driver] and [Held]. TryAcquire makes one attempt, returns
//     [Busy] (with the holder's remaining TTL when the server tells it)
//     when the key is taken, and must leave nothing behind when its reply
//     is lost or its context ends mid-request: a request that may have
//     been applied is undone by the token before the error is returned.
//     Release and Refresh compare the token on the server, atomically.
//   - Add what the server offers: [Waiter] for a native queue, [Notifier]
//     for release notices, [BatchRefresher] when many locks can be
//     refreshed in one round trip, [Expirer] when the server would keep a
//     lock past its TTL (a shared lease or session), [Bounded] when a
//     lease or session bounds the lock, [FenceMinter] when a fence costs
//     enough that it is better minted only for the locks asked for one,
//     [Drifter] for another clock-drift
//     allowance than [DefaultDrift], [Inspector] so that operators can see
//     and break a key's lock (internal/inspecttest has its shared tests),
//     locker.RegisterDiagnoser for lockctl doctor's checks of a
//     deployment. Fill in [Capabilities] honestly: the
//     conformance suite skips what a backend does not claim, and checks
//     what it does.
//   - Register URL schemes in init with locker.Register; read the URL
//     with locker.URL's Param, DurationParam, BoolParam and HostPorts (a
//     host without a port gets the server's usual one), and call
//     CheckParams, so that an unknown parameter is an error. Log through
//     locker.Config.ResolvedLogger, and call locker.CheckConfig before
//     locker.New so that a default TTL the server cannot keep fails at
//     Open. A backend in this module also takes internal/openhook's dial hook
//     in its opener (every connection through it, TLS included), so that
//     conformance.URLHarness can cut its clients off as a crash would.
//   - Tests run against a real server: scripts/install.sh installs it,
//     scripts/services.sh starts it on a port of its own (refusing one
//     already in use) and exports its URL as a LOCKER_TEST_* variable
//     that internal/testenv names; testenv.Get fails a test under make
//     test when the variable is missing. Run conformance.Run with a
//     conformance.URLHarness over a proxy (so that Crash can cut a client
//     off), add the backend to internal/faulttest (the randomized fault
//     test) and internal/heldtest (many locks held at once), and test
//     every lost-reply and cancellation path the driver handles against
//     the real server.
package backend

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// The sentinel errors shared by every backend. Package locker re-exports
// them; drivers return them (or errors wrapping them) so that callers can
// test with errors.Is.
var (
	// ErrNotAcquired means the key is held by someone else.
	ErrNotAcquired = errors.New("lock not acquired: held by another owner")
	// ErrNotHeld means the lock is no longer ours: it expired, was taken
	// over, or was already released.
	ErrNotHeld = errors.New("lock not held")
	// ErrClosed means the Locker was closed.
	ErrClosed = errors.New("locker closed")
	// ErrInvalidKey means the key is empty or too long.
	ErrInvalidKey = errors.New("invalid key")
	// ErrInvalidTTL means the TTL is not positive or outside the backend's range.
	ErrInvalidTTL = errors.New("invalid TTL")
	// ErrInvalidValue means a hold's value is longer than the backend
	// stores (Capabilities.MaxValueLen).
	ErrInvalidValue = errors.New("invalid value")
)

// Busy is the error a driver's TryAcquire returns when another owner holds
// the key and the driver knows how long that owner's lock has left. Waiting
// callers use Remaining to bound how long they sleep before trying again.
type Busy struct {
	// Remaining is the holder's remaining TTL as the server reports it; 0
	// when unknown.
	Remaining time.Duration
	// Reason, when set, says why the attempt failed if not simply because
	// the key is held (for example a split vote between Redlock nodes).
	Reason string
}

func (b *Busy) Error() string {
	msg := ErrNotAcquired.Error()
	if b.Reason != "" {
		msg += ": " + b.Reason
	}
	if b.Remaining > 0 {
		msg += fmt.Sprintf(" (expires in %v)", b.Remaining)
	}
	return msg
}

// Is makes errors.Is(b, ErrNotAcquired) true.
func (b *Busy) Is(target error) bool { return target == ErrNotAcquired }

// Request is one attempt to take a lock.
type Request struct {
	// Key is the lock name after validation and prefixing. It may contain
	// any bytes; a driver encodes it as its server needs, such that no two
	// keys collide and no key nests inside another.
	Key string
	// Token is unique per acquisition (16 random bytes, base64url).
	Token string
	// TTL is how long the lock lives on the server unless refreshed.
	TTL time.Duration
	// Kind is what the hold takes of the key; Exclusive (the zero value)
	// is a mutex's hold. Package locker sends only the kinds the driver's
	// Capabilities admit.
	Kind Kind
	// Limit is a Permit's number of permits of the key (at least 1), and
	// Weight how many of them the hold takes (1 to Limit). Both are 0 for
	// the other kinds.
	Limit, Weight int
	// Value is stored with the hold, readable by Inspect (Hold.Value) and
	// replaceable by the holder (ValueSetter); nil or empty: none. Package
	// locker sends a value only to a driver whose Capabilities.MaxValueLen
	// admits its length. A driver may keep the slice; the caller does not
	// change it.
	Value []byte
	// Waiting says the attempt is one of a waiting Acquire's: package
	// locker makes them all under one context, which ends when that
	// Acquire returns, whether it took the key or not. A driver may leave
	// a mark for the wait on the server (PostgreSQL's writer-waiting mark,
	// which keeps new shared holds out) if the mark lapses by itself
	// within the TTL after the latest attempt and the driver removes it
	// when that context ends. A TryAcquire's attempt leaves nothing.
	Waiting bool
	// OnLost, if the driver learns that a held lock is gone before it is
	// released (a ZooKeeper session expired, an etcd lease was revoked),
	// is called once, from any goroutine. It must not block.
	OnLost func(err error)
}

// Acquisition describes a lock a driver has taken.
type Acquisition struct {
	// Held is the handle used to refresh, query and release the lock.
	Held Held
	// Fence is the fencing token, meaningful when Fenced is true: strictly
	// larger than that of every earlier holder of the same key.
	Fence  uint64
	Fenced bool
	// TTL is the lifetime actually in force if the server changed the one
	// requested (for example raised it to a minimum); 0 means as requested.
	TTL time.Duration
	// Validity, when not zero, is how long from Start the lock is
	// certainly held, as the driver computed it (Redlock subtracts elapsed
	// time and clock drift). When zero, package locker uses TTL minus its
	// drift allowance.
	Validity time.Duration
	// Start is when the lock's TTL began, as near as the driver knows: no
	// later than the sending of the request that took it. A driver that
	// waits natively sets it, since the lock may be granted long after
	// the call began. Zero means the start of the call.
	Start time.Time
}

// Held is a lock taken by a driver.
type Held interface {
	// Refresh resets the lock's TTL to ttl if the lock is still ours, and
	// returns ErrNotHeld otherwise. It never touches another owner's lock.
	// When ttl is 0 the lock keeps the TTL it was taken with.
	Refresh(ctx context.Context, ttl time.Duration) error
	// TTL returns the remaining lifetime of the lock, or ErrNotHeld.
	TTL(ctx context.Context) (time.Duration, error)
	// Release frees the lock if it is still ours (compare-and-delete) and
	// returns ErrNotHeld otherwise. It never deletes another owner's lock.
	Release(ctx context.Context) error
}

// Driver is the part of a lock backend that talks to its servers.
type Driver interface {
	// TryAcquire makes one attempt to take req.Key. It returns
	// ErrNotAcquired (or a *Busy) when another owner holds the key.
	//
	// When it returns any other error the attempt may have been applied
	// on the server though its reply was lost; the driver must then clean
	// up (delete the key if it holds our token) before returning, so that
	// nothing is left behind to block the next owner.
	TryAcquire(ctx context.Context, req Request) (Acquisition, error)
	// Capabilities reports what the backend guarantees.
	Capabilities() Capabilities
	// Close releases the driver's resources; it closes only clients the
	// driver opened itself.
	Close() error
}

// Waiter is implemented by drivers that wait for a key natively (a queue on
// the server), in place of repeated TryAcquire calls. Acquire blocks until
// the lock is taken or ctx ends; when ctx ends it leaves nothing behind on
// the server.
type Waiter interface {
	Acquire(ctx context.Context, req Request) (Acquisition, error)
}

// Notifier is implemented by drivers that can tell a waiter that a key was
// released, so that it retries at once instead of polling.
type Notifier interface {
	// Watch starts watching key for releases. Each release (or any event
	// after which a retry may succeed) sends on the returned channel
	// without blocking; stop ends the watch. A waiter calls Watch after
	// its first attempt failed (a free key costs no watch) and then tries
	// again before it waits, so that a release between its first attempt
	// and the start of the watch is not missed.
	Watch(ctx context.Context, key string) (events <-chan struct{}, stop func(), err error)
}

// DefaultDrift is the clock-drift allowance package locker subtracts from
// a TTL to get a lock's local validity, unless the driver is a Drifter:
// 1% of the TTL plus 2 ms, as on the Redis distlock page (server expiry
// precision plus a minimum drift between clocks). A driver that bounds
// validity by a lease or session of its own (Bounded) allows the same.
func DefaultDrift(ttl time.Duration) time.Duration {
	return ttl/100 + 2*time.Millisecond
}

// Drifter is implemented by drivers that allow their own clock drift
// instead of package locker's default (DefaultDrift). The local
// validity of a lock after a successful refresh that started at t is
// t + ttl - Drift(ttl).
type Drifter interface {
	Drift(ttl time.Duration) time.Duration
}

// BatchRefresher is implemented by drivers that can refresh many held
// locks in one round trip (a pipeline). The watchdog uses it when several
// locks are due together. The i-th error belongs to the i-th lock; each
// is nil, ErrNotHeld, or a transport error.
type BatchRefresher interface {
	RefreshBatch(ctx context.Context, locks []Held, ttls []time.Duration) []error
}

// Expirer is implemented by a Held whose server would keep the lock past
// its TTL when nobody refreshes it: etcd's locks of one TTL share a lease
// that is kept alive, ZooKeeper's live as long as the session. Package
// locker calls Expire, from a goroutine of its own, when the lock's local
// validity has run out without a refresh, and also when a release that
// failed in transit may have left it on the server; Lost is closed by
// then. Expire removes the lock from the server if it is still ours (it
// may block for that request) and does nothing if the lock was released
// meanwhile. Package locker's validity deadline for each lock thus serves
// as the driver's expiry too, and the driver keeps no deadline of its own: its
// TTL reports what its server allows (a lease's or a session's life), and
// package locker reports the smaller of that and the lock's validity.
type Expirer interface {
	Expire()
}

// FenceMinter is implemented by a Held whose driver mints fencing tokens
// on demand rather than with every acquisition (an Acquisition with Fenced
// false, on a driver whose Capabilities say Fencing): package locker calls
// MintFence once, when the lock's Fence is first asked for. It mints a
// fence only while the lock is still ours, atomically with checking that
// it is, and returns ErrNotHeld otherwise: a holder whose lock expired
// before it asked must not get a fence above its successor's. A fence
// minted while the lock is held is larger than every fence of an earlier
// holder and smaller than every fence of a later one, as one minted with
// the acquisition is.
type FenceMinter interface {
	MintFence(ctx context.Context) (uint64, error)
}

// Bounded is implemented by a Held whose lock lives exactly as long as
// something the driver keeps alive for many locks at once: an etcd lease
// renewed by keepalives, a ZooKeeper session kept by heartbeats. ValidUntil
// returns the moment, on the local monotonic clock, until which the server
// is known to keep the lock: the sending of the last request the server
// confirmed (a keepalive, a heartbeat, the acquire itself) plus the life it
// granted, less the driver's drift allowance. Zero means no bound is
// known. Package locker never lets a lock's local validity, and so its
// Lost signal, run past ValidUntil: it caps the deadline with it after the
// acquisition and after every refresh.
type Bounded interface {
	ValidUntil() time.Time
}

// Capabilities says what a backend guarantees. Package locker re-exports
// it as locker.Capabilities.
type Capabilities struct {
	// Name names the backend in telemetry (the locker.backend attribute)
	// and reports, e.g. "redis". Default: the last element of the import
	// path of the package that defines the driver's type.
	Name string
	// Fencing: Fence returns tokens strictly increasing per key across
	// successive holders, safe to check at a resource.
	Fencing bool
	// FIFO: blocked Acquire calls get the key in the order they queued.
	// With shared holds and semaphores, admission is in queue order (see
	// Admit): a waiter that does not fit blocks those behind it.
	FIFO bool
	// Shared: the backend admits Shared holds beside Exclusive ones
	// (read/write locks). Permits: it admits Permit holds (semaphores).
	// Package locker refuses the kinds a backend does not admit, with an
	// error wrapping locker.ErrUnsupported, before the driver is called.
	Shared, Permits bool
	// WakeOnRelease: a waiter is woken by the release itself (natively or
	// by notification), not by polling.
	WakeOnRelease bool
	// LossSignal: the backend learns from its servers that a lock is gone
	// (session or lease expiry) and closes Lost promptly, in addition to
	// the local validity deadline every backend has.
	LossSignal bool
	// MaxKeyLen is the longest key accepted, in bytes (after the Locker's
	// prefix is added). 0 means DefaultMaxKeyLen.
	MaxKeyLen int
	// MaxValueLen is the longest value, in bytes, the backend stores with
	// a hold (Request.Value, ValueSetter); 0 means it stores none, and
	// package locker refuses values with ErrUnsupported.
	MaxValueLen int
	// MinTTL and MaxTTL bound the TTLs the backend honours exactly; 0
	// means no bound. TTLs outside are rejected with ErrInvalidTTL.
	MinTTL, MaxTTL time.Duration
	// ExpirySlack is how long after its TTL a crashed holder's lock may
	// still block others (session timeouts, lease granularity, expiry
	// sweeps). The conformance suite allows this much.
	ExpirySlack time.Duration
}

// String describes the capabilities in words, e.g. "fencing, FIFO,
// wake-on-release, loss signal; keys up to 1024 bytes; TTL 2s to no limit;
// expiry slack 1s".
func (c Capabilities) String() string {
	var feats []string
	for _, f := range []struct {
		on   bool
		name string
	}{{c.Fencing, "fencing"}, {c.FIFO, "FIFO"}, {c.WakeOnRelease, "wake-on-release"}, {c.LossSignal, "loss signal"},
		{c.Shared, "shared holds"}, {c.Permits, "semaphores"}, {c.MaxValueLen > 0, "values"}} {
		if f.on {
			feats = append(feats, f.name)
		}
	}
	if len(feats) == 0 {
		feats = append(feats, "no fencing, FIFO, wake-on-release or loss signal")
	}
	keyLen := c.MaxKeyLen
	if keyLen <= 0 {
		keyLen = DefaultMaxKeyLen
	}
	values := ""
	if c.MaxValueLen > 0 {
		values = fmt.Sprintf("; values up to %d bytes", c.MaxValueLen)
	}
	return fmt.Sprintf("%s; keys up to %d bytes%s; TTL %s to %s; expiry slack %s",
		strings.Join(feats, ", "), keyLen, values, ttlBound(c.MinTTL, "any"), ttlBound(c.MaxTTL, "no limit"), c.ExpirySlack)
}

// ttlBound formats a TTL bound; 0, or more than a century (a backend's
// "no limit" in its own units), is none.
func ttlBound(d time.Duration, none string) string {
	if d <= 0 || d > 100*365*24*time.Hour {
		return none
	}
	return d.String()
}

// DefaultMaxKeyLen is the key length every backend accepts at least.
const DefaultMaxKeyLen = 1024
