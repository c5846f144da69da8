package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distlock/locker/backend"
	"github.com/distlock/locker/internal/redisconn"
)

// A node that fails skipAfter requests in a row (connection errors and
// per-node timeouts, not error replies) is skipped: the driver asks it
// nothing and counts it as a node that did not answer, which is what it
// would most likely be, without paying for the failure in every round.
// One probe goroutine per driver asks each skipped node a trivial script,
// first after probeMin and then twice as long each time up to probeMax,
// and puts it back in use once it answers.
//
// Skipping is safe because no quorum changes: a majority is counted over
// all nodes, so a skipped node only ever withholds a vote, as a dead one
// does. A lock whose copy is on a node while it is skipped is not
// deleted there by Release: that copy expires with its TTL, and being on
// a minority of nodes, it blocks nobody meanwhile.
const skipAfter = 3

// probeScript asks a node whether it answers at all.
var probeScript = redisconn.NewScript("probe", "return 1", 0)

// errNotAsked is the outcome of a node that an operation left out on
// purpose; it says nothing about the node's health.
var errNotAsked = errors.New("not asked")

// skippedError is the outcome of a node that is skipped.
type skippedError struct {
	fails int
	err   error // the last failure
}

func (e *skippedError) Error() string {
	return fmt.Sprintf("not asked: it failed %d times in a row, the last with: %v; probed in the background until it answers", e.fails, e.err)
}

func (e *skippedError) Unwrap() error { return e.err }

// health is a node's record of failures.
type health struct {
	fails atomic.Int32
	skip  atomic.Pointer[skippedError] // non-nil while skipped
	// down is closed when the node is skipped, and replaced when it is
	// used again (both under downMu), so that the requests waiting to be
	// sent to it fail at once rather than in turn.
	downMu sync.Mutex
	down   chan struct{}
	// Under driver.mu: when the prober asks the node next, and how long
	// it waits after that.
	probeAt    time.Time
	probeDelay time.Duration
}

// skipped returns the node's outcome while it is skipped, or nil.
func (n *node) skipped() error {
	if e := n.skip.Load(); e != nil {
		return e
	}
	return nil
}

// observe updates each node's record after an operation whose context
// was parent: a failure of the caller's context says nothing about the
// nodes.
func (d *driver) observe(parent context.Context, errs []error) {
	if parent.Err() != nil {
		return
	}
	for i, err := range errs {
		d.nodes[i].observe(d, err)
	}
}

func (n *node) observe(d *driver, err error) {
	var skipped *skippedError
	switch {
	case err == nil || redisconn.IsServerError(err):
		n.answered(d)
	case errors.Is(err, errNotAsked), errors.As(err, &skipped), errors.Is(err, backend.ErrClosed):
	default:
		if f := n.fails.Add(1); f >= skipAfter {
			d.skipNode(n, int(f), err)
		}
	}
}

// answered records that n answered a request, and uses it again if it was
// skipped (it is asked while skipped when too few nodes are left for a
// majority, and by the prober).
func (n *node) answered(d *driver) {
	if n.fails.Load() != 0 {
		n.fails.Store(0)
	}
	if n.skip.Load() == nil {
		return
	}
	n.downMu.Lock()
	back := n.skip.Swap(nil) != nil
	if back {
		n.down = make(chan struct{})
	}
	n.downMu.Unlock()
	if back {
		d.log.Info("redlock: node answers again; it votes again", "node", n.addr)
	}
}

// downSignal returns the channel closed when n is next skipped.
func (n *node) downSignal() <-chan struct{} {
	n.downMu.Lock()
	defer n.downMu.Unlock()
	return n.down
}

// unskipped is how many nodes are not skipped.
func (d *driver) unskipped() int {
	k := 0
	for _, n := range d.nodes {
		if n.skip.Load() == nil {
			k++
		}
	}
	return k
}

// skipNode stops asking n, which failed fails times in a row, until the
// prober gets an answer from it.
func (d *driver) skipNode(n *node, fails int, err error) {
	n.downMu.Lock()
	skipped := n.skip.CompareAndSwap(nil, &skippedError{fails: fails, err: err})
	if skipped {
		close(n.down)
	}
	n.downMu.Unlock()
	if !skipped {
		return // skipped already
	}
	d.log.Warn("redlock: node skipped after failing repeatedly; it counts as not voting until a probe gets an answer",
		"node", n.addr, "failures", fails, "err", err)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return
	}
	n.probeDelay = d.cfg.probeMin
	n.probeAt = time.Now().Add(n.probeDelay)
	if d.probing {
		select {
		case d.probeWake <- struct{}{}:
		default:
		}
		return
	}
	d.probing = true
	d.wg.Add(1)
	go d.probe()
}

// probe asks the skipped nodes, each when due, until none is skipped or
// the driver closes.
func (d *driver) probe() {
	defer d.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		next, ok := d.nextProbe()
		if !ok {
			return
		}
		timer.Reset(time.Until(next))
		select {
		case <-d.stop.Done():
			return
		case <-d.probeWake:
			continue
		case <-timer.C:
		}
		for _, n := range d.nodes {
			if n.skip.Load() != nil && d.probeDue(n) {
				d.probeNode(n)
			}
		}
	}
}

// nextProbe returns when the next probe is due, or false, having marked
// the prober stopped, when no node is skipped or the driver closed.
func (d *driver) nextProbe() (time.Time, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var next time.Time
	for _, n := range d.nodes {
		if n.skip.Load() != nil && (next.IsZero() || n.probeAt.Before(next)) {
			next = n.probeAt
		}
	}
	if next.IsZero() || d.closed {
		d.probing = false
		return time.Time{}, false
	}
	return next, true
}

func (d *driver) probeDue(n *node) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return !time.Now().Before(n.probeAt)
}

// probeNode asks n once, and puts it back in use if it answers.
func (d *driver) probeNode(n *node) {
	was := n.skip.Load()
	ctx, cancel := context.WithTimeout(d.stop, d.cfg.nodeTimeout)
	defer cancel()
	_, err := n.c.Eval(ctx, probeScript, nil)
	if d.stop.Err() != nil {
		return
	}
	if err == nil || redisconn.IsServerError(err) {
		n.answered(d)
		return
	}
	// Errors then name the latest failure, unless a request got an answer
	// meanwhile.
	if !n.skip.CompareAndSwap(was, &skippedError{fails: int(n.fails.Add(1)), err: err}) {
		return
	}
	d.mu.Lock()
	n.probeDelay = min(2*n.probeDelay, d.cfg.probeMax)
	n.probeAt = time.Now().Add(n.probeDelay)
	delay := n.probeDelay
	d.mu.Unlock()
	d.log.Debug("redlock: skipped node still fails", "node", n.addr, "err", err, "next_probe", delay)
}
