package etcd

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/locker/backend"
)

// attempt is one queue entry of an acquisition, from the reservation of
// its name to the grant, or to its removal. It holds a reference to its
// lease until it ends: granted (the held lock takes the reference over),
// dropped, abandoned or given up.
type attempt struct {
	d   *driver
	ctx context.Context
	req backend.Request
	l   *lease
	qp  string // the lock's queue prefix
	key string // our entry, a name reserved on l
	// rev is our entry's create revision: 0 until a put is known
	// applied, and corrected when a look finds the entry made by an
	// earlier send of the same put (its reply was lost).
	rev   int64
	start time.Time // when the request that may grant the lock was sent
}

// predecessor is the entry just before ours in the queue.
type predecessor struct {
	key  string
	rev  int64 // its create revision: its name may be reused once it is deleted
	seen int64 // the revision at which it was seen
}

// newAttempt reserves a name for a new queue entry for req, on the lease
// for its TTL.
func (d *driver) newAttempt(ctx context.Context, req backend.Request) (*attempt, error) {
	secs, qp := leaseSeconds(req.TTL), d.queuePrefix(req.Key)
	for {
		l, err := d.getLease(ctx, secs)
		if err != nil {
			return nil, err
		}
		if key, ok := l.reserve(qp); ok {
			return &attempt{d: d, ctx: ctx, req: req, l: l, qp: qp, key: key}, nil
		}
		d.unref(l) // lapsed since getLease
	}
}

// TryAcquire puts our entry only if the lock's queue is empty, in one
// transaction that, when the queue is busy, reads its first entry instead.
func (d *driver) TryAcquire(ctx context.Context, req backend.Request) (backend.Acquisition, error) {
	for tries := 0; ; tries++ {
		a, err := d.newAttempt(ctx, req)
		if err != nil {
			return backend.Acquisition{}, err
		}
		resp, err := a.put(putIfFreeElseFirst)
		if errors.Is(err, rpctypes.ErrLeaseNotFound) && tries < 2 {
			a.leaseExpired()
			continue
		}
		if err != nil {
			return backend.Acquisition{}, a.abandon(err)
		}
		a.rev = resp.Header.Revision
		if !resp.Succeeded {
			first := kvs(resp, 0)
			if len(first) == 0 || string(first[0].Key) != a.key {
				a.drop()
				return backend.Acquisition{}, &backend.Busy{}
			}
			// Our own entry, put by an earlier send of this request.
			a.rev = first[0].CreateRevision
		}
		return a.granted()
	}
}

// Acquire queues for the lock. Our entry is put with our lease by a
// transaction that applies only if the queue is empty: then that is all
// (the lock is ours, for what a bare put-if-absent costs). Otherwise a
// second put joins the queue; we read the entry just before ours, watch
// only that predecessor for deletion, and look again.
func (d *driver) Acquire(ctx context.Context, req backend.Request) (backend.Acquisition, error) {
	for {
		a, err := d.newAttempt(ctx, req)
		if err != nil {
			return backend.Acquisition{}, err
		}
		acq, err := a.run()
		if errors.Is(err, errRequeue) {
			if ctx.Err() == nil {
				continue // with a new entry
			}
			err = ctx.Err()
		}
		return acq, err
	}
}

// run takes the entry from its put to the grant, or removes it.
func (a *attempt) run() (backend.Acquisition, error) {
	queued, err := a.join()
	if err != nil {
		return backend.Acquisition{}, err
	}
	if !queued {
		return a.granted()
	}
	return a.wait()
}

// join puts our entry: first only if the queue is empty, else at its end.
// It reports whether the entry is queued behind others (false: the lock
// is ours).
//
// The first transaction carries nothing for the busy case: an untaken
// branch still costs the free one (the server decodes and checks it, and
// a read there costs more than a put). A waiter pays a second raft round
// to join instead, before it waits anyway.
func (a *attempt) join() (queued bool, err error) {
	form := putIfFree
	for {
		r, err := a.put(form)
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			a.leaseExpired()
			return false, errRequeue
		}
		if err != nil {
			return false, a.abandon(err)
		}
		if r.Succeeded {
			a.rev = r.Header.Revision
			return form != putIfFree, nil
		}
		form = putAlways // busy: join the queue
	}
}

// put sends the put of our entry in the given form, bounded by the
// lease's life.
func (a *attempt) put(form int) (*clientv3.TxnResponse, error) {
	a.start = time.Now()
	tctx, cancel := a.l.bound(a.ctx)
	defer cancel()
	r, err := a.d.putEntry(tctx, form, a.qp, a.key, a.l.id)
	return r, a.l.why(tctx, err)
}

// wait waits until our entry is the first of the queue: it looks for the
// entry just before ours, waits for that one to go, and looks again.
func (a *attempt) wait() (backend.Acquisition, error) {
	var p predecessor
	check := true // look before waiting
	backoff := 10 * time.Millisecond
	for {
		if !check {
			if h := testHooks.Load(); h != nil && h.watching != nil {
				h.watching(a.key, p.key)
			}
			if err := a.waitGone(p); err != nil {
				return backend.Acquisition{}, a.giveUp(err)
			}
		}
		if h := testHooks.Load(); h != nil && h.checking != nil {
			h.checking(a.key)
		}
		r, err := a.look()
		if err != nil {
			if err := a.pause(err, backoff); err != nil {
				return backend.Acquisition{}, a.giveUp(err)
			}
			backoff = min(2*backoff, time.Second)
			check = true
			continue
		}
		backoff = 10 * time.Millisecond
		if !r.Succeeded {
			cur := kvs(r, 0)
			if len(cur) == 0 {
				// Our entry is gone: its lease lapsed or was revoked.
				a.drop()
				return backend.Acquisition{}, errRequeue
			}
			// Made by an earlier send of this request: still ours (the
			// name is reserved for this acquisition), queued since then.
			a.rev = cur[0].CreateRevision
			check = true
			continue
		}
		before := kvs(r, 0)
		if len(before) == 0 {
			return a.granted()
		}
		p = predecessor{key: string(before[0].Key), rev: before[0].CreateRevision, seen: r.Header.Revision}
		check = false
	}
}

// look reads, in one transaction, the entry just before ours if ours is
// still the one we put (Succeeded), or else what is under our name.
func (a *attempt) look() (*clientv3.TxnResponse, error) {
	a.start = time.Now()
	tctx, cancel := a.l.bound(a.ctx)
	defer cancel()
	r, err := a.d.cli.Txn(tctx).
		If(clientv3.Compare(clientv3.CreateRevision(a.key), "=", a.rev)).
		Then(clientv3.OpGet(a.qp, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend),
			clientv3.WithMaxCreateRev(a.rev-1), clientv3.WithLimit(1), clientv3.WithKeysOnly())).
		Else(clientv3.OpGet(a.key, clientv3.WithKeysOnly())).
		Commit()
	return r, a.l.why(tctx, err)
}

// pause follows a look that failed. It returns what ends the wait (the
// context's end, or errRequeue once the lease is given up), or nil after
// backoff: no leader for a moment, or a reconnect, and the next look may
// succeed.
func (a *attempt) pause(err error, backoff time.Duration) error {
	if a.ctx.Err() != nil {
		return a.ctx.Err()
	}
	if a.l.isDead() {
		return errRequeue
	}
	a.d.log.Warn("locker/etcd: waiting acquire could not read its queue, retrying", "key", a.key, "err", err)
	return a.d.sleep(a.ctx, a.l, backoff)
}

// granted turns our first-in-queue entry into a held lock.
func (a *attempt) granted() (backend.Acquisition, error) {
	h := a.d.newHeld(a.key, a.rev, a.req.OnLost, a.l)
	if !a.l.register(h) {
		// The lease lapsed while we acquired: the entry goes with it.
		return backend.Acquisition{}, a.abandon(fmt.Errorf("%w: lease lapsed during the acquire", errRequeue))
	}
	if h := testHooks.Load(); h != nil && h.held != nil {
		h.held(a.key)
	}
	a.d.w.register(h)
	acq := backend.Acquisition{Held: h, Fence: uint64(a.rev), Fenced: true, Start: a.start}
	if a.l.ttl != a.req.TTL {
		acq.TTL = a.l.ttl
	}
	return acq, nil
}

// drop ends an attempt whose entry is known not to exist: its name is free.
func (a *attempt) drop() {
	a.l.free(a.key)
	a.d.unref(a.l)
}

// leaseExpired ends an attempt whose lease the server no longer has (it
// expired since we last renewed it): no entry can be on it.
func (a *attempt) leaseExpired() {
	a.l.die(errLeaseExpired)
	a.d.unref(a.l)
}

// abandon handles an acquire request that failed without a clear answer:
// it may have been applied though its reply was lost, or it may yet be
// applied. Our queue entry's name is reserved for this acquisition, so
// deleting it if it is on our lease removes exactly what that request
// may have created. A cleanup that finds nothing proves nothing: etcd
// serves the put and the cleanup concurrently, and may apply the put
// after the cleanup looked. The name then stays reserved and the lease's
// sweeper keeps looking for the entry, as it does when the cleanup fails;
// the entry never outlives the lease.
func (a *attempt) abandon(err error) error {
	l, key, rev := a.l, a.key, a.rev
	defer a.d.unref(l)
	if definite(err) {
		l.free(key)
		return wrap(a.ctx, err)
	}
	cctx, cancel := context.WithTimeout(a.d.ctx, cleanupTimeout)
	defer cancel()
	resp, cerr := a.d.cli.Txn(cctx).If(l.ours(key, rev)).Then(clientv3.OpDelete(key)).Commit()
	switch {
	case cerr != nil:
		l.addOrphan(key, rev, func() { l.free(key) })
		return fmt.Errorf("%w (the cleanup of a queue entry this request may have created failed and is being retried; the entry lives at most until its %v lease lapses: %v)",
			wrap(a.ctx, err), l.ttl, cerr)
	case rev == 0 && !resp.Succeeded:
		l.addOrphan(key, 0, func() { l.free(key) }) // the put's fate is unknown
	default:
		l.free(key) // deleted, or known gone
	}
	return wrap(a.ctx, err)
}

// giveUp removes our queue entry after a wait that ended without the
// lock.
func (a *attempt) giveUp(err error) error {
	l, key := a.l, a.key
	cctx, cancel := context.WithTimeout(a.d.ctx, cleanupTimeout)
	defer cancel()
	if _, cerr := a.d.deleteEntry(cctx, key, a.rev); cerr != nil {
		l.addOrphan(key, a.rev, func() { l.free(key) })
	} else {
		l.free(key)
	}
	a.d.unref(l)
	if errors.Is(err, errRequeue) {
		return errRequeue
	}
	return wrap(a.ctx, err)
}

// waitGone returns once p may be gone; the caller then looks again.
//
// The watch starts at the server's current revision, not at p.seen: a
// watch from an older revision is served by etcd's catch-up loop, which
// runs every 100 ms, and handoffs would take that long. A deletion between
// p.seen and the start of the watch is found by reading p once the watch
// is in place, which is needed only if the store moved on since p.seen.
func (a *attempt) waitGone(p predecessor) error {
	ctx, l := a.ctx, a.l
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := a.d.cli.Watch(wctx, p.key, clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-l.life.Done():
			return errRequeue
		case wr, ok := <-wch:
			if !ok || wr.Err() != nil {
				// The watch ended (no leader, a closed client): look
				// again after a pause, so that a failing watch does not
				// spin.
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return a.d.sleep(ctx, l, 50*time.Millisecond)
			}
			if wr.Created {
				if wr.Header.Revision > p.seen && !a.stillThere(p) {
					return nil
				}
				continue
			}
			for _, ev := range wr.Events {
				if ev.Type == mvccpb.DELETE {
					return nil
				}
			}
		}
	}
}

// stillThere reads whether p is still in the queue. A name can be
// reused: an entry under it with another create revision is not the one
// we queued behind. An error counts as gone: the caller looks again.
func (a *attempt) stillThere(p predecessor) bool {
	tctx, cancel := a.l.bound(a.ctx)
	defer cancel()
	g, err := a.d.cli.Get(tctx, p.key, clientv3.WithKeysOnly())
	return err == nil && len(g.Kvs) > 0 && g.Kvs[0].CreateRevision == p.rev
}

// sleep waits for d, ctx or the end of the lease, whichever comes first.
func (d *driver) sleep(ctx context.Context, l *lease, wait time.Duration) error {
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-l.life.Done():
		return errRequeue
	case <-t.C:
		return nil
	}
}

func kvs(r *clientv3.TxnResponse, i int) []*mvccpb.KeyValue {
	return r.Responses[i].GetResponseRange().Kvs
}
