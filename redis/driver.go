package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/distlock/locker/backend"
	"github.com/distlock/locker/internal/redisconn"
)

// Names on the server. A lock key K is stored as "locker:{k:K}", its fence
// counter as "locker:{k:K}:fence" and its wake-up list as "locker:{k:K}:wake";
// releases are published on "locker:{k:K}:released". The hash tag {k:...}
// keeps the three keys in one Cluster slot whatever K contains, and its
// "k:" start keeps the tag non-empty even when K begins with "}". No two
// lock names map to the same key: lock keys end in "}", the others do not.
func lockKey(k string) string   { return "locker:{k:" + k + "}" }
func fenceKey(k string) string  { return lockKey(k) + ":fence" }
func wakeKey(k string) string   { return lockKey(k) + ":wake" }
func channelOf(k string) string { return lockKey(k) + ":released" }

// fenceLifetime is how long a key's fence counter outlives its last
// acquisition. After that the counter is gone and the server clock (in
// microseconds) alone keeps fences increasing.
const fenceLifetime = 24 * time.Hour

// cleanupTimeout bounds the compare-and-delete sent after an acquire whose
// reply was lost.
const cleanupTimeout = 2 * time.Second

// wakeMode selects how waiters learn of a release.
type wakeMode int

const (
	// wakePubSub: Release publishes on the key's channel; every Locker has
	// one subscriber connection shared by all its waiters.
	wakePubSub wakeMode = iota
	// wakeList: Release also pushes to a per-key list that each waiter
	// blocks on with BLPOP, one connection per waiter. Kept for the
	// benchmark that compares the two designs (see the package doc).
	wakeList
)

type driver struct {
	c      redisconn.Conn
	log    *slog.Logger
	wake   wakeMode
	notify *redisconn.Notifier // nil in wakeList mode

	mu     sync.Mutex
	closed bool
}

func newDriver(c redisconn.Conn, log *slog.Logger, mode wakeMode) *driver {
	d := &driver{c: c, log: log, wake: mode}
	if mode == wakePubSub {
		d.notify = redisconn.NewNotifier(c, log)
	}
	return d
}

func (d *driver) Capabilities() backend.Capabilities {
	return backend.Capabilities{
		Fencing:       true,
		WakeOnRelease: true,
		// Redis keeps TTLs in milliseconds and expires keys lazily on access
		// and in a background sweep; an access (every acquire attempt
		// touches the key) expires it at once.
		MinTTL:      time.Millisecond,
		ExpirySlack: 50 * time.Millisecond,
	}
}

func (d *driver) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	d.mu.Unlock()
	if d.notify != nil {
		d.notify.Close()
	}
	return d.c.Close()
}

func ms(d time.Duration) int64 {
	n := d.Milliseconds()
	if n < 1 {
		n = 1
	}
	return n
}

func (d *driver) TryAcquire(ctx context.Context, req backend.Request) (backend.Acquisition, error) {
	start := time.Now()
	v, err := d.c.Eval(ctx, acquireScript, []string{lockKey(req.Key), fenceKey(req.Key)},
		req.Token, ms(req.TTL), ms(fenceLifetime))
	if err != nil {
		return backend.Acquisition{}, d.abandon(req, err)
	}
	ok, n, err := redisconn.AsPair(v)
	if err != nil {
		return backend.Acquisition{}, d.abandon(req, err)
	}
	if ok == 0 {
		// PTTL is 0 for a key that expires within the millisecond: look
		// again in 1 ms. It is negative only for a key without a TTL, which
		// no lock is; then the holder's end is unknown.
		busy := &backend.Busy{}
		if n >= 0 {
			busy.Remaining = time.Duration(max(n, 1)) * time.Millisecond
		}
		return backend.Acquisition{}, busy
	}
	h := &held{d: d, key: req.Key, token: req.Token}
	return backend.Acquisition{Held: h, Fence: uint64(n), Fenced: true, Start: start}, nil
}

// abandon handles an acquire that failed without a clear answer: the
// request may have reached the server and taken the lock, and only its
// reply been lost (timeout, reset connection, cancelled context). The
// compare-and-delete removes such an orphan, so it does not block others
// for a whole TTL; it is harmless when the lock was never taken.
func (d *driver) abandon(req backend.Request, err error) error {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if _, cerr := d.c.Eval(ctx, releaseScript, []string{lockKey(req.Key), wakeKey(req.Key)},
		req.Token, channelOf(req.Key), d.wakeListLifetime(req.TTL)); cerr != nil {
		return fmt.Errorf("%w (and the cleanup of a possibly taken lock failed, so it may block others for up to %v: %v)", err, req.TTL, cerr)
	}
	return err
}

func (d *driver) wakeListLifetime(ttl time.Duration) int64 {
	if d.wake != wakeList {
		return 0
	}
	return ms(max(ttl, time.Second))
}

type held struct {
	d     *driver
	key   string
	token string
}

// evalInt runs a script on the lock's keys and returns its integer reply.
func (h *held) evalInt(ctx context.Context, s *redisconn.Script, keys []string, args ...any) (int64, error) {
	v, err := h.d.c.Eval(ctx, s, keys, args...)
	if err != nil {
		return 0, err
	}
	return redisconn.AsInt(v)
}

func (h *held) Refresh(ctx context.Context, ttl time.Duration) error {
	n, err := h.evalInt(ctx, refreshScript, []string{lockKey(h.key)}, h.token, ms(ttl))
	if err == nil && n != 1 {
		err = backend.ErrNotHeld
	}
	return err
}

func (h *held) TTL(ctx context.Context) (time.Duration, error) {
	n, err := h.evalInt(ctx, pttlScript, []string{lockKey(h.key)}, h.token)
	if err != nil {
		return 0, err
	}
	if n < 0 {
		return 0, backend.ErrNotHeld
	}
	return time.Duration(n) * time.Millisecond, nil
}

func (h *held) Release(ctx context.Context) error {
	n, err := h.evalInt(ctx, releaseScript, []string{lockKey(h.key), wakeKey(h.key)},
		h.token, channelOf(h.key), h.d.wakeListLifetime(time.Second))
	if err == nil && n != 1 {
		err = backend.ErrNotHeld
	}
	return err
}

// RefreshBatch extends many locks in one pipeline: the watchdog calls it
// with every lock of a Locker that is due at about the same time.
func (d *driver) RefreshBatch(ctx context.Context, locks []backend.Held, ttls []time.Duration) []error {
	calls := make([]redisconn.Call, len(locks))
	for i, l := range locks {
		h := l.(*held)
		calls[i] = redisconn.Call{Keys: []string{lockKey(h.key)}, Args: []any{h.token, ms(ttls[i])}}
	}
	errs := make([]error, len(locks))
	for i, r := range d.c.EvalMany(ctx, refreshScript, calls) {
		if r.Err != nil {
			errs[i] = r.Err
			continue
		}
		n, err := redisconn.AsInt(r.Val)
		switch {
		case err != nil:
			errs[i] = err
		case n != 1:
			errs[i] = backend.ErrNotHeld
		}
	}
	return errs
}

// pubsubDriver is the driver in wakePubSub mode: package locker waits
// through its release notices.
type pubsubDriver struct{ *driver }

// Watch implements backend.Notifier.
func (d pubsubDriver) Watch(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	return d.notify.Watch(ctx, channelOf(key))
}

// acquireWaiting implements the blocking-list design: try, and when the key
// is busy block on its wake-up list for at most the holder's remaining TTL.
func (d *driver) acquireWaiting(ctx context.Context, req backend.Request) (backend.Acquisition, error) {
	for {
		acq, err := d.TryAcquire(ctx, req)
		var busy *backend.Busy
		if !errors.As(err, &busy) {
			return acq, err
		}
		wait := busy.Remaining + time.Millisecond
		if busy.Remaining <= 0 {
			wait = time.Millisecond
		}
		if _, err := d.c.BLPop(ctx, wakeKey(req.Key), wait); err != nil {
			if ctx.Err() != nil {
				return backend.Acquisition{}, ctx.Err()
			}
			return backend.Acquisition{}, err
		}
	}
}

// listDriver is the driver in wakeList mode: it waits natively instead of
// through notifications.
type listDriver struct{ *driver }

func (d listDriver) Acquire(ctx context.Context, req backend.Request) (backend.Acquisition, error) {
	return d.acquireWaiting(ctx, req)
}
