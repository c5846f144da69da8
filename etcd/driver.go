package etcd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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
	// maxValueLen is the longest value stored with a hold, the value of
	// its queue entry: the memory backend's 64 KiB. etcd refuses a request
	// larger than its --max-request-bytes, 1.5 MiB by default, and keeps
	// every value in memory and in each member's log and snapshots: values
	// are for small descriptions (an address, a host name), and 64 KiB
	// leaves the acquire transaction far below that limit.
	maxValueLen = 64 << 10
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
	// helpers holds a token for each goroutine helping with batched
	// requests (runJobs).
	helpers chan struct{}
	// w watches the namespace for changes to held entries.
	w *watcher

	mu     sync.Mutex
	closed bool
	leases map[int64]*lease    // by TTL in seconds: the ones new acquisitions use
	full   map[*lease]struct{} // leases out of use for new acquisitions, with locks still on them
}

func newDriver(cli *clientv3.Client, owned bool, ns string, minTTL time.Duration, log *slog.Logger) *driver {
	d := &driver{
		cli: cli, owned: owned, ns: ns, minTTL: minTTL, log: log,
		leases: map[int64]*lease{}, full: map[*lease]struct{}{}, helpers: make(chan struct{}, maxHelpers),
	}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	d.w = newWatcher(d)
	return d
}

func (d *driver) Capabilities() backend.Capabilities {
	return backend.Capabilities{
		Name:          "etcd",
		Fencing:       true,
		FIFO:          true,
		WakeOnRelease: true,
		LossSignal:    true,
		Shared:        true,
		Permits:       true,
		MaxValueLen:   maxValueLen,
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

// hooks let tests observe the driver; nil in production. Each runs on the
// goroutine of its event, which waits for it: Keepalive on a goroutine of
// its own, so that a test may block it without holding up the lease's
// lapse; Resync, Resynced and Change on the watcher's. The fields are
// exported for the package's external tests, which set them through
// etcd.Hooks (export_test.go).
type hooks struct {
	Watching func(self, watched string) // a waiter is about to wait for watched, one entry ahead of its own (its predecessor, when exclusive), to go
	// WatchingAll: a waiter is about to wait for any of watched, every
	// entry ahead of its own, to go.
	WatchingAll func(self string, watched []string)
	Checking    func(self string)     // a waiter is about to look at the entries before its own
	Put         func(entry string)    // the put of a queue entry is about to be sent
	Keepalive   func(lease string)    // a keepalive of the lease (id in hex) is about to be sent
	Held        func(entry string)    // a lock was taken, before the watcher learns of it
	Resync      func()                // the watcher starts, before it looks at every held entry
	Resynced    func()                // the watcher looked at every held entry, before it starts the watch
	Change      func(key, typ string) // the watcher applied a change (typ PUT or DELETE) of etcd key
	Due         func()                // the watcher is about to check whether a lock has been held for watchAfter
	Moved       func(entry string)    // a move's transaction returned, before its outcome is taken in
	Removing    func(entry string)    // the delete of a done (lost, expired or released) lock's entry was started (removeLater), on the goroutine that started it: a test may block it while the delete goes on
}

var testHooks atomic.Pointer[hooks]

// held is a lock we hold: our queue entry, first in its queue.
type held struct {
	d      *driver
	key    string // our queue entry
	rev    int64  // its create revision: the fence
	onLost func(error)

	origin *lease // the lease whose name the entry bears

	mu     sync.Mutex
	lease  *lease   // the lease the entry is on
	others []*lease // leases the entry may be on after a lease change whose reply was lost
	moving *lease   // the lease a lease change in flight puts the entry on
	// putRev is the revision of our last put of the entry known applied
	// (its creation, or a lease change): the entry's state at any earlier
	// revision is past, whatever it was.
	putRev int64
	done   bool // released, expired or lost; no longer on any lease
	named  bool // the entry's name is reserved on origin (see freeName)
}

func (d *driver) newHeld(key string, rev int64, onLost func(error), l *lease) *held {
	return &held{d: d, key: key, rev: rev, onLost: onLost, lease: l, origin: l, named: true, putRev: rev}
}

// deleteEntry deletes our entry if it is still the one we put. The
// request is built when it is sent rather than kept with the lock: it
// costs the same allocation either way, and a held lock is smaller
// without it.
func (h *held) deleteEntry(ctx context.Context) (*clientv3.TxnResponse, error) {
	return h.d.deleteEntry(ctx, h.key, h.rev)
}

func (h *held) isDone() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.done
}

// freeName returns the entry's name to its lease, once: the entry is
// known deleted. Only the first call frees it, so that a name reserved
// again by a later acquisition is never freed for it.
func (h *held) freeName() {
	h.mu.Lock()
	named := h.named
	h.named = false
	h.mu.Unlock()
	if named {
		h.origin.free(h.key)
	}
}

// mayBeOnLocked reports whether the entry may be on the lease with id: the
// one it is on, one a lease change whose reply was lost may have put it
// on, or the one a lease change in flight puts it on. h.mu is held.
func (h *held) mayBeOnLocked(id int64) bool {
	if int64(h.lease.id) == id || (h.moving != nil && int64(h.moving.id) == id) {
		return true
	}
	for _, o := range h.others {
		if int64(o.id) == id {
			return true
		}
	}
	return false
}

// What a state of a held lock's entry says of the lock (held.judge).
const (
	entryOurs        = iota // still ours, or replaced by a later put of ours
	entryDeleted            // gone
	entryOverwritten        // someone else's entry under our name
	entryElsewhere          // ours, on a lease it is not on
)

// judge says what kv, the state of h's entry at revision rev (nil:
// deleted), means for h. A state older than our last put known applied
// is ours: the watch, or a read that started before that put, may lag
// behind our lease changes, and judging such a state by the lease the
// lock is on now would take our own earlier put for someone else's. All
// is read under one h.mu, so that a lease change completing meanwhile
// cannot pair an old state's revision with the new lease.
func (h *held) judge(kv *mvccpb.KeyValue, rev int64) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case rev < h.putRev:
		return entryOurs
	case kv == nil:
		return entryDeleted
	case kv.CreateRevision != h.rev:
		return entryOverwritten
	case !h.mayBeOnLocked(kv.Lease):
		return entryElsewhere
	}
	return entryOurs
}

// lostElsewhere reports h lost because its entry, still ours (our create
// revision), is on a lease it is not on (or none): put there by someone
// else, or by a lease change of ours applied after a later one. Our lease
// no longer bounds it, so the entry is deleted here, as Expire does,
// rather than left to block the key for as long as that lease lives; a
// delete that fails is retried by the sweeper of each lease of ours it may
// be on, that one included. The delete frees the key, so it goes out only
// once the holder has been told (see tell).
func (h *held) lostElsewhere(cause error, on int64) {
	ls := h.finish()
	if ls == nil {
		return
	}
	h.tell(cause)
	all := ls
	if x := h.d.leaseByID(on); x != nil && !slices.Contains(ls, x) {
		all = append(append([]*lease(nil), ls...), x)
	}
	h.removeLater(ls, all)
}

// tell reports h, finished, lost for cause to package locker
// (Request.OnLost), which closes Lost before it returns. Whoever finds a
// lock lost tells before anything it does frees the key (deleting the
// entry): a waiter could otherwise be granted the key while the old
// holder's Lost is still open, and both would believe they held it.
// (Expire and Release need not: package locker closed Lost before it
// called them.)
func (h *held) tell(cause error) {
	if h.onLost != nil {
		h.onLost(fmt.Errorf("%w: %w", backend.ErrNotHeld, cause))
	}
}

// leaseByID returns the driver's lease with id, if it has one.
func (d *driver) leaseByID(id int64) *lease {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, l := range d.leases {
		if int64(l.id) == id {
			return l
		}
	}
	for l := range d.full {
		if int64(l.id) == id {
			return l
		}
	}
	return nil
}

// lostEntry reports h lost, as the watcher found it: its entry is gone
// (deleted: its name is free again) or no longer ours.
func (h *held) lostEntry(cause error, deleted bool) {
	ls := h.finish()
	if ls == nil {
		return
	}
	h.drop(ls)
	if deleted {
		h.freeName()
	}
	h.tell(cause)
}

func (h *held) own() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(h.key), "=", h.rev)
}

// finish marks h done and returns the leases it was on, each holding one
// reference; nil if h was done already. The watcher no longer looks
// after it.
func (h *held) finish() []*lease {
	h.mu.Lock()
	if h.done {
		h.mu.Unlock()
		return nil
	}
	h.done = true
	ls := append([]*lease{h.lease}, h.others...)
	h.mu.Unlock()
	h.d.w.forget(h)
	return ls
}

func (h *held) drop(ls []*lease) {
	for _, l := range ls {
		l.unregister(h)
		h.d.unref(l)
	}
}

// lost is called when lease l dies. The entry goes with l if it is on l;
// but a lease change whose outcome is unknown may have left it on another
// lease of ours (h.others), which lives on: there it would block the key
// for as long as that lease is kept alive, so it is deleted, as Expire
// does, off the caller's goroutine (l's death reports every lock on it),
// once the holder has been told (see tell).
func (h *held) lost(l *lease, cause error) {
	ls := h.finish()
	if ls == nil {
		return
	}
	h.tell(cause)
	if slices.ContainsFunc(ls, func(o *lease) bool { return o != l && !o.isDead() }) {
		h.removeLater(ls, ls)
	} else {
		h.drop(ls)
	}
}

// removeLater deletes h's entry, done (ls from finish), from the leases
// all it may be on, then drops ls, off the caller's goroutine: the callers
// (a dying lease, the watcher) report other locks, whose loss must not
// wait on this round trip. The delete frees the key: a caller that found
// h lost has told its holder first (tell). Closing, it only drops ls: the
// leases are revoked, and the entry goes with them.
func (h *held) removeLater(ls, all []*lease) {
	d := h.d
	if !d.track() {
		h.drop(ls)
		return
	}
	go func() {
		defer d.wg.Done()
		ctx, cancel := context.WithTimeout(d.ctx, cleanupTimeout)
		defer cancel()
		h.remove(ctx, all)
		h.drop(ls)
	}()
	if hk := testHooks.Load(); hk != nil && hk.Removing != nil {
		hk.Removing(h.key)
	}
}

// removeFrom deletes h's entry from l, a lease a change of ours put it
// on, or may have, after h was done (released, expired or lost): whoever
// finished h deleted the entry where it knew it to be, which may have
// been before the put landed on l. The delete goes out at once, off the
// caller's goroutine, rather than at l's sweeper's next round; it is left
// to that sweeper only if it fails. l's reference, taken for the change,
// is dropped after.
func (h *held) removeFrom(l *lease) {
	ls := []*lease{l}
	h.removeLater(ls, ls)
}

// remove deletes h's entry, which is done (finish), wherever it is. A
// delete that fails is left to the sweepers of ls, the leases the entry
// may be on (a dead one has nothing to sweep: the entry went with it).
// The caller holds a d.wg reference (track).
func (h *held) remove(ctx context.Context, ls []*lease) {
	if _, err := h.deleteEntry(ctx); err != nil {
		for _, l := range ls {
			l.addOrphan(h.key, h.rev, h.freeName)
		}
		return
	}
	h.freeName()
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
	h.remove(ctx, ls)
	cancel()
	h.drop(ls)
	h.tell(errors.New("its validity ran out without a refresh"))
}

// Refresh keeps the lock on its lease when the TTL stays the same in whole
// seconds: the lease loop keeps the lease alive, so only a look that the
// entry is still ours is needed, one linearizable read, which also tells
// of a change the watch has not reported yet. Another TTL moves the entry
// to that TTL's lease. (The watchdog refreshes a lock through here only
// when it is the only one due in its batch window: see RefreshBatch.)
func (h *held) Refresh(ctx context.Context, ttl time.Duration) error {
	cur, secs, same, err := h.leaseFor(ttl)
	if err != nil {
		return err
	}
	if !same {
		return h.move(ctx, secs)
	}
	if cur.isDead() {
		return backend.ErrNotHeld // its entry goes, or went, with it
	}
	found, _, err := h.d.lookup(ctx, []string{h.key})
	if err != nil {
		return err
	}
	return h.checked(cur, found[0])
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

// checked applies what a linearizable read of h's entry found (nil: no
// entry), for a refresh that keeps it on lease l.
func (h *held) checked(l *lease, found *mvccpb.KeyValue) error {
	switch {
	case found == nil:
		h.gone()
		return backend.ErrNotHeld
	case found.CreateRevision != h.rev:
		// Someone else's entry under our name: ours is gone, but the name
		// is taken.
		h.drop(h.finish())
		return backend.ErrNotHeld
	case found.Lease != int64(l.id):
		// Ours, but on another lease (or none): it no longer ends with
		// ours, so our lease cannot bound it.
		h.lostElsewhere(errEntryMoved, found.Lease)
		return backend.ErrNotHeld
	}
	return h.extend(l, false)
}

// move puts the entry on the lease for secs. A put on an existing key
// keeps its create revision, so the fence and the queue position stay;
// the put keeps the entry's value too (WithIgnoreValue), so that a move
// neither carries the value nor undoes a SetValue applied just before it.
func (h *held) move(ctx context.Context, secs int64) error {
	nl, err := h.d.getLease(ctx, secs)
	if err != nil {
		return err
	}
	// From the moment the put is sent, the server may apply it, and the
	// entry then lives only as long as nl, whose keepalives may already
	// be failing: nl's lapse must end the lock even while the reply is
	// awaited, so nl counts among the leases the entry may be on first.
	added, ok := h.mayMoveTo(nl)
	if !ok {
		h.d.unref(nl)
		return backend.ErrNotHeld
	}
	// The watch may see the put before its reply is back here.
	h.setMoving(nl)
	defer h.setMoving(nil)
	resp, err := h.d.cli.Txn(ctx).If(h.own()).Then(clientv3.OpPut(h.key, "", clientv3.WithLease(nl.id), clientv3.WithIgnoreValue())).Commit()
	if hk := testHooks.Load(); hk != nil && hk.Moved != nil {
		hk.Moved(h.key)
	}
	if err != nil {
		if definite(err) {
			if added {
				h.notOn(nl)
			}
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
	h.mu.Lock()
	h.putRev = max(h.putRev, resp.Header.Revision)
	h.mu.Unlock()
	return h.extend(nl, true)
}

// mayMoveTo counts l among the leases h's entry may be on (h.others),
// with a reference of its own, before a move to l is sent; added says
// that it was not counted already. ok is false if h is done or l dead:
// the move is not to be sent.
func (h *held) mayMoveTo(l *lease) (added, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done {
		return false, false
	}
	added, dead := h.countLocked(l)
	if added {
		h.d.ref(l) // the caller's reference is the move's own
	}
	return added, !dead
}

// notOn undoes mayMoveTo after a move to l that was certainly not applied.
func (h *held) notOn(l *lease) {
	h.mu.Lock()
	i := slices.Index(h.others, l)
	if i < 0 {
		h.mu.Unlock()
		return // h was finished meanwhile, and dropped l with the rest
	}
	h.others = slices.Delete(h.others, i, i+1)
	h.mu.Unlock()
	h.drop([]*lease{l})
}

func (h *held) setMoving(l *lease) {
	h.mu.Lock()
	h.moving = l
	h.mu.Unlock()
}

// addOther keeps a reference to a lease the entry may have moved to.
func (h *held) addOther(l *lease) {
	h.mu.Lock()
	if h.done {
		h.mu.Unlock()
		h.removeFrom(l)
		return
	}
	defer h.mu.Unlock()
	if added, _ := h.countLocked(l); !added {
		h.d.unref(l)
	}
}

// countLocked counts l among the leases h's entry may be on (h.others),
// registering h with it, and reports whether it added l: not if l is
// h.lease or counted already, nor if it is dead (dead). h.mu is held, and
// h is not done.
func (h *held) countLocked(l *lease) (added, dead bool) {
	if l == h.lease || slices.Contains(h.others, l) {
		return false, false
	}
	if !l.register(h) {
		return false, true
	}
	h.others = append(h.others, l)
	return true, false
}

// extend records a successful refresh; the entry is now on l. moved is
// true when l's reference was taken for this refresh.
func (h *held) extend(l *lease, moved bool) error {
	h.mu.Lock()
	if h.done || (moved && !l.register(h)) {
		done := h.done
		h.mu.Unlock()
		switch {
		case moved && done:
			h.removeFrom(l) // as in addOther
		case moved:
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

// TTL reads the entry, as Refresh does, and holds it to the same rule: the
// lock is ours while its entry has our create revision and is on a lease
// the lock may be on. An entry put on another lease, or none, is no longer
// bounded by ours, whose time left would say nothing of it: it is lost, and
// deleted, as the watcher would find it.
func (h *held) TTL(ctx context.Context) (time.Duration, error) {
	found, rev, err := h.d.lookup(ctx, []string{h.key})
	if err != nil {
		return 0, err
	}
	switch h.judge(found[0], rev) {
	case entryDeleted:
		h.gone()
		return 0, backend.ErrNotHeld
	case entryOverwritten:
		// Someone else's entry under our name: the name stays reserved.
		h.drop(h.finish())
		return 0, backend.ErrNotHeld
	case entryElsewhere:
		h.lostElsewhere(errEntryMoved, found[0].Lease)
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
	// Our own deletion is none of the watch's business.
	h.d.w.forget(h)
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
	h.freeName()
}
