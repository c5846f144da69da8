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
)

// A lease is shared by every lock and waiter of one Locker that asks for
// the same TTL in whole seconds, so that acquiring costs no LeaseGrant
// round trip once the first lock with that TTL has been taken. One
// goroutine per lease keeps it alive and tracks, on the local monotonic
// clock, until when the server certainly still has it; when that moment
// passes without a successful keepalive, or the server says the lease is
// gone, every lock on it is reported lost.
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

	mu         sync.Mutex
	validUntil time.Time // the server keeps the lease at least until then
	degraded   bool      // the last keepalive attempt failed
	held       map[*held]struct{}
	orphans    map[string]orphan // entries to delete, by etcd key
	names      map[string]bool   // entry names made with this lease and not known to be deleted
	wake       chan struct{}
}

// An orphan is a queue entry a cleanup failed to delete.
type orphan struct {
	rev    int64  // its create revision; 0 if unknown (the reply that had it was lost)
	origin *lease // the lease whose name it bears
}

// idleLinger is how long a lease no lock or waiter uses is kept alive
// before it is revoked. A variable for tests.
var idleLinger = time.Minute

// Timings of leases.
const (
	// orphanRetry is how often the deletion of a key left behind by a
	// failed cleanup is retried.
	orphanRetry = time.Second
	// cleanupTimeout bounds each cleanup request (a delete after an
	// acquire whose reply was lost, a revoke).
	cleanupTimeout = 2 * time.Second
)

// drift is the allowance for clock-rate differences between this process
// and the etcd leader, taken off every lease validity: 1% plus 2 ms, as
// package locker does for lock validity.
func drift(ttl time.Duration) time.Duration { return ttl/100 + 2*time.Millisecond }

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
				held: map[*held]struct{}{}, orphans: map[string]orphan{}, names: map[string]bool{}, wake: make(chan struct{}, 1),
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

// unref drops a reference taken by getLease.
func (d *driver) unref(l *lease) {
	d.mu.Lock()
	l.refs--
	if l.refs == 0 {
		l.idleSince = time.Now()
	}
	d.mu.Unlock()
}

// retireIfIdle takes l out of use if nothing has used it for idleLinger.
func (d *driver) retireIfIdle(l *lease) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if l.refs > 0 || l.retired || time.Since(l.idleSince) < idleLinger {
		return false
	}
	l.retired = true
	if d.leases[l.secs] == l {
		delete(d.leases, l.secs)
	}
	return true
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
// qp: the lease's id, and a number if another entry of this lease is in
// that queue. Reusing names keeps etcd's index small: it keeps every name
// ever deleted until the next compaction, and reads of a queue walk them
// all. A name is reserved until its entry is known to be deleted, so an
// entry is never put under the name of one that may still exist. It
// returns false if the lease is dead.
func (l *lease) reserve(qp string) (string, bool) {
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

// addOrphan records an entry on l that a cleanup failed to delete. The
// lease loop retries the deletion; if the lease ends first, the entry goes
// with it. Its name stays reserved meanwhile.
func (l *lease) addOrphan(key string, rev int64, origin *lease) {
	l.mu.Lock()
	if !l.isDead() {
		l.orphans[key] = orphan{rev: rev, origin: origin}
	}
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
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
	l.d.mu.Unlock()
	for h := range hs {
		h.lost(l, fmt.Errorf("lease %x: %w", int64(l.id), cause))
	}
}

// loop keeps l alive at a third of its TTL, retries orphan deletions, and
// revokes l once it has been idle for idleLinger.
func (l *lease) loop(start time.Time) {
	defer l.d.wg.Done()
	next := start.Add(l.ttl / 3)
	timer := time.NewTimer(time.Until(next))
	defer timer.Stop()
	for {
		select {
		case <-l.d.ctx.Done():
			return // Close revokes the lease
		case <-timer.C:
		case <-l.wake:
		}
		if l.d.retireIfIdle(l) {
			l.die(errLeaseClosed)
			l.revoke(l.d.ctx)
			return
		}
		pending := l.deleteOrphans()
		if !time.Now().Before(next) {
			sent, ok := l.keepAlive()
			if !ok {
				if l.d.ctx.Err() == nil {
					// The server may still have the lease (we could not
					// reach it): revoke it, so that the keys on it do not
					// outlive its TTL should the keepalives resume.
					l.revoke(l.d.ctx)
				}
				return
			}
			next = sent.Add(l.ttl / 3)
		}
		wait := time.Until(next)
		if pending && wait > orphanRetry {
			wait = orphanRetry
		}
		timer.Reset(wait)
	}
}

// keepAlive renews the lease, retrying until the moment it may have
// lapsed. It returns when the successful request was sent, or false once
// the lease is given up.
func (l *lease) keepAlive() (time.Time, bool) {
	backoff := 20 * time.Millisecond
	for {
		l.mu.Lock()
		deadline := l.validUntil.Add(-drift(l.ttl))
		l.mu.Unlock()
		if !time.Now().Before(deadline) {
			l.die(errLeaseLapsed)
			return time.Time{}, false
		}
		ctx, cancel := context.WithDeadline(l.d.ctx, deadline)
		start := time.Now()
		resp, err := l.d.cli.KeepAliveOnce(ctx, l.id)
		cancel()
		switch {
		case err == nil:
			l.mu.Lock()
			l.validUntil = start.Add(time.Duration(resp.TTL) * time.Second)
			l.degraded = false
			l.mu.Unlock()
			return start, true
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			l.die(errLeaseExpired)
			return time.Time{}, false
		case l.d.ctx.Err() != nil:
			return time.Time{}, false
		}
		l.mu.Lock()
		l.degraded = true
		l.mu.Unlock()
		l.d.log.Warn("locker/etcd: lease keepalive failed, retrying", "lease", fmt.Sprintf("%x", int64(l.id)), "err", err)
		t := time.NewTimer(min(backoff, max(time.Until(deadline), 0)))
		select {
		case <-l.d.ctx.Done():
			t.Stop()
			return time.Time{}, false
		case <-t.C:
		}
		backoff = min(2*backoff, time.Second)
	}
}

// deleteOrphans retries the deletion of keys left behind by failed
// cleanups. It reports whether some remain.
func (l *lease) deleteOrphans() bool {
	l.mu.Lock()
	if len(l.orphans) == 0 {
		l.mu.Unlock()
		return false
	}
	todo := make(map[string]orphan, len(l.orphans))
	for k, v := range l.orphans {
		todo[k] = v
	}
	l.mu.Unlock()
	for key, o := range todo {
		ctx, cancel := context.WithTimeout(l.d.ctx, cleanupTimeout)
		_, err := l.d.cli.Txn(ctx).If(l.ours(key, o.rev)).Then(clientv3.OpDelete(key)).Commit()
		cancel()
		if err != nil {
			continue
		}
		l.mu.Lock()
		delete(l.orphans, key)
		l.mu.Unlock()
		o.origin.free(key)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.orphans) > 0
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
