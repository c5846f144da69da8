package locker

import (
	"context"
	crand "crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/distlock/locker/backend"
)

// Config is what New needs besides the driver. The zero value is usable.
type Config struct {
	// Prefix is prepended to every key before it reaches the backend, so
	// that applications sharing a server keep apart. Lock.Key still
	// returns the key without it. Default: none.
	Prefix string
	// Defaults apply to every Acquire and TryAcquire before the call's own
	// options. Default: WithTTL(DefaultTTL), WithAutoRefresh(true).
	Defaults []Option
	// Logger receives what cannot be returned as an error, such as a
	// background refresh that failed and will be retried. Default:
	// slog.Default().
	Logger *slog.Logger
	// MeterProvider, if set, receives the Locker's metrics; TracerProvider,
	// its spans. See Telemetry in the package documentation for what they
	// record. Default: none, and nothing is recorded.
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
	// TelemetryKeys adds the key to every metric point and span as the
	// attribute locker.key. Default: false, since every distinct key makes
	// a time series of its own.
	TelemetryKeys bool
}

// ResolvedLogger is for backends: it returns c.Logger, or slog.Default()
// when it is nil, the logger of a Locker with this Config. Backends log through it too, so
// that one setting (or none) routes every line of the Locker and its
// driver alike.
func (c *Config) ResolvedLogger() *slog.Logger {
	if c == nil || c.Logger == nil {
		return slog.Default()
	}
	return c.Logger
}

// New returns a Locker that runs the portable logic (validation, waiting,
// the watchdog, Lost) over a backend driver. Backend packages call it; most
// programs use Open or a backend's own constructor instead.
//
// A nil d gives a Locker whose every call returns an error saying so.
func New(d backend.Driver, cfg *Config) Locker {
	if d == nil {
		return failedLocker{errors.New("locker.New: nil driver")}
	}
	c := configure(d, cfg)
	c.held, c.acquiring = map[*lock]struct{}{}, map[*lock]context.CancelCauseFunc{}
	c.wd = newWatchdog(c)
	c.tel = newTelemetry(d, &c.cfg, c.log.Warn)
	return c
}

// configure returns a client of d with cfg, its capabilities and drift
// rule resolved, and nothing running: what New starts from, and what
// CheckConfig checks.
func configure(d backend.Driver, cfg *Config) *client {
	c := &client{d: d, caps: d.Capabilities()}
	if cfg != nil {
		c.cfg = *cfg
	}
	if c.caps.MaxKeyLen <= 0 {
		c.caps.MaxKeyLen = backend.DefaultMaxKeyLen
	}
	if c.caps.MinTTL < minTTL {
		c.caps.MinTTL = minTTL
	}
	c.log = c.cfg.ResolvedLogger()
	c.waiter, _ = d.(backend.Waiter)
	c.notifier, _ = d.(backend.Notifier)
	c.drift = backend.DefaultDrift // unless the driver is a backend.Drifter
	if dr, ok := d.(backend.Drifter); ok {
		c.drift = dr.Drift
	}
	return c
}

// minTTL is the smallest TTL any backend accepts: below it the drift
// allowance leaves no validity.
const minTTL = 5 * time.Millisecond

// Polling bounds, for backends that can neither wait natively nor notify.
// A waiter starts at minPoll and doubles up to maxPoll, jittered, and never
// sleeps past the holder's remaining TTL.
const (
	minPoll = 2 * time.Millisecond
	maxPoll = time.Second
	// notifiedPoll is the safety-net retry interval when the backend
	// notifies releases (a notice can be lost across a reconnect).
	notifiedPoll = 5 * time.Second
)

type client struct {
	d        backend.Driver
	caps     Capabilities
	cfg      Config
	log      *slog.Logger
	waiter   backend.Waiter
	notifier backend.Notifier
	drift    func(ttl time.Duration) time.Duration // allowance subtracted from TTLs
	wd       *watchdog
	tel      *telemetry // nil: no telemetry providers

	mu     sync.Mutex
	closed atomic.Bool // set under mu; read without it by isClosed
	held   map[*lock]struct{}

	// acquiring holds the Acquire and TryAcquire calls in flight, each
	// with the cancel func of the context it runs under: Close ends them
	// with cause ErrClosed, and closes the driver only after they have
	// returned and cleaned up after themselves. idle, made by Close while
	// some are in flight, is closed when the last one leaves.
	acquiring map[*lock]context.CancelCauseFunc
	idle      chan struct{}

	// own is the table of holds of owners (WithOwner).
	own owners
}

func (c *client) Capabilities() Capabilities { return c.caps }

func (c *client) Acquire(ctx context.Context, key string, opts ...Option) (Lock, error) {
	if owner, ok := OwnerFrom(ctx); ok {
		return c.acquireOwned(ctx, owner, key, true, opts)
	}
	return c.acquireNew(ctx, key, true, opts)
}

func (c *client) TryAcquire(ctx context.Context, key string, opts ...Option) (Lock, error) {
	if owner, ok := OwnerFrom(ctx); ok {
		return c.acquireOwned(ctx, owner, key, false, opts)
	}
	return c.acquireNew(ctx, key, false, opts)
}

// acquireNew takes a new hold of key: Acquire (wait) or TryAcquire.
func (c *client) acquireNew(ctx context.Context, key string, wait bool, opts []Option) (Lock, error) {
	switch {
	case c.tel != nil && wait:
		return c.tel.acquire(ctx, c, opAcquire, key, true, opts)
	case c.tel != nil:
		return c.tel.acquire(ctx, c, opTryAcquire, key, false, opts)
	case wait:
		return c.acquire(ctx, "acquire", key, true, opts)
	}
	return c.acquire(ctx, "try-acquire", key, false, opts)
}

func (c *client) isClosed() bool { return c.closed.Load() }

// options applies the Locker's defaults and then the call's options.
func (c *client) options(opts []Option) (options, error) {
	o := defaultOptions()
	for i, f := range c.cfg.Defaults {
		if f == nil {
			return o, fmt.Errorf("Config.Defaults[%d] is a nil Option", i)
		}
		f(&o)
	}
	for i, f := range opts {
		if f == nil {
			return o, fmt.Errorf("option %d of the call is nil", i+1)
		}
		f(&o)
	}
	if o.maxHoldSet && o.maxHold <= 0 {
		return o, fmt.Errorf("WithMaxHold(%v): the maximum hold must be positive", o.maxHold)
	}
	return o, nil
}

func (c *client) checkKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: key is empty", ErrInvalidKey)
	}
	if n := len(c.cfg.Prefix) + len(key); n > c.caps.MaxKeyLen {
		if c.cfg.Prefix != "" {
			return fmt.Errorf("%w: key is %d bytes with its prefix, longer than the %d bytes this backend accepts", ErrInvalidKey, n, c.caps.MaxKeyLen)
		}
		return fmt.Errorf("%w: key is %d bytes, longer than the %d bytes this backend accepts", ErrInvalidKey, n, c.caps.MaxKeyLen)
	}
	return nil
}

func (c *client) checkTTL(ttl time.Duration) error {
	switch {
	case ttl <= 0:
		return fmt.Errorf("%w: TTL must be positive, got %v", ErrInvalidTTL, ttl)
	case ttl < c.caps.MinTTL:
		return fmt.Errorf("%w: TTL %v is below this backend's minimum of %v", ErrInvalidTTL, ttl, c.caps.MinTTL)
	case c.caps.MaxTTL > 0 && ttl > c.caps.MaxTTL:
		return fmt.Errorf("%w: TTL %v is above this backend's maximum of %v", ErrInvalidTTL, ttl, c.caps.MaxTTL)
	case c.drift(ttl) >= ttl:
		return fmt.Errorf("%w: TTL %v leaves no validity after the clock-drift allowance of %v", ErrInvalidTTL, ttl, c.drift(ttl))
	}
	return nil
}

// checkKind refuses a kind the backend does not admit.
func (c *client) checkKind(k backend.Kind) error {
	switch {
	case k == backend.Shared && !c.caps.Shared:
		return fmt.Errorf("%w: backend %s does not admit shared holds (Shared)", ErrUnsupported, c.backendName())
	case k == backend.Permit && !c.caps.Permits:
		return fmt.Errorf("%w: backend %s does not admit semaphores (Limit)", ErrUnsupported, c.backendName())
	}
	return nil
}

// enter records lk's acquisition in flight, unless the Locker is closed.
func (c *client) enter(lk *lock, cancel context.CancelCauseFunc) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Load() {
		return false
	}
	c.acquiring[lk] = cancel
	return true
}

// leaveLocked ends lk's acquisition in flight; c.mu is held.
func (c *client) leaveLocked(lk *lock) {
	delete(c.acquiring, lk)
	if c.idle != nil && len(c.acquiring) == 0 {
		close(c.idle)
		c.idle = nil
	}
}

func (c *client) acquire(ctx context.Context, op, key string, wait bool, opts []Option) (Lock, error) {
	if ctx == nil {
		return nil, opErr(op, key, errNilContext)
	}
	if c.isClosed() {
		return nil, opErr(op, key, ErrClosed)
	}
	o, claim, err := c.request(key, opts)
	if err != nil {
		return nil, opErr(op, key, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, opErr(op, key, err)
	}
	lk := &lock{
		c:           c,
		key:         key,
		token:       newToken(),
		ttl:         o.ttl,
		autoRefresh: o.autoRefresh,
		maxHold:     o.maxHold,
		lost:        make(chan struct{}),
		slots:       noSlots,
	}
	// Close ends the attempt through actx: the driver sees its context
	// end, cleans up what it may have taken, and returns.
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if !c.enter(lk, cancel) {
		return nil, opErr(op, key, ErrClosed)
	}
	err = c.acquireLock(actx, lk, claim, o.value, wait)
	if err != nil {
		c.mu.Lock()
		c.leaveLocked(lk)
		c.mu.Unlock()
		if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(err, ctxErr) {
			err = fmt.Errorf("%w (%w)", ctxErr, err)
		} else if ctx.Err() == nil && errors.Is(context.Cause(actx), ErrClosed) && !errors.Is(err, ErrClosed) {
			err = fmt.Errorf("%w while waiting (%w)", ErrClosed, err)
		}
		return nil, opErr(op, key, err)
	}
	return lk, nil
}

// request applies the Locker's defaults and opts, and checks the request
// they make for key: the key, the TTL, the kind of hold and the value.
func (c *client) request(key string, opts []Option) (options, backend.Claim, error) {
	o, err := c.options(opts)
	if err != nil {
		return o, backend.Claim{}, err
	}
	if err := c.checkKey(key); err != nil {
		return o, backend.Claim{}, err
	}
	if err := c.checkTTL(o.ttl); err != nil {
		return o, backend.Claim{}, err
	}
	kind, limit, weight, err := o.kind()
	if err == nil {
		err = c.checkKind(kind)
	}
	if err == nil {
		err = c.checkValue(o.value)
	}
	return o, backend.Claim{Kind: kind, Limit: limit, Weight: weight}, err
}

// acquireLock takes as much of lk's key as claim says under ctx, which
// ends when the caller's context does or the Locker closes, and moves lk
// from the acquisitions in flight to the held locks. lk does not keep the
// claim: a held lock is the same whatever its kind, and costs no more.
func (c *client) acquireLock(ctx context.Context, lk *lock, claim backend.Claim, value []byte, wait bool) error {
	req := backend.Request{Key: c.cfg.Prefix + lk.key, Token: lk.token, TTL: lk.ttl, OnLost: lk.backendLost,
		Kind: claim.Kind, Limit: claim.Limit, Weight: claim.Weight, Value: value}
	var (
		acq   backend.Acquisition
		start time.Time
		err   error
	)
	switch {
	case !wait:
		start = time.Now()
		acq, err = c.d.TryAcquire(ctx, req)
	case c.waiter != nil:
		start = time.Now()
		acq, err = c.waiter.Acquire(ctx, req)
	default:
		req.Waiting = true
		acq, start, err = c.waitLoop(ctx, req)
	}
	if err != nil {
		return err
	}
	lk.start(acq, start)
	if !c.track(lk) {
		// Closed while we were acquiring: give the lock back, before
		// Close closes the driver (it waits until we leave).
		lk.release(ctx) // detached from ctx, which Close has ended
		return fmt.Errorf("%w while acquiring; the lock taken meanwhile was released", ErrClosed)
	}
	return nil
}

// waitLoop takes req by repeated attempts: woken by release notices where
// the backend sends them, otherwise polling with jittered, doubling delays
// bounded by the holder's remaining TTL.
func (c *client) waitLoop(ctx context.Context, req backend.Request) (backend.Acquisition, time.Time, error) {
	var (
		events  <-chan struct{}
		watched bool      // Watch was tried (it need not have succeeded)
		woken   time.Time // when a release notice woke us, if measured
	)
	backoff := minPoll
	var timer *time.Timer // made when first needed: most acquisitions find the key free
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		start := time.Now()
		acq, err := c.d.TryAcquire(ctx, req)
		if err == nil {
			if !woken.IsZero() {
				c.tel.handoff(req.Key[len(c.cfg.Prefix):], woken)
			}
			return acq, start, nil
		}
		if !errors.Is(err, ErrNotAcquired) {
			return acq, start, err
		}
		if c.notifier != nil && !watched {
			// Watch only once the key turned out to be busy: a free key
			// costs no subscription. The release may have come between
			// that attempt and the watch starting, so try again at once.
			watched = true
			ev, stop, werr := c.notifier.Watch(ctx, req.Key)
			if werr == nil {
				events = ev
				defer stop()
				continue
			}
			if ctx.Err() != nil {
				return acq, start, ctx.Err()
			}
			c.log.Warn("locker: release notices unavailable, polling instead", "key", req.Key, "err", werr)
		}
		if d := nextPoll(err, events != nil, &backoff); timer == nil {
			timer = time.NewTimer(d)
		} else {
			timer.Reset(d)
		}
		select {
		case <-ctx.Done():
			return acq, start, ctx.Err()
		case <-events:
			woken = c.tel.wokenAt()
		case <-timer.C:
			woken = time.Time{}
		}
	}
}

// nextPoll is how long a waiter waits before its next attempt, after one
// that failed with err (a Busy may tell the holder's remaining TTL): with
// release notices, a long safety poll; without, a jittered delay that
// doubles (backoff) up to maxPoll; either way no later than the holder's
// expiry.
func nextPoll(err error, notified bool, backoff *time.Duration) time.Duration {
	var d time.Duration
	if notified {
		d = notifiedPoll
	} else {
		d = jitter(*backoff)
		*backoff = min(2**backoff, maxPoll)
	}
	var busy *backend.Busy
	if errors.As(err, &busy) && busy.Remaining > 0 && busy.Remaining < d {
		// The holder expires before we would look again: look then.
		d = busy.Remaining + jitter(minPoll)
	}
	return d
}

// jitter returns a duration uniform in [d/2, d], so that contending
// waiters fall out of step.
func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}

// track moves lk from the acquisitions in flight to the held locks, unless
// the Locker is closed.
func (c *client) track(lk *lock) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Load() {
		return false
	}
	c.leaveLocked(lk)
	// A backend may report the lock gone before Acquire returns it (etcd
	// registers it with its lease first): untrack ran before this, so a
	// gone lock is not added, or it would stay until Close. A loss after
	// this check untracks it as usual. c.mu before lk.mu, as everywhere.
	lk.mu.Lock()
	gone := lk.state == stateGone
	lk.mu.Unlock()
	if !gone {
		c.held[lk] = struct{}{}
	}
	return true
}

func (c *client) untrack(lk *lock) {
	c.mu.Lock()
	delete(c.held, lk)
	c.mu.Unlock()
}

func (c *client) Close() error {
	c.mu.Lock()
	if c.closed.Load() {
		c.mu.Unlock()
		return nil
	}
	c.closed.Store(true)
	// Acquisitions in flight end now, and clean up on the driver before it
	// closes. One that took its lock meanwhile finds the Locker closed and
	// releases the lock itself.
	var idle chan struct{}
	if len(c.acquiring) > 0 {
		idle = make(chan struct{})
		c.idle = idle
	}
	for _, cancel := range c.acquiring {
		cancel(ErrClosed)
	}
	c.mu.Unlock()
	c.waitAcquiring(idle)
	c.mu.Lock()
	locks := make([]*lock, 0, len(c.held))
	for lk := range c.held {
		locks = append(locks, lk)
	}
	c.mu.Unlock()

	c.wd.stop()
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, len(locks))
	for i, lk := range locks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := lk.release(ctx); err != nil && !errors.Is(err, ErrNotHeld) {
				errs[i] = opErr("release", lk.key, err)
			}
		}()
	}
	wg.Wait()
	if err := c.d.Close(); err != nil {
		errs = append(errs, &OpError{Op: "close", Err: err})
	}
	return errors.Join(errs...)
}

// waitAcquiring waits for the acquisitions in flight to return, for at
// most releaseTimeout: a driver that ignores its context must not keep
// Close from closing the rest.
func (c *client) waitAcquiring(idle <-chan struct{}) {
	if idle == nil {
		return
	}
	t := time.NewTimer(releaseTimeout)
	defer t.Stop()
	select {
	case <-idle:
	case <-t.C:
		c.log.Warn("locker: close: acquisitions still in flight after the timeout; closing the backend under them", "timeout", releaseTimeout)
	}
}

// tokenRand holds ChaCha8 generators (cryptographically strong), each
// seeded from crypto/rand. A token from one costs a fraction of a
// crypto/rand.Read, a system call on every acquisition.
var tokenRand = sync.Pool{New: func() any {
	var seed [32]byte
	crand.Read(seed[:]) // crypto/rand.Read never fails (Go 1.24+)
	return rand.NewChaCha8(seed)
}}

// newToken returns 16 random bytes, base64url-encoded.
func newToken() string {
	var b [16]byte
	r := tokenRand.Get().(*rand.ChaCha8)
	r.Read(b[:])
	tokenRand.Put(r)
	var s [22]byte // base64.RawURLEncoding.EncodedLen(16)
	base64.RawURLEncoding.Encode(s[:], b[:])
	return string(s[:])
}

// failedLocker is what New returns when it cannot make a Locker: every
// call returns err.
type failedLocker struct{ err error }

func (f failedLocker) Acquire(_ context.Context, key string, _ ...Option) (Lock, error) {
	return nil, opErr("acquire", key, f.err)
}

func (f failedLocker) TryAcquire(_ context.Context, key string, _ ...Option) (Lock, error) {
	return nil, opErr("try-acquire", key, f.err)
}

func (f failedLocker) Capabilities() Capabilities { return Capabilities{} }
func (f failedLocker) Close() error               { return nil }
