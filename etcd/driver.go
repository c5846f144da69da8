package etcd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/distlock/locker/backend"
)

// Capabilities of the backend.
const (
	// maxTTL is the longest lease etcd grants (9,000,000,000 s).
	maxTTL = 9_000_000_000 * time.Second
	// expirySlack: etcd's leader looks for expired leases every 500 ms
	// and revokes them through the raft log; a waiter then learns of the
	// deletion through its watch.
	expirySlack = time.Second
)

var errClosed = backend.ErrClosed

// errRequeue: the waiter's queue entry is gone (its lease lapsed or was
// revoked) and it must queue again.
var errRequeue = errors.New("etcd: queue entry lost")

// encodeKey escapes '%' and '/' in a lock name, so that the encoded name
// contains no '/': the queue of one lock, <ns>/<encoded name>/, then never
// holds the entries of another, as it would for "a" and "a/b" if names
// were used as they are. The escaping is injective.
func encodeKey(k string) string {
	if !strings.ContainsAny(k, "%/") {
		return k
	}
	var b strings.Builder
	b.Grow(len(k) + 8)
	for i := 0; i < len(k); i++ {
		switch c := k[i]; c {
		case '%':
			b.WriteString("%25")
		case '/':
			b.WriteString("%2F")
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// leaseSeconds is the lease TTL for a lock TTL: etcd counts whole seconds,
// so a TTL is rounded up.
func leaseSeconds(ttl time.Duration) int64 {
	s := int64((ttl + time.Second - 1) / time.Second)
	return max(s, 1)
}

type driver struct {
	cli    *clientv3.Client
	kv     pb.KVClient // cli's KV service on its connection; nil: use cli.KV (see requests.go)
	owned  bool
	ns     string
	minTTL time.Duration
	log    *slog.Logger

	ctx    context.Context // cancelled by Close: ends lease loops and cleanups
	cancel context.CancelFunc
	wg     sync.WaitGroup // lease loops and expiry deletions

	// txnOps, once set, is how many operations the server takes in one
	// transaction, learnt from its refusal of a batched refresh; 0 until
	// then: maxTxnOps.
	txnOps atomic.Int64
	// helpers holds a token for each goroutine helping a RefreshBatch.
	helpers chan struct{}

	mu     sync.Mutex
	closed bool
	leases map[int64]*lease    // by TTL in seconds: the ones new acquisitions use
	full   map[*lease]struct{} // leases out of use for new acquisitions, with locks still on them
}

func newDriver(cli *clientv3.Client, owned bool, ns string, minTTL time.Duration, log *slog.Logger) *driver {
	d := &driver{
		cli: cli, kv: directKV(cli), owned: owned, ns: ns, minTTL: minTTL, log: log,
		leases: map[int64]*lease{}, full: map[*lease]struct{}{}, helpers: make(chan struct{}, maxHelpers),
	}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	return d
}

func (d *driver) Capabilities() backend.Capabilities {
	return backend.Capabilities{
		Fencing:       true,
		FIFO:          true,
		WakeOnRelease: true,
		LossSignal:    true,
		MinTTL:        d.minTTL,
		MaxTTL:        maxTTL,
		ExpirySlack:   expirySlack,
	}
}

// queuePrefix is the prefix under which the queue entries of lock key live.
func (d *driver) queuePrefix(key string) string { return d.ns + "/" + encodeKey(key) + "/" }

// track registers background work that Close must wait for; false once
// the driver is closed.
func (d *driver) track() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return false
	}
	d.wg.Add(1)
	return true
}

func (d *driver) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	var live []*lease
	for _, l := range d.leases {
		live = append(live, l)
	}
	for l := range d.full {
		live = append(live, l)
	}
	d.leases, d.full = nil, nil
	d.mu.Unlock()
	d.cancel()
	d.wg.Wait()

	// Revoking a lease deletes the keys still on it: waiters' entries,
	// keys whose deletion failed.
	errs := make([]error, len(live))
	var wg sync.WaitGroup
	for i, l := range live {
		select {
		case <-l.ready:
		default:
			continue // still being granted: grant revokes it, seeing the driver closed
		}
		if l.err != nil {
			continue
		}
		l.die(errLeaseClosed)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := l.revoke(context.Background()); err != nil {
				errs[i] = fmt.Errorf("etcd: revoke lease %x (its keys expire with it within %v): %w", int64(l.id), l.ttl, err)
			}
		}()
	}
	wg.Wait()
	if d.owned {
		errs = append(errs, d.cli.Close())
	}
	return errors.Join(errs...)
}

// definite reports whether err is an answer from the server that the
// request was not applied, as opposed to a lost reply.
func definite(err error) bool {
	if errors.Is(err, errClosed) {
		return true
	}
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		switch ee.Code() {
		case codes.PermissionDenied, codes.InvalidArgument, codes.Unauthenticated,
			codes.ResourceExhausted, codes.NotFound, codes.FailedPrecondition:
			return true
		}
	}
	if s, ok := status.FromError(err); ok {
		switch s.Code() {
		case codes.PermissionDenied, codes.InvalidArgument, codes.Unauthenticated, codes.FailedPrecondition:
			return true
		}
	}
	return false
}

// wrap gives a client error the package prefix, leaving context errors as
// they are.
func wrap(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if ctxErr := ctx.Err(); ctxErr != nil && errors.Is(err, ctxErr) {
		return ctxErr
	}
	if errors.Is(err, errClosed) || errors.Is(err, errRequeue) || errors.Is(err, backend.ErrNotHeld) {
		return err
	}
	return fmt.Errorf("etcd: %w", err)
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
func (d *driver) abandon(ctx context.Context, l *lease, key string, rev int64, err error) error {
	defer d.unref(l)
	if definite(err) {
		l.free(key)
		return wrap(ctx, err)
	}
	cctx, cancel := context.WithTimeout(d.ctx, cleanupTimeout)
	defer cancel()
	resp, cerr := d.cli.Txn(cctx).If(l.ours(key, rev)).Then(clientv3.OpDelete(key)).Commit()
	switch {
	case cerr != nil:
		l.addOrphan(key, rev, l)
		return fmt.Errorf("%w (the cleanup of a queue entry this request may have created failed and is being retried; the entry lives at most until its %v lease lapses: %v)",
			wrap(ctx, err), l.ttl, cerr)
	case rev == 0 && !resp.Succeeded:
		l.addOrphan(key, 0, l) // the put's fate is unknown
	default:
		l.free(key) // deleted, or known gone
	}
	return wrap(ctx, err)
}

func kvs(r *clientv3.TxnResponse, i int) []*mvccpb.KeyValue {
	return r.Responses[i].GetResponseRange().Kvs
}

// TryAcquire puts our entry only if the lock's queue is empty, in one
// transaction that, when the queue is busy, reads its first entry instead.
func (d *driver) TryAcquire(ctx context.Context, req backend.Request) (backend.Acquisition, error) {
	secs := leaseSeconds(req.TTL)
	qp := d.queuePrefix(req.Key)
	for tries := 0; ; tries++ {
		l, key, err := d.entry(ctx, secs, qp)
		if err != nil {
			return backend.Acquisition{}, err
		}
		start := time.Now()
		tctx, cancel := l.bound(ctx)
		resp, err := d.putEntry(tctx, putIfFreeElseFirst, qp, key, l.id)
		err = l.why(tctx, err)
		cancel()
		if errors.Is(err, rpctypes.ErrLeaseNotFound) && tries < 2 {
			l.die(errLeaseExpired) // expired since we last renewed it
			d.unref(l)
			continue
		}
		if err != nil {
			return backend.Acquisition{}, d.abandon(ctx, l, key, 0, err)
		}
		rev := resp.Header.Revision
		if !resp.Succeeded {
			first := kvs(resp, 0)
			if len(first) == 0 || string(first[0].Key) != key {
				l.free(key)
				d.unref(l)
				return backend.Acquisition{}, &backend.Busy{}
			}
			// Our own entry, put by an earlier send of this request.
			rev = first[0].CreateRevision
		}
		return d.granted(ctx, req, l, key, rev, start)
	}
}

// entry returns the lease for secs (with one reference for the caller)
// and a name for a new queue entry under qp on it.
func (d *driver) entry(ctx context.Context, secs int64, qp string) (*lease, string, error) {
	for {
		l, err := d.getLease(ctx, secs)
		if err != nil {
			return nil, "", err
		}
		if key, ok := l.reserve(qp); ok {
			return l, key, nil
		}
		d.unref(l) // lapsed since getLease
	}
}

// granted turns our first-in-queue entry into a held lock.
func (d *driver) granted(ctx context.Context, req backend.Request, l *lease, key string, rev int64, start time.Time) (backend.Acquisition, error) {
	h := d.newHeld(key, rev, req.OnLost, l)
	if !l.register(h) {
		// The lease lapsed while we acquired: the entry goes with it.
		return backend.Acquisition{}, d.abandon(ctx, l, key, rev, fmt.Errorf("%w: lease lapsed during the acquire", errRequeue))
	}
	acq := backend.Acquisition{Held: h, Fence: uint64(rev), Fenced: true, Start: start}
	if l.ttl != req.TTL {
		acq.TTL = l.ttl
	}
	return acq, nil
}

// Acquire queues for the lock. Our entry is put with our lease by a
// transaction that applies only if the queue is empty: then that is all
// (the lock is ours, for what a bare put-if-absent costs). Otherwise a
// second put joins the queue; we read the entry just before ours, watch
// only that predecessor for deletion, and look again.
func (d *driver) Acquire(ctx context.Context, req backend.Request) (backend.Acquisition, error) {
	secs := leaseSeconds(req.TTL)
	qp := d.queuePrefix(req.Key)
	for {
		l, key, err := d.entry(ctx, secs, qp)
		if err != nil {
			return backend.Acquisition{}, err
		}
		acq, err := d.queue(ctx, req, l, qp, key)
		if errors.Is(err, errRequeue) && ctx.Err() == nil {
			continue
		}
		if errors.Is(err, errRequeue) {
			err = ctx.Err()
		}
		return acq, err
	}
}

// queue runs one queue entry from its creation to the grant, or removes
// it.
func (d *driver) queue(ctx context.Context, req backend.Request, l *lease, qp, key string) (backend.Acquisition, error) {
	start := time.Now()
	// The first transaction carries nothing for the busy case: an
	// untaken branch still costs the free one (a put there about 1% of an
	// uncontended Acquire+Release, reads about 4%). A waiter pays a second
	// raft round to join instead, before it waits anyway.
	form := putIfFree
	var resp *clientv3.TxnResponse
	for resp == nil {
		tctx, cancel := l.bound(ctx)
		r, err := d.putEntry(tctx, form, qp, key, l.id)
		err = l.why(tctx, err)
		cancel()
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			l.die(errLeaseExpired)
			d.unref(l)
			return backend.Acquisition{}, errRequeue
		}
		if err != nil {
			return backend.Acquisition{}, d.abandon(ctx, l, key, 0, err)
		}
		switch {
		case r.Succeeded && form == putIfFree:
			return d.granted(ctx, req, l, key, r.Header.Revision, start)
		case r.Succeeded:
			resp = r
		default:
			form = putAlways // busy: join the queue
		}
	}
	var (
		// Our entry's create revision: this put's, unless an earlier send
		// of this request created the entry already (its reply was lost);
		// the first look below tells.
		rev     = resp.Header.Revision
		pred    string // the entry just before ours
		predRev int64  // its create revision: its name may be reused once it is deleted
		check   = true // look up the predecessor before waiting
		seen    int64  // the revision at which pred was seen
		backoff = 10 * time.Millisecond
	)
	for {
		if !check {
			hook("watch", key, pred)
			if err := d.waitGone(ctx, l, pred, predRev, seen); err != nil {
				return backend.Acquisition{}, d.giveUp(ctx, l, key, rev, err)
			}
		}
		check = false
		hook("check", key, "")
		start = time.Now()
		tctx, cancel := l.bound(ctx)
		r, err := d.cli.Txn(tctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev)).
			Then(clientv3.OpGet(qp, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend),
				clientv3.WithMaxCreateRev(rev-1), clientv3.WithLimit(1), clientv3.WithKeysOnly())).
			Else(clientv3.OpGet(key, clientv3.WithKeysOnly())).
			Commit()
		err = l.why(tctx, err)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return backend.Acquisition{}, d.giveUp(ctx, l, key, rev, ctx.Err())
			}
			if l.isDead() {
				return backend.Acquisition{}, d.giveUp(ctx, l, key, rev, errRequeue)
			}
			// No leader for a moment, or a reconnect: look again soon.
			d.log.Warn("locker/etcd: waiting acquire could not read its queue, retrying", "key", key, "err", err)
			if err := d.sleep(ctx, l, backoff); err != nil {
				return backend.Acquisition{}, d.giveUp(ctx, l, key, rev, err)
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
				l.free(key)
				d.unref(l)
				return backend.Acquisition{}, errRequeue
			}
			// Made by an earlier send of this request: still ours (the
			// name is reserved for this acquisition), queued since then.
			rev = cur[0].CreateRevision
			check = true
			continue
		}
		before := kvs(r, 0)
		if len(before) == 0 {
			return d.granted(ctx, req, l, key, rev, start)
		}
		pred, predRev, seen = string(before[0].Key), before[0].CreateRevision, r.Header.Revision
	}
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

// waitGone returns once entry pred, created at predRev and present at
// revision seen, may be gone; the caller then looks again.
//
// The watch starts at the server's current revision, not at seen: a watch
// from an older revision is served by etcd's catch-up loop, which runs
// every 100 ms, and handoffs would take that long. A deletion between
// seen and the start of the watch is found by reading pred once the watch
// is in place, which is needed only if the store moved on since seen.
func (d *driver) waitGone(ctx context.Context, l *lease, pred string, predRev, seen int64) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := d.cli.Watch(wctx, pred, clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
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
				return d.sleep(ctx, l, 50*time.Millisecond)
			}
			if wr.Created {
				if wr.Header.Revision > seen {
					tctx, cancel := l.bound(ctx)
					g, err := d.cli.Get(tctx, pred, clientv3.WithKeysOnly())
					cancel()
					// A name can be reused: an entry under it with another
					// create revision is not the one we queued behind.
					if err != nil || len(g.Kvs) == 0 || g.Kvs[0].CreateRevision != predRev {
						return nil
					}
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

// giveUp removes our queue entry after a wait that ended without the
// lock.
func (d *driver) giveUp(ctx context.Context, l *lease, key string, rev int64, err error) error {
	cctx, cancel := context.WithTimeout(d.ctx, cleanupTimeout)
	defer cancel()
	_, cerr := d.deleteEntry(cctx, key, rev)
	if cerr != nil {
		l.addOrphan(key, rev, l)
	} else {
		l.free(key)
	}
	d.unref(l)
	if errors.Is(err, errRequeue) {
		return errRequeue
	}
	return wrap(ctx, err)
}

// hookFn, set only by tests, observes waiters, "watch" (waiter key,
// watched key) and "check" (waiter key); puts of queue entries, "put"
// (entry key), before they are sent; and keepalives, "keepalive" (lease id
// in hex), before they are sent, from a goroutine of their own, which a
// test may block without holding up the lease's lapse.
var hookFn atomic.Pointer[func(event, key, other string)]

func hook(event, key, other string) {
	if f := hookFn.Load(); f != nil {
		(*f)(event, key, other)
	}
}

// held is a lock we hold: our queue entry, first in its queue.
type held struct {
	d      *driver
	key    string // our queue entry
	rev    int64  // its create revision: the fence
	onLost func(error)

	origin *lease // the lease whose name the entry bears

	// The entry's compare-and-delete, built once when requests go to the
	// connection directly (requests.go).
	del deleteTxn

	mu     sync.Mutex
	lease  *lease   // the lease the entry is on
	others []*lease // leases the entry may be on after a lease change whose reply was lost
	done   bool     // released, expired or lost; no longer on any lease
}

func (d *driver) newHeld(key string, rev int64, onLost func(error), l *lease) *held {
	h := &held{d: d, key: key, rev: rev, onLost: onLost, lease: l, origin: l}
	if d.kv != nil {
		h.del.init([]byte(key), rev)
	}
	return h
}

// deleteEntry deletes our entry if it is still the one we put.
func (h *held) deleteEntry(ctx context.Context) (*clientv3.TxnResponse, error) {
	if h.d.kv != nil {
		return h.d.send(ctx, &h.del.req)
	}
	return h.d.deleteEntry(ctx, h.key, h.rev)
}

func (h *held) own() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(h.key), "=", h.rev)
}

// check reports whether our entry is still there, linearizably. The read
// in the transaction matters: etcd serves a transaction without range
// reads as a serializable one, from whichever member gets it, and a
// follower behind the leader would answer for a past state.
func (h *held) check(ctx context.Context) (bool, error) {
	resp, err := h.d.cli.Txn(ctx).If(h.own()).Then(clientv3.OpGet(h.key, clientv3.WithCountOnly())).Commit()
	if err != nil {
		return false, wrap(ctx, err)
	}
	return resp.Succeeded, nil
}

// finish marks h done and returns the leases it was on, each holding one
// reference; nil if h was done already.
func (h *held) finish() []*lease {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done {
		return nil
	}
	h.done = true
	return append([]*lease{h.lease}, h.others...)
}

func (h *held) drop(ls []*lease) {
	for _, l := range ls {
		l.unregister(h)
		h.d.unref(l)
	}
}

// lost is called when lease l dies.
func (h *held) lost(l *lease, cause error) {
	ls := h.finish()
	if ls == nil {
		return
	}
	h.drop(ls)
	if h.onLost != nil {
		h.onLost(fmt.Errorf("%w: %w", backend.ErrNotHeld, cause))
	}
}

// Expire deletes the entry when the lock's TTL has run out without a
// refresh (backend.Expirer). All locks with one TTL share a lease that is
// kept alive, so the lease alone would never let an unrefreshed lock go.
// (If this process dies, the lease does lapse, and the entry with it.)
func (h *held) Expire() {
	ls := h.finish()
	if ls == nil {
		return
	}
	d := h.d
	if !d.track() {
		h.drop(ls) // closing: the leases are revoked
		return
	}
	defer d.wg.Done()
	ctx, cancel := context.WithTimeout(d.ctx, cleanupTimeout)
	if len(ls) == 1 {
		// Its validity may have run out with its lease's: once the lease
		// is given up, the entry goes with it and the delete is moot.
		var stop context.CancelFunc
		ctx, stop = ls[0].bound(ctx)
		defer stop()
	}
	_, err := h.deleteEntry(ctx)
	cancel()
	if err != nil {
		for _, l := range ls {
			l.addOrphan(h.key, h.rev, h.origin) // nothing to do on a dead lease
		}
	} else {
		h.origin.free(h.key)
	}
	h.drop(ls)
	if h.onLost != nil {
		h.onLost(fmt.Errorf("%w: its validity ran out without a refresh", backend.ErrNotHeld))
	}
}

// Refresh keeps the lock on its lease when the TTL stays the same in whole
// seconds: the lease loop keeps the lease alive, so only a look that the
// entry is still ours is needed (verify, as for a batch of one). Another
// TTL moves the entry to that TTL's lease.
func (h *held) Refresh(ctx context.Context, ttl time.Duration) error {
	cur, secs, same, err := h.leaseFor(ttl)
	if err != nil {
		return err
	}
	if same {
		var errs [1]error
		h.d.verify(ctx, []checkItem{{h: h, l: cur}}, errs[:])
		return errs[0]
	}
	return h.move(ctx, secs)
}

// leaseFor returns the lease h's entry is on and the lease TTL, in
// seconds, of a refresh with ttl (0: the current one); same says that
// the refresh keeps the entry where it is: the TTL stays, and no earlier
// move left the entry possibly on another lease. ErrNotHeld once h is
// done.
func (h *held) leaseFor(ttl time.Duration) (cur *lease, secs int64, same bool, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done {
		return nil, 0, false, backend.ErrNotHeld
	}
	cur = h.lease
	secs = cur.secs
	if ttl > 0 {
		secs = leaseSeconds(ttl)
	}
	return cur, secs, secs == cur.secs && len(h.others) == 0, nil
}

// checked applies what a linearizable read of h's entry found, for a
// refresh that keeps it on lease l.
func (h *held) checked(l *lease, found []*mvccpb.KeyValue) error {
	switch {
	case len(found) == 0 || found[0].CreateRevision != h.rev:
		h.gone()
		return backend.ErrNotHeld
	case found[0].Lease != int64(l.id):
		// Ours, but put on another lease (or none) by someone else: it no
		// longer ends with ours, so our lease cannot bound it. Its name
		// stays reserved while the entry may be there.
		h.drop(h.finish())
		return backend.ErrNotHeld
	}
	return h.extend(l, false)
}

// move puts the entry on the lease for secs. A put on an existing key
// keeps its create revision, so the fence and the queue position stay.
func (h *held) move(ctx context.Context, secs int64) error {
	nl, err := h.d.getLease(ctx, secs)
	if err != nil {
		return err
	}
	resp, err := h.d.cli.Txn(ctx).If(h.own()).Then(clientv3.OpPut(h.key, "", clientv3.WithLease(nl.id))).Commit()
	if err != nil {
		if definite(err) {
			h.d.unref(nl)
		} else {
			h.addOther(nl) // the entry may be on nl now
		}
		return wrap(ctx, err)
	}
	if !resp.Succeeded {
		h.d.unref(nl)
		h.gone()
		return backend.ErrNotHeld
	}
	return h.extend(nl, true)
}

// addOther keeps a reference to a lease the entry may have moved to.
func (h *held) addOther(l *lease) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done || l == h.lease || !l.register(h) {
		h.d.unref(l)
		return
	}
	for _, o := range h.others {
		if o == l {
			h.d.unref(l)
			return
		}
	}
	h.others = append(h.others, l)
}

// extend records a successful refresh; the entry is now on l. moved is
// true when l's reference was taken for this refresh.
func (h *held) extend(l *lease, moved bool) error {
	h.mu.Lock()
	if h.done || (moved && !l.register(h)) {
		h.mu.Unlock()
		if moved {
			h.d.unref(l)
		}
		return backend.ErrNotHeld
	}
	var drop []*lease
	if moved {
		for _, o := range append([]*lease{h.lease}, h.others...) {
			if o != l {
				drop = append(drop, o)
			} else {
				h.d.unref(l) // held twice: once as before, once for this refresh
			}
		}
		h.lease, h.others = l, nil
	}
	h.mu.Unlock()
	h.drop(drop)
	if l.isDead() {
		return backend.ErrNotHeld
	}
	return nil
}

func (h *held) TTL(ctx context.Context) (time.Duration, error) {
	ok, err := h.check(ctx)
	if err != nil {
		return 0, err
	}
	if !ok {
		h.gone()
		return 0, backend.ErrNotHeld
	}
	h.mu.Lock()
	done, l := h.done, h.lease
	h.mu.Unlock()
	if done {
		return 0, backend.ErrNotHeld
	}
	// The entry stays while the lease does: until its confirmed validity,
	// at most its TTL from now. The lock's own end (its validity, then
	// Expire) is package locker's, which reports the smaller of the two.
	l.mu.Lock()
	rem := min(l.ttl, time.Until(l.validUntil))
	l.mu.Unlock()
	return max(rem, 0), nil
}

var _ backend.Bounded = (*held)(nil)

// ValidUntil implements backend.Bounded: the lock lives on the server no
// longer than the lease it is on, so its validity never runs past that
// lease's confirmed validity (the sending of the last keepalive the server
// confirmed, or of the grant, plus the TTL it granted, less the drift
// allowance); the earliest of those of every lease the entry may be on.
// A Refresh with the same TTL renews no lease: the validity it gives is
// capped here by the lease loop's last keepalive.
func (h *held) ValidUntil() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	until := h.lease.confirmed()
	for _, o := range h.others {
		if u := o.confirmed(); u.Before(until) {
			until = u
		}
	}
	return until
}

func (h *held) Release(ctx context.Context) error {
	if h.leasesGone() {
		// Lost with its lease, which was given up: the entry goes with it.
		h.gone()
		return backend.ErrNotHeld
	}
	resp, err := h.deleteEntry(ctx)
	if err != nil {
		// The delete may have been applied; a retry compares again, so it
		// cannot delete a newer holder's entry.
		return wrap(ctx, err)
	}
	h.gone()
	if !resp.Succeeded {
		return backend.ErrNotHeld
	}
	return nil
}

// leasesGone reports whether h is no longer held and every lease its
// entry may be on has been given up (lapsed, revoked, or found expired).
func (h *held) leasesGone() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.done || !h.lease.isDead() {
		return false
	}
	for _, o := range h.others {
		if !o.isDead() {
			return false
		}
	}
	return true
}

// gone records that the server has no entry with our create revision any
// more (we deleted it, or found it gone): the name is free again.
func (h *held) gone() {
	h.drop(h.finish())
	h.origin.free(h.key)
}
