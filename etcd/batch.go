package etcd

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/locker/backend"
	"github.com/distlock/locker/internal/workpool"
)

// A refresh that keeps a lock on its lease renews nothing: the lease loop
// keeps the lease alive for all its locks, and the lock's validity follows
// the lease (held.ValidUntil). Nor does the watchdog's refresh look at the
// lock's entry: the driver's watch (watch.go) reports an entry deleted or
// put on another lease by someone else when it happens. So a batch of
// refreshes that keep their TTL costs no request at all.

// Limits of batched requests.
const (
	// maxTxnOps is how many reads one transaction carries: etcd refuses a
	// transaction with more operations in a branch than its --max-txn-ops,
	// 128 by default. A server set lower is learnt from its refusal (see
	// driver.txnOps).
	maxTxnOps = 128
	// maxHelpers bounds the goroutines that help with batched requests
	// (the watcher's looks at every held entry after a gap in its watch,
	// the refreshes of a batch that move locks to another lease), all
	// together, so that neither they nor the requests in flight grow with
	// the locks held. Each batch also works on its caller's goroutine, so
	// none waits for another's helpers.
	maxHelpers = 16
)

// RefreshBatch implements backend.BatchRefresher: the watchdog refreshes
// the locks due together with it. A lock whose refresh keeps its lease
// costs no request: it is held while its lease lives and the watch has
// not seen its entry go (ErrNotHeld otherwise). A lock whose refresh moves
// it to another lease (another TTL in whole seconds) goes on its own, as
// by Refresh. Each lock gets the outcome Refresh would give it.
func (d *driver) RefreshBatch(ctx context.Context, locks []backend.Held, ttls []time.Duration) []error {
	errs := make([]error, len(locks))
	var jobs []func()
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
			errs[i] = h.extend(cur, false)
		}
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
func chunks[T any](items []T, n int) [][]T {
	var out [][]T
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
func (d *driver) runJobs(jobs []func()) { workpool.Run(d.helpers, jobs) }

// lookup reads keys in one linearizable transaction of keys-only reads
// (in more if the server refuses that many operations in one: it is asked
// again with fewer, and the driver remembers its limit). found[i] is the
// entry under keys[i], nil if there is none; rev is the earliest revision
// read. A transaction of reads alone is served without a raft round, as a
// linearizable read (the default: one that a member behind the leader
// cannot answer from a past state), and costs the server an index lookup
// per key.
func (d *driver) lookup(ctx context.Context, keys []string) (found []*mvccpb.KeyValue, rev int64, err error) {
	ops := make([]clientv3.Op, len(keys))
	for i, k := range keys {
		ops[i] = clientv3.OpGet(k, clientv3.WithKeysOnly())
	}
	resp, err := d.cli.Txn(ctx).Then(ops...).Commit()
	if errors.Is(err, rpctypes.ErrTooManyOps) && len(keys) > 1 {
		n := len(keys) / 2
		d.lowerTxnLimit(n)
		a, ra, err := d.lookup(ctx, keys[:n])
		if err != nil {
			return nil, 0, err
		}
		b, rb, err := d.lookup(ctx, keys[n:])
		if err != nil {
			return nil, 0, err
		}
		return append(a, b...), min(ra, rb), nil
	}
	if err != nil {
		return nil, 0, wrap(ctx, err)
	}
	found = make([]*mvccpb.KeyValue, len(keys))
	for i := range keys {
		if kv := kvs(resp, i); len(kv) > 0 {
			found[i] = kv[0]
		}
	}
	return found, resp.Header.Revision, nil
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
			d.log.Warn("locker/etcd: the server allows fewer operations per transaction than etcd's default (--max-txn-ops): held entries are read in more transactions", "ops", n)
			return
		}
	}
}
