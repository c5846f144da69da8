package redlock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distlock/locker/backend"
	"github.com/distlock/locker/internal/redisconn"
)

var (
	//go:embed scripts/release.lua
	releaseLua string
	//go:embed scripts/refresh.lua
	refreshLua string
	//go:embed scripts/pttl.lua
	pttlLua string

	// The holder's remaining TTL, asked only after a refused round.
	holderTTLScript = redisconn.NewScript("holder-ttl", "return redis.call('PTTL', KEYS[1])", 1)
	releaseScript   = redisconn.NewScript("release", releaseLua, 1)
	refreshScript   = redisconn.NewScript("refresh", refreshLua, 1)
	pttlScript      = redisconn.NewScript("pttl", pttlLua, 1)
)

// Names on every node: lock K is the key "redlock:{k:K}", its releases are
// published on "redlock:{k:K}:released". They differ from the redis
// package's, so the two backends never mistake each other's locks.
func lockKey(k string) string   { return "redlock:{k:" + k + "}" }
func channelOf(k string) string { return lockKey(k) + ":released" }

// node is one independent Redis master.
type node struct {
	addr   string // for error messages
	c      redisconn.Conn
	notify *redisconn.Notifier
}

type driver struct {
	nodes  []*node
	quorum int
	cfg    settings
	log    *slog.Logger
	now    func() time.Time // the clock; replaced in tests
}

// settings are the tunables of the algorithm, defaults applied.
type settings struct {
	nodeTimeout time.Duration
	driftFactor float64
	minDrift    time.Duration
	retryDelay  time.Duration
}

func newDriver(nodes []*node, cfg settings, log *slog.Logger) *driver {
	return &driver{nodes: nodes, quorum: len(nodes)/2 + 1, cfg: cfg, log: log, now: time.Now}
}

func (d *driver) Capabilities() backend.Capabilities {
	return backend.Capabilities{
		// No consensus over a counter, so no fencing token that is safe;
		// see the package doc.
		Fencing:       false,
		WakeOnRelease: true,
		// Below this the drift allowance and a loopback round trip leave
		// no validity to speak of.
		MinTTL: 10 * time.Millisecond,
		// As for one Redis server: expiry is exact to the millisecond
		// once a key is touched, and every attempt touches it.
		ExpirySlack: 50 * time.Millisecond,
	}
}

// Drift is the clock-drift allowance: TTL x DriftFactor + MinDrift.
func (d *driver) Drift(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*d.cfg.driftFactor) + d.cfg.minDrift
}

func (d *driver) Close() error {
	var errs []error
	for _, n := range d.nodes {
		n.notify.Close()
		if err := n.c.Close(); err != nil {
			errs = append(errs, fmt.Errorf("redlock: closing %s: %w", n.addr, err))
		}
	}
	return errors.Join(errs...)
}

// outcome is one node's answer to one request.
type outcome struct {
	n   int64
	err error
}

// fanOut runs script on every node at once, each bounded by the per-node
// timeout (and by ctx), and returns every node's outcome. It returns when
// all nodes have answered or the per-node timeout has passed, whichever
// is first: a node that does not answer in time counts as failed even if
// its client, built without ContextTimeoutEnabled, goes on waiting.
func (d *driver) fanOut(ctx context.Context, s *redisconn.Script, key string, args ...any) []outcome {
	return d.each(ctx, func(ctx context.Context, n *node) (int64, error) {
		v, err := n.c.Eval(ctx, s, []string{lockKey(key)}, args...)
		if err != nil {
			return 0, err
		}
		return redisconn.AsInt(v)
	})
}

// each runs op on every node at once; see fanOut.
func (d *driver) each(ctx context.Context, op func(ctx context.Context, n *node) (int64, error)) []outcome {
	out := make([]outcome, len(d.nodes))
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, d.cfg.nodeTimeout)
	defer cancel()
	type answer struct {
		i int
		o outcome
	}
	answers := make(chan answer, len(d.nodes))
	for i, n := range d.nodes {
		go func() {
			x, err := op(ctx, n)
			answers <- answer{i, outcome{x, err}}
		}()
	}
	answered := make([]bool, len(d.nodes))
	for pending := len(d.nodes); pending > 0; pending-- {
		select {
		case a := <-answers:
			out[a.i] = a.o
			answered[a.i] = true
			continue
		case <-ctx.Done():
		}
		break
	}
	for i := range out {
		if !answered[i] {
			out[i].err = fmt.Errorf("no answer within %v", d.cfg.nodeTimeout)
			if err := parent.Err(); err != nil {
				out[i].err = err
			}
		}
	}
	return out
}

// nodeErrors describes the nodes that failed, for an error message.
func (d *driver) nodeErrors(out []outcome) string {
	var parts []string
	for i, o := range out {
		if o.err != nil {
			parts = append(parts, fmt.Sprintf("%s: %v", d.nodes[i].addr, o.err))
		}
	}
	return strings.Join(parts, "; ")
}

// TryAcquire is one round of the Redlock algorithm: SET NX PX (the plain
// command, the cheapest for the servers) with one token on all nodes at
// once; the lock is ours when a majority accepted
// and validity (TTL - elapsed - drift) is left. Otherwise it is released
// on every node that did not clearly refuse.
func (d *driver) TryAcquire(ctx context.Context, req backend.Request) (backend.Acquisition, error) {
	acq, err, _ := d.round(ctx, req)
	return acq, err
}

// round is TryAcquire, also reporting a split vote: no node answered with
// a holder that has a majority.
func (d *driver) round(ctx context.Context, req backend.Request) (_ backend.Acquisition, _ error, split bool) {
	start := d.now()
	out := d.each(ctx, func(ctx context.Context, n *node) (int64, error) {
		ok, err := n.c.SetNX(ctx, lockKey(req.Key), req.Token, time.Duration(ms(req.TTL))*time.Millisecond)
		if ok {
			return 1, err
		}
		return 0, err
	})
	elapsed := d.now().Sub(start)
	validity := req.TTL - elapsed - d.Drift(req.TTL)

	acquired, refused, failed := 0, 0, 0
	for _, o := range out {
		switch {
		case o.err != nil:
			failed++
		case o.n == 1:
			acquired++
		default:
			refused++
		}
	}
	if acquired >= d.quorum && validity > 0 {
		h := &held{d: d, key: req.Key, token: req.Token}
		return backend.Acquisition{Held: h, Start: start, Validity: validity}, nil, false
	}
	// Failed: undo on every node that may have taken it, those that timed
	// out included (their SET may have landed). A node that answered with
	// another holder's TTL certainly did not.
	if acquired > 0 || failed > 0 {
		d.releaseWhere(req, out, func(o outcome) bool { return o.err != nil || o.n == 1 })
	}
	if err := ctx.Err(); err != nil {
		return backend.Acquisition{}, err, false
	}
	switch {
	case acquired+refused < d.quorum:
		return backend.Acquisition{}, &noQuorumError{fmt.Sprintf("redlock: only %d of %d nodes answered, %d needed for a majority (%s)",
			acquired+refused, len(d.nodes), d.quorum, d.nodeErrors(out))}, false
	case acquired >= d.quorum:
		// A majority, but no validity left: the TTL is too short for the
		// time the round took. Another round may be quicker.
		return backend.Acquisition{}, &backend.Busy{Remaining: d.retryDelay(), Reason: fmt.Sprintf(
			"a majority accepted, but the round took %v of the %v TTL, leaving no validity after the drift allowance of %v",
			elapsed.Round(time.Microsecond), req.TTL, d.Drift(req.TTL))}, true
	case refused >= d.quorum:
		return backend.Acquisition{}, &backend.Busy{Remaining: d.holderTTL(ctx, req.Key, out)}, false
	}
	// A split vote: no client holds a majority. Retry after a random
	// delay, so that the contenders fall out of step.
	return backend.Acquisition{}, &backend.Busy{
		Remaining: d.retryDelay(),
		Reason:    fmt.Sprintf("split vote: %d of %d nodes accepted, %d refused", acquired, len(d.nodes), refused),
	}, true
}

// holderTTL asks the nodes that refused for the holder's remaining TTL, so
// that a waiter tries again when a holder that died without releasing
// expires. It returns the smallest, 1 ms when a refusing node no longer
// has the key (it expired since it refused: try again now), or 0 when no
// node tells.
func (d *driver) holderTTL(ctx context.Context, key string, out []outcome) time.Duration {
	left := d.each(ctx, func(ctx context.Context, n *node) (int64, error) {
		v, err := n.c.Eval(ctx, holderTTLScript, []string{lockKey(key)})
		if err != nil {
			return 0, err
		}
		return redisconn.AsInt(v)
	})
	remaining := time.Duration(-1)
	for i, o := range left {
		if out[i].err != nil || out[i].n == 1 || o.err != nil || o.n == -1 {
			continue // not a refusing node, or a key without a TTL (not ours to tell)
		}
		// PTTL is -2 for a key that is gone.
		if l := time.Duration(max(o.n, 1)) * time.Millisecond; remaining < 0 || l < remaining {
			remaining = l
		}
	}
	if remaining < 0 {
		return 0
	}
	return max(remaining, time.Millisecond)
}

// releaseWhere runs the compare-and-delete on the nodes whose outcome
// matches, after the caller's context may have ended.
func (d *driver) releaseWhere(req backend.Request, out []outcome, match func(outcome) bool) {
	ctx, cancel := context.WithTimeout(context.Background(), d.cfg.nodeTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for i, n := range d.nodes {
		if !match(out[i]) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			n.c.Eval(ctx, releaseScript, []string{lockKey(req.Key)}, req.Token, channelOf(req.Key))
		}()
	}
	wg.Wait()
}

// retryDelay is a random delay in [RetryDelay/2, RetryDelay].
func (d *driver) retryDelay() time.Duration {
	return d.cfg.retryDelay/2 + rand.N(d.cfg.retryDelay/2+1)
}

func ms(d time.Duration) int64 { return max(d.Milliseconds(), 1) }

// Acquire implements backend.Waiter: rounds of TryAcquire, woken by release
// notices from any node, by the holder's TTL, or after a split vote by a
// random delay.
func (d *driver) Acquire(ctx context.Context, req backend.Request) (backend.Acquisition, error) {
	var w *watch
	defer func() {
		if w != nil {
			w.stop()
		}
	}()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	unanswered := 0 // rounds in a row that reached no majority
	for {
		acq, err, split := d.round(ctx, req)
		var nq *noQuorumError
		if errors.As(err, &nq) && unanswered < noQuorumRetries {
			// Perhaps a burst of new connections on a loaded machine:
			// try again shortly, a bounded number of times, so that a
			// majority that is really gone still fails the call soon.
			unanswered++
			timer.Reset(d.retryDelay())
			select {
			case <-ctx.Done():
				return backend.Acquisition{}, ctx.Err()
			case <-timer.C:
			}
			continue
		}
		unanswered = 0
		var busy *backend.Busy
		if !errors.As(err, &busy) {
			return acq, err
		}
		if w == nil {
			// Watch only once the key is busy. Until a majority confirms,
			// the waiter polls, so a release in between is not missed.
			w = d.watch(ctx, req.Key)
		}
		wait := busy.Remaining
		if wait <= 0 || wait > maxWait {
			wait = maxWait
		}
		if !w.ok() {
			// Notices are not sure to reach us yet: poll as well.
			wait = min(wait, d.cfg.retryDelay*4)
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return backend.Acquisition{}, ctx.Err()
		case <-w.events:
			if split {
				// Do not retry in step with the other contender, which
				// got the same notice: finish the random delay.
				select {
				case <-ctx.Done():
					return backend.Acquisition{}, ctx.Err()
				case <-timer.C:
				}
			}
		case <-timer.C:
		}
	}
}

// noQuorumRetries is how many more rounds a waiting Acquire makes after a
// round that fewer than a majority of nodes answered, before it fails.
const noQuorumRetries = 2

// noQuorumError: fewer than a majority of nodes answered a round.
type noQuorumError struct{ msg string }

func (e *noQuorumError) Error() string { return e.msg }

// maxWait bounds a waiter's sleep when it learned nothing better.
const maxWait = 5 * time.Second

// watch is one waiter's subscription to a key's release notices on every
// node.
type watch struct {
	events    chan struct{}
	quorum    int
	confirmed atomic.Int32
	mu        sync.Mutex
	stops     []func()
	cancel    context.CancelFunc
	wg        sync.WaitGroup
}

// ok reports whether a majority of nodes confirmed the subscription: a
// release is published by every node where the holder's key was, a
// majority, so one of ours hears it. Until then the waiter also polls.
func (w *watch) ok() bool { return int(w.confirmed.Load()) >= w.quorum }

// watch subscribes to key's release channel on every node at once, in the
// background: a waiter does not wait for slow or dead nodes to confirm.
func (d *driver) watch(ctx context.Context, key string) *watch {
	w := &watch{events: make(chan struct{}, 1), quorum: d.quorum}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w.cancel = cancel
	for _, n := range d.nodes {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			stop, err := n.notify.WatchInto(wctx, channelOf(key), w.events)
			if err != nil {
				return
			}
			w.mu.Lock()
			w.stops = append(w.stops, stop)
			w.mu.Unlock()
			w.confirmed.Add(1)
		}()
	}
	return w
}

func (w *watch) stop() {
	w.cancel()
	w.wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.stops {
		s()
	}
}

type held struct {
	d     *driver
	key   string
	token string
}

// Refresh extends the lock on every node; it counts only if a majority
// extended it and validity is left, measured from before the round.
func (h *held) Refresh(ctx context.Context, ttl time.Duration) error {
	d := h.d
	start := d.now()
	out := d.fanOut(ctx, refreshScript, h.key, h.token, ms(ttl))
	validity := ttl - d.now().Sub(start) - d.Drift(ttl)
	extended, notOurs := 0, 0
	for _, o := range out {
		switch {
		case o.err != nil:
		case o.n == 1:
			extended++
		default:
			notOurs++
		}
	}
	switch {
	case extended >= d.quorum && validity > 0:
		return nil
	case notOurs >= d.quorum:
		return fmt.Errorf("%w: %d of %d nodes no longer hold it", backend.ErrNotHeld, notOurs, len(d.nodes))
	case extended >= d.quorum:
		return fmt.Errorf("redlock: refresh reached a majority too late: no validity left after %v", d.now().Sub(start).Round(time.Microsecond))
	}
	return fmt.Errorf("redlock: refresh reached %d of %d nodes, %d needed (%s)", extended, len(d.nodes), d.quorum, d.nodeErrors(out))
}

// TTL returns how long a majority of nodes still hold the lock: the
// quorum-th longest remaining TTL among the nodes that have it. Package
// locker returns the smaller of this and the local validity.
func (h *held) TTL(ctx context.Context) (time.Duration, error) {
	d := h.d
	out := d.fanOut(ctx, pttlScript, h.key, h.token)
	var left []time.Duration
	answered := 0
	for _, o := range out {
		if o.err != nil {
			continue
		}
		answered++
		if o.n >= 0 {
			left = append(left, time.Duration(o.n)*time.Millisecond)
		}
	}
	if len(left) >= d.quorum {
		slices.Sort(left)
		slices.Reverse(left)
		return left[d.quorum-1], nil
	}
	if answered-len(left) >= d.quorum {
		return 0, fmt.Errorf("%w: %d of %d nodes no longer hold it", backend.ErrNotHeld, answered-len(left), len(d.nodes))
	}
	return 0, fmt.Errorf("redlock: TTL reached only %d of %d nodes, %d needed (%s)", answered, len(d.nodes), d.quorum, d.nodeErrors(out))
}

// Release deletes the lock on every node that holds our token.
func (h *held) Release(ctx context.Context) error {
	d := h.d
	out := d.fanOut(ctx, releaseScript, h.key, h.token, channelOf(h.key))
	released, notOurs := 0, 0
	for _, o := range out {
		switch {
		case o.err != nil:
		case o.n == 1:
			released++
		default:
			notOurs++
		}
	}
	switch {
	case released > 0 && released+notOurs == len(d.nodes):
		return nil
	case released >= d.quorum:
		// Freed for others; the nodes that did not answer let their copy
		// expire, and a minority copy blocks nobody.
		return nil
	case released == 0 && notOurs >= d.quorum:
		return fmt.Errorf("%w: %d of %d nodes did not hold it", backend.ErrNotHeld, notOurs, len(d.nodes))
	}
	return fmt.Errorf("redlock: release reached %d of %d nodes (%d released it); where it did not, it lasts until its TTL (%s)",
		released+notOurs, len(d.nodes), released, d.nodeErrors(out))
}
