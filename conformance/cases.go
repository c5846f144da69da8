package conformance

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distlock/locker"
)

// cases are the built-in cases, in the order they run.
var cases = []Case{
	{"acquire-release", "Acquire takes a free key; the lock reports its key, a token and a positive TTL; Release frees the key and closes Lost", caseAcquireRelease},
	{"try-acquire-contended", "TryAcquire on a held key fails at once with ErrNotAcquired, and succeeds once the holder releases", caseTryContended},
	{"release-wakes-waiter", "A blocked Acquire is woken by the holder's Release, not by the TTL running out", caseReleaseWakesWaiter},
	{"fifo-order", "Where Capabilities.FIFO is true, blocked Acquire calls get the key in the order they queued", caseFIFO},
	{"waiter-gets-full-ttl", "A lock granted after a long wait is valid for its whole TTL from the grant, not from the start of the wait", caseWaiterFullTTL},
	{"double-release", "A second Release returns ErrNotHeld, as do Refresh and TTL after Release", caseDoubleRelease},
	{"release-cancelled-context", "Release with a context already cancelled still frees the key at once and reports success", caseReleaseCancelledContext},
	{"release-after-lost", "Release right after Lost closed (the TTL ran out without a refresh) returns ErrNotHeld naming why, as Err does (the validity ran out on the local clock, or the backend found the lock gone first), whether or not the server still had the key", caseReleaseAfterLost},
	{"stale-owner", "After A's lock expires and B acquires the key, A's Release, Refresh and TTL return ErrNotHeld and B still holds the key", caseStaleOwner},
	{"auto-refresh", "With auto-refresh on, a lock outlives several TTLs while its holder lives, and Lost stays open", caseAutoRefresh},
	{"crashed-holder-expiry", "A holder cut off without releasing (auto-refresh on) stops blocking others within TTL + ExpirySlack, and its own Lost closes", caseCrashedHolder},
	{"crashed-holder-handoff", "An Acquire waiting when the holder is cut off gets the key within TTL + ExpirySlack of the cut, and the cut-off holder's Lost closes", caseCrashedHolderHandoff},
	{"crash-during-acquire", "A client cut off at any moment during Acquire leaves no lock that outlives its TTL", caseCrashDuringAcquire},
	{"refresh-extends", "Refresh with a longer TTL keeps the lock past its original TTL", caseRefreshExtends},
	{"ttl-reports-validity", "TTL reports the remaining validity: positive, at most the TTL, not growing without a refresh", caseTTLReports},
	{"cancelled-acquire", "An Acquire whose context ends returns promptly with the context's error and leaves nothing that blocks the next acquirer", caseCancelledAcquire},
	{"independent-keys", "Locks on different keys do not interfere, including keys that are prefixes of each other", caseIndependentKeys},
	{"odd-keys", "Any key works (unicode, '/', spaces, '..', '*', the maximum length less the Locker's prefix) and distinct keys never collide", caseOddKeys},
	{"closed-locker", "After Close, Acquire and TryAcquire return ErrClosed, and the locks the Locker held are released", caseClosedLocker},
	{"close-ends-acquire", "Close ends an Acquire waiting on a held key promptly with ErrClosed, and the waiter leaves nothing that blocks the next acquirer", caseCloseEndsAcquire},
	{"invalid-input", "Empty and over-long keys fail with ErrInvalidKey; zero, negative and out-of-range TTLs fail with ErrInvalidTTL", caseInvalidInput},
	{"fencing", "Fence is strictly increasing across successive holders of a key where Capabilities.Fencing is true, and reports ok=false where it is not", caseFencing},
	{"stale-fence", "Where Capabilities.Fencing is true, a holder whose lock expired or was released by force, and that asks for its fence only after its successor got one, gets none (ok=false) or one below the successor's, never one above: a fence minted on demand is minted only while the lock is the holder's", caseStaleFence},
	{"lost-on-expiry", "With auto-refresh off, Lost stays open while the lock is valid and closes once its TTL runs out", caseLostOnExpiry},
	{"no-early-takeover", "A lock that is not refreshed cannot be taken by another client before its validity (Until: the TTL from the sending of its request, less the drift allowance) has run out", caseNoEarlyTakeover},
	{"do-cancels-on-loss", "Do runs fn under the lock, cancels fn's context when the lock is lost, and reports the loss as ErrNotHeld", caseDoCancelsOnLoss},
	{"mutual-exclusion-stress", "Independent clients hammering one key never overlap in the critical section, and a fencing-checked resource accepts every write", caseStress},
	{"semaphore-limit", "A semaphore of n permits never has more than n held at once: n + 2 clients trying at once get n between them; a request that needs more permits than are left is refused, and gets in once a release frees them", caseSemaphoreLimit},
	{"readers-writers", "Shared holds of a key coexist, an exclusive hold never with any other: an exclusive request is refused while shared holds hold the key, a shared one while an exclusive hold does, and a waiting writer gets the key once the last reader leaves", caseReadersWriters},
	{"kinds-fifo", "Where Capabilities.FIFO is true, admission is in queue order: a reader queued behind a waiting writer is not admitted before it, nor a small semaphore request before a larger one queued ahead of it", caseKindsFIFO},
	{"kinds-fencing", "Where Capabilities.Fencing is true, fences strictly increase in grant order across kinds: an exclusive hold's exceeds every earlier hold's, a shared hold's or a permit's every hold granted before it", caseKindsFencing},
	{"crashed-shared-holder", "A shared holder, or a semaphore's permit holder, cut off without releasing frees its share within TTL + ExpirySlack, and its own Lost closes", caseCrashedSharedHolder},
	{"writer-not-starved", "Where shared holds are admitted, a waiting writer keeps new readers out: readers that arrive in turn, each before the last leaves, do not hold the key forever while a writer waits, which gets it once the readers holding it leave; a writer cut off while it waits keeps no reader out past its TTL + ExpirySlack", caseWriterNotStarved},
	{"cancelled-writer", "A queued writer whose Acquire is cancelled leaves the queue at once: a reader waiting behind it is admitted while the earlier reader still holds the key", caseCancelledWriter},
	{"readers-after-writer", "Readers queued behind a waiting writer are all admitted once the writer leaves the queue, cancelled while an earlier reader holds the key or after holding it itself, within half their TTL: none waits for a TTL to run out", caseReadersAfterWriter},
	{"writer-after-readers", "A writer waiting behind two readers stays out while either holds the key, and once the nearer to it in the queue has left and then the other, gets the key within half their TTL: it does not wait for a TTL to run out", caseWriterAfterReaders},
	{"kind-mismatch", "A request that disagrees with the key's holders fails with ErrKindMismatch (another limit, a shared or exclusive hold on a semaphore's key, a permit on a read/write lock's), and once they are gone the key takes any kind", caseKindMismatch},
	{"values", "A hold's value (WithValue) is what Inspect reports, for each holder; SetValue replaces it and an empty one removes it, up to Capabilities.MaxValueLen bytes, and a longer one fails with ErrInvalidValue; a stale holder's SetValue (its lock released by force and the key taken again) returns ErrNotHeld and leaves the new holder's value", caseValues},
	{"reentrancy", "Under WithOwner, an Acquire of a key its owner holds through the same Locker returns at once with a new handle on the same hold (token and fence shared, HoldCount counting), and the key stays held until the last handle is released; another owner, no owner, and the same owner through another Locker are refused, and the owner's shared request under its exclusive hold fails with ErrKindMismatch (a shared handle would not downgrade the hold)", caseReentrancy},
	{"election-one-leader", "Elections of independent clients campaigning on one name lead one at a time: no Campaign returns while another leader's leadership lasts (its Lost open), and each leads in turn as the others resign", caseElectionOneLeader},
	{"election-terms", "Where Capabilities.Fencing is true, each new leader's term (its Lock's Fence) exceeds every earlier leader's, and while it leads Leader reports that term with its value and token, also after Proclaim", caseElectionTerms},
	{"election-resign", "Resign hands the leadership over at once to a campaigner waiting for it, not once the TTL runs out; the resigned leader's Lost closes, its Proclaim fails with ErrNotHeld, and Leader reports the new leader", caseElectionResign},
	{"election-observe", "Observe reports every change of leader and of value in order, from the backend's notices rather than a timer, when each change waits for the report of the one before; of a run of fast changes it reports some in order, terms never going back, ending with the last", caseElectionObserve},
	{"election-owner-waits", "Leadership is never reentrant: under an owner (WithOwner), a second Election of the leader's Locker and owner does not lead while the first leads, and leads once the first resigns, with its own value and a later term", caseElectionOwnerWaits},
	{"election-owner-resign", "A leader's Resign under an owner ends its leadership: after a second Election of its Locker and owner campaigned in vain, the leader's value stayed its own, and once it resigns the name is free", caseElectionOwnerResign},
	{"election-run", "Election.Run leads one client at a time: a leader cut off is replaced by another client's Run within TTL + ExpirySlack, its lead's context cancelled with ErrNotHeld, and a Run whose context ends resigns and returns", caseElectionRun},
	{"election-crashed-leader", "A leader cut off without resigning is replaced by a waiting campaigner within TTL + ExpirySlack, its own Lost closes, and an observer reports the new leader", caseElectionCrashedLeader},
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func caseAcquireRelease(t *T) {
	l := t.Locker()
	key := t.Key("k")
	lk := t.Acquire(l, key, locker.WithTTL(t.LongTTL()))
	if lk.Key() != key {
		t.Errorf("Key() = %s, want %s", keyText(lk.Key()), keyText(key))
	}
	if lk.Token() == "" {
		t.Errorf("Token() is empty")
	}
	if isClosed(lk.Lost()) {
		t.Errorf("Lost() is closed right after Acquire")
	}
	d, err := lk.TTL(t.Context())
	if err != nil || d <= 0 || d > t.LongTTL() {
		t.Errorf("TTL() = %v, %v; want a duration in (0, %v]", d, err, t.LongTTL())
	}
	t.Release(lk)
	if !isClosed(lk.Lost()) {
		t.Errorf("Lost() is still open after Release returned")
	}
	lk2 := t.TryAcquire(t.Locker(), key)
	if lk2.Token() == lk.Token() {
		t.Errorf("two acquisitions got the same token %q", lk.Token())
	}
	t.Release(lk2)
}

func caseTryContended(t *T) {
	a, b := t.Locker(), t.Locker()
	key := t.Key("k")
	lk := t.TryAcquire(a, key, locker.WithTTL(t.LongTTL()))
	t.WantNotAcquired(b, key, "held by A")
	t.WantNotAcquired(a, key, "held by A, tried by A's own Locker")
	t.Release(lk)
	t.Release(t.TryAcquire(b, key))
}

func caseReleaseWakesWaiter(t *T) {
	a, b := t.Locker(), t.Locker()
	key := t.Key("k")
	lk := t.Acquire(a, key, locker.WithTTL(t.LongTTL()))
	var released atomic.Bool
	type result struct {
		lk  locker.Lock
		err error
	}
	got := make(chan result, 1)
	// If B were only woken by expiry it would need LongTTL; half of that
	// is far more than any release notice takes.
	ctx, cancel := context.WithTimeout(t.Context(), t.LongTTL()/2)
	defer cancel()
	go func() {
		lk, err := b.Acquire(ctx, key)
		got <- result{lk, err}
	}()
	// Give B time to start waiting; whether or not it has, the release
	// must reach it.
	if t.ClosedWithin(ctx.Done(), 50*time.Millisecond) {
		t.Fatalf("context ended early")
	}
	released.Store(true)
	t.Release(lk)
	r := <-got
	if r.err != nil {
		t.Fatalf("waiting Acquire was not woken by the release within %v: %v", t.LongTTL()/2, r.err)
	}
	if !released.Load() {
		t.Errorf("waiting Acquire returned before the holder released")
	}
	t.Release(r.lk)
}

func caseWaiterFullTTL(t *T) {
	a, b := t.Locker(), t.Locker()
	key := t.Key("k")
	ttl := t.TTL()
	lk := t.Acquire(a, key, locker.WithTTL(t.LongTTL()))
	got := make(chan locker.Lock, 1)
	go func() {
		ctx, cancel := context.WithTimeout(t.Context(), t.LongTTL()/2)
		defer cancel()
		lk, err := b.Acquire(ctx, key, locker.WithTTL(ttl), locker.WithAutoRefresh(false))
		if err != nil {
			t.Errorf("waiting Acquire: %v", err)
		}
		got <- lk
	}()
	// Wait longer than the waiter's TTL before releasing.
	if t.ClosedWithin(t.Context().Done(), ttl+ttl/2) {
		t.Fatalf("context ended")
	}
	t.Release(lk)
	lkB := <-got
	if lkB == nil {
		return
	}
	if isClosed(lkB.Lost()) {
		t.Fatalf("Lost() closed at once for a %v lock granted after a %v wait", ttl, ttl+ttl/2)
	}
	if d, err := lkB.TTL(t.Context()); err != nil || d < ttl/2 {
		t.Errorf("TTL() right after a grant = %v, %v; want most of the %v TTL", d, err, ttl)
	}
	t.Release(lkB)
}

func caseDoubleRelease(t *T) {
	l := t.Locker()
	lk := t.Acquire(l, t.Key("k"))
	t.Release(lk)
	t.WantErr(lk.Release(t.Context()), locker.ErrNotHeld, "second Release")
	t.WantErr(lk.Refresh(t.Context(), t.LongTTL()), locker.ErrNotHeld, "Refresh after Release")
	_, err := lk.TTL(t.Context())
	t.WantErr(err, locker.ErrNotHeld, "TTL after Release")
}

func caseReleaseCancelledContext(t *T) {
	l := t.Locker()
	key := t.Key("k")
	lk := t.Acquire(l, key, locker.WithTTL(t.LongTTL()))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := lk.Release(ctx); err != nil {
		t.Errorf("Release with a cancelled context = %v; want the release sent anyway (a deferred Release with a finished request's context)", err)
	}
	if !isClosed(lk.Lost()) {
		t.Errorf("Lost() still open after Release returned")
	}
	// Free now, not once the long TTL runs out.
	t.Release(t.TryAcquire(t.Locker(), key))
}

func caseReleaseAfterLost(t *T) {
	l := t.Locker()
	key := t.Key("k")
	ttl := t.TTL()
	lk := t.Acquire(l, key, locker.WithTTL(ttl), locker.WithAutoRefresh(false))
	if !t.ClosedWithin(lk.Lost(), t.ExpiryBound(ttl)) {
		t.Fatalf("Lost() still open %v after Acquire with a %v TTL and no refresh", t.ExpiryBound(ttl), ttl)
	}
	// Two reasons are true, and either may close Lost first: the
	// validity ran out on the local clock (ErrExpired), or the backend
	// found the lock gone (its server's own expiry, reported before the
	// watchdog's timer fired on a loaded machine). Release must name
	// the one Err names, not claim a release of its own.
	why := lk.Err()
	err := lk.Release(t.Context())
	t.WantErr(why, locker.ErrNotHeld, "Err once Lost closed")
	t.WantErr(err, locker.ErrNotHeld, "Release right after Lost closed")
	switch {
	case errors.Is(err, locker.ErrReleased):
		t.Errorf("Release right after Lost closed: got error %v, which says the holder released the lock; want why Lost closed, as Err says: %v", err, why)
	case !namesReason(err, why):
		t.Errorf("Release right after Lost closed: got error %v, want it to name why Lost closed, as Err does: %v", err, why)
	}
	t.WantErr(lk.Release(t.Context()), locker.ErrNotHeld, "a second Release")
}

// namesReason reports whether err names the reason that why, a lock's
// Err, gives: it wraps why itself (a backend's account of a lock found
// gone, which wraps ErrNotHeld and is returned as it is), or every error
// beside ErrNotHeld that why joins (Err joins ErrNotHeld with the
// Locker's own reason, or a backend's account that does not wrap it,
// afresh on each call).
func namesReason(err, why error) bool {
	if errors.Is(err, why) {
		return true
	}
	joined, ok := why.(interface{ Unwrap() []error })
	if !ok {
		return false
	}
	named := 0
	for _, r := range joined.Unwrap() {
		if r == locker.ErrNotHeld {
			continue
		}
		if !errors.Is(err, r) {
			return false
		}
		named++
	}
	return named > 0
}

func caseStaleOwner(t *T) {
	a, b, c := t.Locker(), t.Locker(), t.Locker()
	key := t.Key("k")
	lkA := t.Acquire(a, key, locker.WithTTL(t.TTL()), locker.WithAutoRefresh(false))
	if !t.ClosedWithin(lkA.Lost(), t.ExpiryBound(t.TTL())) {
		t.Fatalf("A's Lost() did not close within %v of a %v TTL without refresh", t.ExpiryBound(t.TTL()), t.TTL())
	}
	lkB := t.AcquireWithin(b, key, t.ExpiryBound(t.TTL()), "A's lock expired")
	t.WantErr(lkA.Release(t.Context()), locker.ErrNotHeld, "stale A's Release")
	t.WantErr(lkA.Refresh(t.Context(), t.LongTTL()), locker.ErrNotHeld, "stale A's Refresh")
	_, err := lkA.TTL(t.Context())
	t.WantErr(err, locker.ErrNotHeld, "stale A's TTL")
	t.WantNotAcquired(c, key, "B holds the key after stale A released")
	if d, err := lkB.TTL(t.Context()); err != nil || d <= 0 {
		t.Errorf("B's TTL() after stale A released = %v, %v; want B's lock intact", d, err)
	}
	if isClosed(lkB.Lost()) {
		t.Errorf("B's Lost() closed after stale A released")
	}
	t.Release(lkB)
}

func caseAutoRefresh(t *T) {
	a, b := t.Locker(), t.Locker()
	key := t.Key("k")
	lk := t.Acquire(a, key, locker.WithTTL(t.TTL()))
	hold := 3*t.TTL() + t.Capabilities().ExpirySlack
	if t.ClosedWithin(lk.Lost(), hold) {
		t.Fatalf("Lost() closed within %v although the holder lives and auto-refresh is on", hold)
	}
	t.WantNotAcquired(b, key, fmt.Sprintf("after %v of a %v TTL with auto-refresh", hold, t.TTL()))
	t.Release(lk)
}

func caseCrashedHolder(t *T) {
	a := t.CrashableClient()
	b := t.Locker()
	key := t.Key("k")
	lk := t.Acquire(a.Locker, key, locker.WithTTL(t.TTL()))
	t.Release(t.crashHolder(a, lk, "the crashed holder", b, key, "holder crashed"))
}

// crashHolder crashes a, whose hold lk (holder, in failure messages) has a
// TTL of TTL, and returns the hold that l takes of key with opts (a kind
// of hold), which it must within TTL + ExpirySlack, or the case fails,
// saying why the key should have been free, and the calling goroutine
// ends. lk's Lost() must close within the same bound.
func (t *T) crashHolder(a Client, lk locker.Lock, holder string, l locker.Locker, key, why string, opts ...locker.Option) locker.Lock {
	a.Crash()
	crashed := time.Now()
	bound := t.ExpiryBound(t.TTL())
	got := t.AcquireWithin(l, key, bound, why, opts...)
	if !t.ClosedWithin(lk.Lost(), time.Until(crashed.Add(bound))) {
		t.Errorf("%s's Lost() stayed open %v after the crash (TTL %v)", holder, time.Since(crashed), t.TTL())
	}
	return got
}

func caseCrashDuringAcquire(t *T) {
	// Measure one acquire, then crash clients at offsets spread over it,
	// so that some crash lands between the request and its reply (or,
	// on a backend that takes a lock in two steps, between the steps).
	probe := t.Locker()
	warmUp(t, probe, t.Key("probe")) // the acquire, not the connections
	start := time.Now()
	t.Release(t.Acquire(probe, t.Key("probe")))
	lat := time.Since(start)
	const n = 12
	// The observer that checks the keys afterwards acquires them all at
	// once: warm it up the same way first, so that its first requests
	// (new connections, through proxies, on a loaded machine) do not use
	// up the slack the check allows.
	obs := t.Locker()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { warmUp(t, obs, t.Key(fmt.Sprintf("k%d", i))) })
	}
	wg.Wait()
	attempts := make([]crashedAcquire, n)
	for i := range n {
		c := t.CrashableClient()
		attempts[i].key = t.Key(fmt.Sprintf("k%d", i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			attempts[i].run(t, c, lat*time.Duration(i)/8)
		}()
	}
	wg.Wait()
	for _, a := range attempts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The key must be free by crash + expiry bound. If that moment
			// has passed (a cut-off client may take a while to give up),
			// it must be free now: allow one slack for the acquire itself.
			bound := max(time.Until(a.crashed.Add(t.ExpiryBound(t.TTL()))), t.s.h.Slack)
			ctx, cancel := context.WithTimeout(t.Context(), bound)
			defer cancel()
			lk, err := obs.Acquire(ctx, a.key)
			if err != nil {
				t.Errorf("key %s still blocked %v after its acquiring client was cut off (TTL %v): %v; the cut-off client's Acquire %s%s",
					keyText(a.key), t.ExpiryBound(t.TTL()), t.TTL(), err, a.outcome, t.holderText(obs, a.key))
				return
			}
			lk.Release(t.Context())
		}()
	}
	wg.Wait()
}

// warmUp takes and releases key on l, so that l has its connections
// before it judges the key. The first of many Acquire calls at once make
// new connections together, through proxies, on what may be a loaded
// machine; where a server's answer is awaited for a short time (a
// Redlock node's), all of them may miss it. That is no finding about the
// key: it tries again, for up to LongTTL, and leaves the judging to the
// check that follows.
func warmUp(t *T, l locker.Locker, key string) {
	deadline := time.Now().Add(t.LongTTL())
	for {
		// With the case's TTL: a release that fails on a loaded machine
		// leaves a lock that expires before the check.
		lk, err := l.Acquire(t.Context(), key, locker.WithTTL(t.TTL()))
		if err == nil {
			_ = lk.Release(t.Context())
			return
		}
		if t.Context().Err() != nil || time.Now().After(deadline) {
			return
		}
		time.Sleep(time.Duration(10+rand.IntN(40)) * time.Millisecond)
	}
}

// A crashedAcquire is an Acquire of key by a client crashed while (or,
// if the Acquire was quicker, after) it ran.
type crashedAcquire struct {
	key     string
	crashed time.Time
	outcome string // how the Acquire ended, for messages
}

// run starts the Acquire on c, crashes c offset later (or once the
// Acquire returned, if sooner), and checks that the Acquire returns
// within LongTTL of the crash. A cut-off client may fail at once, or go
// on trying to reach its servers (a Sentinel client looks for the
// master) until its context ends; that is an expiry bound after the
// crash, which leaves time for a cleanup after it (closeBound) and for
// the client library's own retries.
func (a *crashedAcquire) run(t *T, c Client, offset time.Duration) {
	limit := offset + t.ExpiryBound(t.TTL())
	ctx, cancel := context.WithTimeout(t.Context(), limit)
	defer cancel()
	done := make(chan struct{})
	start := time.Now()
	var outcome string // written before done closes
	go func() {
		defer close(done)
		lk, err := c.Locker.Acquire(ctx, a.key, locker.WithTTL(t.TTL()))
		if err != nil {
			outcome = fmt.Sprintf("failed after %v: %v", time.Since(start).Round(time.Millisecond), err)
		} else {
			outcome = fmt.Sprintf("succeeded after %v with token %q", time.Since(start).Round(time.Millisecond), lk.Token())
		}
	}()
	timer := time.NewTimer(offset)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-done:
	}
	c.Crash()
	a.crashed = time.Now()
	cut := a.crashed.Sub(start).Round(time.Millisecond)
	bound := max(t.LongTTL(), limit+closeBound)
	wait := time.NewTimer(time.Until(a.crashed.Add(bound)))
	defer wait.Stop()
	select {
	case <-done:
		a.outcome = fmt.Sprintf("(client cut off %v after it started) %s", cut, outcome)
	case <-wait.C:
		a.outcome = fmt.Sprintf("(client cut off %v after it started) had not returned", cut)
		t.Errorf("Acquire did not return within %v of its client being cut off, although its context ended about %v after the cut", bound, t.ExpiryBound(t.TTL()))
	}
}

func caseRefreshExtends(t *T) {
	a, b := t.Locker(), t.Locker()
	key := t.Key("k")
	lk := t.Acquire(a, key, locker.WithTTL(t.TTL()), locker.WithAutoRefresh(false))
	longer := 3 * t.ExpiryBound(t.TTL())
	if err := lk.Refresh(t.Context(), longer); err != nil {
		t.Fatalf("Refresh(%v): %v", longer, err)
	}
	if d, err := lk.TTL(t.Context()); err != nil || d <= t.TTL() {
		t.Errorf("TTL() right after Refresh(%v) = %v, %v; want more than the original %v", longer, d, err, t.TTL())
	}
	wait := t.ExpiryBound(t.TTL())
	if t.ClosedWithin(lk.Lost(), wait) {
		t.Fatalf("Lost() closed within %v although the lock was refreshed to %v", wait, longer)
	}
	t.WantNotAcquired(b, key, fmt.Sprintf("%v after a Refresh to %v", wait, longer))
	t.Release(lk)
}

func caseTTLReports(t *T) {
	l := t.Locker()
	ttl := t.LongTTL()
	lk := t.Acquire(l, t.Key("k"), locker.WithTTL(ttl), locker.WithAutoRefresh(false))
	d1, err := lk.TTL(t.Context())
	if err != nil || d1 <= 0 || d1 > ttl {
		t.Fatalf("TTL() = %v, %v; want a duration in (0, %v]", d1, err, ttl)
	}
	if t.ClosedWithin(t.Context().Done(), 20*time.Millisecond) {
		t.Fatalf("context ended")
	}
	d2, err := lk.TTL(t.Context())
	if err != nil || d2 <= 0 || d2 > d1 {
		t.Errorf("TTL() later = %v, %v; want a duration in (0, %v] (the earlier reading)", d2, err, d1)
	}
	t.Release(lk)
}

func caseCancelledAcquire(t *T) {
	a, b, c := t.Locker(), t.Locker(), t.Locker()

	// Already cancelled: fails at once, even on a free key.
	dead, cancel := context.WithCancel(t.Context())
	cancel()
	if lk, err := b.Acquire(dead, t.Key("free")); err == nil {
		lk.Release(t.Context())
		t.Errorf("Acquire with a cancelled context succeeded")
	} else {
		t.WantErr(err, context.Canceled, "Acquire with a cancelled context")
	}
	t.Release(t.TryAcquire(c, t.Key("free")))

	// Cancelled while waiting. A run in which the holder's own validity
	// ran out before the waiter got the key (the process stalled for a
	// whole TTL on a loaded machine) says nothing about cancellation and
	// is run again on a fresh key; a waiter given the key while the
	// holder's validity still ran is two holders, and fails.
	const runs = 3
	for i := range runs {
		if cancelWhileWaiting(t, a, b, c, t.Key(fmt.Sprintf("k%d", i))) {
			return
		}
	}
	t.Errorf("in %d runs out of %d the holder's validity ran out before the cancellation could be checked (the process stalled for a whole TTL each time)", runs, runs)
}

// cancelWhileWaiting has b wait for key, held by a, cancels the wait and
// checks that nothing the waiter left blocks c. It reports false when the
// run could not check it: the holder's validity had run out on its own.
func cancelWhileWaiting(t *T, a, b, c locker.Locker, key string) bool {
	// A TTL far beyond what the case waits for: only a stall of the whole
	// process lets it run out.
	ttl := max(t.LongTTL(), time.Minute)
	if m := t.Capabilities().MaxTTL; m > 0 && ttl > m {
		ttl = max(t.LongTTL(), m)
	}
	lk := t.Acquire(a, key, locker.WithTTL(ttl))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	type outcome struct {
		lk  locker.Lock
		err error
		at  time.Time
	}
	out := make(chan outcome, 1)
	go func() {
		lk, err := b.Acquire(ctx, key)
		out <- outcome{lk, err, time.Now()}
	}()
	if t.ClosedWithin(t.Context().Done(), 50*time.Millisecond) {
		t.Fatalf("context ended")
	}
	cancel()
	var o outcome
	select {
	case o = <-out:
	case <-time.After(t.LongTTL() / 2):
		t.Fatalf("Acquire did not return within %v of its context being cancelled", t.LongTTL()/2)
	}
	if o.err == nil {
		defer o.lk.Release(t.Context())
		if lk.Until().Before(o.at) {
			lk.Release(t.Context())
			return false
		}
		t.Errorf("Acquire cancelled while waiting got the key while its holder's lock was still valid: two holders")
		lk.Release(t.Context())
		return true
	}
	t.WantErr(o.err, context.Canceled, "Acquire cancelled while waiting")
	// What the cancelled waiter left must not block the next acquirer.
	t.Release(lk)
	lkC := t.AcquireWithin(c, key, t.LongTTL()/2, "after the holder released, with a cancelled waiter before us")
	t.Release(lkC)
	return true
}

func caseIndependentKeys(t *T) {
	a, b := t.Locker(), t.Locker()
	base := t.Key("k")
	keys := []string{base, base + "/child", base + "/child/grandchild", base + "-sibling", base + "/"}
	var held []locker.Lock
	for i, k := range keys {
		l := a
		if i%2 == 1 {
			l = b
		}
		held = append(held, t.TryAcquire(l, k, locker.WithTTL(t.LongTTL())))
	}
	for _, lk := range held {
		t.Release(lk)
	}
}

// oddKeys returns keys that a naive encoding would reject or confuse.
func oddKeys(base string, maxLen int) []string {
	keys := []string{
		base + "/unicode/ключ/鍵/🔒",
		base + "/with space",
		base + "/dot/../dot",
		base + "/dot/..",
		base + "/dot/.",
		base + "/star/*",
		base + "/star/?[a]",
		base + "//double//slash",
		base + "/trailing/",
		base + "/percent%2Fslash",
		base + "/colon:brace{x}",
		base + "/back\\slash",
		base + "/quote'\"",
		base + "/newline\nkey",
		base + "/under_score",
		base + "/under/score",
		"/" + base + "/leading-slash",
	}
	if n := maxLen - len(base) - len("/max/"); n > 0 {
		keys = append(keys, base+"/max/"+strings.Repeat("m", n))
	}
	return keys
}

// longestKey returns the length of the longest key l accepts: the
// backend's Capabilities().MaxKeyLen less what the Locker adds to every
// key (the prefix parameter of a URL, Config.Prefix). The Locker's own
// check says, asked with a context already cancelled so that nothing is
// taken: a key too long fails with ErrInvalidKey, one that is not with
// the context's error.
func longestKey(t *T, l locker.Locker) int {
	dead, cancel := context.WithCancel(t.Context())
	cancel()
	base := t.Key("longest/")
	accepts := func(n int) bool {
		lk, err := l.TryAcquire(dead, base+strings.Repeat("m", n-len(base)))
		if err == nil {
			// Taken on a cancelled context: cancelled-acquire reports it.
			lk.Release(t.Context())
		}
		return !errors.Is(err, locker.ErrInvalidKey)
	}
	lo, hi := len(base), t.Capabilities().MaxKeyLen
	if hi <= lo || accepts(hi) {
		return hi
	}
	// accepts(lo) is taken for granted: a key that short must work.
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if accepts(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

func caseOddKeys(t *T) {
	a, b := t.Locker(), t.Locker()
	keys := oddKeys(t.Key("k"), longestKey(t, a))
	// Hold them all at once: no two may collide.
	var held []locker.Lock
	for _, k := range keys {
		lk, err := a.TryAcquire(t.Context(), k, locker.WithTTL(t.LongTTL()))
		if err != nil {
			t.Errorf("TryAcquire(%s) while holding %d other odd keys: %v", keyText(k), len(held), err)
			continue
		}
		if lk.Key() != k {
			t.Errorf("Key() = %s, want %s", keyText(lk.Key()), keyText(k))
		}
		held = append(held, lk)
	}
	for _, lk := range held {
		t.WantNotAcquired(b, lk.Key(), "odd key held by A")
	}
	for _, lk := range held {
		t.Release(lk)
	}
	for _, k := range keys {
		t.Release(t.TryAcquire(b, k))
	}
}

func caseClosedLocker(t *T) {
	a, b := t.Locker(), t.Locker()
	key := t.Key("k")
	lk := t.Acquire(a, key, locker.WithTTL(t.LongTTL()))
	if err := a.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if !isClosed(lk.Lost()) {
		t.Errorf("Lost() of a lock held by a closed Locker is still open")
	}
	_, err := a.Acquire(t.Context(), t.Key("other"))
	t.WantErr(err, locker.ErrClosed, "Acquire after Close")
	_, err = a.TryAcquire(t.Context(), t.Key("other"))
	t.WantErr(err, locker.ErrClosed, "TryAcquire after Close")
	if err := a.Close(); err != nil {
		t.Errorf("second Close = %v, want nil", err)
	}
	// Close released the key: it is free now, not after LongTTL.
	t.Release(t.TryAcquire(b, key))
}

// closeBound is how soon a pending Acquire must return after Close: a
// round trip to clean up, with room for a loaded machine, and far below
// the TTLs and poll intervals a waiter that missed the Close would sleep.
const closeBound = 3 * time.Second

func caseCloseEndsAcquire(t *T) {
	a, b, c := t.Locker(), t.Locker(), t.Locker()
	key := t.Key("k")
	lk := t.Acquire(a, key, locker.WithTTL(t.LongTTL()))
	errc := make(chan error, 1)
	go func() {
		lk, err := b.Acquire(t.Context(), key, locker.WithTTL(t.LongTTL()))
		if err == nil {
			lk.Release(t.Context())
		}
		errc <- err
	}()
	// Let it start waiting; a Close that comes first must end it the same way.
	if t.ClosedWithin(t.Context().Done(), 50*time.Millisecond) {
		t.Fatalf("context ended")
	}
	closed := make(chan error, 1)
	go func() { closed <- b.Close() }()
	select {
	case err := <-errc:
		t.WantErr(err, locker.ErrClosed, "Acquire pending when its Locker closed")
	case <-time.After(closeBound):
		t.Fatalf("Acquire did not return within %v of its Locker's Close", closeBound)
	}
	if err := <-closed; err != nil {
		t.Errorf("Close with an Acquire pending = %v, want nil", err)
	}
	t.Release(lk)
	lkC := t.AcquireWithin(c, key, t.LongTTL()/2, "after the holder released, with a closed waiter before us")
	t.Release(lkC)
}

func caseInvalidInput(t *T) {
	l := t.Locker()
	caps := t.Capabilities()
	tooLong := strings.Repeat("k", caps.MaxKeyLen+1)
	for _, k := range []string{"", tooLong} {
		_, err := l.TryAcquire(t.Context(), k)
		t.WantErr(err, locker.ErrInvalidKey, fmt.Sprintf("TryAcquire with a %d-byte key", len(k)))
		_, err = l.Acquire(t.Context(), k)
		t.WantErr(err, locker.ErrInvalidKey, fmt.Sprintf("Acquire with a %d-byte key", len(k)))
		if err != nil && !strings.Contains(strings.ToLower(err.Error()), "key") {
			t.Errorf("error for an invalid key does not say what is wrong: %v", err)
		}
	}
	ttls := []time.Duration{0, -time.Second}
	if caps.MinTTL > time.Nanosecond {
		ttls = append(ttls, caps.MinTTL-time.Nanosecond)
	}
	if caps.MaxTTL > 0 {
		ttls = append(ttls, caps.MaxTTL+time.Millisecond)
	}
	for _, ttl := range ttls {
		_, err := l.TryAcquire(t.Context(), t.Key("k"), locker.WithTTL(ttl))
		t.WantErr(err, locker.ErrInvalidTTL, fmt.Sprintf("TryAcquire with TTL %v", ttl))
		if err != nil && !strings.Contains(strings.ToLower(err.Error()), "ttl") {
			t.Errorf("error for an invalid TTL does not say what is wrong: %v", err)
		}
	}
	lk := t.TryAcquire(l, t.Key("k"), locker.WithTTL(t.LongTTL()))
	for _, ttl := range ttls {
		t.WantErr(lk.Refresh(t.Context(), ttl), locker.ErrInvalidTTL, fmt.Sprintf("Refresh with TTL %v", ttl))
	}
	// None of the rejected calls may have left anything behind.
	t.Release(lk)
	t.Release(t.TryAcquire(t.Locker(), t.Key("k")))
}

func caseFencing(t *T) {
	a, b := t.Locker(), t.Locker()
	key := t.Key("k")
	fenced := t.Capabilities().Fencing
	var last uint64
	for i := range 6 {
		l := a
		if i%2 == 1 {
			l = b
		}
		lk := t.Acquire(l, key)
		f, ok := lk.Fence()
		t.Release(lk)
		if !fenced {
			if ok {
				t.Fatalf("Fence() = %d, true on a backend whose Capabilities().Fencing is false", f)
			}
			continue
		}
		if !ok {
			t.Fatalf("Fence() reports ok=false on a backend whose Capabilities().Fencing is true")
		}
		if i > 0 && f <= last {
			t.Fatalf("holder %d got fence %d after holder %d got %d: fences must strictly increase", i+1, f, i, last)
		}
		last = f
	}
	if !fenced {
		t.Skipf("the backend mints no fencing tokens (Capabilities().Fencing is false); Fence() correctly reports ok=false")
	}
}

// caseStaleFence asks a holder for its fence only once its lock is
// another's: where fences are minted on demand (backend.FenceMinter),
// the mint must check that the lock is still the holder's. Each half
// takes fresh clients, which have asked for no fence yet: a Locker that
// has may mint every fence with its grant from then on.
func caseStaleFence(t *T) {
	if !t.Capabilities().Fencing {
		t.Skipf("the backend mints no fencing tokens (Capabilities().Fencing is false); fencing checks that Fence() reports ok=false")
	}
	// Expired: the Locker knows it, and must not ask the servers.
	a, b := t.Locker(), t.Locker()
	key := t.Key("expired")
	stale := t.Acquire(a, key, locker.WithTTL(t.TTL()), locker.WithAutoRefresh(false))
	if !t.ClosedWithin(stale.Lost(), t.ExpiryBound(t.TTL())) {
		t.Fatalf("Lost() still open %v after Acquire with a %v TTL and no refresh", t.ExpiryBound(t.TTL()), t.TTL())
	}
	next := t.AcquireWithin(b, key, t.ExpiryBound(t.TTL()), "A's lock expired")
	t.wantStaleFence(stale, next, "expired")
	t.Release(next)

	// Released by force: the holder may not know, and the servers must
	// refuse it a fence.
	a, b = t.Locker(), t.Locker()
	key = t.Key("forced")
	stale = t.TryAcquire(a, key, locker.WithTTL(t.LongTTL()), locker.WithAutoRefresh(false))
	released, err := locker.ForceRelease(t.ctx, b, key)
	switch {
	case errors.Is(err, locker.ErrUnsupported):
		t.Skipf("the backend cannot release a key by force (locker.ForceRelease: %v); a fence asked for after expiry was checked", err)
	case !released:
		// An error beside released (a node that cannot be reached)
		// leaves the lock released where it counts.
		t.Fatalf("ForceRelease(%s) of A's lock = false, %v; want true", keyText(key), err)
	}
	next = t.AcquireWithin(b, key, t.LongTTL()/2, "A's lock was released by force")
	t.wantStaleFence(stale, next, "released by force")
	stale.Release(t.ctx) // ErrNotHeld; stale-owner checks that it leaves next's lock
	t.Release(next)
}

// wantStaleFence checks the fence of stale, whose lock was taken over
// (how says how) by next, asked for after next's: none, or one below it.
func (t *T) wantStaleFence(stale, next locker.Lock, how string) {
	fNext, ok := next.Fence()
	if !ok {
		t.Fatalf("the successor's Fence() reports ok=false on a backend whose Capabilities().Fencing is true")
	}
	if f, ok := stale.Fence(); ok && f >= fNext {
		t.Errorf("Fence() of a holder whose lock was %s, asked for after its successor's fence %d = %d, true; want ok=false, or a fence below the successor's: a writer with it would pass a fenced resource's check over the successor's writes", how, fNext, f)
	}
}

func caseLostOnExpiry(t *T) {
	a, b := t.Locker(), t.Locker()
	key := t.Key("k")
	ttl := t.TTL()
	start := time.Now()
	lk := t.Acquire(a, key, locker.WithTTL(ttl), locker.WithAutoRefresh(false))
	if isClosed(lk.Lost()) {
		t.Fatalf("Lost() closed right after Acquire of a %v lock", ttl)
	}
	if !t.ClosedWithin(lk.Lost(), t.ExpiryBound(ttl)) {
		t.Fatalf("Lost() still open %v after Acquire with a %v TTL and no refresh", time.Since(start), ttl)
	}
	if el := time.Since(start); el < ttl/2 {
		t.Errorf("Lost() closed after %v, well before the %v TTL ran out", el, ttl)
	}
	t.Release(t.AcquireWithin(b, key, t.ExpiryBound(ttl), "expired lock"))
}

func caseDoCancelsOnLoss(t *T) {
	l := t.Locker()
	key := t.Key("k")
	ran := false
	sentinel := errors.New("fn's own error")
	err := locker.Do(t.Context(), l, key, func(ctx context.Context, lk locker.Lock) error {
		ran = true
		if lk.Key() != key {
			t.Errorf("Do passed a lock on %s, want %s", keyText(lk.Key()), keyText(key))
		}
		return sentinel
	})
	if !ran || !errors.Is(err, sentinel) {
		t.Errorf("Do = %v (fn ran: %v), want fn's error", err, ran)
	}
	// Do released: the key is free.
	t.Release(t.TryAcquire(t.Locker(), key))

	ttl := t.TTL()
	var cause error
	err = locker.Do(t.Context(), l, key, func(ctx context.Context, lk locker.Lock) error {
		select {
		case <-ctx.Done():
			cause = context.Cause(ctx)
		case <-time.After(t.ExpiryBound(ttl)):
			t.Errorf("fn's context not cancelled %v after Acquire of a %v lock without refresh", t.ExpiryBound(ttl), ttl)
		}
		return nil
	}, locker.WithTTL(ttl), locker.WithAutoRefresh(false))
	t.WantErr(cause, locker.ErrNotHeld, "the cause of fn's cancelled context")
	t.WantErr(err, locker.ErrNotHeld, "Do's error after the lock was lost")
}

// fencedResource is a resource protected by a lock: it counts holders
// inside the critical section at once, and, like a storage service that
// checks fencing tokens, rejects a write whose fence is not larger than
// the largest it has accepted.
type fencedResource struct {
	inside   atomic.Int32
	overlaps atomic.Int32
	mu       sync.Mutex
	maxFence uint64
	rejected int
	writes   int
}

func (r *fencedResource) write(fence uint64, fenced bool) {
	if r.inside.Add(1) > 1 {
		r.overlaps.Add(1)
	}
	r.mu.Lock()
	r.writes++
	if fenced {
		if fence <= r.maxFence {
			r.rejected++
		} else {
			r.maxFence = fence
		}
	}
	r.mu.Unlock()
	// The work done under the lock: long enough that another holder, if
	// the lock let one in, would be inside at the same time.
	time.Sleep(criticalSection)
	r.inside.Add(-1)
}

// criticalSection is how long each stress round holds the resource.
const criticalSection = 200 * time.Microsecond

func caseStress(t *T) {
	const clients, rounds = 4, 25
	key := t.Key("k")
	var res fencedResource
	var wg sync.WaitGroup
	start := make(chan struct{}) // all clients contend from the first round
	for range clients {
		l := t.Locker()
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for range rounds {
				lk, err := l.Acquire(t.Context(), key, locker.WithTTL(t.LongTTL()))
				if err != nil {
					t.Errorf("Acquire under contention: %v", err)
					return
				}
				f, ok := lk.Fence()
				res.write(f, ok)
				if err := lk.Release(t.Context()); err != nil {
					t.Errorf("Release under contention: %v", err)
					return
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	if n := res.overlaps.Load(); n > 0 {
		t.Errorf("%d of %d critical sections overlapped with another holder's", n, res.writes)
	}
	if res.rejected > 0 {
		t.Errorf("the fencing-checked resource rejected %d of %d writes: a fence was not larger than an earlier holder's", res.rejected, res.writes)
	}
	if res.writes != clients*rounds {
		t.Errorf("%d critical sections ran, want %d", res.writes, clients*rounds)
	}
}
