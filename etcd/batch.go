package etcd

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/locker/backend"
)

// A refresh that keeps a lock on its lease renews nothing: the lease loop
// keeps the lease alive for all its locks, and the lock's validity follows
// the lease (held.ValidUntil). What is left to do per lock is to look that
// its entry is still there, still ours (an operator may have deleted it,
// or put another key under its name) and still on our lease. The watchdog
// asks for many locks at once (RefreshBatch); they are looked at together,
// up to maxTxnOps in one transaction of keys-only reads. A transaction of
// reads alone is served without a raft round (as a linearizable read, the
// default: one that a member behind the leader cannot answer from a past
// state), and costs the server an index lookup per lock.

// Limits of a batched refresh.
const (
	// maxTxnOps is how many reads one transaction carries: etcd refuses a
	// transaction with more operations in a branch than its --max-txn-ops,
	// 128 by default. A server set lower is learnt from its refusal (see
	// driver.txnOps).
	maxTxnOps = 128
	// maxHelpers bounds the goroutines that help RefreshBatch calls with
	// their requests (transactions of reads, refreshes of locks that go
	// on their own), all calls of a driver together, so that neither they
	// nor the requests in flight grow with the locks held. Each call also
	// works on its caller's goroutine, so none waits for another's
	// helpers. The watchdog's batches hold about a tenth of the locks
	// (those due within a thirtieth of the TTL): with 100,000 locks, some
	// 80 transactions, which must be done well within the TTL.
	maxHelpers = 16
)

// checkItem is a lock in a batched check: the lease its entry is on and
// its place in the batch.
type checkItem struct {
	h *held
	l *lease
	i int
}

// RefreshBatch implements backend.BatchRefresher: the watchdog refreshes
// the locks due together with it. A lock whose refresh keeps its lease is
// checked in a transaction of reads with up to maxTxnOps others, and no
// request at all once its lease is dead; a lock whose refresh moves it to
// another lease (another TTL in whole seconds) goes on its own, as by
// Refresh. Each lock gets the outcome Refresh would give it.
func (d *driver) RefreshBatch(ctx context.Context, locks []backend.Held, ttls []time.Duration) []error {
	errs := make([]error, len(locks))
	var (
		checks []checkItem
		jobs   []func()
	)
	for i, hl := range locks {
		h, ok := hl.(*held)
		if !ok {
			jobs = append(jobs, func() { errs[i] = hl.Refresh(ctx, ttls[i]) })
			continue
		}
		cur, _, same, err := h.leaseFor(ttls[i])
		switch {
		case err != nil:
			errs[i] = err
		case !same:
			jobs = append(jobs, func() { errs[i] = h.Refresh(ctx, ttls[i]) })
		default:
			checks = append(checks, checkItem{h, cur, i})
		}
	}
	for _, c := range chunks(checks, d.txnLimit()) {
		jobs = append(jobs, func() { d.verify(ctx, c, errs) })
	}
	d.runJobs(jobs)
	return errs
}

// txnLimit is how many reads a transaction may carry: maxTxnOps, or less
// once the server refused that many.
func (d *driver) txnLimit() int {
	if n := d.txnOps.Load(); n > 0 {
		return int(n)
	}
	return maxTxnOps
}

// chunks splits items into pieces of at most n.
func chunks(items []checkItem, n int) [][]checkItem {
	var out [][]checkItem
	for len(items) > n {
		out = append(out, items[:n:n])
		items = items[n:]
	}
	if len(items) > 0 {
		out = append(out, items)
	}
	return out
}

// runJobs runs jobs on the caller's goroutine and on as many helpers as
// are free, up to maxHelpers for the whole driver.
func (d *driver) runJobs(jobs []func()) {
	var next atomic.Int64
	work := func() {
		for {
			j := int(next.Add(1) - 1)
			if j >= len(jobs) {
				return
			}
			jobs[j]()
		}
	}
	var wg sync.WaitGroup
spawn:
	for range len(jobs) - 1 {
		select {
		case d.helpers <- struct{}{}:
			wg.Go(func() {
				defer func() { <-d.helpers }()
				work()
			})
		default:
			break spawn
		}
	}
	work()
	wg.Wait()
}

// verify refreshes the locks of items, each on the lease it is on, and
// sets each one's outcome in errs: ErrNotHeld, without a request, if its
// lease is dead; otherwise what one linearizable transaction of reads, one
// per entry, finds. A server that refuses that many reads in a transaction
// (--max-txn-ops below maxTxnOps) is asked again with fewer, and the
// driver remembers its limit.
func (d *driver) verify(ctx context.Context, items []checkItem, errs []error) {
	live := make([]checkItem, 0, len(items))
	ops := make([]clientv3.Op, 0, len(items))
	for _, it := range items {
		if it.l.isDead() {
			errs[it.i] = backend.ErrNotHeld // its entry goes, or went, with it
			continue
		}
		live = append(live, it)
		ops = append(ops, clientv3.OpGet(it.h.key, clientv3.WithKeysOnly()))
	}
	if len(ops) == 0 {
		return
	}
	resp, err := d.cli.Txn(ctx).Then(ops...).Commit()
	if errors.Is(err, rpctypes.ErrTooManyOps) && len(live) > 1 {
		n := len(live) / 2
		d.lowerTxnLimit(n)
		d.verify(ctx, live[:n], errs)
		d.verify(ctx, live[n:], errs)
		return
	}
	for j, it := range live {
		if err != nil {
			errs[it.i] = wrap(ctx, err)
			continue
		}
		errs[it.i] = it.h.checked(it.l, kvs(resp, j))
	}
}

// lowerTxnLimit records that the server refused a transaction of more
// than n reads.
func (d *driver) lowerTxnLimit(n int) {
	for {
		cur := d.txnOps.Load()
		if cur > 0 && cur <= int64(n) {
			return
		}
		if d.txnOps.CompareAndSwap(cur, int64(n)) {
			d.log.Warn("locker/etcd: the server allows fewer operations per transaction than etcd's default (--max-txn-ops): refreshes are checked in more transactions", "ops", n)
			return
		}
	}
}
