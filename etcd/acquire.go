package etcd

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
	// value is the entry's value: the hold's (Request.Value).
	value string
	// rev is our entry's create revision: 0 until a put is known
	// applied, and corrected when a look finds the entry made by an
	// earlier send of the same put (its reply was lost).
	rev   int64
	start time.Time // when the request that may grant the lock was sent
}

// ahead is what a read of the queue found before our entry: the entries
// created before it, oldest first (for an exclusive request, only the
// one just before it: see attempt.look), as of revision seen. Their
// names carry their claims (claimOf). Entries are never added before
// ours, so the queue ahead only shrinks.
type ahead struct {
	kvs  []*mvccpb.KeyValue
	seen int64
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
		if key, ok := l.reserve(qp, claimSuffix(req)); ok {
			return &attempt{d: d, ctx: ctx, req: req, l: l, qp: qp, key: key, value: string(req.Value)}, nil
		}
		d.unref(l) // lapsed since getLease
	}
}

// TryAcquire puts our entry only if the lock's queue is empty, in one
// transaction that, when the queue is busy, reads its first entry instead
// (an exclusive request), or the whole queue (the others: see tryQueue).
func (d *driver) TryAcquire(ctx context.Context, req backend.Request) (backend.Acquisition, error) {
	if err := checkClaim(req); err != nil {
		return backend.Acquisition{}, err
	}
	form := putIfFreeElseFirst
	if req.Kind != backend.Exclusive {
		form = putIfFreeElseQueue
	}
	for tries := 0; ; tries++ {
		a, err := d.newAttempt(ctx, req)
		if err != nil {
			return backend.Acquisition{}, err
		}
		resp, err := a.put(form, 0)
		if errors.Is(err, rpctypes.ErrLeaseNotFound) && tries < 2 {
			a.leaseExpired()
			continue
		}
		if err != nil {
			return backend.Acquisition{}, a.abandon(err)
		}
		switch {
		case resp.Succeeded:
			a.rev = resp.Header.Revision
			return a.granted()
		case form == putIfFreeElseQueue:
			return a.tryQueue(resp)
		}
		first := kvs(resp, 0)
		if len(first) == 0 || string(first[0].Key) != a.key {
			a.drop()
			if _, err := a.admit(first); err != nil {
				return backend.Acquisition{}, err // the first entry is a semaphore's
			}
			return backend.Acquisition{}, &backend.Busy{}
		}
		// Our own entry, put by an earlier send of this request.
		a.rev = first[0].CreateRevision
		return a.granted()
	}
}

// maxTryRounds bounds the conditional puts of tryQueue: each one that
// fails found newcomers in the queue, and a TryAcquire is one attempt,
// not a wait for the queue to settle.
const maxTryRounds = 4

// tryQueue goes on with a TryAcquire of a shared or permit hold whose
// queue was busy, read by the put's else branch (resp). The request would
// be admitted if backend.Admit admits it at the end of that queue; then
// our entry is put on the condition that no entry joined the queue since
// the read (one that left only makes room), and a queue that changed is
// judged again. A request that would wait, or disagrees with the queue,
// puts nothing: a *backend.Busy, or the *backend.Mismatch.
func (a *attempt) tryQueue(resp *clientv3.TxnResponse) (backend.Acquisition, error) {
	for round := 1; ; round++ {
		q := kvs(resp, 0)
		if i := slices.IndexFunc(q, func(kv *mvccpb.KeyValue) bool { return string(kv.Key) == a.key }); i >= 0 {
			// Our own entry, put by an earlier send of this request.
			a.rev = q[i].CreateRevision
			adm, err := a.admit(q[:i])
			if err == nil && adm.Admitted {
				return a.granted()
			}
			if err == nil {
				err = &backend.Busy{}
			}
			return backend.Acquisition{}, a.refuse(err)
		}
		adm, err := a.admit(q)
		if err == nil && (!adm.Admitted || round == maxTryRounds) {
			err = &backend.Busy{}
		}
		if err != nil {
			a.drop()
			return backend.Acquisition{}, err
		}
		resp, err = a.put(putIfNoneSince, resp.Header.Revision)
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			a.leaseExpired()
			return backend.Acquisition{}, wrap(a.ctx, err)
		}
		if err != nil {
			return backend.Acquisition{}, a.abandon(err)
		}
		if resp.Succeeded {
			a.rev = resp.Header.Revision
			return a.granted()
		}
	}
}

// Acquire queues for the lock. An exclusive request puts its entry with
// our lease by a transaction that applies only if the queue is empty:
// then that is all (the lock is ours, for what a bare put-if-absent
// costs). Otherwise a second put joins the queue; we read the entry just
// before ours, watch only that predecessor for deletion, and look again.
// A shared or permit request joins the queue and reads it in one
// transaction, and is admitted by backend.Admit over the entries before
// its own; it waits as wait says.
func (d *driver) Acquire(ctx context.Context, req backend.Request) (backend.Acquisition, error) {
	if err := checkClaim(req); err != nil {
		return backend.Acquisition{}, err
	}
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
	if a.req.Kind != backend.Exclusive {
		v, err := a.joinAndRead()
		if err != nil {
			return backend.Acquisition{}, err
		}
		return a.wait(v)
	}
	queued, err := a.join()
	if err != nil {
		return backend.Acquisition{}, err
	}
	if !queued {
		return a.granted()
	}
	return a.wait(nil)
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
		r, err := a.putOrRequeue(form)
		if err != nil {
			return false, err
		}
		if r.Succeeded {
			a.rev = r.Header.Revision
			return form != putIfFree, nil
		}
		form = putAlways // busy: join the queue
	}
}

// joinAndRead puts our entry at the end of the queue and reads the queue
// in the same transaction: a shared or permit request needs every claim
// before its own, and when it fits, this one round trip grants it.
func (a *attempt) joinAndRead() (*ahead, error) {
	r, err := a.putOrRequeue(putAndRead)
	if err != nil {
		return nil, err
	}
	a.rev = r.Header.Revision
	q := kvs(r, 1)
	for i, kv := range q {
		if string(kv.Key) == a.key {
			// A put keeps an existing key's create revision: the entry
			// may have been made by an earlier send of this request.
			a.rev = kv.CreateRevision
			return &ahead{kvs: q[:i], seen: r.Header.Revision}, nil
		}
	}
	return nil, nil // not seen (cannot happen: one transaction): wait looks
}

// putOrRequeue sends the put of an Acquire's entry in the given form. A
// lease the server no longer has gives errRequeue (Acquire tries again
// with a new one); another failure abandons the entry.
func (a *attempt) putOrRequeue(form int) (*clientv3.TxnResponse, error) {
	r, err := a.put(form, 0)
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		a.leaseExpired()
		return nil, errRequeue
	}
	if err != nil {
		return nil, a.abandon(err)
	}
	return r, nil
}

// put sends the put of our entry in the given form, bounded by the
// lease's life.
func (a *attempt) put(form int, since int64) (*clientv3.TxnResponse, error) {
	a.start = time.Now()
	tctx, cancel := a.l.bound(a.ctx)
	defer cancel()
	r, err := a.putEntry(tctx, form, since)
	return r, a.l.why(tctx, err)
}

// wait waits until backend.Admit admits our entry, given v, the queue
// ahead of it if known (nil: look first). An exclusive request is
// admitted when its entry is the first; the others when the claims ahead
// and their own fit the key. A waiter watches the one entry ahead whose
// departure it needs (Admission.Wait): an exclusive request its
// predecessor, a shared one the nearest exclusive entry ahead, a permit
// one the nearest entry whose weight and its own exceed the limit. When
// no single entry blocks it (permits held by several), it watches every
// entry ahead, and looks again when any of them goes. A request that
// disagrees with an entry ahead (backend.Mismatch) removes its own and
// fails.
func (a *attempt) wait(v *ahead) (backend.Acquisition, error) {
	backoff := 10 * time.Millisecond
	for {
		if v == nil {
			if h := testHooks.Load(); h != nil && h.Checking != nil {
				h.Checking(a.key)
			}
			r, err := a.look()
			if err != nil {
				if err := a.pause(err, backoff); err != nil {
					return backend.Acquisition{}, a.giveUp(err)
				}
				backoff = min(2*backoff, time.Second)
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
				continue
			}
			v = &ahead{kvs: kvs(r, 0), seen: r.Header.Revision}
		}
		adm, err := a.admit(v.kvs)
		switch {
		case err != nil:
			return backend.Acquisition{}, a.refuse(err)
		case adm.Admitted:
			return a.granted()
		}
		watch := v.kvs
		if adm.Wait >= 0 {
			watch = watch[adm.Wait : adm.Wait+1]
		}
		a.watching(watch)
		if err := a.waitGone(watch, v.seen); err != nil {
			return backend.Acquisition{}, a.giveUp(err)
		}
		v = nil
	}
}

// admit applies backend.Admit to our claim behind the entries before.
func (a *attempt) admit(before []*mvccpb.KeyValue) (backend.Admission, error) {
	return backend.Admit(claims(a.qp, before, backend.ClaimOf(a.req)), len(before))
}

// watching tells the test hooks what the waiter is about to wait for.
func (a *attempt) watching(entries []*mvccpb.KeyValue) {
	h := testHooks.Load()
	switch {
	case h == nil:
	case len(entries) == 1 && h.Watching != nil:
		h.Watching(a.key, string(entries[0].Key))
	case len(entries) > 1 && h.WatchingAll != nil:
		keys := make([]string, len(entries))
		for i, kv := range entries {
			keys[i] = string(kv.Key)
		}
		h.WatchingAll(a.key, keys)
	}
}

// look reads, in one transaction, the entries before ours if ours is
// still the one we put (Succeeded), or else what is under our name. An
// exclusive request reads only the entry just before its own: any entry
// ahead blocks it, so that one decides (backend.Admit on it and ours: it
// waits for it, or disagrees with it).
func (a *attempt) look() (*clientv3.TxnResponse, error) {
	a.start = time.Now()
	tctx, cancel := a.l.bound(a.ctx)
	defer cancel()
	var before clientv3.Op
	if a.req.Kind == backend.Exclusive {
		before = clientv3.OpGet(a.qp, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend),
			clientv3.WithMaxCreateRev(a.rev-1), clientv3.WithLimit(1), clientv3.WithKeysOnly())
	} else {
		before = readQueue(a.qp, clientv3.WithMaxCreateRev(a.rev-1))
	}
	r, err := a.d.cli.Txn(tctx).
		If(clientv3.Compare(clientv3.CreateRevision(a.key), "=", a.rev)).
		Then(before).
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
	if h := testHooks.Load(); h != nil && h.Held != nil {
		h.Held(a.key)
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
	a.remove()
	if errors.Is(err, errRequeue) {
		return errRequeue
	}
	return wrap(a.ctx, err)
}

// refuse removes our queue entry, which the queue does not admit (err is
// a *backend.Mismatch or *backend.Busy), and returns err as it is. Those
// behind it look again, as when a waiter gives up.
func (a *attempt) refuse(err error) error {
	a.remove()
	return err
}

// remove deletes our queue entry, or leaves it to the lease's sweeper if
// the delete fails, and ends the attempt.
func (a *attempt) remove() {
	l, key := a.l, a.key
	cctx, cancel := context.WithTimeout(a.d.ctx, cleanupTimeout)
	defer cancel()
	if _, cerr := a.d.deleteEntry(cctx, key, a.rev); cerr != nil {
		l.addOrphan(key, a.rev, func() { l.free(key) })
	} else {
		l.free(key)
	}
	a.d.unref(l)
}

// waitGone returns once one of ps, entries ahead of ours seen at
// revision seen, may be gone; the caller then looks again. One entry is
// watched by its key; several by one watch over the range of their keys,
// deletes only, any of which ends the wait.
//
// The watch starts at the server's current revision, not at seen: a
// watch from an older revision is served by etcd's catch-up loop, which
// runs every 100 ms, and handoffs would take that long. A deletion between
// seen and the start of the watch is found by reading ps once the watch
// is in place, which is needed only if the store moved on since seen.
func (a *attempt) waitGone(ps []*mvccpb.KeyValue, seen int64) error {
	ctx, l := a.ctx, a.l
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	var (
		wch  clientv3.WatchChan
		mine map[string]bool // with several: the keys of ps
	)
	if len(ps) == 1 {
		wch = a.d.cli.Watch(wctx, string(ps[0].Key), clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
	} else {
		mine = make(map[string]bool, len(ps))
		lo, hi := string(ps[0].Key), string(ps[0].Key)
		for _, p := range ps {
			k := string(p.Key)
			mine[k] = true
			lo, hi = min(lo, k), max(hi, k)
		}
		wch = a.d.cli.Watch(wctx, lo, clientv3.WithRange(hi+"\x00"), clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
	}
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
				if wr.Header.Revision > seen && !a.stillThere(ps) {
					return nil
				}
				continue
			}
			for _, ev := range wr.Events {
				if ev.Type == mvccpb.DELETE && (mine == nil || mine[string(ev.Kv.Key)]) {
					return nil
				}
			}
		}
	}
}

// stillThere reads whether all of ps are still in the queue. A name can
// be reused: an entry under it with another create revision is not the
// one we queued behind. An error counts as gone: the caller looks again.
func (a *attempt) stillThere(ps []*mvccpb.KeyValue) bool {
	tctx, cancel := a.l.bound(a.ctx)
	defer cancel()
	if len(ps) == 1 {
		g, err := a.d.cli.Get(tctx, string(ps[0].Key), clientv3.WithKeysOnly())
		return err == nil && len(g.Kvs) > 0 && g.Kvs[0].CreateRevision == ps[0].CreateRevision
	}
	g, err := a.d.cli.Get(tctx, a.qp, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithMaxCreateRev(a.rev-1))
	if err != nil {
		return false
	}
	revs := make(map[string]int64, len(g.Kvs))
	for _, kv := range g.Kvs {
		revs[string(kv.Key)] = kv.CreateRevision
	}
	for _, p := range ps {
		if revs[string(p.Key)] != p.CreateRevision {
			return false
		}
	}
	return true
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
