package locker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/distlock/locker/backend"
)

type lockState int

const (
	// stateHeld: ours as far as we know; Lost is open.
	stateHeld lockState = iota
	// stateLost: Lost is closed, but the lock may still exist on the
	// server (validity ran out, or a release failed in transit); Release
	// still asks the server to delete it.
	stateLost
	// stateGone: released by us, or the server said it is not ours.
	stateGone
)

type lock struct {
	c           *client
	key         string
	token       string
	autoRefresh bool
	maxHold     time.Duration // WithMaxHold; 0: none
	lost        chan struct{}

	// Set once by start, before the lock is shared.
	held   backend.Held
	fence  uint64
	fenced bool

	// A fence minted on demand (backend.FenceMinter), the first time it
	// is asked for: minted says it was, under mintMu, which also keeps two
	// callers from minting twice.
	mintMu sync.Mutex
	minted bool
	mint   uint64

	mu       sync.Mutex
	state    lockState
	cause    error
	ttl      time.Duration
	deadline time.Time // local validity deadline, monotonic clock
	lostAt   time.Time // when Lost closed
	// holdEnd is when WithMaxHold ends the automatic refreshes (zero:
	// never); maxHeld says they have ended.
	holdEnd time.Time
	maxHeld bool

	// One refresh at a time per lock, the watchdog's and the user's alike
	// (see refresh). refreshing says a refresh holds the slot; a caller
	// waiting for it makes slotFree, closed when the slot is given back.
	refreshing bool
	// refreshFailed says the last refresh failed: a loss to the validity
	// running out then counts as refresh_failed (telemetry).
	refreshFailed bool
	slotFree      chan struct{}
	// unsureTTL is the smallest TTL of a refresh whose outcome is unknown
	// (a transport error or a cancelled call): it may still reach the
	// server after any later refresh and cut the lock's life to that TTL
	// from its arrival. 0: there was none.
	unsureTTL time.Duration
	// since is when the lock was taken, as telemetry's monotonic clock
	// reading (see monotonic); 0 without telemetry.
	since time.Duration

	// Places in the watchdog's timetable, owned by it (under its mutex).
	slots [2]slot
}

// start records a new acquisition whose TTL began at start (unless the
// backend says when) and puts it in the watchdog's timetable.
func (lk *lock) start(acq backend.Acquisition, start time.Time) {
	if !acq.Start.IsZero() {
		start = acq.Start
	}
	lk.held = acq.Held
	lk.fence, lk.fenced = acq.Fence, acq.Fenced
	lk.mu.Lock()
	defer lk.mu.Unlock()
	if acq.TTL > 0 {
		lk.ttl = acq.TTL
	}
	validity := acq.Validity
	if validity <= 0 {
		validity = lk.ttl - lk.c.drift(lk.ttl)
	}
	lk.deadline = lk.capLocked(start.Add(validity))
	if lk.maxHold > 0 {
		lk.holdEnd = start.Add(lk.maxHold)
	}
	if lk.state == stateHeld { // the backend may have reported it lost already
		var due time.Time
		if lk.autoRefresh {
			due = lk.dueLocked(start.Add(lk.ttl / 3))
		}
		lk.c.wd.add(lk, lk.deadline, due)
		if t := lk.c.tel; t != nil {
			t.started(lk, start)
		}
	}
}

// dueLocked returns due, or the zero time if WithMaxHold ends the
// automatic refreshes before then; lk.mu is held.
func (lk *lock) dueLocked(due time.Time) time.Time {
	if !lk.holdEnd.IsZero() && due.After(lk.holdEnd) {
		lk.maxHeld = true
		return time.Time{}
	}
	return due
}

// scheduleLocked queues the next automatic refresh at due, unless
// WithMaxHold has ended them; lk.mu is held.
func (lk *lock) scheduleLocked(due time.Time) {
	if due = lk.dueLocked(due); !due.IsZero() {
		lk.c.wd.schedule(lk, due)
	}
}

// expire runs at the local validity deadline. A lock still held is lost
// from then on; one whose release failed in transit stays where it is. In
// both cases a driver whose server keeps the lock past its TTL (an
// Expirer) must remove it now: expire returns it, for the watchdog's
// expirers to call, or nil.
func (lk *lock) expire() backend.Expirer {
	lk.mu.Lock()
	if lk.state == stateGone {
		lk.mu.Unlock()
		return nil
	}
	if time.Until(lk.deadline) > 0 {
		// Refreshed meanwhile: refreshed queued the new deadline, in the
		// same section as it set it.
		lk.mu.Unlock()
		return nil
	}
	// A refresh due later finds the lock no longer held and is dropped.
	cause, why := ErrExpired, endExpired
	if lk.maxHeld {
		cause, why = ErrMaxHold, endMaxHold
	}
	lk.setStateLocked(stateLost, cause, why)
	lk.mu.Unlock()
	e, _ := lk.held.(backend.Expirer)
	return e
}

// backendLost is the Request.OnLost callback: the backend knows the lock
// is gone.
func (lk *lock) backendLost(err error) {
	if err == nil {
		err = errors.New("backend reported the lock gone")
	}
	lk.markGone(endSessionLost, err)
}

// markGone records that the lock is no longer on the server; why is the
// cause telemetry reports if it was still held.
func (lk *lock) markGone(why endCause, cause error) {
	lk.mu.Lock()
	lk.setStateLocked(stateGone, cause, why) // out of the watchdog's timetable too
	lk.mu.Unlock()
	lk.c.untrack(lk)
}

// setStateLocked moves the lock to a later state, closing Lost on the way
// out of stateHeld (why is the cause telemetry reports then). States only
// move forward.
func (lk *lock) setStateLocked(s lockState, cause error, why endCause) {
	if s <= lk.state {
		return
	}
	if lk.state == stateHeld {
		lk.lostAt = time.Now()
		if t := lk.c.tel; t != nil {
			t.ended(lk, why) // before Lost closes, for whoever waits on it
		}
		close(lk.lost)
	}
	// The deadline stays in the watchdog's timetable while the lock may
	// still be on the server: expire removes it there should a release
	// fail.
	if s == stateGone {
		lk.c.wd.forget(lk)
	}
	if lk.cause == nil || lk.state == stateHeld {
		lk.cause = cause
	}
	lk.state = s
}

// endedLocally reports whether the lock stopped being held for a reason
// of this process's own: released, or its validity or maximum hold ran out
// on the local clock.
func (lk *lock) endedLocally() bool {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	return errors.Is(lk.cause, ErrReleased) || errors.Is(lk.cause, ErrExpired) || errors.Is(lk.cause, ErrMaxHold)
}

// notHeldLocked returns ErrNotHeld with the reason the lock stopped being
// held; lk.mu is held.
func (lk *lock) notHeldLocked() error {
	if lk.cause == nil || errors.Is(lk.cause, ErrNotHeld) {
		if lk.cause != nil {
			return lk.cause
		}
		return ErrNotHeld
	}
	return fmt.Errorf("%w: %w", ErrNotHeld, lk.cause)
}

func (lk *lock) Err() error {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	if lk.state == stateHeld {
		return nil
	}
	return lk.notHeldLocked()
}

func (lk *lock) Key() string           { return lk.key }
func (lk *lock) Token() string         { return lk.token }
func (lk *lock) Lost() <-chan struct{} { return lk.lost }

func (lk *lock) Until() time.Time {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	if lk.state != stateHeld && lk.lostAt.Before(lk.deadline) {
		return lk.lostAt
	}
	return lk.deadline
}

func (lk *lock) Fence() (uint64, bool) {
	if lk.fenced {
		return lk.fence, true
	}
	m, ok := lk.held.(backend.FenceMinter)
	if !ok {
		return 0, false
	}
	lk.mintMu.Lock()
	defer lk.mintMu.Unlock()
	if lk.minted {
		return lk.mint, true
	}
	// Minted while the lock is held, within its validity: a fence for a
	// lock that is lost, or may be, would protect nothing.
	lk.mu.Lock()
	held, until := lk.state == stateHeld, lk.deadline
	lk.mu.Unlock()
	if !held {
		return 0, false
	}
	ctx, cancel := context.WithDeadline(context.Background(), until)
	defer cancel()
	f, err := m.MintFence(ctx)
	if errors.Is(err, ErrNotHeld) {
		lk.markGone(endTakenOver, fmt.Errorf("minting its fence found it gone: %w", err))
	}
	if err != nil {
		return 0, false
	}
	lk.mu.Lock()
	held = lk.state == stateHeld
	lk.mu.Unlock()
	if !held {
		// Lost here while the mint was on its way (a reply later than the
		// validity): the lock is no longer to be written under.
		return 0, false
	}
	lk.minted, lk.mint = true, f
	return f, true
}

func (lk *lock) Refresh(ctx context.Context, ttl time.Duration) error {
	if t := lk.c.tel; t.tracing() && ctx != nil {
		return t.traceRefresh(ctx, lk, ttl)
	}
	return lk.refresh(ctx, ttl)
}

func (lk *lock) refresh(ctx context.Context, ttl time.Duration) error {
	if ctx == nil {
		return opErr("refresh", lk.key, errNilContext)
	}
	if lk.c.isClosed() {
		return opErr("refresh", lk.key, ErrClosed)
	}
	if err := lk.c.checkTTL(ttl); err != nil {
		return opErr("refresh", lk.key, err)
	}
	start, err := lk.takeSlot(ctx, ttl)
	if err != nil {
		return opErr("refresh", lk.key, err)
	}
	err = lk.refreshed(start, ttl, lk.held.Refresh(ctx, ttl))
	if t := lk.c.tel; t != nil {
		t.refreshed(ctx, lk, start, err)
	}
	return opErr("refresh", lk.key, err)
}

// takeSlot waits until no other refresh of lk is in flight and takes the
// slot; refreshed gives it back. Refreshes of one lock are serialised, the
// watchdog's and the user's alike, so that the one applied last on the
// server is the one that returned last here: two in flight at once could
// be applied in either order (two pooled connections, a slow link), and
// the server would keep the TTL of whichever came last while this process
// believed the other. The refresh's start is taken once the slot is held,
// and the refresh is in flight from then on (see sendingLocked).
func (lk *lock) takeSlot(ctx context.Context, ttl time.Duration) (time.Time, error) {
	lk.mu.Lock()
	for lk.refreshing && lk.state == stateHeld {
		if lk.slotFree == nil {
			lk.slotFree = make(chan struct{})
		}
		free := lk.slotFree
		lk.mu.Unlock()
		if slotWaitHook != nil {
			slotWaitHook()
		}
		select {
		case <-free:
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		}
		lk.mu.Lock()
	}
	defer lk.mu.Unlock()
	if lk.state != stateHeld {
		return time.Time{}, lk.notHeldLocked()
	}
	lk.refreshing = true
	start := time.Now()
	lk.sendingLocked(start, ttl)
	return start, nil
}

// sendingLocked caps lk's deadline for a refresh with ttl about to be sent
// at start; lk.mu and the refresh slot are held. The server may apply the
// refresh at any moment before its reply arrives, or without a reply ever
// arriving, and it replaces the key's remaining TTL rather than adding to
// it: from the moment it is sent, the server is only sure to keep the lock
// until start + ttl, however much longer the last refresh had promised. A
// refresh that shortens the lock (a smaller TTL than the time left) thus
// shortens its validity here before it is sent, not once it returns,
// which may be after the server has already let the key go.
func (lk *lock) sendingLocked(start time.Time, ttl time.Duration) {
	if d := start.Add(ttl - lk.c.drift(ttl)); d.Before(lk.deadline) {
		lk.deadline = d
		lk.c.wd.expireAt(lk, d)
	}
}

// slotWaitHook, set by tests, is called when a refresh starts waiting for
// the slot.
var slotWaitHook func()

// tryTakeSlotLocked takes the refresh slot if it is free and the lock
// still held; lk.mu is held.
func (lk *lock) tryTakeSlotLocked() bool {
	if lk.refreshing || lk.state != stateHeld {
		return false
	}
	lk.refreshing = true
	return true
}

func (lk *lock) freeSlotLocked() {
	lk.refreshing = false
	if lk.slotFree != nil {
		close(lk.slotFree)
		lk.slotFree = nil
	}
}

// capLocked bounds a validity deadline by what the driver knows of the
// lease or session that keeps the lock (backend.Bounded); lk.mu is held.
func (lk *lock) capLocked(deadline time.Time) time.Time {
	if b, ok := lk.held.(backend.Bounded); ok {
		if until := b.ValidUntil(); !until.IsZero() && until.Before(deadline) {
			return until
		}
	}
	return deadline
}

// refreshed applies the outcome of a refresh that started at start, with
// the refresh slot held, gives the slot back and, for an auto-refreshed
// lock, schedules the next refresh. It is shared by Refresh and the
// watchdog, and returns the error to report.
//
// The local deadline never exceeds what the server is sure to keep: after
// a success, start + ttl - drift; but a refresh whose outcome is unknown
// may still be applied later, after any refresh that follows it, so no
// deadline from then on assumes a longer TTL than its (unsureTTL).
func (lk *lock) refreshed(start time.Time, ttl time.Duration, err error) error {
	if errors.Is(err, ErrNotHeld) {
		lk.mu.Lock()
		lk.freeSlotLocked()
		lk.mu.Unlock()
		lk.markGone(endTakenOver, fmt.Errorf("a refresh found it gone: %w", err))
		return err
	}
	lk.mu.Lock()
	defer lk.mu.Unlock()
	defer lk.freeSlotLocked()
	if err != nil {
		// sendingLocked has already capped the deadline at this refresh's
		// start + ttl.
		if lk.unsureTTL == 0 || ttl < lk.unsureTTL {
			lk.unsureTTL = ttl
		}
		lk.refreshFailed = true
		if lk.state == stateHeld && lk.autoRefresh {
			left := time.Until(lk.deadline)
			lk.scheduleLocked(time.Now().Add(max(min(lk.ttl/10, left/3), minPoll)))
		}
		return err
	}
	if lk.state != stateHeld {
		// The refresh landed, but the validity had already run out here
		// and Lost is closed: the holder was told to stop, so the lock
		// is not revived. Release still deletes it.
		return lk.notHeldLocked()
	}
	lk.ttl = ttl
	lk.refreshFailed = false
	eff := ttl
	if lk.unsureTTL > 0 && lk.unsureTTL < eff {
		eff = lk.unsureTTL
	}
	lk.deadline = lk.capLocked(start.Add(eff - lk.c.drift(eff)))
	lk.c.wd.expireAt(lk, lk.deadline)
	if !lk.deadline.After(time.Now()) {
		// The lease or session behind the lock lapsed: expire, due now,
		// closes Lost.
		return fmt.Errorf("%w: %w", ErrNotHeld, ErrExpired)
	}
	if lk.autoRefresh {
		lk.scheduleLocked(start.Add(eff / 3))
	}
	return nil
}

func (lk *lock) TTL(ctx context.Context) (time.Duration, error) {
	if ctx == nil {
		return 0, opErr("ttl", lk.key, errNilContext)
	}
	if lk.c.isClosed() {
		return 0, opErr("ttl", lk.key, ErrClosed)
	}
	lk.mu.Lock()
	if lk.state != stateHeld {
		err := lk.notHeldLocked()
		lk.mu.Unlock()
		return 0, opErr("ttl", lk.key, err)
	}
	lk.mu.Unlock()
	d, err := lk.held.TTL(ctx)
	if errors.Is(err, ErrNotHeld) {
		lk.markGone(endTakenOver, err)
	}
	if err != nil {
		return 0, opErr("ttl", lk.key, err)
	}
	lk.mu.Lock()
	local := time.Until(lk.deadline)
	lk.mu.Unlock()
	if local <= 0 {
		return 0, opErr("ttl", lk.key, fmt.Errorf("%w: %w", ErrNotHeld, ErrExpired))
	}
	return min(d, local), nil
}

func (lk *lock) Release(ctx context.Context) error {
	if t := lk.c.tel; t.tracing() && ctx != nil {
		return t.traceRelease(ctx, lk)
	}
	return lk.releaseOp(ctx)
}

func (lk *lock) releaseOp(ctx context.Context) error {
	if ctx == nil {
		return opErr("release", lk.key, errNilContext)
	}
	if lk.c.isClosed() {
		// Close is releasing every lock the Locker held, this one
		// included: the holder lets go now (Lost closes, so that Do
		// returns with its lock let go), and Close deletes it from the
		// server.
		lk.mu.Lock()
		gone := lk.state == stateGone
		lk.setStateLocked(stateLost, ErrClosed, endReleased)
		lk.mu.Unlock()
		if !gone {
			return opErr("release", lk.key, ErrClosed)
		}
	}
	return opErr("release", lk.key, lk.release(ctx))
}

// release lets the lock go. The request goes out under releaseContext:
// a caller whose context has ended (a handler's request context, deferred
// Release) still frees the key at once instead of leaving it held on the
// server for the rest of its TTL.
//
// One rule on every backend: Release of a lock whose Lost closed for
// another reason than a Release (its validity ran out, WithMaxHold, a
// refresh or the backend found it gone) returns ErrNotHeld with that
// reason, and still deletes the lock if the server holds it, so that the
// key is free at once; the backend's own answer (the key was still there,
// within the drift allowance, or not) does not change what the caller is
// told.
func (lk *lock) release(ctx context.Context) error {
	ctx, cancel := releaseContext(ctx)
	defer cancel()
	lk.mu.Lock()
	if lk.state == stateGone {
		err := lk.notHeldLocked()
		lk.mu.Unlock()
		return err
	}
	// ours: the holder lets go of a lock it held, now or by an earlier
	// Release that did not reach the server.
	ours := lk.state == stateHeld || errors.Is(lk.cause, ErrReleased)
	// Lost closes as soon as the holder lets go, before the round trip.
	// The watchdog no longer refreshes it; it leaves the timetable once
	// gone.
	lk.setStateLocked(stateLost, ErrReleased, endReleased)
	lk.mu.Unlock()

	err := lk.held.Release(ctx)
	switch {
	case err == nil && ours:
		lk.gone(ErrReleased)
		return nil
	case err == nil || errors.Is(err, ErrNotHeld):
		if !ours {
			lk.gone(nil)
			lk.mu.Lock()
			defer lk.mu.Unlock()
			return lk.notHeldLocked()
		}
		// Not there any more (an earlier Release whose reply was lost
		// took it, or it expired): released, whatever an earlier failure
		// said.
		lk.gone(ErrReleased)
		return err
	case ours:
		// The release may not have reached the server: the lock may be
		// held there until its TTL runs out. Err says so, and a later
		// Release tries again (the state stays lost, not gone), unless
		// a Release running alongside freed it meanwhile.
		lk.mu.Lock()
		if lk.state != stateGone {
			lk.cause = fmt.Errorf("%w, but the release may not have reached the server (%v): the server may hold the lock until its TTL runs out; Release again to retry", ErrReleased, err)
		}
		lk.mu.Unlock()
	}
	return err
}

// releaseContext returns the context a release is sent under: ctx's
// values, not its cancellation, bounded by releaseTimeout and by ctx's
// deadline if that has not passed yet (a bound the caller chose and can
// still keep). A ctx already done when Release is called (cancelled, or
// past its deadline) bounds nothing: the caller has ended, the lock has
// not.
func releaseContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx.Done() == nil {
		// Never cancelled, no deadline (context.Background and the like):
		// nothing to detach from.
		return context.WithTimeout(ctx, releaseTimeout)
	}
	d := releaseTimeout
	if dl, ok := ctx.Deadline(); ok && ctx.Err() == nil {
		d = min(d, time.Until(dl))
	}
	return context.WithTimeout(context.WithoutCancel(ctx), d)
}

// gone records that the server no longer holds the lock for us, after a
// release; cause, if not nil, replaces the reason recorded so far (a
// release that failed before).
func (lk *lock) gone(cause error) {
	lk.mu.Lock()
	lk.setStateLocked(stateGone, cause, endReleased)
	if cause != nil {
		lk.cause = cause
	}
	lk.mu.Unlock()
	lk.c.untrack(lk)
}
