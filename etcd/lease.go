package etcd

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/locker/backend"
)

// A lease is shared by every lock and waiter of one Locker that asks for
// the same TTL in whole seconds, so that acquiring costs no LeaseGrant
// round trip once the first lock with that TTL has been taken. One
// goroutine per lease keeps it alive and tracks, on the local monotonic
// clock, until when the server certainly still has it (its confirmed
// validity); when that moment passes without a successful keepalive, or
// the server says the lease is gone, every lock on it is reported lost. A
// second goroutine, only while there are orphans, deletes them.
//
// A lease nobody has used for idleLinger is revoked.
type lease struct {
	d    *driver
	secs int64 // the TTL asked for, in seconds: the key in driver.leases

	ready chan struct{} // closed once the grant is done; then id, hex, ttl and err are set
	id    clientv3.LeaseID
	hex   string        // id in hex: the base of the names of the queue entries made with this lease
	ttl   time.Duration // as granted (the server may raise a TTL to its minimum)
	err   error

	// life ends, with the reason, when the lease is given up (or its grant
	// failed): it is the lease's one "dead" flag.
	life context.Context
	end  context.CancelCauseFunc

	// Under d.mu.
	refs      int // acquisitions in flight and locks held on this lease
	idleSince time.Time
	retired   bool
	full      bool // too many orphans: new acquisitions take a new lease (see addOrphan)

	mu sync.Mutex
	// validUntil: the server keeps the lease at least until then, the
	// sending of the last keepalive it confirmed (or of the grant) plus the
	// TTL it granted.
	validUntil time.Time
	held       map[*held]struct{}
	orphans    map[string]*orphan // entries to delete, by etcd key
	sweeping   bool               // a sweeper goroutine runs for the orphans
	names      map[string]bool    // entry names made with this lease and not known to be deleted
	wake       chan struct{}      // tells the sweeper of a new orphan
}

// An orphan is a queue entry a cleanup failed to delete, or the name of
// one that a put whose reply was lost may still create: the server may
// apply such a put after the cleanup looked (the put and the cleanup are
// separate requests, served concurrently), and the entry would then stay
// on a lease that is kept alive for the other locks. Its name stays
// reserved, and the sweeper looks again, until the entry's fate is known:
// deleted by us, or gone with the lease.
type orphan struct {
	rev int64 // its create revision; 0 if unknown (the reply that had it was lost)
	// free gives its name back to the lease it came from, once it is
	// deleted. An entry may be an orphan on several leases (it may be on
	// any of them): free frees the name once, however many call it, so
	// that a later acquisition's reservation of the name is never freed.
	free  func()
	next  time.Time
	every time.Duration // the wait after a look that found nothing (rev 0)
}

// idleLinger is how long a lease no lock or waiter uses is kept alive
// before it is revoked. A variable for tests.
var idleLinger = time.Minute

// Timings of leases.
const (
	// orphanRetry is how soon an orphan is looked at after it is
	// recorded, and how often a failed deletion is retried. An entry whose
	// put's fate is unknown is looked for again at growing intervals, up
	// to a third of the lease's TTL.
	orphanRetry = time.Second
	// cleanupTimeout bounds each cleanup request (a delete after an
	// acquire whose reply was lost, a sweep of orphans, a revoke).
	cleanupTimeout = 2 * time.Second
	// maxOrphans is how many orphans one sweep looks at (one transaction),
	// and how many a lease gathers before new acquisitions move on to a
	// new lease (see addOrphan).
	maxOrphans = 64
	// keepAlivesPerTTL: a lease is kept alive this many times per TTL. A
	// lock's validity ends at its lease's confirmed validity at the
	// latest, which is the TTL after the last answered keepalive: so a
	// lock refreshed, or acquired, just before a keepalive is due is valid
	// for the TTL less this share of it. A sixth leaves a refresh that the
	// watchdog sends a third of the TTL after the last one half the TTL to
	// complete in, instead of the two thirds it would have if the lease
	// did not bound the lock, and makes an unrefreshed lock live at least
	// five sixths of its TTL.
	keepAlivesPerTTL = 6
	// Keepalive retries back off from minBackoff to maxBackoff.
	minBackoff = 20 * time.Millisecond
	maxBackoff = time.Second
)

var (
	errLeaseLapsed  = errors.New("no lease keepalive succeeded within the lease TTL, so the server may have expired the lease")
	errLeaseExpired = errors.New("the server reports the lease expired")
	errLeaseClosed  = errors.New("the Locker was closed")
)

// getLease returns the shared lease for secs, granting it if needed, with
// one reference taken (see unref).
func (d *driver) getLease(ctx context.Context, secs int64) (*lease, error) {
	for {
		d.mu.Lock()
		if d.closed {
			d.mu.Unlock()
			return nil, errClosed
		}
		l := d.leases[secs]
		if l == nil {
			l = &lease{
				d: d, secs: secs, ready: make(chan struct{}),
				held: map[*held]struct{}{}, orphans: map[string]*orphan{}, names: map[string]bool{}, wake: make(chan struct{}, 1),
			}
			l.life, l.end = context.WithCancelCause(context.Background())
			d.leases[secs] = l
			l.refs++
			d.mu.Unlock()
			if err := d.grant(ctx, l); err != nil {
				return nil, err
			}
			return l, nil
		}
		l.refs++
		d.mu.Unlock()
		select {
		case <-l.ready:
		case <-ctx.Done():
			d.unref(l)
			return nil, ctx.Err()
		}
		if l.err == nil && !l.isDead() {
			return l, nil
		}
		// The grant failed for the caller that made it (perhaps only its
		// context ended), or the lease has just lapsed: try again.
		d.unref(l)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
}

// grant asks the server for l. It waits for an unreachable server no
// longer than the TTL asked for.
func (d *driver) grant(ctx context.Context, l *lease) error {
	start := time.Now()
	gctx, cancel := context.WithTimeout(ctx, time.Duration(l.secs)*time.Second)
	resp, err := d.cli.Grant(gctx, l.secs)
	cancel()
	if err == nil {
		d.mu.Lock()
		if d.closed {
			err = errClosed
		} else {
			d.wg.Add(1)
		}
		d.mu.Unlock()
		if err != nil {
			rctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
			d.cli.Revoke(rctx, resp.ID)
			cancel()
		}
	}
	if err != nil {
		// A grant whose reply was lost leaves a lease nobody keeps alive,
		// with no key on it: it expires after its TTL.
		d.mu.Lock()
		if d.leases[l.secs] == l {
			delete(d.leases, l.secs)
		}
		l.refs--
		d.mu.Unlock()
		if ctx.Err() != nil {
			err = ctx.Err()
		} else if !errors.Is(err, errClosed) {
			err = fmt.Errorf("etcd: grant a %ds lease: %w", l.secs, err)
		}
		l.err = err
		l.end(err)
		close(l.ready)
		return err
	}
	l.id = clientv3.LeaseID(resp.ID)
	l.hex = strconv.FormatInt(int64(resp.ID), 16)
	l.ttl = time.Duration(resp.TTL) * time.Second
	l.validUntil = start.Add(l.ttl)
	close(l.ready)
	go l.loop(start)
	return nil
}

// ref takes another reference to l, which the caller holds one of.
func (d *driver) ref(l *lease) {
	d.mu.Lock()
	l.refs++
	d.mu.Unlock()
}

// unref drops a reference taken by getLease or ref.
func (d *driver) unref(l *lease) {
	d.mu.Lock()
	l.refs--
	if l.refs == 0 {
		l.idleSince = time.Now()
	}
	d.mu.Unlock()
}

// retireIfIdle takes l out of use if nothing has used it for idleLinger,
// or at all once it is full.
func (d *driver) retireIfIdle(l *lease) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if l.refs > 0 || l.retired || (!l.full && time.Since(l.idleSince) < idleLinger) {
		return false
	}
	l.retired = true
	if d.leases[l.secs] == l {
		delete(d.leases, l.secs)
	}
	delete(d.full, l)
	return true
}

// fill takes l out of use for new acquisitions, which get a new lease:
// l has gathered maxOrphans orphans. The locks on l stay on it; it is
// revoked once none is left, which settles every orphan.
func (d *driver) fill(l *lease) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if l.full || l.retired || d.closed {
		return
	}
	l.full = true
	if d.leases[l.secs] == l {
		delete(d.leases, l.secs)
	}
	d.full[l] = struct{}{}
}

func (l *lease) isDead() bool { return l.life.Err() != nil }

// bound returns ctx, ended early should the lease be given up: a request
// made for an entry on l is useless once l may have lapsed, so an etcd that
// cannot be reached is waited for no longer than the lease lives. This is
// not a deadline: the lease's end moves with every keepalive, and a
// deadline would cost a timer on both sides of every request besides.
// After a failed request, why(tctx, err) tells whether the lease's end cut
// it short.
func (l *lease) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx == context.Background() || ctx == context.TODO() {
		// Nothing to combine: the lease's life is the request's bound.
		return l.life, noCancel
	}
	tctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(l.life, func() { cancel(context.Cause(l.life)) })
	return tctx, func() {
		stop()
		cancel(nil)
	}
}

func noCancel() {}

// why returns the error of a request made under tctx (from bound): the
// lease's end, which wraps errRequeue, if that is what ended it, or err.
func (l *lease) why(tctx context.Context, err error) error {
	if err == nil || tctx.Err() == nil {
		return err
	}
	if cause := context.Cause(tctx); errors.Is(cause, errRequeue) {
		return cause
	}
	return err
}

// register adds a held lock, reported lost if the lease dies. It returns
// false if the lease is dead already.
func (l *lease) register(h *held) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.isDead() {
		return false
	}
	l.held[h] = struct{}{}
	return true
}

func (l *lease) unregister(h *held) {
	l.mu.Lock()
	delete(l.held, h)
	l.mu.Unlock()
}

// reserve returns a name for a new queue entry of the lock whose queue is
// qp: the lease's id, and a number if another entry of this lease with
// the same claim is in that queue, then claim (see claimSuffix; "" for an
// exclusive hold). Reusing names keeps etcd's index small: it keeps every
// name ever deleted until the next compaction, and reads of a queue walk
// them all. A name is reserved until its entry is known to be deleted, so
// an entry is never put under the name of one that may still exist. It
// returns false if the lease is dead.
func (l *lease) reserve(qp, claim string) (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.isDead() {
		return "", false
	}
	base := qp + l.hex
	for n := 0; ; n++ {
		name := base
		if n > 0 {
			name += "-" + strconv.Itoa(n)
		}
		if claim != "" {
			name += claim
		}
		if !l.names[name] {
			l.names[name] = true
			return name, true
		}
	}
}

// free returns a name once its entry is known to be deleted.
func (l *lease) free(name string) {
	l.mu.Lock()
	delete(l.names, name)
	l.mu.Unlock()
}

// addOrphan records an entry on l that a cleanup failed to delete, or
// whose put's fate is unknown (rev 0), and makes sure a sweeper looks at
// it. If the lease ends first, the entry goes with it. Its name stays
// reserved meanwhile.
//
// An entry whose put's fate is unknown is looked for as long as the lease
// lives, since etcd cannot tell whether a request will yet be applied.
// A lease that has gathered maxOrphans is taken out of use for new
// acquisitions, so that it ends once its locks are released and the
// orphans it must look after stay few.
func (l *lease) addOrphan(key string, rev int64, free func()) {
	l.mu.Lock()
	if l.isDead() {
		l.mu.Unlock()
		return
	}
	l.orphans[key] = &orphan{rev: rev, free: free, next: time.Now().Add(orphanRetry), every: orphanRetry}
	n, start := len(l.orphans), !l.sweeping
	l.sweeping = true
	l.mu.Unlock()
	if n >= maxOrphans {
		l.d.fill(l)
	}
	if !start {
		select {
		case l.wake <- struct{}{}:
		default:
		}
		return
	}
	if !l.d.track() {
		return // closing: the lease is revoked
	}
	go l.sweep()
}

// die gives the lease up and reports every lock on it lost.
func (l *lease) die(cause error) {
	l.mu.Lock()
	if l.isDead() {
		l.mu.Unlock()
		return
	}
	l.end(fmt.Errorf("%w: lease %x given up: %w", errRequeue, int64(l.id), cause))
	hs := l.held
	l.held = nil
	l.orphans = nil
	// The lease's entries may live on the server until it expires there;
	// no new entry will bear this lease's id, so the names can go.
	l.names = nil
	l.mu.Unlock()
	l.d.mu.Lock()
	if l.d.leases[l.secs] == l {
		delete(l.d.leases, l.secs)
	}
	delete(l.d.full, l)
	l.d.mu.Unlock()
	for h := range hs {
		h.lost(l, fmt.Errorf("lease %x: %w", int64(l.id), cause))
	}
}

// confirmed returns l's confirmed validity less the drift allowance: the
// moment, on the local clock, until which the server certainly keeps l.
// The lapse verdict falls then, and no lock on l is valid past it.
func (l *lease) confirmed() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	// The allowance for clock-rate differences between this process and
	// the etcd leader: package locker's, as for lock validity.
	return l.validUntil.Add(-backend.DefaultDrift(l.ttl))
}

// loop keeps l alive: a keepalive a sixth of the TTL (keepAlivesPerTTL)
// after the last one the server confirmed was sent, retried with a backoff while they fail.
// The lapse has a timer of its own, at l's confirmed validity (less the
// drift allowance): when it fires, every lock on l is reported lost,
// whatever the keepalive in flight is doing. The loop also revokes l once
// it has been idle for idleLinger. Orphans are the sweeper's, so that they
// never hold up a keepalive or the lapse.
func (l *lease) loop(start time.Time) {
	defer l.d.wg.Done()
	tick := time.NewTimer(time.Until(start.Add(l.ttl / keepAlivesPerTTL)))
	lapse := time.NewTimer(time.Until(l.confirmed()))
	defer tick.Stop()
	defer lapse.Stop()
	replies := make(chan keepAliveReply, 1)
	inFlight := false
	backoff := minBackoff
	for {
		select {
		case <-l.d.ctx.Done():
			if inFlight {
				<-replies // ended by the same context
			}
			return // Close revokes the lease
		case <-lapse.C:
			if at := l.confirmed(); time.Now().Before(at) {
				lapse.Reset(time.Until(at)) // renewed since the timer was set
				continue
			}
			l.die(errLeaseLapsed)
			if inFlight {
				<-replies // its deadline was the lapse: it is ending
			}
			l.lapsed()
			return
		case r := <-replies:
			inFlight = false
			switch {
			case r.err == nil:
				backoff = minBackoff
				tick.Reset(time.Until(r.sent.Add(l.ttl / keepAlivesPerTTL)))
			case errors.Is(r.err, rpctypes.ErrLeaseNotFound):
				l.die(errLeaseExpired)
				return
			case l.d.ctx.Err() == nil:
				l.d.log.Warn("locker/etcd: lease keepalive failed, retrying", "lease", l.hex, "err", r.err)
				tick.Reset(min(backoff, max(time.Until(l.confirmed()), 0)))
				backoff = min(2*backoff, maxBackoff)
			}
		case <-tick.C:
			if l.d.retireIfIdle(l) {
				l.die(errLeaseClosed)
				l.revoke(l.d.ctx)
				return
			}
			if !time.Now().Before(l.confirmed()) {
				continue // too late to renew: the lapse timer fires
			}
			inFlight = true
			go l.keepAlive(replies)
		}
	}
}

// lapsed revokes l after its lapse verdict: the server may still have it
// (we could not reach it), and its keys should not outlive its TTL should
// the connection come back.
func (l *lease) lapsed() {
	if l.d.ctx.Err() == nil {
		l.revoke(l.d.ctx)
	}
}

type keepAliveReply struct {
	sent time.Time // when the request was sent
	err  error
}

// keepAlive sends one keepalive, which may take until l's lapse, and
// reports on out. On success l's confirmed validity moves to the sending
// plus the TTL the server granted.
func (l *lease) keepAlive(out chan<- keepAliveReply) {
	if h := testHooks.Load(); h != nil && h.Keepalive != nil {
		h.Keepalive(l.hex)
	}
	ctx, cancel := context.WithDeadline(l.d.ctx, l.confirmed())
	sent := time.Now()
	resp, err := l.d.cli.KeepAliveOnce(ctx, l.id)
	cancel()
	if err == nil {
		l.mu.Lock()
		if v := sent.Add(time.Duration(resp.TTL) * time.Second); v.After(l.validUntil) {
			l.validUntil = v
		}
		l.mu.Unlock()
	}
	out <- keepAliveReply{sent: sent, err: err}
}

// sweep deletes l's orphans, looking at each when it is due, until none is
// left, l ends or the Locker closes. One goroutine per lease with orphans.
func (l *lease) sweep() {
	defer l.d.wg.Done()
	t := time.NewTimer(orphanRetry)
	defer t.Stop()
	for {
		select {
		case <-l.d.ctx.Done():
			return
		case <-l.life.Done():
			return // the entries go with the lease
		case <-l.wake:
		case <-t.C:
		}
		wait, ok := l.sweepDue()
		if !ok {
			return
		}
		t.Reset(wait)
	}
}

// sweepDue looks at the orphans that are due, at most maxOrphans of them,
// in one transaction: for each, a transaction of its own that deletes the
// entry if it is ours. It returns how long until the next orphan is due,
// or false, with l.sweeping cleared, once there are none.
func (l *lease) sweepDue() (time.Duration, bool) {
	now := time.Now()
	var (
		keys []string
		obs  []*orphan
		ops  []clientv3.Op
	)
	l.mu.Lock()
	for key, o := range l.orphans {
		if len(ops) < maxOrphans && !o.next.After(now) {
			keys, obs = append(keys, key), append(obs, o)
			ops = append(ops, clientv3.OpTxn([]clientv3.Cmp{l.ours(key, o.rev)}, []clientv3.Op{clientv3.OpDelete(key)}, nil))
		}
	}
	l.mu.Unlock()
	if len(ops) > 0 {
		ctx, cancel := context.WithTimeout(l.d.ctx, cleanupTimeout)
		resp, err := l.d.cli.Txn(ctx).Then(ops...).Commit()
		cancel()
		l.settle(keys, obs, resp, err)
	}
	return l.nextDue()
}

// settle records what a sweep found: an entry known deleted (or, with its
// create revision unknown, found and deleted) is settled and its name
// free; the others are looked at again later.
func (l *lease) settle(keys []string, obs []*orphan, resp *clientv3.TxnResponse, err error) {
	now := time.Now()
	var freed []int
	l.mu.Lock()
	for i, o := range obs {
		if l.orphans[keys[i]] != o {
			continue // settled meanwhile, or l died
		}
		switch {
		case err != nil:
			o.next = now.Add(orphanRetry)
		case o.rev > 0 || resp.Responses[i].GetResponseTxn().GetSucceeded():
			delete(l.orphans, keys[i])
			freed = append(freed, i)
		default:
			// Not there: the put may not have been applied yet.
			o.every = min(2*o.every, max(orphanRetry, l.ttl/3))
			o.next = now.Add(o.every)
		}
	}
	l.mu.Unlock()
	for _, i := range freed {
		obs[i].free()
	}
}

// nextDue returns how long until l's next orphan is due; false, with
// l.sweeping cleared, if there is none.
func (l *lease) nextDue() (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.orphans) == 0 {
		l.sweeping = false
		return 0, false
	}
	var next time.Time
	for _, o := range l.orphans {
		if next.IsZero() || o.next.Before(next) {
			next = o.next
		}
	}
	return max(time.Until(next), 0), true
}

// ours is the condition under which key is ours to delete: it has the
// create revision we got for it, or, when that is unknown (the reply was
// lost), it is attached to our lease.
func (l *lease) ours(key string, rev int64) clientv3.Cmp {
	if rev > 0 {
		return clientv3.Compare(clientv3.CreateRevision(key), "=", rev)
	}
	return clientv3.Compare(clientv3.LeaseValue(key), "=", l.id)
}

// revoke revokes the lease, deleting whatever keys remain on it.
func (l *lease) revoke(parent context.Context) error {
	ctx, cancel := context.WithTimeout(parent, cleanupTimeout)
	defer cancel()
	_, err := l.d.cli.Revoke(ctx, l.id)
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return nil
	}
	return err
}
