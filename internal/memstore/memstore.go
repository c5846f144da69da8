// Package memstore is the store of the memory backend: locks shared by
// the clients (Drivers) of one Store in one process, with the semantics of
// the networked backends (TTL expiry, fencing tokens, FIFO hand-off), and
// clients that can be made to crash or pause as a process can. Package
// memory is its public face; package locker's own tests wrap its Driver.
package memstore

import (
	"container/list"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distlock/locker/backend"
)

// Store is a set of locks shared by the Lockers opened on it.
type Store struct {
	mu    sync.Mutex
	keys  map[string]*entry
	fence uint64

	hooks atomic.Pointer[Hooks] // set only by tests
}

// NewStore returns an empty Store.
func NewStore() *Store {
	return &Store{keys: map[string]*entry{}}
}

type entry struct {
	key     string
	owner   *Driver
	token   string
	fence   uint64 // the holder's
	expires time.Time
	timer   *time.Timer
	onLost  func(error)
	waiters list.List // of *waiter, FIFO
}

type waiter struct {
	d       *Driver
	req     backend.Request
	grant   chan backend.Acquisition // buffered 1
	granted bool                     // under Store.mu
}

// Driver is one client of a Store, as a process with its connection is
// for the networked backends.
type Driver struct {
	s       *Store
	crashed atomic.Bool
	closed  atomic.Bool
	down    chan struct{} // closed by Crash or Close
	once    sync.Once

	pauseMu sync.Mutex
	paused  chan struct{} // while paused; closed by Resume
}

var (
	_ backend.Driver = (*Driver)(nil)
	_ backend.Waiter = (*Driver)(nil)
)

// NewDriver returns a new client of s, for locker.New.
func NewDriver(s *Store) *Driver {
	return &Driver{s: s, down: make(chan struct{})}
}

// errCrashed is what a crashed client gets, as a network client gets a
// connection error.
var errCrashed = errors.New("memory: client crashed (simulated): it no longer reaches the store")

// Crash simulates the death of the client's process: every later call
// fails, nothing is released or refreshed, and its locks stay in the
// store until their TTL runs out.
func (d *Driver) Crash() {
	d.crashed.Store(true)
	d.once.Do(func() { close(d.down) })
}

// Pause simulates a process that stops for a while: from now on the
// client's calls wait until Resume (or their context ends, or the client
// crashes or closes), and a grant that reaches a paused waiter is read on
// Resume. Its locks expire in the store meanwhile, as nothing refreshes
// them. Pausing a paused client does nothing.
func (d *Driver) Pause() {
	d.pauseMu.Lock()
	if d.paused == nil {
		d.paused = make(chan struct{})
	}
	d.pauseMu.Unlock()
}

// Resume ends a Pause: the calls that waited go on.
func (d *Driver) Resume() {
	d.pauseMu.Lock()
	if d.paused != nil {
		close(d.paused)
		d.paused = nil
	}
	d.pauseMu.Unlock()
}

// Paused reports whether the client is paused.
func (d *Driver) Paused() bool {
	d.pauseMu.Lock()
	defer d.pauseMu.Unlock()
	return d.paused != nil
}

// enter waits while the client is paused, then reports whether it may
// reach the store.
func (d *Driver) enter(ctx context.Context) error {
	d.pauseMu.Lock()
	p := d.paused
	d.pauseMu.Unlock()
	if p != nil {
		select {
		case <-p:
		case <-ctx.Done():
			return ctx.Err()
		case <-d.down:
		}
	}
	return d.check()
}

func (d *Driver) check() error {
	if d.crashed.Load() {
		return errCrashed
	}
	if d.closed.Load() {
		return backend.ErrClosed
	}
	return nil
}

// Capabilities implements backend.Driver.
func (d *Driver) Capabilities() backend.Capabilities {
	return backend.Capabilities{
		Name:          "memory",
		Fencing:       true,
		FIFO:          true,
		WakeOnRelease: true,
		LossSignal:    true,
		MaxKeyLen:     backend.DefaultMaxKeyLen,
	}
}

// Close implements backend.Driver.
func (d *Driver) Close() error {
	d.closed.Store(true)
	d.once.Do(func() { close(d.down) })
	return nil
}

// TryAcquire implements backend.Driver.
func (d *Driver) TryAcquire(ctx context.Context, req backend.Request) (backend.Acquisition, error) {
	if err := d.enter(ctx); err != nil {
		return backend.Acquisition{}, err
	}
	s := d.s
	s.mu.Lock()
	acq, held, notify := d.grantIfFreeLocked(req)
	var err error
	if held != nil {
		err = &backend.Busy{Remaining: time.Until(held.expires)}
	}
	s.mu.Unlock()
	notify()
	return acq, err
}

// grantIfFreeLocked expires what is due on req.Key and grants the key to
// req if it is free; otherwise it returns the key's entry, which has a
// holder. s.mu is held; notify is to be called once it is released.
func (d *Driver) grantIfFreeLocked(req backend.Request) (acq backend.Acquisition, held *entry, notify func()) {
	s := d.s
	notify = s.expireDueLocked(req.Key)
	if e := s.keys[req.Key]; e != nil && e.owner != nil {
		return backend.Acquisition{}, e, notify
	}
	return s.grantLocked(req.Key, d, req), nil, notify
}

// Acquire implements backend.Waiter: waiters queue per key and each
// release or expiry hands the key to the first of them directly.
func (d *Driver) Acquire(ctx context.Context, req backend.Request) (backend.Acquisition, error) {
	if err := d.enter(ctx); err != nil {
		return backend.Acquisition{}, err
	}
	s := d.s
	s.mu.Lock()
	acq, e, notify := d.grantIfFreeLocked(req)
	if e == nil {
		s.mu.Unlock()
		notify()
		return acq, nil
	}
	w := &waiter{d: d, req: req, grant: make(chan backend.Acquisition, 1)}
	elem := e.waiters.PushBack(w)
	s.mu.Unlock()
	notify()
	if h := s.hooks.Load(); h != nil && h.Queued != nil {
		h.Queued(req.Key)
	}

	var cause error
	select {
	case acq := <-w.grant:
		// A paused client reads the grant once it resumes.
		if err := d.enter(ctx); err != nil {
			return backend.Acquisition{}, d.decline(acq, err)
		}
		return acq, nil
	case <-ctx.Done():
		cause = ctx.Err()
	case <-d.down:
		cause = d.check()
	}
	s.mu.Lock()
	if !w.granted {
		// Leaving the queue leaves nothing behind.
		e.waiters.Remove(elem) // a no-op if a hand-off skipped us already
		s.deleteIfIdleLocked(e)
		s.mu.Unlock()
		return backend.Acquisition{}, cause
	}
	s.mu.Unlock()
	return backend.Acquisition{}, d.decline(<-w.grant, cause)
}

// decline gives back a grant that came as the acquisition gave up with
// cause: it is handed on rather than left to expire, unless the client
// crashed (a crashed client cannot release; the lock expires).
func (d *Driver) decline(acq backend.Acquisition, cause error) error {
	if d.crashed.Load() {
		return cause
	}
	s := d.s
	s.mu.Lock()
	h := acq.Held.(*held)
	if h.ownedLocked() {
		s.handOffLocked(h.e)
	}
	s.mu.Unlock()
	return cause
}

// expireDueLocked expires key if its TTL ran out and its timer has not
// fired yet. The caller calls the returned func after unlocking.
func (s *Store) expireDueLocked(key string) (notify func()) {
	e := s.keys[key]
	if e == nil || e.owner == nil || time.Now().Before(e.expires) {
		return func() {}
	}
	return s.expireLocked(e)
}

// grantLocked makes d the owner of key.
func (s *Store) grantLocked(key string, d *Driver, req backend.Request) backend.Acquisition {
	e := s.keys[key]
	if e == nil {
		e = &entry{key: key}
		s.keys[key] = e
	}
	s.fence++
	e.owner, e.token, e.onLost, e.fence = d, req.Token, req.OnLost, s.fence
	now := time.Now()
	e.expires = now.Add(req.TTL)
	if e.timer == nil {
		e.timer = time.AfterFunc(req.TTL, func() { s.expire(e) })
	} else {
		e.timer.Reset(req.TTL)
	}
	return backend.Acquisition{
		Held:   &held{d: d, e: e, token: req.Token},
		Fence:  s.fence,
		Fenced: true,
		Start:  now,
	}
}

// expire runs when an entry's TTL may have run out.
func (s *Store) expire(e *entry) {
	s.mu.Lock()
	if e.owner == nil {
		s.mu.Unlock()
		return
	}
	if left := time.Until(e.expires); left > 0 { // refreshed meanwhile
		e.timer.Reset(left)
		s.mu.Unlock()
		return
	}
	notify := s.expireLocked(e)
	s.mu.Unlock()
	notify()
}

// expireLocked frees an expired entry; the returned func tells its owner,
// and is called after unlocking.
func (s *Store) expireLocked(e *entry) (notify func()) {
	onLost, owner := e.onLost, e.owner
	s.handOffLocked(e)
	return func() {
		if onLost != nil && !owner.crashed.Load() {
			onLost(errors.New("memory: lock expired"))
		}
	}
}

// handOffLocked frees e and gives it to the first waiter still waiting.
func (s *Store) handOffLocked(e *entry) {
	e.owner, e.token, e.onLost = nil, "", nil
	for front := e.waiters.Front(); front != nil; front = e.waiters.Front() {
		w := e.waiters.Remove(front).(*waiter)
		if w.d.check() != nil {
			continue
		}
		w.granted = true
		w.grant <- s.grantLocked(e.key, w.d, w.req)
		return
	}
	s.deleteIfIdleLocked(e)
}

func (s *Store) deleteIfIdleLocked(e *entry) {
	if e.owner == nil && e.waiters.Len() == 0 {
		if e.timer != nil {
			e.timer.Stop()
		}
		if s.keys[e.key] == e {
			delete(s.keys, e.key)
		}
	}
}

type held struct {
	d     *Driver
	e     *entry
	token string
}

func (h *held) ownedLocked() bool {
	return h.e.owner != nil && h.e.token == h.token && time.Now().Before(h.e.expires)
}

func (h *held) Refresh(ctx context.Context, ttl time.Duration) error {
	if err := h.d.enter(ctx); err != nil {
		return err
	}
	s := h.d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if !h.ownedLocked() {
		return backend.ErrNotHeld
	}
	h.e.expires = time.Now().Add(ttl)
	h.e.timer.Reset(ttl)
	return nil
}

func (h *held) TTL(ctx context.Context) (time.Duration, error) {
	if err := h.d.enter(ctx); err != nil {
		return 0, err
	}
	s := h.d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if !h.ownedLocked() {
		return 0, backend.ErrNotHeld
	}
	return time.Until(h.e.expires), nil
}

func (h *held) Release(ctx context.Context) error {
	if err := h.d.enter(ctx); err != nil {
		return err
	}
	s := h.d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if !h.ownedLocked() {
		return backend.ErrNotHeld
	}
	s.handOffLocked(h.e)
	return nil
}

// Hooks observe a Store from tests. Each runs on the goroutine of its
// event, which waits for it.
type Hooks struct {
	Queued func(key string) // a waiter joined key's queue, on its Acquire's goroutine
}

// SetHooks installs h on s for the rest of the test t, a testing.TB (only
// its Cleanup is used, so that this package need not import testing).
func SetHooks(t interface{ Cleanup(func()) }, s *Store, h Hooks) {
	p := &h
	s.hooks.Store(p)
	t.Cleanup(func() { s.hooks.CompareAndSwap(p, nil) })
}
