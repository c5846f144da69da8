package redis

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distlock/locker/backend"
	"github.com/distlock/locker/internal/redisconn"
)

// Names on the server. A lock key K is stored as "locker:{k:K}" and its
// fence counter as "locker:{k:K}:fence"; releases are published on
// "locker:{k:K}:released", grants and new values on
// "locker:{k:K}:changed". The hash tag {k:...} keeps the key and its
// counter in one Cluster slot whatever K contains, and its "k:" start
// keeps the tag non-empty even when K begins with "}". No two lock names
// map to the same key: lock keys end in "}", the others do not.
func lockKey(k string) string      { return "locker:{k:" + k + "}" }
func fenceKey(k string) string     { return lockKey(k) + ":fence" }
func channelOf(lkey string) string { return lkey + ":released" } // of the server key
func changedOf(lkey string) string { return lkey + ":changed" }  // of the server key

// fenceLifetime is how long a key's fence counter outlives its last
// acquisition. After that the counter is gone and the server clock (in
// microseconds) alone keeps fences increasing.
const fenceLifetime = 24 * time.Hour

// fenceLifetimeArg is fenceLifetime as the acquire script takes it, boxed
// once rather than on every call.
var fenceLifetimeArg any = redisconn.Millis(fenceLifetime)

// cleanupTimeout bounds the compare-and-delete sent after an acquire whose
// reply was lost.
const cleanupTimeout = 2 * time.Second

type driver struct {
	c   redisconn.Conn
	log *slog.Logger
	// notify is the Locker's one subscriber connection, shared by all its
	// waiters: Release publishes on the key's channel.
	notify *redisconn.Notifier

	// wantFence says that a lock of this Locker was asked for its fence:
	// from then on every acquisition mints one (the acquire script), in
	// the acquisition's round trip, rather than in a round trip of its own
	// when asked (see Performance in the package doc).
	wantFence atomic.Bool

	mu     sync.Mutex
	closed bool
}

func newDriver(c redisconn.Conn, log *slog.Logger) *driver {
	return &driver{c: c, log: log, notify: redisconn.NewNotifier(c, log)}
}

func (d *driver) Capabilities() backend.Capabilities {
	return backend.Capabilities{
		Name:          "redis",
		Fencing:       true,
		WakeOnRelease: true,
		// Shared and permit holds live in a hash of holders per key; see
		// the package doc.
		Shared:  true,
		Permits: true,
		// Values live in the hash of holders; see the package doc.
		MaxValueLen: redisconn.MaxValueLen,
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
	d.notify.Close()
	return d.c.Close()
}

// TryAcquire takes the key for an exclusive hold with SET NX PX
// (redisconn.Take), minting no fence (it is minted when asked for,
// MintFence), or, once a lock of this Locker was asked for its fence, with
// the acquire script, which mints it. A shared or permit hold, and an
// exclusive hold with a value, is taken by redisconn.Hold, which mints
// its fence with it.
func (d *driver) TryAcquire(ctx context.Context, req backend.Request) (backend.Acquisition, error) {
	if req.Kind != backend.Exclusive || len(req.Value) > 0 {
		return d.acquireHold(ctx, req)
	}
	if d.wantFence.Load() {
		return d.acquireFenced(ctx, req)
	}
	start := time.Now()
	key := lockKey(req.Key)
	g, err := redisconn.Take(ctx, d.c, key, req.Token, req.TTL)
	switch {
	case err != nil:
		return backend.Acquisition{}, d.abandon(req, err) // it may be ours
	case g.Mismatch != nil:
		return backend.Acquisition{}, g.Mismatch
	case !g.Taken:
		// Taken by another: its remaining TTL times the wait (0: unknown).
		return backend.Acquisition{}, d.busy(ctx, req, g.Remaining)
	}
	return backend.Acquisition{Held: &held{d: d, key: req.Key, lkey: key, token: req.Token}, Start: start}, nil
}

// acquireHold takes a hold kept in the key's hash of holders (a shared or
// permit hold, or an exclusive hold with a value), its fence and its
// value, in one script call.
func (d *driver) acquireHold(ctx context.Context, req backend.Request) (backend.Acquisition, error) {
	start := time.Now()
	key := lockKey(req.Key)
	g, err := redisconn.Hold(ctx, d.c, redisconn.HoldRequest{Key: key, Token: req.Token, TTL: req.TTL,
		Claim: backend.ClaimOf(req), Value: req.Value, FenceKey: fenceKey(req.Key), FenceLife: fenceLifetime,
		Channel: changedOf(key)})
	switch {
	case err != nil:
		return backend.Acquisition{}, d.abandon(req, err)
	case g.Mismatch != nil:
		return backend.Acquisition{}, g.Mismatch
	case !g.Taken:
		return backend.Acquisition{}, d.busy(ctx, req, g.Remaining)
	}
	h := &held{d: d, key: req.Key, lkey: key, token: req.Token, kind: req.Kind, fence: g.Fence}
	return backend.Acquisition{Held: h, Fence: g.Fence, Fenced: true, Start: start}, nil
}

// acquireFenced takes the key and mints its fence in one script call.
func (d *driver) acquireFenced(ctx context.Context, req backend.Request) (backend.Acquisition, error) {
	start := time.Now()
	key := lockKey(req.Key)
	v, err := d.c.Eval(ctx, acquireScript, []string{key, fenceKey(req.Key)},
		req.Token, redisconn.Millis(req.TTL), fenceLifetimeArg, changedOf(key))
	if err != nil {
		return backend.Acquisition{}, d.abandon(req, err)
	}
	a, _ := v.([]any)
	if len(a) == 2 && a[0] == int64(-1) {
		// A semaphore's key: nothing was taken.
		return backend.Acquisition{}, redisconn.MismatchOf(a[1], backend.ClaimOf(req))
	}
	ok, n, err := redisconn.AsPair(v)
	if err != nil {
		return backend.Acquisition{}, d.abandon(req, err)
	}
	if ok == 0 {
		// PTTL is 0 for a key that expires within the millisecond: look
		// again in 1 ms. It is negative only for a key without a TTL, which
		// no lock is; then the holder's end is unknown.
		var remaining time.Duration
		if n >= 0 {
			remaining = time.Duration(max(n, 1)) * time.Millisecond
		}
		return backend.Acquisition{}, d.busy(ctx, req, remaining)
	}
	h := &held{d: d, key: req.Key, lkey: key, token: req.Token}
	return backend.Acquisition{Held: h, Fence: uint64(n), Fenced: true, Start: start}, nil
}

// busy is the error of an attempt of req that found the key held, whose
// holder expires in remaining (0: unknown). A waiting writer's attempt
// (backend.Request.Waiting) also marks the key, if readers hold it, so
// that no new reader gets in while the writer waits; the Busy's Withdraw
// takes the mark back. The mark is a liveness aid: when it cannot be
// set, the writer waits as it would without it.
func (d *driver) busy(ctx context.Context, req backend.Request, remaining time.Duration) error {
	busy := &backend.Busy{Remaining: remaining}
	if !req.Waiting || req.Kind != backend.Exclusive {
		return busy
	}
	key := lockKey(req.Key)
	marked, err := redisconn.Mark(ctx, d.c, key, req.Token, req.TTL)
	if err != nil {
		d.log.Debug("redis: a waiting writer's mark was not set", "key", req.Key, "err", err)
	}
	if marked {
		busy.Withdraw = func(ctx context.Context) {
			if err := redisconn.Unmark(ctx, d.c, key, req.Token, channelOf(key)); err != nil {
				d.log.Debug("redis: a waiting writer's mark was not taken back; it lapses at the writer's TTL", "key", req.Key, "err", err)
			}
		}
	}
	return busy
}

// abandon handles an acquire that failed without a clear answer: the
// request may have reached the server and taken the lock, and only its
// reply been lost (timeout, reset connection, cancelled context). The
// compare-and-delete removes such an orphan, so it does not block others
// for a whole TTL; it is harmless when the lock was never taken. A
// request that never left, its server being known to be down, took
// nothing, and needs no cleanup.
func (d *driver) abandon(req backend.Request, err error) error {
	if redisconn.NotSent(err) {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if _, cerr := d.c.Eval(ctx, redisconn.ScriptsOf(req.Kind).Release, []string{lockKey(req.Key)},
		req.Token, channelOf(lockKey(req.Key))); cerr != nil {
		return fmt.Errorf("%w (and the cleanup of a possibly taken lock failed, so it may block others for up to %v: %v)", err, req.TTL, cerr)
	}
	return err
}

type held struct {
	d     *driver
	key   string // the lock's name
	lkey  string // its key on the server, lockKey(key)
	token string
	kind  backend.Kind
	// fence is the fence minted with a hold taken in the hash of holders
	// (a shared or permit hold, an exclusive hold with a value); 0 for a
	// mutex's hold taken without a value.
	fence uint64
	// versions counts the SetValue calls: the value taken with the hold
	// is version 1, the n-th SetValue's version n + 1.
	versions atomic.Uint64
}

// MintFence implements backend.FenceMinter: the fence of an exclusive lock
// taken without one, minted by the acquire script while the lock is ours
// (in either form: SetValue may have moved it into a hash). From now on
// this Locker's acquisitions mint their fence as they take the lock: a
// program that asks for one fence asks for them all. A hold taken in the
// hash of holders has its fence from its grant, and package locker does
// not ask for it here.
func (h *held) MintFence(ctx context.Context) (uint64, error) {
	if h.fence != 0 {
		return h.fence, nil
	}
	h.d.wantFence.Store(true)
	v, err := h.d.c.Eval(ctx, acquireScript, []string{h.lkey, fenceKey(h.key)}, h.token, "", fenceLifetimeArg, "")
	if err != nil {
		return 0, err
	}
	ok, n, err := redisconn.AsPair(v)
	switch {
	case err != nil:
		return 0, err
	case ok == 0:
		return 0, backend.ErrNotHeld
	}
	return uint64(n), nil
}

func (h *held) Refresh(ctx context.Context, ttl time.Duration) error {
	n, err := redisconn.EvalInt(ctx, h.d.c, redisconn.ScriptsOf(h.kind).Refresh, []string{h.lkey}, h.token, redisconn.Millis(ttl))
	if err == nil && n != 1 {
		err = backend.ErrNotHeld
	}
	return err
}

func (h *held) TTL(ctx context.Context) (time.Duration, error) {
	n, err := redisconn.EvalInt(ctx, h.d.c, redisconn.ScriptsOf(h.kind).PTTL, []string{h.lkey}, h.token)
	if err != nil {
		return 0, err
	}
	if n < 0 {
		return 0, backend.ErrNotHeld
	}
	return time.Duration(n) * time.Millisecond, nil
}

func (h *held) Release(ctx context.Context) error {
	n, err := redisconn.EvalInt(ctx, h.d.c, redisconn.ScriptsOf(h.kind).Release, []string{h.lkey}, h.token, channelOf(h.lkey))
	if err == nil && n != 1 {
		err = backend.ErrNotHeld
	}
	return err
}

// RefreshBatch extends many locks in one pipeline of script calls, each
// extending up to redisconn.MaxRefreshKeys of them (those in one hash slot
// on a Cluster), of any kinds: the watchdog calls it with every lock of a
// Locker that is due at about the same time.
func (d *driver) RefreshBatch(ctx context.Context, locks []backend.Held, ttls []time.Duration) []error {
	rs := make([]redisconn.Refresh, len(locks))
	for i, l := range locks {
		h := l.(*held)
		rs[i] = redisconn.Refresh{Key: h.lkey, Token: h.token, TTL: ttls[i], Kind: h.kind}
	}
	errs := make([]error, len(locks))
	for i, r := range redisconn.RefreshMany(ctx, d.c, rs) {
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

var (
	_ backend.Notifier       = (*driver)(nil)
	_ backend.BatchRefresher = (*driver)(nil)
)

// Watch implements backend.Notifier: package locker waits through the
// key's release notices.
func (d *driver) Watch(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	return d.notify.Watch(ctx, channelOf(lockKey(key)))
}
