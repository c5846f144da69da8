package etcd

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A held lock's validity follows its lease (held.ValidUntil), which the
// lease loop keeps alive for all its locks with one request. What the
// lease cannot tell is that a lock's entry was deleted behind our back (an
// operator, a tool) or put again on another lease, or none: either lets
// someone else take the lock while our lease lives on. One watch per
// driver, on the whole namespace, tells us, without a request per lock or
// per refresh period: a deletion of a held entry, or a put on it under a
// lease it is not on, reports the lock lost at once.
//
// The watch covers the changes from a revision on. Whatever it cannot
// cover is looked at instead, in transactions of up to maxTxnOps reads
// (lookup): every held entry when the watch starts, or starts again after
// a gap (its stream ended: no leader, ErrCompacted, a closed connection),
// then the watch resumes from just after the earliest revision those
// reads saw; and a lock registered after the watch may already have
// passed a change to its entry (see watcher.register).

// watcher follows the namespace for changes to held entries.
type watcher struct {
	d    *driver
	wake chan struct{} // tells the loop of unchecked locks

	mu      sync.Mutex
	entries map[string]*held // the held entries, by etcd key
	// from is the revision from which the running watch reports every
	// change, or will end with an error; 0 while there is none (not
	// started, or a gap being covered).
	from int64
	// seen is the latest revision of a change the loop has applied: a
	// lock whose entry was created before it may have missed one.
	seen int64
	// unchecked are locks registered that the watch alone does not cover:
	// the loop looks at their entries.
	unchecked []*held
	running   bool      // the loop runs
	idleSince time.Time // since when entries is empty
	// young are the locks registered while the loop was not running, in
	// the order they were, for due to start it once one of them has been
	// held for watchAfter; due runs from timer.
	young []youngLock
	timer *time.Timer
}

// A youngLock is a lock registered while no watch ran, and when.
type youngLock struct {
	h  *held
	at time.Time
}

func newWatcher(d *driver) *watcher {
	return &watcher{d: d, wake: make(chan struct{}, 1), entries: map[string]*held{}}
}

// Timings of the watcher.
const (
	// minResync and maxResync bound the wait before a watch that could not
	// be started, or a look that failed, is tried again.
	minResync = 50 * time.Millisecond
	maxResync = 2 * time.Second
)

// watchAfter is how long a lock is held before a watch must cover it.
// Most locks are released sooner: a watch started for them would be
// stopped again a minute later having reported nothing, and costs each
// lock's put and delete an event on the client's connection meanwhile
// (see Performance in the package doc). A lock's entry deleted by someone
// else in its first watchAfter is found gone by the look that starts the
// watch, or by its Release.
var watchAfter atomic.Int64 // a time.Duration

func init() { watchAfter.Store(int64(100 * time.Millisecond)) }

// register makes the watcher look after h, whose entry was created at
// h.rev. While no watch runs, h waits among the young locks: the watch
// starts once one of them has been held for watchAfter (due), and looks at
// every held entry before it follows the changes. While one runs, a change
// to the entry after h.rev is reported by it, if it reports every change
// from h.rev+1 on and has not applied a change after h.rev yet (such a
// change, a deletion of h's entry perhaps, was applied while h was
// unknown, and ignored). Otherwise the loop looks at the entry; a look
// that finds it, at a revision at least seen, leaves the later changes to
// the watch.
func (w *watcher) register(h *held) {
	w.mu.Lock()
	if h.isDone() {
		// Lost already (its lease died): finish found nothing to forget.
		w.mu.Unlock()
		return
	}
	w.entries[h.key] = h
	if !w.running {
		if after := time.Duration(watchAfter.Load()); after > 0 {
			w.young = append(w.young, youngLock{h, time.Now()})
			if w.timer == nil {
				w.timer = time.AfterFunc(after, w.due)
			}
			w.mu.Unlock()
			return
		}
		w.startLocked()
		return
	}
	covered := w.from > 0 && w.from <= h.rev+1 && w.seen <= h.rev
	if !covered {
		w.unchecked = append(w.unchecked, h)
	}
	w.mu.Unlock()
	if !covered {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// due starts the loop if a young lock has been held for watchAfter, and
// otherwise waits until the oldest one still held will have been.
func (w *watcher) due() {
	if h := testHooks.Load(); h != nil && h.Due != nil {
		h.Due()
	}
	w.mu.Lock()
	i := 0
	for i < len(w.young) && w.entries[w.young[i].h.key] != w.young[i].h {
		i++ // released, expired or lost since
	}
	w.young = w.young[i:]
	switch {
	case w.running || len(w.young) == 0:
		w.young, w.timer = nil, nil
		w.mu.Unlock()
	case time.Since(w.young[0].at) < time.Duration(watchAfter.Load()):
		w.timer.Reset(time.Duration(watchAfter.Load()) - time.Since(w.young[0].at))
		w.mu.Unlock()
	default:
		w.young, w.timer = nil, nil
		w.startLocked()
	}
}

// startLocked starts the loop, which looks at every held entry first.
// It is called with w.mu held and releases it.
func (w *watcher) startLocked() {
	w.running = true
	w.mu.Unlock()
	if w.d.track() {
		go w.loop()
		return
	}
	w.mu.Lock()
	w.running = false // closing: Close reports every lock lost
	w.mu.Unlock()
}

// forget stops looking after h: it is released, expired or lost, and its
// entry's deletion by us is none of the watch's business.
func (w *watcher) forget(h *held) {
	w.mu.Lock()
	if w.entries[h.key] == h {
		delete(w.entries, h.key)
		if len(w.entries) == 0 {
			w.idleSince = time.Now()
		}
	}
	w.mu.Unlock()
}

// loop covers the gap before each watch and follows it, until the driver
// closes or no lock has been held for idleLinger.
func (w *watcher) loop() {
	defer w.d.wg.Done()
	backoff := minResync
	for {
		ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(w.d.ctx))
		wch, err := w.start(ctx)
		if err == nil {
			backoff = minResync
			err = w.follow(wch)
		}
		cancel()
		if err == errIdle || w.d.ctx.Err() != nil {
			return
		}
		w.d.log.Warn("locker/etcd: watch of held locks interrupted, looking at every held entry again", "err", err)
		if !w.pause(backoff) {
			return
		}
		backoff = min(2*backoff, maxResync)
	}
}

var (
	// errIdle ends the loop: no lock held for idleLinger.
	errIdle        = errors.New("no lock held")
	errWatchClosed = errors.New("the watch of held locks closed")
	// Why the watcher reports a lock lost.
	errEntryDeleted     = errors.New("its queue entry was deleted by someone else")
	errEntryOverwritten = errors.New("its queue entry was replaced by someone else's")
	errEntryMoved       = errors.New("its queue entry was put on a lease it is not on, or none")
)

// start covers the gap: it looks at every held entry, then starts a
// watch from just after the earliest revision those looks saw. The locks
// registered meanwhile are the loop's to look at.
func (w *watcher) start(ctx context.Context) (clientv3.WatchChan, error) {
	w.mu.Lock()
	w.from, w.seen = 0, 0
	all := make([]*held, 0, len(w.entries))
	for _, h := range w.entries {
		all = append(all, h)
	}
	w.unchecked = nil
	w.mu.Unlock()
	if h := testHooks.Load(); h != nil && h.Resync != nil {
		h.Resync()
	}
	rev, err := w.look(ctx, all)
	if err != nil {
		return nil, err // the next start looks at every entry
	}
	if h := testHooks.Load(); h != nil && h.Resynced != nil {
		h.Resynced()
	}
	wch := w.d.cli.Watch(ctx, w.d.ns+"/", clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	w.mu.Lock()
	w.from, w.seen = rev+1, rev
	w.mu.Unlock()
	return wch, nil
}

// follow applies what the watch reports and looks at the locks it does
// not cover, until the watch ends (its error is returned) or the driver
// has held no lock for idleLinger (errIdle).
func (w *watcher) follow(wch clientv3.WatchChan) error {
	idle := time.NewTimer(idleLinger)
	defer idle.Stop()
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	backoff := minResync
	for {
		select {
		case <-w.d.ctx.Done():
			return w.d.ctx.Err()
		case wr, ok := <-wch:
			if !ok {
				return errWatchClosed
			}
			if err := wr.Err(); err != nil {
				return err
			}
			w.apply(wr.Events)
		case <-w.wake:
		case <-retry.C:
		case <-idle.C:
			if w.stopIfIdle() {
				return errIdle
			}
			idle.Reset(idleLinger)
			continue
		}
		if err := w.checkUnchecked(); err != nil {
			// The watch still covers the others: look at these again.
			w.d.log.Warn("locker/etcd: looking at newly held entries failed, retrying", "err", err)
			retry.Reset(backoff)
			backoff = min(2*backoff, maxResync)
		} else {
			backoff = minResync
		}
	}
}

// stopIfIdle ends the loop if no lock has been held for idleLinger.
func (w *watcher) stopIfIdle() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.entries) > 0 || len(w.unchecked) > 0 || time.Since(w.idleSince) < idleLinger {
		return false
	}
	w.running, w.from, w.seen = false, 0, 0
	return true
}

// pause waits before the next start; false if the driver closed
// meanwhile, or the loop ended for want of locks.
func (w *watcher) pause(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-w.d.ctx.Done():
		return false
	case <-t.C:
		return !w.stopIfIdle()
	}
}

// apply reports lost the held locks whose entries the events delete, or
// put on a lease they are not on.
func (w *watcher) apply(evs []*clientv3.Event) {
	var c changes
	w.mu.Lock()
	for _, ev := range evs {
		kv := ev.Kv
		w.seen = max(w.seen, kv.ModRevision)
		h := w.entries[string(kv.Key)]
		if h == nil {
			continue
		}
		rev := kv.ModRevision
		if ev.Type == mvccpb.DELETE {
			kv = nil
		}
		c.add(h, kv, rev)
	}
	w.mu.Unlock()
	if h := testHooks.Load(); h != nil && h.Change != nil {
		for _, ev := range evs {
			h.Change(string(ev.Kv.Key), ev.Type.String())
		}
	}
	w.report(c)
}

// onLease is a held lock whose entry was found on a lease it is not on.
type onLease struct {
	h  *held
	id int64
}

// changes are the held locks whose entries the watcher found changed.
type changes struct {
	deleted, overwritten []*held
	elsewhere            []onLease
}

// add sorts h by what its entry is at revision rev (kv; nil: deleted) and
// adds it unless that state is still its own (see held.judge).
func (c *changes) add(h *held, kv *mvccpb.KeyValue, rev int64) {
	switch h.judge(kv, rev) {
	case entryDeleted:
		c.deleted = append(c.deleted, h)
	case entryOverwritten:
		c.overwritten = append(c.overwritten, h)
	case entryElsewhere:
		c.elsewhere = append(c.elsewhere, onLease{h, kv.Lease})
	}
}

// report reports lost the locks whose entries are known deleted, those
// whose entries are someone else's now (the name stays reserved while
// that entry may be there), and those whose entries, still theirs, are on
// a lease they are not on (deleted, see held.lostElsewhere).
func (w *watcher) report(c changes) {
	for _, h := range c.deleted {
		h.lostEntry(errEntryDeleted, true)
	}
	for _, h := range c.overwritten {
		h.lostEntry(errEntryOverwritten, false)
	}
	for _, e := range c.elsewhere {
		e.h.lostElsewhere(errEntryMoved, e.id)
	}
}

// checkUnchecked looks at the entries of the locks the watch does not
// cover. A look made after the loop applied the changes up to seen sees
// a revision at least seen, and the watch reports every later one.
func (w *watcher) checkUnchecked() error {
	w.mu.Lock()
	hs := w.unchecked
	w.unchecked = nil
	w.mu.Unlock()
	if len(hs) == 0 {
		return nil
	}
	if _, err := w.look(w.d.ctx, hs); err != nil {
		w.mu.Lock()
		w.unchecked = append(w.unchecked, hs...)
		w.mu.Unlock()
		return err
	}
	return nil
}

// look reads the entries of hs that the watcher still looks after, in
// transactions of up to maxTxnOps reads, and reports lost the locks whose
// entry is gone or no longer on their lease. It returns the earliest
// revision the reads saw; 0 if there was nothing to read. The reads are
// linearizable, so that no member answers for a past state.
func (w *watcher) look(ctx context.Context, hs []*held) (int64, error) {
	var (
		mu    sync.Mutex
		first int64
		errs  []error
		jobs  []func()
	)
	for _, c := range chunks(hs, w.d.txnLimit()) {
		jobs = append(jobs, func() {
			rev, err := w.lookChunk(ctx, c)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			} else if first == 0 || rev < first {
				first = rev
			}
		})
	}
	w.d.runJobs(jobs)
	if len(errs) > 0 {
		return 0, errs[0]
	}
	if first == 0 {
		// Nothing to read: the watch may start at the current revision.
		// A read of one key: the header's revision is the store's, and
		// nothing is counted.
		resp, err := w.d.cli.Get(ctx, w.d.ns)
		if err != nil {
			return 0, wrap(ctx, err)
		}
		first = resp.Header.Revision
	}
	return first, nil
}

// lookChunk reads the entries of hs in one transaction (in more if the
// server takes fewer operations per transaction) and returns its
// revision.
func (w *watcher) lookChunk(ctx context.Context, hs []*held) (int64, error) {
	keys := make([]string, len(hs))
	for i, h := range hs {
		keys[i] = h.key
	}
	found, rev, err := w.d.lookup(ctx, keys)
	if err != nil {
		return 0, err
	}
	var c changes
	w.mu.Lock()
	for i, h := range hs {
		if w.entries[h.key] != h {
			continue // released or lost meanwhile
		}
		c.add(h, found[i], rev)
	}
	w.mu.Unlock()
	w.report(c)
	return rev, nil
}
