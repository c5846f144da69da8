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

// Names on every node: lock K is the key "redlock:{k:K}", its releases are
// published on "redlock:{k:K}:released", its grants made by a script and
// its new values on "redlock:{k:K}:changed". They differ from the redis
// package's, so the two backends never mistake each other's locks.
func lockKey(k string) string   { return "redlock:{k:" + k + "}" }
func channelOf(k string) string { return lockKey(k) + ":released" }
func changedOf(k string) string { return lockKey(k) + ":changed" }

// node is one independent Redis master.
type node struct {
	addr string // for error messages and logs
	c    redisconn.Conn
	// notify delivers the node's release notices; while the node is
	// unreachable and nobody watches, it does not dial it.
	notify *redisconn.Notifier
	// inFlight bounds the requests sent to the node and not yet
	// answered (see window).
	inFlight *window
	health
}

func newNode(addr string, c redisconn.Conn, log *slog.Logger) *node {
	return &node{addr: addr, c: c, notify: redisconn.NewNotifier(c, log.With("node", addr)),
		inFlight: newWindow(maxInFlight()), health: health{down: make(chan struct{})}}
}

// send waits until a request can go to n (see window), and returns the
// function that frees its slot once it is answered or timed out. It
// fails when ctx ends first, when the driver closes (stop), or when n is
// skipped meanwhile (unless skipped is set: n was skipped already and is
// asked anyway), as the requests in front of this one then failed.
func (n *node) send(ctx context.Context, stop <-chan struct{}, skipped bool) (done func(timedOut bool), _ error) {
	var down <-chan struct{}
	if !skipped {
		down = n.downSignal()
	}
	select {
	case n.inFlight.slots <- struct{}{}:
		return n.inFlight.done, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-stop:
		return nil, backend.ErrClosed
	case <-down:
		if err := n.skipped(); err != nil {
			return nil, err
		}
		return n.send(ctx, stop, skipped) // back in use already
	}
}

type driver struct {
	nodes  []*node
	quorum int
	cfg    settings
	log    *slog.Logger
	now    func() time.Time // the clock; replaced in tests

	// stop ends the prober and its probes at Close.
	stop       context.Context
	cancelStop context.CancelFunc
	probeWake  chan struct{}
	work       *workers // run each node's part of a request
	// wg counts the goroutines that may still use the clients: requests
	// that outlived their round, the prober, notifiers closing. Close
	// waits for them before it closes the clients, so that nothing dials
	// a node after Close.
	wg      sync.WaitGroup
	mu      sync.RWMutex
	closed  bool
	probing bool // the prober runs
}

// settings are the tunables of the algorithm, defaults applied.
type settings struct {
	nodeTimeout time.Duration
	driftFactor float64
	minDrift    time.Duration
	retryDelay  time.Duration
	// How long the prober waits before it first asks a skipped node, and
	// at most between two probes. Defaults 100ms and 2s.
	probeMin, probeMax time.Duration
}

func newDriver(nodes []*node, cfg settings, log *slog.Logger) *driver {
	if cfg.probeMin == 0 {
		cfg.probeMin = 100 * time.Millisecond
	}
	if cfg.probeMax == 0 {
		cfg.probeMax = 2 * time.Second
	}
	d := &driver{nodes: nodes, quorum: len(nodes)/2 + 1, cfg: cfg, log: log, now: time.Now, probeWake: make(chan struct{}, 1)}
	d.stop, d.cancelStop = context.WithCancel(context.Background())
	// Enough idle workers for a few rounds at once on every node.
	d.work = newWorkers(4*len(nodes), d.stop.Done())
	return d
}

func (d *driver) Capabilities() backend.Capabilities {
	return backend.Capabilities{
		Name: "redlock",
		// No consensus over a counter, so no fencing token that is safe;
		// see the package doc.
		Fencing:       false,
		WakeOnRelease: true,
		// Every node keeps a hash of holders per key, as one Redis
		// server does; a semaphore of k permits needs more nodes than a
		// majority (quorumOf).
		Shared:  true,
		Permits: true,
		// Values live in every node's hash of holders, as on one Redis
		// server; see the package doc.
		MaxValueLen: redisconn.MaxValueLen,
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
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	d.cancelStop()
	d.wg.Wait()
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

// fanOut runs script on every node at once, for a request that needs q
// of them (onQuorum), each bounded by the per-node timeout (and by ctx),
// and returns every node's outcome. A node that does not answer in time
// counts as failed even if its client, built without
// ContextTimeoutEnabled, goes on waiting.
func (d *driver) fanOut(ctx context.Context, q int, s *redisconn.Script, key string, args ...any) []outcome {
	vals, errs := onQuorum(ctx, d, q, func(ctx context.Context, i int) (int64, error) {
		return redisconn.EvalInt(ctx, d.nodes[i].c, s, []string{lockKey(key)}, args...)
	})
	out := make([]outcome, len(d.nodes))
	for i := range out {
		out[i] = outcome{vals[i], errs[i]}
	}
	return out
}

// onEvery runs op on every node (by index) at once, each bounded by the
// per-node timeout from when it is sent (see window) and by ctx, and
// returns each node's value and error. It returns when every node has
// answered or timed out: a node that did not answer in time has an error
// and the zero value, even if its op is still running (the client may not
// honour contexts).
//
// A skipped node is not asked, and its error says so at once, unless too
// few nodes are left for a majority: skipping never costs a majority that
// the nodes would have given. Every node's outcome goes on its record of
// failures.
func onEvery[T any](ctx context.Context, d *driver, op func(ctx context.Context, i int) (T, error)) ([]T, []error) {
	return onQuorum(ctx, d, d.quorum, op)
}

// onQuorum is onEvery for a request that needs q nodes rather than a
// majority (a semaphore's hold): skipped nodes are asked too when fewer
// than q are left.
func onQuorum[T any](ctx context.Context, d *driver, q int, op func(ctx context.Context, i int) (T, error)) ([]T, []error) {
	t := tally[T]{vals: make([]T, len(d.nodes)), errs: make([]error, len(d.nodes)), answered: make([]bool, len(d.nodes))}
	asked := 0
	for i, n := range d.nodes {
		if t.errs[i] = n.skipped(); t.errs[i] != nil {
			t.answered[i] = true
			continue
		}
		asked++
	}
	if asked < q {
		clear(t.errs)
		clear(t.answered)
		asked = len(d.nodes)
	}
	if !d.begin(asked) {
		for i := range t.errs {
			t.errs[i] = backend.ErrClosed
		}
		return t.vals, t.errs
	}
	t.ask(ctx, d, op, asked)
	d.observe(ctx, t.errs)
	return t.vals, t.errs
}

// A tally is what the nodes answered in one onEvery, by node index.
type tally[T any] struct {
	vals     []T
	errs     []error
	answered []bool // skipped nodes count as answered
}

// ask runs op on the asked nodes, those not answered yet, at once, and
// fills in their values and errors. Each node's request waits for a slot
// (send), and the per-node timeout starts only then: a node that did not
// answer within it, or before ctx ended, gets an error that says so.
func (t *tally[T]) ask(ctx context.Context, d *driver, op func(ctx context.Context, i int) (T, error), asked int) {
	type answer struct {
		i   int
		v   T
		err error
	}
	// Up to two per node: its timeout's and its own, whichever is first.
	answers := make(chan answer, 2*asked)
	for i, n := range d.nodes {
		if t.answered[i] {
			continue
		}
		skipped := n.skipped() != nil // asked all the same: too few others
		d.work.do(func() {
			defer d.wg.Done()
			done, err := n.send(ctx, d.stop.Done(), skipped)
			if err != nil {
				answers <- answer{i: i, err: err}
				return
			}
			// The timer bounds a client that does not honour contexts.
			timeout := time.AfterFunc(d.cfg.nodeTimeout, func() {
				answers <- answer{i: i, err: fmt.Errorf("no answer within %v", d.cfg.nodeTimeout)}
			})
			nctx, cancel := context.WithTimeout(ctx, d.cfg.nodeTimeout)
			v, err := op(nctx, i)
			done(nctx.Err() != nil && ctx.Err() == nil)
			cancel()
			timeout.Stop()
			answers <- answer{i, v, err}
		})
	}
	for pending := asked; pending > 0; {
		select {
		case a := <-answers:
			if !t.answered[a.i] {
				t.vals[a.i], t.errs[a.i], t.answered[a.i] = a.v, a.err, true
				pending--
			}
			continue
		case <-ctx.Done():
		}
		break
	}
	for i := range t.errs {
		if !t.answered[i] {
			t.errs[i] = ctx.Err()
		}
	}
}

// begin counts n requests about to start, unless the driver is closed.
// Every round begins here: a read lock, so that rounds do not queue on one
// another, only on Close.
func (d *driver) begin(n int) bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.closed {
		return false
	}
	d.wg.Add(n)
	return true
}

// failedNodes is nodeErrors as a clause to append to a message, or "".
func (d *driver) failedNodes(out []outcome) string {
	if e := d.nodeErrors(out); e != "" {
		return "; failed: " + e
	}
	return ""
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

// TryAcquire is one round of the Redlock algorithm: SET NX PX with one
// token on all nodes at once (redisconn.Take: its script on a node that refused:
// a late copy of our own SET there counts as ours), or for a shared or
// permit hold the hold script (redisconn.Hold); the lock is ours when
// a quorum (quorumOf: a majority, or more for a semaphore) accepted
// and validity (TTL - elapsed - drift) is left. Otherwise it is released
// on every node that did not clearly refuse.
func (d *driver) TryAcquire(ctx context.Context, req backend.Request) (backend.Acquisition, error) {
	acq, _, err := d.round(ctx, req)
	return acq, err
}

// quorumOf is how many of the nodes must grant a hold of kind k (with a
// Permit's limit) for it to be held. Exclusive and shared holds conflict
// pairwise, and two majorities share a node, which admits only one of
// two conflicting holds: a majority keeps them apart. A semaphore of
// limit permits needs more: k + 1 holders fit, each on q of n nodes,
// whenever (k + 1) * q <= k * n, since each node admits k; so q is the
// least number above k * n / (k + 1). A limit of 1 gives the majority.
// See the package doc, # Shared holds and semaphores.
func quorumOf(k backend.Kind, limit, n int) int {
	if k != backend.Permit {
		return n/2 + 1
	}
	return int(int64(limit)*int64(n)/(int64(limit)+1)) + 1
}

// take is one node's part of a round: Take for an exclusive hold without
// a value, Hold for a shared or permit hold or an exclusive one with a
// value, which also stores the value and publishes the grant.
func take(ctx context.Context, n *node, req backend.Request) (redisconn.Grant, error) {
	if req.Kind == backend.Exclusive && len(req.Value) == 0 {
		return redisconn.Take(ctx, n.c, lockKey(req.Key), req.Token, req.TTL)
	}
	return redisconn.Hold(ctx, n.c, redisconn.HoldRequest{Key: lockKey(req.Key), Token: req.Token, TTL: req.TTL,
		Claim: backend.ClaimOf(req), Value: req.Value, Channel: changedOf(req.Key)})
}

// gatedRound is a waiter's round. A release notice wakes every waiter at
// once, and rounds started together split the vote, so that nobody wins:
// instead, every waiter first asks the same node, the first that is not
// skipped, alone. That node's SET NX lets exactly one through; the others
// learn the key is taken, with the new holder's TTL, at the cost of one
// request. The one let through then runs the whole round, where that
// node counts its own token as taken. If the gate fails to answer, the
// whole round runs as usual.
func (d *driver) gatedRound(ctx context.Context, req backend.Request) (backend.Acquisition, bool, error) {
	for _, n := range d.nodes {
		if n.skipped() != nil {
			continue
		}
		if !d.begin(1) {
			return backend.Acquisition{}, false, backend.ErrClosed
		}
		g, err := gate(ctx, d, n, req)
		d.wg.Done()
		if err == nil && !g.Taken && g.Mismatch == nil {
			return backend.Acquisition{}, false, &backend.Busy{Remaining: g.Remaining}
		}
		break
	}
	return d.round(ctx, req)
}

// gate is gatedRound's request to the gate node n, timed as a round's.
func gate(ctx context.Context, d *driver, n *node, req backend.Request) (redisconn.Grant, error) {
	done, err := n.send(ctx, d.stop.Done(), false)
	if err != nil {
		return redisconn.Grant{}, err
	}
	gctx, cancel := context.WithTimeout(ctx, d.cfg.nodeTimeout)
	defer cancel()
	g, err := take(gctx, n, req)
	done(gctx.Err() != nil && ctx.Err() == nil)
	return g, err
}

// round is TryAcquire, also reporting a split vote: no node answered with
// a holder that has a majority.
func (d *driver) round(ctx context.Context, req backend.Request) (_ backend.Acquisition, split bool, _ error) {
	q := quorumOf(req.Kind, req.Limit, len(d.nodes))
	start := d.now()
	grants, errs := onQuorum(ctx, d, q, func(ctx context.Context, i int) (redisconn.Grant, error) { return take(ctx, d.nodes[i], req) })
	elapsed := d.now().Sub(start)
	validity := req.TTL - elapsed - d.Drift(req.TTL)

	v := countVotes(grants, errs)
	if v.acquired >= q && validity > 0 {
		h := &held{d: d, key: req.Key, token: req.Token, kind: req.Kind, quorum: q}
		return backend.Acquisition{Held: h, Start: start, Validity: validity}, false, nil
	}
	// Failed: undo on every node that may have taken it, those that timed
	// out included (their SET may have landed). A node that answered with
	// another holder's TTL, or with another family, certainly did not.
	out := outcomes(errs)
	if v.acquired > 0 || v.failed > 0 {
		d.releaseWhere(req, func(i int) bool { return errs[i] != nil || grants[i].Taken })
	}
	if err := ctx.Err(); err != nil {
		return backend.Acquisition{}, false, err
	}
	switch answered := v.acquired + v.refused + v.mismatched; {
	case v.mismatched >= d.quorum:
		// A majority of nodes have holders of another family: so do the
		// key's holders, since a hold is on a majority at least.
		return backend.Acquisition{}, false, v.mismatch
	case answered < q:
		return backend.Acquisition{}, false, &noQuorumError{fmt.Sprintf("redlock: only %d of %d nodes answered, %d needed for %s (%s)",
			answered, len(d.nodes), q, quorumName(req), d.nodeErrors(out))}
	case v.acquired >= q:
		// A quorum, but no validity left: the TTL is too short for the
		// time the round took. Another round may be quicker.
		return backend.Acquisition{}, true, &backend.Busy{Remaining: d.retryDelay(), Reason: fmt.Sprintf(
			"%d nodes accepted, but the round took %v of the %v TTL, leaving no validity after the drift allowance of %v%s",
			v.acquired, elapsed.Round(time.Microsecond), req.TTL, d.Drift(req.TTL), d.failedNodes(out))}
	case v.refused >= d.quorum:
		return backend.Acquisition{}, false, &backend.Busy{Remaining: holderTTL(grants, errs)}
	}
	// A split vote: no client holds a majority. Retry after a random
	// delay, so that the contenders fall out of step.
	return backend.Acquisition{}, true, &backend.Busy{
		Remaining: d.retryDelay(),
		Reason:    fmt.Sprintf("split vote: %d of %d nodes accepted, %d refused, %d needed", v.acquired, len(d.nodes), v.refused+v.mismatched, q),
	}
}

// quorumName says what the quorum of req is, for an error message.
func quorumName(req backend.Request) string {
	if req.Kind == backend.Permit && req.Limit > 1 {
		return fmt.Sprintf("a semaphore of %d permits", req.Limit)
	}
	return "a majority"
}

// votes counts the nodes' answers to a round.
type votes struct {
	acquired, refused, mismatched, failed int
	mismatch                              *backend.Mismatch // one of the mismatches
}

// countVotes counts the answers of a round, by node.
func countVotes(grants []redisconn.Grant, errs []error) votes {
	var v votes
	for i, g := range grants {
		switch {
		case errs[i] != nil:
			v.failed++
		case g.Taken:
			v.acquired++
		case g.Mismatch != nil:
			v.mismatched++
			v.mismatch = g.Mismatch
		default:
			v.refused++
		}
	}
	return v
}

// outcomes are the nodes' errors as outcomes, for nodeErrors.
func outcomes(errs []error) []outcome {
	out := make([]outcome, len(errs))
	for i, err := range errs {
		out[i].err = err
	}
	return out
}

// holderTTL is the holder's remaining TTL as the nodes that refused the
// round told it, so that a waiter tries again when a holder that died
// without releasing expires: the smallest, or 0 when no node told.
func holderTTL(grants []redisconn.Grant, errs []error) time.Duration {
	remaining := time.Duration(0)
	for i, g := range grants {
		if errs[i] != nil || g.Taken || g.Remaining <= 0 {
			continue // accepted, failed, or a key without a TTL
		}
		if remaining == 0 || g.Remaining < remaining {
			remaining = g.Remaining
		}
	}
	return remaining
}

// releaseWhere runs the compare-and-delete of req's kind on the nodes (by
// index) that match, after the caller's context may have ended.
func (d *driver) releaseWhere(req backend.Request, match func(i int) bool) {
	release := redisconn.ScriptsOf(req.Kind).Release
	onEvery(context.Background(), d, func(ctx context.Context, i int) (any, error) {
		if !match(i) {
			return nil, errNotAsked
		}
		return d.nodes[i].c.Eval(ctx, release, []string{lockKey(req.Key)}, req.Token, channelOf(req.Key))
	})
}

// retryDelay is a random delay in [RetryDelay/2, RetryDelay].
func (d *driver) retryDelay() time.Duration {
	return d.cfg.retryDelay/2 + rand.N(d.cfg.retryDelay/2+1)
}

// Acquire implements backend.Waiter: rounds of TryAcquire, woken by release
// notices from any node, by the holder's TTL, or after a split vote by a
// random delay. A round that no quorum answered is tried again after a
// growing, random delay for as long as ctx allows: nodes are unavailable
// for a while (a burst, a restart), and the caller chose how long to wait.
// When ctx ends, the error names what the nodes said in the last round.
// A writer that finds the key busy marks it on every node
// (redisconn.Mark) after each round, so that no new reader gets in while
// it waits, and takes its marks back when its wait ends.
func (d *driver) Acquire(ctx context.Context, req backend.Request) (backend.Acquisition, error) {
	wt := &waiter{d: d, key: req.Key, timer: time.NewTimer(time.Hour)}
	defer wt.stop()
	marked := false
	defer func() {
		if marked {
			d.unmark(req)
		}
	}()
	var unanswered *noQuorumError // the last round's, if no quorum answered it
	backoff := time.Duration(0)
	round := d.round // the first round: no other waiter to fall in step with
	for {
		acq, split, err := round(ctx, req)
		if errors.As(err, &unanswered) {
			backoff = min(max(2*backoff, d.cfg.retryDelay), maxBackoff)
			wt.timer.Reset(backoff/2 + jitter(backoff/2))
			if err := awaitTimer(ctx, wt.timer); err != nil {
				return backend.Acquisition{}, unanswered.after(err)
			}
			continue
		}
		if err != nil && ctx.Err() != nil && unanswered != nil {
			return backend.Acquisition{}, unanswered.after(ctx.Err())
		}
		unanswered, backoff = nil, 0
		var busy *backend.Busy
		if !errors.As(err, &busy) {
			return acq, err
		}
		if req.Kind == backend.Exclusive && d.mark(ctx, req) || marked {
			// Renew the marks before they lapse.
			marked = true
			if busy.Remaining <= 0 || busy.Remaining > req.TTL/3 {
				busy.Remaining = req.TTL / 3
			}
		}
		woken, err := wt.wait(ctx, busy, split)
		if err != nil {
			return backend.Acquisition{}, err
		}
		// A notice woke every waiter: go through the gate. Without one
		// (the holder's TTL ran out, a poll), a copy the gate node kept
		// may be all that refuses: ask every node at once.
		round = d.round
		if woken {
			round = d.gatedRound
		}
	}
}

// mark marks req's writer as waiting on every node where readers hold the
// key (redisconn.Mark), best-effort: a liveness aid, it keeps new readers
// out only where a quorum of nodes has it. It reports whether any node
// was marked.
func (d *driver) mark(ctx context.Context, req backend.Request) bool {
	marked, _ := onEvery(ctx, d, func(ctx context.Context, i int) (bool, error) {
		return redisconn.Mark(ctx, d.nodes[i].c, lockKey(req.Key), req.Token, req.TTL)
	})
	return slices.Contains(marked, true)
}

// unmark takes req's writer's marks back on every node, after its wait
// ended (the caller's context may have), best-effort: a mark left behind
// lapses at the writer's TTL.
func (d *driver) unmark(req backend.Request) {
	onEvery(context.Background(), d, func(ctx context.Context, i int) (any, error) {
		return nil, redisconn.Unmark(ctx, d.nodes[i].c, lockKey(req.Key), req.Token, channelOf(req.Key))
	})
}

// maxBackoff bounds the delay between two rounds of an Acquire that no
// quorum answered: nodes that come back are used within about this.
const maxBackoff = time.Second

// A waiter is what an Acquire keeps between its rounds.
type waiter struct {
	d     *driver
	key   string
	w     *watch // release notices, from the first busy round on
	timer *time.Timer
	// spread is how far apart this waiter's rounds should fall from the
	// other waiters': a release notice wakes every waiter at once, and
	// when they all start a round together the rounds split the vote and
	// nobody wins. It grows with each split vote and shrinks with each
	// round another waiter won cleanly, so that one waiter alone retries
	// at once and a crowd spreads itself out.
	spread time.Duration
}

func (wt *waiter) stop() {
	wt.timer.Stop()
	if wt.w != nil {
		wt.w.stop()
	}
}

// wait waits for the next round after one that found the key busy, and
// reports whether a release notice ended the wait.
func (wt *waiter) wait(ctx context.Context, busy *backend.Busy, split bool) (woken bool, err error) {
	d := wt.d
	if wt.w == nil {
		// Watch only once the key is busy. Until a majority confirms,
		// the waiter polls, so a release in between is not missed.
		wt.w = d.watch(ctx, channelOf(wt.key))
	}
	if split {
		wt.spread = min(max(2*wt.spread, d.cfg.retryDelay/2), maxSpread*d.cfg.retryDelay)
		busy.Remaining += jitter(wt.spread)
	} else {
		wt.spread /= 2
	}
	woken, err = d.waitTurn(ctx, wt.w, wt.timer, busy, split)
	if err == nil && woken && wt.spread > 0 {
		wt.timer.Reset(jitter(wt.spread))
		err = awaitTimer(ctx, wt.timer)
	}
	return woken, err
}

// maxSpread bounds a waiter's spread, in retry delays.
const maxSpread = 8

// jitter is a random duration in [0, d).
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return rand.N(d)
}

// waitTurn waits, after a round that found the key busy, for a release
// notice, for the holder's TTL (busy.Remaining, at most maxWait) or, while
// notices are not sure to reach us, for a short poll interval. After a
// split vote a notice does not end the wait early: the other contender got
// the same notice, and retrying in step with it would split the vote again.
// It reports whether a notice ended the wait.
func (d *driver) waitTurn(ctx context.Context, w *watch, timer *time.Timer, busy *backend.Busy, split bool) (woken bool, _ error) {
	wait := busy.Remaining
	if wait <= 0 || wait > maxWait {
		wait = maxWait
	}
	if !w.ok() {
		wait = min(wait, d.cfg.retryDelay*4)
	}
	timer.Reset(wait)
	select {
	case <-ctx.Done():
		return false, ctx.Err()
	case <-w.events:
		if split {
			return false, awaitTimer(ctx, timer) // finish the random delay
		}
		return true, nil
	case <-timer.C:
	}
	return false, nil
}

// awaitTimer waits for timer to fire, or returns ctx's error first.
func awaitTimer(ctx context.Context, timer *time.Timer) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// noQuorumRetries is how many more times a Release asks the nodes that
// did not answer, when those that did decide nothing.
const noQuorumRetries = 2

// noQuorumError: fewer than a quorum of nodes answered a round.
type noQuorumError struct{ msg string }

func (e *noQuorumError) Error() string { return e.msg }

// after is e as the error of an Acquire whose context ended, with err,
// after a round that ended with e: errors.Is finds both.
func (e *noQuorumError) after(err error) error {
	return fmt.Errorf("%w, still without a quorum; the last round: %w", err, e)
}

// maxWait bounds a waiter's sleep when it learned nothing better.
const maxWait = 5 * time.Second

// watch is one subscription to a key's channels on every node: a waiter's
// to its release notices, an observer's to those and its change notices.
type watch struct {
	events    chan struct{}
	quorum    int
	confirmed atomic.Int32
	// asked is how many nodes are asked; settled counts those that
	// confirmed or failed, and progress is sent on (without blocking)
	// each time one does.
	asked    int
	settled  atomic.Int32
	progress chan struct{}
	mu       sync.Mutex
	stops    []func()
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	once     sync.Once
}

// ok reports whether a majority of nodes confirmed the subscription: a
// release is published by every node where the holder's key was, a
// majority, so one of ours hears it. Until then the waiter also polls.
func (w *watch) ok() bool { return int(w.confirmed.Load()) >= w.quorum }

// watch subscribes to channels (of one key) on every node at once, in the
// background: a waiter does not wait for slow or dead nodes to confirm.
// Skipped nodes are left out unless too few are left for a majority: a
// majority of the others confirming still means that one of them hears a
// release.
func (d *driver) watch(ctx context.Context, channels ...string) *watch {
	w := &watch{events: make(chan struct{}, 1), quorum: d.quorum, progress: make(chan struct{}, 1)}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w.cancel = cancel
	few := d.unskipped() < d.quorum
	for _, n := range d.nodes {
		if n.skipped() != nil && !few {
			continue
		}
		w.asked++
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			defer w.settle()
			stop, err := n.notify.WatchEach(wctx, w.events, channels...)
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

// settle counts a node that confirmed or failed, and tells await.
func (w *watch) settle() {
	w.settled.Add(1)
	select {
	case w.progress <- struct{}{}:
	default:
	}
}

// await waits until a majority of nodes confirmed the watch, and fails
// when every node asked has settled without, or when ctx ends first.
func (w *watch) await(ctx context.Context) error {
	for !w.ok() {
		if int(w.settled.Load()) == w.asked {
			return fmt.Errorf("redlock: only %d of %d nodes confirmed the subscription, %d needed", w.confirmed.Load(), w.asked, w.quorum)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-w.progress:
		}
	}
	return nil
}

// stop ends the watch on every node; a second call does nothing.
func (w *watch) stop() {
	w.once.Do(func() {
		w.cancel()
		w.wg.Wait()
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, s := range w.stops {
			s()
		}
	})
}

type held struct {
	d      *driver
	key    string
	token  string
	kind   backend.Kind
	quorum int // quorumOf the hold: how many nodes must hold it
	// versions counts the SetValue calls: the value taken with the hold
	// is version 1, the n-th SetValue's version n + 1.
	versions atomic.Uint64
}

// Refresh extends the lock on every node; it counts only if a quorum
// extended it and validity is left, measured from before the round.
func (h *held) Refresh(ctx context.Context, ttl time.Duration) error {
	d := h.d
	start := d.now()
	out := d.fanOut(ctx, h.quorum, redisconn.ScriptsOf(h.kind).Refresh, h.key, h.token, redisconn.Millis(ttl))
	return d.refreshOutcome(out, ttl, d.now().Sub(start), h.quorum)
}

// gone reports whether a hold of quorum q is no longer held when notOurs
// nodes answered that they do not hold it: too few nodes are left to hold
// it on q. For a majority, as for the mutex, that is a majority saying
// so; for a semaphore's larger quorum, fewer suffice.
func (d *driver) gone(notOurs, q int) bool {
	return notOurs >= q || (q > d.quorum && notOurs > len(d.nodes)-q)
}

// refreshOutcome is the outcome of a refresh with ttl of a hold of quorum
// q that got out from the nodes and took elapsed.
func (d *driver) refreshOutcome(out []outcome, ttl, elapsed time.Duration, q int) error {
	validity := ttl - elapsed - d.Drift(ttl)
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
	case extended >= q && validity > 0:
		return nil
	case d.gone(notOurs, q):
		return fmt.Errorf("%w: %d of %d nodes no longer hold it", backend.ErrNotHeld, notOurs, len(d.nodes))
	case extended >= q:
		return fmt.Errorf("redlock: refresh reached a quorum too late: no validity left after %v%s", elapsed.Round(time.Microsecond), d.failedNodes(out))
	}
	return fmt.Errorf("redlock: refresh reached %d of %d nodes, %d needed (%s)", extended, len(d.nodes), q, d.nodeErrors(out))
}

// maxRoundLocks is how many locks one round of a batched refresh extends:
// some ten script calls per node, a few milliseconds of server time, well
// within the per-node timeout, which bounds each round as it bounds a
// single refresh. A larger batch goes in several rounds, one after
// another, each measured from its own start.
const maxRoundLocks = 10 * redisconn.MaxRefreshKeys

// unreachable returns the error of replies when none came from the server
// (every one failed in transport: the node did not answer), or nil. It is
// the node's error in onEvery, so that a node that refuses connections
// counts as failing, not as answering, on the node's record.
func unreachable(replies []redisconn.Reply) error {
	for _, r := range replies {
		if r.Err == nil || redisconn.IsServerError(r.Err) {
			return nil
		}
	}
	if len(replies) == 0 {
		return nil
	}
	return replies[0].Err
}

// RefreshBatch implements backend.BatchRefresher: the watchdog's locks due
// together are extended on every node in rounds of up to maxRoundLocks, a
// pipeline of script calls per node extending up to 100 locks each. Each
// lock's outcome is what Refresh would give it: a majority of nodes
// extended it and validity is left, measured from the round's start.
func (d *driver) RefreshBatch(ctx context.Context, locks []backend.Held, ttls []time.Duration) []error {
	errs := make([]error, len(locks))
	for lo := 0; lo < len(locks); lo += maxRoundLocks {
		hi := min(lo+maxRoundLocks, len(locks))
		d.refreshRound(ctx, locks[lo:hi], ttls[lo:hi], errs[lo:hi])
	}
	return errs
}

func (d *driver) refreshRound(ctx context.Context, locks []backend.Held, ttls []time.Duration, errs []error) {
	rs := make([]redisconn.Refresh, len(locks))
	for i, l := range locks {
		h := l.(*held)
		rs[i] = redisconn.Refresh{Key: lockKey(h.key), Token: h.token, TTL: ttls[i], Kind: h.kind}
	}
	q := d.quorum // the largest quorum of the locks
	for _, l := range locks {
		q = max(q, l.(*held).quorum)
	}
	start := d.now()
	replies, nodeErrs := onQuorum(ctx, d, q, func(ctx context.Context, i int) ([]redisconn.Reply, error) {
		replies := redisconn.RefreshMany(ctx, d.nodes[i].c, rs)
		return replies, unreachable(replies)
	})
	elapsed := d.now().Sub(start)
	out := make([]outcome, len(d.nodes))
	for i := range locks {
		for j := range d.nodes {
			out[j] = outcome{err: nodeErrs[j]}
			if nodeErrs[j] != nil {
				continue
			}
			r := replies[j][i]
			if out[j].err = r.Err; r.Err == nil {
				out[j].n, out[j].err = redisconn.AsInt(r.Val)
			}
		}
		errs[i] = d.refreshOutcome(out, ttls[i], elapsed, locks[i].(*held).quorum)
	}
}

// TTL returns how long a quorum of nodes still hold the lock: the
// quorum-th longest remaining TTL among the nodes that have it. Package
// locker returns the smaller of this and the local validity.
func (h *held) TTL(ctx context.Context) (time.Duration, error) {
	d, q := h.d, h.quorum
	out := d.fanOut(ctx, q, redisconn.ScriptsOf(h.kind).PTTL, h.key, h.token)
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
	if len(left) >= q {
		slices.Sort(left)
		slices.Reverse(left)
		return left[q-1], nil
	}
	if d.gone(answered-len(left), q) {
		return 0, fmt.Errorf("%w: %d of %d nodes no longer hold it", backend.ErrNotHeld, answered-len(left), len(d.nodes))
	}
	return 0, fmt.Errorf("redlock: TTL reached only %d of %d nodes, %d needed (%s)", answered, len(d.nodes), q, d.nodeErrors(out))
}

// Release deletes the lock on every node that holds our token. When the
// nodes that answered decide nothing (fewer than a majority released it,
// and fewer than a majority said it was not ours), the nodes that did not
// answer are asked again after a random delay, up to noQuorumRetries more
// times within ctx: on a loaded machine a burst of releases can miss the
// node timeout.
func (h *held) Release(ctx context.Context) error {
	r := release{h: h, state: make([]int8, len(h.d.nodes))}
	for round := 0; ; round++ {
		r.ask(ctx, round)
		if err, decided := r.verdict(); decided {
			return err
		}
		if h := testHooks.Load(); h != nil && h.releaseRetry != nil && round < noQuorumRetries {
			h.releaseRetry(round)
		}
		if round == noQuorumRetries || !sleep(ctx, h.d.retryDelay()) {
			return r.failure()
		}
	}
}

// release is what a Release learnt of each node so far.
type release struct {
	h     *held
	state []int8  // per node: unknown, released or notOurs
	errs  []error // per node: the last round's error
}

// The states of a node in a release.
const (
	unknown = iota
	released
	notOurs
)

// ask asks the nodes whose state is unknown to delete the lock.
func (r *release) ask(ctx context.Context, round int) {
	d, h := r.h.d, r.h
	asked := slices.Clone(r.state)
	var vals []int64
	vals, r.errs = onQuorum(ctx, d, h.quorum, func(ctx context.Context, i int) (int64, error) {
		if asked[i] != unknown {
			return 0, errNotAsked
		}
		return redisconn.EvalInt(ctx, d.nodes[i].c, redisconn.ScriptsOf(h.kind).Release, []string{lockKey(h.key)}, h.token, channelOf(h.key))
	})
	for i := range r.state {
		switch {
		case asked[i] != unknown || r.errs[i] != nil:
		case vals[i] == 1 || round > 0:
			// After a round whose outcome on this node is unknown, a node
			// without our token may be one our delete reached.
			r.state[i] = released
		default:
			r.state[i] = notOurs
		}
	}
}

// counts returns how many nodes released the lock and how many did not
// hold it.
func (r *release) counts() (nReleased, nNotOurs int) {
	for _, st := range r.state {
		switch st {
		case released:
			nReleased++
		case notOurs:
			nNotOurs++
		}
	}
	return nReleased, nNotOurs
}

// verdict returns the release's outcome, if the answers so far decide it.
func (r *release) verdict() (err error, decided bool) {
	d, q := r.h.d, r.h.quorum
	nReleased, nNotOurs := r.counts()
	switch {
	case d.gone(nNotOurs, q):
		// Lost before the release: a majority had let it expire (and
		// may have given the key to another). Copies of ours that a
		// minority still had, their SET having arrived late, are gone
		// now, which is cleanup, not a release.
		return fmt.Errorf("%w: %d of %d nodes did not hold it", backend.ErrNotHeld, nNotOurs, len(d.nodes)), true
	case nReleased >= q:
		// Freed for others; the nodes that did not answer let their copy
		// expire, and a minority copy blocks nobody.
		return nil, true
	case nReleased+nNotOurs == len(d.nodes):
		// Every node answered, and ours were too few to be a lock (an
		// even number of nodes split in half).
		return fmt.Errorf("%w: only %d of %d nodes held it", backend.ErrNotHeld, nReleased, len(d.nodes)), true
	}
	return nil, false
}

// failure is the error of a release the answers did not decide.
func (r *release) failure() error {
	d := r.h.d
	var parts []string
	for i, st := range r.state {
		if st == unknown && r.errs[i] != nil {
			parts = append(parts, fmt.Sprintf("%s: %v", d.nodes[i].addr, r.errs[i]))
		}
	}
	nReleased, nNotOurs := r.counts()
	return fmt.Errorf("redlock: release reached %d of %d nodes (%d released it); where it did not, it lasts until its TTL (%s)",
		nReleased+nNotOurs, len(d.nodes), nReleased, strings.Join(parts, "; "))
}

// hooks let tests observe and steer the driver (set with setHooks, in the
// package's tests).
type hooks struct {
	releaseRetry func(round int) // a release is about to ask the nodes that did not answer again
}

var testHooks atomic.Pointer[hooks]

// sleep waits for d or until ctx ends, and reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	return awaitTimer(ctx, t) == nil
}
