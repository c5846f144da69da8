package locker

import (
	"context"
	"errors"
	"fmt"

	"github.com/distlock/locker/backend"
)

// Holder describes who holds a key, as Inspect found it on the servers;
// see backend.Holder for the fields.
type Holder = backend.Holder

// ErrUnsupported means the Locker's backend cannot do what was asked:
// Inspect and ForceRelease on a backend without an inspector, or on a
// Locker that is not one of this package's; a shared hold or a semaphore
// on a backend whose Capabilities do not admit them. Errors wrapping it also match
// errors.ErrUnsupported.
var ErrUnsupported = errors.New("not supported by this backend")

// Inspect reports who holds key on l's servers: whether it is held, the
// holder's token, fence and remaining TTL, how many wait for it, and what
// else the backend can tell (Holder.Detail), each where the backend knows
// it. It is for operators (lockctl inspect) and takes no lock: by the time
// it returns the answer may have changed.
//
// The key is the one Acquire takes, checked as Acquire checks it (an empty
// or too long key fails with the same ErrInvalidKey), and the Locker's
// Config.Prefix is added as Acquire adds it. l is a Locker from Open, from
// a backend's constructor, or one that wraps such a Locker and returns it
// from an Unwrap() Locker method (as memory.Client does). A Locker whose
// backend has no inspector gives an error wrapping ErrUnsupported that
// names the backend. Errors are *OpError with Op "inspect".
//
// A key may have several holders (shared holds, a semaphore's permits):
// Holder.Holds lists them all, each with its kind, and the Holder's own
// fields describe the first; Holder.Queue lists the waiters, with their
// kinds, where the backend keeps a queue.
//
// Each hold's value (WithValue, Lock.SetValue) is in Hold.Value, and the
// first holder's in Holder.Value, on every backend of this module; an
// exclusive holder's Fence is its Lock.Fence, or Fenced is false where the
// backend cannot tell (an Election's Leader reads its term from it).
//
// What each backend reports:
//   - memory: everything: each holder's kind, token, fence and remaining
//     TTL, and the queued waiters.
//   - redis: the lock key's token and PTTL, and the fence counter's value,
//     which is the holder's fence (Fenced is false if the counter is gone:
//     it outlives an acquisition by 24 hours); for shared and permit
//     holds, each holder's token, fence and remaining TTL from the key's
//     hash. Waiters are unknown: they wait for release notices and
//     nothing on the server counts them. Detail names the lock and fence
//     keys.
//   - redlock: each node's token and PTTL (Detail, one entry per node); the
//     lock is Held when a majority of all nodes hold one token, and TTL is
//     how long a majority still has it; shared and permit holders are
//     those on a quorum of nodes, in token order (the nodes keep no grant
//     order). No fence, and waiters unknown, as with redis. Fewer than a
//     majority of nodes answering is an error.
//   - zookeeper: the key node's children in queue order: the front that
//     backend.Admit admits are the holders, whose czxid is the fence and
//     whose ephemeral owner is its session (Detail); the rest are
//     waiters. The remaining TTL is the session's and is not known
//     (TTLKnown is false); Detail gives the session timeout when the
//     session is one of this Locker's.
//   - etcd: the key's queue entries by create revision: the front that
//     backend.Admit admits are the holders, each with its create revision
//     as the fence and its lease's remaining TTL (whole seconds, as etcd
//     counts them) as the TTL; the rest are waiters. Detail names the
//     entry and the lease.
//   - postgres: the key's row and, for shared and permit holds, its live
//     holds in grant order, each with its token, value and remaining TTL
//     on the server's clock and its fence (a mutex's holder's once it has
//     minted one). Waiters are unknown, as with redis: they wait for
//     release notices. Detail is as package postgres documents it.
func Inspect(ctx context.Context, l Locker, key string) (Holder, error) {
	c, in, err := inspector(ctx, l, opInspect, key)
	if err != nil {
		return Holder{}, err
	}
	h, err := in.Inspect(ctx, c.cfg.Prefix+key)
	if err != nil {
		return Holder{}, opErr(opInspect, key, c.closedErr(err))
	}
	return h, nil
}

// ForceRelease deletes key's lock on l's servers whoever holds it, and
// wakes its waiters as a release would: the operator's way out when a
// holder is stuck (lockctl release --force). It reports whether it
// deleted a lock; false with a nil error means nothing was held (or the
// holder it found let go before the delete). It never removes a waiter
// from a queue. Keys, Lockers and errors are as for Inspect, with Op
// "force-release".
//
// ForceRelease breaks mutual exclusion if the holder is alive. That holder
// keeps running, believing it holds the lock, until its Lost closes, while
// the next client acquires the key; only fencing tokens checked by the
// protected resource keep the two apart. (Its Release and Refresh then
// return ErrNotHeld and leave the next holder's lock alone.) When the
// holder learns of it:
//   - memory: at once.
//   - etcd: at once, as soon as its Locker's watch delivers the deletion
//     (a lock held under 100 ms: when that watch starts, at 100 ms).
//   - redis, redlock and zookeeper: at the holder's next refresh, which
//     the watchdog makes a third of the TTL after the last; with
//     auto-refresh off, not before its validity runs out.
//
// Redlock releases the key on every node it reaches: when some nodes
// cannot be reached, released may be true with an error naming them (the
// copies there expire with their TTL, on a minority of nodes they block
// no one).
//
// A release the Locker's logger records at Warn level, naming the key.
func ForceRelease(ctx context.Context, l Locker, key string) (released bool, err error) {
	c, in, err := inspector(ctx, l, opForceRelease, key)
	if err != nil {
		return false, err
	}
	released, err = in.ForceRelease(ctx, c.cfg.Prefix+key)
	if released {
		args := []any{"key", key, "backend", c.backendName()}
		if err != nil {
			args = append(args, "err", err)
		}
		c.log.Warn("locker: lock released by force: its holder, if alive, holds it no longer but may not know yet", args...)
	}
	if err != nil {
		return released, opErr(opForceRelease, key, c.closedErr(err))
	}
	return released, nil
}

// The operations of Inspect and ForceRelease, as OpError.Op names them.
const (
	opInspect      = "inspect"
	opForceRelease = "force-release"
)

// inspector checks the arguments of Inspect and ForceRelease as acquire
// checks its own, and returns l's client and its driver's inspector.
func inspector(ctx context.Context, l Locker, op, key string) (*client, backend.Inspector, error) {
	if ctx == nil {
		return nil, nil, opErr(op, key, errNilContext)
	}
	c, err := unwrapClient(l)
	if err != nil {
		return nil, nil, opErr(op, key, err)
	}
	if c.isClosed() {
		return nil, nil, opErr(op, key, ErrClosed)
	}
	if err := c.checkKey(key); err != nil {
		return nil, nil, opErr(op, key, err)
	}
	in, ok := c.d.(backend.Inspector)
	if !ok {
		return nil, nil, opErr(op, key, fmt.Errorf("%w: the %s backend cannot inspect or release keys by force (%w)",
			ErrUnsupported, c.backendName(), errors.ErrUnsupported))
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, opErr(op, key, err)
	}
	return c, in, nil
}

// maxUnwrap bounds how many wrappers unwrapClient looks through, so that
// a Locker that unwraps to itself cannot loop.
const maxUnwrap = 16

// unwrapClient returns the client behind l, looking through Lockers that
// wrap another and return it from Unwrap.
func unwrapClient(l Locker) (*client, error) {
	for range maxUnwrap {
		switch v := l.(type) {
		case nil:
			return nil, errors.New("nil Locker")
		case *client:
			return v, nil
		case failedLocker:
			return nil, v.err
		case interface{ Unwrap() Locker }:
			l = v.Unwrap()
		default:
			return nil, fmt.Errorf("%w: %T is not a Locker of package locker, nor wraps one (Unwrap() Locker) (%w)",
				ErrUnsupported, l, errors.ErrUnsupported)
		}
	}
	return nil, fmt.Errorf("%w: more than %d Lockers wrapped in one another", ErrUnsupported, maxUnwrap)
}

// backendName names the client's backend in messages.
func (c *client) backendName() string {
	if c.caps.Name != "" {
		return c.caps.Name
	}
	return backendName(c.d)
}

// closedErr marks err, a driver's error, with ErrClosed when the Locker
// was closed while the call ran: the driver's own error (a closed client)
// rarely says so.
func (c *client) closedErr(err error) error {
	if c.isClosed() && !errors.Is(err, ErrClosed) {
		return fmt.Errorf("%w (%w)", ErrClosed, err)
	}
	return err
}
