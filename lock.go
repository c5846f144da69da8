package locker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/distlock/locker/backend"
)

// defaultDrift is the clock-drift allowance subtracted from a TTL to get
// the local validity, unless the driver is a backend.Drifter: 1% of the TTL
// plus 2 ms, as on the Redis distlock page (server expiry precision plus a
// minimum drift between clocks).
func defaultDrift(ttl time.Duration) time.Duration {
	return ttl/100 + 2*time.Millisecond
}

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

// Causes recorded when a lock stops being held.
var (
	errReleased = errors.New("released")
	errExpired  = errors.New("validity ran out on the local clock without a successful refresh")
)

type lock struct {
	c           *client
	key         string
	token       string
	autoRefresh bool
	lost        chan struct{}

	// Set once by start, before the lock is shared.
	held   backend.Held
	fence  uint64
	fenced bool

	mu           sync.Mutex
	state        lockState
	cause        error
	ttl          time.Duration
	deadline     time.Time // local validity deadline, monotonic clock
	refreshStart time.Time // start of the newest refresh applied

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
	lk.deadline = start.Add(validity)
	lk.refreshStart = start
	if lk.state == stateHeld { // the backend may have reported it lost already
		var due time.Time
		if lk.autoRefresh {
			due = start.Add(lk.ttl / 3)
		}
		lk.c.wd.add(lk, lk.deadline, due)
	}
}

// expire runs at the local validity deadline. A lock still held is lost
// from then on; one whose release failed in transit stays where it is. In
// both cases a driver whose server keeps the lock past its TTL (an
// Expirer) removes it now.
func (lk *lock) expire() {
	lk.mu.Lock()
	if lk.state == stateGone {
		lk.mu.Unlock()
		return
	}
	if time.Until(lk.deadline) > 0 {
		// Refreshed meanwhile: refreshed queued the new deadline, in the
		// same section as it set it.
		lk.mu.Unlock()
		return
	}
	// A refresh due later finds the lock no longer held and is dropped.
	lk.setStateLocked(stateLost, errExpired)
	lk.mu.Unlock()
	if e, ok := lk.held.(backend.Expirer); ok {
		e.Expire()
	}
}

// backendLost is the Request.OnLost callback: the backend knows the lock
// is gone.
func (lk *lock) backendLost(err error) {
	if err == nil {
		err = errors.New("backend reported the lock gone")
	}
	lk.markGone(err)
}

func (lk *lock) markGone(cause error) {
	lk.mu.Lock()
	lk.setStateLocked(stateGone, cause) // out of the watchdog's timetable too
	lk.mu.Unlock()
	lk.c.untrack(lk)
}

// setStateLocked moves the lock to a later state, closing Lost on the way
// out of stateHeld. States only move forward.
func (lk *lock) setStateLocked(s lockState, cause error) {
	if s <= lk.state {
		return
	}
	if lk.state == stateHeld {
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

// notHeld returns ErrNotHeld with the reason the lock stopped being held.
func (lk *lock) notHeldLocked() error {
	if lk.cause == nil || errors.Is(lk.cause, ErrNotHeld) {
		if lk.cause != nil {
			return lk.cause
		}
		return ErrNotHeld
	}
	return fmt.Errorf("%w: %w", ErrNotHeld, lk.cause)
}

func (lk *lock) Key() string           { return lk.key }
func (lk *lock) Token() string         { return lk.token }
func (lk *lock) Lost() <-chan struct{} { return lk.lost }

func (lk *lock) Fence() (uint64, bool) {
	if !lk.fenced {
		return 0, false
	}
	return lk.fence, true
}

func (lk *lock) Refresh(ctx context.Context, ttl time.Duration) error {
	if lk.c.isClosed() {
		return opErr("refresh", lk.key, ErrClosed)
	}
	if err := lk.c.checkTTL(ttl); err != nil {
		return opErr("refresh", lk.key, err)
	}
	if err := lk.refresh(ctx, ttl); err != nil {
		return opErr("refresh", lk.key, err)
	}
	if lk.autoRefresh {
		lk.c.wd.schedule(lk, time.Now().Add(ttl/3))
	}
	return nil
}

// refresh sends one refresh and applies its outcome. It is shared by
// Refresh and the watchdog.
func (lk *lock) refresh(ctx context.Context, ttl time.Duration) error {
	lk.mu.Lock()
	if lk.state != stateHeld {
		err := lk.notHeldLocked()
		lk.mu.Unlock()
		return err
	}
	lk.mu.Unlock()
	start := time.Now()
	err := lk.held.Refresh(ctx, ttl)
	return lk.refreshed(start, ttl, err)
}

// refreshed applies the outcome of a refresh that started at start.
func (lk *lock) refreshed(start time.Time, ttl time.Duration, err error) error {
	if errors.Is(err, ErrNotHeld) {
		lk.markGone(err)
		return err
	}
	if err != nil {
		return err
	}
	lk.mu.Lock()
	defer lk.mu.Unlock()
	if lk.state != stateHeld {
		// The refresh landed, but the validity had already run out here
		// and Lost is closed: the holder was told to stop, so the lock
		// is not revived. Release still deletes it.
		return lk.notHeldLocked()
	}
	if start.Before(lk.refreshStart) {
		return nil // a newer refresh was applied already
	}
	lk.refreshStart = start
	lk.ttl = ttl
	lk.deadline = start.Add(ttl - lk.c.drift(ttl))
	lk.c.wd.expireAt(lk, lk.deadline)
	return nil
}

func (lk *lock) TTL(ctx context.Context) (time.Duration, error) {
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
		lk.markGone(err)
	}
	if err != nil {
		return 0, opErr("ttl", lk.key, err)
	}
	lk.mu.Lock()
	local := time.Until(lk.deadline)
	lk.mu.Unlock()
	if local <= 0 {
		return 0, opErr("ttl", lk.key, fmt.Errorf("%w: %w", ErrNotHeld, errExpired))
	}
	return min(d, local), nil
}

func (lk *lock) Release(ctx context.Context) error {
	if lk.c.isClosed() {
		lk.mu.Lock()
		gone := lk.state == stateGone
		lk.mu.Unlock()
		if !gone {
			return opErr("release", lk.key, ErrClosed)
		}
	}
	return opErr("release", lk.key, lk.release(ctx))
}

func (lk *lock) release(ctx context.Context) error {
	lk.mu.Lock()
	if lk.state == stateGone {
		err := lk.notHeldLocked()
		lk.mu.Unlock()
		return err
	}
	// Lost closes as soon as the holder lets go, before the round trip.
	// The watchdog no longer refreshes it; it leaves the timetable once
	// gone.
	lk.setStateLocked(stateLost, errReleased)
	lk.mu.Unlock()

	err := lk.held.Release(ctx)
	if err == nil || errors.Is(err, ErrNotHeld) {
		cause := err
		if cause == nil {
			cause = errReleased
		}
		lk.markGone(cause)
	}
	return err
}
